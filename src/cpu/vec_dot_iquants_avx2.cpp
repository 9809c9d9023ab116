// AVX2 kernels for the 256-value i-quants (IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) with
// Q8_K activations, up to 4 activation columns per pass over a weight row.
//
// The grid codebooks are looked up with scalar loads into a vector (one lookup per 8 or 4
// values); that decoding is done once per 32 values and shared by the columns. Grid magnitudes
// are unsigned (<= 62), so each column needs one sign op on its activations (sign_epi8 with the
// +-1 pattern of the weights' signs) and a maddubs; the sub-block scale is applied with madd.
#include <cstddef>

#include "cpu/kernel_registry.h"
#include "cpu/simd_avx2.h"
#include "cpu/simd_tile.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

constexpr int kMaxCols = 4;
constexpr size_t kA = sizeof(BlockQ8_K);
constexpr size_t kAqs = offsetof(BlockQ8_K, qs);

// 7 stored sign bits (+ implied parity bit 7) -> 8 bytes of +1 / -1, for sign_epi8.
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

static inline __m256i signs_from_7bit(uint32_t s0, uint32_t s1, uint32_t s2, uint32_t s3) {
    return _mm256_set_epi64x(static_cast<int64_t>(kSignBytes.v[s3]), static_cast<int64_t>(kSignBytes.v[s2]),
                             static_cast<int64_t>(kSignBytes.v[s1]), static_cast<int64_t>(kSignBytes.v[s0]));
}

// 32 explicit sign bits (bit j of byte k = value 8k + j negative) -> 32 bytes of +1 / -1.
static inline __m256i signs_from_bits(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_or_si256(set, _mm256_set1_epi8(1));
}

static inline __m256i grid64x4(const uint64_t* grid, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
    return _mm256_set_epi64x(static_cast<int64_t>(grid[i3]), static_cast<int64_t>(grid[i2]),
                             static_cast<int64_t>(grid[i1]), static_cast<int64_t>(grid[i0]));
}

static inline __m256i grid32x8(const uint32_t* grid, const uint32_t idx[8]) {
    return _mm256_setr_epi32(static_cast<int>(grid[idx[0]]), static_cast<int>(grid[idx[1]]), static_cast<int>(grid[idx[2]]),
                             static_cast<int>(grid[idx[3]]), static_cast<int>(grid[idx[4]]), static_cast<int>(grid[idx[5]]),
                             static_cast<int>(grid[idx[6]]), static_cast<int>(grid[idx[7]]));
}

// One decoded sub-block of 32 values: unsigned magnitudes, +-1 signs, int16 scale(s) laid out
// like a maddubs result (low 128 bits: values 0..15).
struct Sub32 {
    __m256i mag;
    __m256i sign;
    __m256i scale;
};

// Accumulates sub-block s of block b for NC columns into sumi.
template <int NC>
static inline void accumulate(const Sub32& s, const uint8_t* const* a, int64_t b, int sub, __m256i* sumi) {
    for (int c = 0; c < NC; ++c) {
        const __m256i q8 = loadu256(a[c] + b * kA + kAqs + 32 * sub);
        const __m256i p16 = _mm256_maddubs_epi16(s.mag, _mm256_sign_epi8(q8, s.sign));
        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(s.scale, p16));
    }
}

// Decoders: Sub32 for sub-block `sub` of block x.
struct IQ2XXS {
    using Blk = BlockIQ2_XXS;
    static constexpr float kFactor = 0.125f;
    static Sub32 decode(const uint8_t* x, int sub) {
        const uint8_t* p = x + offsetof(Blk, qs) + 8 * sub;
        const uint32_t aux = load_u32(p + 4);
        return {grid64x4(kIq2XxsGrid, p[0], p[1], p[2], p[3]),
                signs_from_7bit(aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127),
                _mm256_set1_epi16(static_cast<int16_t>(2 * (aux >> 28) + 1))};
    }
};

struct IQ2XS {
    using Blk = BlockIQ2_XS;
    static constexpr float kFactor = 0.125f;
    static Sub32 decode(const uint8_t* x, int sub) {
        const uint8_t* p = x + offsetof(Blk, qs) + 8 * sub;
        uint32_t code[4];
        for (int k = 0; k < 4; ++k) code[k] = load_u16(p + 2 * k);
        const uint8_t sc = x[offsetof(Blk, scales) + sub];
        return {grid64x4(kIq2XsGrid, code[0] & 511, code[1] & 511, code[2] & 511, code[3] & 511),
                signs_from_7bit(code[0] >> 9, code[1] >> 9, code[2] >> 9, code[3] >> 9),
                _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(2 * (sc >> 4) + 1)),
                                 _mm_set1_epi16(static_cast<int16_t>(2 * (sc & 15) + 1)))};
    }
};

struct IQ2S {
    using Blk = BlockIQ2_S;
    static constexpr float kFactor = 0.125f;
    static Sub32 decode(const uint8_t* x, int sub) {
        const uint8_t* qs = x + offsetof(Blk, qs) + 4 * sub;
        const uint32_t qh = x[offsetof(Blk, qh) + sub];
        const uint8_t sc = x[offsetof(Blk, scales) + sub];
        return {grid64x4(kIq2SGrid, qs[0] | ((qh << 8) & 0x300), qs[1] | ((qh << 6) & 0x300), qs[2] | ((qh << 4) & 0x300),
                         qs[3] | ((qh << 2) & 0x300)),
                signs_from_bits(load_u32(qs + 32)),
                _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(2 * (sc >> 4) + 1)),
                                 _mm_set1_epi16(static_cast<int16_t>(2 * (sc & 15) + 1)))};
    }
};

struct IQ3XXS {
    using Blk = BlockIQ3_XXS;
    static constexpr float kFactor = 0.25f;
    static Sub32 decode(const uint8_t* x, int sub) {
        const uint8_t* q3 = x + offsetof(Blk, qs) + 8 * sub;
        const uint32_t aux = load_u32(x + offsetof(Blk, qs) + 64 + 4 * sub);
        const uint32_t idx[8] = {q3[0], q3[1], q3[2], q3[3], q3[4], q3[5], q3[6], q3[7]};
        return {grid32x8(kIq3XxsGrid, idx), signs_from_7bit(aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127),
                _mm256_set1_epi16(static_cast<int16_t>(2 * (aux >> 28) + 1))};
    }
};

struct IQ3S {
    using Blk = BlockIQ3_S;
    static constexpr float kFactor = 1.0f;
    static Sub32 decode(const uint8_t* x, int sub) {
        const uint8_t* qs = x + offsetof(Blk, qs) + 8 * sub;
        const uint32_t qh = x[offsetof(Blk, qh) + sub];
        uint32_t idx[8];
        for (int k = 0; k < 8; ++k) idx[k] = qs[k] | (((qh >> k) & 1) << 8);
        const uint8_t sc = x[offsetof(Blk, scales) + sub / 2];
        return {grid32x8(kIq3SGrid, idx), signs_from_bits(load_u32(x + offsetof(Blk, signs) + 4 * sub)),
                _mm256_set1_epi16(static_cast<int16_t>(2 * ((sc >> (4 * (sub % 2))) & 15) + 1))};
    }
};

template <class D>
struct GridDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        __m256 acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(typename D::Blk);
            __m256i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
            for (int sub = 0; sub < 8; ++sub) accumulate<NC>(D::decode(x, sub), a, b, sub, sumi);
            const float dw = load_f16(x + offsetof(typename D::Blk, d));
            for (int c = 0; c < NC; ++c) {
                const __m256 d = _mm256_set1_ps(dw * load_f32(a[c] + b * kA));
                acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), acc[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = D::kFactor * hsum_ps(acc[c]);
    }
};

// IQ4_XS: signed table values (IQ4_NL levels) with signed scales ls - 32.
struct IQ4XSDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        const __m128i table = loadu128(kIq4NlValues);
        __m256 acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(BlockIQ4_XS);
            const uint32_t sh = load_u16(x + offsetof(BlockIQ4_XS, scales_h));
            __m256i sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
            for (int sub = 0; sub < 8; ++sub) {
                const int ls = ((x[offsetof(BlockIQ4_XS, scales_l) + sub / 2] >> (4 * (sub % 2))) & 15) | (((sh >> (2 * sub)) & 3) << 4);
                const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(ls - 32));
                const __m256i q = nibbles_lookup(x + offsetof(BlockIQ4_XS, qs) + 16 * sub, table);
                const __m256i q_abs = _mm256_sign_epi8(q, q);
                for (int c = 0; c < NC; ++c) {
                    const __m256i q8 = loadu256(a[c] + b * kA + kAqs + 32 * sub);
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(scale, mul_i8_pairs(q_abs, q, q8)));
                }
            }
            const float dw = load_f16(x + offsetof(BlockIQ4_XS, d));
            for (int c = 0; c < NC; ++c) {
                const __m256 d = _mm256_set1_ps(dw * load_f32(a[c] + b * kA));
                acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), acc[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = hsum_ps(acc[c]);
    }
};

template <class K>
void dot_iq(const DotTile& t) {
    run_tile<kMaxCols>(t, K{t.n / kQK});
}

constexpr DotKernelEntry kDots[] = {
    {Type::IQ4_XS, dot_iq<IQ4XSDot>, false},          {Type::IQ2_XXS, dot_iq<GridDot<IQ2XXS>>, false},
    {Type::IQ2_XS, dot_iq<GridDot<IQ2XS>>, false},    {Type::IQ2_S, dot_iq<GridDot<IQ2S>>, false},
    {Type::IQ3_XXS, dot_iq<GridDot<IQ3XXS>>, false},  {Type::IQ3_S, dot_iq<GridDot<IQ3S>>, false},
};

}  // namespace

namespace detail {
const KernelTable kAvx2IquantKernels = {kDots, sizeof(kDots) / sizeof(kDots[0]), nullptr, 0};
}  // namespace detail

}  // namespace strata::cpu
