// The central table of GGUF names: architectures, metadata keys (general.*, and per
// architecture "{arch}.block_count") and tensor names, exactly as the ecosystem's converter
// writes them. Architecture files, the converter and the model maker name nothing themselves;
// they use these.
#pragma once

#include <cstdint>
#include <string>

namespace strata::model::names {

// ---- architectures (general.architecture) ----
inline constexpr const char* kArchQwen3Moe = "qwen3moe";
inline constexpr const char* kArchQwen3Next = "qwen3next";
inline constexpr const char* kArchQwen35Moe = "qwen35moe";
inline constexpr const char* kArchQwen3 = "qwen3";

// ---- general.* keys ----
inline constexpr const char* kGeneralArchitecture = "general.architecture";
inline constexpr const char* kGeneralType = "general.type";
inline constexpr const char* kGeneralName = "general.name";
inline constexpr const char* kGeneralAuthor = "general.author";
inline constexpr const char* kGeneralVersion = "general.version";
inline constexpr const char* kGeneralOrganization = "general.organization";
inline constexpr const char* kGeneralFinetune = "general.finetune";
inline constexpr const char* kGeneralBasename = "general.basename";
inline constexpr const char* kGeneralDescription = "general.description";
inline constexpr const char* kGeneralQuantizedBy = "general.quantized_by";
inline constexpr const char* kGeneralSizeLabel = "general.size_label";
inline constexpr const char* kGeneralLicense = "general.license";
inline constexpr const char* kGeneralLicenseName = "general.license.name";
inline constexpr const char* kGeneralLicenseLink = "general.license.link";
inline constexpr const char* kGeneralSourceUrl = "general.source.url";
inline constexpr const char* kGeneralSourceDoi = "general.source.doi";
inline constexpr const char* kGeneralSourceUuid = "general.source.uuid";
inline constexpr const char* kGeneralSourceRepoUrl = "general.source.repo_url";
// Lists of sources: "{prefix}.count", then "{prefix}.{i}.{name|author|version|...}".
inline constexpr const char* kGeneralBaseModel = "general.base_model";
inline constexpr const char* kGeneralDataset = "general.dataset";
inline constexpr const char* kGeneralTags = "general.tags";
inline constexpr const char* kGeneralLanguages = "general.languages";
inline constexpr const char* kGeneralFileType = "general.file_type";
inline constexpr const char* kGeneralQuantizationVersion = "general.quantization_version";
// Recommended sampling (from generation_config.json).
inline constexpr const char* kSamplingSequence = "general.sampling.sequence";
inline constexpr const char* kSamplingTopK = "general.sampling.top_k";
inline constexpr const char* kSamplingTopP = "general.sampling.top_p";
inline constexpr const char* kSamplingMinP = "general.sampling.min_p";
inline constexpr const char* kSamplingXtcProbability = "general.sampling.xtc_probability";
inline constexpr const char* kSamplingXtcThreshold = "general.sampling.xtc_threshold";
inline constexpr const char* kSamplingTemp = "general.sampling.temp";
inline constexpr const char* kSamplingPenaltyLastN = "general.sampling.penalty_last_n";
inline constexpr const char* kSamplingPenaltyRepeat = "general.sampling.penalty_repeat";
inline constexpr const char* kSamplingMirostat = "general.sampling.mirostat";
inline constexpr const char* kSamplingMirostatTau = "general.sampling.mirostat_tau";
inline constexpr const char* kSamplingMirostatEta = "general.sampling.mirostat_eta";

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
inline constexpr const char* kLayerNormEps = "attention.layer_norm_epsilon";
inline constexpr const char* kRopeFreqBase = "rope.freq_base";
inline constexpr const char* kRopeDimCount = "rope.dimension_count";
inline constexpr const char* kRopeSections = "rope.dimension_sections";
inline constexpr const char* kRopeScalingType = "rope.scaling.type";
inline constexpr const char* kRopeScalingFactor = "rope.scaling.factor";
inline constexpr const char* kRopeScalingOrigCtxLen = "rope.scaling.original_context_length";
inline constexpr const char* kRopeScalingYarnExtFactor = "rope.scaling.yarn_ext_factor";
inline constexpr const char* kRopeScalingYarnAttnFactor = "rope.scaling.yarn_attn_factor";
inline constexpr const char* kRopeScalingYarnBetaFast = "rope.scaling.yarn_beta_fast";
inline constexpr const char* kRopeScalingYarnBetaSlow = "rope.scaling.yarn_beta_slow";
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
// Dense FFN (SwiGLU)
inline constexpr const char* kFfnGate = "ffn_gate.weight";
inline constexpr const char* kFfnUp = "ffn_up.weight";
inline constexpr const char* kFfnDown = "ffn_down.weight";
// Mixture of experts
inline constexpr const char* kFfnGateInp = "ffn_gate_inp.weight";
inline constexpr const char* kFfnGateExps = "ffn_gate_exps.weight";
inline constexpr const char* kFfnUpExps = "ffn_up_exps.weight";
inline constexpr const char* kFfnDownExps = "ffn_down_exps.weight";
inline constexpr const char* kFfnGateInpShexp = "ffn_gate_inp_shexp.weight";
inline constexpr const char* kFfnGateShexp = "ffn_gate_shexp.weight";
inline constexpr const char* kFfnUpShexp = "ffn_up_shexp.weight";
inline constexpr const char* kFfnDownShexp = "ffn_down_shexp.weight";
// Gated DeltaNet
inline constexpr const char* kSsmInQkv = "attn_qkv.weight";    // q, k, v of all heads, concatenated
inline constexpr const char* kSsmInGate = "attn_gate.weight";  // z: the output gate
inline constexpr const char* kSsmBa = "ssm_ba.weight";         // qwen3next: beta and alpha together
inline constexpr const char* kSsmBeta = "ssm_beta.weight";     // qwen35moe: beta
inline constexpr const char* kSsmAlpha = "ssm_alpha.weight";   // qwen35moe: alpha
inline constexpr const char* kSsmConv1d = "ssm_conv1d.weight";
inline constexpr const char* kSsmDtBias = "ssm_dt.bias";
inline constexpr const char* kSsmA = "ssm_a";  // -exp(A_log)
inline constexpr const char* kSsmNorm = "ssm_norm.weight";
inline constexpr const char* kSsmOut = "ssm_out.weight";
// MTP (next-token-prediction) blocks, after the trunk's
inline constexpr const char* kNextnEhProj = "nextn.eh_proj.weight";
inline constexpr const char* kNextnEnorm = "nextn.enorm.weight";
inline constexpr const char* kNextnHnorm = "nextn.hnorm.weight";
inline constexpr const char* kNextnSharedHeadNorm = "nextn.shared_head_norm.weight";
inline constexpr const char* kNextnSharedHeadHead = "nextn.shared_head_head.weight";
inline constexpr const char* kNextnEmbedTokens = "nextn.embed_tokens.weight";

inline std::string layer(int64_t il, const char* suffix) { return "blk." + std::to_string(il) + "." + suffix; }

}  // namespace strata::model::names
