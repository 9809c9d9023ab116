// The central table of GGUF names: metadata keys (per architecture: "{arch}.block_count") and
// tensor names, exactly as the ecosystem's converter writes them. Architecture files name
// nothing themselves; they use these.
#pragma once

#include <string>

namespace strata::model::names {

// ---- metadata keys, relative to the architecture prefix ----
inline constexpr const char* kBlockCount = "block_count";
inline constexpr const char* kContextLength = "context_length";
inline constexpr const char* kEmbeddingLength = "embedding_length";
inline constexpr const char* kFeedForwardLength = "feed_forward_length";
inline constexpr const char* kHeadCount = "attention.head_count";
inline constexpr const char* kHeadCountKv = "attention.head_count_kv";
inline constexpr const char* kKeyLength = "attention.key_length";
inline constexpr const char* kValueLength = "attention.value_length";
inline constexpr const char* kRmsEps = "attention.layer_norm_rms_epsilon";
inline constexpr const char* kRopeFreqBase = "rope.freq_base";
inline constexpr const char* kRopeDimCount = "rope.dimension_count";
inline constexpr const char* kRopeSections = "rope.dimension_sections";
inline constexpr const char* kExpertCount = "expert_count";
inline constexpr const char* kExpertUsedCount = "expert_used_count";
inline constexpr const char* kExpertFfLength = "expert_feed_forward_length";
inline constexpr const char* kExpertSharedFfLength = "expert_shared_feed_forward_length";
inline constexpr const char* kExpertWeightsNorm = "expert_weights_norm";
inline constexpr const char* kSsmConvKernel = "ssm.conv_kernel";
inline constexpr const char* kSsmStateSize = "ssm.state_size";
inline constexpr const char* kSsmGroupCount = "ssm.group_count";
inline constexpr const char* kSsmTimeStepRank = "ssm.time_step_rank";
inline constexpr const char* kSsmInnerSize = "ssm.inner_size";
inline constexpr const char* kFullAttentionInterval = "full_attention_interval";
inline constexpr const char* kNextnPredictLayers = "nextn_predict_layers";  // MTP blocks at the end

// "{arch}.{key}"
inline std::string key(const std::string& arch, const char* k) { return arch + "." + k; }

// ---- tensors ----
inline constexpr const char* kTokenEmbd = "token_embd.weight";
inline constexpr const char* kOutputNorm = "output_norm.weight";
inline constexpr const char* kOutput = "output.weight";

// Per-layer tensors: "blk.{il}.{suffix}".
inline constexpr const char* kAttnNorm = "attn_norm.weight";
inline constexpr const char* kAttnQ = "attn_q.weight";
inline constexpr const char* kAttnK = "attn_k.weight";
inline constexpr const char* kAttnV = "attn_v.weight";
inline constexpr const char* kAttnOut = "attn_output.weight";
inline constexpr const char* kAttnQNorm = "attn_q_norm.weight";
inline constexpr const char* kAttnKNorm = "attn_k_norm.weight";
inline constexpr const char* kPostAttnNorm = "post_attention_norm.weight";
inline constexpr const char* kFfnNorm = "ffn_norm.weight";
inline constexpr const char* kFfnGateInp = "ffn_gate_inp.weight";
inline constexpr const char* kFfnGateExps = "ffn_gate_exps.weight";
inline constexpr const char* kFfnUpExps = "ffn_up_exps.weight";
inline constexpr const char* kFfnDownExps = "ffn_down_exps.weight";
inline constexpr const char* kFfnGateInpShexp = "ffn_gate_inp_shexp.weight";
inline constexpr const char* kFfnGateShexp = "ffn_gate_shexp.weight";
inline constexpr const char* kFfnUpShexp = "ffn_up_shexp.weight";
inline constexpr const char* kFfnDownShexp = "ffn_down_shexp.weight";
// Gated DeltaNet
inline constexpr const char* kSsmInQkv = "attn_qkv.weight";     // q, k, v of all heads, concatenated
inline constexpr const char* kSsmInGate = "attn_gate.weight";   // z: the output gate
inline constexpr const char* kSsmBa = "ssm_ba.weight";          // qwen3next: beta and alpha together
inline constexpr const char* kSsmBeta = "ssm_beta.weight";      // qwen35moe: beta
inline constexpr const char* kSsmAlpha = "ssm_alpha.weight";    // qwen35moe: alpha
inline constexpr const char* kSsmConv1d = "ssm_conv1d.weight";
inline constexpr const char* kSsmDtBias = "ssm_dt.bias";
inline constexpr const char* kSsmA = "ssm_a";                  // -exp(A_log)
inline constexpr const char* kSsmNorm = "ssm_norm.weight";
inline constexpr const char* kSsmOut = "ssm_out.weight";

inline std::string layer(int64_t il, const char* suffix) { return "blk." + std::to_string(il) + "." + suffix; }

}  // namespace strata::model::names
