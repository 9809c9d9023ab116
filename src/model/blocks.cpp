#include "model/blocks.h"

#include <cmath>

#include "model/names.h"

namespace strata::model {

namespace {
// Scratch slots used by the blocks (architectures use slots from 16 up).
enum BlockSlot : size_t { kQ = 0, kK, kV, kAttn, kGate, kRouter, kIds, kRouteW, kShared, kSharedGate, kSharedHidden };
}  // namespace

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

void attention_block(ForwardPass& fp, int64_t il, const AttentionWeights& w, const float* x, float* out) {
    const ModelConfig& c = *fp.cfg;
    backend::Backend& be = *fp.be;
    const int64_t n = fp.n_tokens;
    const int64_t q_dim = c.n_head * c.head_dim_k, k_dim = c.n_head_kv * c.head_dim_k, v_dim = c.n_head_kv * c.head_dim_v;
    const int64_t q_rows = w.q.ne[1];  // q_dim, or 2*q_dim with the output gate
    float* qg = fp.scratch(kQ, static_cast<size_t>(n * q_rows)).data();
    float* k = fp.scratch(kK, static_cast<size_t>(n * k_dim)).data();
    float* v = fp.scratch(kV, static_cast<size_t>(n * v_dim)).data();
    const backend::MatmulArgs products[] = {{&w.q, x, n, qg}, {&w.k, x, n, k}, {&w.v, x, n, v}};
    be.matmul(products);

    float* q = qg;
    float* gate = nullptr;
    if (c.attn_output_gate) {
        // Per head the projection holds [q (head_dim) | gate (head_dim)]: split into two arrays.
        q = fp.scratch(kAttn, static_cast<size_t>(n * q_dim)).data();
        gate = fp.scratch(kGate, static_cast<size_t>(n * q_dim)).data();
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

    float* attn = c.attn_output_gate ? qg : fp.scratch(kAttn, static_cast<size_t>(n * c.n_head * c.head_dim_v)).data();
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
    if (gate != nullptr) be.mul_sigmoid(attn, gate, n, c.n_head * c.head_dim_v, c.n_head * c.head_dim_v);

    const backend::MatmulArgs o[] = {{&w.o, attn, n, out}};
    be.matmul(o);
}

void moe_block(ForwardPass& fp, int64_t il, const MoeWeights& w, const float* x, float* out, const ResidualNorm* then) {
    const ModelConfig& c = *fp.cfg;
    backend::Backend& be = *fp.be;
    const int64_t n = fp.n_tokens;
    float* router = fp.scratch(kRouter, static_cast<size_t>(n * c.n_expert)).data();
    std::vector<backend::MatmulArgs> products = {{&w.gate_inp, x, n, router}};
    float* shared_gate = nullptr;
    float* shared_hidden = nullptr;
    if (w.gate_shexp) {
        // The shared expert's gate and up projections read the same input as the router.
        shared_gate = fp.scratch(kSharedGate, static_cast<size_t>(n)).data();
        shared_hidden = fp.scratch(kSharedHidden, static_cast<size_t>(n * 2 * c.n_ff_shexp)).data();
        products.push_back({&w.gate_inp_shexp, x, n, shared_gate});
    }
    be.matmul(products);

    // ids and weights stay in backend memory: the int32 ids live in a float slot (same size; only
    // the backend reads them).
    const auto pairs = static_cast<size_t>(n * c.n_expert_used);
    int32_t* ids = reinterpret_cast<int32_t*>(fp.scratch(kIds, pairs).data());
    float* weights = fp.scratch(kRouteW, pairs).data();
    be.route_softmax_topk(router, n, c.n_expert, c.n_expert_used, c.norm_topk_prob, ids, weights);

    // The shared expert first: with `then`, its output goes into the residual before the routed
    // experts' call adds theirs and norms.
    float* y = nullptr;
    if (w.gate_shexp) {
        float* g = shared_hidden;
        float* u = shared_hidden + n * c.n_ff_shexp;
        const backend::MatmulArgs gu[] = {{&w.gate_shexp, x, n, g}, {&w.up_shexp, x, n, u}};
        be.matmul(gu);
        float* h = fp.scratch(kShared, static_cast<size_t>(n * c.n_ff_shexp)).data();
        be.swiglu(g, u, n, c.n_ff_shexp, c.n_ff_shexp, h);
        y = fp.scratch(kQ, static_cast<size_t>(n * c.n_embd)).data();
        const backend::MatmulArgs d[] = {{&w.down_shexp, h, n, y}};
        be.matmul(d);
        be.mul_sigmoid(y, shared_gate, n, c.n_embd, 0);
        if (then != nullptr) be.add(then->residual, y, n * c.n_embd);
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
    if (then != nullptr) {
        m.residual = then->residual;
        m.norm = then->norm;
        m.eps = then->eps;
        m.normed = then->normed;
    }
    be.moe(m);
    if (y != nullptr && then == nullptr) be.add(out, y, n * c.n_embd);
}

}  // namespace strata::model
