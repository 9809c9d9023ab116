// AVX-512 kernels for the k-quants (Q2_K..Q6_K) with Q8_K activations: 64 values per 512-bit
// register, up to 8 activation columns per pass over a weight row.
//
// Per 64 values and column: vpmaddubsw (u8 code x s8 activation, pairs summed to int16; code
// <= 63 keeps |pair| <= 16002) then VNNI vpdpwssd (int16 pairs x int16 group scale, accumulated
// into int32): two instructions where AVX2 needs six. Mins and code offsets come out once per
// block through the activation sums, as in the AVX2 kernels.
#include <cstddef>

#include "cpu/kernel_registry.h"
#include "cpu/simd_avx512.h"
#include "cpu/simd_tile.h"
#include "quant/blocks.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

constexpr int kMaxCols = 8;
// Group scales spread by one permute from the index vectors (four registers held through the
// loop) for few columns: the matrix-vector products of decode, where the broadcasts per scale
// were a large share of the work (Q6_K 18.6 -> 22.3 GB/s on one thread). With more columns the
// index registers push accumulators to the stack (prefill 7 % slower), so those broadcast.
template <int NC>
constexpr bool kSpread = NC <= 2;
constexpr size_t kA = sizeof(BlockQ8_K);
constexpr size_t kAqs = offsetof(BlockQ8_K, qs);
constexpr size_t kAsums = offsetof(BlockQ8_K, bsums);

// Q4_K/Q5_K scales and mins (see k4_scale_min in vec_dot_scalar.cpp).
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

template <bool kQ5>
struct Q45KDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using Blk = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        const __m512i pair_idx[4] = {spread_index(0, 16), spread_index(2, 16), spread_index(4, 16), spread_index(6, 16)};
        __m512 acc[NC];
        __m256 acc_min[NC];
        for (int c = 0; c < NC; ++c) {
            acc[c] = _mm512_setzero_ps();
            acc_min[c] = _mm256_setzero_ps();
        }
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(Blk);
            uint8_t scales[8], mins[8];
            k4_unpack(x + offsetof(Blk, scales), scales, mins);
            const __m512i scales16 =
                _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales))));
            __m256i hbits = _mm256_setzero_si256();
            if constexpr (kQ5) hbits = loadu256(x + offsetof(BlockQ5_K, qh));
            __m512i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm512_setzero_si512();
            for (int j = 0; j < 4; ++j) {  // 64 values: sub-block 2j (low nibbles), 2j + 1 (high nibbles)
                const __m256i bits = loadu256(x + offsetof(Blk, qs) + 32 * j);
                __m512i q = _mm512_and_si512(join256(bits, _mm256_srli_epi16(bits, 4)), m4);
                if constexpr (kQ5) {
                    const __m256i one = _mm256_set1_epi8(1);
                    const __m512i h = join256(_mm256_and_si256(hbits, one), _mm256_and_si256(_mm256_srli_epi16(hbits, 1), one));
                    q = _mm512_or_si512(q, _mm512_slli_epi16(h, 4));
                    hbits = _mm256_srli_epi16(hbits, 2);
                }
                const __m512i scale =
                    kSpread<NC> ? spread_epi16(pair_idx[j], scales16) : scale16_pair(scales[2 * j], scales[2 * j + 1]);
                for (int c = 0; c < NC; ++c) {
                    const __m512i q8 = loadu512(a[c] + b * kA + kAqs + 64 * j);
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(q, q8), scale);
                }
            }
            const float dw = load_f16(x + offsetof(Blk, d));
            const float dmin = load_f16(x + offsetof(Blk, dmin));
            const __m128i mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins)));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const float da = load_f32(ab);
                const __m256i s = loadu256(ab + kAsums);
                const __m128i sums32 = _mm_hadd_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                const __m256i msum = _mm256_zextsi128_si256(_mm_madd_epi16(mins16, sums32));
                acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * da), i32_to_ps(sumi[c]), acc[c]);
                acc_min[c] = _mm256_fmadd_ps(_mm256_set1_ps(-dmin * da), _mm256_cvtepi32_ps(msum), acc_min[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = hsum512_ps(acc[c]) + hsum_ps(acc_min[c]);
    }
};

struct Q6KDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        const __m512i m3 = _mm512_set1_epi8(0x03);
        const __m512i quad_idx[4] = {spread_index(0, 8), spread_index(4, 8), spread_index(8, 8), spread_index(12, 8)};
        __m512 acc[NC];
        __m256 acc_off[NC];
        for (int c = 0; c < NC; ++c) {
            acc[c] = _mm512_setzero_ps();
            acc_off[c] = _mm256_setzero_ps();
        }
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(BlockQ6_K);
            const auto* sc = reinterpret_cast<const int8_t*>(x + offsetof(BlockQ6_K, scales));
            const __m256i scales16 = _mm256_cvtepi8_epi16(loadu128(sc));
            const __m512i scales16z = _mm512_zextsi256_si512(scales16);
            __m512i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm512_setzero_si512();
            for (int h = 0; h < 2; ++h) {  // 128 values
                // ql[64h .. 64h + 63]: low nibbles are values 0..63 of the half, high nibbles 64..127;
                // qh[32h + l] bits 2k..2k+1 belong to value 32k + l.
                const __m512i ql = loadu512(x + offsetof(BlockQ6_K, ql) + 64 * h);
                const __m256i qh = loadu256(x + offsetof(BlockQ6_K, qh) + 32 * h);
                const __m512i qh01 = join256(qh, _mm256_srli_epi16(qh, 2));  // bits of values 0..63 at bits 0..1
                const __m512i qh23 = _mm512_srli_epi16(qh01, 4);              // values 64..127
                const __m512i q_lo = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh01, m3), 4));
                const __m512i q_hi =
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_slli_epi16(_mm512_and_si512(qh23, m3), 4));
                const int g = 8 * h;
                const __m512i s_lo =
                    kSpread<NC> ? spread_epi16(quad_idx[2 * h], scales16z) : scale16_quad(sc[g], sc[g + 1], sc[g + 2], sc[g + 3]);
                const __m512i s_hi =
                    kSpread<NC> ? spread_epi16(quad_idx[2 * h + 1], scales16z) : scale16_quad(sc[g + 4], sc[g + 5], sc[g + 6], sc[g + 7]);
                for (int c = 0; c < NC; ++c) {
                    const uint8_t* q8 = a[c] + b * kA + kAqs + 128 * h;
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(q_lo, loadu512(q8)), s_lo);
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(q_hi, loadu512(q8 + 64)), s_hi);
                }
            }
            // Codes are stored + 32: subtract 32 * sum_g scale_g * bsum_g.
            const float dw = load_f16(x + offsetof(BlockQ6_K, d));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const float d = dw * load_f32(ab);
                const __m256i off = _mm256_madd_epi16(scales16, loadu256(ab + kAsums));
                acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(d), i32_to_ps(sumi[c]), acc[c]);
                acc_off[c] = _mm256_fmadd_ps(_mm256_set1_ps(-32.0f * d), _mm256_cvtepi32_ps(off), acc_off[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = hsum512_ps(acc[c]) + hsum_ps(acc_off[c]);
    }
};

// Q3_K's 16 scales (6 bits, stored + 32) -> int8 in [-32, 31] (see q3k_scale in vec_dot_scalar.cpp).
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
// In 128-value half h, bits 2j..2j+1 of qs[32h + l] hold value 128h + 32j + l; Q3_K's high bit
// of that value is bit 4h + j of hmask[l].
template <bool kQ3>
struct Q23KDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using Blk = std::conditional_t<kQ3, BlockQ3_K, BlockQ2_K>;
        const __m512i m3 = _mm512_set1_epi8(0x03);
        const __m256i one = _mm256_set1_epi8(1);
        __m512 acc[NC];
        __m256 acc_off[NC];
        for (int c = 0; c < NC; ++c) {
            acc[c] = _mm512_setzero_ps();
            acc_off[c] = _mm256_setzero_ps();
        }
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
            __m512i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm512_setzero_si512();
            for (int h = 0; h < 2; ++h) {
                const __m256i bits = loadu256(x + offsetof(Blk, qs) + 32 * h);
                const __m512i b01 = join256(bits, _mm256_srli_epi16(bits, 2));  // values 0..63 of the half at bits 0..1
                __m512i q_lo = _mm512_and_si512(b01, m3);
                __m512i q_hi = _mm512_and_si512(_mm512_srli_epi16(b01, 4), m3);  // values 64..127
                if constexpr (kQ3) {
                    const __m256i hh = _mm256_srli_epi16(hm, 4 * h);
                    const __m512i h01 = join256(_mm256_and_si256(hh, one), _mm256_and_si256(_mm256_srli_epi16(hh, 1), one));
                    const __m512i h23 = join256(_mm256_and_si256(_mm256_srli_epi16(hh, 2), one), _mm256_and_si256(_mm256_srli_epi16(hh, 3), one));
                    q_lo = _mm512_or_si512(q_lo, _mm512_slli_epi16(h01, 2));
                    q_hi = _mm512_or_si512(q_hi, _mm512_slli_epi16(h23, 2));
                }
                const int g = 8 * h;
                const __m512i s_lo = scale16_quad(sc[g], sc[g + 1], sc[g + 2], sc[g + 3]);
                const __m512i s_hi = scale16_quad(sc[g + 4], sc[g + 5], sc[g + 6], sc[g + 7]);
                for (int c = 0; c < NC; ++c) {
                    const uint8_t* q8 = a[c] + b * kA + kAqs + 128 * h;
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(q_lo, loadu512(q8)), s_lo);
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(q_hi, loadu512(q8 + 64)), s_hi);
                }
            }
            const __m256i off16 = _mm256_cvtepi8_epi16(loadu128(offset));
            const float dw = load_f16(x + offsetof(Blk, d));
            float doff = dw;  // Q3_K: offsets scale with d
            if constexpr (!kQ3) doff = load_f16(x + offsetof(BlockQ2_K, dmin));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* ab = a[c] + b * kA;
                const float da = load_f32(ab);
                const __m256i osum = _mm256_madd_epi16(off16, loadu256(ab + kAsums));
                acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * da), i32_to_ps(sumi[c]), acc[c]);
                acc_off[c] = _mm256_fmadd_ps(_mm256_set1_ps(-doff * da), _mm256_cvtepi32_ps(osum), acc_off[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = hsum512_ps(acc[c]) + hsum_ps(acc_off[c]);
    }
};

template <class K>
void dot_k(const DotTile& t) {
    run_tile<kMaxCols>(t, K{t.n / kQK});
}

constexpr DotKernelEntry kDots[] = {
    {Type::Q2_K, dot_k<Q23KDot<false>>, false},
    {Type::Q3_K, dot_k<Q23KDot<true>>, false},
    {Type::Q4_K, dot_k<Q45KDot<false>>, false},
    {Type::Q5_K, dot_k<Q45KDot<true>>, false},
    {Type::Q6_K, dot_k<Q6KDot>, false},
};

}  // namespace

namespace detail {
const KernelTable kAvx512KquantKernels = {kDots, sizeof(kDots) / sizeof(kDots[0]), nullptr, 0};
}  // namespace detail

}  // namespace strata::cpu
