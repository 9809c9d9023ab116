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

static inline void scale_add(float* __restrict y, float c, float a, const float* __restrict x, int64_t n) {
    for (int64_t d = 0; d < n; ++d) y[d] = y[d] * c + a * x[d];
}

static inline void attention_tile(const AttentionTileTask& t) {
    const KvCacheView& c = *t.kv;
    const int64_t bs = c.block_size;
    const int64_t n_rows = t.n_queries * t.group;
    // Running max and sum of exp per (query, head); outputs accumulate unnormalised.
    float run_max[kAttentionTile * kMaxAttentionGroup], run_sum[kAttentionTile * kMaxAttentionGroup];
    for (int64_t r = 0; r < n_rows; ++r) {
        run_max[r] = -INFINITY;
        run_sum[r] = 0;
    }
    for (int64_t i = 0; i < t.n_queries; ++i)
        for (int64_t h = 0; h < t.group; ++h) std::fill_n(t.out + i * t.out_token_stride + h * t.head_dim_v, t.head_dim_v, 0.0f);
    int32_t last = 0;
    for (int64_t i = 0; i < t.n_queries; ++i) last = std::max(last, t.pos[i]);

    // Keys in chunks that never cross a cache block (rows of a block are contiguous).
    constexpr int64_t kChunk = 256;
    float s[kChunk];
    for (int64_t j0 = 0; j0 <= last;) {
        const int64_t in_block = j0 % bs;
        const int64_t n_chunk = std::min<int64_t>({bs - in_block, kChunk, last + 1 - j0});
        const int64_t row0 = static_cast<int64_t>(c.blocks[j0 / bs]) * bs + in_block;
        const float* kb = c.k + row0 * t.k_row + t.k_offset;
        const float* vb = c.v + row0 * t.v_row + t.v_offset;
        for (int64_t i = 0; i < t.n_queries; ++i) {
            const int64_t n = std::min<int64_t>(n_chunk, t.pos[i] - j0 + 1);  // causal
            if (n <= 0) continue;
            for (int64_t h = 0; h < t.group; ++h) {
                const float* q = t.q + i * t.q_token_stride + h * t.head_dim_k;
                float* o = t.out + i * t.out_token_stride + h * t.head_dim_v;
                const int64_t r = i * t.group + h;
                float mx = run_max[r];
                for (int64_t j = 0; j < n; ++j) {
                    s[j] = dot_lanes(q, kb + j * t.k_row, t.head_dim_k) * t.scale;
                    mx = std::max(mx, s[j]);
                }
                // Rescale what was accumulated under the old max.
                const float corr = std::exp(run_max[r] - mx);
                float sum = run_sum[r] * corr;
                for (int64_t j = 0; j < n; ++j) {
                    const float p = std::exp(s[j] - mx);
                    sum += p;
                    scale_add(o, j == 0 ? corr : 1.0f, p, vb + j * t.v_row, t.head_dim_v);
                }
                run_max[r] = mx;
                run_sum[r] = sum;
            }
        }
        j0 += n_chunk;
    }
    for (int64_t i = 0; i < t.n_queries; ++i)
        for (int64_t h = 0; h < t.group; ++h) {
            float* o = t.out + i * t.out_token_stride + h * t.head_dim_v;
            const float inv = 1.0f / run_sum[i * t.group + h];
            for (int64_t d = 0; d < t.head_dim_v; ++d) o[d] *= inv;
        }
}

}  // namespace strata::backend::detail
