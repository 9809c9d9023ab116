// Scalar reference dot products of the 256-value i-quants with Q8_K activations.
//
// The IQ2/IQ3 formats store, per 32-value sub-block, grid indices (a grid entry is 8 or 4
// unsigned magnitudes), sign masks, and an odd scale 2s + 1. Their block scale is d times a
// fixed fraction (1/8 for IQ2, 1/4 for IQ3_XXS, 1 for IQ3_S) that is applied once per row.
#include "cpu/kernel_registry.h"
#include "cpu/scalar_common.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "util/fp16.h"

namespace strata::cpu {
namespace {

using namespace quant;
using scalar::block_at;
using scalar::sign_of;

uint32_t le32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

uint8_t grid_byte(uint64_t entry, int j) { return static_cast<uint8_t>(entry >> (8 * j)); }
uint8_t grid_byte(uint32_t entry, int j) { return static_cast<uint8_t>(entry >> (8 * j)); }

// IQ4_XS: IQ4_NL codes with 8 six-bit sub-block scales (low 4 bits in scales_l nibbles, high 2
// bits in scales_h), stored with +32 offset.
float dot_iq4_xs(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockIQ4_XS>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0;
        for (int g = 0; g < 8; ++g) {
            const int ls = ((x.scales_l[g / 2] >> (4 * (g % 2))) & 0x0f) | (((x.scales_h >> (2 * g)) & 3) << 4);
            int gsum = 0;
            for (int l = 0; l < 16; ++l) {
                const uint8_t byte = x.qs[16 * g + l];
                gsum += kIq4NlValues[byte & 0x0f] * y.qs[32 * g + l];
                gsum += kIq4NlValues[byte >> 4] * y.qs[32 * g + 16 + l];
            }
            isum += (ls - 32) * gsum;
        }
        sum += f16_to_f32(x.d) * y.d * static_cast<float>(isum);
    }
    return sum;
}

// IQ2_XXS: per sub-block, 8 bytes: 4 grid indices, then a uint32 of 4 x 7 sign bits and the
// scale in bits 28..31.
float dot_iq2_xxs(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockIQ2_XXS>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        const auto* qs = reinterpret_cast<const uint8_t*>(x.qs);
        int isum = 0;
        for (int g = 0; g < 8; ++g) {
            const uint8_t* sub = qs + 8 * g;
            const uint32_t aux = le32(sub + 4);
            int gsum = 0;
            for (int k = 0; k < 4; ++k) {
                const uint64_t grid = kIq2XxsGrid[sub[k]];
                const uint8_t signs = kIqSignMasks[(aux >> (7 * k)) & 127];
                for (int j = 0; j < 8; ++j) gsum += sign_of(signs, j) * grid_byte(grid, j) * y.qs[32 * g + 8 * k + j];
            }
            isum += static_cast<int>(2 * (aux >> 28) + 1) * gsum;
        }
        sum += f16_to_f32(x.d) * y.d * static_cast<float>(isum);
    }
    return 0.125f * sum;
}

// IQ2_XS: 32 uint16 of (9-bit grid index | 7 sign bits << 9); two 4-bit scales per sub-block,
// one per 16 values.
float dot_iq2_xs(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockIQ2_XS>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0;
        for (int k = 0; k < 32; ++k) {  // 8 values each
            const uint16_t code = x.qs[k];
            const uint64_t grid = kIq2XsGrid[code & 511];
            const uint8_t signs = kIqSignMasks[code >> 9];
            const int ls = 2 * ((x.scales[k / 4] >> (4 * ((k / 2) % 2))) & 0x0f) + 1;
            int ksum = 0;
            for (int j = 0; j < 8; ++j) ksum += sign_of(signs, j) * grid_byte(grid, j) * y.qs[8 * k + j];
            isum += ls * ksum;
        }
        sum += f16_to_f32(x.d) * y.d * static_cast<float>(isum);
    }
    return 0.125f * sum;
}

// IQ2_S: 10-bit grid indices (low 8 bits in qs[0..31], high 2 bits in qh), explicit 8-bit sign
// masks in qs[32..63], scales as IQ2_XS.
float dot_iq2_s(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockIQ2_S>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0;
        for (int k = 0; k < 32; ++k) {
            const int g = k / 4, l = k % 4;
            const int index = x.qs[k] | (((x.qh[g] >> (2 * l)) & 3) << 8);
            const uint64_t grid = kIq2SGrid[index];
            const uint8_t signs = x.qs[32 + k];
            const int ls = 2 * ((x.scales[g] >> (4 * (l / 2))) & 0x0f) + 1;
            int ksum = 0;
            for (int j = 0; j < 8; ++j) ksum += sign_of(signs, j) * grid_byte(grid, j) * y.qs[8 * k + j];
            isum += ls * ksum;
        }
        sum += f16_to_f32(x.d) * y.d * static_cast<float>(isum);
    }
    return 0.125f * sum;
}

// IQ3_XXS: qs[0..63] are grid indices (4 values each, 8 per sub-block); qs[64..95] hold one
// uint32 per sub-block: 4 x 7 sign bits (one mask per 8 values) and the scale in bits 28..31.
float dot_iq3_xxs(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockIQ3_XXS>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0;
        for (int g = 0; g < 8; ++g) {
            const uint32_t aux = le32(x.qs + 64 + 4 * g);
            int gsum = 0;
            for (int k = 0; k < 4; ++k) {
                const uint8_t signs = kIqSignMasks[(aux >> (7 * k)) & 127];
                const uint32_t g1 = kIq3XxsGrid[x.qs[8 * g + 2 * k]];
                const uint32_t g2 = kIq3XxsGrid[x.qs[8 * g + 2 * k + 1]];
                const int8_t* q8 = y.qs + 32 * g + 8 * k;
                for (int j = 0; j < 4; ++j) {
                    gsum += sign_of(signs, j) * grid_byte(g1, j) * q8[j];
                    gsum += sign_of(signs, j + 4) * grid_byte(g2, j) * q8[j + 4];
                }
            }
            isum += static_cast<int>(2 * (aux >> 28) + 1) * gsum;
        }
        sum += f16_to_f32(x.d) * y.d * static_cast<float>(isum);
    }
    return 0.25f * sum;
}

// IQ3_S: 9-bit grid indices (low 8 in qs, bit 8 from qh: bit k of qh[g] for index k of
// sub-block g), explicit sign masks, 4-bit scales (two sub-blocks per byte), scale 2s + 1.
float dot_iq3_s(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockIQ3_S>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0;
        for (int g = 0; g < 8; ++g) {
            const int ls = 2 * ((x.scales[g / 2] >> (4 * (g % 2))) & 0x0f) + 1;
            int gsum = 0;
            for (int k = 0; k < 8; ++k) {  // 4 values each
                const int index = x.qs[8 * g + k] | (((x.qh[g] >> k) & 1) << 8);
                const uint32_t grid = kIq3SGrid[index];
                const uint8_t signs = x.signs[4 * g + k / 2];
                for (int j = 0; j < 4; ++j) {
                    gsum += sign_of(signs, 4 * (k % 2) + j) * grid_byte(grid, j) * y.qs[32 * g + 4 * k + j];
                }
            }
            isum += ls * gsum;
        }
        sum += f16_to_f32(x.d) * y.d * static_cast<float>(isum);
    }
    return sum;
}

constexpr detail::DotKernelEntry kScalarIquantDots[] = {
    {Type::IQ4_XS, scalar::tile<dot_iq4_xs>, false},   {Type::IQ2_XXS, scalar::tile<dot_iq2_xxs>, false},
    {Type::IQ2_XS, scalar::tile<dot_iq2_xs>, false},   {Type::IQ2_S, scalar::tile<dot_iq2_s>, false},
    {Type::IQ3_XXS, scalar::tile<dot_iq3_xxs>, false}, {Type::IQ3_S, scalar::tile<dot_iq3_s>, false},
};

}  // namespace

namespace detail {
const KernelTable kScalarIquantKernels = {kScalarIquantDots, sizeof(kScalarIquantDots) / sizeof(kScalarIquantDots[0]), nullptr,
                                          0};
}  // namespace detail

}  // namespace strata::cpu
