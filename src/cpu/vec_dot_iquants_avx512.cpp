// AVX-512 kernels for the 256-value i-quants (IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S)
// with Q8_K activations: two 32-value sub-blocks per 512-bit register, up to 8 activation
// columns per pass over a weight row.
//
// Weight signs become a 64-bit mask once per 64 values; each column then needs one masked
// negate of its activations, vpmaddubsw (|w| x a) and VNNI vpdpwssd with the sub-block scales.
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
constexpr size_t kA = sizeof(BlockQ8_K);
constexpr size_t kAqs = offsetof(BlockQ8_K, qs);

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
           static_cast<uint64_t>(kSignMasks.v[(aux >> 14) & 127]) << 16 | static_cast<uint64_t>(kSignMasks.v[(aux >> 21) & 127]) << 24;
}

// Two decoded sub-blocks (64 values): unsigned magnitudes, negative-value mask, int16 scales.
struct Sub64 {
    __m512i mag;
    __mmask64 neg;
    __m512i scale;
};

template <int NC>
static inline void accumulate(const Sub64& s, const uint8_t* const* a, int64_t b, int pair, __m512i* sumi) {
    for (int c = 0; c < NC; ++c) {
        const __m512i q8 = apply_sign(loadu512(a[c] + b * kA + kAqs + 64 * pair), s.neg);
        sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(s.mag, q8), s.scale);
    }
}

struct IQ2XXS {
    using Blk = BlockIQ2_XXS;
    static constexpr float kFactor = 0.125f;
    static Sub64 decode(const uint8_t* x, int pair) {  // sub-blocks 2 * pair, 2 * pair + 1
        const uint8_t* p = x + offsetof(Blk, qs) + 16 * pair;
        const uint32_t aux0 = load_u32(p + 4), aux1 = load_u32(p + 12);
        const auto g = [&](int k) { return static_cast<long long>(kIq2XxsGrid[p[k]]); };
        return {_mm512_set_epi64(g(11), g(10), g(9), g(8), g(3), g(2), g(1), g(0)),
                static_cast<__mmask64>(signs32(aux0) | signs32(aux1) << 32),
                scale16_pair(static_cast<int>(2 * (aux0 >> 28) + 1), static_cast<int>(2 * (aux1 >> 28) + 1))};
    }
};

struct IQ3XXS {
    using Blk = BlockIQ3_XXS;
    static constexpr float kFactor = 0.25f;
    static Sub64 decode(const uint8_t* x, int pair) {
        const uint8_t* q3 = x + offsetof(Blk, qs) + 16 * pair;
        const uint8_t* gas = x + offsetof(Blk, qs) + 64 + 8 * pair;
        const uint32_t aux0 = load_u32(gas), aux1 = load_u32(gas + 4);
        const auto g = [&](int k) { return static_cast<int>(kIq3XxsGrid[q3[k]]); };
        return {_mm512_set_epi32(g(15), g(14), g(13), g(12), g(11), g(10), g(9), g(8), g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0)),
                static_cast<__mmask64>(signs32(aux0) | signs32(aux1) << 32),
                scale16_pair(static_cast<int>(2 * (aux0 >> 28) + 1), static_cast<int>(2 * (aux1 >> 28) + 1))};
    }
};

struct IQ2XS {
    using Blk = BlockIQ2_XS;
    static constexpr float kFactor = 0.125f;
    static Sub64 decode(const uint8_t* x, int pair) {
        const uint8_t* p = x + offsetof(Blk, qs) + 16 * pair;  // 8 codes: 9-bit grid index | 7 sign bits << 9
        uint32_t code[8];
        for (int k = 0; k < 8; ++k) code[k] = load_u16(p + 2 * k);
        uint64_t neg = 0;
        for (int k = 0; k < 8; ++k) neg |= static_cast<uint64_t>(kSignMasks.v[code[k] >> 9]) << (8 * k);
        const auto g = [&](int k) { return static_cast<long long>(kIq2XsGrid[code[k] & 511]); };
        const uint8_t s0 = x[offsetof(Blk, scales) + 2 * pair], s1 = x[offsetof(Blk, scales) + 2 * pair + 1];
        return {_mm512_set_epi64(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0)), static_cast<__mmask64>(neg),
                scale16_quad(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1)};
    }
};

struct IQ2S {
    using Blk = BlockIQ2_S;
    static constexpr float kFactor = 0.125f;
    static Sub64 decode(const uint8_t* x, int pair) {
        const uint8_t* qs = x + offsetof(Blk, qs) + 8 * pair;  // 8 low index bytes; their sign bytes 32 further
        const uint32_t qh = load_u16(x + offsetof(Blk, qh) + 2 * pair);  // 2 high bits per index
        const auto g = [&](int k) { return static_cast<long long>(kIq2SGrid[qs[k] | (((qh >> (2 * k)) & 3) << 8)]); };
        uint64_t neg;
        std::memcpy(&neg, qs + 32, 8);
        const uint8_t s0 = x[offsetof(Blk, scales) + 2 * pair], s1 = x[offsetof(Blk, scales) + 2 * pair + 1];
        return {_mm512_set_epi64(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0)), static_cast<__mmask64>(neg),
                scale16_quad(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1)};
    }
};

struct IQ3S {
    using Blk = BlockIQ3_S;
    static constexpr float kFactor = 1.0f;
    static Sub64 decode(const uint8_t* x, int pair) {
        const uint8_t* qs = x + offsetof(Blk, qs) + 16 * pair;             // 16 low index bytes
        const uint32_t qh = load_u16(x + offsetof(Blk, qh) + 2 * pair);  // bit 8 of each index
        const auto g = [&](int k) { return static_cast<int>(kIq3SGrid[qs[k] | (((qh >> k) & 1) << 8)]); };
        uint64_t neg;
        std::memcpy(&neg, x + offsetof(Blk, signs) + 8 * pair, 8);
        const uint8_t sc = x[offsetof(Blk, scales) + pair];
        return {_mm512_set_epi32(g(15), g(14), g(13), g(12), g(11), g(10), g(9), g(8), g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0)),
                static_cast<__mmask64>(neg), scale16_pair(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1)};
    }
};

template <class D>
struct GridDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        __m512 acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(typename D::Blk);
            __m512i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm512_setzero_si512();
            for (int pair = 0; pair < 4; ++pair) accumulate<NC>(D::decode(x, pair), a, b, pair, sumi);
            const float dw = load_f16(x + offsetof(typename D::Blk, d));
            for (int c = 0; c < NC; ++c) {
                acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * load_f32(a[c] + b * kA)), i32_to_ps(sumi[c]), acc[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = D::kFactor * hsum512_ps(acc[c]);
    }
};

// IQ4_XS: signed table values; |w| and the sign mask come from the looked-up bytes.
struct IQ4XSDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        const __m512i table = _mm512_broadcast_i32x4(loadu128(kIq4NlValues));
        __m512 acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(BlockIQ4_XS);
            const uint32_t sh = load_u16(x + offsetof(BlockIQ4_XS, scales_h));
            __m512i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm512_setzero_si512();
            for (int pair = 0; pair < 4; ++pair) {
                // Sub-blocks 2p and 2p + 1, each [low nibbles | high nibbles] (value order).
                const uint8_t* qs = x + offsetof(BlockIQ4_XS, qs) + 32 * pair;
                const __m512i q = _mm512_shuffle_epi8(table, join256(nibbles_lo_hi(qs), nibbles_lo_hi(qs + 16)));
                const __m512i q_abs = _mm512_abs_epi8(q);
                const __mmask64 neg = _mm512_movepi8_mask(q);
                const uint8_t sl = x[offsetof(BlockIQ4_XS, scales_l) + pair];
                const int ls0 = ((sl & 15) | (((sh >> (4 * pair)) & 3) << 4)) - 32;
                const int ls1 = ((sl >> 4) | (((sh >> (4 * pair + 2)) & 3) << 4)) - 32;
                const __m512i scale = scale16_pair(ls0, ls1);
                for (int c = 0; c < NC; ++c) {
                    const __m512i q8 = apply_sign(loadu512(a[c] + b * kA + kAqs + 64 * pair), neg);
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(q_abs, q8), scale);
                }
            }
            const float dw = load_f16(x + offsetof(BlockIQ4_XS, d));
            for (int c = 0; c < NC; ++c) {
                acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * load_f32(a[c] + b * kA)), i32_to_ps(sumi[c]), acc[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = hsum512_ps(acc[c]);
    }
};

template <class K>
void dot_iq(const DotTile& t) {
    run_tile<kMaxCols>(t, K{t.n / kQK});
}

constexpr DotKernelEntry kDots[] = {
    {Type::IQ4_XS, dot_iq<IQ4XSDot>, false},
    {Type::IQ2_XXS, dot_iq<GridDot<IQ2XXS>>, false},
    {Type::IQ2_XS, dot_iq<GridDot<IQ2XS>>, false},
    {Type::IQ2_S, dot_iq<GridDot<IQ2S>>, false},
    {Type::IQ3_XXS, dot_iq<GridDot<IQ3XXS>>, false},
    {Type::IQ3_S, dot_iq<GridDot<IQ3S>>, false},
};

}  // namespace

namespace detail {
const KernelTable kAvx512IquantKernels = {kDots, sizeof(kDots) / sizeof(kDots[0]), nullptr, 0};
}  // namespace detail

}  // namespace strata::cpu
