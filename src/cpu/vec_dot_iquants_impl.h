// The body of the 256-value i-quant (IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) dot kernels
// with Q8_K activations, compiled once per instruction-set level by vec_dot_iquants_avx2.cpp /
// vec_dot_iquants_avx512.cpp against that level's SIMD layer S (simd_avx2.h, simd_avx512.h).
// Everything is in an unnamed namespace, so each level gets its own copy. Up to S::kMaxCols
// activation columns per pass over a weight row.
//
// A step of S::Step::kSubs 32-value sub-blocks (one on AVX2, two on AVX-512) is decoded at a
// time and shared by the columns: the grid codebooks looked up with scalar loads into a vector
// (one lookup per 8 or 4 values), the weight signs (+1 / -1 bytes on AVX2, a 64-bit mask on
// AVX-512) and the int16 scales. Grid magnitudes are unsigned (<= 62), so each column needs one
// sign op on its activations, a maddubs and the scaled pair sum (Step::dot_scaled).
#pragma once

#include <cstddef>
#include <cstring>
#include <iterator>

#include "cpu/kernel_registry.h"
#include "cpu/simd_tile.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

constexpr size_t kA = sizeof(BlockQ8_K);
constexpr size_t kAqs = offsetof(BlockQ8_K, qs);

// One step of decoded sub-blocks (S::Step::kSubs of them, 32 values each): unsigned
// magnitudes, signs, int16 scales laid out like a maddubs result.
template <class S>
struct IqValues {
    typename S::Step::V mag;
    typename S::Step::Signs sign;
    typename S::Step::V scale;
};

// Accumulates step st of block b (sub-blocks kSubs * st ..) for NC columns into sumi.
template <class S, int NC>
static inline void accumulate(const IqValues<S>& v, const uint8_t* const* a, int64_t b, int st, typename S::I32* sumi) {
    using Q = typename S::Step;
    for (int c = 0; c < NC; ++c) {
        const typename Q::V q8 = Q::apply_sign(Q::load(a[c] + b * kA + kAqs + 32 * Q::kSubs * st), v.sign);
        sumi[c] = Q::dot_scaled(sumi[c], v.mag, q8, v.scale);
    }
}

// The K bytes at p as one little-endian integer: a step's share of a field with a byte per
// sub-block.
template <int K>
static inline uint32_t load_le(const uint8_t* p) {
    static_assert(K == 1 || K == 2);
    if constexpr (K == 1) return p[0];
    return load_u16(p);
}

// Decoders: IqValues of step st (sub-blocks K * st .. K * st + K - 1, K = S::Step::kSubs) of
// block x; the SIMD layer asks for each grid index, sign field and scale by its index in the step.
template <class S>
struct IQ2XXS {
    using Blk = BlockIQ2_XXS;
    using Q = typename S::Step;
    static constexpr float kFactor = 0.125f;
    static IqValues<S> decode(const uint8_t* x, int st) {
        // Per sub-block s, 8 bytes at p + 8s: 4 grid indices, then 4 x 7 sign bits | scale << 28.
        const uint8_t* p = x + offsetof(Blk, qs) + 8 * Q::kSubs * st;
        const auto aux = [p](int s) { return load_u32(p + 8 * s + 4); };
        return {Q::grid64(kIq2XxsGrid, [p](int i) { return p[8 * (i / 4) + i % 4]; }), Q::signs_7bit(aux),
                Q::scales32([aux](int s) { return static_cast<int>(2 * (aux(s) >> 28) + 1); })};
    }
};

template <class S>
struct IQ3XXS {
    using Blk = BlockIQ3_XXS;
    using Q = typename S::Step;
    static constexpr float kFactor = 0.25f;
    static IqValues<S> decode(const uint8_t* x, int st) {
        const uint8_t* q3 = x + offsetof(Blk, qs) + 8 * Q::kSubs * st;        // 8 grid indices per sub-block
        const uint8_t* gas = x + offsetof(Blk, qs) + 64 + 4 * Q::kSubs * st;  // per sub-block: 4 x 7 sign bits | scale << 28
        const auto aux = [gas](int s) { return load_u32(gas + 4 * s); };
        return {Q::grid32(kIq3XxsGrid, [q3](int i) { return q3[i]; }), Q::signs_7bit(aux),
                Q::scales32([aux](int s) { return static_cast<int>(2 * (aux(s) >> 28) + 1); })};
    }
};

template <class S>
struct IQ2XS {
    using Blk = BlockIQ2_XS;
    using Q = typename S::Step;
    static constexpr float kFactor = 0.125f;
    static IqValues<S> decode(const uint8_t* x, int st) {
        const uint8_t* p =
            x + offsetof(Blk, qs) + 8 * Q::kSubs * st;  // 4 codes per sub-block: 9-bit grid index | 7 sign bits << 9
        const uint8_t* sc = x + offsetof(Blk, scales) + Q::kSubs * st;  // per sub-block: the scales of its 16-value halves
        // A sub-block's 4 codes as one 64-bit word: 16-bit values are what GCC spills as words
        // and reloads as quadwords (a store-forwarding stall per reload).
        uint64_t codes[Q::kSubs];
        std::memcpy(codes, p, sizeof codes);
        const auto code = [&](int i) { return static_cast<uint32_t>(codes[i / 4] >> (16 * (i % 4))); };
        return {Q::grid64(kIq2XsGrid, [&](int i) { return code(i) & 511; }),
                Q::signs_7bit_each([&](int i) { return (code(i) >> 9) & 127; }),
                Q::scales16([sc](int i) { return 2 * ((sc[i / 2] >> (4 * (i % 2))) & 15) + 1; })};
    }
};

template <class S>
struct IQ2S {
    using Blk = BlockIQ2_S;
    using Q = typename S::Step;
    static constexpr float kFactor = 0.125f;
    static IqValues<S> decode(const uint8_t* x, int st) {
        const uint8_t* qs = x + offsetof(Blk, qs) + 4 * Q::kSubs * st;  // 4 low index bytes per sub-block; sign bytes 32 further
        const uint32_t qh = load_le<Q::kSubs>(x + offsetof(Blk, qh) + Q::kSubs * st);  // 2 high bits per index
        const uint8_t* sc = x + offsetof(Blk, scales) + Q::kSubs * st;
        return {Q::grid64(kIq2SGrid, [qs, qh](int i) { return qs[i] | (((qh >> (2 * i)) & 3) << 8); }), Q::signs_bits(qs + 32),
                Q::scales16([sc](int i) { return 2 * ((sc[i / 2] >> (4 * (i % 2))) & 15) + 1; })};
    }
};

template <class S>
struct IQ3S {
    using Blk = BlockIQ3_S;
    using Q = typename S::Step;
    static constexpr float kFactor = 1.0f;
    static IqValues<S> decode(const uint8_t* x, int st) {
        const uint8_t* qs = x + offsetof(Blk, qs) + 8 * Q::kSubs * st;                 // 8 low index bytes per sub-block
        const uint32_t qh = load_le<Q::kSubs>(x + offsetof(Blk, qh) + Q::kSubs * st);  // bit 8 of each index
        return {Q::grid32(kIq3SGrid, [qs, qh](int i) { return qs[i] | (((qh >> i) & 1) << 8); }),
                Q::signs_bits(x + offsetof(Blk, signs) + 4 * Q::kSubs * st),
                Q::scales32_nibbles(x + offsetof(Blk, scales), st, [](int, int nibble) { return 2 * nibble + 1; })};
    }
};

template <class S, class D>
struct GridDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        constexpr int kSteps = 8 / S::Step::kSubs;
        typename S::F acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = S::zero();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(typename D::Blk);
            typename S::I32 sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = S::zero_i32();
            for (int st = 0; st < kSteps; ++st) accumulate<S, NC>(D::decode(x, st), a, b, st, sumi);
            const float dw = load_f16(x + offsetof(typename D::Blk, d));
            for (int c = 0; c < NC; ++c) acc[c] = S::fmadd(S::set1(dw * load_f32(a[c] + b * kA)), S::to_f32(sumi[c]), acc[c]);
        }
        for (int c = 0; c < NC; ++c) out[c] = D::kFactor * S::hsum(acc[c]);
    }
};

// IQ4_XS: signed table values (IQ4_NL levels) with signed scales ls - 32; |w| and the signs come
// from the looked-up bytes.
template <class S>
struct IQ4XSDot {
    int64_t n_blocks;
    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        using Q = typename S::Step;
        constexpr int K = Q::kSubs;
        const typename Q::Table16 table = Q::table16(kIq4NlValues);
        typename S::F acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = S::zero();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(BlockIQ4_XS);
            const uint32_t sh = load_u16(x + offsetof(BlockIQ4_XS, scales_h));
            typename S::I32 sumi[NC];
            for (int c = 0; c < NC; ++c) sumi[c] = S::zero_i32();
            for (int st = 0; st < 8 / K; ++st) {
                // Each sub-block: 16 bytes, low nibbles then high nibbles (value order).
                const typename Q::V q = Q::lookup_nibbles(x + offsetof(BlockIQ4_XS, qs) + 16 * K * st, table);
                const typename Q::V q_abs = Q::abs8(q);
                const typename Q::Signs sign = Q::signs_of(q);
                const typename Q::V scale = Q::scales32_nibbles(
                    x + offsetof(BlockIQ4_XS, scales_l), st,
                    [sh, st](int s, int nibble) { return (nibble | (((sh >> (2 * (K * st + s))) & 3) << 4)) - 32; });
                for (int c = 0; c < NC; ++c) {
                    const typename Q::V q8 = Q::apply_sign(Q::load(a[c] + b * kA + kAqs + 32 * K * st), sign);
                    sumi[c] = Q::dot_scaled(sumi[c], q_abs, q8, scale);
                }
            }
            const float dw = load_f16(x + offsetof(BlockIQ4_XS, d));
            for (int c = 0; c < NC; ++c) acc[c] = S::fmadd(S::set1(dw * load_f32(a[c] + b * kA)), S::to_f32(sumi[c]), acc[c]);
        }
        for (int c = 0; c < NC; ++c) out[c] = S::hsum(acc[c]);
    }
};

template <class S, class K>
void dot_iq(const DotTile& t) {
    run_tile<S::kMaxCols>(t, K{t.n / kQK});
}

template <class S>
constexpr DotKernelEntry kIquantDots[] = {
    {Type::IQ4_XS, dot_iq<S, IQ4XSDot<S>>, false},
    {Type::IQ2_XXS, dot_iq<S, GridDot<S, IQ2XXS<S>>>, false},
    {Type::IQ2_XS, dot_iq<S, GridDot<S, IQ2XS<S>>>, false},
    {Type::IQ2_S, dot_iq<S, GridDot<S, IQ2S<S>>>, false},
    {Type::IQ3_XXS, dot_iq<S, GridDot<S, IQ3XXS<S>>>, false},
    {Type::IQ3_S, dot_iq<S, GridDot<S, IQ3S<S>>>, false},
};

// The level's table (kernel_registry.h): constant data, so nothing compiled for the level runs
// before the CPU has been checked.
template <class S>
constexpr KernelTable kIquantTable = {kIquantDots<S>, std::size(kIquantDots<S>), nullptr, 0};

}  // namespace
}  // namespace strata::cpu
