// The forward pass against transformers on the hf-tiny fixtures: every prompt position's top
// logits and the full last-position logit row, plus greedy continuations where the reference's
// margin exceeds our numeric error.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "devices/backend_factory.h"
#include "model/model.h"
#include "test_util.h"

namespace strata::model {
namespace {

std::vector<float> read_f32(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
}

using test::rel_l2;

// (architecture, device): the CUDA backend is held to the same bounds as the CPU backend.
class FixtureLogits : public testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(FixtureLogits, MatchesTransformers) {
    const auto [arch, device] = GetParam();
    const auto dir = test::fixture("hf-tiny/" + arch);
    STRATA_REQUIRE_FIXTURE(dir / (arch + "-bf16.gguf"));
    std::string why;
    if (device == "cuda" && !devices::cuda_usable(&why)) GTEST_SKIP() << why;
    devices::BackendOptions bo;
    bo.device = device;
    const auto backend = devices::make_backend(bo);
    backend::Backend& be = *backend;
    // These references were computed after model.to(bfloat16), which also rounded the rotary
    // inv_freq buffer: reproduce that to compare the rest of the computation tightly.
    LoadOptions opts;
    opts.rope_freqs_bf16 = true;
    auto m = Model::load(dir / (arch + "-bf16.gguf"), be, opts);
    const int64_t n_vocab = m->config().n_vocab;
    std::ifstream in(dir / "reference.json");
    const auto ref = nlohmann::json::parse(in);
    for (size_t k = 0; k < ref["prompts"].size(); ++k) {
        const auto& p = ref["prompts"][k];
        const auto tokens = p["tokens"].get<std::vector<int32_t>>();
        auto seq = m->new_sequence(512);
        Batch b;
        for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, true);
        std::vector<float> logits(tokens.size() * static_cast<size_t>(n_vocab));
        SequenceState* s = seq.get();
        m->forward(b, {&s, 1}, logits.data());
        // Top-5 logits at every position.
        double max_top5_err = 0;
        for (size_t i = 0; i < tokens.size(); ++i) {
            for (size_t j = 0; j < 5; ++j) {
                const int id = p["top5_ids"][i][j];
                const double want = p["top5_logits"][i][j];
                max_top5_err = std::max(max_top5_err, std::abs(logits[i * n_vocab + id] - want));
            }
        }
        const auto last = read_f32(dir / ("last_logits_" + std::to_string(k) + ".f32"));
        ASSERT_EQ(last.size(), static_cast<size_t>(n_vocab));
        const double err = rel_l2(logits.data() + (tokens.size() - 1) * n_vocab, last.data(), last.size());
        std::printf("%s on %s, prompt %zu (%zu tokens): last-row rel L2 %.3g, max |top5 delta| %.3g\n", arch.c_str(),
                    device.c_str(), k, tokens.size(), err, max_top5_err);
        EXPECT_LT(err, 1e-4) << arch << " prompt " << k;
        EXPECT_LT(max_top5_err, 1e-3) << arch << " prompt " << k;

        // Greedy continuation, one decode step at a time after the prompt. A step is compared
        // when our own top-1/top-2 margin exceeds 1e-4 (100x the error measured above); after
        // the first such mismatch nothing further would be comparable, so it fails there.
        const auto greedy = p["greedy"].get<std::vector<int32_t>>();
        std::vector<float> row(logits.end() - n_vocab, logits.end());
        int compared = 0;
        for (size_t step = 0; step < greedy.size(); ++step) {
            int64_t best = 0, second = -1;
            for (int64_t i = 1; i < n_vocab; ++i) {
                if (row[i] > row[best]) {
                    second = best;
                    best = i;
                } else if (second < 0 || row[i] > row[second]) {
                    second = i;
                }
            }
            if (row[best] - row[second] > 1e-4f) {
                ++compared;
                ASSERT_EQ(best, greedy[step]) << arch << " prompt " << k << " greedy step " << step;
            }
            b.clear();
            b.add(greedy[step], static_cast<int32_t>(tokens.size() + step), 0, true);
            m->forward(b, {&s, 1}, row.data());
        }
        std::printf("%s prompt %zu: greedy %d/%zu steps compared, all equal\n", arch.c_str(), k, compared, greedy.size());
        EXPECT_GT(compared, static_cast<int>(greedy.size()) / 2);
    }
}

INSTANTIATE_TEST_SUITE_P(HfTiny, FixtureLogits,
                         testing::Combine(testing::Values("qwen3moe", "qwen3next", "qwen35moe"), testing::Values("cpu", "cuda")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace strata::model
