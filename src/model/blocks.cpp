#include "model/blocks.h"

#include <cmath>
#include <vector>

#include "model/names.h"

namespace strata::model {

AttentionWeights bind_attention(const ModelConfig& cfg, WeightBinder& b, int64_t il) {
    const int64_t q_rows = cfg.n_head * cfg.head_dim_k * (cfg.attn_output_gate ? 2 : 1);
    AttentionWeights w;
    w.q = b.require(names::layer(il, names::kAttnQ), {cfg.n_embd, q_rows});
    w.k = b.require(names::layer(il, names::kAttnK), {cfg.n_embd, cfg.n_head_kv * cfg.head_dim_k});
    w.v = b.require(names::layer(il, names::kAttnV), {cfg.n_embd, cfg.n_head_kv * cfg.head_dim_v});
    w.o = b.require(names::layer(il, names::kAttnOut), {cfg.n_head * cfg.head_dim_v, cfg.n_embd});
    w.q_norm = b.require(names::layer(il, names::kAttnQNorm), {cfg.head_dim_k});
    w.k_norm = b.require(names::layer(il, names::kAttnKNorm), {cfg.head_dim_k});
    return w;
}

MoeWeights bind_moe(const ModelConfig& cfg, WeightBinder& b, int64_t il) {
    MoeWeights w;
    w.gate_inp = b.require(names::layer(il, names::kFfnGateInp), {cfg.n_embd, cfg.n_expert});
    w.gate_exps = b.require(names::layer(il, names::kFfnGateExps), {cfg.n_embd, cfg.n_ff_exp, cfg.n_expert});
    w.up_exps = b.require(names::layer(il, names::kFfnUpExps), {cfg.n_embd, cfg.n_ff_exp, cfg.n_expert});
    w.down_exps = b.require(names::layer(il, names::kFfnDownExps), {cfg.n_ff_exp, cfg.n_embd, cfg.n_expert});
    if (cfg.n_ff_shexp > 0) {
        w.gate_inp_shexp = b.require(names::layer(il, names::kFfnGateInpShexp), {cfg.n_embd});
        w.gate_shexp = b.require(names::layer(il, names::kFfnGateShexp), {cfg.n_embd, cfg.n_ff_shexp});
        w.up_shexp = b.require(names::layer(il, names::kFfnUpShexp), {cfg.n_embd, cfg.n_ff_shexp});
        w.down_shexp = b.require(names::layer(il, names::kFfnDownShexp), {cfg.n_ff_shexp, cfg.n_embd});
    }
    return w;
}

DenseFfnWeights bind_dense_ffn(const ModelConfig& cfg, WeightBinder& b, int64_t il) {
    DenseFfnWeights w;
    w.gate = b.require(names::layer(il, names::kFfnGate), {cfg.n_embd, cfg.n_ff});
    w.up = b.require(names::layer(il, names::kFfnUp), {cfg.n_embd, cfg.n_ff});
    w.down = b.require(names::layer(il, names::kFfnDown), {cfg.n_ff, cfg.n_embd});
    return w;
}

void attention_block(ForwardPass& fp, int64_t il, const AttentionWeights& w, const float* x, float* out) {
    const ModelConfig& c = *fp.cfg;
    backend::Backend& be = *fp.be;
    const int64_t n = fp.n_tokens;
    const int64_t q_dim = c.n_head * c.head_dim_k, k_dim = c.n_head_kv * c.head_dim_k, v_dim = c.n_head_kv * c.head_dim_v;
    const int64_t q_rows = w.q.ne[1];  // q_dim, or 2*q_dim with the output gate
    const int64_t o_dim = c.n_head * c.head_dim_v;
    const bool gated = c.attn_output_gate;
    Scratch s(*fp.arena);
    float* qg = s.floats(n * q_rows);                     // [n][q_rows]: the q projection, per head [q | gate] when gated
    float* k = s.floats(n * k_dim);                       // [n][n_head_kv][head_dim_k]
    float* v = s.floats(n * v_dim);                       // [n][n_head_kv][head_dim_v]
    float* q = gated ? s.floats(n * q_dim) : qg;          // [n][n_head][head_dim_k]
    float* gate = gated ? s.floats(n * q_dim) : nullptr;  // [n][n_head][head_dim_k]
    // [n][n_head][head_dim_v]; when gated, qg again (free once split)
    float* attn = gated && o_dim <= q_rows ? qg : s.floats(n * o_dim);

    const backend::MatmulArgs products[] = {{&w.q, x, n, qg}, {&w.k, x, n, k}, {&w.v, x, n, v}};
    be.matmul(products);
    if (gated) {
        // Per head the projection holds [q (head_dim) | gate (head_dim)]: split into two arrays.
        const int64_t d = c.head_dim_k;
        be.copy_rows(qg, 2 * d, q, d, n * c.n_head, d);
        be.copy_rows(qg + d, 2 * d, gate, d, n * c.n_head, d);
    }
    backend::QkNormRopeArgs qk;
    qk.q = q;
    qk.q_norm = &w.q_norm;
    qk.n_head = c.n_head;
    qk.k = k;
    qk.k_norm = &w.k_norm;
    qk.n_head_kv = c.n_head_kv;
    qk.n_tokens = n;
    qk.head_dim = c.head_dim_k;
    qk.eps = c.rms_eps;
    qk.pos = fp.batch->pos.data();
    qk.rope.n_rot = c.n_rot;
    qk.rope.theta = c.rope_theta;
    qk.rope.sections = c.rope_sections;
    qk.rope.freqs_bf16 = c.rope_freqs_bf16;
    fp.set_layer_kv(il);
    qk.kv = fp.kv_of_token.data();
    qk.v = v;
    qk.v_row = v_dim;
    be.qk_norm_rope(qk);

    backend::AttentionArgs a;
    a.q = q;
    a.out = attn;
    a.n_tokens = n;
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.head_dim_k = c.head_dim_k;
    a.head_dim_v = c.head_dim_v;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
    a.pos = fp.batch->pos.data();
    a.kv = fp.kv_of_token.data();
    a.f16_ok = !quant::is_float_type(w.q.type) && !quant::is_float_type(w.k.type) && !quant::is_float_type(w.v.type);
    be.attention(a);
    if (gated) be.mul_sigmoid(attn, gate, n, o_dim, o_dim);

    const backend::MatmulArgs o[] = {{&w.o, attn, n, out}};
    be.matmul(o);
}

void moe_block(ForwardPass& fp, int64_t il, const MoeWeights& w, const float* x, float* out, const ResidualNorm* then) {
    const ModelConfig& c = *fp.cfg;
    backend::Backend& be = *fp.be;
    const int64_t n = fp.n_tokens;
    const bool shared = static_cast<bool>(w.gate_shexp);
    Scratch s(*fp.arena);
    float* router = s.floats(n * c.n_expert);                       // [n][n_expert] router logits
    int32_t* ids = s.ints(n * c.n_expert_used);                     // [n][k] the chosen experts
    float* weights = s.floats(n * c.n_expert_used);                 // [n][k] their routing weights
    float* shared_gate = shared ? s.floats(n) : nullptr;            // [n] the shared expert's gate logit
    float* shared_out = shared ? s.floats(n * c.n_embd) : nullptr;  // [n][n_embd]

    // The shared expert's gate reads the same input as the router.
    std::vector<backend::MatmulArgs> products = {{&w.gate_inp, x, n, router}};
    if (shared) products.push_back({&w.gate_inp_shexp, x, n, shared_gate});
    be.matmul(products);
    be.route_softmax_topk(router, n, c.n_expert, c.n_expert_used, c.norm_topk_prob, ids, weights);

    // The shared expert first: with `then`, its output goes into the residual before the routed
    // experts' call adds theirs and norms.
    if (shared) {
        swiglu_ffn(fp, w.gate_shexp, w.up_shexp, w.down_shexp, x, shared_out);
        be.mul_sigmoid(shared_out, shared_gate, n, c.n_embd, 0);
        if (then != nullptr) be.add(then->residual, shared_out, n * c.n_embd);
    }

    backend::MoeArgs m;
    m.gate = &w.gate_exps;
    m.up = &w.up_exps;
    m.down = &w.down_exps;
    m.x = x;
    m.n_tokens = n;
    m.ids = ids;
    m.weights = weights;
    m.k = c.n_expert_used;
    m.out = out;
    m.layer = static_cast<int>(il);
    m.placement = fp.experts != nullptr ? fp.experts->placement(static_cast<int>(il)) : nullptr;
    if (then != nullptr) {
        m.residual = then->residual;
        m.norm = then->norm;
        m.eps = then->eps;
        m.normed = then->normed;
    }
    be.moe(m);
    if (shared && then == nullptr) be.add(out, shared_out, n * c.n_embd);
}

void swiglu_ffn(ForwardPass& fp, const Weight& gate, const Weight& up, const Weight& down, const float* x, float* out) {
    backend::Backend& be = *fp.be;
    const int64_t n = fp.n_tokens, n_ff = gate.ne[1];
    Scratch s(*fp.arena);
    float* gu = s.floats(2 * n * n_ff);  // [n][n_ff] gate x, then [n][n_ff] up x
    float* h = s.floats(n * n_ff);       // [n][n_ff] silu(gate x) * up x
    const backend::MatmulArgs products[] = {{&gate, x, n, gu}, {&up, x, n, gu + n * n_ff}};
    be.matmul(products);
    be.swiglu(gu, gu + n * n_ff, n, n_ff, n_ff, h);
    const backend::MatmulArgs d[] = {{&down, h, n, out}};
    be.matmul(d);
}

void dense_ffn_block(ForwardPass& fp, const DenseFfnWeights& w, const float* x, float* out) {
    swiglu_ffn(fp, w.gate, w.up, w.down, x, out);
}

}  // namespace strata::model
