// qwen3moe: Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B.
// Every layer: RMSNorm -> GQA attention (q/k RMSNorm, RoPE over the whole head) -> residual ->
// RMSNorm -> MoE (softmax router, top-k, renormalised weights; no shared expert) -> residual.
#include "model/architecture.h"
#include "model/blocks.h"
#include "model/names.h"

namespace strata::model {

namespace {

namespace defaults = key_defaults;

// The keys, in the order make-model writes them (the ecosystem converter's order).
constexpr ConfigKey kQwen3MoeKeys[] = {
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
    optional_key(names::kRopeDimCount, &ModelConfig::n_rot, defaults::n_rot, ConfigKey::Write::UnlessDefault),
    optional_key(names::kRopeSections, &ModelConfig::rope_sections, nullptr, ConfigKey::Write::UnlessDefault),
    optional_key(names::kNextnPredictLayers, &ModelConfig::n_mtp_layers, defaults::zero, ConfigKey::Write::UnlessDefault),
    // The converter writes it only when false; Qwen3-MoE checkpoints all renormalise top-k.
    optional_key(names::kExpertWeightsNorm, &ModelConfig::norm_topk_prob, defaults::yes, ConfigKey::Write::UnlessDefault),
};

void complete_qwen3moe(ModelConfig& cfg) { cfg.layers.assign(static_cast<size_t>(cfg.n_layer), LayerKind::Attention); }

void check_qwen3moe(const ModelConfig& cfg, const std::string& where) { check_common_config(cfg, where, /*moe=*/true); }

const ModelPreset kQwen3MoePresets[] = {
    {"tiny",
     "tiny test model",
     {.n_embd = 128,
      .n_layer = 4,
      .n_ctx_train = 4096,
      .rms_eps = 1e-6f,
      .n_head = 4,
      .n_head_kv = 2,
      .head_dim_k = 32,
      .head_dim_v = 32,
      .n_rot = 32,
      .rope_theta = 1e6f,
      .n_expert = 8,
      .n_expert_used = 2,
      .n_ff_exp = 64}},
    {"30b-a3b",
     "Qwen3-30B-A3B geometry",
     {.n_embd = 2048,
      .n_layer = 48,
      .n_ctx_train = 40960,
      .rms_eps = 1e-6f,
      .n_head = 32,
      .n_head_kv = 4,
      .head_dim_k = 128,
      .head_dim_v = 128,
      .n_rot = 128,
      .rope_theta = 1e6f,
      .n_expert = 128,
      .n_expert_used = 8,
      .n_ff_exp = 768}},
};

class Qwen3Moe final : public Architecture {
public:
    void bind(const ModelConfig& cfg, WeightBinder& b) override {
        token_embd_ = b.require(names::kTokenEmbd, {cfg.n_embd, cfg.n_vocab});
        output_norm_ = b.require(names::kOutputNorm, {cfg.n_embd});
        output_ = b.optional(names::kOutput, {cfg.n_embd, cfg.n_vocab});
        layers_.resize(static_cast<size_t>(cfg.n_layer));
        for (int64_t il = 0; il < cfg.n_layer; ++il) {
            Layer& l = layers_[static_cast<size_t>(il)];
            l.attn_norm = b.require(names::layer(il, names::kAttnNorm), {cfg.n_embd});
            l.attn = bind_attention(cfg, b, il);
            l.ffn_norm = b.require(names::layer(il, names::kFfnNorm), {cfg.n_embd});
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
        // attention norm after the MoE branch, which the MoE block does: ResidualNorm).
        if (c.n_layer > 0) be.rms_norm(hidden, &layers_[0].attn_norm, n, c.n_embd, c.rms_eps, normed);
        for (int64_t il = 0; il < c.n_layer; ++il) {
            const Layer& l = layers_[static_cast<size_t>(il)];
            attention_block(fp, il, l.attn, normed, branch);
            be.add_rms_norm(hidden, branch, &l.ffn_norm, n, c.n_embd, c.rms_eps, normed);
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
        Weight attn_norm, ffn_norm;
        AttentionWeights attn;
        MoeWeights moe;
    };
    Weight token_embd_, output_norm_, output_;
    std::vector<Layer> layers_;
};

}  // namespace

const ArchitectureInfo& qwen3moe_architecture() {
    static const ArchitectureInfo info = {
        .name = names::kArchQwen3Moe,
        .arch = Arch::Qwen3Moe,
        .keys = kQwen3MoeKeys,
        .complete = complete_qwen3moe,
        .check = check_qwen3moe,
        .presets = kQwen3MoePresets,
        .make = [] { return std::unique_ptr<Architecture>(std::make_unique<Qwen3Moe>()); },
    };
    return info;
}

}  // namespace strata::model
