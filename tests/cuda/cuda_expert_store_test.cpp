// The expert store's VRAM tier (on a machine with a GPU; skipped without one): whole forwards on
// the CUDA backend with only some experts in VRAM slots (the rest run by the host executor, in
// parallel with the GPU's share) against the f32 reference on the dequantised weights, on every
// architecture: a prefill of more pairs than the device-indexed path takes (the grouped path:
// resident, uploaded and host experts), then decode steps replayed from recorded graphs, with
// re-placements mid-generation; none, some, all experts resident; the host's share of decode
// joined through the host callback (STRATA_CUDA_HOST_LINK=0) and through the mapped link, for
// one token and for a 40-token chunk (decode-sized: the device-indexed path). The store's error
// must be of the size of the all-resident GPU's and the CPU backend's own.
#include <gtest/gtest.h>

#include <algorithm>
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

class CudaExpertStore : public testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CudaExpertStore, ForwardsMatchTheReference) {
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
    model_tools::QuantizeOptions q;
    q.mix = "f32";
    model_tools::quantize_model(path, dir / "ref.gguf", q);

    backend::CpuBackend cpu(2);
    devices::BackendOptions bo;
    bo.device = "cuda";
    const auto gpu = devices::make_backend(bo);
    auto mr = Model::load(dir / "ref.gguf", cpu);
    auto mc = Model::load(path, cpu);
    auto mg = Model::load(path, *gpu);
    struct Variant {
        const char* name;
        int64_t slots;
        bool adapt;
        double far;         // the share of missing experts read in place from host memory in decode
        bool link = false;  // the host's share joined through the mapped link (else a host callback)
    };
    const Variant variants[] = {{"6 of 16 slots, re-placing", 6, true, -1.0},
                                {"6 of 16 slots, host executor only", 6, false, 0.0},
                                {"6 of 16 slots, all missing read in place", 6, false, 1.0},
                                {"no slots, half read in place", 0, false, 0.5},
                                {"all 16 slots", 16, false, -1.0},
                                {"6 of 16 slots, re-placing, link join", 6, true, -1.0, true},
                                {"6 of 16 slots, host executor only, link join", 6, false, 0.0, true},
                                {"no slots, half read in place, link join", 0, false, 0.5, true}};
    std::vector<std::unique_ptr<backend::Backend>> store_backends;  // one store per backend
    std::vector<std::unique_ptr<Model>> stores;
    for (const Variant& v : variants) {
        setenv("STRATA_CUDA_HOST_LINK", v.link ? "1" : "0", 1);  // read when the backend is made
        store_backends.push_back(devices::make_backend(bo));
        unsetenv("STRATA_CUDA_HOST_LINK");
        LoadOptions lo;
        lo.expert_store = LoadOptions::ExpertStoreMode::On;
        lo.store.slots_per_layer = v.slots;
        lo.store.adapt = v.adapt;
        lo.store.replan_every = 1;
        lo.store.max_swaps_per_layer = 3;
        lo.store.n_threads = 2;
        lo.store.log = [](const std::string&) {};
        lo.store.far_fraction = v.far;
        stores.push_back(Model::load(path, *store_backends.back(), lo));
        ASSERT_NE(stores.back()->expert_store(), nullptr);
    }
    std::vector<Model*> models = {mr.get(), mc.get(), mg.get()};
    for (auto& s : stores) models.push_back(s.get());
    const int64_t n_vocab = mr->config().n_vocab;
    std::vector<std::unique_ptr<SequenceState>> seqs;
    for (Model* m : models) seqs.push_back(m->new_sequence(256));
    std::vector<std::vector<float>> logits(models.size());
    std::vector<double> worst(models.size(), 0.0);
    auto forward = [&](const Batch& b) {
        for (size_t i = 0; i < models.size(); ++i) {
            SequenceState* s = seqs[i].get();
            logits[i].assign(static_cast<size_t>(b.size() * n_vocab), 0.0f);
            models[i]->forward(b, {&s, 1}, logits[i].data());
        }
        for (size_t i = 1; i < models.size(); ++i)
            for (int64_t r = 0; r < b.size(); ++r)
                worst[i] = std::max(worst[i], test::rel_l2(logits[i].data() + r * n_vocab, logits[0].data() + r * n_vocab,
                                                           static_cast<size_t>(n_vocab)));
    };
    // Prefill: 80 tokens x 4 experts = 320 pairs, more than the indexed path's 256.
    Batch b;
    for (int32_t i = 0; i < 80; ++i) b.add((i * 37 + 11) % static_cast<int32_t>(n_vocab), i, 0, true);
    forward(b);
    // A chunk of 40 tokens: 160 pairs, the device-indexed path with many tokens a call.
    b.clear();
    for (int32_t i = 80; i < 120; ++i) b.add((i * 37 + 11) % static_cast<int32_t>(n_vocab), i, 0, true);
    forward(b);
    // Decode: 24 steps (recorded graphs after the first ones; plans every forward), the
    // reference's greedy tokens fed to all.
    int32_t pos = 120;
    int64_t last = 39;
    for (int step = 0; step < 24; ++step) {
        const auto* row = logits[0].data() + last * n_vocab;
        const auto tok = static_cast<int32_t>(std::max_element(row, row + n_vocab) - row);
        b.clear();
        b.add(tok, pos++, 0, true);
        forward(b);
        last = 0;
    }
    const double bound = 2.0 * std::max(worst[1], worst[2]) + 1e-3;
    std::printf("%s %s: worst logit-row rel L2 against f32: CPU %.3g, GPU all resident %.3g\n", arch.c_str(), mix.c_str(),
                worst[1], worst[2]);
    for (size_t v = 0; v < stores.size(); ++v) {
        const experts::StoreStats st = stores[v]->expert_store()->stats();
        std::printf("  store, %s: %.3g (%.0f %% of pairs from VRAM, %llu read in place, %llu on the host, %llu re-placed)\n",
                    variants[v].name, worst[3 + v], 100.0 * st.hit_rate(), static_cast<unsigned long long>(st.pairs_far),
                    static_cast<unsigned long long>(st.pairs_host), static_cast<unsigned long long>(st.replacements));
        EXPECT_LT(worst[3 + v], bound) << variants[v].name;
        EXPECT_EQ(st.slots_per_layer, variants[v].slots);
        if (variants[v].slots == 0) {
            EXPECT_EQ(st.pairs_vram, 0u);
        }
        if (variants[v].slots == 16) {
            EXPECT_EQ(st.pairs_host, 0u);
        }
        if (variants[v].slots == 6) {
            EXPECT_GT(st.pairs_vram, 0u);
        }
        if (variants[v].far == 0) {
            EXPECT_GT(st.pairs_host, 0u);  // decode's missing pairs all go to the host executor
        }
        if (variants[v].far > 0) {
            EXPECT_GT(st.pairs_far, 0u) << "no pair read its expert in place";
        }

        if (variants[v].adapt) {
            EXPECT_GT(st.replacements, 0u) << "no re-placement happened mid-generation";
        }
    }
    // Prefill's uploads count as pairs whose expert came over the bus too; decode's in-place
    // reads add to them only where asked.
    EXPECT_GT(stores[2]->expert_store()->stats().pairs_far, stores[1]->expert_store()->stats().pairs_far);
}

INSTANTIATE_TEST_SUITE_P(Made, CudaExpertStore,
                         testing::Combine(testing::Values("qwen3moe", "qwen3next", "qwen35moe"),
                                          testing::Values("q8_0", "q4_k_m")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace strata::model
