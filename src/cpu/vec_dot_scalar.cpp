// Scalar reference dot products: float/legacy/k-quant weights. Plain code that follows the
// format definitions (quant/dequant.cpp) directly; the SIMD kernels are tested against these.
//
// Every quantised kernel sums exact integer products per scale group and applies the float
// scales per block, which is the dequantised dot product rearranged:
//   sum_i (dw * s_g * q_i - dmin * m_g) * (da * a_i)
//     = dw * da * sum_g s_g * (sum_{i in g} q_i a_i) - dmin * da * sum_g m_g * (sum_{i in g} a_i)
// where the activation sums per 16 values come with Q8_K (bsums), and those per 32 with Q8_1
// (as s = da * sum, for the mins of Q4_1 / Q5_1).
#include <cmath>

#include "cpu/kernel_registry.h"
#include "cpu/scalar_common.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "util/fp16.h"

namespace strata::cpu {
namespace {

using namespace quant;
using scalar::block_at;

// ---- float weights -------------------------------------------------------------------------

// Double accumulation: the reference for float rows should not itself carry summation error.
float dot_f32(int64_t n, const uint8_t* w, const uint8_t* a) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        float wi, ai;
        std::memcpy(&wi, w + 4 * i, 4);
        std::memcpy(&ai, a + 4 * i, 4);
        sum += static_cast<double>(wi) * ai;
    }
    return static_cast<float>(sum);
}

float dot_f16(int64_t n, const uint8_t* w, const uint8_t* a) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        uint16_t wi;
        float ai;
        std::memcpy(&wi, w + 2 * i, 2);
        std::memcpy(&ai, a + 4 * i, 4);
        sum += static_cast<double>(f16_to_f32(wi)) * ai;
    }
    return static_cast<float>(sum);
}

float dot_bf16(int64_t n, const uint8_t* w, const uint8_t* a) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        uint16_t wi;
        float ai;
        std::memcpy(&wi, w + 2 * i, 2);
        std::memcpy(&ai, a + 4 * i, 4);
        sum += static_cast<double>(bf16_to_f32(wi)) * ai;
    }
    return static_cast<float>(sum);
}

// ---- 32-value blocks with Q8_0 activations ----------------------------------------------------

float dot_q8_0(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; ++b) {
        const auto x = block_at<BlockQ8_0>(w, b);
        const auto y = block_at<BlockQ8_0>(a, b);
        int isum = 0;
        for (int j = 0; j < 32; ++j) isum += x.qs[j] * y.qs[j];
        sum += f16_to_f32(x.d) * f16_to_f32(y.d) * static_cast<float>(isum);
    }
    return sum;
}

// Q4_0: value j (< 16) is the low nibble of qs[j], value j + 16 the high nibble; code - 8.
float dot_q4_0(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; ++b) {
        const auto x = block_at<BlockQ4_0>(w, b);
        const auto y = block_at<BlockQ8_0>(a, b);
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            isum += ((x.qs[j] & 0x0f) - 8) * y.qs[j];
            isum += ((x.qs[j] >> 4) - 8) * y.qs[j + 16];
        }
        sum += f16_to_f32(x.d) * f16_to_f32(y.d) * static_cast<float>(isum);
    }
    return sum;
}

// Q4_1: value = d * q + m, q unsigned 4 bits in Q4_0's order; with Q8_1 activations the min
// contributes m * s (s = the activation block's scale times its sum).
float dot_q4_1(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; ++b) {
        const auto x = block_at<BlockQ4_1>(w, b);
        const auto y = block_at<BlockQ8_1Act>(a, b);
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            isum += (x.qs[j] & 0x0f) * y.qs[j];
            isum += (x.qs[j] >> 4) * y.qs[j + 16];
        }
        sum += f16_to_f32(x.d) * y.d * static_cast<float>(isum) + f16_to_f32(x.m) * y.s;
    }
    return sum;
}

// Q5_0 / Q5_1: Q4_0's nibbles plus a fifth bit, bit j of the little-endian u32 qh for value j.
int q5_code(const uint8_t* qs, const uint8_t* qh, int j) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    const int nibble = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
    return nibble | static_cast<int>(((h >> j) & 1u) << 4);
}

// Q5_0: value = d * (q - 16).
float dot_q5_0(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; ++b) {
        const auto x = block_at<BlockQ5_0>(w, b);
        const auto y = block_at<BlockQ8_0>(a, b);
        int isum = 0;
        for (int j = 0; j < 32; ++j) isum += (q5_code(x.qs, x.qh, j) - 16) * y.qs[j];
        sum += f16_to_f32(x.d) * f16_to_f32(y.d) * static_cast<float>(isum);
    }
    return sum;
}

// Q5_1: value = d * q + m, with Q8_1 activations as Q4_1.
float dot_q5_1(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; ++b) {
        const auto x = block_at<BlockQ5_1>(w, b);
        const auto y = block_at<BlockQ8_1Act>(a, b);
        int isum = 0;
        for (int j = 0; j < 32; ++j) isum += q5_code(x.qs, x.qh, j) * y.qs[j];
        sum += f16_to_f32(x.d) * y.d * static_cast<float>(isum) + f16_to_f32(x.m) * y.s;
    }
    return sum;
}

float dot_iq4_nl(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; ++b) {
        const auto x = block_at<BlockIQ4_NL>(w, b);
        const auto y = block_at<BlockQ8_0>(a, b);
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            isum += kIq4NlValues[x.qs[j] & 0x0f] * y.qs[j];
            isum += kIq4NlValues[x.qs[j] >> 4] * y.qs[j + 16];
        }
        sum += f16_to_f32(x.d) * f16_to_f32(y.d) * static_cast<float>(isum);
    }
    return sum;
}

// E8M0 exponent e -> 2^(e - 128): half the block scale, because the code table is doubled.
float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
    return bits_to_f32(bits);
}

float dot_mxfp4(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; ++b) {
        const auto x = block_at<BlockMXFP4>(w, b);
        const auto y = block_at<BlockQ8_0>(a, b);
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            isum += kMxfp4DoubledValues[x.qs[j] & 0x0f] * y.qs[j];
            isum += kMxfp4DoubledValues[x.qs[j] >> 4] * y.qs[j + 16];
        }
        sum += e8m0_half(x.e) * f16_to_f32(y.d) * static_cast<float>(isum);
    }
    return sum;
}

// ---- k-quants with Q8_K activations -----------------------------------------------------------

// Sum of the Q8_K activations of 16-value group g.
int bsum16(const BlockQ8_K& y, int g) { return y.bsums[g]; }

// Q2_K: 16 groups of 16; scales[g] = scale (low nibble) | min (high nibble). Within each
// 128-value half, bits 2j..2j+1 of qs[32 * half + l] hold value 128 * half + 32 * j + l.
float dot_q2_k(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockQ2_K>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0, msum = 0;
        for (int i = 0; i < kQK; ++i) {
            const int half = i / 128, j = (i % 128) / 32, l = i % 32;
            const int q = (x.qs[32 * half + l] >> (2 * j)) & 3;
            isum += (x.scales[i / 16] & 0x0f) * q * y.qs[i];
        }
        for (int g = 0; g < 16; ++g) msum += (x.scales[g] >> 4) * bsum16(y, g);
        sum += y.d * (f16_to_f32(x.d) * static_cast<float>(isum) - f16_to_f32(x.dmin) * static_cast<float>(msum));
    }
    return sum;
}

// Q3_K's 16 six-bit scales: low 4 bits from scales[g % 8] (low nibble for g < 8, high nibble
// after), high 2 bits from scales[8 + g % 4] at bit 2 * (g / 4). Stored with +32 offset.
int q3k_scale(const uint8_t* sc, int g) {
    const int lo = g < 8 ? (sc[g] & 0x0f) : (sc[g - 8] >> 4);
    const int hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

// Q3_K: 2 low bits as in Q2_K; the value is q - 4 unless hmask bit (4 * half + j) of byte l is set.
float dot_q3_k(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockQ3_K>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0;
        for (int g = 0; g < 16; ++g) {
            int gsum = 0;
            for (int i = 16 * g; i < 16 * g + 16; ++i) {
                const int half = i / 128, j = (i % 128) / 32, l = i % 32;
                const int lo = (x.qs[32 * half + l] >> (2 * j)) & 3;
                const bool high = (x.hmask[l] >> (4 * half + j)) & 1;
                gsum += (lo - (high ? 0 : 4)) * y.qs[i];
            }
            isum += q3k_scale(x.scales, g) * gsum;
        }
        sum += y.d * f16_to_f32(x.d) * static_cast<float>(isum);
    }
    return sum;
}

// Q4_K/Q5_K's 8 six-bit scales and mins packed in 12 bytes: sub-blocks 0..3 in the low 6 bits
// of bytes 0..3 (scales) and 4..7 (mins); sub-blocks 4..7 as low nibble (scale) / high nibble
// (min) of bytes 8..11 plus the top 2 bits of bytes 0..3 (scale) / 4..7 (min).
void k4_scale_min(const uint8_t* sc, int g, int& scale, int& min) {
    if (g < 4) {
        scale = sc[g] & 63;
        min = sc[g + 4] & 63;
    } else {
        scale = (sc[g + 4] & 0x0f) | ((sc[g - 4] >> 6) << 4);
        min = (sc[g + 4] >> 4) | ((sc[g] >> 6) << 4);
    }
}

// Q4_K: 8 sub-blocks of 32; within each 64-value chunk c, value 64c + l (l < 32) is the low
// nibble of qs[32c + l] (sub-block 2c), value 64c + 32 + l the high nibble (sub-block 2c + 1).
float dot_q4_k(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockQ4_K>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0, msum = 0;
        for (int g = 0; g < 8; ++g) {
            int scale, min;
            k4_scale_min(x.scales, g, scale, min);
            int gsum = 0;
            for (int l = 0; l < 32; ++l) {
                const uint8_t byte = x.qs[32 * (g / 2) + l];
                const int q = g % 2 == 0 ? (byte & 0x0f) : (byte >> 4);
                gsum += q * y.qs[32 * g + l];
            }
            isum += scale * gsum;
            msum += min * (bsum16(y, 2 * g) + bsum16(y, 2 * g + 1));
        }
        sum += y.d * (f16_to_f32(x.d) * static_cast<float>(isum) - f16_to_f32(x.dmin) * static_cast<float>(msum));
    }
    return sum;
}

// Q5_K: Q4_K plus a fifth bit: bit g of qh[l] is the high bit of value 32g + l.
float dot_q5_k(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockQ5_K>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0, msum = 0;
        for (int g = 0; g < 8; ++g) {
            int scale, min;
            k4_scale_min(x.scales, g, scale, min);
            int gsum = 0;
            for (int l = 0; l < 32; ++l) {
                const uint8_t byte = x.qs[32 * (g / 2) + l];
                const int q = (g % 2 == 0 ? (byte & 0x0f) : (byte >> 4)) + (((x.qh[l] >> g) & 1) << 4);
                gsum += q * y.qs[32 * g + l];
            }
            isum += scale * gsum;
            msum += min * (bsum16(y, 2 * g) + bsum16(y, 2 * g + 1));
        }
        sum += y.d * (f16_to_f32(x.d) * static_cast<float>(isum) - f16_to_f32(x.dmin) * static_cast<float>(msum));
    }
    return sum;
}

// Q6_K: 16 groups of 16 with int8 scales; 6-bit codes - 32. In 128-value half h, value
// 128h + 32k + l (k < 4, l < 32) has low 4 bits from ql[64h + l + 32 * (k % 2)] (low nibble for
// k < 2, high nibble otherwise) and high 2 bits at bit 2k of qh[32h + l].
float dot_q6_k(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const auto x = block_at<BlockQ6_K>(w, b);
        const auto y = block_at<BlockQ8_K>(a, b);
        int isum = 0;
        for (int g = 0; g < 16; ++g) {
            int gsum = 0;
            for (int i = 16 * g; i < 16 * g + 16; ++i) {
                const int h = i / 128, k = (i % 128) / 32, l = i % 32;
                const uint8_t lowbyte = x.ql[64 * h + l + 32 * (k % 2)];
                const int lo = k < 2 ? (lowbyte & 0x0f) : (lowbyte >> 4);
                const int hi = (x.qh[32 * h + l] >> (2 * k)) & 3;
                gsum += ((lo | (hi << 4)) - 32) * y.qs[i];
            }
            isum += x.scales[g] * gsum;
        }
        sum += y.d * f16_to_f32(x.d) * static_cast<float>(isum);
    }
    return sum;
}

constexpr detail::DotKernelEntry kScalarDots[] = {
    {Type::F32, scalar::tile<dot_f32>, false},       {Type::F16, scalar::tile<dot_f16>, false},
    {Type::BF16, scalar::tile<dot_bf16>, false},     {Type::Q8_0, scalar::tile<dot_q8_0>, false},
    {Type::Q4_0, scalar::tile<dot_q4_0>, false},     {Type::Q4_1, scalar::tile<dot_q4_1>, false},
    {Type::Q5_0, scalar::tile<dot_q5_0>, false},     {Type::Q5_1, scalar::tile<dot_q5_1>, false},
    {Type::IQ4_NL, scalar::tile<dot_iq4_nl>, false}, {Type::MXFP4, scalar::tile<dot_mxfp4>, false},
    {Type::Q2_K, scalar::tile<dot_q2_k>, false},     {Type::Q3_K, scalar::tile<dot_q3_k>, false},
    {Type::Q4_K, scalar::tile<dot_q4_k>, false},     {Type::Q5_K, scalar::tile<dot_q5_k>, false},
    {Type::Q6_K, scalar::tile<dot_q6_k>, false},
};

}  // namespace

namespace detail {
const KernelTable kScalarKernels = {kScalarDots, sizeof(kScalarDots) / sizeof(kScalarDots[0]), nullptr, 0};
}  // namespace detail

}  // namespace strata::cpu
