// The scheduler on real (tiny, random-weight) models of each family: batch invariance, seeded
// sampling under load, prefix-cache correctness (also for hybrid models, through recurrent-state
// snapshots), preemption, cancellation, queueing beyond capacity, stop strings, finish reasons;
// prompt-only requests (Request::pooling: what embeddings and reranking run on): the last prompt
// token's final-normed hidden row and the logits of the asked ids equal a plain forward of the
// whole prompt, whether prefilled in chunks, batched with generating requests or taken from the
// prefix cache; nothing is generated; bad ids are refused in the client's terms.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/json_constraint.h"
#include "runtime/runtime_test_util.h"
#include "util/error.h"

namespace strata::runtime {
namespace {

using test::greedy_request;
using test::make_prompt;
using test::RecordingSink;
using test::run_until_idle;
using test::small_options;
using test::tiny_model;

// Runs each request alone in a fresh scheduler.
std::map<std::string, test::Outcome> run_alone(const std::string& arch, const std::vector<Request>& reqs, SchedulerOptions o) {
    auto& m = tiny_model(arch);
    std::map<std::string, test::Outcome> out;
    for (const Request& r : reqs) {
        Scheduler s(*m.model, *m.tok, o);
        RecordingSink sink;
        s.submit(r, &sink);
        run_until_idle(s);
        out[r.id] = sink.out[r.id];
    }
    return out;
}

std::vector<Request> mixed_requests(int n, bool greedy) {
    std::vector<Request> reqs;
    for (int i = 0; i < n; ++i) {
        // Prompt lengths from 1 to ~300 tokens (several prefill chunks), different budgets.
        const size_t len = 1 + static_cast<size_t>((i * 37) % 300);
        Request r = greedy_request("r" + std::to_string(i), make_prompt(len, static_cast<uint32_t>(i)), 12 + i % 7);
        if (!greedy) {
            r.sampling.temperature = 0.9f;
            r.sampling.top_p = 0.95f;
            r.sampling.seed = 1000 + static_cast<uint64_t>(i);
        }
        reqs.push_back(r);
    }
    return reqs;
}

class PerArch : public testing::TestWithParam<std::string> {};

TEST_P(PerArch, BatchInvariantGreedyAndSeededSampling) {
    for (bool greedy : {true, false}) {
        const auto reqs = mixed_requests(16, greedy);
        // One request alone, then the same among 15 others, all submitted at once.
        const auto alone = run_alone(GetParam(), {reqs[5]}, small_options());
        auto& m = tiny_model(GetParam());
        Scheduler s(*m.model, *m.tok, small_options());
        RecordingSink sink;
        for (const auto& r : reqs) s.submit(r, &sink);
        run_until_idle(s);
        const auto& a = alone.at("r5");
        const auto& b = sink.out.at("r5");
        ASSERT_TRUE(a.done && b.done);
        EXPECT_EQ(a.reason, FinishReason::Length);
        EXPECT_EQ(a.tokens, b.tokens) << (greedy ? "greedy" : "seeded sampling");
        EXPECT_EQ(a.text, b.text);
        EXPECT_EQ(static_cast<int>(b.tokens.size()), reqs[5].sampling.max_tokens);
        for (const auto& [id, o] : sink.out) {
            EXPECT_TRUE(o.done) << id;
            EXPECT_EQ(o.events_after_done, 0) << id;
        }
        EXPECT_EQ(s.stats().kv_blocks_in_use, 0);
    }
}

// Greedy requests without logprobs, bias or penalties take their tokens from the backend's
// argmax (only ids leave the backend); with logprobs the sampler reads the whole logits row.
// Both must give the same tokens, alone and mixed in one batch.
TEST_P(PerArch, GreedyTokensPickedByTheBackendEqualTheSamplers) {
    auto reqs = mixed_requests(6, true);
    std::vector<Request> with_logprobs = reqs;
    for (Request& r : with_logprobs) {
        r.id += "-lp";
        r.sampling.logprobs = true;
    }
    auto& m = tiny_model(GetParam());
    std::map<std::string, test::Outcome> plain, lp;
    int64_t argmax_steps = 0;
    for (bool logprobs : {false, true}) {
        Scheduler s(*m.model, *m.tok, small_options());
        RecordingSink sink;
        for (const auto& r : logprobs ? with_logprobs : reqs) s.submit(r, &sink);
        run_until_idle(s);
        (logprobs ? lp : plain) = sink.out;
        if (!logprobs) argmax_steps = s.stats().argmax_steps;
        else EXPECT_EQ(s.stats().argmax_steps, 0);
    }
    EXPECT_GT(argmax_steps, 0);
    // Mixed: half the requests want logprobs, so no step is argmax-only.
    Scheduler s(*m.model, *m.tok, small_options());
    RecordingSink sink;
    for (size_t i = 0; i < reqs.size(); ++i) s.submit(i % 2 == 0 ? reqs[i] : with_logprobs[i], &sink);
    run_until_idle(s);
    for (size_t i = 0; i < reqs.size(); ++i) {
        const auto& a = plain.at(reqs[i].id);
        const auto& b = lp.at(with_logprobs[i].id);
        ASSERT_TRUE(a.done && b.done);
        EXPECT_EQ(a.tokens, b.tokens) << reqs[i].id;
        EXPECT_EQ(a.tokens, sink.out.at(i % 2 == 0 ? reqs[i].id : with_logprobs[i].id).tokens) << reqs[i].id << " mixed";
    }
}

// Sampling from the backend's row summaries (what the engine does on a GPU) gives the tokens
// and logprobs of sampling whole rows on the host, for every kind of request in one batch; a
// constrained request in the batch still gets its whole row.
TEST_P(PerArch, SamplingFromRowSummariesEqualsSamplingWholeRows) {
    auto reqs = mixed_requests(8, false);
    reqs[1].sampling.top_p = 1.0f;  // plain temperature: the backend draws
    reqs[2].sampling.top_k = 20;
    reqs[3].sampling.top_p = 1.0f;
    reqs[3].sampling.min_p = 0.05f;
    reqs[4].sampling.repetition_penalty = 1.2f;
    reqs[4].sampling.frequency_penalty = 0.5f;
    reqs[4].sampling.logit_bias = {{40, 3.0f}};
    reqs[4].sampling.logprobs = true;
    reqs[4].sampling.top_logprobs = 4;
    reqs[5].sampling.temperature = 0;
    reqs[5].sampling.logprobs = true;
    reqs[6].sampling.temperature = 0;  // argmax-only, in a batch that samples
    reqs[7].grammar = JsonGrammar::any_json_object();
    reqs[7].sampling.ignore_eos = false;
    auto& m = tiny_model(GetParam());
    std::map<std::string, test::Outcome> out[2];
    SchedulerStats stats[2];
    const SchedulerOptions::RowSampling modes[2] = {SchedulerOptions::RowSampling::Never, SchedulerOptions::RowSampling::Always};
    for (int i = 0; i < 2; ++i) {
        SchedulerOptions o = small_options();
        o.row_sampling = modes[i];
        Scheduler s(*m.model, *m.tok, o);
        RecordingSink sink;
        for (const auto& r : reqs) s.submit(r, &sink);
        run_until_idle(s);
        out[i] = sink.out;
        stats[i] = s.stats();
    }
    for (const Request& r : reqs) {
        const auto& a = out[0].at(r.id);
        const auto& b = out[1].at(r.id);
        ASSERT_TRUE(a.done && b.done) << r.id;
        EXPECT_EQ(a.reason, b.reason) << r.id;
        EXPECT_EQ(a.tokens, b.tokens) << r.id;
        ASSERT_EQ(a.details.size(), b.details.size()) << r.id;
        for (size_t j = 0; j < a.details.size(); ++j) {
            EXPECT_NEAR(a.details[j].logprob, b.details[j].logprob, 1e-4) << r.id << " token " << j;
            EXPECT_EQ(a.details[j].top.size(), b.details[j].top.size()) << r.id;
        }
    }
    EXPECT_EQ(stats[0].row_sampled_tokens, 0);
    EXPECT_GT(stats[1].row_sampled_tokens, 0);
    EXPECT_GT(stats[1].whole_rows, 0);  // the constrained request's rows
}

TEST_P(PerArch, PrefixCacheHitGivesTheSameOutputAsRecomputing) {
    auto& m = tiny_model(GetParam());
    const auto shared = make_prompt(300, 99);
    auto with_suffix = [&](uint32_t seed, size_t n) {
        auto p = shared;
        const auto s = make_prompt(n, seed);
        p.insert(p.end(), s.begin(), s.end());
        return p;
    };
    const Request first = greedy_request("first", with_suffix(1, 20), 10);
    const Request second = greedy_request("second", with_suffix(2, 45), 16);

    SchedulerOptions no_cache = small_options();
    no_cache.prefix_cache = false;
    const auto expected = run_alone(GetParam(), {second}, no_cache);

    Scheduler s(*m.model, *m.tok, small_options());
    RecordingSink sink;
    s.submit(first, &sink);
    run_until_idle(s);
    s.submit(second, &sink);
    run_until_idle(s);
    const auto& got = sink.out.at("second");
    EXPECT_EQ(got.tokens, expected.at("second").tokens);
    // The shared 300 tokens are reused: whole blocks for attention-only models; for hybrid
    // models up to the last snapshot boundary (a multiple of 64) inside the shared part.
    const int64_t bs = 16;
    const int64_t want = s.stats().snapshot_capacity > 0 ? 256 : 300 / bs * bs;
    EXPECT_EQ(got.usage.cached_tokens, want);
    EXPECT_EQ(expected.at("second").usage.cached_tokens, 0);
    EXPECT_GE(s.stats().prefix_hits, 1);
    EXPECT_GE(s.stats().reused_tokens, want);

    // The same prompt again: everything but the last token's block comes from the cache, and
    // the output is unchanged.
    Request again = second;
    again.id = "again";
    s.submit(again, &sink);
    run_until_idle(s);
    EXPECT_EQ(sink.out.at("again").tokens, expected.at("second").tokens);
    EXPECT_GT(sink.out.at("again").usage.cached_tokens, 300);
}

TEST_P(PerArch, MultiTurnConversationReusesTheEarlierTurn) {
    auto& m = tiny_model(GetParam());
    Scheduler s(*m.model, *m.tok, small_options());
    RecordingSink sink;
    auto prompt = make_prompt(200, 5);
    s.submit(greedy_request("t1", prompt, 24), &sink);
    run_until_idle(s);
    // Turn 2 = turn 1's prompt + its answer + a new message.
    auto p2 = prompt;
    p2.insert(p2.end(), sink.out["t1"].tokens.begin(), sink.out["t1"].tokens.end());
    const auto more = make_prompt(30, 6);
    p2.insert(p2.end(), more.begin(), more.end());
    s.submit(greedy_request("t2", p2, 8), &sink);
    run_until_idle(s);
    EXPECT_GE(sink.out["t2"].usage.cached_tokens, 192);
    SchedulerOptions no_cache = small_options();
    no_cache.prefix_cache = false;
    EXPECT_EQ(run_alone(GetParam(), {greedy_request("t2", p2, 8)}, no_cache).at("t2").tokens, sink.out["t2"].tokens);
}

TEST_P(PerArch, PreemptedSequencesResumeAndFinishCorrectly) {
    // KV for ~10 blocks of 16 positions: four sequences of 60 + 40 tokens cannot all fit.
    auto& m = tiny_model(GetParam());
    SchedulerOptions o = small_options();
    const auto& c = m.model->config();
    int64_t n_attn = 0;
    for (auto k : c.layers) n_attn += k == model::LayerKind::Attention ? 1 : 0;
    o.kv.kv_bytes = 10 * 16 * n_attn * c.n_head_kv * (c.head_dim_k + c.head_dim_v) * 4;
    o.max_running = 4;
    o.max_batched_tokens = 4 + 64;
    std::vector<Request> reqs;
    for (int i = 0; i < 4; ++i) reqs.push_back(greedy_request("p" + std::to_string(i), make_prompt(60, 40 + i), 40));
    const auto alone = run_alone(GetParam(), reqs, o);
    Scheduler s(*m.model, *m.tok, o);
    RecordingSink sink;
    for (const auto& r : reqs) s.submit(r, &sink);
    run_until_idle(s);
    EXPECT_GT(s.stats().preemptions, 0);
    for (const auto& r : reqs) {
        const auto& got = sink.out.at(r.id);
        EXPECT_EQ(got.reason, FinishReason::Length) << r.id;
        EXPECT_EQ(got.tokens, alone.at(r.id).tokens) << r.id;
        EXPECT_EQ(got.text, alone.at(r.id).text) << r.id;
    }
    EXPECT_EQ(s.stats().kv_blocks_in_use, 0);
}

TEST_P(PerArch, CancellationFreesMemoryAtOnceAndSparesOthers) {
    auto& m = tiny_model(GetParam());
    Scheduler s(*m.model, *m.tok, small_options());
    RecordingSink sink;
    s.submit(greedy_request("keep", make_prompt(40, 1), 20), &sink);
    s.submit(greedy_request("drop", make_prompt(200, 2), 1000), &sink);
    for (int i = 0; i < 3; ++i) s.step();
    const int32_t before = s.stats().kv_blocks_in_use;
    EXPECT_TRUE(s.cancel("drop"));
    EXPECT_FALSE(s.cancel("drop"));
    EXPECT_LT(s.stats().kv_blocks_in_use, before);
    EXPECT_EQ(sink.out["drop"].reason, FinishReason::Cancelled);
    EXPECT_TRUE(sink.out["drop"].done);
    run_until_idle(s);
    EXPECT_EQ(sink.out["drop"].events_after_done, 0);
    EXPECT_EQ(sink.out["keep"].tokens,
              run_alone(GetParam(), {greedy_request("keep", make_prompt(40, 1), 20)}, small_options()).at("keep").tokens);
    EXPECT_EQ(s.stats().kv_blocks_in_use, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, PerArch, testing::Values("qwen3moe", "qwen3next", "qwen35moe"));

TEST(Scheduler, QueuesWorkBeyondCapacityAndFinishesAll) {
    auto& m = tiny_model("qwen3moe");
    SchedulerOptions o = small_options();
    o.max_running = 2;
    o.max_batched_tokens = 66;
    Scheduler s(*m.model, *m.tok, o);
    RecordingSink sink;
    for (int i = 0; i < 9; ++i) s.submit(greedy_request("q" + std::to_string(i), make_prompt(10 + i, i), 5), &sink);
    EXPECT_EQ(s.stats().waiting, 9);
    s.step();
    EXPECT_EQ(s.stats().running, 2);
    run_until_idle(s);
    for (int i = 0; i < 9; ++i) EXPECT_EQ(sink.out["q" + std::to_string(i)].tokens.size(), 5u);
}

TEST(Scheduler, LongPromptsDoNotStallRunningDecodes) {
    // A decoding sequence gets a token in every step while a long prompt is prefilled in chunks.
    auto& m = tiny_model("qwen3moe");
    Scheduler s(*m.model, *m.tok, small_options());
    RecordingSink sink;
    s.submit(greedy_request("short", make_prompt(5, 1), 30), &sink);
    s.step();  // prefill of the short prompt: first token
    ASSERT_EQ(sink.out["short"].tokens.size(), 1u);
    s.submit(greedy_request("long", make_prompt(900, 2), 4), &sink);
    for (int i = 0; i < 8; ++i) {
        s.step();
        EXPECT_EQ(sink.out["short"].tokens.size(), static_cast<size_t>(i + 2)) << "step " << i;
    }
    run_until_idle(s);
}

TEST(Scheduler, StopStringSplitAcrossTokensEndsTheOutputBeforeIt) {
    auto& m = tiny_model("qwen3moe");
    const Request base = greedy_request("base", make_prompt(20, 3), 40);
    const auto full = run_alone("qwen3moe", {base}, small_options()).at("base");
    ASSERT_GE(full.text.size(), 20u);
    // A stop string made of several generated tokens (bytes here) from the middle of the text:
    // three characters from the sixth on, cut at UTF-8 character boundaries.
    auto char_start = [&](size_t i) {
        while (i < full.text.size() && (static_cast<unsigned char>(full.text[i]) & 0xC0) == 0x80) ++i;
        return i;
    };
    size_t begin = 0;
    for (int c = 0; c < 5; ++c) begin = char_start(begin + 1);
    size_t end = begin;
    for (int c = 0; c < 3; ++c) end = char_start(end + 1);
    ASSERT_LT(end, full.text.size());
    const std::string stop = full.text.substr(begin, end - begin);
    ASSERT_GE(stop.size(), 3u);
    Request r = base;
    r.id = "stopped";
    r.sampling.stop = {"\x01never", stop};
    Scheduler s(*m.model, *m.tok, small_options());
    RecordingSink sink;
    s.submit(r, &sink);
    run_until_idle(s);
    const auto& got = sink.out.at("stopped");
    EXPECT_EQ(got.reason, FinishReason::Stop);
    EXPECT_EQ(got.detail, stop);
    EXPECT_EQ(got.text, full.text.substr(0, full.text.find(stop)));
    EXPECT_EQ(got.text.find(stop), std::string::npos);
}

TEST(Scheduler, FinishReasonsAndUsage) {
    auto& m = tiny_model("qwen3moe");
    Scheduler s(*m.model, *m.tok, small_options());
    RecordingSink sink;
    // Whatever the model says first becomes a stop token: finishes with "stop" after one token.
    const auto first = run_alone("qwen3moe", {greedy_request("x", make_prompt(8, 4), 3)}, small_options()).at("x");
    Request r = greedy_request("stop-id", make_prompt(8, 4), 50);
    r.sampling.stop_token_ids = {first.tokens[0]};
    s.submit(r, &sink);
    s.submit(greedy_request("len", make_prompt(8, 4), 7), &sink);
    run_until_idle(s);
    EXPECT_EQ(sink.out["stop-id"].reason, FinishReason::Stop);
    EXPECT_EQ(sink.out["stop-id"].usage.completion_tokens, 1);
    EXPECT_TRUE(sink.out["stop-id"].tokens.empty());  // the stop token itself is not output
    EXPECT_EQ(sink.out["len"].reason, FinishReason::Length);
    EXPECT_EQ(sink.out["len"].usage.prompt_tokens, 8);
    EXPECT_EQ(sink.out["len"].usage.completion_tokens, 7);
}

TEST(Scheduler, ContextLimitEndsWithLength) {
    auto& m = tiny_model("qwen3moe");
    SchedulerOptions o = small_options();
    o.max_context = 40;
    Scheduler s(*m.model, *m.tok, o);
    RecordingSink sink;
    s.submit(greedy_request("c", make_prompt(30, 1), -1), &sink);
    run_until_idle(s);
    EXPECT_EQ(sink.out["c"].reason, FinishReason::Length);
    EXPECT_EQ(sink.out["c"].usage.completion_tokens, 10);
    EXPECT_THROW(s.submit(greedy_request("too-long", make_prompt(40, 1), 1), &sink), Error);
}

TEST(Scheduler, RejectsBadRequestsInTheClientsTerms) {
    auto& m = tiny_model("qwen3moe");
    Scheduler s(*m.model, *m.tok, small_options());
    RecordingSink sink;
    auto expect_error = [&](Request r, const std::string& words) {
        try {
            s.submit(std::move(r), &sink);
            ADD_FAILURE() << "accepted; expected an error mentioning " << words;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        }
    };
    expect_error(greedy_request("a", {}, 1), "prompt");
    expect_error(greedy_request("b", {1, 999999}, 1), "vocabulary");
    Request dup = greedy_request("c", {1, 2}, 1);
    s.submit(dup, &sink);
    expect_error(dup, "already");
    Request bad = greedy_request("d", {1, 2}, 1);
    bad.sampling.top_p = 0;
    expect_error(bad, "top_p");
    run_until_idle(s);
}

TEST(Scheduler, ConstrainedOutputIsValidJson) {
    auto& m = tiny_model("qwen3moe");
    Scheduler s(*m.model, *m.tok, small_options());
    RecordingSink sink;
    const nlohmann::json schema = nlohmann::json::parse(R"({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "n": {"type": "integer"},
                       "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
        "required": ["name", "n", "ok", "tags"]})");
    for (int i = 0; i < 6; ++i) {
        Request r = greedy_request("j" + std::to_string(i), make_prompt(12, static_cast<uint32_t>(i)), 400);
        r.sampling.ignore_eos = false;
        r.sampling.temperature = 1.0f;
        r.sampling.seed = static_cast<uint64_t>(i);
        r.grammar = i % 2 == 0 ? JsonGrammar::from_schema(schema) : JsonGrammar::any_json_object();
        s.submit(r, &sink);
    }
    run_until_idle(s);
    for (int i = 0; i < 6; ++i) {
        const auto& o = sink.out["j" + std::to_string(i)];
        // json_object output may run into max_tokens inside an unbounded string; the schema
        // bounds every string and array, so those must finish.
        if (i % 2 == 1 && o.reason == FinishReason::Length) continue;
        ASSERT_EQ(o.reason, FinishReason::Stop) << o.detail;
        nlohmann::json doc;
        ASSERT_NO_THROW(doc = nlohmann::json::parse(o.text)) << o.text;
        ASSERT_TRUE(doc.is_object()) << o.text;
        if (i % 2 == 0) {
            EXPECT_TRUE(doc["name"].is_string() && doc["n"].is_number_integer() && doc["ok"].is_boolean() &&
                        doc["tags"].is_array())
                << o.text;
            // maxLength counts characters (code points), not bytes.
            size_t chars = 0;
            for (unsigned char ch : doc["name"].get<std::string>()) chars += (ch & 0xC0) != 0x80 ? 1 : 0;
            EXPECT_LE(chars, 12u) << o.text;
        }
    }
}

// ---- prompt-only requests ----------------------------------------------------------------

SchedulerOptions pooled_options() {
    SchedulerOptions o;
    o.max_running = 8;
    o.max_batched_tokens = 96;
    o.prefill_chunk = 64;  // the 150-token prompt is prefilled in three chunks
    o.kv.kv_bytes = 64 << 20;
    o.kv.block_size = 16;
    o.kv.snapshot_bytes = 64 << 20;
    return o;
}

double pooled_rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

class PooledRequest : public testing::TestWithParam<std::string> {};

TEST_P(PooledRequest, HiddenRowAndTokenLogitsEqualAPlainForward) {
    auto& m = tiny_model(GetParam());
    const int64_t n_embd = m.model->config().n_embd, n_vocab = m.model->config().n_vocab;
    const std::vector<int32_t> score = {5, 17, static_cast<int32_t>(n_vocab - 1)};
    const std::vector<std::vector<int32_t>> prompts = {make_prompt(150, 3), make_prompt(23, 4), make_prompt(150, 3)};

    // The reference: each prompt whole in a fresh sequence, its last row's hidden state and logits.
    std::vector<std::vector<float>> ref_hidden, ref_logits;
    for (const auto& p : prompts) {
        auto seq = m.model->new_sequence(256);
        model::SequenceState* sp = seq.get();
        model::Batch b;
        for (size_t i = 0; i < p.size(); ++i) b.add(p[i], static_cast<int32_t>(i), 0, i + 1 == p.size());
        std::vector<float> logits(static_cast<size_t>(n_vocab)), hidden(static_cast<size_t>(n_embd));
        m.model->forward(b, {&sp, 1}, logits.data());
        m.model->copy_hidden_row(0, hidden.data());
        ref_hidden.push_back(hidden);
        std::vector<float> picked;
        for (int32_t t : score) picked.push_back(logits[static_cast<size_t>(t)]);
        ref_logits.push_back(picked);
    }

    Scheduler s(*m.model, *m.tok, pooled_options());
    RecordingSink sink;
    // A generating request in the same steps (its rows are sampled, the pooled ones are not).
    s.submit(greedy_request("gen", make_prompt(40, 9), 12), &sink);
    for (size_t i = 0; i < 2; ++i) {
        Request r;
        r.id = "p" + std::to_string(i);
        r.prompt = prompts[i];
        r.pooling.embed = true;
        r.pooling.score_tokens = score;
        s.submit(std::move(r), &sink);
    }
    run_until_idle(s);
    // The first prompt again: its blocks come from the prefix cache.
    Request again;
    again.id = "p2";
    again.prompt = prompts[2];
    again.pooling.embed = true;
    again.pooling.score_tokens = score;
    s.submit(std::move(again), &sink);
    run_until_idle(s);

    for (size_t i = 0; i < prompts.size(); ++i) {
        const test::Outcome& o = sink.out["p" + std::to_string(i)];
        SCOPED_TRACE("prompt " + std::to_string(i));
        ASSERT_TRUE(o.pooled);
        EXPECT_TRUE(o.done);
        EXPECT_EQ(o.reason, FinishReason::Stop);
        EXPECT_EQ(o.events_after_done, 0);
        EXPECT_TRUE(o.tokens.empty());
        EXPECT_EQ(o.usage.completion_tokens, 0);
        EXPECT_EQ(o.usage.prompt_tokens, static_cast<int64_t>(prompts[i].size()));
        ASSERT_EQ(o.hidden.size(), static_cast<size_t>(n_embd));
        ASSERT_EQ(o.token_logits.size(), score.size());
        EXPECT_LT(pooled_rel_l2(o.hidden, ref_hidden[i]), 2e-3);
        for (size_t k = 0; k < score.size(); ++k)
            EXPECT_NEAR(o.token_logits[k], ref_logits[i][k], 2e-3 * (1.0 + std::abs(ref_logits[i][k])));
    }
    EXPECT_GT(sink.out["p2"].usage.cached_tokens, 0);
    EXPECT_EQ(sink.out["gen"].usage.completion_tokens, 12);
    EXPECT_FALSE(sink.out["gen"].pooled);
}

TEST_P(PooledRequest, BadScoreTokensAreRefused) {
    auto& m = tiny_model(GetParam());
    Scheduler s(*m.model, *m.tok, pooled_options());
    RecordingSink sink;
    Request r;
    r.id = "bad";
    r.prompt = make_prompt(8, 1);
    r.pooling.score_tokens = {static_cast<int32_t>(m.model->config().n_vocab)};
    try {
        s.submit(r, &sink);
        ADD_FAILURE() << "an id past the vocabulary was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("score_tokens"), std::string::npos) << e.what();
    }
    r.pooling.score_tokens.assign(Pooling::kMaxScoreTokens + 1, 1);
    EXPECT_THROW(s.submit(r, &sink), Error);
}

INSTANTIATE_TEST_SUITE_P(Archs, PooledRequest, testing::Values("qwen3moe", "qwen3next", "qwen3"));

}  // namespace
}  // namespace strata::runtime
