// CPU attention over paged KV for a tile of query tokens of one sequence and the query heads
// that share one KV head (GQA group). Keys and values are visited one cache block at a time and
// each block is used by every query and head of the tile while it sits in L1 (flash-attention
// style: a running max and sum per query and head, the output rescaled when the max grows), so
// a long prompt reads its KV once per tile instead of once per token. Compiled per
// instruction-set level (cpu_attention_{scalar,avx2,avx512}.cpp include cpu_attention_impl.h)
// and chosen at run time like the matmul kernels.
//
// Query i, head h (0 <= h < group): q + i*q_token_stride + h*head_dim_k, attends to positions
// 0 .. pos[i]; its output goes to out + i*out_token_stride + h*head_dim_v. A query's result
// depends only on its own inputs, never on the other queries of its tile.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "util/cpu_features.h"

namespace strata::backend {

inline constexpr int64_t kMaxAttentionGroup = 64;  // heads per task at most
inline constexpr int64_t kAttentionTile = 32;      // query tokens per task at most

struct AttentionTileTask {
    const float* q = nullptr;
    int64_t q_token_stride = 0;
    float* out = nullptr;
    int64_t out_token_stride = 0;
    const int32_t* pos = nullptr;  // [n_queries]
    int64_t n_queries = 0;         // at most kAttentionTile
    int64_t group = 0;             // query heads sharing the KV head (at most kMaxAttentionGroup)
    int64_t head_dim_k = 0, head_dim_v = 0;
    const KvCacheView* kv = nullptr;
    int64_t k_offset = 0, v_offset = 0;  // floats from a cache row's start to this KV head
    int64_t k_row = 0, v_row = 0;        // floats per cache row (all KV heads)
    float scale = 1.0f;
};

using AttentionTileFn = void (*)(const AttentionTileTask& t);

void attention_tile_scalar(const AttentionTileTask& t);
void attention_tile_avx2(const AttentionTileTask& t);
void attention_tile_avx512(const AttentionTileTask& t);

inline AttentionTileFn attention_tile_kernel(util::Isa isa) {
    switch (isa) {
        case util::Isa::Avx512: return attention_tile_avx512;
        case util::Isa::Avx2: return attention_tile_avx2;
        case util::Isa::Scalar: break;
    }
    return attention_tile_scalar;
}

}  // namespace strata::backend
