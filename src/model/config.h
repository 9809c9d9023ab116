// Hyper-parameters of a loaded model: plain data, read once from GGUF metadata through the
// architecture's key table (config_io.h, read_config) and checked there. Names follow the GGUF
// keys they come from.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::model {

enum class Arch { Qwen3Moe, Qwen3Next, Qwen35Moe, Qwen3 };

enum class LayerKind : uint8_t {
    Attention,      // (gated) full softmax attention over the KV cache
    GatedDeltaNet,  // linear attention with a recurrent state (Qwen3-Next / Qwen3.5)
};

struct ModelConfig {
    Arch arch = Arch::Qwen3Moe;
    std::string arch_name;          // general.architecture
    int64_t n_vocab = 0;            // rows of token_embd
    int64_t n_embd = 0;             // {arch}.embedding_length: hidden size
    int64_t n_layer = 0;            // {arch}.block_count minus the MTP blocks: the layers the forward runs
    int64_t n_mtp_layers = 0;       // {arch}.nextn_predict_layers: multi-token-prediction blocks after them
    int64_t n_ctx_train = 0;        // {arch}.context_length
    float rms_eps = 1e-6f;          // {arch}.attention.layer_norm_rms_epsilon
    std::vector<LayerKind> layers;  // [n_layer]

    // Attention layers.
    int64_t n_head = 0;             // {arch}.attention.head_count: query heads
    int64_t n_head_kv = 0;          // {arch}.attention.head_count_kv
    int64_t head_dim_k = 0;         // {arch}.attention.key_length
    int64_t head_dim_v = 0;         // {arch}.attention.value_length
    bool attn_output_gate = false;  // Qwen3-Next/3.5: q projection carries a sigmoid gate per head

    // RoPE (NeoX layout: the rotated dimension pairs are (i, i + n_rot/2)).
    int64_t n_rot = 0;                       // {arch}.rope.dimension_count: rotated dims per head (partial RoPE)
    float rope_theta = 10000.0f;             // {arch}.rope.freq_base
    std::array<int32_t, 4> rope_sections{};  // {arch}.rope.dimension_sections (M-RoPE); zeros: plain RoPE
    bool rope_freqs_bf16 = false;            // LoadOptions::rope_freqs_bf16 (reference reproduction only)

    // Dense feed-forward (qwen3).
    int64_t n_ff = 0;  // {arch}.feed_forward_length: hidden size of the SwiGLU FFN

    // Mixture of experts.
    int64_t n_expert = 0;        // {arch}.expert_count
    int64_t n_expert_used = 0;   // {arch}.expert_used_count: top-k
    int64_t n_ff_exp = 0;        // {arch}.expert_feed_forward_length: per-expert hidden size
    int64_t n_ff_shexp = 0;      // {arch}.expert_shared_feed_forward_length (0: no shared expert)
    bool norm_topk_prob = true;  // renormalise the top-k routing weights to sum to 1

    // Gated DeltaNet layers (zero for qwen3moe, qwen3).
    int64_t ssm_conv_kernel = 0;          // {arch}.ssm.conv_kernel: causal conv1d width
    int64_t ssm_d_state = 0;              // {arch}.ssm.state_size: key head dim
    int64_t ssm_n_group = 0;              // {arch}.ssm.group_count: key heads
    int64_t ssm_dt_rank = 0;              // {arch}.ssm.time_step_rank: value heads
    int64_t ssm_d_inner = 0;              // {arch}.ssm.inner_size: value heads * value head dim
    int64_t full_attention_interval = 0;  // every Nth layer is attention

    bool tied_output = false;  // no output.weight: the head reuses token_embd

    int64_t n_attention_layers() const;
    int64_t n_gdn_layers() const;
};

}  // namespace strata::model
