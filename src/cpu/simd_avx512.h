// Internal helpers of the AVX-512 kernel files (*_avx512.cpp only; every function is `static`).
//
// STRATA_AVX512_EMULATED (a test-only build, never the product): the AVX-512 intrinsics come
// from SIMDe's portable implementations, so the kernels can be checked on a CPU without
// AVX-512. The few helpers below whose AVX-512 intrinsic SIMDe lacks use the equivalent AVX2
// pair in that build; the native branch is the single intrinsic of the same meaning.
#pragma once

// GCC 12's AVX-512 intrinsics build their "undefined" pass-through operands from
// self-initialised variables, which -Wmaybe-uninitialized (and, once inlining folds them,
// -Wuninitialized) reports (at the end of the file, so the whole file has to opt out). The
// warning says nothing about our code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(STRATA_AVX512_EMULATED)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#endif
#include <immintrin.h>

#include "cpu/simd_avx2.h"

namespace strata::cpu::detail {

static inline __m512i loadu512(const void* p) { return _mm512_loadu_si512(p); }

// [lo | hi] from two 256-bit halves.
static inline __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
static inline __m512 join256_ps(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }

static inline __m256i lo256(__m512i v) { return _mm512_castsi512_si256(v); }
static inline __m256i hi256(__m512i v) { return _mm512_extracti64x4_epi64(v, 1); }
static inline __m256 lo256_ps(__m512 v) { return _mm512_castps512_ps256(v); }
static inline __m256 hi256_ps(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

static inline float hsum512_ps(__m512 v) { return hsum_ps(_mm256_add_ps(lo256_ps(v), hi256_ps(v))); }

static inline __m512 i32_to_ps(__m512i v) {
#if defined(STRATA_AVX512_EMULATED)
    return join256_ps(_mm256_cvtepi32_ps(lo256(v)), _mm256_cvtepi32_ps(hi256(v)));
#else
    return _mm512_cvtepi32_ps(v);
#endif
}

// Round to nearest (even) in the default MXCSR mode, as cvtps2dq.
static inline __m512i ps_to_i32(__m512 v) {
#if defined(STRATA_AVX512_EMULATED)
    return join256(_mm256_cvtps_epi32(lo256_ps(v)), _mm256_cvtps_epi32(hi256_ps(v)));
#else
    return _mm512_cvtps_epi32(v);
#endif
}

// 16 f16 at p -> f32.
static inline __m512 f16x16_to_ps(const uint8_t* p) {
#if defined(STRATA_AVX512_EMULATED)
    return join256_ps(_mm256_cvtph_ps(loadu128(p)), _mm256_cvtph_ps(loadu128(p + 16)));
#else
    return _mm512_cvtph_ps(loadu256(p));
#endif
}

// 16 bf16 at p -> f32 (exact: bf16 is the top half of an f32).
static inline __m512 bf16x16_to_ps(const uint8_t* p) {
#if defined(STRATA_AVX512_EMULATED)
    const __m256i lo = _mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16);
    const __m256i hi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p + 16)), 16);
    return _mm512_castsi512_ps(join256(lo, hi));
#else
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu256(p)), 16));
#endif
}

// int16 vector: 16 x lo then 16 x hi (the scales of two 32-value sub-blocks, laid out like a
// maddubs result over 64 values).
static inline __m512i scale16_pair(int lo, int hi) {
    return join256(_mm256_set1_epi16(static_cast<int16_t>(lo)), _mm256_set1_epi16(static_cast<int16_t>(hi)));
}

// Lane i of the result = lane idx[i] of v (int16 lanes; v's used lanes may sit in its low
// 128 or 256 bits): the group scales of a block spread over a maddubs result in one shuffle,
// instead of a broadcast per scale.
static inline __m512i spread_epi16(__m512i idx, __m512i v) { return _mm512_permutexvar_epi16(idx, v); }
// idx for spread_epi16: lane i picks `first` + i / per (per 16: two 32-value sub-blocks; per 8:
// four 16-value groups). Built once per kernel call.
static inline __m512i spread_index(int first, int per) {
    int16_t idx[32];
    for (int i = 0; i < 32; ++i) idx[i] = static_cast<int16_t>(first + i / per);
    return loadu512(idx);
}

// int16 vector: 8 x s0, 8 x s1, 8 x s2, 8 x s3 (scales of four 16-value groups).
static inline __m512i scale16_quad(int s0, int s1, int s2, int s3) {
    return join256(_mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)), _mm_set1_epi16(static_cast<int16_t>(s0))),
                   _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s3)), _mm_set1_epi16(static_cast<int16_t>(s2))));
}

// a with the sign of w (bytes where w < 0 negated; a is never -128). AVX-512 has no vpsignb.
static inline __m512i apply_sign(__m512i a, __mmask64 negative) {
    return _mm512_mask_sub_epi8(a, negative, _mm512_setzero_si512(), a);
}

}  // namespace strata::cpu::detail
