// The body of the activation quantisers, compiled once per instruction-set level by
// act_quant_avx2.cpp / act_quant_avx512.cpp against that level's SIMD layer S (simd_avx2.h,
// simd_avx512.h). Everything is in an unnamed namespace, so each level gets its own copy.
//
// Byte-identical to act_quant_scalar.cpp: the same formulas, the scale computed in scalar f32,
// rounding by cvtps2dq in the default nearest-even mode, saturating narrowing then a clamp to
// -127. Shapes: n values in (a multiple of the format's block: 32 for Q8_0 / Q8_1, 256 for Q8_K,
// any n for BF16), one row of blocks out.
#pragma once

#include <cstddef>
#include <cstring>

#include "cpu/kernel_registry.h"
#include "quant/blocks.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

template <class S>
static inline float abs_max(const float* x, int n) {  // n: multiple of 2 * S::kFloats
    typename S::F m0 = S::zero(), m1 = S::zero();
    for (int i = 0; i < n; i += 2 * S::kFloats) {
        m0 = S::max(m0, S::abs(S::load(x + i)));
        m1 = S::max(m1, S::abs(S::load(x + i + S::kFloats)));
    }
    return S::hmax(S::max(m0, m1));
}

// Sum of the 32 int8 at q: bias to unsigned, sum groups of 8 with psadbw, remove the bias.
// s16[0] gets the sum of bytes 0..15, s16[1] of 16..31.
static inline void sums16(__m256i q, int* s16) {
    const __m256i s8 = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(-128)), _mm256_setzero_si256());
    alignas(32) int64_t s[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(s), s8);
    s16[0] = static_cast<int>(s[0] + s[1] - 16 * 128);
    s16[1] = static_cast<int>(s[2] + s[3] - 16 * 128);
}

// The scale of a 32-value block: d = amax / 127 (in f32, before Q8_0 rounds it to f16) and the
// factor that quantises, 127 / amax (0 for an all-zero block).
struct BlockScale {
    float d, id;
};
template <class S>
static inline BlockScale block_scale32(const float* x) {
    const float amax = abs_max<S>(x, 32);
    return {amax / 127.0f, amax != 0.0f ? 127.0f / amax : 0.0f};
}

template <class S>
void quantize_q8_0(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        uint8_t* blk = out + b * sizeof(BlockQ8_0);
        const BlockScale sc = block_scale32<S>(x);
        const uint16_t dh = _cvtss_sh(sc.d, _MM_FROUND_TO_NEAREST_INT);
        std::memcpy(blk + offsetof(BlockQ8_0, d), &dh, 2);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + offsetof(BlockQ8_0, qs)), S::quantize32(x, S::set1(sc.id)));
    }
}

// Q8_1: Q8_0's values with an f32 scale and s = d * sum(qs).
template <class S>
void quantize_q8_1(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        uint8_t* blk = out + b * sizeof(BlockQ8_1Act);
        const BlockScale sc = block_scale32<S>(x);
        const __m256i q = S::quantize32(x, S::set1(sc.id));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + offsetof(BlockQ8_1Act, qs)), q);
        int s16[2];
        sums16(q, s16);
        const float s = sc.d * static_cast<float>(s16[0] + s16[1]);
        std::memcpy(blk + offsetof(BlockQ8_1Act, d), &sc.d, 4);
        std::memcpy(blk + offsetof(BlockQ8_1Act, s), &s, 4);
    }
}

template <class S>
void quantize_q8_k(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
        uint8_t* blk = out + b * sizeof(BlockQ8_K);
        const float amax = abs_max<S>(x, kQK);
        if (amax == 0.0f) {
            std::memset(blk, 0, sizeof(BlockQ8_K));
            continue;
        }
        const float iscale = 127.0f / amax;
        const float d = 1.0f / iscale;
        std::memcpy(blk + offsetof(BlockQ8_K, d), &d, 4);
        const typename S::F scale = S::set1(iscale);
        int16_t sums[16];
        for (int i = 0; i < kQK / 32; ++i) {
            const __m256i q = S::quantize32(x + 32 * i, scale);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + offsetof(BlockQ8_K, qs) + 32 * i), q);
            int s16[2];
            sums16(q, s16);
            sums[2 * i] = static_cast<int16_t>(s16[0]);
            sums[2 * i + 1] = static_cast<int16_t>(s16[1]);
        }
        std::memcpy(blk + offsetof(BlockQ8_K, bsums), sums, sizeof sums);
    }
}

// f32 -> bf16, nearest-even, NaNs kept quiet: as f32_to_bf16 in util/fp16.h, 8 at a time.
static inline __m128i bf16x8(const float* x) {
    const __m256i v = _mm256_castps_si256(_mm256_loadu_ps(x));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(v, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(64));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// 256-bit code at every level (the AVX-512 table leaves it to the AVX2 one, kernels.cpp).
template <class S>
void quantize_bf16(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), bf16x8(x + i));
    if (i < n) {
        float tail[8] = {};
        std::memcpy(tail, x + i, static_cast<size_t>(n - i) * 4);
        alignas(16) uint16_t h[8];
        _mm_store_si128(reinterpret_cast<__m128i*>(h), bf16x8(tail));
        std::memcpy(out + 2 * i, h, static_cast<size_t>(n - i) * 2);
    }
}

}  // namespace
}  // namespace strata::cpu
