// AVX2 kernels for the k-quants (Q2_K..Q6_K) with Q8_K activations, up to 4 activation columns
// per pass over a weight row.
//
// Codes are unpacked to unsigned bytes and multiplied with maddubs (u8 x s8 -> pairs summed to
// int16; code <= 63 and |a| <= 127 keep pair sums inside int16), then madd by the int16 group
// scale gives int32. Offsets (Q3_K's -4, Q6_K's -32) and mins (Q2_K, Q4_K, Q5_K) are taken out
// once per block with the activation sums of 16 (bsums), exactly as integers.
#include <cstddef>

#include "cpu/kernel_registry.h"
#include "cpu/simd_avx2.h"
#include "cpu/simd_tile.h"
#include "quant/blocks.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

constexpr int kMaxCols = 4;
constexpr size_t kA = sizeof(BlockQ8_K);
constexpr size_t kAqs = offsetof(BlockQ8_K, qs);
constexpr size_t kAsums = offsetof(BlockQ8_K, bsums);

// Q4_K/Q5_K: 8 scales and 8 mins from the 12 packed bytes (see k4_scale_min in vec_dot_scalar.cpp),
// unpacked 4 at a time with 32-bit masks.
static inline void k4_unpack(const uint8_t* packed, uint8_t scales[8], uint8_t mins[8]) {
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

// Sums of 32 activations per sub-block (8 x int16) from the 16 sums of 16.
static inline __m128i bsums32(const uint8_t* ablk) {
    const __m256i s = loadu256(ablk + kAsums);
    return _mm_hadd_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

// [lo x 8 | hi x 8] as int16: the scales of two 16-value groups, matching the lanes of a maddubs
// result over 32 values.
static inline __m256i scale_pair(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
}

// ---- Q4_K / Q5_K ------------------------------------------------------------------------------

// vpshufb controls picking int16 scale k (bytes 2k, 2k + 1) into every lane, k = 0..7.
struct ScaleShuffles {
    uint8_t v[8][32];
};
constexpr ScaleShuffles make_scale_shuffles() {
    ScaleShuffles t{};
    for (int k = 0; k < 8; ++k) {
        for (int i = 0; i < 32; i += 2) {
            t.v[k][i] = static_cast<uint8_t>(2 * k);
            t.v[k][i + 1] = static_cast<uint8_t>(2 * k + 1);
        }
    }
    return t;
}
constexpr ScaleShuffles kScaleShuffles = make_scale_shuffles();

template <bool kQ5>
struct Q45KDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using Blk = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        __m256 acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(Blk);
            uint8_t scales[8], mins[8];
            k4_unpack(x + offsetof(Blk, scales), scales, mins);
            const uint8_t* qs = x + offsetof(Blk, qs);
            __m256i hbits = _mm256_setzero_si256();
            if constexpr (kQ5) hbits = loadu256(x + offsetof(BlockQ5_K, qh));
            // The 8 scales as int16 in both 128-bit lanes; vpshufb broadcasts one per sub-block.
            const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales))));
            __m256i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
            // 64 values: sub-blocks 2j (low nibbles), 2j + 1 (high nibbles).
            const auto chunk = [&](int j) {
                const __m256i bits = loadu256(qs + 32 * j);
                __m256i lo = _mm256_and_si256(bits, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                if constexpr (kQ5) {
                    const __m256i one = _mm256_set1_epi8(1);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
                    hbits = _mm256_srli_epi16(hbits, 2);
                }
                const __m256i s_lo = _mm256_shuffle_epi8(scales16, loadu256(kScaleShuffles.v[2 * j]));
                const __m256i s_hi = _mm256_shuffle_epi8(scales16, loadu256(kScaleShuffles.v[2 * j + 1]));
                for (int c = 0; c < NC; ++c) {
                    const uint8_t* q8 = a[c] + b * kA + kAqs + 64 * j;
                    const __m256i p_lo = _mm256_madd_epi16(s_lo, _mm256_maddubs_epi16(lo, loadu256(q8)));
                    const __m256i p_hi = _mm256_madd_epi16(s_hi, _mm256_maddubs_epi16(hi, loadu256(q8 + 32)));
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p_lo, p_hi));
                }
            };
            // Unrolled for 1-2 columns; kept rolled for more, where unrolling runs out of registers.
            if constexpr (NC <= 2) {
#pragma GCC unroll 4
                for (int j = 0; j < 4; ++j) chunk(j);
            } else {
#pragma GCC unroll 1
                for (int j = 0; j < 4; ++j) chunk(j);
            }
            const float dw = load_f16(x + offsetof(Blk, d));
            const float dmin = load_f16(x + offsetof(Blk, dmin));
            const __m128i mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins)));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const float da = load_f32(ab);
                const __m256i msum = _mm256_zextsi128_si256(_mm_madd_epi16(mins16, bsums32(ab)));
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(-dmin * da), _mm256_cvtepi32_ps(msum), acc[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = hsum_ps(acc[c]);
    }
};

// ---- Q6_K ------------------------------------------------------------------------------------

struct Q6KDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        const __m256i m3 = _mm256_set1_epi8(0x03);
        __m256 acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(BlockQ6_K);
            const auto* sc = reinterpret_cast<const int8_t*>(x + offsetof(BlockQ6_K, scales));
            __m256i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
            for (int h = 0; h < 2; ++h) {  // 128 values
                const __m256i ql0 = loadu256(x + offsetof(BlockQ6_K, ql) + 64 * h);
                const __m256i ql1 = loadu256(x + offsetof(BlockQ6_K, ql) + 64 * h + 32);
                __m256i qh = loadu256(x + offsetof(BlockQ6_K, qh) + 32 * h);
                for (int k = 0; k < 4; ++k) {  // 32 values: low 4 bits, then 2 high bits from qh
                    const __m256i low = k == 0 ? ql0 : k == 1 ? ql1 : k == 2 ? _mm256_srli_epi16(ql0, 4) : _mm256_srli_epi16(ql1, 4);
                    const __m256i q = _mm256_or_si256(_mm256_and_si256(low, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
                    qh = _mm256_srli_epi16(qh, 2);
                    const int g = 8 * h + 2 * k;
                    const __m256i s = scale_pair(sc[g], sc[g + 1]);
                    for (int c = 0; c < NC; ++c) {
                        const __m256i q8 = loadu256(a[c] + b * kA + kAqs + 128 * h + 32 * k);
                        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(s, _mm256_maddubs_epi16(q, q8)));
                    }
                }
            }
            // Codes are stored + 32: subtract 32 * sum_g scale_g * bsum_g.
            const __m256i scales16 = _mm256_cvtepi8_epi16(loadu128(sc));
            const float dw = load_f16(x + offsetof(BlockQ6_K, d));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(scales16, loadu256(ab + kAsums)), 5);
                const __m256i s = _mm256_sub_epi32(sumi[c], off);
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * load_f32(ab)), _mm256_cvtepi32_ps(s), acc[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = hsum_ps(acc[c]);
    }
};

// ---- Q2_K / Q3_K -----------------------------------------------------------------------------

// Q3_K's 16 scales (6 bits, stored + 32) -> int8 in [-32, 31].
static inline void q3k_unpack(const uint8_t* packed, int8_t out[16]) {
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

// Q2_K (kQ3 = false): code = 2 bits, value = d * (sc & 15) * code - dmin * (sc >> 4).
// Q3_K (kQ3 = true): code = 2 bits + 4 * hmask bit, value = d * scale * (code - 4).
template <bool kQ3>
struct Q23KDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using Blk = std::conditional_t<kQ3, BlockQ3_K, BlockQ2_K>;
        const __m256i m3 = _mm256_set1_epi8(0x03);
        const __m256i one = _mm256_set1_epi8(1);
        __m256 acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
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
            __m256i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
            for (int h = 0; h < 2; ++h) {
                __m256i bits = loadu256(x + offsetof(Blk, qs) + 32 * h);
                for (int j = 0; j < 4; ++j) {
                    __m256i q = _mm256_and_si256(bits, m3);
                    bits = _mm256_srli_epi16(bits, 2);
                    if constexpr (kQ3) {
                        q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(hm, one), 2));
                        hm = _mm256_srli_epi16(hm, 1);
                    }
                    const int g = 8 * h + 2 * j;
                    const __m256i s = scale_pair(sc[g], sc[g + 1]);
                    for (int c = 0; c < NC; ++c) {
                        const __m256i q8 = loadu256(a[c] + b * kA + kAqs + 128 * h + 32 * j);
                        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(s, _mm256_maddubs_epi16(q, q8)));
                    }
                }
            }
            const __m256i off16 = _mm256_cvtepi8_epi16(loadu128(offset));
            const float dw = load_f16(x + offsetof(Blk, d));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const float da = load_f32(ab);
                const __m256i osum = _mm256_madd_epi16(off16, loadu256(ab + kAsums));
                if constexpr (kQ3) {
                    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[c], osum)), acc[c]);
                } else {
                    const float dmin = load_f16(x + offsetof(BlockQ2_K, dmin));
                    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
                    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(-dmin * da), _mm256_cvtepi32_ps(osum), acc[c]);
                }
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = hsum_ps(acc[c]);
    }
};

template <class K>
void dot_k(const DotTile& t) {
    run_tile<kMaxCols>(t, K{t.n / kQK});
}

constexpr DotKernelEntry kDots[] = {
    {Type::Q2_K, dot_k<Q23KDot<false>>, false}, {Type::Q3_K, dot_k<Q23KDot<true>>, false},
    {Type::Q4_K, dot_k<Q45KDot<false>>, false}, {Type::Q5_K, dot_k<Q45KDot<true>>, false},
    {Type::Q6_K, dot_k<Q6KDot>, false},
};

}  // namespace

namespace detail {
const KernelTable kAvx2KquantKernels = {kDots, sizeof(kDots) / sizeof(kDots[0]), nullptr, 0};
}  // namespace detail

}  // namespace strata::cpu
