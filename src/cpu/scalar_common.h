// Internal helpers of the scalar reference kernels (baseline files only: the inline functions
// here must not be compiled into *_avx2.cpp / *_avx512.cpp files, where the linker could pick a
// copy built for a wider instruction set).
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/kernels.h"

namespace strata::cpu::scalar {

// Reads block b of type T from a byte row (rows need not be aligned).
template <class T>
inline T block_at(const uint8_t* row, int64_t b) {
    T blk;
    std::memcpy(&blk, row + b * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return blk;
}

using RowDot = float (*)(int64_t n, const uint8_t* w, const uint8_t* a);

// A DotFn from a one-row, one-column dot product.
template <RowDot F>
void tile(const DotTile& t) {
    for (int64_t r = 0; r < t.rows; ++r) {
        const uint8_t* w = t.w + static_cast<size_t>(r) * t.w_stride;
        for (int64_t c = 0; c < t.cols; ++c) t.y[c][r] = F(t.n, w, t.a[c]);
    }
}

// +1 / -1 for value j of an IQ2/IQ3 sign mask (bit j set = negative).
inline int sign_of(uint8_t mask, int j) { return (mask >> j) & 1 ? -1 : 1; }

}  // namespace strata::cpu::scalar
