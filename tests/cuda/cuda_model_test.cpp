// Whole forwards on the CUDA backend against the CPU backend on the same made models (every
// architecture): two sequences of different lengths prefilled in one batch, then batched decode
// steps. With f32 weights both compute in f32 and must agree closely. With quantised weights the
// reference is the CPU's f32 forward on the dequantised weights (the same model re-encoded as
// f32): the GPU's error against it must be no worse than the CPU backend's own (which rounds
// activations to 8 bits) with some slack, and the top token must agree where the reference's
// top-1/top-2 margin is clear.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "backend/cpu_backend.h"
#include "devices/backend_factory.h"
#include "model/model.h"
#include "model_tools/make_model.h"
#include "model_tools/quantize_model.h"
#include "test_util.h"

namespace strata::model {
namespace {

int64_t argmax(const float* r, int64_t n) { return std::max_element(r, r + n) - r; }
float margin(const float* r, int64_t n) {
    std::vector<float> v(r, r + n);
    std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
    return v[0] - v[1];
}

class CudaModels : public testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CudaModels, ForwardMatchesCpu) {
    std::string why;
    if (!devices::cuda_usable(&why)) GTEST_SKIP() << why;
    const auto [arch, mix] = GetParam();
    test::TempDir dir;
    model_tools::MakeModelOptions o;
    o.arch = arch;
    o.type = mix;
    o.layers = 4;
    o.embd = 256;
    o.ff_exp = 256;
    if (arch != "qwen3moe") o.ff_shexp = 256;
    o.experts = 16;
    o.experts_used = 4;
    o.init = "quantize";
    const auto path = dir / "m.gguf";
    model_tools::make_model(o, path);

    backend::CpuBackend cpu(2);
    devices::BackendOptions bo;
    bo.device = "cuda";
    const auto gpu = devices::make_backend(bo);
    bo.cuda_graphs = false;
    const auto gpu_eager = devices::make_backend(bo);
    auto mc = Model::load(path, cpu);
    auto mg = Model::load(path, *gpu);
    auto me = Model::load(path, *gpu_eager);  // the same kernels launched one by one
    // Quantised attention weights: the GPU keeps f16 caches (unless STRATA_CUDA_KV_F32=1 asks
    // for f32 in an A/B run); f32 models and the CPU keep f32.
    const char* kv_f32 = std::getenv("STRATA_CUDA_KV_F32");
    const bool f16_wanted = mix != "f32" && (kv_f32 == nullptr || std::string(kv_f32) != "1");
    EXPECT_EQ(mg->kv_type(), f16_wanted ? backend::KvType::F16 : backend::KvType::F32);
    EXPECT_EQ(mc->kv_type(), backend::KvType::F32);
    std::unique_ptr<Model> mr;  // f32 reference on the dequantised weights
    if (mix != "f32") {
        model_tools::QuantizeOptions q;
        q.mix = "f32";
        model_tools::quantize_model(path, dir / "ref.gguf", q);
        mr = Model::load(dir / "ref.gguf", cpu);
    }
    const int64_t n_vocab = mc->config().n_vocab;

    struct Run {
        Model* m;
        std::vector<std::unique_ptr<SequenceState>> seqs;
        std::vector<float> logits;
    };
    // Sequences 2 .. 2 + kWide decode together at the end: a batch wider than the GEMVs take
    // (8 inputs), so its products go through cuBLAS, recorded into graphs too (up to 32 tokens)
    // and compared bit for bit with the eager backend's.
    constexpr int kWide = 20;
    std::vector<Run> runs;
    for (Model* m : {mc.get(), mg.get(), mr.get(), me.get()}) {
        if (m == nullptr) continue;
        Run r{m, {}, {}};
        for (int i = 0; i < 2 + kWide; ++i) r.seqs.push_back(m->new_sequence(256));
        runs.push_back(std::move(r));
    }
    Run& ref = mr ? runs[2] : runs[0];  // the f32 reference, or the CPU run for f32 models
    auto forward = [&](const Batch& b) {
        for (Run& r : runs) {
            std::vector<SequenceState*> s;
            for (const auto& q : r.seqs) s.push_back(q.get());
            r.logits.assign(static_cast<size_t>(b.size() * n_vocab), 0.0f);
            r.m->forward(b, s, r.logits.data());
        }
    };
    const Run& eager = runs.back();
    int graph_rows_equal = 0;
    double gpu_err = 0, cpu_err = 0;
    int compared = 0, gpu_flips = 0, cpu_flips = 0;
    auto check_rows = [&](int64_t rows) {
        for (int64_t r = 0; r < rows; ++r) {
            const float* want = ref.logits.data() + r * n_vocab;
            gpu_err = std::max(gpu_err, test::rel_l2(runs[1].logits.data() + r * n_vocab, want, static_cast<size_t>(n_vocab)));
            // Decode steps replay recorded graphs: bit for bit the eager launches' result.
            const bool same = std::equal(eager.logits.begin() + r * n_vocab, eager.logits.begin() + (r + 1) * n_vocab,
                                         runs[1].logits.begin() + r * n_vocab);
            EXPECT_TRUE(same) << "graph vs eager, row " << r;
            graph_rows_equal += same;
            cpu_err = std::max(cpu_err, test::rel_l2(runs[0].logits.data() + r * n_vocab, want, static_cast<size_t>(n_vocab)));
            if (margin(want, n_vocab) > 0.05f) {
                ++compared;
                gpu_flips += argmax(want, n_vocab) != argmax(runs[1].logits.data() + r * n_vocab, n_vocab);
                cpu_flips += argmax(want, n_vocab) != argmax(runs[0].logits.data() + r * n_vocab, n_vocab);
            }
        }
    };
    // Prefill: 90 tokens of sequence 0 (more than a Gated DeltaNet chunk) and 5 of sequence 1.
    Batch b;
    for (int32_t i = 0; i < 90; ++i) b.add((i * 37 + 11) % static_cast<int32_t>(n_vocab), i, 0, true);
    for (int32_t i = 0; i < 5; ++i) b.add((i * 53 + 7) % static_cast<int32_t>(n_vocab), i, 1, true);
    forward(b);
    check_rows(b.size());
    // Decode: six steps of both sequences together, feeding the reference's greedy tokens.
    int32_t p0 = 90, p1 = 5;
    int64_t last0 = 89, last1 = 94;
    for (int step = 0; step < 6; ++step) {
        const int32_t t0 = static_cast<int32_t>(argmax(ref.logits.data() + last0 * n_vocab, n_vocab));
        const int32_t t1 = static_cast<int32_t>(argmax(ref.logits.data() + last1 * n_vocab, n_vocab));
        b.clear();
        b.add(t0, p0++, 0, true);
        b.add(t1, p1++, 1, true);
        forward(b);
        check_rows(2);
        last0 = 0;
        last1 = 1;
    }
    // Decode: kWide fresh sequences, one token each a step, four steps (the first starts them).
    for (int step = 0; step < 4; ++step) {
        b.clear();
        for (int i = 0; i < kWide; ++i) {
            const int32_t tok = step == 0 ? (i * 131 + 17) % static_cast<int32_t>(n_vocab)
                                          : static_cast<int32_t>(argmax(ref.logits.data() + i * n_vocab, n_vocab));
            b.add(tok, step, 2 + i, true);
        }
        forward(b);
        check_rows(kWide);
    }
    EXPECT_GT(graph_rows_equal, 0);
    std::printf(
        "%s %s: worst logit-row rel L2 against %s: GPU %.3g, CPU %.3g; top token differs in %d (GPU) and %d (CPU) of "
        "%d rows with a clear margin\n",
        arch.c_str(), mix.c_str(), mr ? "f32 on the dequantised weights" : "the CPU", gpu_err, cpu_err, gpu_flips, cpu_flips,
        compared);
    if (mix == "f32") {
        EXPECT_LT(gpu_err, 1e-4);
        EXPECT_EQ(gpu_flips, 0);
    } else {
        // Random-weight models amplify rounding (near-tied routers flip experts): the GPU must
        // be about as close to the dequantised reference as the CPU backend is.
        EXPECT_LT(gpu_err, 2.0 * cpu_err + 1e-3);
        EXPECT_LE(gpu_flips, 2 * cpu_flips + 2);
    }
    EXPECT_GT(compared, 20);
}

INSTANTIATE_TEST_SUITE_P(Made, CudaModels,
                         testing::Combine(testing::Values("qwen3moe", "qwen3next", "qwen35moe"),
                                          testing::Values("f32", "q4_k_m", "q8_0", "q4_1", "q5_0")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace strata::model
