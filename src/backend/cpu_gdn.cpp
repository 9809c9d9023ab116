// The CPU backend's Gated DeltaNet ops: causal conv1d with its carried state, the decay/beta
// gates, L2 normalisation, and the gated delta rule in its recurrent (decode) and chunked
// (prefill) forms.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "util/error.h"

namespace strata::backend {

namespace {

// An f32 weight read in place; refuses other types and sizes.
const float* f32_values(const Weight& w, int64_t n) {
    if (w.type != quant::Type::F32 || w.ne[0] * w.rows() != n)
        throw Error("tensor " + w.name() + " must be f32 with " + std::to_string(n) + " values");
    return reinterpret_cast<const float*>(w.data);
}

// log(1 + e^x), linear above 20 where e^x would dominate anyway (as torch's softplus).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Where the q/k/v rows of one value head live, resolved from DeltaRuleArgs.
struct HeadView {
    const DeltaRuleArgs& a;
    int64_t q_stride, k_stride, v_stride;  // floats between tokens
    int64_t key_head;                      // the key head this value head reads
    int64_t head;

    HeadView(const DeltaRuleArgs& args, int64_t h) : a(args), head(h) {
        const int64_t n_k = a.n_k_heads > 0 ? a.n_k_heads : a.n_v_heads;
        q_stride = a.q_stride > 0 ? a.q_stride : n_k * a.d_k;
        k_stride = a.k_stride > 0 ? a.k_stride : n_k * a.d_k;
        v_stride = a.v_stride > 0 ? a.v_stride : a.n_v_heads * a.d_v;
        key_head = a.key_heads == KeyHeadMap::Tiled ? h % n_k : h / (a.n_v_heads / n_k);
    }
    const float* q(int64_t t) const { return a.q + t * q_stride + key_head * a.d_k; }
    const float* k(int64_t t) const { return a.k + t * k_stride + key_head * a.d_k; }
    const float* v(int64_t t) const { return a.v + t * v_stride + head * a.d_v; }
    float g(int64_t t) const { return a.g[t * a.n_v_heads + head]; }
    float beta(int64_t t) const { return a.beta[t * a.n_v_heads + head]; }
    float* out(int64_t t) const { return a.out + (t * a.n_v_heads + head) * a.d_v; }
};

float dot(const float* x, const float* y, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
    return s;
}

// y[d_v] = S^T x for S [d_k][d_v], x [d_k].
void state_t_times(const float* S, const float* x, int64_t d_k, int64_t d_v, float* y) {
    std::fill(y, y + d_v, 0.0f);
    for (int64_t i = 0; i < d_k; ++i) {
        const float xi = x[i];
        const float* row = S + i * d_v;
        for (int64_t j = 0; j < d_v; ++j) y[j] += row[j] * xi;
    }
}

// The recurrence, token by token, for one value head.
void delta_rule_recurrent(const HeadView& hv, float* S, std::vector<float>& scratch) {
    const DeltaRuleArgs& a = hv.a;
    scratch.resize(static_cast<size_t>(a.d_v));
    float* kv = scratch.data();  // [d_v]: S^T k, what the state predicts for this key
    for (int64_t t = 0; t < a.n_tokens; ++t) {
        const float* q = hv.q(t);
        const float* k = hv.k(t);
        const float* v = hv.v(t);
        const float decay = std::exp(hv.g(t)), beta = hv.beta(t);
        for (int64_t i = 0; i < a.d_k * a.d_v; ++i) S[i] *= decay;
        state_t_times(S, k, a.d_k, a.d_v, kv);
        for (int64_t j = 0; j < a.d_v; ++j) kv[j] = beta * (v[j] - kv[j]);  // the correction u
        for (int64_t i = 0; i < a.d_k; ++i) {
            float* row = S + i * a.d_v;
            const float ki = k[i];
            for (int64_t j = 0; j < a.d_v; ++j) row[j] += ki * kv[j];
        }
        float* o = hv.out(t);
        state_t_times(S, q, a.d_k, a.d_v, o);
        for (int64_t j = 0; j < a.d_v; ++j) o[j] *= a.scale;
    }
}

// The chunked form for one value head. Within a chunk of L tokens with S0 the entering state and
// G_i the cumulative log decay up to token i (inclusive), unrolling the recurrence gives
//   u_i = beta_i (v_i - e^{G_i} S0^T k_i) - sum_{j<i} beta_i e^{G_i-G_j} (k_i.k_j) u_j   (forward substitution)
//   o_i = scale (e^{G_i} S0^T q_i + sum_{j<=i} e^{G_i-G_j} (q_i.k_j) u_j)
//   S   = e^{G_{L-1}} S0 + sum_j e^{G_{L-1}-G_j} k_j u_j^T
// where u_i is the value correction the recurrent form adds as k_i u_i^T. Every decay factor is
// e^{(something <= 0)}, so nothing overflows.
void delta_rule_chunked(const HeadView& hv, float* S, int64_t chunk, std::vector<float>& scratch) {
    const DeltaRuleArgs& a = hv.a;
    const int64_t d_k = a.d_k, d_v = a.d_v;
    chunk = std::min(chunk, a.n_tokens);
    scratch.resize(static_cast<size_t>(chunk + chunk * d_v + d_v));
    float* G = scratch.data();     // [chunk] cumulative log decay
    float* U = G + chunk;          // [chunk][d_v] corrections u_i
    float* tmp = U + chunk * d_v;  // [d_v]
    for (int64_t c0 = 0; c0 < a.n_tokens; c0 += chunk) {
        const int64_t L = std::min(chunk, a.n_tokens - c0);
        double cum = 0;
        for (int64_t i = 0; i < L; ++i) G[i] = static_cast<float>(cum += hv.g(c0 + i));

        // Corrections, in token order: each needs the earlier ones.
        for (int64_t i = 0; i < L; ++i) {
            const float* ki = hv.k(c0 + i);
            const float* vi = hv.v(c0 + i);
            const float beta = hv.beta(c0 + i), decay = std::exp(G[i]);
            float* ui = U + i * d_v;
            state_t_times(S, ki, d_k, d_v, tmp);
            for (int64_t j = 0; j < d_v; ++j) ui[j] = beta * (vi[j] - decay * tmp[j]);
            for (int64_t j = 0; j < i; ++j) {
                const float f = beta * std::exp(G[i] - G[j]) * dot(ki, hv.k(c0 + j), d_k);
                const float* uj = U + j * d_v;
                for (int64_t d = 0; d < d_v; ++d) ui[d] -= f * uj[d];
            }
        }
        // Outputs from the entering state plus this chunk's corrections.
        for (int64_t i = 0; i < L; ++i) {
            const float* qi = hv.q(c0 + i);
            float* o = hv.out(c0 + i);
            state_t_times(S, qi, d_k, d_v, o);
            const float decay = std::exp(G[i]);
            for (int64_t d = 0; d < d_v; ++d) o[d] *= decay;
            for (int64_t j = 0; j <= i; ++j) {
                const float f = std::exp(G[i] - G[j]) * dot(qi, hv.k(c0 + j), d_k);
                const float* uj = U + j * d_v;
                for (int64_t d = 0; d < d_v; ++d) o[d] += f * uj[d];
            }
            for (int64_t d = 0; d < d_v; ++d) o[d] *= a.scale;
        }
        // The state leaving the chunk.
        const float last = G[L - 1];
        const float total_decay = std::exp(last);
        for (int64_t i = 0; i < d_k * d_v; ++i) S[i] *= total_decay;
        for (int64_t j = 0; j < L; ++j) {
            const float* kj = hv.k(c0 + j);
            const float f = std::exp(last - G[j]);
            const float* uj = U + j * d_v;
            for (int64_t i = 0; i < d_k; ++i) {
                const float w = f * kj[i];
                float* row = S + i * d_v;
                for (int64_t d = 0; d < d_v; ++d) row[d] += w * uj[d];
            }
        }
    }
}

}  // namespace

void CpuBackend::ssm_conv_silu(const float* x, int64_t n_tokens, int64_t channels, const Weight& weight, int64_t kernel,
                               float* conv_state, float* out) {
    util::PhaseScope phase(times_, "ssm_conv");
    if (kernel < 1) throw Error("ssm_conv_silu: kernel must be at least 1");
    const float* w = f32_values(weight, channels * kernel);  // [channels][kernel]
    const int64_t hist = kernel - 1;
    // Input at time src (may be negative: the carried state holds times -hist .. -1).
    auto input = [&](int64_t src, int64_t c) {
        return src >= 0 ? x[src * channels + c] : conv_state[(hist + src) * channels + c];
    };
    // Channels are independent: blocks of them run in parallel, each over all tokens.
    constexpr int64_t kBlock = 256;
    const int64_t n_blocks = (channels + kBlock - 1) / kBlock;
    pool_.parallel_for(n_blocks, [&](int64_t blk, int) {
        const int64_t c_begin = blk * kBlock, c_end = std::min(channels, c_begin + kBlock);
        for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t c = c_begin; c < c_end; ++c) {
                const float* wc = w + c * kernel;
                float s = 0;
                for (int64_t j = 0; j < kernel; ++j) s += input(t - hist + j, c) * wc[j];
                out[t * channels + c] = silu(s);
            }
        }
    });
    // Carry the last hist inputs (from the old state and this run) forward.
    std::vector<float> next(static_cast<size_t>(hist * channels));  // [hist][channels]
    for (int64_t r = 0; r < hist; ++r)
        for (int64_t c = 0; c < channels; ++c) next[static_cast<size_t>(r * channels + c)] = input(n_tokens - hist + r, c);
    if (!next.empty()) std::memcpy(conv_state, next.data(), next.size() * sizeof(float));
}

void CpuBackend::gdn_gates(const GdnGateArgs& a) {
    util::PhaseScope phase(times_, "gdn_gates");
    if (a.group <= 0 || a.n_heads % a.group != 0) throw Error("gdn_gates: group must divide the head count");
    const float* decay_rate = f32_values(*a.a, a.n_heads);  // [n_heads] -exp(A_log)
    const float* dt_bias = f32_values(*a.dt_bias, a.n_heads);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
        for (int64_t h = 0; h < a.n_heads; ++h) {
            const int64_t at = t * a.row_stride + (h / a.group) * a.group_stride + h % a.group;
            a.g[t * a.n_heads + h] = decay_rate[h] * softplus(a.alpha[at] + dt_bias[h]);
            a.beta[t * a.n_heads + h] = sigmoid(a.b[at]);
        }
    }
}

void CpuBackend::delta_rule(const DeltaRuleArgs& a) {
    util::PhaseScope phase(times_, "delta_rule");
    const int64_t n_k = a.n_k_heads > 0 ? a.n_k_heads : a.n_v_heads;
    if (a.n_v_heads <= 0 || a.n_v_heads % n_k != 0) throw Error("delta_rule: key heads must divide value heads");
    if (a.chunk_size < 0) throw Error("delta_rule: negative chunk size");
    if (a.n_tokens <= 0) return;
    pool_.parallel_for(a.n_v_heads, [&](int64_t h, int) {
        const HeadView hv(a, h);
        float* S = a.state + h * a.d_k * a.d_v;  // [d_k][d_v]
        std::vector<float> scratch;
        if (a.chunk_size == 0) delta_rule_recurrent(hv, S, scratch);
        else delta_rule_chunked(hv, S, a.chunk_size, scratch);
    });
}

void CpuBackend::l2_norm(float* x, int64_t n_tokens, int64_t rows, int64_t dim, int64_t token_stride, float eps) {
    util::PhaseScope phase(times_, "l2_norm");
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
            float* v = x + t * token_stride + r * dim;
            double ss = 0;
            for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(v[i]) * v[i];
            const float inv = 1.0f / std::sqrt(static_cast<float>(ss) + eps);
            for (int64_t i = 0; i < dim; ++i) v[i] *= inv;
        }
    }
}

}  // namespace strata::backend
