// AVX-512 kernels for float weights (F32, F16, BF16) and the 32-value block types with Q8_0
// activations (Q8_0, Q4_0, IQ4_NL, MXFP4). Up to 8 activation columns per pass over a weight row
// (32 vector registers).
//
// Float rows use 512-bit FMA against f32 activations; BF16 rows are widened to f32 (exact) so
// a bf16 model computes like its f32 reference (bf16-rounded activations cost ~1e-3 in logits).
// The 32-value blocks keep one block per 256-bit register (the blocks are 18..34 bytes apart, so
// 512-bit registers would need two loads per operand anyway) and use VNNI vpdpbusd for the
// products: one instruction instead of maddubs + madd.
// GCC 12 reports the undefined pass-through operand of its own AVX-512 intrinsics (extract,
// shuffle) as uninitialized once they are inlined into the 2-D accumulator loops below: a false
// positive in the compiler's headers, silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cstddef>

#include "cpu/kernel_registry.h"
#include "cpu/simd_avx512.h"
#include "cpu/simd_tile.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

constexpr int kMaxCols = 8;
// Independent accumulation chains per column (to hide FMA latency). Fixed, not chosen by the
// number of columns: a column's sum must come out bit-identical whatever its batch holds.
constexpr int kFloatLanes = 2;
constexpr int kBlockLanes = 2;

static inline float bf16_one(const uint8_t* p) {
    const uint32_t bits = static_cast<uint32_t>(load_u16(p)) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// ---- float weights ----------------------------------------------------------------------------

struct F32W {
    static __m512 load(const uint8_t* w, int64_t i) { return _mm512_loadu_ps(w + 4 * i); }
    static float one(const uint8_t* w, int64_t i) { return load_f32(w + 4 * i); }
};
struct F16W {
    static __m512 load(const uint8_t* w, int64_t i) { return f16x16_to_ps(w + 2 * i); }
    static float one(const uint8_t* w, int64_t i) { return load_f16(w + 2 * i); }
};
struct BF16W {
    static __m512 load(const uint8_t* w, int64_t i) { return bf16x16_to_ps(w + 2 * i); }
    static float one(const uint8_t* w, int64_t i) { return bf16_one(w + 2 * i); }
};
struct F32A {
    static __m512 load(const uint8_t* a, int64_t i) { return _mm512_loadu_ps(a + 4 * i); }
    static float one(const uint8_t* a, int64_t i) { return load_f32(a + 4 * i); }
};

// 16 values per vector, U vectors per step, U accumulators per column.
template <class W, class A>
struct FloatDot {
    int64_t n;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        constexpr int U = kFloatLanes;
        __m512 acc[NC][U];
        for (int c = 0; c < NC; ++c)
            for (int u = 0; u < U; ++u) acc[c][u] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 16 * U <= n; i += 16 * U) {
            for (int u = 0; u < U; ++u) {
                const __m512 wv = W::load(w, i + 16 * u);
                for (int c = 0; c < NC; ++c) acc[c][u] = _mm512_fmadd_ps(wv, A::load(a[c], i + 16 * u), acc[c][u]);
            }
        }
        for (; i + 16 <= n; i += 16) {
            const __m512 wv = W::load(w, i);
            for (int c = 0; c < NC; ++c) acc[c][0] = _mm512_fmadd_ps(wv, A::load(a[c], i), acc[c][0]);
        }
        for (int c = 0; c < NC; ++c) {
            __m512 s = acc[c][0];
            for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[c][u]);
            float tail = 0.0f;
            for (int64_t j = i; j < n; ++j) tail += W::one(w, j) * A::one(a[c], j);
            out[c] = hsum512_ps(s) + tail;
        }
    }
};

// Two weight rows per pass for several columns (batched decode): each activation vector is
// loaded once for both rows, so a step is 2 weight + NC activation loads for 2 * NC FMAs.
template <class W, class A>
struct FloatDot2 {
    int64_t n;
    template <int NC>
    void operator()(const uint8_t* w0, const uint8_t* w1, const uint8_t* const* a, float* out0, float* out1) const {
        // The same accumulation order as FloatDot (kFloatLanes chains), so a column's result
        // does not depend on which kernel computed it.
        __m512 acc0[NC][kFloatLanes], acc1[NC][kFloatLanes];
        for (int c = 0; c < NC; ++c)
            for (int u = 0; u < kFloatLanes; ++u) acc0[c][u] = acc1[c][u] = _mm512_setzero_ps();
        int64_t i = 0;
        const auto step = [&](int64_t at, int u) {
            const __m512 x0 = W::load(w0, at), x1 = W::load(w1, at);
            for (int c = 0; c < NC; ++c) {
                const __m512 av = A::load(a[c], at);
                acc0[c][u] = _mm512_fmadd_ps(x0, av, acc0[c][u]);
                acc1[c][u] = _mm512_fmadd_ps(x1, av, acc1[c][u]);
            }
        };
        for (; i + 16 * kFloatLanes <= n; i += 16 * kFloatLanes)
            for (int u = 0; u < kFloatLanes; ++u) step(i + 16 * u, u);
        for (; i + 16 <= n; i += 16) step(i, 0);
        for (int c = 0; c < NC; ++c) {
            float t0 = 0.0f, t1 = 0.0f;
            for (int64_t j = i; j < n; ++j) {
                const float av = A::one(a[c], j);
                t0 += W::one(w0, j) * av;
                t1 += W::one(w1, j) * av;
            }
            __m512 s0 = acc0[c][0], s1 = acc1[c][0];
            for (int u = 1; u < kFloatLanes; ++u) {
                s0 = _mm512_add_ps(s0, acc0[c][u]);
                s1 = _mm512_add_ps(s1, acc1[c][u]);
            }
            out0[c] = hsum512_ps(s0) + t0;
            out1[c] = hsum512_ps(s1) + t1;
        }
    }
};

template <class W, class A>
void dot_float(const DotTile& t) {
    if (t.cols >= 2) {
        run_tile_pairs<kMaxCols>(t, FloatDot<W, A>{t.n}, FloatDot2<W, A>{t.n});
    } else {
        run_tile<kMaxCols>(t, FloatDot<W, A>{t.n});
    }
}


// ---- 32-value blocks x Q8_0 -------------------------------------------------------------------

struct Q8_0W {
    static constexpr size_t kBytes = sizeof(BlockQ8_0);
    static __m256i values(const uint8_t* blk) { return loadu256(blk + offsetof(BlockQ8_0, qs)); }
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ8_0, d)); }
};
struct Q4_0W {
    static constexpr size_t kBytes = sizeof(BlockQ4_0);
    static __m256i values(const uint8_t* blk) {
        return _mm256_sub_epi8(nibbles_lo_hi(blk + offsetof(BlockQ4_0, qs)), _mm256_set1_epi8(8));
    }
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockQ4_0, d)); }
};
struct IQ4_NLW {
    static constexpr size_t kBytes = sizeof(BlockIQ4_NL);
    static __m256i values(const uint8_t* blk) {
        return nibbles_lookup(blk + offsetof(BlockIQ4_NL, qs), loadu128(kIq4NlValues));
    }
    static float scale(const uint8_t* blk) { return load_f16(blk + offsetof(BlockIQ4_NL, d)); }
};
struct MXFP4W {
    static constexpr size_t kBytes = sizeof(BlockMXFP4);
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

// A block's work is short (one 32-byte product per column), so with few columns the f32
// accumulation chain (one FMA per block, 4-cycle latency) would be the limit: U independent
// accumulators per column, blocks taken round-robin.
template <class W>
struct Block32Dot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        constexpr size_t kA = sizeof(BlockQ8_0);
        constexpr int U = kBlockLanes;
        __m256 acc[NC][U];
        for (int c = 0; c < NC; ++c)
            for (int u = 0; u < U; ++u) acc[c][u] = _mm256_setzero_ps();
        const auto block = [&](int64_t b, int u) {
            const uint8_t* blk = w + b * W::kBytes;
            const __m256i qw = W::values(blk);
            const __m256i qw_abs = _mm256_sign_epi8(qw, qw);
            const float dw = W::scale(blk);
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const __m256i qa = _mm256_sign_epi8(loadu256(ab + offsetof(BlockQ8_0, qs)), qw);
                const __m256i sum32 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qw_abs, qa);
                const __m256 d = _mm256_set1_ps(dw * load_f16(ab + offsetof(BlockQ8_0, d)));
                acc[c][u] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum32), acc[c][u]);
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
        }
    }
};

// Two weight rows x up to 8 columns: each activation block is loaded, and its scale converted,
// once for both rows (several columns: batched decode).
template <class W>
struct Block32Dot2 {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w0, const uint8_t* w1, const uint8_t* const* a, float* out0, float* out1) const {
        constexpr size_t kA = sizeof(BlockQ8_0);
        // Block b goes to chain (b % kBlockLanes) except a tail, as in Block32Dot: the same sums
        // in the same order, so a column's result does not depend on the kernel.
        __m256 acc0[NC][kBlockLanes], acc1[NC][kBlockLanes];
        for (int c = 0; c < NC; ++c)
            for (int u = 0; u < kBlockLanes; ++u) acc0[c][u] = acc1[c][u] = _mm256_setzero_ps();
        const int64_t full = n_blocks / kBlockLanes * kBlockLanes;
        for (int64_t b = 0; b < n_blocks; ++b) {
            const int u = b < full ? static_cast<int>(b % kBlockLanes) : 0;
            const uint8_t* blk0 = w0 + b * W::kBytes;
            const uint8_t* blk1 = w1 + b * W::kBytes;
            const __m256i q0 = W::values(blk0), q1 = W::values(blk1);
            const __m256i q0_abs = _mm256_sign_epi8(q0, q0), q1_abs = _mm256_sign_epi8(q1, q1);
            const float d0 = W::scale(blk0), d1 = W::scale(blk1);
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const __m256i qa = loadu256(ab + offsetof(BlockQ8_0, qs));
                const float da = load_f16(ab + offsetof(BlockQ8_0, d));
                const __m256i s0 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q0_abs, _mm256_sign_epi8(qa, q0));
                const __m256i s1 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q1_abs, _mm256_sign_epi8(qa, q1));
                acc0[c][u] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * da), _mm256_cvtepi32_ps(s0), acc0[c][u]);
                acc1[c][u] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * da), _mm256_cvtepi32_ps(s1), acc1[c][u]);
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
        }
    }
};

template <class W>
void dot_block32(const DotTile& t) {
    if (t.cols >= 2) {
        run_tile_pairs<kMaxCols>(t, Block32Dot<W>{t.n / 32}, Block32Dot2<W>{t.n / 32});
    } else {
        run_tile<kMaxCols>(t, Block32Dot<W>{t.n / 32});
    }
}

constexpr DotKernelEntry kDots[] = {
    {Type::F32, dot_float<F32W, F32A>, false},   {Type::F16, dot_float<F16W, F32A>, false},
    {Type::BF16, dot_float<BF16W, F32A>, false},
    {Type::Q8_0, dot_block32<Q8_0W>, false},     {Type::Q4_0, dot_block32<Q4_0W>, false},
    {Type::IQ4_NL, dot_block32<IQ4_NLW>, false}, {Type::MXFP4, dot_block32<MXFP4W>, false},
};

}  // namespace

namespace detail {
const KernelTable kAvx512LegacyKernels = {kDots, sizeof(kDots) / sizeof(kDots[0]), nullptr, 0};
}  // namespace detail

}  // namespace strata::cpu
