// Sampling from the backend's row summaries (Sampler::row_request / sample_row /
// sample_adjusted, with the host reference of Backend::sample_rows) picks the same tokens, with
// the same logprobs, as Sampler::sample on the whole row, for the same seed: greedy, plain
// temperature, top-k, top-p and min-p (flat rows too, where the nucleus is most of the
// vocabulary), penalties, bias, logprobs, and top_k above what a summary carries (the whole row).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/row_sampling.h"
#include "runtime/sampler.h"
#include "test_util.h"
#include "util/error.h"

namespace strata::runtime {
namespace {

constexpr int32_t kRowsVocab = 151936;
using backend::kMaxRowSampleTop;

struct RowsPick {
    SampleResult result;
    bool summary = false;  // decided by the summary (else the whole row)
};

RowsPick sample_via_rows(Sampler& s, std::vector<float> logits) {
    RowsPick v;
    std::optional<backend::RowSampleRequest> req = s.row_request();
    if (!req) {
        v.result = s.sample(logits.data());
        return v;
    }
    backend::RowSample row;
    std::vector<backend::TokenLogit> top(kMaxRowSampleTop);
    backend::sample_row_host(logits.data(), static_cast<int64_t>(logits.size()), *req, kMaxRowSampleTop, &row, top.data());
    std::optional<SampleResult> r = s.sample_row(row, {top.data(), static_cast<size_t>(row.n_top)});
    v.summary = r.has_value();
    v.result = r ? *r : s.sample_adjusted(logits.data());
    return v;
}

struct RowsCase {
    std::string name;
    SamplingParams p;
    float scale;           // logits spread: 3 peaked (the usual), 0.05 nearly flat
    bool summary_decides;  // every token from the summary, or every one from the whole row
};

std::vector<RowsCase> rows_cases() {
    std::vector<RowsCase> c;
    auto add = [&](std::string name, float scale, bool decides, auto&& set) {
        SamplingParams p;
        p.seed = 1234;
        set(p);
        c.push_back({std::move(name), p, scale, decides});
    };
    add("greedy with logprobs", 3.0f, true, [](SamplingParams& p) {
        p.temperature = 0;
        p.logprobs = true;
        p.top_logprobs = 5;
    });
    add("temperature", 3.0f, true, [](SamplingParams& p) { p.temperature = 0.8f; });
    add("temperature, flat", 0.05f, true, [](SamplingParams& p) {
        p.temperature = 1.0f;
        p.logprobs = true;
    });
    add("top-k", 3.0f, true, [](SamplingParams& p) {
        p.temperature = 0.9f;
        p.top_k = 40;
    });
    add("top-k, flat", 0.05f, true, [](SamplingParams& p) {
        p.temperature = 1.1f;
        p.top_k = 256;
    });
    add("top-k top-p min-p", 3.0f, true, [](SamplingParams& p) {
        p.top_k = 20;
        p.top_p = 0.8f;
        p.min_p = 0.05f;
    });
    add("top-p", 3.0f, true, [](SamplingParams& p) {
        p.temperature = 0.7f;
        p.top_p = 0.9f;
        p.top_logprobs = 3;
    });
    add("top-p, flat", 0.05f, true, [](SamplingParams& p) { p.top_p = 0.9f; });
    add("min-p", 3.0f, true, [](SamplingParams& p) { p.min_p = 0.1f; });
    add("min-p, flat", 0.05f, true, [](SamplingParams& p) { p.min_p = 0.01f; });
    add("penalties and bias", 3.0f, true, [](SamplingParams& p) {
        p.temperature = 0.6f;
        p.top_p = 0.95f;
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.5f;
        p.frequency_penalty = 0.4f;
        p.logit_bias = {{7, 30.0f}, {9, -100.0f}, {7, 2.0f}};
        p.logprobs = true;
        p.top_logprobs = 20;
    });
    add("top-k above the summary", 3.0f, false, [](SamplingParams& p) { p.top_k = 1000; });
    return c;
}

TEST(SamplerRows, SummariesPickTheTokensOfTheWholeRow) {
    for (const RowsCase& c : rows_cases()) {
        Sampler whole(c.p, kRowsVocab), rows(c.p, kRowsVocab);
        for (int32_t t : {3, 7, 7, 100}) {  // a prompt for the repetition penalty
            whole.accept(t, false);
            rows.accept(t, false);
        }
        int from_summary = 0;
        const int steps = 16;
        for (int step = 0; step < steps; ++step) {
            auto logits = test::random_floats(kRowsVocab, static_cast<uint32_t>(100 + step), c.scale);
            if (step % 3 == 0) logits[7] += 5.0f * c.scale;  // penalised tokens near the top sometimes
            std::vector<float> copy = logits;
            const SampleResult want = whole.sample(copy.data());
            const RowsPick got = sample_via_rows(rows, logits);
            from_summary += got.summary ? 1 : 0;
            ASSERT_EQ(got.result.token, want.token) << c.name << ", step " << step;
            EXPECT_NEAR(got.result.logprob, want.logprob, 1e-4) << c.name << ", step " << step;
            ASSERT_EQ(got.result.top.size(), want.top.size()) << c.name;
            for (size_t j = 0; j < want.top.size(); ++j) {
                EXPECT_EQ(got.result.top[j].token, want.top[j].token) << c.name << ", step " << step << ", alternative " << j;
                EXPECT_NEAR(got.result.top[j].logprob, want.top[j].logprob, 1e-4) << c.name;
            }
            whole.accept(want.token, true);
            rows.accept(got.result.token, true);
        }
        EXPECT_EQ(from_summary, c.summary_decides ? steps : 0) << c.name;
    }
}

TEST(SamplerRows, NothingToSampleIsAnErrorAndRequestsCarryTheEdits) {
    SamplingParams p;
    p.temperature = 0.5f;
    p.repetition_penalty = 1.2f;
    p.logit_bias = {{5, 1.0f}, {5, 2.0f}};
    Sampler s(p, 100);
    s.accept(5, false);
    s.accept(8, true);
    s.accept(8, true);
    const auto req = s.row_request();
    ASSERT_TRUE(req.has_value());
    ASSERT_EQ(req->edits.size(), 2u);
    EXPECT_EQ(req->edits[0].id, 5);
    EXPECT_EQ(req->edits[0].bias, 3.0f);  // repeated ids add up
    EXPECT_EQ(req->edits[0].repetition, 1.2f);
    EXPECT_EQ(req->edits[0].subtract, 0.0f);  // a prompt token: no presence/frequency
    EXPECT_EQ(req->edits[1].id, 8);
    EXPECT_FLOAT_EQ(req->inv_temperature, 2.0f);
    EXPECT_GE(req->u, 0.0);  // no top-k: the backend draws

    backend::RowSample none;
    none.max = -std::numeric_limits<float>::infinity();
    EXPECT_THROW(s.sample_row(none, {}), Error);
}

}  // namespace
}  // namespace strata::runtime
