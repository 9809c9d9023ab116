// qwen3moe: Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B.
// Every layer: RMSNorm -> GQA attention (q/k RMSNorm, RoPE over the whole head) -> residual ->
// RMSNorm -> MoE (softmax router, top-k, renormalised weights; no shared expert) -> residual.
#include "gguf/gguf.h"
#include "model/architecture.h"
#include "model/blocks.h"
#include "model/names.h"

namespace strata::model {

namespace {

class Qwen3Moe final : public Architecture {
    // Scratch slots (architectures use 16..31: architecture.h).
    enum Slot : size_t { kNormed = 16, kBranch };

public:
    void load_config(const gguf::File& f, ModelConfig& cfg) override {
        load_common_config(f, cfg);
        cfg.layers.assign(static_cast<size_t>(cfg.n_layer), LayerKind::Attention);
        // The converter writes no key for it; Qwen3-MoE checkpoints all renormalise top-k.
        cfg.norm_topk_prob = f.opt_bool(names::key(cfg.arch_name, names::kExpertWeightsNorm)).value_or(true);
        cfg.n_ff_shexp = 0;
    }

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
        float* normed = fp.scratch(kNormed, static_cast<size_t>(size)).data();
        float* branch = fp.scratch(kBranch, static_cast<size_t>(size)).data();
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

std::unique_ptr<Architecture> make_qwen3moe() { return std::make_unique<Qwen3Moe>(); }

}  // namespace strata::model
