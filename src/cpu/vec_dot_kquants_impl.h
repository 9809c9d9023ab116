// The body of the k-quant (Q2_K..Q6_K) dot kernels with Q8_K activations, compiled once per
// instruction-set level by vec_dot_kquants_avx2.cpp / vec_dot_kquants_avx512.cpp against that
// level's SIMD layer S (simd_avx2.h, simd_avx512.h). Everything is in an unnamed namespace, so
// each level gets its own copy. Up to S::kMaxCols activation columns per pass over a weight row.
//
// Codes are unpacked to unsigned bytes, 64 at a time (S::V) for Q4_K/Q5_K and a step of
// S::Step::kSubs 32-value sub-blocks for the others, and multiplied with maddubs (u8 x s8 ->
// pairs summed to int16; code <= 63 and |a| <= 127 keep pair sums inside int16); the int16 group
// scales are applied by dot_scaled (madd on AVX2, VNNI vpdpwssd on AVX-512) into int32. Offsets
// (Q3_K's -4, Q6_K's -32) and mins (Q2_K, Q4_K, Q5_K) are taken out once per block with the
// activation sums of 16 (bsums), exactly as integers.
#pragma once

#include <cstddef>
#include <cstring>
#include <iterator>
#include <type_traits>
#include <vector>

#include "cpu/kernel_registry.h"
#include "cpu/simd_tile.h"
#include "quant/blocks.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

constexpr size_t kA = sizeof(BlockQ8_K);
constexpr size_t kAqs = offsetof(BlockQ8_K, qs);
constexpr size_t kAsums = offsetof(BlockQ8_K, bsums);

// Q4_K/Q5_K: 8 scales and 8 mins from the 12 packed bytes (see k4_scale_min in vec_dot_scalar.cpp),
// unpacked 4 at a time with 32-bit masks.
inline void k4_unpack(const uint8_t* packed, uint8_t scales[8], uint8_t mins[8]) {
    uint32_t u[3];
    std::memcpy(u, packed, 12);
    const uint32_t s_lo = u[0] & 0x3f3f3f3fu;
    const uint32_t m_lo = u[1] & 0x3f3f3f3fu;
    const uint32_t s_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
    const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
    std::memcpy(scales, &s_lo, 4);
    std::memcpy(scales + 4, &s_hi, 4);
    std::memcpy(mins, &m_lo, 4);
    std::memcpy(mins + 4, &m_hi, 4);
}

// Q3_K's 16 scales (6 bits, stored + 32) -> int8 in [-32, 31] (see q3k_scale in vec_dot_scalar.cpp).
inline void q3k_unpack(const uint8_t* packed, int8_t out[16]) {
    uint32_t u[3];
    std::memcpy(u, packed, 12);
    const uint32_t m2 = 0x03030303u, m4 = 0x0f0f0f0fu;
    uint32_t s[4];
    s[0] = (u[0] & m4) | ((u[2] & m2) << 4);
    s[1] = (u[1] & m4) | (((u[2] >> 2) & m2) << 4);
    s[2] = ((u[0] >> 4) & m4) | (((u[2] >> 4) & m2) << 4);
    s[3] = ((u[1] >> 4) & m4) | (((u[2] >> 6) & m2) << 4);
    uint8_t bytes[16];
    std::memcpy(bytes, s, 16);
    for (int i = 0; i < 16; ++i) out[i] = static_cast<int8_t>(bytes[i] - 32);
}

// A column's float sum over the blocks: the main term d * sumi in acc (S::F), and the
// per-block corrections (mins or code offsets times the activation sums), which come as 8 int32
// (256 bits). At 256 bits (AVX2) both go into acc, and a correction at the codes' own scale is
// subtracted in integers first; next to a 512-bit acc (AVX-512) the corrections get a 256-bit
// accumulator of their own (apart), added at the end. Written out in each kernel on plain
// arrays: with a struct or helpers around them, GCC chose registers that kept Q4_K's DRAM-bound
// loop 13 % slower.
template <class S>
constexpr bool kApart = S::kFloats > 8;

// ---- Q4_K / Q5_K ------------------------------------------------------------------------------

// One Q4_K / Q5_K block's integer sums for NC columns (Q45KDot's and Q45KDotWide's shared
// part): sumi[c] = the codes times column c's activations, pairs times their group scales.
template <class S, bool kQ5, int NC, class Scales>
static inline __attribute__((always_inline)) void q45k_block_sums(const uint8_t* x, const uint8_t* const* a, int64_t b,
                                                                  const Scales& sc, typename S::I32 (&sumi)[NC]) {
    using Blk = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
    using V = typename S::V;
    const V m4 = S::set1_8(0x0f);
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (kQ5) hbits = loadu256(x + offsetof(BlockQ5_K, qh));
    for (int c = 0; c < NC; ++c) sumi[c] = S::zero_i32();
    // 64 values: sub-blocks 2j (low nibbles), 2j + 1 (high nibbles).
    const auto chunk = [&](int j) {
        const __m256i bits = loadu256(x + offsetof(Blk, qs) + 32 * j);
        V q = S::and_(S::join(bits, _mm256_srli_epi16(bits, 4)), m4);
        if constexpr (kQ5) {
            const __m256i one = _mm256_set1_epi8(1);
            q = S::or_(q,
                       S::slli16(S::join(_mm256_and_si256(hbits, one), _mm256_and_si256(_mm256_srli_epi16(hbits, 1), one)), 4));
            hbits = _mm256_srli_epi16(hbits, 2);
        }
        const V scale = sc.pair(j);
        for (int c = 0; c < NC; ++c) sumi[c] = S::dot_scaled(sumi[c], q, S::load(a[c] + b * kA + kAqs + 64 * j), scale);
    };
    // Unrolled for 1-2 columns, and for any count with AVX-512's 32 registers; kept rolled for
    // more on AVX2, where unrolling runs out of registers.
    if constexpr (NC <= 2 || S::kMaxCols > 4) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) chunk(j);
    } else {
#pragma GCC unroll 1
        for (int j = 0; j < 4; ++j) chunk(j);
    }
}

template <class S, bool kQ5>
struct Q45KDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using Blk = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
        const typename S::template PairScales<NC> pair_scales;
        typename S::F acc[NC];
        __m256 apart[kApart<S> ? NC : 1];
        for (int c = 0; c < NC; ++c) acc[c] = S::zero();
        for (__m256& v : apart) v = _mm256_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(Blk);
            uint8_t scales[8], mins[8];
            k4_unpack(x + offsetof(Blk, scales), scales, mins);
            typename S::I32 sumi[NC];
            q45k_block_sums<S, kQ5, NC>(x, a, b, pair_scales.block(scales), sumi);
            const float dw = load_f16(x + offsetof(Blk, d));
            const float dmin = load_f16(x + offsetof(Blk, dmin));
            const __m128i mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins)));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const float da = load_f32(ab);
                // Sums of 32 activations per sub-block (8 x int16) from the 16 sums of 16.
                const __m256i s = loadu256(ab + kAsums);
                const __m128i sums32 = _mm_hadd_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                const __m256i msum = _mm256_zextsi128_si256(_mm_madd_epi16(mins16, sums32));
                acc[c] = S::fmadd(S::set1(dw * da), S::to_f32(sumi[c]), acc[c]);
                if constexpr (kApart<S>) {
                    apart[c] = _mm256_fmadd_ps(_mm256_set1_ps(-dmin * da), _mm256_cvtepi32_ps(msum), apart[c]);
                } else {
                    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(-dmin * da), _mm256_cvtepi32_ps(msum), acc[c]);
                }
            }
        }
        for (int c = 0; c < NC; ++c) {
            if constexpr (kApart<S>) {
                out[c] = S::hsum(acc[c]) + hsum_ps(apart[c]);
            } else {
                out[c] = S::hsum(acc[c]);
            }
        }
    }
};

// Q45KDot for batches at AVX-512 (two or more columns), with the per-column work after each
// block cut down and every lane's float operations unchanged, so a column's bits are the ones
// Q45KDot gives it alone. What the activations contribute per block is made once per tile call
// (`acts`): each column's scale, and per group of 4 columns their 8 sums of 32 as int16 (one
// register) with the 4 scales spread over 4 lanes each. The mins' terms of 4 columns then take
// one madd, one conversion, one product and one FMA into 16 lanes — lanes 4c..4c+3 hold column
// c's 4 pair sums, the lanes Q45KDot keeps in its 256-bit `apart` (whose other 4 lanes stay +0)
// — and at the end a column's 4 lanes are summed in hsum_ps's order: (a0 + a2) + (a1 + a3).
template <class S, bool kQ5>
struct Q45KDotWide {
    struct Acts {
        int64_t n_blocks = 0, groups = 0;        // groups: columns / 4, rounded up
        std::vector<float> da;                   // [column][block]
        std::vector<float> da4;                  // [block][group][16]: each column's scale x 4
        std::vector<int16_t> sums4;              // [block][group][32]: each column's 8 sums of 32
        const uint8_t* const* a_base = nullptr;  // the tile's activation rows
        void make(const DotTile& t) {
            n_blocks = t.n / kQK;
            groups = (t.cols + 3) / 4;
            a_base = t.a;
            da.assign(static_cast<size_t>(t.cols * n_blocks), 0.0f);
            da4.assign(static_cast<size_t>(n_blocks * groups * 16), 0.0f);
            sums4.assign(static_cast<size_t>(n_blocks * groups * 32), 0);
            for (int64_t c = 0; c < t.cols; ++c)
                for (int64_t b = 0; b < n_blocks; ++b) {
                    const uint8_t* ab = t.a[c] + b * kA;
                    const float d = load_f32(ab);
                    da[static_cast<size_t>(c * n_blocks + b)] = d;
                    const size_t g = static_cast<size_t>(b * groups + c / 4), lane = static_cast<size_t>(c % 4);
                    for (size_t k = 0; k < 4; ++k) da4[g * 16 + lane * 4 + k] = d;
                    const __m256i sv = loadu256(ab + kAsums);
                    const __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(sv), _mm256_extracti128_si256(sv, 1));
                    _mm_storeu_si128(reinterpret_cast<__m128i*>(sums4.data() + g * 32 + lane * 8), s32);
                }
        }
    };
    const Acts* acts;

    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using Blk = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
        constexpr int kGroups = (NC + 3) / 4;
        const int64_t n_blocks = acts->n_blocks, c0 = a - acts->a_base, g0 = c0 / 4;
        const typename S::template PairScales<NC> pair_scales;
        typename S::F acc[NC];
        __m512 apart[kGroups];
        for (int c = 0; c < NC; ++c) acc[c] = S::zero();
        for (__m512& v : apart) v = _mm512_setzero_ps();
        const float* da[NC];
        for (int c = 0; c < NC; ++c) da[c] = acts->da.data() + (c0 + c) * n_blocks;
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(Blk);
            uint8_t scales[8], mins[8];
            k4_unpack(x + offsetof(Blk, scales), scales, mins);
            typename S::I32 sumi[NC];
            q45k_block_sums<S, kQ5, NC>(x, a, b, pair_scales.block(scales), sumi);
            const float dw = load_f16(x + offsetof(Blk, d));
            const float dmin = load_f16(x + offsetof(Blk, dmin));
            const __m512 dwv = _mm512_set1_ps(dw);
            for (int c = 0; c < NC; ++c)
                acc[c] = S::fmadd(_mm512_mul_ps(dwv, _mm512_set1_ps(da[c][b])), S::to_f32(sumi[c]), acc[c]);
            // The mins: 4 columns a register.
            const __m512i mins16 =
                _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins))));
            const __m512 ndmin = _mm512_set1_ps(-dmin);
            const size_t row = static_cast<size_t>(b * acts->groups + g0);
            for (int g = 0; g < kGroups; ++g) {
                const __m512i msum = _mm512_madd_epi16(mins16, loadu512(acts->sums4.data() + (row + g) * 32));
                const __m512 scale = _mm512_mul_ps(ndmin, _mm512_loadu_ps(acts->da4.data() + (row + g) * 16));
                apart[g] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(msum), apart[g]);
            }
        }
        for (int c = 0; c < NC; ++c) {
            alignas(64) float lanes[16];
            _mm512_store_ps(lanes, apart[c / 4]);
            const float* l = lanes + 4 * (c % 4);
            out[c] = S::hsum(acc[c]) + ((l[0] + l[2]) + (l[1] + l[3]));
        }
    }
};

// ---- Q6_K ------------------------------------------------------------------------------------

// The 128-value halves of Q6_K, Q3_K and Q2_K go in steps of S::Step::kSubs 32-value
// sub-blocks (u: the first one in the half); a step's codes and scales are decoded, then every
// column takes them before the next step (AVX2 has the registers for one sub-block's). Q6_K
// decodes S::Step::kDecodeAhead steps at a time (AVX-512: the whole half).

template <class S>
struct Q6KDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using Q = typename S::Step;
        using V = typename Q::V;
        constexpr int kAhead = Q::kDecodeAhead, kUnits = Q::kSubs * Q::kDecodeAhead;
        const V m4 = Q::set1_8(0x0f);
        const V m3 = Q::set1_8(0x03);
        const typename Q::template Scales16<NC> scales16;
        typename S::F acc[NC];
        __m256 apart[kApart<S> ? NC : 1];
        for (int c = 0; c < NC; ++c) acc[c] = S::zero();
        for (__m256& v : apart) v = _mm256_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(BlockQ6_K);
            const auto* sc = reinterpret_cast<const int8_t*>(x + offsetof(BlockQ6_K, scales));
            const auto scb = scales16.block(sc);
            typename S::I32 sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = S::zero_i32();
            for (int h = 0; h < 2; ++h) {  // 128 values
                // Sub-block j of the half: low 4 bits from ql[64h .. 64h + 63] (low nibbles for
                // j = 0, 1, high ones for 2, 3), high 2 bits at bits 2j..2j+1 of qh[32h + l].
                const typename Q::Nibbles ql = Q::nibbles(x + offsetof(BlockQ6_K, ql) + 64 * h);
                const typename Q::Crumbs qh = Q::crumbs(loadu256(x + offsetof(BlockQ6_K, qh) + 32 * h));
                for (int u0 = 0; u0 < 4; u0 += kUnits) {
                    V q[kAhead], scale[kAhead];
                    for (int t = 0; t < kAhead; ++t) {
                        const int u = u0 + Q::kSubs * t;
                        q[t] = Q::or_(Q::and_(Q::nibble_plane(ql, u), m4), Q::slli16(Q::and_(Q::crumb_plane(qh, u), m3), 4));
                        scale[t] = scb.at(8 * h + 2 * u);
                    }
                    for (int c = 0; c < NC; ++c) {
                        for (int t = 0; t < kAhead; ++t) {
                            const uint8_t* q8 = a[c] + b * kA + kAqs + 128 * h + 32 * (u0 + Q::kSubs * t);
                            sumi[c] = Q::dot_scaled(sumi[c], q[t], Q::load(q8), scale[t]);
                        }
                    }
                }
            }
            // Codes are stored + 32: subtract 32 * sum_g scale_g * bsum_g.
            const __m256i sc_i16 = _mm256_cvtepi8_epi16(loadu128(sc));
            const float dw = load_f16(x + offsetof(BlockQ6_K, d));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const __m256i off = _mm256_madd_epi16(sc_i16, loadu256(ab + kAsums));
                const float d = dw * load_f32(ab);
                if constexpr (kApart<S>) {
                    acc[c] = S::fmadd(S::set1(d), S::to_f32(sumi[c]), acc[c]);
                    apart[c] = _mm256_fmadd_ps(_mm256_set1_ps(-32.0f * d), _mm256_cvtepi32_ps(off), apart[c]);
                } else {
                    acc[c] = S::fmadd(S::set1(d), S::to_f32(_mm256_sub_epi32(sumi[c], _mm256_slli_epi32(off, 5))), acc[c]);
                }
            }
        }
        for (int c = 0; c < NC; ++c) {
            if constexpr (kApart<S>) {
                out[c] = S::hsum(acc[c]) + hsum_ps(apart[c]);
            } else {
                out[c] = S::hsum(acc[c]);
            }
        }
    }
};

// ---- Q2_K / Q3_K -----------------------------------------------------------------------------

// Q2_K (kQ3 = false): code = 2 bits, value = d * (sc & 15) * code - dmin * (sc >> 4).
// Q3_K (kQ3 = true): code = 2 bits + 4 * hmask bit, value = d * scale * (code - 4).
// In 128-value half h, bits 2j..2j+1 of qs[32h + l] hold value 128h + 32j + l; Q3_K's high bit
// of that value is bit 4h + j of hmask[l].
template <class S, bool kQ3>
struct Q23KDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using Blk = std::conditional_t<kQ3, BlockQ3_K, BlockQ2_K>;
        using Q = typename S::Step;
        using V = typename Q::V;
        const V m3 = Q::set1_8(0x03);
        typename S::F acc[NC];
        __m256 apart[kApart<S> ? NC : 1];
        for (int c = 0; c < NC; ++c) acc[c] = S::zero();
        for (__m256& v : apart) v = _mm256_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(Blk);
            int8_t sc[16];      // multiplier per 16 values
            int8_t offset[16];  // subtracted per 16 values, times the activation sum
            if constexpr (kQ3) {
                q3k_unpack(x + offsetof(BlockQ3_K, scales), sc);
                for (int g = 0; g < 16; ++g) offset[g] = static_cast<int8_t>(4 * sc[g]);  // |4 * sc| <= 128
            } else {
                for (int g = 0; g < 16; ++g) {
                    sc[g] = static_cast<int8_t>(x[offsetof(BlockQ2_K, scales) + g] & 0x0f);
                    offset[g] = static_cast<int8_t>(x[offsetof(BlockQ2_K, scales) + g] >> 4);
                }
            }
            __m256i hm = _mm256_setzero_si256();
            if constexpr (kQ3) hm = loadu256(x + offsetof(BlockQ3_K, hmask));
            typename S::I32 sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = S::zero_i32();
            for (int h = 0; h < 2; ++h) {
                const typename Q::Crumbs bits = Q::crumbs(loadu256(x + offsetof(Blk, qs) + 32 * h));
                for (int u = 0; u < 4; u += Q::kSubs) {
                    V q = Q::and_(Q::crumb_plane(bits, u), m3);
                    if constexpr (kQ3) q = Q::or_(q, Q::slli16(Q::bit_plane(hm, 4 * h + u), 2));
                    const V scale = Q::scales16_at(sc + 8 * h + 2 * u);
                    for (int c = 0; c < NC; ++c)
                        sumi[c] = Q::dot_scaled(sumi[c], q, Q::load(a[c] + b * kA + kAqs + 128 * h + 32 * u), scale);
                }
            }
            const __m256i off16 = _mm256_cvtepi8_epi16(loadu128(offset));
            const float dw = load_f16(x + offsetof(Blk, d));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const float da = load_f32(ab);
                const __m256i osum = _mm256_madd_epi16(off16, loadu256(ab + kAsums));
                // Q3_K's offsets scale with d (an integer subtraction at 256 bits), Q2_K's mins with dmin.
                if constexpr (kQ3 && !kApart<S>) {
                    acc[c] = S::fmadd(S::set1(dw * da), S::to_f32(_mm256_sub_epi32(sumi[c], osum)), acc[c]);
                } else {
                    float doff = dw;
                    if constexpr (!kQ3) doff = load_f16(x + offsetof(BlockQ2_K, dmin));
                    acc[c] = S::fmadd(S::set1(dw * da), S::to_f32(sumi[c]), acc[c]);
                    if constexpr (kApart<S>) {
                        apart[c] = _mm256_fmadd_ps(_mm256_set1_ps(-doff * da), _mm256_cvtepi32_ps(osum), apart[c]);
                    } else {
                        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(-doff * da), _mm256_cvtepi32_ps(osum), acc[c]);
                    }
                }
            }
        }
        for (int c = 0; c < NC; ++c) {
            if constexpr (kApart<S>) {
                out[c] = S::hsum(acc[c]) + hsum_ps(apart[c]);
            } else {
                out[c] = S::hsum(acc[c]);
            }
        }
    }
};

template <class S, class K>
void dot_k(const DotTile& t) {
    run_tile<S::kMaxCols>(t, K{t.n / kQK});
}

template <class S, class K>
__attribute__((noinline)) void dot_k_narrow(const DotTile& t) {
    run_tile<S::kMaxCols>(t, K{t.n / kQK});
}

// Q4_K / Q5_K: batches at AVX-512 through Q45KDotWide (the activations' part made once per
// tile), in a function of its own: with both loops in one function GCC's register choices made
// the one-column (decode) loop 30-60 % slower.
template <class S, bool kQ5>
__attribute__((noinline)) void dot_q45k_wide(const DotTile& t) {
    thread_local typename Q45KDotWide<S, kQ5>::Acts acts;
    acts.make(t);
    run_tile<S::kMaxCols>(t, Q45KDotWide<S, kQ5>{&acts});
}

template <class S, bool kQ5>
void dot_q45k(const DotTile& t) {
    if constexpr (kApart<S>) {
        if (t.cols >= 2) return dot_q45k_wide<S, kQ5>(t);
    }
    dot_k_narrow<S, Q45KDot<S, kQ5>>(t);
}

template <class S>
constexpr DotKernelEntry kKquantDots[] = {
    {Type::Q2_K, dot_k<S, Q23KDot<S, false>>, false}, {Type::Q3_K, dot_k<S, Q23KDot<S, true>>, false},
    {Type::Q4_K, dot_q45k<S, false>, false},          {Type::Q5_K, dot_q45k<S, true>, false},
    {Type::Q6_K, dot_k<S, Q6KDot<S>>, false},
};

// The level's table (kernel_registry.h): constant data, so nothing compiled for the level runs
// before the CPU has been checked.
template <class S>
constexpr KernelTable kKquantTable = {kKquantDots<S>, std::size(kKquantDots<S>), nullptr, 0};

}  // namespace
}  // namespace strata::cpu
