// The body of the attention kernels, compiled once per instruction-set level by the including
// file (everything `static`, so each level gets its own copy). Plain loops written so that the
// compiler vectorises them for the level's vector width: dot products keep kLanes independent
// partial sums (a fixed summation order, the same for every batch, so results never depend on
// what else is in the batch).
#pragma once

#include <algorithm>
#include <cmath>

#include "backend/cpu_attention.h"

namespace strata::backend::detail {

constexpr int kLanes = 16;

static inline float dot_lanes(const float* __restrict a, const float* __restrict b, int64_t n) {
    float acc[kLanes] = {};
    int64_t d = 0;
    for (; d + kLanes <= n; d += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += a[d + l] * b[d + l];
    float s = 0;
    for (int l = 0; l < kLanes; ++l) s += acc[l];
    for (; d < n; ++d) s += a[d] * b[d];
    return s;
}

static inline void axpy(float* __restrict y, float a, const float* __restrict x, int64_t n) {
    for (int64_t d = 0; d < n; ++d) y[d] += a * x[d];
}

static inline void attention_group(const AttentionGroupTask& t) {
    const KvCacheView& c = *t.kv;
    const int64_t bs = c.block_size;
    // Scores, block by block of the table (rows of a block are contiguous).
    for (int64_t j0 = 0; j0 < t.n_ctx; j0 += bs) {
        const int64_t n = std::min(bs, t.n_ctx - j0);
        const float* kb = c.k + c.blocks[j0 / bs] * bs * t.k_row + t.k_offset;
        for (int64_t i = 0; i < n; ++i) {
            const float* kj = kb + i * t.k_row;
            for (int64_t h = 0; h < t.group; ++h)
                t.scores[h * t.n_ctx + j0 + i] = dot_lanes(t.q + h * t.q_stride, kj, t.head_dim_k) * t.scale;
        }
    }
    // Softmax per head; the 1/sum is applied to the output once.
    float inv_sum[kMaxAttentionGroup];
    for (int64_t h = 0; h < t.group; ++h) {
        float* s = t.scores + h * t.n_ctx;
        float mx = -INFINITY;
        for (int64_t j = 0; j < t.n_ctx; ++j) mx = std::max(mx, s[j]);
        float sum = 0;
        for (int64_t j = 0; j < t.n_ctx; ++j) sum += (s[j] = std::exp(s[j] - mx));
        inv_sum[h] = 1.0f / sum;
        std::fill(t.out + h * t.out_stride, t.out + h * t.out_stride + t.head_dim_v, 0.0f);
    }
    for (int64_t j0 = 0; j0 < t.n_ctx; j0 += bs) {
        const int64_t n = std::min(bs, t.n_ctx - j0);
        const float* vb = c.v + c.blocks[j0 / bs] * bs * t.v_row + t.v_offset;
        for (int64_t i = 0; i < n; ++i) {
            const float* vj = vb + i * t.v_row;
            for (int64_t h = 0; h < t.group; ++h) axpy(t.out + h * t.out_stride, t.scores[h * t.n_ctx + j0 + i], vj, t.head_dim_v);
        }
    }
    for (int64_t h = 0; h < t.group; ++h)
        for (int64_t d = 0; d < t.head_dim_v; ++d) t.out[h * t.out_stride + d] *= inv_sum[h];
}

}  // namespace strata::backend::detail
