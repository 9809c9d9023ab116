// Blocks shared by the architectures: attention over the KV cache, the MoE feed-forward (with an
// optional sigmoid-gated shared expert), the dense SwiGLU feed-forward. Gated DeltaNet lives in
// gated_delta_net.h.
#pragma once

#include "model/architecture.h"

namespace strata::model {

struct AttentionWeights {
    Weight q;       // [n_embd] -> n_head*head_dim_k (x2 with an output gate: per head [q | gate])
    Weight k;       // [n_embd] -> n_head_kv*head_dim_k
    Weight v;       // [n_embd] -> n_head_kv*head_dim_v
    Weight o;       // n_head*head_dim_v -> n_embd
    Weight q_norm;  // [head_dim_k] RMSNorm per head
    Weight k_norm;  // [head_dim_k]
};

struct MoeWeights {
    Weight gate_inp;   // router: n_embd -> n_expert
    Weight gate_exps;  // GGUF ne {n_embd, n_ff_exp, n_expert}
    Weight up_exps;    // {n_embd, n_ff_exp, n_expert}
    Weight down_exps;  // {n_ff_exp, n_embd, n_expert}
    // Shared expert (absent in qwen3moe): out += sigmoid(gate_inp_shexp x) * down(silu(gate x) * up x)
    Weight gate_inp_shexp;  // n_embd -> 1
    Weight gate_shexp, up_shexp, down_shexp;
};

// The dense FFN (qwen3): out = down(silu(gate x) * up x).
struct DenseFfnWeights {
    Weight gate;  // ffn_gate: n_embd -> n_ff
    Weight up;    // ffn_up: n_embd -> n_ff
    Weight down;  // ffn_down: n_ff -> n_embd
};

AttentionWeights bind_attention(const ModelConfig& cfg, WeightBinder& b, int64_t il);
MoeWeights bind_moe(const ModelConfig& cfg, WeightBinder& b, int64_t il);
DenseFfnWeights bind_dense_ffn(const ModelConfig& cfg, WeightBinder& b, int64_t il);

// x [n_tokens][n_embd] (normed) -> out [n_tokens][n_embd]: q/k/v, per-head q/k RMSNorm, RoPE,
// cache store, softmax attention, optional sigmoid output gate, output projection.
void attention_block(ForwardPass& fp, int64_t il, const AttentionWeights& w, const float* x, float* out);
// The layer's residual add and the norm after it: residual += the block's output, then normed =
// rms_norm(residual) * norm. A block given one does it itself (a GPU fuses it into the block's
// last kernel), and its out is then scratch.
struct ResidualNorm {
    float* residual;
    const Weight* norm;
    float eps;
    float* normed;
};
// x [n_tokens][n_embd] (normed) -> out [n_tokens][n_embd], or with `then`, into its residual.
void moe_block(ForwardPass& fp, int64_t il, const MoeWeights& w, const float* x, float* out, const ResidualNorm* then = nullptr);

// The SwiGLU feed-forward, out = down(silu(gate x) * up x): x [n_tokens][ne0 of gate] -> out
// [n_tokens][ne1 of down]; gate and up in one matmul call. The shared expert's, and the dense FFN's.
void swiglu_ffn(ForwardPass& fp, const Weight& gate, const Weight& up, const Weight& down, const float* x, float* out);
// x [n_tokens][n_embd] (normed) -> out [n_tokens][n_embd].
void dense_ffn_block(ForwardPass& fp, const DenseFfnWeights& w, const float* x, float* out);

}  // namespace strata::model
