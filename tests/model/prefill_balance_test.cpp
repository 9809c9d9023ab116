// Prefill's balance (experts/prefill_balance.h) on a simulated layer: the missing experts split
// greedily by a cost model whose host cost is off by a known factor (as the CUDA backend's
// moe_placed_grouped splits them), the two sides' times reported after each layer. The scale
// must bring the layer's time (the slower side) near the best split's, from either side.
#include "experts/prefill_balance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace {

using strata::experts::PrefillBalance;

struct Times {
    double gpu = 0, host = 0;
};

// One layer: `counts` tokens of each missing expert (most first), uploads at `upload_s` each, the
// host's true cost `host_fixed + n * host_token` while the model believes `believed` times that.
Times layer(const std::vector<int>& counts, double upload_s, double host_fixed, double host_token, double believed,
            double scale) {
    double model_gpu = 0, model_host = 0;
    Times t;
    for (int n : counts) {
        const double truth = host_fixed + n * host_token;
        const double model = believed * truth * scale;
        if (model_gpu + upload_s <= model_host + model) {
            model_gpu += upload_s;
            t.gpu += upload_s;
        } else {
            model_host += model;
            t.host += truth;
        }
    }
    return t;
}

// The best split's time: the k most popular experts uploaded, the rest on the host, best k.
double best_time(const std::vector<int>& counts, double upload_s, double host_fixed, double host_token) {
    double best = 1e30;
    for (size_t k = 0; k <= counts.size(); ++k) {
        double host = 0;
        for (size_t i = k; i < counts.size(); ++i) host += host_fixed + counts[i] * host_token;
        best = std::min(best, std::max(static_cast<double>(k) * upload_s, host));
    }
    return best;
}

std::vector<int> seed_like_counts(std::mt19937& rng) {
    // seed-125b's prefill of 512 tokens: ~350 missing experts of a layer, ~10 tokens each.
    std::poisson_distribution<int> p(10.0);
    std::vector<int> c(350);
    for (int& n : c) n = std::max(1, p(rng));
    std::sort(c.begin(), c.end(), std::greater<>());
    return c;
}

TEST(PrefillBalance, StartsAtOneAndIgnoresEmptyReports) {
    PrefillBalance b;
    EXPECT_EQ(b.scale(), 1.0);
    EXPECT_EQ(b.report(0.0, 0.01), 1.0);
    EXPECT_EQ(b.report(-1.0, 0.0), 1.0);
}

TEST(PrefillBalance, MovesTowardTheSlowerSidesRelief) {
    PrefillBalance gpu_slow, host_slow, idle_host;
    EXPECT_LT(gpu_slow.report(0.020, 0.010), 1.0);   // the host should take more: it looks cheaper
    EXPECT_GT(host_slow.report(0.010, 0.020), 1.0);  // the host should take less
    EXPECT_LT(idle_host.report(0.010, 0.0), gpu_slow.scale());
    // One wild layer moves it by at most 2x.
    PrefillBalance wild;
    EXPECT_GE(wild.report(1.0, 1e-6), 0.5);
}

TEST(PrefillBalance, StaysWithinItsBounds) {
    PrefillBalance b;
    for (int i = 0; i < 200; ++i) b.report(1.0, 0.0);
    EXPECT_EQ(b.scale(), PrefillBalance::kMinScale);
    for (int i = 0; i < 400; ++i) b.report(1e-6, 1.0);
    EXPECT_EQ(b.scale(), PrefillBalance::kMaxScale);
}

// The model's host cost wrong by 1/4x to 4x: within a forward's 48 layers the split's time comes
// within 10 % of the best split's, where the uncorrected model is far off.
TEST(PrefillBalance, BringsAMisjudgedSplitNearTheBest) {
    std::mt19937 rng(11);
    const double upload_s = 55e-6, host_fixed = 60e-6, host_token = 8e-6;
    for (const double believed : {0.25, 0.5, 2.0, 4.0}) {
        PrefillBalance b;
        double last_ratio = 0, first_ratio = 0;
        for (int l = 0; l < 48; ++l) {
            const auto counts = seed_like_counts(rng);
            const Times t = layer(counts, upload_s, host_fixed, host_token, believed, b.scale());
            const double ratio = std::max(t.gpu, t.host) / best_time(counts, upload_s, host_fixed, host_token);
            if (l == 0) first_ratio = ratio;
            last_ratio = ratio;
            b.report(t.gpu, t.host);
        }
        EXPECT_GT(first_ratio, 1.15) << "believed " << believed;
        EXPECT_LT(last_ratio, 1.10) << "believed " << believed << ", scale " << b.scale();
    }
}

// With a right model it stays near 1 and keeps the split near the best.
TEST(PrefillBalance, LeavesARightModelAlone) {
    std::mt19937 rng(5);
    PrefillBalance b;
    for (int l = 0; l < 48; ++l) {
        const auto counts = seed_like_counts(rng);
        const Times t = layer(counts, 55e-6, 60e-6, 8e-6, 1.0, b.scale());
        b.report(t.gpu, t.host);
        EXPECT_LT(std::max(t.gpu, t.host) / best_time(counts, 55e-6, 60e-6, 8e-6), 1.10) << "layer " << l;
    }
    EXPECT_GT(b.scale(), 0.7);
    EXPECT_LT(b.scale(), 1.4);
}

}  // namespace
