// The host reference of Backend::sample_rows (row_sampling.h) against the definitions, written
// out here independently; the CUDA kernel is checked against the reference in tests/cuda/.
#include "backend/row_sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu_backend.h"
#include "test_util.h"

namespace strata::backend {
namespace {

constexpr float kRowInf = std::numeric_limits<float>::infinity();

TEST(RowSampling, EditsApplyBiasThenRepetitionThenSubtraction) {
    std::vector<float> row = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
    const LogitEdit edits[] = {{0, 0.0f, 2.0f, 0.0f}, {1, 0.0f, 2.0f, 0.5f}, {2, -3.0f, 4.0f, 0.0f}, {3, 1.5f, 1.0f, 0.25f}};
    RowSampleRequest req;
    req.edits = edits;
    RowSample out;
    std::vector<TokenLogit> top(5);
    sample_row_host(row.data(), 5, req, 5, &out, top.data());
    EXPECT_EQ(row, (std::vector<float>{1.0f, -4.5f, -8.0f, 1.75f, 3.0f}));  // 2/2; -2*2-0.5; (1-3)*4; 0.5+1.5-0.25
    EXPECT_EQ(out.max, 3.0f);
    ASSERT_EQ(out.n_top, 5);
    EXPECT_EQ(top[0].id, 4);
    EXPECT_EQ(top[1].id, 3);
    EXPECT_EQ(top[4].id, 2);
}

TEST(RowSampling, SumsTopTokensAndTheDrawFollowTheDefinitions) {
    const int64_t n = 5000;
    auto base = test::random_floats(static_cast<size_t>(n), 21, 3.0f);
    for (int64_t i = 0; i < 40; ++i) base[static_cast<size_t>((i * 37) % n)] = 7.0f;  // ties
    for (const float inv_t : {1.0f, 1.0f / 0.7f, 4.0f}) {
        for (const double u : {0.0, 0.123, 0.5, 0.999}) {
            std::vector<float> row = base;
            RowSampleRequest req;
            req.inv_temperature = inv_t;
            req.u = u;
            RowSample out;
            std::vector<TokenLogit> top(64);
            sample_row_host(row.data(), n, req, 64, &out, top.data());
            const float max = *std::max_element(base.begin(), base.end());
            EXPECT_EQ(out.max, max);
            double st = 0, s1 = 0;
            std::vector<double> w(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) {
                const float e = (base[static_cast<size_t>(i)] - max) * inv_t;
                w[static_cast<size_t>(i)] = e >= -87.0f ? std::exp(static_cast<double>(e)) : 0.0;
                st += w[static_cast<size_t>(i)];
                const float e1 = base[static_cast<size_t>(i)] - max;
                s1 += e1 >= -87.0f ? std::exp(static_cast<double>(e1)) : 0.0;
            }
            EXPECT_NEAR(out.sum_t, st, 1e-6 * st);
            EXPECT_NEAR(out.sum_1, s1, 1e-6 * s1);
            // The draw: the running weight before the token is at most the target, with it above.
            ASSERT_GE(out.drawn, 0);
            double before = 0;
            for (int32_t i = 0; i < out.drawn; ++i) before += w[static_cast<size_t>(i)];
            EXPECT_LE(before, u * st * (1 + 1e-9));
            EXPECT_GT(before + w[static_cast<size_t>(out.drawn)], u * st * (1 - 1e-9));
            EXPECT_EQ(out.drawn_logit, base[static_cast<size_t>(out.drawn)]);
            // The top tokens: a full sort by (logit descending, id ascending).
            std::vector<int32_t> ids(static_cast<size_t>(n));
            for (int32_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
            std::stable_sort(ids.begin(), ids.end(),
                             [&](int32_t a, int32_t b) { return base[static_cast<size_t>(a)] > base[static_cast<size_t>(b)]; });
            ASSERT_EQ(out.n_top, 64);
            for (int32_t j = 0; j < 64; ++j) {
                EXPECT_EQ(top[static_cast<size_t>(j)].id, ids[static_cast<size_t>(j)]) << j;
                EXPECT_EQ(top[static_cast<size_t>(j)].logit, base[static_cast<size_t>(ids[static_cast<size_t>(j)])]) << j;
            }
        }
    }
}

TEST(RowSampling, TheDrawKeepsTheNucleusThenMinP) {
    // Weights 0.1, 0.5, 0.1, 0.3 (ids 0-3) at T = 1: top_p 0.75 keeps ids 1 and 3 (0.5 + 0.3).
    const std::vector<float> base = {std::log(0.1f), std::log(0.5f), std::log(0.1f), std::log(0.3f)};
    auto draw = [&](float top_p, float min_p, double u) {
        std::vector<float> row = base;
        RowSampleRequest req;
        req.u = u;
        req.top_p = top_p;
        req.min_p = min_p;
        RowSample out;
        std::vector<TokenLogit> top(4);
        sample_row_host(row.data(), 4, req, 4, &out, top.data());
        return out.drawn;
    };
    EXPECT_EQ(draw(0.75f, 0.0f, 0.0), 1);
    EXPECT_EQ(draw(0.75f, 0.0f, 0.6), 1);  // 0.6 * 0.8 = 0.48 < 0.5
    EXPECT_EQ(draw(0.75f, 0.0f, 0.7), 3);  // 0.56: past id 1, in id 3 (id 2 is out)
    EXPECT_EQ(draw(1.0f, 0.0f, 0.62), 2);  // everything kept: 0.62 lands in id 2 (0.6 .. 0.7)
    EXPECT_EQ(draw(1.0f, 0.5f, 0.7), 3);   // min-p 0.5: weights 1, 0.6 of the top's kept (ids 1, 3)
    EXPECT_EQ(draw(0.4f, 0.0f, 0.99), 1);  // the nucleus is the top token alone
}

TEST(RowSampling, InfinityNanAndRowsWithNothingToSample) {
    std::vector<float> row = {1.0f, kRowInf, std::nanf(""), -kRowInf, kRowInf};
    RowSampleRequest req;
    req.u = 0.75;
    RowSample out;
    std::vector<TokenLogit> top(8);
    sample_row_host(row.data(), 5, req, 8, &out, top.data());
    EXPECT_EQ(row[1], std::numeric_limits<float>::max());  // +inf becomes the largest finite float
    EXPECT_EQ(out.max, std::numeric_limits<float>::max());
    EXPECT_EQ(out.n_top, 3);  // NaN and -inf are never candidates
    EXPECT_EQ(top[0].id, 1);
    EXPECT_EQ(top[1].id, 4);
    EXPECT_EQ(top[2].id, 0);
    EXPECT_EQ(out.sum_t, 2.0);  // the two former infinities; 1.0 - max underflows
    EXPECT_EQ(out.drawn, 4);    // 0.75 * 2 is past the first

    std::vector<float> none = {-kRowInf, std::nanf(""), -kRowInf};
    sample_row_host(none.data(), 3, req, 8, &out, top.data());
    EXPECT_EQ(out.max, -kRowInf);
    EXPECT_EQ(out.n_top, 0);
    EXPECT_EQ(out.drawn, -1);
}

TEST(RowSampling, TheDefaultRunsTheReferenceAndWritesTheEditedRowsBack) {
    CpuBackend cpu(2);
    const int64_t n = 3000, rows = 3;
    auto x = test::random_floats(static_cast<size_t>(rows * n), 4, 2.0f);
    Buffer b(&cpu, x.size());
    cpu.copy_from_host(x.data(), b.data(), x.size());
    const LogitEdit edit[] = {{17, 40.0f, 1.0f, 0.0f}};
    std::vector<RowSampleRequest> req(2);
    req[0].row = 2;
    req[0].edits = edit;
    req[0].u = 0.5;
    req[1].row = 0;
    std::vector<RowSample> out(2);
    std::vector<TokenLogit> top(2 * 16);
    cpu.sample_rows(b.data(), n, req, 16, out.data(), top.data());
    EXPECT_EQ(b.data()[2 * n + 17], x[static_cast<size_t>(2 * n + 17)] + 40.0f);
    EXPECT_EQ(top[0].id, 17);
    EXPECT_EQ(out[0].drawn, 17);  // almost all the weight
    RowSample ref;
    std::vector<TokenLogit> ref_top(16);
    std::vector<float> row0(x.begin(), x.begin() + n);
    sample_row_host(row0.data(), n, req[1], 16, &ref, ref_top.data());
    EXPECT_EQ(out[1].max, ref.max);
    EXPECT_EQ(out[1].drawn, -1);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(top[static_cast<size_t>(16 + j)].id, ref_top[static_cast<size_t>(j)].id);
}

}  // namespace
}  // namespace strata::backend
