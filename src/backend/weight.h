// Views of model tensors as the compute code needs them: type, data (in the mmap'd file), shape.
// A Weight never owns memory; the model keeps the file open for as long as it lives. Backends
// compute with them (backend.h), the model binds them (model/architecture.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "quant/types.h"

namespace strata::gguf {
struct TensorInfo;
}

namespace strata::backend {

struct Weight {
    const gguf::TensorInfo* info = nullptr;  // null: absent (optional tensor)
    quant::Type type = quant::Type::F32;
    const uint8_t* data = nullptr;
    std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0]: values per row (contiguous)
    size_t row_bytes = 0;                   // bytes of one ne[0] row

    explicit operator bool() const { return data != nullptr; }
    int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
    // Rows of one 2-D slice: for a 3-D expert tensor [ne0, ne1, n_expert], expert e is ne[1] rows
    // starting at row e * ne[1].
    const uint8_t* slice(int64_t e) const { return data + static_cast<size_t>(e) * static_cast<size_t>(ne[1]) * row_bytes; }
    const std::string& name() const;
};

}  // namespace strata::backend
