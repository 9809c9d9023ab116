// Internal: the loop shared by the SIMD kernel files. A kernel supplies a row function
//   fn.template operator()<NC>(const uint8_t* w_row, const uint8_t* const* a, float* out)
// that dots one weight row with NC activation rows (NC = 1..MaxCols) in a single pass over the
// row; run_tile goes over the rows of the tile and over the columns in groups of MaxCols, so a
// weight row is fetched from memory once and re-read from L1 for the later groups.
//
// Everything here is `static` so that each *_avx2.cpp / *_avx512.cpp file gets its own copy
// compiled for its own instruction set (no inline function shared between levels).
#pragma once

#include <cstdint>

#include "cpu/kernels.h"

namespace strata::cpu::detail {

template <int NC, class Fn>
static inline __attribute__((always_inline)) void tile_cols(const Fn& fn, const uint8_t* w, const DotTile& t, int64_t c,
                                                            int64_t r) {
    float out[NC];
    fn.template operator()<NC>(w, t.a + c, out);
    for (int j = 0; j < NC; ++j) t.y[c + j][r] = out[j];
}

template <int NC, class Fn>
static inline __attribute__((always_inline)) void tile_rest(const Fn& fn, const uint8_t* w, const DotTile& t, int64_t c,
                                                            int64_t r, int64_t rest) {
    if constexpr (NC > 0) {
        if (rest == NC) {
            tile_cols<NC>(fn, w, t, c, r);
        } else {
            tile_rest<NC - 1>(fn, w, t, c, r, rest);
        }
    }
}

// Software prefetch of the weight row kPrefetchRows ahead: at batch 1 a decode step streams
// every row once from memory, and asking for the next rows early keeps more reads in flight
// than the hardware prefetcher does on its own across row boundaries.
constexpr int64_t kPrefetchRows = 2;

static inline __attribute__((always_inline)) void prefetch_row(const DotTile& t, int64_t r) {
    if (r >= t.rows) return;
    const uint8_t* p = t.w + static_cast<size_t>(r) * t.w_stride;
    for (size_t off = 0; off < t.w_stride; off += 64) __builtin_prefetch(p + off, 0, 3);
}

template <int MaxCols, class Fn>
static inline __attribute__((always_inline)) void run_tile(const DotTile& t, const Fn& fn) {
    for (int64_t r = 0; r < kPrefetchRows; ++r) prefetch_row(t, r);
    for (int64_t r = 0; r < t.rows; ++r) {
        prefetch_row(t, r + kPrefetchRows);
        const uint8_t* w = t.w + static_cast<size_t>(r) * t.w_stride;
        int64_t c = 0;
        for (; c + MaxCols <= t.cols; c += MaxCols) tile_cols<MaxCols>(fn, w, t, c, r);
        if (c < t.cols) tile_rest<MaxCols - 1>(fn, w, t, c, r, t.cols - c);
    }
}

// Two weight rows per pass (for kernels whose per-column work can be shared by two rows):
// two.template operator()<NC>(w0, w1, a, out0, out1); an odd last row goes to `one`.
template <int NC, class Fn>
static inline __attribute__((always_inline)) void tile_cols2(const Fn& fn, const uint8_t* w0, const uint8_t* w1, const DotTile& t,
                                                             int64_t c, int64_t r) {
    float out0[NC], out1[NC];
    fn.template operator()<NC>(w0, w1, t.a + c, out0, out1);
    for (int j = 0; j < NC; ++j) {
        t.y[c + j][r] = out0[j];
        t.y[c + j][r + 1] = out1[j];
    }
}

template <int NC, class Fn>
static inline __attribute__((always_inline)) void tile_rest2(const Fn& fn, const uint8_t* w0, const uint8_t* w1, const DotTile& t,
                                                             int64_t c, int64_t r, int64_t rest) {
    if constexpr (NC > 0) {
        if (rest == NC) {
            tile_cols2<NC>(fn, w0, w1, t, c, r);
        } else {
            tile_rest2<NC - 1>(fn, w0, w1, t, c, r, rest);
        }
    }
}

template <int MaxCols, class Fn1, class Fn2>
static inline __attribute__((always_inline)) void run_tile_pairs(const DotTile& t, const Fn1& one, const Fn2& two) {
    int64_t r = 0;
    for (int64_t p = 0; p < kPrefetchRows + 2; ++p) prefetch_row(t, p);
    for (; r + 2 <= t.rows; r += 2) {
        prefetch_row(t, r + 2 + kPrefetchRows);
        prefetch_row(t, r + 3 + kPrefetchRows);
        const uint8_t* w0 = t.w + static_cast<size_t>(r) * t.w_stride;
        const uint8_t* w1 = w0 + t.w_stride;
        int64_t c = 0;
        for (; c + MaxCols <= t.cols; c += MaxCols) tile_cols2<MaxCols>(two, w0, w1, t, c, r);
        if (c < t.cols) tile_rest2<MaxCols - 1>(two, w0, w1, t, c, r, t.cols - c);
    }
    if (r < t.rows) {
        const uint8_t* w = t.w + static_cast<size_t>(r) * t.w_stride;
        int64_t c = 0;
        for (; c + MaxCols <= t.cols; c += MaxCols) tile_cols<MaxCols>(one, w, t, c, r);
        if (c < t.cols) tile_rest<MaxCols - 1>(one, w, t, c, r, t.cols - c);
    }
}

}  // namespace strata::cpu::detail
