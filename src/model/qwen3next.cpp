// qwen3next: Qwen3-Next-80B-A3B. Hybrid stack: every full_attention_interval-th layer is gated
// softmax attention, the others Gated DeltaNet. Every layer:
//   RMSNorm (attn_norm) -> gated attention or Gated DeltaNet -> residual ->
//   RMSNorm (post_attention_norm) -> MoE (softmax router, top-k renormalised, plus a
//   sigmoid-gated shared expert) -> residual.
// Attention: q projection per head [q | gate], q/k RMSNorm, partial NeoX RoPE over n_rot dims,
// output * sigmoid(gate). The checkpoint's RMSNorms are zero-centred (x * (1 + w)); the converter
// stores 1 + w for all of them except the Gated DeltaNet's own gated norm, so every norm here is a
// plain x * w.
//
// qwen35moe (Qwen3.5 MoE) is the same stack with a different GGUF layout of the Gated DeltaNet
// tensors; qwen35moe.cpp builds this class with its layout.
#include "model/architecture.h"
#include "model/blocks.h"
#include "model/gated_delta_net.h"
#include "model/names.h"
#include "util/error.h"

namespace strata::model {

// The hybrid stacks' layer-kind rule and checks, shared with qwen35moe.cpp.
void complete_hybrid(ModelConfig& cfg);
void check_hybrid(const ModelConfig& cfg, const std::string& where);
std::unique_ptr<Architecture> make_hybrid_gdn_moe(const GdnLayout& layout);

namespace {

namespace defaults = key_defaults;

// The keys, in the order make-model writes them (the ecosystem converter's order).
constexpr ConfigKey kQwen3NextKeys[] = {
    required_key(names::kBlockCount, &ModelConfig::n_layer, &ModelConfig::n_mtp_layers),
    required_key(names::kContextLength, &ModelConfig::n_ctx_train),
    required_key(names::kEmbeddingLength, &ModelConfig::n_embd),
    // The checkpoint's intermediate_size (the experts' width times top-k); not used.
    derived_key(names::kFeedForwardLength,
                [](const ModelConfig& c) { return static_cast<double>(c.n_ff_exp * c.n_expert_used); }),
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
    // The converter writes 4 when the checkpoint has no explicit value; llama.cpp assumes the same.
    optional_key(names::kFullAttentionInterval, &ModelConfig::full_attention_interval, [](const ModelConfig&) { return 4.0; }),
    optional_key(names::kRopeDimCount, &ModelConfig::n_rot, defaults::n_rot),
    optional_key(names::kRopeSections, &ModelConfig::rope_sections, nullptr, ConfigKey::Write::UnlessDefault),
    optional_key(names::kNextnPredictLayers, &ModelConfig::n_mtp_layers, defaults::zero, ConfigKey::Write::UnlessDefault),
    // No key is written; Qwen3-Next and Qwen3.5 MoE renormalise the top-k routing weights.
    optional_key(names::kExpertWeightsNorm, &ModelConfig::norm_topk_prob, defaults::yes, ConfigKey::Write::UnlessDefault),
};

const ModelPreset kQwen3NextPresets[] = {
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
    {"80b-a3b",
     "Qwen3-Next-80B-A3B geometry",
     {.n_embd = 2048,
      .n_layer = 48,
      .n_ctx_train = 262144,
      .rms_eps = 1e-6f,
      .n_head = 16,
      .n_head_kv = 2,
      .head_dim_k = 256,
      .head_dim_v = 256,
      .n_rot = 64,
      .rope_theta = 1e7f,
      .n_expert = 512,
      .n_expert_used = 10,
      .n_ff_exp = 512,
      .n_ff_shexp = 512,
      .ssm_conv_kernel = 4,
      .ssm_d_state = 128,
      .ssm_n_group = 16,
      .ssm_dt_rank = 32,
      .ssm_d_inner = 32 * 128,
      .full_attention_interval = 4}},
};

class HybridGdnMoe final : public Architecture {
public:
    explicit HybridGdnMoe(const GdnLayout& layout) : layout_(layout) {}

    void bind(const ModelConfig& cfg, WeightBinder& b) override {
        token_embd_ = b.require(names::kTokenEmbd, {cfg.n_embd, cfg.n_vocab});
        output_norm_ = b.require(names::kOutputNorm, {cfg.n_embd});
        output_ = b.optional(names::kOutput, {cfg.n_embd, cfg.n_vocab});
        layers_.resize(static_cast<size_t>(cfg.n_layer));
        for (int64_t il = 0; il < cfg.n_layer; ++il) {
            Layer& l = layers_[static_cast<size_t>(il)];
            l.attn_norm = b.require(names::layer(il, names::kAttnNorm), {cfg.n_embd});
            if (cfg.layers[static_cast<size_t>(il)] == LayerKind::Attention) l.attn = bind_attention(cfg, b, il);
            else l.gdn = bind_gated_delta_net(cfg, b, il, layout_);
            l.post_attn_norm = b.require(names::layer(il, names::kPostAttnNorm), {cfg.n_embd});
            l.moe = bind_moe(cfg, b, il);
        }
    }

    void forward(ForwardPass& fp, float* hidden) override {
        const ModelConfig& c = *fp.cfg;
        backend::Backend& be = *fp.be;
        const int64_t n = fp.n_tokens, size = n * c.n_embd;
        Scratch s(*fp.arena);
        float* normed = s.floats(size);  // [n][n_embd] the normed residual, each block's input
        float* branch = s.floats(size);  // [n][n_embd] each block's output
        // Each residual add is fused with the norm that reads its result (the next layer's
        // input norm after the MoE branch, which the MoE block does: ResidualNorm).
        if (c.n_layer > 0) be.rms_norm(hidden, &layers_[0].attn_norm, n, c.n_embd, c.rms_eps, normed);
        for (int64_t il = 0; il < c.n_layer; ++il) {
            const Layer& l = layers_[static_cast<size_t>(il)];
            if (c.layers[static_cast<size_t>(il)] == LayerKind::Attention) attention_block(fp, il, l.attn, normed, branch);
            else gated_delta_net_block(fp, il, l.gdn, normed, branch);
            be.add_rms_norm(hidden, branch, &l.post_attn_norm, n, c.n_embd, c.rms_eps, normed);
            if (il + 1 < c.n_layer) {
                const ResidualNorm then{hidden, &layers_[static_cast<size_t>(il + 1)].attn_norm, c.rms_eps, normed};
                moe_block(fp, il, l.moe, normed, branch, &then);
                continue;
            }
            moe_block(fp, il, l.moe, normed, branch);
            be.add(hidden, branch, size);
        }
    }

    const Weight& output_norm() const override { return output_norm_; }
    const Weight& output() const override { return output_ ? output_ : token_embd_; }
    const Weight& token_embd() const override { return token_embd_; }

private:
    struct Layer {
        Weight attn_norm, post_attn_norm;
        AttentionWeights attn;     // attention layers
        GatedDeltaNetWeights gdn;  // Gated DeltaNet layers
        MoeWeights moe;
    };
    GdnLayout layout_;
    Weight token_embd_, output_norm_, output_;
    std::vector<Layer> layers_;
};

}  // namespace

// The layer-kind rule: layer il is full attention when (il + 1) % full_attention_interval == 0
// (the last layer of every interval), Gated DeltaNet otherwise. The interval is positive
// (check_hybrid).
void complete_hybrid(ModelConfig& cfg) {
    cfg.attn_output_gate = true;
    cfg.layers.resize(static_cast<size_t>(cfg.n_layer));
    for (int64_t il = 0; il < cfg.n_layer; ++il)
        cfg.layers[static_cast<size_t>(il)] =
            (il + 1) % cfg.full_attention_interval == 0 ? LayerKind::Attention : LayerKind::GatedDeltaNet;
}

void check_hybrid(const ModelConfig& cfg, const std::string& where) {
    check_common_config(cfg, where, /*moe=*/true);
    auto check = [&](bool ok, const std::string& what) {
        if (!ok) throw Error(where + ": " + what);
    };
    check(cfg.full_attention_interval > 0, "full_attention_interval must be positive");
    check(cfg.ssm_conv_kernel >= 1 && cfg.ssm_conv_kernel <= 64,
          "ssm.conv_kernel " + std::to_string(cfg.ssm_conv_kernel) + " is out of range");
    check(cfg.ssm_d_state > 0 && cfg.ssm_n_group > 0 && cfg.ssm_dt_rank > 0 && cfg.ssm_d_inner > 0,
          "ssm state_size, group_count, time_step_rank and inner_size must be positive");
    check(cfg.ssm_dt_rank % cfg.ssm_n_group == 0, "ssm.time_step_rank " + std::to_string(cfg.ssm_dt_rank) +
                                                      " (value heads) is not a multiple of ssm.group_count " +
                                                      std::to_string(cfg.ssm_n_group) + " (key heads)");
    check(cfg.ssm_d_inner % cfg.ssm_dt_rank == 0, "ssm.inner_size " + std::to_string(cfg.ssm_d_inner) +
                                                      " is not a multiple of ssm.time_step_rank " +
                                                      std::to_string(cfg.ssm_dt_rank));
}

std::unique_ptr<Architecture> make_hybrid_gdn_moe(const GdnLayout& layout) { return std::make_unique<HybridGdnMoe>(layout); }

const ArchitectureInfo& qwen3next_architecture() {
    static const ArchitectureInfo info = {
        .name = names::kArchQwen3Next,
        .arch = Arch::Qwen3Next,
        .keys = kQwen3NextKeys,
        .complete = complete_hybrid,
        .check = check_hybrid,
        .presets = kQwen3NextPresets,
        .make =
            [] {
                GdnLayout layout;
                layout.combined_ba = true;
                layout.key_heads = backend::KeyHeadMap::Grouped;
                return make_hybrid_gdn_moe(layout);
            },
    };
    return info;
}

}  // namespace strata::model
