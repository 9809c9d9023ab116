// Reference quantisers: float rows -> GGUF blocks. Scalar, careful rather than fast; used by
// the quantiser, the model maker and tests. Error against the source must be no worse than
// the ecosystem's reference quantiser (checked against the fixture).
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace strata::quant {

bool can_quantize(Type t);

// Quantises n values (a whole number of blocks of t) from src into dst (row_bytes(t, n) bytes).
// importance: optional per-value weights (an importance matrix row) of length n; may be null.
// The block types minimise the importance-weighted squared error (plain squared error without).
// Throws strata::Error for an unsupported type, a partial block, a non-finite value (block
// types only; F32/F16/BF16 convert anything) or a negative or non-finite importance.
void quantize_row(Type t, const float* src, void* dst, int64_t n, const float* importance = nullptr);

}  // namespace strata::quant
