// Whole-model quantisation: a GGUF in, the same model with its weights re-encoded by a
// quantisation mix (quant_mix.h) out. Metadata is copied (general.file_type updated); tensors
// are converted row by row on a thread pool and streamed to the output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace strata::model_tools {

struct QuantizeOptions {
    std::string mix;  // "q4_k_m", "q8_0", "iq4_xs", ...
    int threads = 2;
    std::function<void(uint64_t done, uint64_t total, const std::string& tensor)> progress;
};

struct QuantizeReport {
    uint64_t bytes_in = 0, bytes_out = 0;
    size_t tensors = 0, quantized = 0;
};

QuantizeReport quantize_model(const std::filesystem::path& in, const std::filesystem::path& out, const QuantizeOptions& o);

}  // namespace strata::model_tools
