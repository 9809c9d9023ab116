// The engine runtime under load, through the scheduler (the code `strata engine` runs):
//
//   bench_engine -m MODEL decode [-c 1,4,16,64] [-n 32] [-t 2] [--sampling S,..] [--rows auto,never] [-r R]
//       aggregate decode tokens/s with c concurrent sequences (after every prompt is in): each
//       step decodes one token of every sequence; also the ratio to the single-stream rate.
//       S: greedy (default), temp (T 0.8), top-p (T 0.7, top_p 0.9), top-k (T 0.7, top_k 20,
//       top_p 0.8), penalties (T 0.7, top_p 0.9, repetition 1.1, logprobs 5). --rows never
//       copies every logits row to the host for the sampler (SchedulerOptions::row_sampling).
//       With several samplings or rows modes, or -r R rounds: each combination once per
//       round, medians over the rounds in one table.
//   --device cuda runs the model on the GPU (all modes).
//   bench_engine -m MODEL ttft [--prefix 8192] [--suffix 64] [-t 2]
//       time to first token for prefix + suffix: with an empty cache, then for a second request
//       sharing the prefix (a prefix-cache hit), median of 3 each.
//   bench_engine -m MODEL constraint [-n 64] [-t 2]
//       time per decode step, unconstrained vs under a JSON schema, one sequence, same seed.
//   bench_engine -m MODEL spec [-n 64] [--k 4] [--accept 0,0.25,0.5,0.65,0.8,1] [-r 3] [-t 2]
//       speculative decoding's end-to-end speed-up at a controlled acceptance (issue #30): one
//       greedy request's continuation is recorded without speculation, then replayed as drafts
//       (SchedulerOptions::drafter) with each drafted token replaced by another with probability
//       1 - a; decode tokens/s (first token to done) against the plain run, medians of -r
//       alternating rounds; the outputs must be the same token for token.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "devices/backend_factory.h"
#include "model/model.h"
#include "runtime/json_constraint.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"

using namespace strata;
using clock_type = std::chrono::steady_clock;

namespace {

using bench::median;

double secs_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

struct CountingSink : runtime::EventSink {
    std::map<std::string, int64_t> tokens;
    std::map<std::string, bool> done;
    std::map<std::string, runtime::Usage> usage;
    void on_tokens(const std::string& id, const std::vector<runtime::GeneratedToken>& t, const std::string&) override {
        tokens[id] += static_cast<int64_t>(t.size());
    }
    void on_done(const std::string& id, runtime::FinishReason, const runtime::Usage& u, const std::string&) override {
        done[id] = true;
        usage[id] = u;
    }
};

std::vector<int32_t> prompt_of(size_t n, uint32_t seed, int32_t n_vocab) {
    std::vector<int32_t> p(n);
    uint32_t x = seed * 2654435761u + 12345;
    for (auto& t : p) {
        x = x * 1664525u + 1013904223u;
        t = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(std::min(n_vocab, 30000)));
    }
    return p;
}

runtime::Request request(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens) {
    runtime::Request r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    return r;
}

// The sampling of the decode mode's requests (see the usage at the top).
bool set_sampling(const std::string& name, runtime::SamplingParams& p) {
    p.seed = 7;
    if (name == "greedy") p.temperature = 0;
    else if (name == "temp") p.temperature = 0.8f;
    else if (name == "top-p") p.temperature = 0.7f, p.top_p = 0.9f;
    else if (name == "top-k") p.temperature = 0.7f, p.top_k = 20, p.top_p = 0.8f;
    else if (name == "penalties") p.temperature = 0.7f, p.top_p = 0.9f, p.repetition_penalty = 1.1f, p.top_logprobs = 5;
    else return false;
    return true;
}

using RowSampling = runtime::SchedulerOptions::RowSampling;

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> v;
    size_t b = 0;
    while (b <= s.size()) {
        const size_t e = std::min(s.find(',', b), s.size());
        v.push_back(s.substr(b, e - b));
        b = e + 1;
    }
    return v;
}

std::vector<int> parse_list(const char* s) {
    std::vector<int> v;
    for (const char* p = s; *p != 0;) {
        v.push_back(std::atoi(p));
        const char* c = std::strchr(p, ',');
        if (c == nullptr) break;
        p = c + 1;
    }
    return v;
}

// Decode tokens/s with c sequences: prompts of 32 tokens are prefilled first (not timed), then
// n steps of pure decode are timed.
double decode_rate(model::Model& m, const tokenizer::Tokenizer& tok, int c, int n, const std::string& sampling,
                   RowSampling rows) {
    runtime::SchedulerOptions o;
    o.max_running = c;
    o.max_batched_tokens = std::max(512, c + 64);
    o.kv.kv_bytes = int64_t{1} << 30;
    o.row_sampling = rows;
    runtime::Scheduler s(m, tok, o);
    CountingSink sink;
    for (int i = 0; i < c; ++i) {
        runtime::Request r = request("d" + std::to_string(i), prompt_of(32, static_cast<uint32_t>(i), m.config().n_vocab), n + 2);
        set_sampling(sampling, r.sampling);
        s.submit(std::move(r), &sink);
    }
    // Until every sequence has its first token (prefill done).
    while (true) {
        int ready = 0;
        for (int i = 0; i < c; ++i) ready += sink.tokens["d" + std::to_string(i)] > 0 ? 1 : 0;
        if (ready == c) break;
        s.step();
    }
    const runtime::SchedulerStats before = s.stats();
    const auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i) s.step();
    const double dt = secs_since(t0);
    const runtime::SchedulerStats after = s.stats();
    std::fprintf(stderr, "c %d: %lld tokens, %lld from row summaries, %lld whole rows to the host\n", c,
                 static_cast<long long>(after.generated_tokens - before.generated_tokens),
                 static_cast<long long>(after.row_sampled_tokens - before.row_sampled_tokens),
                 static_cast<long long>(after.whole_rows - before.whole_rows));
    return static_cast<double>(after.generated_tokens - before.generated_tokens) / dt;
}

struct RecordingSink : runtime::EventSink {
    std::vector<int32_t> ids;
    bool done = false;
    clock_type::time_point first;
    double decode_s = 0;
    void on_tokens(const std::string&, const std::vector<runtime::GeneratedToken>& t, const std::string&) override {
        if (ids.empty() && !t.empty()) first = clock_type::now();
        for (const auto& g : t) ids.push_back(g.id);
    }
    void on_done(const std::string&, runtime::FinishReason, const runtime::Usage&, const std::string&) override {
        done = true;
        decode_s = secs_since(first);
    }
};

// One greedy request of n tokens alone; drafts from `drafter` when set (spec_ngram k).
RecordingSink run_spec(model::Model& m, const tokenizer::Tokenizer& tok, int n, int k,
                       decltype(runtime::SchedulerOptions::drafter) drafter, runtime::SchedulerStats* stats) {
    runtime::SchedulerOptions o;
    o.kv.kv_bytes = int64_t{1} << 30;
    o.spec_ngram = drafter ? k : 0;
    o.drafter = std::move(drafter);
    runtime::Scheduler s(m, tok, o);
    RecordingSink sink;
    s.submit(request("s", prompt_of(64, 3, m.config().n_vocab), n), &sink);  // the spec mode's `prompt`
    while (s.has_work()) s.step();
    *stats = s.stats();
    return sink;
}

double time_to_first_token(runtime::Scheduler& s, const std::string& id, std::vector<int32_t> prompt, int64_t* cached) {
    CountingSink sink;
    const auto t0 = clock_type::now();
    s.submit(request(id, std::move(prompt), 1), &sink);
    while (!sink.done[id]) s.step();
    *cached = sink.usage[id].cached_tokens;
    return secs_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
    std::string path, mode, device = "cpu";
    std::vector<std::string> samplings = {"greedy"};
    std::vector<RowSampling> rows_modes = {RowSampling::Auto};
    int rounds = 1, spec_k = 4;
    std::vector<double> accepts = {0, 0.25, 0.5, 0.65, 0.8, 1};
    std::vector<int> conc = {1, 4, 16, 64};
    int n = 32, threads = 2;
    int64_t prefix = 8192, suffix = 64;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "-m") path = next();
        else if (a == "-c") conc = parse_list(next());
        else if (a == "-n") n = std::atoi(next());
        else if (a == "-t") threads = std::atoi(next());
        else if (a == "--prefix") prefix = std::atoll(next());
        else if (a == "--suffix") suffix = std::atoll(next());
        else if (a == "--device") device = next();
        else if (a == "--sampling") {
            samplings = split_list(next());
            for (const auto& v : samplings) {
                runtime::SamplingParams p;
                if (!set_sampling(v, p)) {
                    std::fprintf(stderr, "unknown --sampling %s\n", v.c_str());
                    return 2;
                }
            }
        } else if (a == "--rows") {
            rows_modes.clear();
            for (const auto& v : split_list(next())) {
                if (v != "auto" && v != "never") {
                    std::fprintf(stderr, "--rows takes auto, never or both\n");
                    return 2;
                }
                rows_modes.push_back(v == "never" ? RowSampling::Never : RowSampling::Auto);
            }
        } else if (a == "-r") rounds = std::atoi(next());
        else if (a == "--k") spec_k = std::atoi(next());
        else if (a == "--accept") {
            accepts.clear();
            for (const std::string& v : split_list(next())) accepts.push_back(std::atof(v.c_str()));
        } else if (mode.empty() && a[0] != '-') mode = a;
        else {
            std::fprintf(stderr, "unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    if (path.empty() || (mode != "decode" && mode != "ttft" && mode != "constraint" && mode != "spec") || spec_k < 1 ||
        spec_k > 16) {
        std::fprintf(stderr,
                     "usage: bench_engine -m MODEL (decode [-c 1,4,16,64] [-n 32] [--sampling S,..] [--rows auto,never] [-r R] | "
                     "ttft [--prefix 8192] [--suffix 64] | constraint [-n 64] | spec [-n 64] [--k 4] [--accept A,..] [-r R]) "
                     "[-t 2] [--device cpu|cuda]\n");
        return 2;
    }
    devices::BackendOptions bo;
    bo.device = device;
    bo.threads = threads;
    std::unique_ptr<backend::Backend> backend;
    try {
        backend = devices::make_backend(bo);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_engine: %s\n", e.what());
        return 1;
    }
    backend::Backend& be = *backend;
    auto m = model::Model::load(path, be);
    const auto tok = tokenizer::Tokenizer::from_gguf(m->file());
    std::printf("model %s (%s, %lld layers), %s, %d threads\n", path.c_str(), m->config().arch_name.c_str(),
                static_cast<long long>(m->config().n_layer), device.c_str(), threads);

    if (mode == "decode" && samplings.size() == 1 && rows_modes.size() == 1 && rounds == 1) {
        double single = 0;
        std::printf("sampling %s\n| concurrent sequences | aggregate decode tok/s | vs 1 sequence |\n|---:|---:|---:|\n",
                    samplings[0].c_str());
        for (int c : conc) {
            const double r = decode_rate(*m, *tok, c, n, samplings[0], rows_modes[0]);
            if (c == 1) single = r;
            std::printf("| %d | %.2f | %s |\n", c, r, single > 0 ? (std::to_string(r / single).substr(0, 5) + "x").c_str() : "-");
            std::fflush(stdout);
        }
    } else if (mode == "decode") {
        // Side by side: every sampling and rows mode once per round, medians over the rounds.
        std::map<std::tuple<std::string, int, int>, std::vector<double>> rates;
        for (int round = 0; round < rounds; ++round)
            for (const auto& sm : samplings)
                for (RowSampling rm : rows_modes)
                    for (int c : conc) rates[{sm, static_cast<int>(rm), c}].push_back(decode_rate(*m, *tok, c, n, sm, rm));
        std::printf("| sampling | rows | concurrent sequences | aggregate decode tok/s (median of %d) |\n|---|---|---:|---:|\n",
                    rounds);
        for (const auto& sm : samplings)
            for (RowSampling rm : rows_modes)
                for (int c : conc)
                    std::printf("| %s | %s | %d | %.1f |\n", sm.c_str(), rm == RowSampling::Never ? "never" : "auto", c,
                                median(rates[{sm, static_cast<int>(rm), c}]));
    } else if (mode == "spec") {
        runtime::SchedulerStats st;
        const RecordingSink plain0 = run_spec(*m, *tok, n, spec_k, nullptr, &st);
        const std::vector<int32_t> truth = plain0.ids;  // the continuation drafts replay
        const size_t n_prompt = 64;
        const std::vector<int32_t> prompt = prompt_of(n_prompt, 3, m->config().n_vocab);  // run_spec's
        std::map<double, std::vector<double>> rate, kept;
        std::vector<double> plain;
        bool same = true;
        for (int round = 0; round < std::max(1, rounds); ++round) {
            plain.push_back(static_cast<double>(n - 1) / run_spec(*m, *tok, n, spec_k, nullptr, &st).decode_s);
            for (double acc : accepts) {
                std::mt19937 rng(static_cast<unsigned>(1000 * acc) + static_cast<unsigned>(round));
                std::uniform_real_distribution<double> u(0.0, 1.0);
                auto drafter = [&](const std::string&, std::span<const int32_t> tokens, int k) {
                    std::vector<int32_t> d;
                    for (size_t at = tokens.size() - n_prompt; at < truth.size() && static_cast<int>(d.size()) < k; ++at)
                        // A wrong draft: another token of the prompt (a valid id the model might say).
                        d.push_back(u(rng) < acc ? truth[at] : [&] {
                            int32_t w = truth[at];
                            while (w == truth[at]) w = prompt[rng() % prompt.size()];
                            return w;
                        }());
                    return d;
                };
                const RecordingSink r = run_spec(*m, *tok, n, spec_k, drafter, &st);
                same = same && r.ids == truth;
                rate[acc].push_back(static_cast<double>(n - 1) / r.decode_s);
                kept[acc].push_back(
                    st.drafted_tokens > 0 ? static_cast<double>(st.accepted_tokens) / static_cast<double>(st.drafted_tokens) : 0);
            }
        }
        const double p = median(plain);
        std::printf(
            "| drafted token correct with probability | drafts kept | decode tok/s (median of %d) | vs no speculation |\n"
            "|---:|---:|---:|---:|\n| no speculation | | %.2f | 1.00x |\n",
            std::max(1, rounds), p);
        for (double acc : accepts)
            std::printf("| %.2f | %.0f %% | %.2f | %.2fx |\n", acc, 100.0 * median(kept[acc]), median(rate[acc]),
                        median(rate[acc]) / p);
        std::printf("k = %d drafted tokens a step, %d tokens generated; outputs %s\n", spec_k, n,
                    same ? "identical to the plain run's in every run" : "DIFFERENT from the plain run's");
        if (!same) return 1;
    } else if (mode == "ttft") {
        const auto shared = prompt_of(static_cast<size_t>(prefix), 1, m->config().n_vocab);
        std::vector<double> cold, warm;
        int64_t cached_cold = 0, cached_warm = 0;
        for (int rep = 0; rep < 3; ++rep) {
            runtime::SchedulerOptions o;
            o.max_context = prefix + suffix + 16;
            o.kv.kv_bytes = int64_t{4} << 30;
            runtime::Scheduler s(*m, *tok, o);
            auto with = [&](uint32_t seed) {
                auto p = shared;
                const auto t = prompt_of(static_cast<size_t>(suffix), seed + 100, m->config().n_vocab);
                p.insert(p.end(), t.begin(), t.end());
                return p;
            };
            cold.push_back(time_to_first_token(s, "cold", with(static_cast<uint32_t>(rep)), &cached_cold));
            warm.push_back(time_to_first_token(s, "warm", with(static_cast<uint32_t>(rep + 50)), &cached_warm));
        }
        const double c = median(cold), w = median(warm);
        std::printf(
            "| prompt | TTFT, empty cache | TTFT, shared prefix cached | cached tokens | speed-up "
            "|\n|---|---:|---:|---:|---:|\n");
        std::printf("| %lld shared + %lld new tokens | %.3f s | %.3f s | %lld | %.1fx |\n", static_cast<long long>(prefix),
                    static_cast<long long>(suffix), c, w, static_cast<long long>(cached_warm), c / w);
        (void)cached_cold;
    } else {
        const nlohmann::json schema = nlohmann::json::parse(R"({
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                           "units": {"enum": ["metric", "imperial"]},
                           "stops": {"type": "array", "items": {"type": "object",
                               "properties": {"name": {"type": "string"}, "hours": {"type": "number"}},
                               "required": ["name", "hours"]}}},
            "required": ["city", "days", "units", "stops"]})");
        // Alternating runs (3 each), every decode step timed; medians over all steps.
        std::vector<double> steps_free, steps_con;
        int64_t n_free = 0, n_con = 0;
        auto run = [&](bool constrained) {
            runtime::SchedulerOptions o;
            runtime::Scheduler s(*m, *tok, o);
            CountingSink sink;
            runtime::Request r = request("c", prompt_of(16, 9, m->config().n_vocab), n + 1);
            r.sampling.temperature = 0.8f;
            r.sampling.seed = 5;
            if (constrained) r.grammar = runtime::JsonGrammar::from_schema(schema);
            s.token_index();  // built once per vocabulary at startup, not per request
            s.submit(r, &sink);
            s.step();  // prefill
            while (s.has_work()) {
                const auto t0 = clock_type::now();
                s.step();
                (constrained ? steps_con : steps_free).push_back(secs_since(t0));
            }
            (constrained ? n_con : n_free) += sink.tokens["c"];
        };
        for (int rep = 0; rep < 3; ++rep) {
            run(false);
            run(true);
        }
        const double free_s = median(steps_free), con_s = median(steps_con);
        std::printf(
            "| decode step (median of all steps, 3 alternating runs each) | unconstrained | JSON schema | overhead "
            "|\n|---|---:|---:|---:|\n");
        std::printf("| one sequence, %lld / %lld tokens | %.2f ms | %.2f ms | %+.1f%% |\n", static_cast<long long>(n_free),
                    static_cast<long long>(n_con), free_s * 1e3, con_s * 1e3, (con_s / free_s - 1) * 100);
    }
    return 0;
}
