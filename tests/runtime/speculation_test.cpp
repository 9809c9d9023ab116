// Speculative decoding by prompt lookup (SchedulerOptions::spec_ngram, runtime/prompt_lookup.h):
// greedy output is the same token for token with and without it — alone, in a batch of greedy
// requests, and mixed with sampled ones — over
// prompts that repeat themselves (where drafts come from) and prompts that do not; finish
// reasons, usage, stop strings and max_tokens hold; drafts are verified and some kept; drafts
// that are always wrong, or ids outside the vocabulary, change nothing (and wrong ones back off);
// a hybrid model (whose recurrent state cannot be rolled back yet) drafts nothing. Sampled
// requests draft too where their rows come to the host: with a seed their tokens are the same
// with and without drafts (temperature, top-k/p, min-p, penalties, logprobs), and with drafts
// right or wrong at random a chi-squared test finds the tokens' distribution unchanged.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <map>

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

// Sampled requests of every kind, each with a seed; drafts from prompt lookup and, for every
// other request, from a replay of its own plain output (so many are kept) with every fifth
// drafted token wrong.
TEST(Speculation, SampledOutputsAreTheSameForASeed) {
    auto reqs = requests(24);
    for (size_t i = 0; i < reqs.size(); ++i) {
        SamplingParams& p = reqs[i].sampling;
        p.temperature = 0.6f + 0.1f * static_cast<float>(i % 5);
        p.seed = 500 + i;
        if (i % 4 == 1) p.top_k = 20;
        if (i % 4 == 2) p.top_p = 0.9f;
        if (i % 4 == 3) p.min_p = 0.05f;
        if (i % 6 == 4) p.repetition_penalty = 1.2f, p.presence_penalty = 0.3f, p.frequency_penalty = 0.2f;
        if (i % 5 == 0) p.logprobs = true, p.top_logprobs = 3;
    }
    const auto plain = run("qwen3moe", reqs, 0, true);
    SchedulerStats lookup;
    expect_same(plain, run("qwen3moe", reqs, 4, true, &lookup), "sampled, prompt lookup");
    EXPECT_GT(lookup.drafted_tokens, 0);
    auto& m = tiny_model("qwen3moe");
    SchedulerOptions o = options(4);
    std::map<size_t, std::string> id_of_prompt;
    o.drafter = [&](const std::string& id, std::span<const int32_t> tokens, int k) {
        std::vector<int32_t> d;
        const auto it = plain.find(id);
        const size_t prompt = reqs[static_cast<size_t>(std::stoi(id.substr(1)))].prompt.size();
        if (it == plain.end() || std::stoi(id.substr(1)) % 2 == 1) return d;
        const std::vector<int32_t>& out = it->second.tokens;
        for (size_t j = tokens.size() - prompt; j < out.size() && static_cast<int>(d.size()) < k; ++j)
            d.push_back((j % 5 == 4) ? (out[j] + 1) % 256 : out[j]);
        return d;
    };
    Scheduler sch(*m.model, *m.tok, o);
    RecordingSink sink;
    for (const Request& r : reqs) sch.submit(r, &sink);
    run_until_idle(sch);
    expect_same(plain, std::map<std::string, test::Outcome>(sink.out.begin(), sink.out.end()), "sampled, replayed drafts");
    for (const auto& [id, x] : plain) {
        const auto& y = sink.out.at(id);
        ASSERT_EQ(x.details.size(), y.details.size()) << id;
        for (size_t j = 0; j < x.details.size(); ++j) {
            EXPECT_EQ(x.details[j].logprob, y.details[j].logprob) << id << " token " << j;
            EXPECT_EQ(x.details[j].top.size(), y.details[j].top.size()) << id << " token " << j;
        }
    }
    const SchedulerStats st = sch.stats();
    EXPECT_GT(st.accepted_tokens, st.drafted_tokens / 3);
    EXPECT_LT(st.accepted_tokens, st.drafted_tokens);  // the wrong fifth were drawn against
}

// The distribution, apart from seeds: one prompt sampled at temperature 0.35 under 1000 seeds
// without drafts and 1000 other seeds with a drafter that guesses the plain runs' most common
// continuation (right about as often as that continuation is drawn); the tokens at positions
// 1-3 (each after a draft was kept or refused) pooled, and a chi-squared test of homogeneity at
// p = 0.001 over the tokens drawn at least 10 times (the rest in one bin). Fixed seeds: the
// outcome is the same every run.
TEST(Speculation, SampledTokensKeepTheirDistribution) {
    auto& m = tiny_model("qwen3moe");
    const std::vector<int32_t> prompt = make_prompt(24, 9);
    constexpr int kRuns = 1000, kLen = 4;
    auto sample_all = [&](uint64_t seed0, const std::function<std::vector<int32_t>(std::span<const int32_t>, int)>& drafter,
                          SchedulerStats* st) {
        SchedulerOptions o = options(drafter ? 3 : 0);
        if (drafter) o.drafter = [&](const std::string&, std::span<const int32_t> tokens, int k) { return drafter(tokens, k); };
        Scheduler sch(*m.model, *m.tok, o);
        RecordingSink sink;
        for (int i = 0; i < kRuns; ++i) {
            Request r = greedy_request("s" + std::to_string(i), prompt, kLen);
            r.sampling.temperature = 0.35f;
            r.sampling.seed = seed0 + static_cast<uint64_t>(i);
            sch.submit(r, &sink);
        }
        run_until_idle(sch);
        if (st) *st = sch.stats();
        std::vector<std::vector<int32_t>> out;
        for (auto& [id, x] : sink.out) {
            EXPECT_EQ(x.tokens.size(), static_cast<size_t>(kLen)) << id;
            out.push_back(x.tokens);
        }
        return out;
    };
    const auto plain = sample_all(1, nullptr, nullptr);
    // The most common token at each position of the plain runs: the drafter's guess.
    std::vector<int32_t> guess(kLen);
    for (int j = 0; j < kLen; ++j) {
        std::map<int32_t, int> c;
        for (const auto& t : plain) ++c[t[static_cast<size_t>(j)]];
        guess[static_cast<size_t>(j)] =
            std::max_element(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
    }
    SchedulerStats st;
    const auto spec = sample_all(
        100001,
        [&](std::span<const int32_t> tokens, int k) {
            std::vector<int32_t> d;
            for (size_t j = tokens.size() - prompt.size(); j < guess.size() && static_cast<int>(d.size()) < k; ++j)
                d.push_back(guess[j]);
            return d;
        },
        &st);
    EXPECT_GT(st.accepted_tokens, 50);
    EXPECT_LT(st.accepted_tokens, st.drafted_tokens);
    std::map<int32_t, std::array<double, 2>> count;
    for (int arm = 0; arm < 2; ++arm)
        for (const auto& t : arm == 0 ? plain : spec)
            for (int j = 1; j < kLen; ++j) count[t[static_cast<size_t>(j)]][static_cast<size_t>(arm)] += 1;
    std::vector<std::array<double, 2>> bins;
    std::array<double, 2> rest{0, 0};
    for (const auto& [tok, c] : count) {
        if (c[0] + c[1] >= 10) bins.push_back(c);
        else rest[0] += c[0], rest[1] += c[1];
    }
    if (rest[0] + rest[1] > 0) bins.push_back(rest);
    ASSERT_GE(bins.size(), 4u) << "too few distinct tokens for the test to mean anything";
    const double n0 = kRuns * (kLen - 1), n1 = n0;
    double chi2 = 0;
    for (const auto& c : bins) {
        const double total = c[0] + c[1];
        const double e0 = total * n0 / (n0 + n1), e1 = total * n1 / (n0 + n1);
        chi2 += (c[0] - e0) * (c[0] - e0) / e0 + (c[1] - e1) * (c[1] - e1) / e1;
    }
    // The chi-squared quantile at 1 - 0.001 by Wilson-Hilferty (z = 3.0902).
    const double df = static_cast<double>(bins.size() - 1);
    const double h = 2.0 / (9.0 * df);
    const double critical = df * std::pow(1.0 - h + 3.0902 * std::sqrt(h), 3.0);
    std::printf("chi-squared %.2f over %zu bins (critical %.2f at p = 0.001); drafted %lld, kept %lld\n", chi2, bins.size(),
                critical, static_cast<long long>(st.drafted_tokens), static_cast<long long>(st.accepted_tokens));
    EXPECT_LT(chi2, critical);
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
