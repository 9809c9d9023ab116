// Scalar activation quantisers (the reference the SIMD ones must match byte for byte).
//
// Q8_0: per 32 values, d = amax / 127 stored as f16, q = round(x * 127 / amax).
// Q8_1: Q8_0's q with d = amax / 127 kept in f32, and s = d * sum(q) (the min terms of Q4_1 and
// Q5_1 weights multiply it).
// Q8_K: per 256 values, d = 1 / (127 / amax) as f32, q = round(x * 127 / amax), plus the sums of
// each 16 q's. Rounding is to nearest, ties to even (what cvtps2dq does), so every level
// produces the same bytes; |q| <= 127 always, which the sign tricks of the SIMD kernels need.
#include <cmath>
#include <cstring>

#include "cpu/kernel_registry.h"
#include "quant/blocks.h"
#include "util/fp16.h"

namespace strata::cpu {
namespace {

using namespace quant;

int8_t round_q(float v) {
    const float r = std::nearbyint(v);  // default rounding mode: nearest, ties to even
    return static_cast<int8_t>(r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r));
}

void quantize_q8_0(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        BlockQ8_0 blk;
        blk.d = f32_to_f16(d);
        for (int j = 0; j < 32; ++j) blk.qs[j] = round_q(x[j] * id);
        std::memcpy(out + b * sizeof(BlockQ8_0), &blk, sizeof blk);
    }
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        BlockQ8_1Act blk;
        blk.d = amax / 127.0f;
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            blk.qs[j] = round_q(x[j] * id);
            sum += blk.qs[j];
        }
        blk.s = blk.d * static_cast<float>(sum);
        std::memcpy(out + b * sizeof(BlockQ8_1Act), &blk, sizeof blk);
    }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        BlockQ8_K blk;
        if (amax == 0.0f) {
            std::memset(&blk, 0, sizeof blk);
        } else {
            const float iscale = 127.0f / amax;
            blk.d = 1.0f / iscale;
            for (int j = 0; j < kQK; ++j) blk.qs[j] = round_q(x[j] * iscale);
            for (int g = 0; g < kQK / 16; ++g) {
                int s = 0;
                for (int j = 0; j < 16; ++j) s += blk.qs[16 * g + j];
                blk.bsums[g] = static_cast<int16_t>(s);
            }
        }
        std::memcpy(out + b * sizeof(BlockQ8_K), &blk, sizeof blk);
    }
}

void quantize_f32(const float* x, void* dst, int64_t n) { std::memcpy(dst, x, static_cast<size_t>(n) * 4); }

void quantize_bf16(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
    }
}

constexpr detail::ActKernelEntry kActs[] = {
    {ActFormat::F32, quantize_f32},   {ActFormat::BF16, quantize_bf16}, {ActFormat::Q8_0, quantize_q8_0},
    {ActFormat::Q8_1, quantize_q8_1}, {ActFormat::Q8_K, quantize_q8_k},
};

}  // namespace

namespace detail {
const KernelTable kScalarActKernels = {nullptr, 0, kActs, sizeof(kActs) / sizeof(kActs[0])};
}  // namespace detail

}  // namespace strata::cpu
