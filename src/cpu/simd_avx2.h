// Internal: the AVX2 level of the SIMD layer the kernel bodies (*_impl.h) are written against,
// plus helpers shared with the AVX-512 level. Only included by *_avx2.cpp / *_avx512.cpp: every
// function is `static` or in an unnamed namespace, so each file keeps a copy compiled for its own
// instruction set (no inline function shared between levels).
//
// SimdAvx2: f32 vectors of 8; 64 int8 values (or 32 int16) as two 256-bit halves `V` (the low
// half holds values 0..31; Q4_K/Q5_K); int32 sums of products in one 256-bit register (both
// halves summed lane by lane); the other 256-value types one 32-value sub-block at a time (Step),
// weight signs as +1 / -1 bytes applied with vpsignb.
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

// 32 bits -> 32 bytes of 0xff (bit set) / 0x00 (bit j of byte k: byte 8k + j).
static inline __m256i bytes_from_bits32(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// (s_lo x 8 | s_hi x 8) as int16: the scales of two 16-value groups, matching the lanes of a
// maddubs result over 32 values.
static inline __m256i scale16_pair256(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
}

namespace {

// 7 stored sign bits (+ implied parity bit 7) -> 8 bytes of +1 / -1, for vpsignb.
struct SignBytes {
    uint64_t v[128];
};
constexpr SignBytes make_sign_bytes() {
    SignBytes t{};
    for (int i = 0; i < 128; ++i) {
        int ones = 0;
        for (int b = 0; b < 7; ++b) ones += (i >> b) & 1;
        const int mask = i | ((ones & 1) << 7);
        uint64_t bytes = 0;
        for (int j = 0; j < 8; ++j) bytes |= static_cast<uint64_t>((mask >> j) & 1 ? 0xff : 0x01) << (8 * j);
        t.v[i] = bytes;
    }
    return t;
}
constexpr SignBytes kSignBytes = make_sign_bytes();

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

struct SimdAvx2 {
    static constexpr int kMaxCols = 4;  // activation columns per pass over a weight row (16 registers)

    // ---- f32 vectors of kFloats ------------------------------------------------------------------
    using F = __m256;
    static constexpr int kFloats = 8;
    static F zero() { return _mm256_setzero_ps(); }
    static F set1(float v) { return _mm256_set1_ps(v); }
    static F add(F a, F b) { return _mm256_add_ps(a, b); }
    static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static F max(F a, F b) { return _mm256_max_ps(a, b); }
    static F abs(F v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
    static float hsum(F v) { return hsum_ps(v); }
    static float hmax(F v) {
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        return _mm_cvtss_f32(h);
    }
    // kFloats values at p -> f32.
    static F load(const float* p) { return _mm256_loadu_ps(p); }
    static F load_f16(const uint8_t* p) { return _mm256_cvtph_ps(loadu128(p)); }
    static F load_bf16(const uint8_t* p) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16));
    }
    // 32 floats * scale -> 32 int8 in order, rounded to nearest even and clamped to [-127, 127].
    static __m256i quantize32(const float* x, F scale) {
        const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), scale));
        const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), scale));
        const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), scale));
        const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), scale));
        // packs work per 128-bit lane: bytes come out as dwords 0 4 1 5 2 6 3 7; the permute fixes it.
        const __m256i p16a = _mm256_packs_epi32(i0, i1);
        const __m256i p16b = _mm256_packs_epi32(i2, i3);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        return _mm256_max_epi8(p8, _mm256_set1_epi8(-127));
    }

    // ---- one 32-value block (256 bits at every level) ---------------------------------------------
    // Products of unsigned u and signed s, summed in fours -> 8 int32 (u <= 128 and |s| <= 127
    // keep maddubs' pair sums inside int16).
    static __m256i dot_u8x32(__m256i u, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)); }
    static __m256i bytes_from_bits(uint32_t bits) { return bytes_from_bits32(bits); }

    // ---- int32 sums of the 256-value types ----------------------------------------------------------
    using I32 = __m256i;
    static I32 zero_i32() { return _mm256_setzero_si256(); }
    static F to_f32(I32 v) { return _mm256_cvtepi32_ps(v); }

    // ---- 64 int8 values (or 32 int16) as two halves: Q4_K / Q5_K ------------------------------------
    struct V {
        __m256i lo, hi;
    };
    static V join(__m256i lo, __m256i hi) { return {lo, hi}; }
    static V load(const uint8_t* p) { return {loadu256(p), loadu256(p + 32)}; }
    static V set1_8(char v) { return {_mm256_set1_epi8(v), _mm256_set1_epi8(v)}; }
    static V and_(V a, V b) { return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)}; }
    static V or_(V a, V b) { return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)}; }
    static V slli16(V a, int n) { return {_mm256_slli_epi16(a.lo, n), _mm256_slli_epi16(a.hi, n)}; }
    // acc + the sum of u8 u x s8 s, pairs times the int16 scale of their lane (maddubs, madd).
    static I32 dot_scaled(I32 acc, V u, V s, V scale) {
        const __m256i p_lo = _mm256_madd_epi16(scale.lo, _mm256_maddubs_epi16(u.lo, s.lo));
        const __m256i p_hi = _mm256_madd_epi16(scale.hi, _mm256_maddubs_epi16(u.hi, s.hi));
        return _mm256_add_epi32(acc, _mm256_add_epi32(p_lo, p_hi));
    }
    // The 8 scales of 32 values (uint8) for NC columns: broadcast by vpshufb from one register
    // per block, whatever NC.
    struct PairShuffle {
        struct Block {
            __m256i v;             // the 8 scales as int16, in both 128-bit lanes
            V pair(int j) const {  // scales 2j, 2j + 1
                return {_mm256_shuffle_epi8(v, loadu256(kScaleShuffles.v[2 * j])),
                        _mm256_shuffle_epi8(v, loadu256(kScaleShuffles.v[2 * j + 1]))};
            }
        };
        Block block(const uint8_t scales[8]) const {
            return {_mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales))))};
        }
    };
    template <int NC>
    using PairScales = PairShuffle;

    // ---- the step of the other 256-value kernels (Q2_K, Q3_K, Q6_K, the i-quants): one 32-value
    // sub-block. Two at a time, as on AVX-512, would need more registers than AVX2's 16 and spill.
    struct Step {
        static constexpr int kSubs = 1;
        static constexpr int kDecodeAhead = 1;  // steps decoded before the columns take them
        using V = __m256i;
        static V load(const uint8_t* p) { return loadu256(p); }
        static V set1_8(char v) { return _mm256_set1_epi8(v); }
        static V and_(V a, V b) { return _mm256_and_si256(a, b); }
        static V or_(V a, V b) { return _mm256_or_si256(a, b); }
        static V slli16(V a, int n) { return _mm256_slli_epi16(a, n); }
        static I32 dot_scaled(I32 acc, V u, V s, V scale) {
            return _mm256_add_epi32(acc, _mm256_madd_epi16(scale, _mm256_maddubs_epi16(u, s)));
        }

        // k-quant bit fields, u the step's first sub-block in a 128-value half (values 32u + l):
        // 2-bit codes of 32 bytes, bits 2j..2j+1 of byte l for sub-block j (unmasked);
        using Crumbs = __m256i;
        static Crumbs crumbs(__m256i bytes) { return bytes; }
        static V crumb_plane(Crumbs c, int u) { return u != 0 ? _mm256_srli_epi16(c, 2 * u) : c; }
        // 1-bit fields of 32 bytes, bit j of byte l for sub-block j (as 0 / 1; j up to 7);
        static V bit_plane(__m256i bytes, int u) {
            return _mm256_and_si256(u != 0 ? _mm256_srli_epi16(bytes, u) : bytes, _mm256_set1_epi8(1));
        }
        // nibbles of 64 bytes: low nibbles of bytes 0..31, 32..63, then the high ones (unmasked).
        struct Nibbles {
            __m256i lo, hi;
        };
        static Nibbles nibbles(const uint8_t* p) { return {loadu256(p), loadu256(p + 32)}; }
        static V nibble_plane(Nibbles n, int u) {
            const __m256i v = u % 2 != 0 ? n.hi : n.lo;
            return u >= 2 ? _mm256_srli_epi16(v, 4) : v;
        }
        // The step's int8 scales of 16 values at sc (2 per sub-block), as int16 lanes.
        static V scales16_at(const int8_t* sc) { return scale16_pair256(sc[0], sc[1]); }
        // The same from a block's 16 scales for NC columns (g: the step's first group).
        template <int NC>
        struct Scales16 {
            struct Block {
                const int8_t* sc;
                V at(int g) const { return scale16_pair256(sc[g], sc[g + 1]); }
            };
            Block block(const int8_t* sc) const { return {sc}; }
        };

        // i-quants: unsigned grid magnitudes times activations with the weights' signs. The
        // decoder hands over each entry through a function of its index i in the step: grid
        // indices (4 or 8 per sub-block), sign words (4 x 7 bits each) or 7-bit sign indices (4
        // per sub-block), scales (1 per sub-block, or 2: one per 16 values).
        using Signs = __m256i;  // +1 / -1 bytes (0 allowed where the magnitude is 0), for vpsignb
        static V apply_sign(V a, Signs s) { return _mm256_sign_epi8(a, s); }
        // grid: a codebook array (GCC's unrolling estimates cost array indexing less than pointer
        // arithmetic, which matters for the decoders' loops).
        template <size_t N, class Idx>
        static V grid64(const uint64_t (&grid)[N], Idx idx) {
            return _mm256_set_epi64x(static_cast<int64_t>(grid[idx(3)]), static_cast<int64_t>(grid[idx(2)]),
                                     static_cast<int64_t>(grid[idx(1)]), static_cast<int64_t>(grid[idx(0)]));
        }
        template <size_t N, class Idx>
        static V grid32(const uint32_t (&grid)[N], Idx idx) {
            return _mm256_setr_epi32(static_cast<int>(grid[idx(0)]), static_cast<int>(grid[idx(1)]),
                                     static_cast<int>(grid[idx(2)]), static_cast<int>(grid[idx(3)]),
                                     static_cast<int>(grid[idx(4)]), static_cast<int>(grid[idx(5)]),
                                     static_cast<int>(grid[idx(6)]), static_cast<int>(grid[idx(7)]));
        }
        template <class Aux>
        static Signs signs_7bit(Aux aux) {
            const uint32_t a = aux(0);
            return signs_7bit_each([&](int i) { return (a >> (7 * i)) & 127; });
        }
        template <class Idx>
        static Signs signs_7bit_each(Idx idx) {
            return _mm256_set_epi64x(static_cast<int64_t>(kSignBytes.v[idx(3)]), static_cast<int64_t>(kSignBytes.v[idx(2)]),
                                     static_cast<int64_t>(kSignBytes.v[idx(1)]), static_cast<int64_t>(kSignBytes.v[idx(0)]));
        }
        static Signs signs_bits(const uint8_t* p) {  // explicit bits, bit j of byte k: value 8k + j negative
            return _mm256_or_si256(bytes_from_bits32(load_u32(p)), _mm256_set1_epi8(1));
        }
        template <class Scale>
        static V scales32(Scale s) {
            return _mm256_set1_epi16(static_cast<int16_t>(s(0)));
        }
        template <class Scale>
        static V scales16(Scale s) {
            return scale16_pair256(s(0), s(1));
        }
        // Scales of step st from a field of 4-bit values, one per sub-block (low nibble first):
        // f(s, nibble) for the step's sub-block s.
        template <class Fn>
        static V scales32_nibbles(const uint8_t* nibbles, int st, Fn f) {
            return _mm256_set1_epi16(static_cast<int16_t>(f(0, (nibbles[st >> 1] >> (4 * (st & 1))) & 15)));
        }
        // IQ4_XS: signed values looked up from nibbles (16 bytes a sub-block: low nibbles, then
        // high), their magnitudes and signs.
        using Table16 = __m128i;
        static Table16 table16(const int8_t* t) { return loadu128(t); }
        static V lookup_nibbles(const uint8_t* p, Table16 t) { return nibbles_lookup(p, t); }
        static V abs8(V q) { return _mm256_sign_epi8(q, q); }
        static Signs signs_of(V q) { return q; }
    };
};

}  // namespace

}  // namespace strata::cpu::detail
