#include "model/gated_delta_net.h"

#include <cmath>
#include <vector>

#include "model/names.h"

namespace strata::model {

namespace {

// transformers' l2norm inside the delta rule uses a fixed eps, not the model's rms eps.
constexpr float kL2NormEps = 1e-6f;

}  // namespace

GatedDeltaNetWeights bind_gated_delta_net(const ModelConfig& cfg, WeightBinder& b, int64_t il, const GdnLayout& layout) {
    const int64_t n_v = cfg.ssm_dt_rank, d_v = cfg.ssm_d_inner / cfg.ssm_dt_rank;
    const int64_t channels = 2 * cfg.ssm_n_group * cfg.ssm_d_state + cfg.ssm_d_inner;
    GatedDeltaNetWeights w;
    w.layout = layout;
    w.qkv = b.require(names::layer(il, names::kSsmInQkv), {cfg.n_embd, channels});
    w.gate = b.require(names::layer(il, names::kSsmInGate), {cfg.n_embd, cfg.ssm_d_inner});
    if (layout.combined_ba) {
        w.ba = b.require(names::layer(il, names::kSsmBa), {cfg.n_embd, 2 * n_v});
    } else {
        w.beta = b.require(names::layer(il, names::kSsmBeta), {cfg.n_embd, n_v});
        w.alpha = b.require(names::layer(il, names::kSsmAlpha), {cfg.n_embd, n_v});
    }
    w.conv1d = b.require(names::layer(il, names::kSsmConv1d), {cfg.ssm_conv_kernel, channels});
    w.dt_bias = b.require(names::layer(il, names::kSsmDtBias), {n_v});
    w.a = b.require(names::layer(il, names::kSsmA), {n_v});
    w.norm = b.require(names::layer(il, names::kSsmNorm), {d_v});
    w.out = b.require(names::layer(il, names::kSsmOut), {cfg.ssm_d_inner, cfg.n_embd});
    return w;
}

void gated_delta_net_block(ForwardPass& fp, int64_t il, const GatedDeltaNetWeights& w, const float* x, float* out) {
    const ModelConfig& c = *fp.cfg;
    backend::Backend& be = *fp.be;
    const int64_t n = fp.n_tokens;
    const int64_t n_k = c.ssm_n_group, d_k = c.ssm_d_state, n_v = c.ssm_dt_rank, d_v = c.ssm_d_inner / c.ssm_dt_rank;
    const int64_t key_dim = n_k * d_k, value_dim = c.ssm_d_inner;
    const int64_t channels = 2 * key_dim + value_dim;  // conv channels: [q | k | v]
    Scratch s(*fp.arena);
    float* mixed = s.floats(n * channels);  // [n][channels] q|k|v before the conv; at the end the gated output
    float* z = s.floats(n * value_dim);     // [n][n_v][d_v] output gate
    // combined_ba: [n][n_k][b (r) | alpha (r)]; else b [n][n_v] then alpha [n][n_v].
    float* gate_in = s.floats(n * 2 * n_v);
    float* decay = s.floats(n * n_v);          // [n][n_v] log decay g
    float* beta = s.floats(n * n_v);           // [n][n_v]
    float* conv_out = s.floats(n * channels);  // [n][channels]
    float* core = s.floats(n * value_dim);     // [n][n_v][d_v] the delta rule's output

    std::vector<backend::MatmulArgs> products = {{&w.qkv, x, n, mixed}, {&w.gate, x, n, z}};
    if (w.layout.combined_ba) {
        products.push_back({&w.ba, x, n, gate_in});
    } else {
        products.push_back({&w.beta, x, n, gate_in});
        products.push_back({&w.alpha, x, n, gate_in + n * n_v});
    }
    be.matmul(products);

    backend::GdnGateArgs ga;
    if (w.layout.combined_ba) {
        const int64_t r = n_v / n_k;
        ga.b = gate_in;
        ga.alpha = gate_in + r;
        ga.row_stride = 2 * n_v;
        ga.group = r;
        ga.group_stride = 2 * r;
    } else {
        ga.b = gate_in;
        ga.alpha = gate_in + n * n_v;
        ga.row_stride = n_v;
        ga.group = n_v;
        ga.group_stride = 0;
    }
    ga.a = &w.a;
    ga.dt_bias = &w.dt_bias;
    ga.g = decay;
    ga.beta = beta;
    ga.n_tokens = n;
    ga.n_heads = n_v;
    be.gdn_gates(ga);

    // Conv per run with its sequence's carried inputs, then unit-norm q and k (adjacent in a row).
    for (const auto& run : fp.runs) {
        const SequenceState& s = *fp.seqs[static_cast<size_t>(run.seq)];
        be.ssm_conv_silu(mixed + run.begin * channels, run.end - run.begin, channels, w.conv1d, c.ssm_conv_kernel,
                         s.conv_state(il), conv_out + run.begin * channels);
    }
    be.l2_norm(conv_out, n, 2 * n_k, d_k, channels, kL2NormEps);

    for (const auto& run : fp.runs) {
        const SequenceState& s = *fp.seqs[static_cast<size_t>(run.seq)];
        const float* row = conv_out + run.begin * channels;
        backend::DeltaRuleArgs d;
        d.q = row;
        d.k = row + key_dim;
        d.v = row + 2 * key_dim;
        d.q_stride = d.k_stride = d.v_stride = channels;
        d.g = decay + run.begin * n_v;
        d.beta = beta + run.begin * n_v;
        d.state = s.ssm_state(il);
        d.out = core + run.begin * value_dim;
        d.n_tokens = run.end - run.begin;
        d.n_v_heads = n_v;
        d.n_k_heads = n_k;
        d.d_k = d_k;
        d.d_v = d_v;
        d.key_heads = w.layout.key_heads;
        d.scale = 1.0f / std::sqrt(static_cast<float>(d_k));
        d.chunk_size = d.n_tokens > 1 ? kDeltaRuleChunk : 0;
        be.delta_rule(d);
    }

    // Gated RMSNorm per value head: norm(o) * w * silu(z), into the (now free) mixed buffer.
    be.rms_norm(core, &w.norm, n * n_v, d_v, c.rms_eps, core);
    float* gated = mixed;  // [n][n_v][d_v]
    be.swiglu(z, core, n * n_v, d_v, d_v, gated);
    const backend::MatmulArgs o[] = {{&w.out, gated, n, out}};
    be.matmul(o);
}

}  // namespace strata::model
