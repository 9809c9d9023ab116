// The body of the attention kernels, compiled once per instruction-set level by the including
// file (everything `static`, so each level gets its own copy). Plain loops written so that the
// compiler vectorises them for the level's vector width: dot products keep kLanes independent
// partial sums (a fixed summation order, the same for every batch, so results never depend on
// what else is in the batch).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu_attention.h"

namespace strata::backend::detail {

constexpr int kLanes = 16;

// Eight floats as a GCC vector: one AVX register in the AVX2/AVX-512 builds, two SSE registers in
// the baseline one. Loads and stores go through memcpy (no alignment assumed).
typedef float v8f __attribute__((vector_size(32)));
// (Passing v8f by value "changes the ABI" without AVX: irrelevant, everything here is static inline.)
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

static inline v8f load8(const float* p) {
    v8f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

static inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// Sum of 8 lanes in a fixed tree order.
static inline float sum8(v8f v) { return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7])); }

// A dot product with kLanes = 16 partial sums (two vectors), then a fixed-order reduction: the
// same order for every query, so results never depend on what else is in the batch.
static inline float dot_lanes(const float* __restrict a, const float* __restrict b, int64_t n) {
    v8f acc0 = {}, acc1 = {};
    int64_t d = 0;
    for (; d + kLanes <= n; d += kLanes) {
        acc0 += load8(a + d) * load8(b + d);
        acc1 += load8(a + d + 8) * load8(b + d + 8);
    }
    float s = sum8(acc0 + acc1);
    for (; d < n; ++d) s += a[d] * b[d];
    return s;
}

static inline void scale(float* __restrict y, float c, int64_t n) {
    for (int64_t d = 0; d < n; ++d) y[d] *= c;
}

// y += sum_j p[j] * x[j * x_stride], j < n_rows: 8 outputs at a time stay in a register across
// the rows (summed in row order, as one row at a time would).
static inline void add_weighted_rows(float* __restrict y, const float* __restrict p, const float* __restrict x, int64_t x_stride,
                                     int64_t n_rows, int64_t n) {
    int64_t d = 0;
    for (; d + 8 <= n; d += 8) {
        v8f acc = load8(y + d);
        for (int64_t j = 0; j < n_rows; ++j) acc += p[j] * load8(x + j * x_stride + d);
        store8(y + d, acc);
    }
    for (; d < n; ++d) {
        float acc = y[d];
        for (int64_t j = 0; j < n_rows; ++j) acc += p[j] * x[j * x_stride + d];
        y[d] = acc;
    }
}

// exp(x) for x <= 0 (scores minus their running max), written so that a loop of it vectorises:
// x = n ln2 + r with |r| <= ln2/2, exp(r) by its degree-6 Taylor polynomial (relative error below
// 3e-7 on that range, as good as expf for attention weights), 2^n through the exponent bits.
// Below -87 the result is 0 (exp underflows there in float anyway).
static inline float exp_nonpositive(float x) {
    x = std::max(x, -87.0f);
    // Round to nearest by the 1.5 * 2^23 trick (vectorises, unlike nearbyint without fast-math).
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = std::fma(n, -0.693145751953125f, std::fma(n, -1.42860682030941723e-06f, x));
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
    return p * two_n;
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
        const float* kb = static_cast<const float*>(c.k) + row0 * t.k_row + t.k_offset;
        const float* vb = static_cast<const float*>(c.v) + row0 * t.v_row + t.v_offset;
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
                // Weights of this chunk in one vectorised pass, then what was accumulated under
                // the old max is rescaled once (skipped when the max did not move).
                for (int64_t j = 0; j < n; ++j) s[j] = exp_nonpositive(s[j] - mx);
                float sum = 0;
                for (int64_t j = 0; j < n; ++j) sum += s[j];
                if (mx != run_max[r]) {
                    const float corr = exp_nonpositive(run_max[r] - mx);
                    run_sum[r] *= corr;
                    scale(o, corr, t.head_dim_v);
                }
                add_weighted_rows(o, s, vb, t.v_row, n, t.head_dim_v);
                run_max[r] = mx;
                run_sum[r] += sum;
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
