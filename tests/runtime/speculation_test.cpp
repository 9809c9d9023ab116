// Speculative decoding by prompt lookup (SchedulerOptions::spec_ngram, runtime/prompt_lookup.h):
// greedy output is the same token for token with and without it — alone, in a batch of greedy
// requests, and mixed with sampled ones (steps with a sampled sequence draft nothing) — over
// prompts that repeat themselves (where drafts come from) and prompts that do not; finish
// reasons, usage, stop strings and max_tokens hold; drafts are verified and some kept; drafts
// that are always wrong, or ids outside the vocabulary, change nothing (and wrong ones back off);
// a hybrid model (whose recurrent state cannot be rolled back yet) drafts nothing.
#include <gtest/gtest.h>

#include "runtime/runtime_test_util.h"

namespace strata::runtime {
namespace {

using test::greedy_request;
using test::make_prompt;
using test::RecordingSink;
using test::run_until_idle;
using test::tiny_model;

SchedulerOptions options(int spec) {
    SchedulerOptions o = test::small_options();
    o.spec_ngram = spec;
    return o;
}

// Prompts of a repeated stretch (quoted text, code edits) and of random bytes, greedy, with
// budgets that end mid-draft; a few with stop strings.
std::vector<Request> requests(int n) {
    std::vector<Request> reqs;
    for (int i = 0; i < n; ++i) {
        std::vector<int32_t> p = make_prompt(8 + static_cast<size_t>(i * 13 % 90), static_cast<uint32_t>(i));
        if (i % 3 != 2) {
            const std::vector<int32_t> again = p;
            for (int r = 0; r < 1 + i % 3; ++r) p.insert(p.end(), again.begin(), again.end());
            p.resize(p.size() - static_cast<size_t>(i % 5));  // stop mid-repeat: the draft continues it
        }
        Request r = greedy_request("g" + std::to_string(i), p, 20 + i % 23);
        if (i % 7 == 3) r.sampling.stop = {"ab"};
        reqs.push_back(r);
    }
    return reqs;
}

std::map<std::string, test::Outcome> run(const std::string& arch, const std::vector<Request>& reqs, int spec, bool together,
                                         SchedulerStats* stats = nullptr) {
    auto& m = tiny_model(arch);
    std::map<std::string, test::Outcome> out;
    SchedulerStats total;
    auto one = [&](const std::vector<Request>& batch) {
        Scheduler s(*m.model, *m.tok, options(spec));
        RecordingSink sink;
        for (const Request& r : batch) s.submit(r, &sink);
        run_until_idle(s);
        for (auto& [id, o] : sink.out) out[id] = o;
        const SchedulerStats st = s.stats();
        total.spec_steps += st.spec_steps;
        total.drafted_tokens += st.drafted_tokens;
        total.accepted_tokens += st.accepted_tokens;
        total.generated_tokens += st.generated_tokens;
        total.steps += st.steps;
        EXPECT_EQ(st.kv_blocks_in_use, 0);
    };
    if (together) one(reqs);
    else
        for (const Request& r : reqs) one({r});
    if (stats) *stats = total;
    return out;
}

void expect_same(const std::map<std::string, test::Outcome>& a, const std::map<std::string, test::Outcome>& b,
                 const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (const auto& [id, x] : a) {
        const auto& y = b.at(id);
        ASSERT_TRUE(x.done && y.done) << id << " " << what;
        EXPECT_EQ(x.tokens, y.tokens) << id << " " << what;
        EXPECT_EQ(x.text, y.text) << id << " " << what;
        EXPECT_EQ(x.reason, y.reason) << id << " " << what;
        EXPECT_EQ(x.usage.completion_tokens, y.usage.completion_tokens) << id << " " << what;
        EXPECT_EQ(y.events_after_done, 0) << id << " " << what;
    }
}

TEST(Speculation, GreedyOutputIsTheSameAloneAndInBatches) {
    const auto reqs = requests(48);
    SchedulerStats base;
    const auto plain = run("qwen3moe", reqs, 0, false, &base);
    for (int spec : {1, 4, 8}) {
        SchedulerStats alone, batched;
        expect_same(plain, run("qwen3moe", reqs, spec, false, &alone), "alone, k " + std::to_string(spec));
        expect_same(plain, run("qwen3moe", reqs, spec, true, &batched), "batched, k " + std::to_string(spec));
        for (const SchedulerStats* st : {&alone, &batched}) {
            EXPECT_GT(st->drafted_tokens, 0) << spec;
            EXPECT_GT(st->accepted_tokens, 0) << spec;
            EXPECT_LE(st->accepted_tokens, st->drafted_tokens);
        }
        // Each kept draft is a token that took no step of its own.
        EXPECT_EQ(alone.steps, base.steps - alone.accepted_tokens) << spec;
    }
}

TEST(Speculation, SampledRequestsInTheBatchKeepTheirOutputsAndTheGreedyOnesTheirs) {
    auto reqs = requests(12);
    for (size_t i = 0; i < reqs.size(); i += 3) {
        reqs[i].sampling.temperature = 0.8f;
        reqs[i].sampling.seed = 77 + i;
    }
    SchedulerStats st;
    expect_same(run("qwen3moe", reqs, 0, true), run("qwen3moe", reqs, 4, true, &st), "mixed greedy and sampled");
    // On the CPU the rows come to the host: the greedy ones draft beside the sampled ones.
    EXPECT_GT(st.accepted_tokens, 0);
}

TEST(Speculation, RowsSampledWhereTheLogitsAreGiveTheSameOutputs) {
    // As on a GPU: a step with a sampled sequence samples its rows on the backend, so its greedy
    // companions do not draft; steps of greedy sequences alone still do.
    auto reqs = requests(12);
    for (size_t i = 0; i < reqs.size(); i += 3) {
        reqs[i].sampling.temperature = 0.8f;
        reqs[i].sampling.seed = 77 + i;
    }
    auto& m = tiny_model("qwen3moe");
    std::map<std::string, test::Outcome> out[2];
    SchedulerStats st;
    for (int spec : {0, 4}) {
        SchedulerOptions o = options(spec);
        o.row_sampling = SchedulerOptions::RowSampling::Always;
        Scheduler s(*m.model, *m.tok, o);
        RecordingSink sink;
        for (const Request& r : reqs) s.submit(r, &sink);
        run_until_idle(s);
        out[spec > 0] = std::map<std::string, test::Outcome>(sink.out.begin(), sink.out.end());
        st = s.stats();
    }
    expect_same(out[0], out[1], "rows sampled on the backend");
    EXPECT_GT(st.drafted_tokens, 0);  // once the sampled requests are done
}

TEST(Speculation, WrongAndInvalidDraftsChangeNothingAndBackOff) {
    const auto reqs = requests(8);
    const auto plain = run("qwen3moe", reqs, 0, true);
    auto& m = tiny_model("qwen3moe");
    for (bool invalid : {false, true}) {
        SchedulerOptions o = options(4);
        int calls = 0;
        o.drafter = [&](const std::string&, std::span<const int32_t> tokens, int k) {
            ++calls;
            // Always wrong: the byte after the last one; or ids the model has no row for.
            std::vector<int32_t> d(static_cast<size_t>(k), invalid ? -5 : (tokens.back() + 1) % 256);
            if (invalid) d.back() = static_cast<int32_t>(m.model->config().n_vocab) + 3;
            return d;
        };
        Scheduler s(*m.model, *m.tok, o);
        RecordingSink sink;
        for (const Request& r : reqs) s.submit(r, &sink);
        run_until_idle(s);
        std::map<std::string, test::Outcome> out(sink.out.begin(), sink.out.end());
        expect_same(plain, out, invalid ? "invalid drafts" : "wrong drafts");
        const SchedulerStats st = s.stats();
        EXPECT_GT(calls, 0);
        if (invalid) EXPECT_EQ(st.drafted_tokens, 0);
        // Wrong drafts shrink to one token, then pause: far fewer than k a step.
        else EXPECT_LT(st.drafted_tokens, st.generated_tokens);
        EXPECT_EQ(st.accepted_tokens, 0);
    }
}

TEST(Speculation, ARequestThatSaysNoIsNeverDraftedForAndDoesNotStopOthers) {
    auto reqs = requests(6);
    for (Request& r : reqs) r.sampling.speculative = false;
    SchedulerStats none, some;
    const auto plain = run("qwen3moe", reqs, 0, true);
    expect_same(plain, run("qwen3moe", reqs, 4, true, &none), "all say no");
    EXPECT_EQ(none.drafted_tokens, 0);
    for (size_t i = 0; i < reqs.size(); i += 2) reqs[i].sampling.speculative = true;
    expect_same(plain, run("qwen3moe", reqs, 4, true, &some), "half say no");
    EXPECT_GT(some.drafted_tokens, 0);
}

TEST(Speculation, AHybridModelDraftsNothingAndKeepsItsOutput) {
    const auto reqs = requests(6);
    SchedulerStats st;
    expect_same(run("qwen35moe", reqs, 0, true), run("qwen35moe", reqs, 4, true, &st), "qwen35moe");
    EXPECT_EQ(st.drafted_tokens, 0);
}

}  // namespace
}  // namespace strata::runtime
