// The elementwise kernels' bodies, compiled once per instruction-set level by the including file
// (everything `static`, so each level gets its own copy): plain loops the compiler vectorises at
// the level's width. The scalar level's SwiGLU (elementwise_scalar.cpp, std::exp) is the
// reference the others are tested against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace strata::cpu::detail {

// exp(x), written so that a loop of it vectorises: x = n ln2 + r with |r| <= ln2/2, exp(r) by its
// degree-6 Taylor polynomial (relative error below 3e-7 on that range), 2^n through the exponent
// bits, which stay a normal float for x in [-87, 88]: below, the result is exp(-87) ~ 1.6e-38
// (silu's positive tail does not change in float), above, +inf as std::exp's would be from 88.7
// (so silu's negative tail is 0, as the reference's is).
static inline float exp_clamped(float x_in) {
    const float x = std::min(std::max(x_in, -87.0f), 88.0f);
    // Round to nearest by the 1.5 * 2^23 trick (vectorises, unlike nearbyint without fast-math).
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    // ln 2 in two parts, the high one first: n * ln2_hi is exact and x - n * ln2_hi small, so the
    // low part's correction is not lost to x's rounding (the other order cost 2e-6 at |x| ~ 36).
    const float r = std::fma(n, -1.42860682030941723e-06f, std::fma(n, -0.693145751953125f, x));
    float p = 1.0f / 720;
    p = std::fma(p, r, 1.0f / 120);
    p = std::fma(p, r, 1.0f / 24);
    p = std::fma(p, r, 1.0f / 6);
    p = std::fma(p, r, 0.5f);
    p = std::fma(p, r, 1.0f);
    p = std::fma(p, r, 1.0f);
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    return x_in > 88.0f ? std::numeric_limits<float>::infinity() : p * two_n;
}

// out[i] = silu(gate[i]) * up[i]; out may be gate or up (a block at a time through a local buffer,
// so the loop has no aliasing to check).
static inline void swiglu_vectorised(const float* gate, const float* up, float* out, int64_t n) {
    constexpr int64_t kBlock = 64;
    float t[kBlock];
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
        const int64_t m = std::min(kBlock, n - i0);
        const float* g = gate + i0;
        const float* u = up + i0;
        for (int64_t j = 0; j < m; ++j) t[j] = g[j] / (1.0f + exp_clamped(-g[j])) * u[j];
        std::memcpy(out + i0, t, static_cast<size_t>(m) * sizeof(float));
    }
}

// out = x / sqrt(mean(x^2) + eps) * w (w null: 1); out may be x. Squares summed in 16 float lanes
// (a fixed order: a row's result never depends on its batch), the lanes and the tail in double.
static inline void rms_norm_vectorised(const float* x, const float* w, int64_t n, float eps, float* out) {
    constexpr int64_t kLanes = 16;
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) acc[l] += x[i + l] * x[i + l];
    double ss = 0;
    for (int64_t l = 0; l < kLanes; ++l) ss += acc[l];
    for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
    constexpr int64_t kBlock = 64;
    float t[kBlock];
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
        const int64_t m = std::min(kBlock, n - i0);
        const float* xb = x + i0;
        if (w != nullptr) {
            const float* wb = w + i0;
            for (int64_t j = 0; j < m; ++j) t[j] = xb[j] * inv * wb[j];
        } else {
            for (int64_t j = 0; j < m; ++j) t[j] = xb[j] * inv;
        }
        std::memcpy(out + i0, t, static_cast<size_t>(m) * sizeof(float));
    }
}

}  // namespace strata::cpu::detail
