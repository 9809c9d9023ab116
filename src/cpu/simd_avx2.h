// Internal helpers of the AVX2 kernel files (only included by *_avx2.cpp / *_avx512.cpp; every
// function is `static` so each file keeps a copy compiled for its own instruction set).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace strata::cpu::detail {

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

static inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

static inline float load_f32(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}

// f16 at p (any alignment) -> f32, with F16C.
static inline float load_f16(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

static inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
static inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 16 bytes of packed nibbles -> 32 bytes: low nibbles in the low 128 bits, high nibbles above
// (the value order of Q4_0 / IQ4_NL / MXFP4 / IQ4_XS sub-blocks).
static inline __m256i nibbles_lo_hi(const uint8_t* p) {
    const __m128i bits = loadu128(p);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bits, 4), m4), _mm_and_si128(bits, m4));
}

// Same, looked up in a 16-entry int8 table (IQ4_NL levels, MXFP4 codes).
static inline __m256i nibbles_lookup(const uint8_t* p, __m128i table) {
    const __m128i bits = loadu128(p);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)),
                            _mm_shuffle_epi8(table, _mm_and_si128(bits, m4)));
}

// Products of signed w and signed a, summed in pairs to int16: maddubs wants unsigned x signed,
// so move w's sign onto a (a is never -128, so negating it cannot overflow; |w| = 128 stays
// 128 as unsigned). Pair sums stay within int16 when |w| <= 128 and |a| <= 127.
static inline __m256i mul_i8_pairs(__m256i w_abs, __m256i w, __m256i a) {
    return _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a, w));
}

}  // namespace strata::cpu::detail
