// `strata bench serve`: load on an OpenAI-compatible server at several concurrency levels, measured
// as vLLM's `vllm bench serve` measures (src/bench/serve_bench.h has the definitions), optionally
// against the same workload run straight through `strata engine` (--engine-baseline): the ratio of
// the two is what the HTTP layer costs. Tables on stdout, progress on stderr, --json for a file.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>

#include "bench/serve_bench.h"
#include "cli/commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::cli {

namespace {

using bench::Summary;
using ojson = nlohmann::ordered_json;

struct BenchServeArgs {
    std::string url = "http://127.0.0.1:8080";
    std::string api_key, model_name, endpoint = "chat", rate = "inf", json_out, tokenizer_model;
    std::vector<int> concurrency = {1, 4, 16, 64};
    int requests = 0;  // per level; 0: 4 × concurrency, at least 8
    int rounds = 1;
    int64_t input_tokens = 256, shared_prefix = 0, output_tokens = 128;
    double temperature = 0;
    bool no_ignore_eos = false, no_warmup = false;
    uint64_t seed = 0;
    int timeout_s = 3600;
    // --engine-baseline and the engine options (as `strata serve` takes them)
    std::string baseline_model;
    int threads = 2, parallel = 16, max_batched_tokens = 512, prefill_chunk = 256;
    int64_t ctx = 0, kv_mib = 2048, snapshot_mib = 1024;
    bool no_prefix_cache = false;
};

// One concurrency level: each round's summary, and all rounds' requests pooled.
struct Level {
    int concurrency = 0;
    size_t requests = 0;  // per round
    std::vector<Summary> serve_rounds, engine_rounds;
    Summary serve, engine;
};

struct Ratios {
    double tpot = 0, output_throughput = 0, ttft = 0, tpot_overhead_ms = 0;
};

double median_of(const std::vector<double>& v) { return bench::percentile(v, 50); }

// Medians over rounds of the per-round serve/engine ratios (drift between rounds cancels).
Ratios ratios(const Level& l) {
    std::vector<double> tpot, thr, ttft, over;
    for (size_t r = 0; r < l.serve_rounds.size() && r < l.engine_rounds.size(); ++r) {
        const Summary& s = l.serve_rounds[r];
        const Summary& e = l.engine_rounds[r];
        if (e.tpot.median > 0) tpot.push_back(s.tpot.median / e.tpot.median);
        if (e.output_throughput > 0) thr.push_back(s.output_throughput / e.output_throughput);
        if (e.ttft.median > 0) ttft.push_back(s.ttft.median / e.ttft.median);
        over.push_back(s.tpot.median - e.tpot.median);
    }
    return {median_of(tpot), median_of(thr), median_of(ttft), median_of(over)};
}

std::vector<std::string> engine_argv(const BenchServeArgs& a) {
    std::vector<std::string> argv = {self_exe(),
                                     "engine",
                                     "-m",
                                     a.baseline_model,
                                     "-t",
                                     std::to_string(a.threads),
                                     "--max-running",
                                     std::to_string(a.parallel),
                                     "--max-batched-tokens",
                                     std::to_string(a.max_batched_tokens),
                                     "--prefill-chunk",
                                     std::to_string(a.prefill_chunk),
                                     "--kv-mib",
                                     std::to_string(a.kv_mib),
                                     "--snapshot-mib",
                                     std::to_string(a.snapshot_mib)};
    if (a.ctx > 0) argv.insert(argv.end(), {"--ctx", std::to_string(a.ctx)});
    if (a.no_prefix_cache) argv.push_back("--no-prefix-cache");
    return argv;
}

void print_tables(const std::vector<Level>& levels, bool baseline) {
    auto row_throughput = [](int c, const Summary& s, const char* who) {
        const double n = s.completed > 0 ? static_cast<double>(s.completed) : 1.0;
        std::printf("%-7s %5d %6lld %5lld %8.2f %8.3f %10.2f %10.2f %8.1f %8.1f %8.1f\n", who, c,
                    static_cast<long long>(s.completed), static_cast<long long>(s.failed), s.duration_s, s.request_throughput,
                    s.output_throughput, s.total_throughput, static_cast<double>(s.input_tokens) / n,
                    static_cast<double>(s.cached_tokens) / n, static_cast<double>(s.output_tokens) / n);
    };
    auto row_latency = [](int c, const Summary& s, const char* who) {
        std::printf("%-7s %5d | %8.1f %8.1f %8.1f | %7.2f %7.2f %7.2f | %7.2f %7.2f %7.2f | %8.0f %8.0f %8.0f\n", who, c,
                    s.ttft.median, s.ttft.mean, s.ttft.p99, s.tpot.median, s.tpot.mean, s.tpot.p99, s.itl.median, s.itl.mean,
                    s.itl.p99, s.e2e.median, s.e2e.mean, s.e2e.p99);
    };
    std::printf("\nThroughput (completed requests; tokens per request are means)\n");
    std::printf("%-7s %5s %6s %5s %8s %8s %10s %10s %8s %8s %8s\n", "target", "conc", "done", "fail", "dur s", "req/s",
                "out tok/s", "tot tok/s", "in tok", "cached", "out tok");
    for (const auto& l : levels) {
        row_throughput(l.concurrency, l.serve, "serve");
        if (baseline) row_throughput(l.concurrency, l.engine, "engine");
    }
    std::printf("\nLatency, ms: median mean p99\n");
    std::printf("%-7s %5s | %-26s | %-23s | %-23s | %-26s\n", "target", "conc", "TTFT", "TPOT", "ITL", "E2E");
    for (const auto& l : levels) {
        row_latency(l.concurrency, l.serve, "serve");
        if (baseline) row_latency(l.concurrency, l.engine, "engine");
    }
    if (baseline) {
        std::printf("\nServe vs engine alone (medians over rounds of per-round ratios; TPOT overhead = serve − engine)\n");
        std::printf("%5s %12s %12s %11s %14s %12s\n", "conc", "TPOT ratio", "overhead", "ms/token", "out tok/s ×", "TTFT ratio");
        for (const auto& l : levels) {
            const Ratios r = ratios(l);
            std::printf("%5d %12.4f %+11.2f%% %+11.3f %14.4f %12.3f\n", l.concurrency, r.tpot, (r.tpot - 1) * 100,
                        r.tpot_overhead_ms, r.output_throughput, r.ttft);
        }
    }
    bool textless = false;
    for (const auto& l : levels) {
        for (const auto& e : l.serve.errors) std::printf("concurrency %d, failure: %s\n", l.concurrency, e.c_str());
        for (const auto& e : l.engine.errors) std::printf("concurrency %d, engine failure: %s\n", l.concurrency, e.c_str());
        for (const auto* errors : {&l.serve.errors, &l.engine.errors})
            for (const auto& e : *errors) textless = textless || e.starts_with("no content chunk");
    }
    if (textless)
        std::printf(
            "(answers without text: a random-weight model sampled greedily with ignore_eos tends to repeat end-of-text tokens; "
            "try --temperature 1)\n");
    std::fflush(stdout);
}

ojson results_json(const BenchServeArgs& a, const bench::WorkloadOptions& w, double rate, const std::vector<Level>& levels) {
    ojson config = {{"url", a.url},
                    {"endpoint", a.endpoint},
                    {"model", w.model},
                    {"input_tokens", w.input_tokens},
                    {"shared_prefix", w.shared_prefix},
                    {"output_tokens", w.output_tokens},
                    {"ignore_eos", w.ignore_eos},
                    {"temperature", w.temperature},
                    {"request_rate", std::isfinite(rate) ? ojson(rate) : ojson("inf")},
                    {"seed", w.seed},
                    {"rounds", a.rounds},
                    {"engine_baseline", a.baseline_model.empty() ? ojson() : ojson(a.baseline_model)}};
    ojson out = {{"config", config}, {"levels", ojson::array()}};
    for (const auto& l : levels) {
        ojson j = {{"concurrency", l.concurrency}, {"requests_per_round", l.requests}, {"serve", bench::to_json(l.serve)}};
        ojson rounds = ojson::array();
        for (size_t r = 0; r < l.serve_rounds.size(); ++r) {
            ojson round = {{"serve", bench::to_json(l.serve_rounds[r])}};
            if (r < l.engine_rounds.size()) round["engine"] = bench::to_json(l.engine_rounds[r]);
            rounds.push_back(std::move(round));
        }
        if (!a.baseline_model.empty()) {
            j["engine"] = bench::to_json(l.engine);
            const Ratios r = ratios(l);
            j["serve_vs_engine"] = {{"tpot_ratio", r.tpot},
                                    {"tpot_overhead_ms", r.tpot_overhead_ms},
                                    {"output_throughput_ratio", r.output_throughput},
                                    {"ttft_ratio", r.ttft}};
        }
        j["rounds"] = std::move(rounds);
        out["levels"].push_back(std::move(j));
    }
    return out;
}

int run_bench_serve(BenchServeArgs& a) {
    bench::WorkloadOptions w;
    if (a.endpoint == "chat") w.endpoint = bench::Endpoint::Chat;
    else if (a.endpoint == "completions") w.endpoint = bench::Endpoint::Completions;
    else throw Error("--endpoint " + a.endpoint + ": expected chat or completions");
    double rate = std::numeric_limits<double>::infinity();
    if (a.rate != "inf") {
        char* end = nullptr;
        rate = std::strtod(a.rate.c_str(), &end);
        if (a.rate.empty() || *end != '\0' || !(rate > 0) || !std::isfinite(rate))
            throw Error("--request-rate " + a.rate + ": expected inf or a number > 0");
    }
    if (a.api_key.empty())
        if (const char* env = std::getenv("STRATA_API_KEY")) a.api_key = env;
    w.input_tokens = a.input_tokens;
    w.shared_prefix = a.shared_prefix;
    w.output_tokens = a.output_tokens;
    w.ignore_eos = !a.no_ignore_eos;
    w.temperature = a.temperature;
    w.seed = a.seed;
    w.model = a.model_name.empty() ? bench::first_model_id(a.url, a.api_key) : a.model_name;

    // Exact prompt lengths need the model's tokenizer (the baseline's model by default).
    const std::string tok_model = a.tokenizer_model.empty() ? a.baseline_model : a.tokenizer_model;
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (!tok_model.empty()) tok = tokenizer::Tokenizer::from_gguf(*gguf::File::open(tok_model));
    const bench::PromptMaker maker(tok.get());

    auto serve = bench::http_target(a.url, a.api_key, w.endpoint, std::chrono::seconds(a.timeout_s));
    std::unique_ptr<bench::Target> engine;
    if (!a.baseline_model.empty()) {
        std::fprintf(stderr, "bench: starting the baseline engine on %s\n", a.baseline_model.c_str());
        engine = bench::engine_target(a.baseline_model, engine_argv(a), w.endpoint);
    }

    // Request indices: the warm-up requests live far from the measured ones.
    uint64_t next_index = 0;
    if (!a.no_warmup) {
        bench::WorkloadOptions ww = w;
        ww.output_tokens = std::min<int64_t>(w.output_tokens, 8);
        const auto warm = bench::make_requests(ww, maker, uint64_t{1} << 62, 1);
        for (bench::Target* t : {serve.get(), engine.get()}) {
            if (!t) continue;
            const auto r = bench::run_load(*t, warm, 1, rate, a.seed);
            if (!r.requests[0].ok) throw Error("warm-up request to " + t->name() + " failed: " + r.requests[0].error);
        }
    }

    std::vector<Level> levels;
    for (int c : a.concurrency) {
        Level l;
        l.concurrency = c;
        l.requests = static_cast<size_t>(a.requests > 0 ? a.requests : std::max(8, 4 * c));
        std::vector<bench::RequestResult> serve_all, engine_all;
        double serve_s = 0, engine_s = 0;
        for (int round = 0; round < a.rounds; ++round) {
            const auto requests = bench::make_requests(w, maker, next_index, l.requests);
            next_index += l.requests;
            // Alternate which goes first, so a trend in the machine's speed hits both alike.
            std::vector<bench::Target*> order = {serve.get()};
            if (engine) order.insert(round % 2 == 0 ? order.end() : order.begin(), engine.get());
            for (bench::Target* t : order) {
                auto run = bench::run_load(*t, requests, c, rate, a.seed + static_cast<uint64_t>(round));
                const Summary s = bench::summarize(run.requests, run.duration_s);
                // (The baseline engine logs each request on the shared stderr: one line per run here.)
                std::fprintf(stderr,
                             "bench: concurrency %d, round %d/%d, %s: %zu requests in %.2f s, %.1f output tok/s, TPOT %.2f ms, "
                             "%lld failed\n",
                             c, round + 1, a.rounds, t->name().c_str(), l.requests, run.duration_s, s.output_throughput,
                             s.tpot.median, static_cast<long long>(s.failed));
                const bool is_serve = t == serve.get();
                auto& pool = is_serve ? serve_all : engine_all;
                pool.insert(pool.end(), run.requests.begin(), run.requests.end());
                (is_serve ? serve_s : engine_s) += run.duration_s;
                (is_serve ? l.serve_rounds : l.engine_rounds).push_back(s);
            }
        }
        l.serve = bench::summarize(serve_all, serve_s);
        l.engine = bench::summarize(engine_all, engine_s);
        levels.push_back(std::move(l));
    }

    std::string workload = "prompts " + std::to_string(w.input_tokens) + " tokens";
    if (w.shared_prefix > 0) workload += " + " + std::to_string(w.shared_prefix) + " shared";
    workload += ", " + std::to_string(w.output_tokens) + " output tokens" + (w.ignore_eos ? " (ignore_eos)" : "");
    char rate_text[32] = "inf";
    if (std::isfinite(rate)) std::snprintf(rate_text, sizeof rate_text, "%g/s", rate);
    std::printf("strata bench serve: %s (%s), model %s, %s, temperature %g, request rate %s, %d round(s)\n", a.url.c_str(),
                a.endpoint.c_str(), w.model.empty() ? "(none named)" : w.model.c_str(), workload.c_str(), w.temperature,
                rate_text, a.rounds);
    print_tables(levels, engine != nullptr);
    if (!a.json_out.empty()) {
        std::ofstream f(a.json_out);
        f << results_json(a, w, rate, levels).dump(2) << "\n";
        if (!f) throw Error(a.json_out + ": cannot write");
    }
    return 0;
}

}  // namespace

void add_bench_commands(CLI::App& app, Runner& run) {
    CLI::App* group = app.add_subcommand("bench", "benchmarks of a running system");
    group->require_subcommand(1);
    auto a = std::make_shared<BenchServeArgs>();
    CLI::App* cmd =
        group->add_subcommand("serve", "load an OpenAI-compatible server at several concurrency levels (docs/BENCHMARKS.md)");
    cmd->add_option("--url", a->url, "server base URL: http://HOST[:PORT][/PREFIX]")->capture_default_str();
    cmd->add_option("--api-key", a->api_key, "sent as a Bearer token (also STRATA_API_KEY)");
    cmd->add_option("--model-name", a->model_name, "the requests' \"model\" (default: the first of GET /v1/models)");
    cmd->add_option("--endpoint", a->endpoint, "chat (/v1/chat/completions) or completions (/v1/completions)")
        ->check(CLI::IsMember({"chat", "completions"}))
        ->capture_default_str();
    cmd->add_option("-c,--concurrency", a->concurrency, "requests in flight at once; a list runs each level in turn")
        ->delimiter(',')
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd->add_option("-n,--requests", a->requests, "requests per level and round (default: 4 × concurrency, at least 8)")
        ->check(CLI::Range(1, 1 << 24));
    cmd->add_option("--rounds", a->rounds, "runs of each level (serve and engine alternate; ratios are medians over rounds)")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->add_option("--input-tokens", a->input_tokens, "prompt tokens of each request (distinct per request)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
        ->capture_default_str();
    cmd->add_option("--shared-prefix", a->shared_prefix, "tokens of a prefix every request shares, before its own part")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
        ->capture_default_str();
    cmd->add_option("--output-tokens", a->output_tokens, "max_tokens of each request")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
        ->capture_default_str();
    cmd->add_flag("--no-ignore-eos", a->no_ignore_eos, "do not send ignore_eos (answers may then end before --output-tokens)");
    cmd->add_option("--temperature", a->temperature, "sampling temperature")->check(CLI::Range(0.0, 2.0))->capture_default_str();
    cmd->add_option("--request-rate", a->rate, "inf (all requests at once) or requests/s with Poisson arrivals")
        ->capture_default_str();
    cmd->add_option("--seed", a->seed, "seed of prompts and arrivals (reusing one against the same server hits its prefix cache)")
        ->capture_default_str();
    cmd->add_option("--tokenizer", a->tokenizer_model,
                    "GGUF whose tokenizer makes prompt lengths exact (default: --engine-baseline's model)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--timeout", a->timeout_s, "seconds a response may stay silent")
        ->check(CLI::Range(1, 86400))
        ->capture_default_str();
    cmd->add_flag("--no-warmup", a->no_warmup, "skip the one request sent to each target before measuring");
    cmd->add_option("--json", a->json_out, "also write the results as JSON to this file");
    cmd->add_option("--engine-baseline", a->baseline_model,
                    "also run the workload through `strata engine` on this GGUF and compare")
        ->check(CLI::ExistingFile);
    const char* engine_group = "Baseline engine (use the server's values)";
    cmd->add_option("-t,--threads", a->threads, "engine compute threads")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str()
        ->group(engine_group);
    cmd->add_option("--parallel", a->parallel, "sequences computed at once (--max-running)")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str()
        ->group(engine_group);
    cmd->add_option("--ctx", a->ctx, "positions per sequence")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
        ->group(engine_group);
    cmd->add_option("--kv-mib", a->kv_mib, "paged KV memory, MiB")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
        ->capture_default_str()
        ->group(engine_group);
    cmd->add_option("--snapshot-mib", a->snapshot_mib, "recurrent-state snapshots, MiB")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
        ->capture_default_str()
        ->group(engine_group);
    cmd->add_option("--max-batched-tokens", a->max_batched_tokens, "tokens in one forward pass")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str()
        ->group(engine_group);
    cmd->add_option("--prefill-chunk", a->prefill_chunk, "most prompt tokens of one sequence per step")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str()
        ->group(engine_group);
    cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "do not reuse KV of earlier requests")->group(engine_group);
    cmd->callback([&run, a] { run = [a] { return run_bench_serve(*a); }; });
}

}  // namespace strata::cli
