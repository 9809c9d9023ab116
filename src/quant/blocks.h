// Block layouts of the GGUF quantised types: the on-disk bytes, so every struct is packed by
// construction (only uint8/int8/uint16 members after leading halves) and sizes are asserted.
// Halves are stored as raw uint16_t (IEEE binary16); convert with util/fp16.h.
// QK = 256 values per super-block for the k- and i-quants; 32 for the legacy types.
#pragma once

#include <cstdint>

namespace strata::quant {

constexpr int kQK = 256;         // values per k-/i-quant super-block
constexpr int kKScaleSize = 12;  // packed 6-bit scales+mins of Q4_K/Q5_K

struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[16];
};  // 32 values
struct BlockQ4_1 {
    uint16_t d, m;
    uint8_t qs[16];
};
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
};
struct BlockQ5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
};
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[32];
};
struct BlockQ8_1 {
    uint16_t d, s;
    int8_t qs[32];
};  // s = d * sum(qs)
struct BlockMXFP4 {
    uint8_t e;
    uint8_t qs[16];
};  // e: E8M0 scale; qs: E2M1 nibbles
struct BlockIQ4_NL {
    uint16_t d;
    uint8_t qs[16];
};

struct BlockQ2_K {
    uint8_t scales[kQK / 16];
    uint8_t qs[kQK / 4];
    uint16_t d, dmin;
};
struct BlockQ3_K {
    uint8_t hmask[kQK / 8];
    uint8_t qs[kQK / 4];
    uint8_t scales[12];
    uint16_t d;
};
struct BlockQ4_K {
    uint16_t d, dmin;
    uint8_t scales[kKScaleSize];
    uint8_t qs[kQK / 2];
};
struct BlockQ5_K {
    uint16_t d, dmin;
    uint8_t scales[kKScaleSize];
    uint8_t qh[kQK / 8];
    uint8_t qs[kQK / 2];
};
struct BlockQ6_K {
    uint8_t ql[kQK / 2];
    uint8_t qh[kQK / 4];
    int8_t scales[kQK / 16];
    uint16_t d;
};
// Q8_K is only ever an activation format (never stored in files): f32 scale, sums per 16 values.
struct BlockQ8_K {
    float d;
    int8_t qs[kQK];
    int16_t bsums[kQK / 16];
};
// Q8_1 as an activation format, the inputs of the Q4_1/Q5_1 kernels (never stored in files; not
// GGUF's BlockQ8_1, whose f16 s would round the sum): f32 scale d, s = d * sum(qs).
struct BlockQ8_1Act {
    float d, s;
    int8_t qs[32];
};

struct BlockIQ2_XXS {
    uint16_t d;
    uint16_t qs[kQK / 8];
};
struct BlockIQ2_XS {
    uint16_t d;
    uint16_t qs[kQK / 8];
    uint8_t scales[kQK / 32];
};
struct BlockIQ2_S {
    uint16_t d;
    uint8_t qs[kQK / 4];
    uint8_t qh[kQK / 32];
    uint8_t scales[kQK / 32];
};
struct BlockIQ3_XXS {
    uint16_t d;
    uint8_t qs[3 * kQK / 8];
};
struct BlockIQ3_S {
    uint16_t d;
    uint8_t qs[kQK / 4];
    uint8_t qh[kQK / 32];
    uint8_t signs[kQK / 8];
    uint8_t scales[kQK / 64];
};
struct BlockIQ1_S {
    uint16_t d;
    uint8_t qs[kQK / 8];
    uint16_t qh[kQK / 32];
};
struct BlockIQ1_M {
    uint8_t qs[kQK / 8];
    uint8_t qh[kQK / 16];
    uint8_t scales[kQK / 32];
};  // scale: 4 nibbles of scales
struct BlockIQ4_XS {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[kQK / 64];
    uint8_t qs[kQK / 2];
};
struct BlockTQ1_0 {
    uint8_t qs[(kQK - 4 * kQK / 64) / 5];
    uint8_t qh[kQK / 64];
    uint16_t d;
};
struct BlockTQ2_0 {
    uint8_t qs[kQK / 4];
    uint16_t d;
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockMXFP4) == 17 && sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ8_1Act) == 40);
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56 && sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockTQ1_0) == 54 && sizeof(BlockTQ2_0) == 66);

}  // namespace strata::quant
