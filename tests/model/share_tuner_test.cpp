// The in-place share's tuner (experts/share_tuner.h) on step times drawn from known curves:
// it must settle at the curve's minimum from either side, ignore other keys and idle gaps, and
// climb again after retune_after settled steps.
#include "experts/share_tuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace {

using strata::experts::ShareTuner;

// Feeds `n` steps of `key`, each timed by curve(share in force) times 1 +/- noise.
template <typename Curve>
void feed(ShareTuner& t, int n, int64_t key, Curve curve, std::mt19937& rng, double noise = 0.01) {
    std::uniform_real_distribution<double> u(-noise, noise);
    for (int i = 0; i < n && !t.settled(); ++i) t.add(key, curve(t.share()) * (1.0 + u(rng)));
}

// A decode step against the share read in place: a V around `best`, 5 % slower for every 0.1
// away (as measured on the H100 between 30 % and 100 %: 15.9 to 22.3 ms).
auto bowl(double best) {
    return [best](double f) { return 15e-3 * (1.0 + 0.5 * std::abs(f - best)); };
}

TEST(ShareTuner, SettlesAtTheBestShareFromEitherSide) {
    for (double best : {0.0, 0.2, 0.3, 0.55, 1.0})
        for (double start : {0.0, 0.45, 0.95}) {
            std::mt19937 rng(static_cast<unsigned>(100 * best + 10 * start));
            ShareTuner t;
            t.restart(start);
            feed(t, 2000, 10, bowl(best), rng, 0.002);
            ASSERT_TRUE(t.settled()) << "best " << best << " start " << start;
            EXPECT_NEAR(t.share(), best, 0.051) << "best " << best << " start " << start;
        }
}

TEST(ShareTuner, OnAFlatBottomItSettlesWithinTheGainOfTheBestTime) {
    // 0.1 from the best costs 0.6 %: less than the gain, so the climb may stop early, but only
    // where the time is within the gain of the best.
    for (double start : {0.0, 0.5, 1.0}) {
        std::mt19937 rng(static_cast<unsigned>(10 * start));
        auto flat = [](double f) { return 15e-3 * (1.0 + 0.6 * (f - 0.4) * (f - 0.4)); };
        ShareTuner t;
        t.restart(start);
        feed(t, 4000, 10, flat, rng, 0.002);
        ASSERT_TRUE(t.settled());
        EXPECT_LT(flat(t.share()), flat(0.4) * 1.015) << "start " << start << " settled at " << t.share();
    }
}

TEST(ShareTuner, NoiseWithinTheGainLeavesTheShareNearTheBest) {
    // Step times that scatter +/- 3 %: the medians of 12 still find a bowl 20 % deep at the edges.
    std::mt19937 rng(7);
    ShareTuner t;
    t.restart(0.45);
    feed(
        t, 4000, 10, [](double f) { return 15e-3 * (1.0 + 1.2 * std::abs(f - 0.25)); }, rng, 0.03);
    ASSERT_TRUE(t.settled());
    EXPECT_NEAR(t.share(), 0.25, 0.101);
}

TEST(ShareTuner, OnlyTheClimbsKeyCountsAndIdleGapsAreDropped) {
    std::mt19937 rng(3);
    ShareTuner t;
    t.restart(0.5);
    auto curve = bowl(0.3);
    int steps = 0;
    while (!t.settled() && steps < 5000) {
        ++steps;
        const double f = t.share();
        t.add(10, curve(f));
        // A batch of 16 between the batch-1 steps, always "fast" (it would mislead a tuner that
        // mixed keys), and now and then an idle gap of a second.
        if (steps % 3 == 0) t.add(160, 1e-3);
        if (steps % 17 == 0) t.add(10, 1.0);
    }
    ASSERT_TRUE(t.settled());
    EXPECT_NEAR(t.share(), 0.3, 0.051);
}

TEST(ShareTuner, AnotherKeyLongEnoughStartsTheClimbOnIt) {
    std::mt19937 rng(5);
    ShareTuner::Options o;
    o.key_patience = 8;
    ShareTuner t(o);
    t.restart(0.5);
    for (int i = 0; i < 5; ++i) t.add(10, 1.0);  // a few batch-1 steps, then only batches of 16
    feed(t, 4000, 160, bowl(0.8), rng, 0.002);
    ASSERT_TRUE(t.settled());
    EXPECT_NEAR(t.share(), 0.8, 0.051);
}

TEST(ShareTuner, ClimbsAgainAfterRetuneAfterSettledSteps) {
    std::mt19937 rng(11);
    ShareTuner::Options o;
    o.retune_after = 100;
    ShareTuner t(o);
    t.restart(0.5);
    feed(t, 4000, 10, bowl(0.5), rng, 0.002);
    ASSERT_TRUE(t.settled());
    EXPECT_NEAR(t.share(), 0.5, 0.051);
    (void)t.take_note();
    // The machine changed (the host got busier): the best share moved to 0.7.
    for (int i = 0; i < 99; ++i) t.add(10, bowl(0.7)(t.share()));
    EXPECT_TRUE(t.settled());
    t.add(10, bowl(0.7)(t.share()));
    EXPECT_FALSE(t.settled());
    EXPECT_EQ(t.climbs(), 2);
    EXPECT_NE(t.take_note().find("retuning"), std::string::npos);
    feed(t, 4000, 10, bowl(0.7), rng, 0.002);
    ASSERT_TRUE(t.settled());
    EXPECT_NEAR(t.share(), 0.7, 0.051);
}

TEST(ShareTuner, NotStartedItIgnoresSteps) {
    ShareTuner t;
    for (int i = 0; i < 100; ++i) t.add(10, 1e-3);
    EXPECT_EQ(t.climbs(), 0);
    EXPECT_FALSE(t.settled());
}

}  // namespace
