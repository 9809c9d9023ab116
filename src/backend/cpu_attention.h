// CPU attention for one query token and the query heads that share one KV head (GQA group):
// the key rows are read once and dotted with every head of the group while in L1, then the
// value rows likewise. Compiled per instruction-set level (cpu_attention_{scalar,avx2,avx512}.cpp
// include cpu_attention_impl.h) and chosen at run time like the matmul kernels.
//
//   q    [group][head_dim_k] (rows q_stride apart)       scores [group][n_ctx] scratch
//   out  [group][head_dim_v] (rows out_stride apart)      keys/values through the block table
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "cpu/cpu_features.h"

namespace strata::backend {

inline constexpr int64_t kMaxAttentionGroup = 64;  // heads per task at most

struct AttentionGroupTask {
    const float* q = nullptr;
    int64_t q_stride = 0;
    float* out = nullptr;
    int64_t out_stride = 0;
    int64_t group = 0;        // query heads sharing the KV head (at most kMaxAttentionGroup)
    int64_t head_dim_k = 0, head_dim_v = 0;
    const KvCacheView* kv = nullptr;
    int64_t k_offset = 0, v_offset = 0;  // floats from a row's start to this KV head
    int64_t k_row = 0, v_row = 0;        // floats per cache row (all KV heads)
    int64_t n_ctx = 0;                   // attends to positions 0 .. n_ctx-1
    float scale = 1.0f;
    float* scores = nullptr;             // [group][n_ctx]
};

using AttentionGroupFn = void (*)(const AttentionGroupTask& t);

void attention_group_scalar(const AttentionGroupTask& t);
void attention_group_avx2(const AttentionGroupTask& t);
void attention_group_avx512(const AttentionGroupTask& t);

inline AttentionGroupFn attention_group_kernel(cpu::Isa isa) {
    switch (isa) {
        case cpu::Isa::Avx512: return attention_group_avx512;
        case cpu::Isa::Avx2: return attention_group_avx2;
        case cpu::Isa::Scalar: break;
    }
    return attention_group_scalar;
}

}  // namespace strata::backend
