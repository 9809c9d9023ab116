// The body of the float-weight (F32, F16, BF16) and 32-value block (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL, MXFP4) dot kernels, compiled once per instruction-set level by vec_dot_legacy_avx2.cpp
// and vec_dot_legacy_avx512.cpp against that level's SIMD layer S (simd_avx2.h, simd_avx512.h).
// Everything is in an unnamed namespace, so each level gets its own copy.
//
// Up to S::kMaxCols activation columns per pass over a weight row: the weight side (loads,
// nibble unpacking, table lookups, |w|) is done once per block and shared by the columns.
//   Float rows: S::kFloats values per vector against f32 activations (F16/BF16 widened exactly,
//   so a bf16 model computes like its f32 reference; bf16-rounded activations cost ~1e-3 in
//   logits).
//   32-value blocks x 8-bit activations: one block per 256-bit register at every level (the
//   blocks are 18..34 bytes apart, so 512-bit registers would need two loads per operand anyway),
//   32 int8 products summed in fours by S::dot_u8x32 (maddubs + madd; VNNI vpdpbusd on AVX-512).
//   Signed weights move their sign onto the activations; unsigned ones (Q4_1, Q5_1) multiply as
//   they are and add their min times the activation block's sum, which their Q8_1 activations
//   carry (s = d * sum q).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <vector>

#include "cpu/kernel_registry.h"
#include "cpu/simd_tile.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

// Independent accumulation chains per column (to hide FMA latency). Fixed, not chosen by the
// number of columns: a column's sum must come out bit-identical whatever its batch holds.
constexpr int kFloatLanes = 2;
constexpr int kBlockLanes = 2;

// ---- float weights ----------------------------------------------------------------------------

inline float bf16_one(const uint8_t* p) {
    const uint32_t bits = static_cast<uint32_t>(load_u16(p)) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Weight loaders: S::kFloats values at element index i -> f32, and one value.
template <class S>
struct F32W {
    static typename S::F load(const uint8_t* w, int64_t i) { return S::load(reinterpret_cast<const float*>(w) + i); }
    static float one(const uint8_t* w, int64_t i) { return load_f32(w + 4 * i); }
};
template <class S>
struct F16W {
    static typename S::F load(const uint8_t* w, int64_t i) { return S::load_f16(w + 2 * i); }
    static float one(const uint8_t* w, int64_t i) { return load_f16(w + 2 * i); }
};
template <class S>
struct BF16W {
    static typename S::F load(const uint8_t* w, int64_t i) { return S::load_bf16(w + 2 * i); }
    static float one(const uint8_t* w, int64_t i) { return bf16_one(w + 2 * i); }
};
// Activations of float weights: f32 rows.
template <class S>
using F32A = F32W<S>;

// Float rows: kFloatLanes vectors per step, one accumulator each per column.
template <class S, class W, class A>
struct FloatDot {
    int64_t n;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        constexpr int U = kFloatLanes;
        constexpr int64_t kF = S::kFloats;
        typename S::F acc[NC][U];
        for (int c = 0; c < NC; ++c)
            for (int u = 0; u < U; ++u) acc[c][u] = S::zero();
        int64_t i = 0;
        for (; i + kF * U <= n; i += kF * U) {
            for (int u = 0; u < U; ++u) {
                const typename S::F wv = W::load(w, i + kF * u);
                for (int c = 0; c < NC; ++c) acc[c][u] = S::fmadd(wv, A::load(a[c], i + kF * u), acc[c][u]);
            }
        }
        for (; i + kF <= n; i += kF) {
            const typename S::F wv = W::load(w, i);
            for (int c = 0; c < NC; ++c) acc[c][0] = S::fmadd(wv, A::load(a[c], i), acc[c][0]);
        }
        for (int c = 0; c < NC; ++c) {
            typename S::F s = acc[c][0];
            for (int u = 1; u < U; ++u) s = S::add(s, acc[c][u]);
            float tail = 0.0f;
            for (int64_t j = i; j < n; ++j) tail += W::one(w, j) * A::one(a[c], j);
            out[c] = S::hsum(s) + tail;
        }
    }
};

// Two weight rows per pass for several columns (batched decode): each activation vector is
// loaded once for both rows, so a step is 2 weight + NC activation loads for 2 * NC FMAs.
template <class S, class W, class A>
struct FloatDot2 {
    int64_t n;
    template <int NC>
    void operator()(const uint8_t* w0, const uint8_t* w1, const uint8_t* const* a, float* out0, float* out1) const {
        // The same accumulation order as FloatDot (kFloatLanes chains), so a column's result
        // does not depend on which kernel computed it.
        constexpr int64_t kF = S::kFloats;
        typename S::F acc0[NC][kFloatLanes], acc1[NC][kFloatLanes];
        for (int c = 0; c < NC; ++c)
            for (int u = 0; u < kFloatLanes; ++u) acc0[c][u] = acc1[c][u] = S::zero();
        int64_t i = 0;
        const auto step = [&](int64_t at, int u) {
            const typename S::F x0 = W::load(w0, at), x1 = W::load(w1, at);
            for (int c = 0; c < NC; ++c) {
                const typename S::F av = A::load(a[c], at);
                acc0[c][u] = S::fmadd(x0, av, acc0[c][u]);
                acc1[c][u] = S::fmadd(x1, av, acc1[c][u]);
            }
        };
        for (; i + kF * kFloatLanes <= n; i += kF * kFloatLanes)
            for (int u = 0; u < kFloatLanes; ++u) step(i + kF * u, u);
        for (; i + kF <= n; i += kF) step(i, 0);
        for (int c = 0; c < NC; ++c) {
            float t0 = 0.0f, t1 = 0.0f;
            for (int64_t j = i; j < n; ++j) {
                const float av = A::one(a[c], j);
                t0 += W::one(w0, j) * av;
                t1 += W::one(w1, j) * av;
            }
            typename S::F s0 = acc0[c][0], s1 = acc1[c][0];
            for (int u = 1; u < kFloatLanes; ++u) {
                s0 = S::add(s0, acc0[c][u]);
                s1 = S::add(s1, acc1[c][u]);
            }
            out0[c] = S::hsum(s0) + t0;
            out1[c] = S::hsum(s1) + t1;
        }
    }
};

template <class S, class W, class A>
void dot_float(const DotTile& t) {
    if (t.cols >= 2) {
        run_tile_pairs<S::kMaxCols>(t, FloatDot<S, W, A>{t.n}, FloatDot2<S, W, A>{t.n});
    } else {
        run_tile<S::kMaxCols>(t, FloatDot<S, W, A>{t.n});
    }
}

// ---- 32-value blocks x 8-bit activations --------------------------------------------------------

// Activation blocks: Q8_0 (f16 scale) for the symmetric weight types, Q8_1 (f32 scale and the
// block's scaled sum) for the ones with a min.
struct Q8_0A {
    static constexpr size_t kBytes = sizeof(BlockQ8_0);
    static constexpr size_t kQs = offsetof(BlockQ8_0, qs);
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ8_0, d)); }
};
struct Q8_1A {
    static constexpr size_t kBytes = sizeof(BlockQ8_1Act);
    static constexpr size_t kQs = offsetof(BlockQ8_1Act, qs);
    static float scale(const uint8_t* blk) { return load_f32(blk + offsetof(BlockQ8_1Act, d)); }
    static float sum(const uint8_t* blk) { return load_f32(blk + offsetof(BlockQ8_1Act, s)); }
};

// Each weight decoder turns block b into 32 int8 in Q8_0 value order (signed, or unsigned with
// kMin: value = scale * q + min), with its f32 scale (and min) and its activation format Act.
struct Q8_0W {
    using Act = Q8_0A;
    static constexpr size_t kBytes = sizeof(BlockQ8_0);
    static constexpr bool kMin = false;
    static __m256i values(const uint8_t* blk) { return loadu256(blk + offsetof(BlockQ8_0, qs)); }
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ8_0, d)); }
};
struct Q4_0W {
    using Act = Q8_0A;
    static constexpr size_t kBytes = sizeof(BlockQ4_0);
    static constexpr bool kMin = false;
    static __m256i values(const uint8_t* blk) {
        return _mm256_sub_epi8(nibbles_lo_hi(blk + offsetof(BlockQ4_0, qs)), _mm256_set1_epi8(8));
    }
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ4_0, d)); }
};
struct Q4_1W {
    using Act = Q8_1A;
    static constexpr size_t kBytes = sizeof(BlockQ4_1);
    static constexpr bool kMin = true;
    static __m256i values(const uint8_t* blk) { return nibbles_lo_hi(blk + offsetof(BlockQ4_1, qs)); }
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ4_1, d)); }
    static float min(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ4_1, m)); }
};
// Q5_0 / Q5_1: the nibbles plus bit i of the little-endian u32 qh as bit 4 of value i.
template <class S>
struct Q5_0W {
    using Act = Q8_0A;
    static constexpr size_t kBytes = sizeof(BlockQ5_0);
    static constexpr bool kMin = false;
    static __m256i values(const uint8_t* blk) {
        // q - 16 = the nibble where the fifth bit is set, nibble | 0xf0 (as int8) where it is not.
        const __m256i high = S::bytes_from_bits(load_u32(blk + offsetof(BlockQ5_0, qh)));
        return _mm256_or_si256(nibbles_lo_hi(blk + offsetof(BlockQ5_0, qs)),
                               _mm256_andnot_si256(high, _mm256_set1_epi8(static_cast<char>(0xf0))));
    }
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ5_0, d)); }
};
template <class S>
struct Q5_1W {
    using Act = Q8_1A;
    static constexpr size_t kBytes = sizeof(BlockQ5_1);
    static constexpr bool kMin = true;
    static __m256i values(const uint8_t* blk) {
        const __m256i high = S::bytes_from_bits(load_u32(blk + offsetof(BlockQ5_1, qh)));
        return _mm256_or_si256(nibbles_lo_hi(blk + offsetof(BlockQ5_1, qs)), _mm256_and_si256(high, _mm256_set1_epi8(0x10)));
    }
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ5_1, d)); }
    static float min(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ5_1, m)); }
};
struct IQ4_NLW {
    using Act = Q8_0A;
    static constexpr size_t kBytes = sizeof(BlockIQ4_NL);
    static constexpr bool kMin = false;
    static __m256i values(const uint8_t* blk) { return nibbles_lookup(blk + offsetof(BlockIQ4_NL, qs), loadu128(kIq4NlValues)); }
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockIQ4_NL, d)); }
};
struct MXFP4W {
    using Act = Q8_0A;
    static constexpr size_t kBytes = sizeof(BlockMXFP4);
    static constexpr bool kMin = false;
    static __m256i values(const uint8_t* blk) {
        return nibbles_lookup(blk + offsetof(BlockMXFP4, qs), loadu128(kMxfp4DoubledValues));
    }
    static float scale(const uint8_t* blk) {  // E8M0 -> 2^(e - 128) (the code table is doubled)
        const uint8_t e = blk[offsetof(BlockMXFP4, e)];
        const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
    }
};

// One weight block against one activation block: the int32 products (8 lanes). Signed weights
// give their sign to the activations (|w| <= 128 as unsigned, a is never -128).
template <class S, class W>
static inline __m256i block_products(__m256i qw, __m256i qw_u8, const uint8_t* ab) {
    const __m256i qa = loadu256(ab + W::Act::kQs);
    if constexpr (W::kMin) return S::dot_u8x32(qw, qa);
    return S::dot_u8x32(qw_u8, _mm256_sign_epi8(qa, qw));
}

template <class W>
static inline __m256i block_u8(__m256i qw) {
    if constexpr (W::kMin) return qw;
    return _mm256_sign_epi8(qw, qw);
}

// A block's work is short (one 32-byte product per column), so with few columns the f32
// accumulation chain (one FMA per block, 4-cycle latency) would be the limit: U independent
// accumulators per column, blocks taken round-robin. The min terms (kMin) are scalar FMAs in
// chains of their own, added after the vector sum.
template <class S, class W>
struct Block32Dot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using A = typename W::Act;
        constexpr int U = kBlockLanes;
        __m256 acc[NC][U];
        float acc_min[NC][U];
        for (int c = 0; c < NC; ++c)
            for (int u = 0; u < U; ++u) {
                acc[c][u] = _mm256_setzero_ps();
                acc_min[c][u] = 0.0f;
            }
        const auto block = [&](int64_t b, int u) {
            const uint8_t* blk = w + b * W::kBytes;
            const __m256i qw = W::values(blk);
            const __m256i qw_u8 = block_u8<W>(qw);
            const float dw = W::scale(blk);
            float mw = 0.0f;
            if constexpr (W::kMin) mw = W::min(blk);
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * A::kBytes;
                const __m256i sum32 = block_products<S, W>(qw, qw_u8, ab);
                const __m256 d = _mm256_set1_ps(dw * A::scale(ab));
                acc[c][u] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum32), acc[c][u]);
                if constexpr (W::kMin) acc_min[c][u] = std::fma(mw, A::sum(ab), acc_min[c][u]);
            }
        };
        int64_t b = 0;
        for (; b + U <= n_blocks; b += U)
            for (int u = 0; u < U; ++u) block(b + u, u);
        for (; b < n_blocks; ++b) block(b, 0);
        for (int c = 0; c < NC; ++c) {
            __m256 s = acc[c][0];
            for (int u = 1; u < U; ++u) s = _mm256_add_ps(s, acc[c][u]);
            out[c] = hsum_ps(s);
            if constexpr (W::kMin) {
                float m = acc_min[c][0];
                for (int u = 1; u < U; ++u) m += acc_min[c][u];
                out[c] += m;
            }
        }
    }
};

// Two weight rows x up to S::kMaxCols columns: each activation block is loaded, and its scale
// converted, once for both rows. Used when there are several columns (batched decode); one
// column is cheaper per row with Block32Dot's independent accumulators.
template <class S, class W>
struct Block32Dot2 {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w0, const uint8_t* w1, const uint8_t* const* a, float* out0, float* out1) const {
        using A = typename W::Act;
        // Block b goes to chain (b % kBlockLanes) except a tail, as in Block32Dot: the same sums
        // in the same order, so a column's result does not depend on the kernel.
        __m256 acc0[NC][kBlockLanes], acc1[NC][kBlockLanes];
        float min0[NC][kBlockLanes], min1[NC][kBlockLanes];
        for (int c = 0; c < NC; ++c)
            for (int u = 0; u < kBlockLanes; ++u) {
                acc0[c][u] = acc1[c][u] = _mm256_setzero_ps();
                min0[c][u] = min1[c][u] = 0.0f;
            }
        const int64_t full = n_blocks / kBlockLanes * kBlockLanes;
        for (int64_t b = 0; b < n_blocks; ++b) {
            const int u = b < full ? static_cast<int>(b % kBlockLanes) : 0;
            const uint8_t* blk0 = w0 + b * W::kBytes;
            const uint8_t* blk1 = w1 + b * W::kBytes;
            const __m256i q0 = W::values(blk0), q1 = W::values(blk1);
            const __m256i q0_u8 = block_u8<W>(q0), q1_u8 = block_u8<W>(q1);
            const float d0 = W::scale(blk0), d1 = W::scale(blk1);
            float m0 = 0.0f, m1 = 0.0f;
            if constexpr (W::kMin) {
                m0 = W::min(blk0);
                m1 = W::min(blk1);
            }
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * A::kBytes;
                const float da = A::scale(ab);
                const __m256i s0 = block_products<S, W>(q0, q0_u8, ab);
                const __m256i s1 = block_products<S, W>(q1, q1_u8, ab);
                acc0[c][u] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * da), _mm256_cvtepi32_ps(s0), acc0[c][u]);
                acc1[c][u] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * da), _mm256_cvtepi32_ps(s1), acc1[c][u]);
                if constexpr (W::kMin) {
                    const float sa = A::sum(ab);
                    min0[c][u] = std::fma(m0, sa, min0[c][u]);
                    min1[c][u] = std::fma(m1, sa, min1[c][u]);
                }
            }
        }
        for (int c = 0; c < NC; ++c) {
            __m256 s0 = acc0[c][0], s1 = acc1[c][0];
            for (int u = 1; u < kBlockLanes; ++u) {
                s0 = _mm256_add_ps(s0, acc0[c][u]);
                s1 = _mm256_add_ps(s1, acc1[c][u]);
            }
            out0[c] = hsum_ps(s0);
            out1[c] = hsum_ps(s1);
            if constexpr (W::kMin) {
                float t0 = min0[c][0], t1 = min1[c][0];
                for (int u = 1; u < kBlockLanes; ++u) {
                    t0 += min0[c][u];
                    t1 += min1[c][u];
                }
                out0[c] += t0;
                out1[c] += t1;
            }
        }
    }
};

// Block32Dot2 at 512 bits (AVX-512, the signed types): blocks b and b + 1 side by side in one
// register, lanes 0-7 block b (chain 0) and 8-15 block b + 1 (chain 1), so every lane does
// exactly the float operations of Block32Dot2's 256-bit chains and a column's bits do not
// change; an odd last block goes to chain 0 in 256 bits, as there. Per column and block pair:
// the activations joined (two loads), their two scales spread from `scales` (the tile's
// activation block scales as f32, made once per tile call), and per row a masked negate (the
// weight's sign onto the activations: |w| x (w < 0 ? -a : a) = w x a, as vpsignb gives), one
// vpdpbusd, one conversion, one scale product and one FMA: half the instructions of two 256-bit
// blocks (bench_gemv: Q8_0 at 8 columns, ~1.x the 256-bit kernel's rate).
template <class S, class W>
struct Block32Dot2Wide {
    int64_t n_blocks;
    const uint8_t* const* a_base;  // the tile's activation rows: column of `a` = a - a_base
    const float* scales;           // [column][n_blocks] activation block scales

    template <int NC>
    void operator()(const uint8_t* w0, const uint8_t* w1, const uint8_t* const* a, float* out0, float* out1) const {
        using A = typename W::Act;
        const float* sc[NC];
        for (int c = 0; c < NC; ++c) sc[c] = scales + (a - a_base + c) * n_blocks;
        __m512 acc0[NC], acc1[NC];
        for (int c = 0; c < NC; ++c) acc0[c] = acc1[c] = _mm512_setzero_ps();
        const __m512i zero = _mm512_setzero_si512();
        const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        const int64_t full = n_blocks / kBlockLanes * kBlockLanes;
        static_assert(kBlockLanes == 2, "two chains: one 512-bit register per block pair");
        for (int64_t b = 0; b < full; b += 2) {
            const uint8_t* x0 = w0 + b * W::kBytes;
            const uint8_t* x1 = w1 + b * W::kBytes;
            const __m512i q0 = join256(W::values(x0), W::values(x0 + W::kBytes));
            const __m512i q1 = join256(W::values(x1), W::values(x1 + W::kBytes));
            const __mmask64 neg0 = _mm512_movepi8_mask(q0), neg1 = _mm512_movepi8_mask(q1);
            const __m512i u0 = _mm512_abs_epi8(q0), u1 = _mm512_abs_epi8(q1);
            const __m512 d0 = join256_ps(_mm256_set1_ps(W::scale(x0)), _mm256_set1_ps(W::scale(x0 + W::kBytes)));
            const __m512 d1 = join256_ps(_mm256_set1_ps(W::scale(x1)), _mm256_set1_ps(W::scale(x1 + W::kBytes)));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * A::kBytes;
                const __m512i qa = join256(loadu256(ab + A::kQs), loadu256(ab + A::kBytes + A::kQs));
                const __m512 da = _mm512_permutexvar_ps(
                    spread,
                    _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc[c] + b)))));
                const __m512i s0 = _mm512_dpbusd_epi32(zero, u0, _mm512_mask_sub_epi8(qa, neg0, zero, qa));
                const __m512i s1 = _mm512_dpbusd_epi32(zero, u1, _mm512_mask_sub_epi8(qa, neg1, zero, qa));
                acc0[c] = _mm512_fmadd_ps(_mm512_mul_ps(d0, da), _mm512_cvtepi32_ps(s0), acc0[c]);
                acc1[c] = _mm512_fmadd_ps(_mm512_mul_ps(d1, da), _mm512_cvtepi32_ps(s1), acc1[c]);
            }
        }
        for (int c = 0; c < NC; ++c) {
            __m256 r0 = lo256_ps(acc0[c]), r1 = lo256_ps(acc1[c]);  // chain 0; chain 1 is the high half
            if (full < n_blocks) {
                const uint8_t* blk0 = w0 + full * W::kBytes;
                const uint8_t* blk1 = w1 + full * W::kBytes;
                const __m256i qw0 = W::values(blk0), qw1 = W::values(blk1);
                const uint8_t* ab = a[c] + full * A::kBytes;
                const float da = sc[c][full];
                const __m256i s0 = block_products<S, W>(qw0, block_u8<W>(qw0), ab);
                const __m256i s1 = block_products<S, W>(qw1, block_u8<W>(qw1), ab);
                r0 = _mm256_fmadd_ps(_mm256_set1_ps(W::scale(blk0) * da), _mm256_cvtepi32_ps(s0), r0);
                r1 = _mm256_fmadd_ps(_mm256_set1_ps(W::scale(blk1) * da), _mm256_cvtepi32_ps(s1), r1);
            }
            out0[c] = hsum_ps(_mm256_add_ps(r0, hi256_ps(acc0[c])));
            out1[c] = hsum_ps(_mm256_add_ps(r1, hi256_ps(acc1[c])));
        }
    }
};

// The batch kernel in a function of its own, so the one-column loop's code is what it was
// (GCC's register choices over a function holding both loops slowed it).
template <class S, class W>
__attribute__((noinline)) void dot_block32_wide(const DotTile& t) {
    const int64_t n_blocks = t.n / 32;
    thread_local std::vector<float> scales;
    scales.resize(static_cast<size_t>(t.cols * n_blocks));
    for (int64_t c = 0; c < t.cols; ++c)
        for (int64_t b = 0; b < n_blocks; ++b)
            scales[static_cast<size_t>(c * n_blocks + b)] = W::Act::scale(t.a[c] + b * W::Act::kBytes);
    run_tile_pairs<S::kMaxCols>(t, Block32Dot<S, W>{n_blocks}, Block32Dot2Wide<S, W>{n_blocks, t.a, scales.data()});
}

template <class S, class W>
__attribute__((noinline)) void dot_block32_one(const DotTile& t) {
    run_tile<S::kMaxCols>(t, Block32Dot<S, W>{t.n / 32});
}

template <class S, class W>
void dot_block32(const DotTile& t) {
    if constexpr (S::kFloats == 16 && !W::kMin) {
        if (t.cols >= 2) return dot_block32_wide<S, W>(t);
    }
    if (t.cols >= 2) {
        run_tile_pairs<S::kMaxCols>(t, Block32Dot<S, W>{t.n / 32}, Block32Dot2<S, W>{t.n / 32});
    } else {
        dot_block32_one<S, W>(t);
    }
}

template <class S>
constexpr DotKernelEntry kLegacyDots[] = {
    {Type::F32, dot_float<S, F32W<S>, F32A<S>>, false},   {Type::F16, dot_float<S, F16W<S>, F32A<S>>, false},
    {Type::BF16, dot_float<S, BF16W<S>, F32A<S>>, false}, {Type::Q8_0, dot_block32<S, Q8_0W>, false},
    {Type::Q4_0, dot_block32<S, Q4_0W>, false},           {Type::Q4_1, dot_block32<S, Q4_1W>, false},
    {Type::Q5_0, dot_block32<S, Q5_0W<S>>, false},        {Type::Q5_1, dot_block32<S, Q5_1W<S>>, false},
    {Type::IQ4_NL, dot_block32<S, IQ4_NLW>, false},       {Type::MXFP4, dot_block32<S, MXFP4W>, false},
};

// The level's table (kernel_registry.h): constant data, so nothing compiled for the level runs
// before the CPU has been checked.
template <class S>
constexpr KernelTable kLegacyTable = {kLegacyDots<S>, std::size(kLegacyDots<S>), nullptr, 0};

}  // namespace
}  // namespace strata::cpu
