#include "model/config_io.h"

#include "gguf/gguf_writer.h"
#include "model/names.h"

namespace strata::model {

void write_config(const ModelConfig& c, gguf::Writer& w) {
    using gguf::Value;
    const std::string& a = c.arch_name;
    auto u32 = [&](const char* k, int64_t v) { w.set(names::key(a, k), Value::of_u32(static_cast<uint32_t>(v))); };
    w.set("general.architecture", Value::of_string(a));
    u32(names::kBlockCount, c.n_layer);
    u32(names::kContextLength, c.n_ctx_train);
    u32(names::kEmbeddingLength, c.n_embd);
    if (c.arch != Arch::Qwen35Moe) u32(names::kFeedForwardLength, c.n_ff_exp * c.n_expert_used);
    u32(names::kHeadCount, c.n_head);
    u32(names::kHeadCountKv, c.n_head_kv);
    w.set(names::key(a, names::kRopeFreqBase), Value::of_f32(c.rope_theta));
    w.set(names::key(a, names::kRmsEps), Value::of_f32(c.rms_eps));
    u32(names::kExpertCount, c.n_expert);
    u32(names::kExpertUsedCount, c.n_expert_used);
    u32(names::kKeyLength, c.head_dim_k);
    u32(names::kValueLength, c.head_dim_v);
    u32(names::kExpertFfLength, c.n_ff_exp);
    if (c.arch == Arch::Qwen3Moe) return;
    u32(names::kExpertSharedFfLength, c.n_ff_shexp);
    u32(names::kSsmConvKernel, c.ssm_conv_kernel);
    u32(names::kSsmStateSize, c.ssm_d_state);
    u32(names::kSsmGroupCount, c.ssm_n_group);
    u32(names::kSsmTimeStepRank, c.ssm_dt_rank);
    u32(names::kSsmInnerSize, c.ssm_d_inner);
    u32(names::kFullAttentionInterval, c.full_attention_interval);
    u32(names::kRopeDimCount, c.n_rot);
    if (c.arch == Arch::Qwen35Moe) {
        w.set(names::key(a, names::kRopeSections),
              Value::of_i32s({c.rope_sections[0], c.rope_sections[1], c.rope_sections[2], c.rope_sections[3]}));
    }
}

}  // namespace strata::model
