// The Gated DeltaNet block shared by qwen3next and qwen35moe (linear attention with a recurrent
// state per value head):
//   in-projections (qkv, z, b, alpha) -> causal conv1d + SiLU over q|k|v with the sequence's conv
//   state -> L2-norm q and k -> g = -exp(A_log) * softplus(alpha + dt_bias), beta = sigmoid(b)
//   -> gated delta rule with the sequence's state (q, k heads shared by groups of value heads)
//   -> RMSNorm(o) * w * silu(z) per value head -> out-projection.
#pragma once

#include "model/architecture.h"

namespace strata::model {

// How a GGUF lays the block's tensors out (decided by the converter).
struct GdnLayout {
    // qwen3next: b and alpha come from one ssm_ba projection whose rows are, per key head, that
    // head's r b rows then its r alpha rows (r = value heads per key head). qwen35moe: separate
    // ssm_beta and ssm_alpha projections, one row per value head.
    bool combined_ba = false;
    // Which key head each value head reads: qwen3next keeps the checkpoint's grouped order
    // (value heads of a key head adjacent); the qwen35 converter reorders every value-head-indexed
    // tensor to tiled order (value head h reads key head h % n_k).
    backend::KeyHeadMap key_heads = backend::KeyHeadMap::Grouped;
};

struct GatedDeltaNetWeights {
    GdnLayout layout;
    Weight qkv;      // attn_qkv: n_embd -> [q (n_k*d_k) | k (n_k*d_k) | v (n_v*d_v)], the conv channels
    Weight gate;     // attn_gate (z): n_embd -> n_v*d_v
    Weight ba;       // ssm_ba (combined_ba): n_embd -> 2*n_v
    Weight beta;     // ssm_beta: n_embd -> n_v
    Weight alpha;    // ssm_alpha: n_embd -> n_v
    Weight conv1d;   // f32, GGUF ne {kernel, channels}
    Weight dt_bias;  // f32 [n_v]
    Weight a;        // f32 [n_v]: -exp(A_log), stored so by the converter
    Weight norm;     // f32 [d_v]: gated RMSNorm scale, shared by the value heads (not zero-centred)
    Weight out;      // ssm_out: n_v*d_v -> n_embd
};

GatedDeltaNetWeights bind_gated_delta_net(const ModelConfig& cfg, WeightBinder& b, int64_t il, const GdnLayout& layout);

// x [n_tokens][n_embd] (normed) -> out [n_tokens][n_embd]. Runs the conv and the delta rule per
// run of fp.runs with that sequence's conv_state/ssm_state of layer il: the recurrent form for a
// single-token run, the chunked form for longer runs.
void gated_delta_net_block(ForwardPass& fp, int64_t il, const GatedDeltaNetWeights& w, const float* x, float* out);

// Chunk size of the chunked delta rule used for prefill (as transformers' chunked kernel).
inline constexpr int64_t kDeltaRuleChunk = 64;

}  // namespace strata::model
