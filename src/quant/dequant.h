// Reference dequantisers: plain scalar code, one function per type, that defines each format
// bit for bit (checked against the fixture's .deq tensors). Not the hot path: kernels in cpu/
// are tested against these.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace strata::quant {

// Dequantises n values (a whole number of blocks of t) from src into dst.
// Throws strata::Error for a type without a dequantiser or a partial block.
void dequantize_row(Type t, const void* src, float* dst, int64_t n);

}  // namespace strata::quant
