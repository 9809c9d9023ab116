// Internal: the AVX-512 level of the SIMD layer the kernel bodies (*_impl.h) are written against
// (*_avx512.cpp only; every function is `static` or in an unnamed namespace).
//
// SimdAvx512: f32 vectors of 16; 64 int8 values (or 32 int16) in one 512-bit register `V`; the
// 256-value types two sub-blocks (64 values) at a time (Step), weight signs as a 64-bit mask
// (masked negate: AVX-512 has no vpsignb); VNNI for the products (vpdpbusd on 32-value blocks,
// vpdpwssd for the scaled pairs of the 256-value types).
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

#include <type_traits>

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

namespace {

// 7 stored sign bits -> the 8-bit mask with the implied parity bit 7 (bit j: value j negative).
struct SignMasks {
    uint8_t v[128];
};
constexpr SignMasks make_sign_masks() {
    SignMasks t{};
    for (int i = 0; i < 128; ++i) {
        int ones = 0;
        for (int b = 0; b < 7; ++b) ones += (i >> b) & 1;
        t.v[i] = static_cast<uint8_t>(i | ((ones & 1) << 7));
    }
    return t;
}
constexpr SignMasks kSignMasks = make_sign_masks();

// Sign mask of 32 values from a uint32 holding 4 x 7 sign bits (bits 0..27).
static inline uint64_t signs32(uint32_t aux) {
    return static_cast<uint64_t>(kSignMasks.v[aux & 127]) | static_cast<uint64_t>(kSignMasks.v[(aux >> 7) & 127]) << 8 |
           static_cast<uint64_t>(kSignMasks.v[(aux >> 14) & 127]) << 16 |
           static_cast<uint64_t>(kSignMasks.v[(aux >> 21) & 127]) << 24;
}

struct SimdAvx512 {
    static constexpr int kMaxCols = 8;  // activation columns per pass over a weight row (32 registers)

    // ---- f32 vectors of kFloats ------------------------------------------------------------------
    using F = __m512;
    static constexpr int kFloats = 16;
    static F zero() { return _mm512_setzero_ps(); }
    static F set1(float v) { return _mm512_set1_ps(v); }
    static F add(F a, F b) { return _mm512_add_ps(a, b); }
    static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static F max(F a, F b) { return _mm512_max_ps(a, b); }
    static F abs(F v) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff))); }
    static float hsum(F v) { return hsum512_ps(v); }
    static float hmax(F v) { return SimdAvx2::hmax(_mm256_max_ps(lo256_ps(v), hi256_ps(v))); }
    static F load(const float* p) { return _mm512_loadu_ps(p); }
    static F load_f16(const uint8_t* p) { return f16x16_to_ps(p); }
    static F load_bf16(const uint8_t* p) { return bf16x16_to_ps(p); }
    // 16 floats * scale -> 16 int8, rounded to nearest even, saturated, clamped to [-127, 127].
    static __m128i quantize16(const float* x, F scale) {
        const __m512i i32 = ps_to_i32(_mm512_mul_ps(_mm512_loadu_ps(x), scale));
        return _mm_max_epi8(_mm512_cvtsepi32_epi8(i32), _mm_set1_epi8(-127));
    }
    static __m256i quantize32(const float* x, F scale) {
        return _mm256_set_m128i(quantize16(x + 16, scale), quantize16(x, scale));
    }

    // ---- one 32-value block: VNNI sums the four products of each int32 lane in one instruction ----
    static __m256i dot_u8x32(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
    static __m256i bytes_from_bits(uint32_t bits) {
#if defined(STRATA_AVX512_EMULATED)
        return bytes_from_bits32(bits);
#else
        return _mm256_movm_epi8(static_cast<__mmask32>(bits));
#endif
    }

    // ---- int32 sums of the 256-value types ----------------------------------------------------------
    using I32 = __m512i;
    static I32 zero_i32() { return _mm512_setzero_si512(); }
    static F to_f32(I32 v) { return i32_to_ps(v); }

    // ---- 64 int8 values (or 32 int16) in one register: Q4_K / Q5_K ----------------------------------
    using V = __m512i;
    static V join(__m256i lo, __m256i hi) { return join256(lo, hi); }
    static V load(const uint8_t* p) { return loadu512(p); }
    static V set1_8(char v) { return _mm512_set1_epi8(v); }
    static V and_(V a, V b) { return _mm512_and_si512(a, b); }
    static V or_(V a, V b) { return _mm512_or_si512(a, b); }
    static V slli16(V a, int n) { return _mm512_slli_epi16(a, n); }
    // acc + the sum of u8 u x s8 s, pairs times the int16 scale of their lane (maddubs, VNNI
    // vpdpwssd).
    static I32 dot_scaled(I32 acc, V u, V s, V scale) { return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u, s), scale); }

    // Group scales spread by one permute from index vectors held through the loop for few
    // columns: the matrix-vector products of decode, where the broadcasts per scale were a large
    // share of the work (Q6_K 18.6 -> 22.3 GB/s on one thread). With more columns the index
    // registers push accumulators to the stack (prefill 7 % slower), so those broadcast.
    template <int NC>
    static constexpr bool kSpread = NC <= 2;
    // The 8 scales of 32 values (uint8) of Q4_K / Q5_K.
    struct PairSpread {
        __m512i idx[4] = {spread_index(0, 16), spread_index(2, 16), spread_index(4, 16), spread_index(6, 16)};
        struct Block {
            __m512i v;  // the 8 scales as int16 in the low 128 bits
            const __m512i* idx;
            V pair(int j) const { return spread_epi16(idx[j], v); }  // scales 2j, 2j + 1
        };
        Block block(const uint8_t scales[8]) const {
            return {_mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales)))), idx};
        }
    };
    struct PairBroadcast {
        struct Block {
            const uint8_t* scales;
            V pair(int j) const { return scale16_pair(scales[2 * j], scales[2 * j + 1]); }
        };
        Block block(const uint8_t scales[8]) const { return {scales}; }
    };
    template <int NC>
    using PairScales = std::conditional_t<kSpread<NC>, PairSpread, PairBroadcast>;
    // The 16 int8 scales of 16 values of Q6_K, four at a time (g: the first, a multiple of 4).
    struct QuadSpread {
        __m512i idx[4] = {spread_index(0, 8), spread_index(4, 8), spread_index(8, 8), spread_index(12, 8)};
        struct Block {
            __m512i v;  // the 16 scales as int16 in the low 256 bits
            const __m512i* idx;
            V at(int g) const { return spread_epi16(idx[g / 4], v); }
        };
        Block block(const int8_t* sc) const { return {_mm512_zextsi256_si512(_mm256_cvtepi8_epi16(loadu128(sc))), idx}; }
    };
    struct QuadBroadcast {
        struct Block {
            const int8_t* sc;
            V at(int g) const { return scale16_quad(sc[g], sc[g + 1], sc[g + 2], sc[g + 3]); }
        };
        Block block(const int8_t* sc) const { return {sc}; }
    };

    // ---- the step of the other 256-value kernels (Q2_K, Q3_K, Q6_K, the i-quants): two 32-value
    // sub-blocks (64 values), the operations as on AVX2 (see simd_avx2.h).
    struct Step {
        static constexpr int kSubs = 2;
        // Q6_K decodes a whole 128-value half (two steps) before the columns take it, as the
        // AVX-512 kernel always did: 32 registers hold it, and step by step lost 5 % DRAM-bound.
        static constexpr int kDecodeAhead = 2;
        using V = __m512i;
        static V load(const uint8_t* p) { return loadu512(p); }
        static V set1_8(char v) { return SimdAvx512::set1_8(v); }
        static V and_(V a, V b) { return SimdAvx512::and_(a, b); }
        static V or_(V a, V b) { return SimdAvx512::or_(a, b); }
        static V slli16(V a, int n) { return SimdAvx512::slli16(a, n); }
        static I32 dot_scaled(I32 acc, V u, V s, V scale) { return SimdAvx512::dot_scaled(acc, u, s, scale); }

        // k-quant bit fields (u: the step's first sub-block in a 128-value half).
        using Crumbs = __m512i;  // sub-blocks 0, 1 at bits 0..1 of the two halves
        static Crumbs crumbs(__m256i bytes) { return join256(bytes, _mm256_srli_epi16(bytes, 2)); }
        static V crumb_plane(Crumbs c, int u) { return u != 0 ? _mm512_srli_epi16(c, 2 * u) : c; }
        static V bit_plane(__m256i bytes, int u) {
            const __m256i one = _mm256_set1_epi8(1);
            return join256(_mm256_and_si256(u != 0 ? _mm256_srli_epi16(bytes, u) : bytes, one),
                           _mm256_and_si256(_mm256_srli_epi16(bytes, u + 1), one));
        }
        struct Nibbles {
            __m512i v;
        };
        static Nibbles nibbles(const uint8_t* p) { return {loadu512(p)}; }
        static V nibble_plane(Nibbles n, int u) { return u != 0 ? _mm512_srli_epi16(n.v, 4) : n.v; }
        static V scales16_at(const int8_t* sc) { return scale16_quad(sc[0], sc[1], sc[2], sc[3]); }
        template <int NC>
        using Scales16 = std::conditional_t<kSpread<NC>, QuadSpread, QuadBroadcast>;

        // i-quants.
        using Signs = __mmask64;  // bit set = negative
        static V apply_sign(V a, Signs s) { return detail::apply_sign(a, s); }
        template <size_t N, class Idx>
        static V grid64(const uint64_t (&grid)[N], Idx idx) {
            const auto g = [&](int k) { return static_cast<long long>(grid[idx(k)]); };
            return _mm512_set_epi64(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0));
        }
        template <size_t N, class Idx>
        static V grid32(const uint32_t (&grid)[N], Idx idx) {
            const auto g = [&](int k) { return static_cast<int>(grid[idx(k)]); };
            return _mm512_set_epi32(g(15), g(14), g(13), g(12), g(11), g(10), g(9), g(8), g(7), g(6), g(5), g(4), g(3), g(2),
                                    g(1), g(0));
        }
        template <class Aux>
        static Signs signs_7bit(Aux aux) {
            return static_cast<__mmask64>(signs32(aux(0)) | signs32(aux(1)) << 32);
        }
        template <class Idx>
        static Signs signs_7bit_each(Idx idx) {
            uint64_t neg = 0;
            for (int k = 0; k < 8; ++k) neg |= static_cast<uint64_t>(kSignMasks.v[idx(k)]) << (8 * k);
            return static_cast<__mmask64>(neg);
        }
        static Signs signs_bits(const uint8_t* p) {
            uint64_t neg;
            std::memcpy(&neg, p, 8);
            return static_cast<__mmask64>(neg);
        }
        template <class Scale>
        static V scales32(Scale s) {
            return scale16_pair(s(0), s(1));
        }
        template <class Scale>
        static V scales16(Scale s) {
            return scale16_quad(s(0), s(1), s(2), s(3));
        }
        template <class Fn>
        static V scales32_nibbles(const uint8_t* nibbles, int st, Fn f) {
            const uint8_t b = nibbles[st];
            return scale16_pair(f(0, b & 15), f(1, b >> 4));
        }
        using Table16 = __m512i;
        static Table16 table16(const int8_t* t) { return _mm512_broadcast_i32x4(loadu128(t)); }
        static V lookup_nibbles(const uint8_t* p, Table16 t) {
            return _mm512_shuffle_epi8(t, join256(nibbles_lo_hi(p), nibbles_lo_hi(p + 16)));
        }
        static V abs8(V q) { return _mm512_abs_epi8(q); }
        static Signs signs_of(V q) { return _mm512_movepi8_mask(q); }
    };
};

}  // namespace

}  // namespace strata::cpu::detail
