// qwen3: the dense Qwen3 models (Qwen3-0.6B ... Qwen3-32B). qwen3moe's attention with a dense
// SwiGLU feed-forward. Every layer: RMSNorm (attn_norm) -> GQA attention (q/k RMSNorm, RoPE over
// the whole head) -> residual -> RMSNorm (ffn_norm) -> down(silu(gate x) * up x) -> residual.
#include "model/architecture.h"
#include "model/blocks.h"
#include "model/names.h"
#include "util/error.h"

namespace strata::model {

namespace {

namespace defaults = key_defaults;

// The keys, in the order the ecosystem converter writes them.
constexpr ConfigKey kQwen3Keys[] = {
    required_key(names::kBlockCount, &ModelConfig::n_layer),
    required_key(names::kContextLength, &ModelConfig::n_ctx_train),
    required_key(names::kEmbeddingLength, &ModelConfig::n_embd),
    required_key(names::kFeedForwardLength, &ModelConfig::n_ff),
    required_key(names::kHeadCount, &ModelConfig::n_head),
    optional_key(names::kHeadCountKv, &ModelConfig::n_head_kv, defaults::kv_heads),
    optional_key(names::kRopeFreqBase, &ModelConfig::rope_theta, defaults::rope_theta),
    required_key(names::kRmsEps, &ModelConfig::rms_eps),
    optional_key(names::kKeyLength, &ModelConfig::head_dim_k, defaults::head_dim),
    optional_key(names::kValueLength, &ModelConfig::head_dim_v, defaults::value_dim),
    optional_key(names::kRopeDimCount, &ModelConfig::n_rot, defaults::n_rot, ConfigKey::Write::UnlessDefault),
};

void complete_qwen3(ModelConfig& cfg) { cfg.layers.assign(static_cast<size_t>(cfg.n_layer), LayerKind::Attention); }

void check_qwen3(const ModelConfig& cfg, const std::string& where) {
    check_common_config(cfg, where, /*moe=*/false);
    if (cfg.n_ff <= 0) throw Error(where + ": feed_forward_length must be positive");
}

const ModelPreset kQwen3Presets[] = {
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
      .n_ff = 256}},
    {"0.6b",
     "Qwen3-0.6B geometry (also Qwen3-Embedding-0.6B and Qwen3-Reranker-0.6B)",
     {.n_embd = 1024,
      .n_layer = 28,
      .n_ctx_train = 32768,
      .rms_eps = 1e-6f,
      .n_head = 16,
      .n_head_kv = 8,
      .head_dim_k = 128,
      .head_dim_v = 128,
      .n_rot = 128,
      .rope_theta = 1e6f,
      .n_ff = 3072}},
    {"8b",
     "Qwen3-8B geometry",
     {.n_embd = 4096,
      .n_layer = 36,
      .n_ctx_train = 40960,
      .rms_eps = 1e-6f,
      .n_head = 32,
      .n_head_kv = 8,
      .head_dim_k = 128,
      .head_dim_v = 128,
      .n_rot = 128,
      .rope_theta = 1e6f,
      .n_ff = 12288}},
};

class Qwen3 final : public Architecture {
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
            l.ffn = bind_dense_ffn(cfg, b, il);
        }
    }

    void forward(ForwardPass& fp, float* hidden) override {
        const ModelConfig& c = *fp.cfg;
        backend::Backend& be = *fp.be;
        const int64_t n = fp.n_tokens, size = n * c.n_embd;
        Scratch s(*fp.arena);
        float* normed = s.floats(size);  // [n][n_embd] the normed residual, each block's input
        float* branch = s.floats(size);  // [n][n_embd] each block's output
        // Each residual add is fused with the norm that reads its result.
        if (c.n_layer > 0) be.rms_norm(hidden, &layers_[0].attn_norm, n, c.n_embd, c.rms_eps, normed);
        for (int64_t il = 0; il < c.n_layer; ++il) {
            const Layer& l = layers_[static_cast<size_t>(il)];
            attention_block(fp, il, l.attn, normed, branch);
            be.add_rms_norm(hidden, branch, &l.ffn_norm, n, c.n_embd, c.rms_eps, normed);
            dense_ffn_block(fp, l.ffn, normed, branch);
            if (il + 1 < c.n_layer)
                be.add_rms_norm(hidden, branch, &layers_[static_cast<size_t>(il + 1)].attn_norm, n, c.n_embd, c.rms_eps, normed);
            else be.add(hidden, branch, size);
        }
    }

    const Weight& output_norm() const override { return output_norm_; }
    const Weight& output() const override { return output_ ? output_ : token_embd_; }
    const Weight& token_embd() const override { return token_embd_; }

private:
    struct Layer {
        Weight attn_norm, ffn_norm;
        AttentionWeights attn;
        DenseFfnWeights ffn;
    };
    Weight token_embd_, output_norm_, output_;
    std::vector<Layer> layers_;
};

}  // namespace

const ArchitectureInfo& qwen3_architecture() {
    static const ArchitectureInfo info = {
        .name = names::kArchQwen3,
        .arch = Arch::Qwen3,
        .keys = kQwen3Keys,
        .complete = complete_qwen3,
        .check = check_qwen3,
        .presets = kQwen3Presets,
        .make = [] { return std::unique_ptr<Architecture>(std::make_unique<Qwen3>()); },
    };
    return info;
}

}  // namespace strata::model
