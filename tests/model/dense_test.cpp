// The dense SwiGLU block against a plain reference on random data, and the dense qwen3
// architecture end to end: a made model's logits against a plain host forward of its weights,
// and its prefill against its decode.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "gguf/gguf.h"
#include "model/architecture.h"
#include "model/blocks.h"
#include "model/model.h"
#include "model/names.h"
#include "model_tools/make_model.h"
#include "test_util.h"

namespace strata::model {
namespace {

// An f32 matrix of `rows` rows of `cols` values as a Weight (GGUF ne {cols, rows}).
Weight f32_weight(const std::vector<float>& v, int64_t cols, int64_t rows) {
    Weight w;
    w.type = quant::Type::F32;
    w.data = reinterpret_cast<const uint8_t*>(v.data());
    w.ne = {cols, rows, 1, 1};
    w.row_bytes = static_cast<size_t>(cols) * sizeof(float);
    return w;
}

// y[r] = sum_c W[r][c] x[c], in double.
std::vector<double> product(const float* w, int64_t rows, int64_t cols, const std::vector<double>& x) {
    std::vector<double> y(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            y[static_cast<size_t>(r)] += static_cast<double>(w[r * cols + c]) * x[static_cast<size_t>(c)];
    return y;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// Largest |a - b| over the largest |b|.
double rel_diff(const std::vector<float>& a, const std::vector<double>& b) {
    EXPECT_EQ(a.size(), b.size());
    double err = 0, ref = 1e-30;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
        ref = std::max(ref, std::abs(b[i]));
    }
    return err / ref;
}

TEST(DenseFfn, MatchesAPlainReference) {
    const int64_t n_embd = 64, n_ff = 96, n = 5;
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto random = [&](size_t size, float scale) {
        std::vector<float> v(size);
        for (float& x : v) x = scale * normal(rng);
        return v;
    };
    const auto gate = random(n_ff * n_embd, 0.125f), up = random(n_ff * n_embd, 0.125f), down = random(n_embd * n_ff, 0.1f);
    const auto x = random(n * n_embd, 1.0f);

    ModelConfig cfg;
    cfg.n_embd = n_embd;
    cfg.n_ff = n_ff;
    DenseFfnWeights w;
    w.gate = f32_weight(gate, n_embd, n_ff);
    w.up = f32_weight(up, n_embd, n_ff);
    w.down = f32_weight(down, n_ff, n_embd);
    backend::CpuBackend be(2);
    ScratchArena arena(be);
    arena.begin();
    ForwardPass fp;
    fp.be = &be;
    fp.cfg = &cfg;
    fp.n_tokens = n;
    fp.arena = &arena;
    std::vector<float> out(static_cast<size_t>(n * n_embd));
    dense_ffn_block(fp, w, x.data(), out.data());

    std::vector<double> want;
    for (int64_t t = 0; t < n; ++t) {
        const std::vector<double> xt(x.begin() + t * n_embd, x.begin() + (t + 1) * n_embd);
        const auto g = product(gate.data(), n_ff, n_embd, xt), u = product(up.data(), n_ff, n_embd, xt);
        std::vector<double> h(static_cast<size_t>(n_ff));
        for (size_t i = 0; i < h.size(); ++i) h[i] = silu(g[i]) * u[i];
        const auto y = product(down.data(), n_embd, n_ff, h);
        want.insert(want.end(), y.begin(), y.end());
    }
    EXPECT_LT(rel_diff(out, want), 1e-5);
}

// The qwen3 forward written out plainly over the file's f32 weights, in double: the last
// position's logits of `tokens`.
std::vector<double> reference_logits(const gguf::File& f, const ModelConfig& c, const std::vector<int32_t>& tokens) {
    auto t = [&](const std::string& name) { return reinterpret_cast<const float*>(f.tensor(name).data); };
    auto layer = [&](int64_t il, const char* suffix) { return t(names::layer(il, suffix)); };
    const int64_t n = static_cast<int64_t>(tokens.size()), d = c.n_embd, hd = c.head_dim_k;
    const int64_t group = c.n_head / c.n_head_kv;
    auto rms_norm = [&](const double* x, int64_t dim, const float* w, double* out) {
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += x[i] * x[i];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + c.rms_eps);
        for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * inv * w[i];
    };
    auto rope = [&](double* v, int64_t pos) {  // NeoX pairs (i, i + n_rot/2)
        const int64_t half = c.n_rot / 2;
        for (int64_t i = 0; i < half; ++i) {
            const double angle =
                static_cast<double>(pos) *
                std::pow(static_cast<double>(c.rope_theta), -2.0 * static_cast<double>(i) / static_cast<double>(c.n_rot));
            const double a = v[i], b = v[i + half];
            v[i] = a * std::cos(angle) - b * std::sin(angle);
            v[i + half] = b * std::cos(angle) + a * std::sin(angle);
        }
    };
    std::vector<std::vector<double>> h(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(d)));
    for (int64_t p = 0; p < n; ++p)
        for (int64_t i = 0; i < d; ++i) h[p][i] = t(names::kTokenEmbd)[tokens[static_cast<size_t>(p)] * d + i];
    for (int64_t il = 0; il < c.n_layer; ++il) {
        std::vector<std::vector<double>> q(n), k(n), v(n);
        for (int64_t p = 0; p < n; ++p) {
            std::vector<double> x(static_cast<size_t>(d));
            rms_norm(h[p].data(), d, layer(il, names::kAttnNorm), x.data());
            q[p] = product(layer(il, names::kAttnQ), c.n_head * hd, d, x);
            k[p] = product(layer(il, names::kAttnK), c.n_head_kv * hd, d, x);
            v[p] = product(layer(il, names::kAttnV), c.n_head_kv * hd, d, x);
            for (int64_t hh = 0; hh < c.n_head; ++hh) {
                rms_norm(&q[p][hh * hd], hd, layer(il, names::kAttnQNorm), &q[p][hh * hd]);
                rope(&q[p][hh * hd], p);
            }
            for (int64_t hh = 0; hh < c.n_head_kv; ++hh) {
                rms_norm(&k[p][hh * hd], hd, layer(il, names::kAttnKNorm), &k[p][hh * hd]);
                rope(&k[p][hh * hd], p);
            }
        }
        for (int64_t p = 0; p < n; ++p) {
            std::vector<double> attn(static_cast<size_t>(c.n_head * hd), 0.0);
            for (int64_t hh = 0; hh < c.n_head; ++hh) {
                const int64_t kvh = hh / group;
                std::vector<double> s(static_cast<size_t>(p + 1));
                double mx = -1e300, sum = 0;
                for (int64_t j = 0; j <= p; ++j) {
                    double dot = 0;
                    for (int64_t i = 0; i < hd; ++i) dot += q[p][hh * hd + i] * k[j][kvh * hd + i];
                    s[j] = dot / std::sqrt(static_cast<double>(hd));
                    mx = std::max(mx, s[j]);
                }
                for (double& e : s) sum += (e = std::exp(e - mx));
                for (int64_t j = 0; j <= p; ++j)
                    for (int64_t i = 0; i < hd; ++i) attn[hh * hd + i] += s[j] / sum * v[j][kvh * hd + i];
            }
            const auto o = product(layer(il, names::kAttnOut), d, c.n_head * hd, attn);
            for (int64_t i = 0; i < d; ++i) h[p][i] += o[i];
            std::vector<double> x(static_cast<size_t>(d));
            rms_norm(h[p].data(), d, layer(il, names::kFfnNorm), x.data());
            const auto g = product(layer(il, names::kFfnGate), c.n_ff, d, x), u = product(layer(il, names::kFfnUp), c.n_ff, d, x);
            std::vector<double> hid(static_cast<size_t>(c.n_ff));
            for (size_t i = 0; i < hid.size(); ++i) hid[i] = silu(g[i]) * u[i];
            const auto y = product(layer(il, names::kFfnDown), d, c.n_ff, hid);
            for (int64_t i = 0; i < d; ++i) h[p][i] += y[i];
        }
    }
    std::vector<double> x(static_cast<size_t>(d));
    rms_norm(h.back().data(), d, t(names::kOutputNorm), x.data());
    return product(t(f.find_tensor(names::kOutput) != nullptr ? names::kOutput : names::kTokenEmbd), c.n_vocab, d, x);
}

TEST(Qwen3Dense, MadeModelMatchesAPlainForwardAndDecodesAsItPrefills) {
    test::TempDir dir;
    model_tools::MakeModelOptions o;
    o.arch = "qwen3";
    o.type = "f32";
    const auto path = dir / "qwen3.gguf";
    model_tools::make_model(o, path);

    backend::CpuBackend be(2);
    auto m = Model::load(path, be);
    const ModelConfig& c = m->config();
    const ModelConfig want = model_tools::make_model_config(o, c.n_vocab);
    EXPECT_EQ(c.arch, Arch::Qwen3);
    EXPECT_EQ(c.n_ff, want.n_ff);
    EXPECT_EQ(c.n_layer, want.n_layer);
    EXPECT_EQ(c.n_attention_layers(), c.n_layer);
    EXPECT_EQ(c.n_expert, 0);

    const std::vector<int32_t> tokens = {72, 101, 108, 108, 111, 44, 32, 257, 119, 111, 114};
    const int64_t n = static_cast<int64_t>(tokens.size());
    auto prefill_seq = m->new_sequence(64);
    SequenceState* s = prefill_seq.get();
    Batch b;
    for (int64_t i = 0; i < n; ++i) b.add(tokens[static_cast<size_t>(i)], static_cast<int32_t>(i), 0, true);
    std::vector<float> all(static_cast<size_t>(n * c.n_vocab));
    m->forward(b, {&s, 1}, all.data());
    const std::vector<float> last(all.end() - c.n_vocab, all.end());
    const auto file = gguf::File::open(path);
    const double e_ref = rel_diff(last, reference_logits(*file, c, tokens));
    std::printf("qwen3 tiny f32: vs plain forward %.3g\n", e_ref);
    EXPECT_LT(e_ref, 1e-4);

    auto decode_seq = m->new_sequence(64);
    s = decode_seq.get();
    std::vector<float> step(static_cast<size_t>(c.n_vocab)), decoded;
    for (int64_t i = 0; i < n; ++i) {
        Batch one;
        one.add(tokens[static_cast<size_t>(i)], static_cast<int32_t>(i), 0, true);
        m->forward(one, {&s, 1}, step.data());
        decoded.insert(decoded.end(), step.begin(), step.end());
    }
    const std::vector<double> all_d(all.begin(), all.end());
    EXPECT_LT(rel_diff(decoded, all_d), 1e-4);
}

}  // namespace
}  // namespace strata::model
