// qwen35moe: Qwen3.5 MoE (text). The qwen3next stack (see qwen3next.cpp) with two GGUF layout
// differences in the Gated DeltaNet layers:
//  - b and alpha are separate projections, ssm_beta and ssm_alpha, one row per value head;
//  - the converter reorders every value-head-indexed tensor (v rows of attn_qkv and of the conv,
//    attn_gate, ssm_beta/alpha, ssm_a, ssm_dt.bias, the ssm_out columns) from the checkpoint's
//    grouped order to tiled order, so value head h reads key head h % n_k.
// RoPE: Qwen3.5 uses interleaved M-RoPE (rope.dimension_sections). For text the three position
// streams are equal, so every rotated pair turns by the same angle as plain NeoX RoPE over n_rot
// dims; the sections only matter once images bring distinct positions.
#include "model/architecture.h"
#include "model/gated_delta_net.h"
#include "model/names.h"

namespace strata::model {

// qwen3next.cpp: the hybrid stack, its layer-kind rule and checks.
void complete_hybrid(ModelConfig& cfg);
void check_hybrid(const ModelConfig& cfg, const std::string& where);
std::unique_ptr<Architecture> make_hybrid_gdn_moe(const GdnLayout& layout);

namespace {

namespace defaults = key_defaults;

// The keys, in the order make-model writes them (the ecosystem converter's order). As
// qwen3next's, without feed_forward_length and with the M-RoPE sections always written.
constexpr ConfigKey kQwen35MoeKeys[] = {
    required_key(names::kBlockCount, &ModelConfig::n_layer, &ModelConfig::n_mtp_layers),
    required_key(names::kContextLength, &ModelConfig::n_ctx_train),
    required_key(names::kEmbeddingLength, &ModelConfig::n_embd),
    required_key(names::kHeadCount, &ModelConfig::n_head),
    optional_key(names::kHeadCountKv, &ModelConfig::n_head_kv, defaults::kv_heads),
    optional_key(names::kRopeFreqBase, &ModelConfig::rope_theta, defaults::rope_theta),
    required_key(names::kRmsEps, &ModelConfig::rms_eps),
    required_key(names::kExpertCount, &ModelConfig::n_expert),
    required_key(names::kExpertUsedCount, &ModelConfig::n_expert_used),
    optional_key(names::kKeyLength, &ModelConfig::head_dim_k, defaults::head_dim),
    optional_key(names::kValueLength, &ModelConfig::head_dim_v, defaults::value_dim),
    required_key(names::kExpertFfLength, &ModelConfig::n_ff_exp),
    optional_key(names::kExpertSharedFfLength, &ModelConfig::n_ff_shexp, defaults::zero),
    required_key(names::kSsmConvKernel, &ModelConfig::ssm_conv_kernel),
    required_key(names::kSsmStateSize, &ModelConfig::ssm_d_state),
    required_key(names::kSsmGroupCount, &ModelConfig::ssm_n_group),
    required_key(names::kSsmTimeStepRank, &ModelConfig::ssm_dt_rank),
    required_key(names::kSsmInnerSize, &ModelConfig::ssm_d_inner),
    optional_key(names::kFullAttentionInterval, &ModelConfig::full_attention_interval, [](const ModelConfig&) { return 4.0; }),
    optional_key(names::kRopeDimCount, &ModelConfig::n_rot, defaults::n_rot),
    optional_key(names::kRopeSections, &ModelConfig::rope_sections, nullptr),
    optional_key(names::kNextnPredictLayers, &ModelConfig::n_mtp_layers, defaults::zero, ConfigKey::Write::UnlessDefault),
    optional_key(names::kExpertWeightsNorm, &ModelConfig::norm_topk_prob, defaults::yes, ConfigKey::Write::UnlessDefault),
};

const ModelPreset kQwen35MoePresets[] = {
    {"tiny",
     "tiny test model",
     {.n_embd = 128,
      .n_layer = 4,
      .n_ctx_train = 4096,
      .rms_eps = 1e-6f,
      .n_head = 4,
      .n_head_kv = 2,
      .head_dim_k = 64,
      .head_dim_v = 64,
      .n_rot = 16,
      .rope_theta = 1e7f,
      .rope_sections = {3, 3, 2, 0},
      .n_expert = 8,
      .n_expert_used = 2,
      .n_ff_exp = 64,
      .n_ff_shexp = 64,
      .ssm_conv_kernel = 4,
      .ssm_d_state = 32,
      .ssm_n_group = 2,
      .ssm_dt_rank = 4,
      .ssm_d_inner = 4 * 32,
      .full_attention_interval = 4}},
    {"35b-a3b",
     "Qwen3.5-35B-A3B geometry",
     {.n_embd = 2048,
      .n_layer = 40,
      .n_ctx_train = 262144,
      .rms_eps = 1e-6f,
      .n_head = 16,
      .n_head_kv = 2,
      .head_dim_k = 256,
      .head_dim_v = 256,
      .n_rot = 64,
      .rope_theta = 1e7f,
      .rope_sections = {11, 11, 10, 0},
      .n_expert = 256,
      .n_expert_used = 8,
      .n_ff_exp = 512,
      .n_ff_shexp = 512,
      .ssm_conv_kernel = 4,
      .ssm_d_state = 128,
      .ssm_n_group = 16,
      .ssm_dt_rank = 32,
      .ssm_d_inner = 32 * 128,
      .full_attention_interval = 4}},
    {"122b-a10b",
     "Qwen3.5-122B-A10B geometry (approximate)",
     {.n_embd = 3072,
      .n_layer = 48,
      .n_ctx_train = 262144,
      .rms_eps = 1e-6f,
      .n_head = 32,
      .n_head_kv = 2,
      .head_dim_k = 256,
      .head_dim_v = 256,
      .n_rot = 64,
      .rope_theta = 1e7f,
      .rope_sections = {11, 11, 10, 0},
      .n_expert = 256,
      .n_expert_used = 8,
      .n_ff_exp = 1024,
      .n_ff_shexp = 1024,
      .ssm_conv_kernel = 4,
      .ssm_d_state = 128,
      .ssm_n_group = 16,
      .ssm_dt_rank = 64,
      .ssm_d_inner = 64 * 128,
      .full_attention_interval = 4}},
    {"seed-125b",
     "the seed's 122B geometry: 2560 wide, 512 experts top-10, 640-wide experts",
     {.n_embd = 2560,
      .n_layer = 48,
      .n_ctx_train = 262144,
      .rms_eps = 1e-6f,
      .n_head = 24,
      .n_head_kv = 2,
      .head_dim_k = 128,
      .head_dim_v = 128,
      .n_rot = 64,
      .rope_theta = 1e7f,
      .rope_sections = {11, 11, 10, 0},
      .n_expert = 512,
      .n_expert_used = 10,
      .n_ff_exp = 640,
      .n_ff_shexp = 640,
      .ssm_conv_kernel = 4,
      .ssm_d_state = 128,
      .ssm_n_group = 16,
      .ssm_dt_rank = 32,
      .ssm_d_inner = 32 * 128,
      .full_attention_interval = 4}},
};

}  // namespace

const ArchitectureInfo& qwen35moe_architecture() {
    static const ArchitectureInfo info = {
        .name = names::kArchQwen35Moe,
        .arch = Arch::Qwen35Moe,
        .keys = kQwen35MoeKeys,
        .complete = complete_hybrid,
        .check = check_hybrid,
        .presets = kQwen35MoePresets,
        .make =
            [] {
                GdnLayout layout;
                layout.combined_ba = false;
                layout.key_heads = backend::KeyHeadMap::Tiled;
                return make_hybrid_gdn_moe(layout);
            },
    };
    return info;
}

}  // namespace strata::model
