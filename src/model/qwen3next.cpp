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
#include "gguf/gguf.h"
#include "model/architecture.h"
#include "model/blocks.h"
#include "model/gated_delta_net.h"
#include "model/names.h"
#include "util/error.h"

namespace strata::model {

namespace {

class HybridGdnMoe final : public Architecture {
    // Scratch slots (architectures use 16..31: architecture.h).
    enum Slot : size_t { kNormed = 16, kBranch };

public:
    explicit HybridGdnMoe(const GdnLayout& layout) : layout_(layout) {}

    void load_config(const gguf::File& f, ModelConfig& cfg) override {
        load_common_config(f, cfg);
        const std::string& a = cfg.arch_name;
        auto u = [&](const char* k) { return static_cast<int64_t>(f.get_u64(names::key(a, k))); };
        cfg.ssm_conv_kernel = u(names::kSsmConvKernel);
        cfg.ssm_d_state = u(names::kSsmStateSize);
        cfg.ssm_n_group = u(names::kSsmGroupCount);
        cfg.ssm_dt_rank = u(names::kSsmTimeStepRank);
        cfg.ssm_d_inner = u(names::kSsmInnerSize);
        // The converter writes 4 when the checkpoint has no explicit value; llama.cpp assumes the same.
        cfg.full_attention_interval = static_cast<int64_t>(f.opt_u64(names::key(a, names::kFullAttentionInterval)).value_or(4));
        cfg.attn_output_gate = true;
        // No key is written; Qwen3-Next and Qwen3.5 MoE renormalise the top-k routing weights.
        cfg.norm_topk_prob = f.opt_bool(names::key(a, names::kExpertWeightsNorm)).value_or(true);

        const std::string file = f.path().string();
        auto check = [&](bool ok, const std::string& what) {
            if (!ok) throw Error(file + ": " + what);
        };
        check(cfg.full_attention_interval > 0, "full_attention_interval must be positive");
        check(cfg.ssm_conv_kernel >= 1 && cfg.ssm_conv_kernel <= 64, "ssm.conv_kernel " + std::to_string(cfg.ssm_conv_kernel) + " is out of range");
        check(cfg.ssm_d_state > 0 && cfg.ssm_n_group > 0 && cfg.ssm_dt_rank > 0 && cfg.ssm_d_inner > 0,
              "ssm state_size, group_count, time_step_rank and inner_size must be positive");
        check(cfg.ssm_dt_rank % cfg.ssm_n_group == 0, "ssm.time_step_rank " + std::to_string(cfg.ssm_dt_rank) +
                                                          " (value heads) is not a multiple of ssm.group_count " +
                                                          std::to_string(cfg.ssm_n_group) + " (key heads)");
        check(cfg.ssm_d_inner % cfg.ssm_dt_rank == 0, "ssm.inner_size " + std::to_string(cfg.ssm_d_inner) +
                                                          " is not a multiple of ssm.time_step_rank " +
                                                          std::to_string(cfg.ssm_dt_rank));
        cfg.layers.resize(static_cast<size_t>(cfg.n_layer));
        for (int64_t il = 0; il < cfg.n_layer; ++il)
            cfg.layers[static_cast<size_t>(il)] =
                (il + 1) % cfg.full_attention_interval == 0 ? LayerKind::Attention : LayerKind::GatedDeltaNet;
    }

    void bind(const ModelConfig& cfg, WeightBinder& b) override {
        token_embd_ = b.require(names::kTokenEmbd, {cfg.n_embd, cfg.n_vocab});
        output_norm_ = b.require(names::kOutputNorm, {cfg.n_embd});
        output_ = b.optional(names::kOutput, {cfg.n_embd, cfg.n_vocab});
        layers_.resize(static_cast<size_t>(cfg.n_layer));
        for (int64_t il = 0; il < cfg.n_layer; ++il) {
            Layer& l = layers_[static_cast<size_t>(il)];
            l.attn_norm = b.require(names::layer(il, names::kAttnNorm), {cfg.n_embd});
            if (cfg.layers[static_cast<size_t>(il)] == LayerKind::Attention)
                l.attn = bind_attention(cfg, b, il);
            else
                l.gdn = bind_gated_delta_net(cfg, b, il, layout_);
            l.post_attn_norm = b.require(names::layer(il, names::kPostAttnNorm), {cfg.n_embd});
            l.moe = bind_moe(cfg, b, il);
        }
    }

    void forward(ForwardPass& fp, float* hidden) override {
        const ModelConfig& c = *fp.cfg;
        backend::Backend& be = *fp.be;
        const int64_t n = fp.n_tokens, size = n * c.n_embd;
        float* normed = fp.scratch(kNormed, static_cast<size_t>(size)).data();  // [n][n_embd]
        float* branch = fp.scratch(kBranch, static_cast<size_t>(size)).data();  // [n][n_embd]
        // Each residual add is fused with the norm that reads its result (the next layer's
        // input norm after the MoE branch, which the MoE block does: ResidualNorm).
        if (c.n_layer > 0) be.rms_norm(hidden, &layers_[0].attn_norm, n, c.n_embd, c.rms_eps, normed);
        for (int64_t il = 0; il < c.n_layer; ++il) {
            const Layer& l = layers_[static_cast<size_t>(il)];
            if (c.layers[static_cast<size_t>(il)] == LayerKind::Attention)
                attention_block(fp, il, l.attn, normed, branch);
            else
                gated_delta_net_block(fp, il, l.gdn, normed, branch);
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
        AttentionWeights attn;    // attention layers
        GatedDeltaNetWeights gdn;  // Gated DeltaNet layers
        MoeWeights moe;
    };
    GdnLayout layout_;
    Weight token_embd_, output_norm_, output_;
    std::vector<Layer> layers_;
};

}  // namespace

// Shared with qwen35moe.cpp.
std::unique_ptr<Architecture> make_hybrid_gdn_moe(const GdnLayout& layout) { return std::make_unique<HybridGdnMoe>(layout); }

std::unique_ptr<Architecture> make_qwen3next() {
    GdnLayout layout;
    layout.combined_ba = true;
    layout.key_heads = backend::KeyHeadMap::Grouped;
    return make_hybrid_gdn_moe(layout);
}

}  // namespace strata::model
