// `strata bench serve`: a load generator for OpenAI-compatible servers, measured the way vLLM's
// `vllm bench serve` measures (docs/BENCHMARKS.md, "Serving"), plus the same workload run
// straight through `strata engine` to see what the HTTP layer costs per token.
//
// A request's timeline, on the client's clock:
//   send ──────── first content chunk ── chunk ── chunk ── … ── last content chunk ── usage, [DONE]
//        └─ TTFT ─┘                  └ ITL ┘                                 │
//        └──────────────────────────── E2E latency ──────────────────────────┘
// A content chunk is an SSE chunk whose choices carry non-empty text (delta content, reasoning or
// tool calls; `text` for /v1/completions). vLLM's client counts any chunk with choices, which is
// right for vLLM's server (its role chunk comes with the first token) but not for ours: we send
// the role chunk at once, before the prompt is computed. E2E ends at the last content chunk (vLLM:
// at the last chunk, usage included), so the finish and usage chunks are in neither ITL nor E2E.
// TPOT = (E2E − TTFT) / (output tokens − 1), output tokens from usage.completion_tokens.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::tokenizer {
class Tokenizer;
}

namespace strata::bench {

using Clock = std::chrono::steady_clock;

enum class Endpoint { Chat, Completions };

// ---------------------------------------------------------------------------------------------
// The workload

// Prompts of about N tokens made of words from a fixed list of common English words, each with
// a leading space (one token each in Qwen's vocabulary). With a tokenizer the length is exact
// (for tokenizers that split at spaces, as byte-level BPE does); without one a word counts as
// one token.
class PromptMaker {
public:
    explicit PromptMaker(const tokenizer::Tokenizer* tokenizer = nullptr);
    std::string make(int64_t tokens, std::mt19937_64& rng) const;
    // The same, but starting with two words that spell `index` in base 264 (the list's size): any
    // 69,696 consecutive indices start differently (so they share no prefix-cache block).
    std::string make_numbered(uint64_t index, int64_t tokens, std::mt19937_64& rng) const;

private:
    void fill(std::string& s, int64_t have, int64_t tokens, std::mt19937_64& rng) const;

    std::vector<std::string> words_;
    std::vector<int64_t> word_tokens_;  // tokens of each word
    std::vector<size_t> single_;        // words of one token (to fill the last gap exactly)
};

struct WorkloadOptions {
    Endpoint endpoint = Endpoint::Chat;
    std::string model;            // the body's "model" (empty: left out)
    int64_t input_tokens = 256;   // the distinct part of each prompt
    int64_t shared_prefix = 0;    // a prefix every request shares, before the distinct part
    int64_t output_tokens = 128;  // max_tokens
    bool ignore_eos = true;       // so every request generates exactly output_tokens
    double temperature = 0;
    uint64_t seed = 0;
};

// One request: its body as sent (the engine baseline reads the same body).
struct BenchRequest {
    nlohmann::ordered_json body;
    std::string body_text;
};

// Requests `first` .. `first + n - 1` of the workload's request stream: each prompt comes from
// its own RNG seeded by (seed, index), so request i is the same whatever was made before it; after
// the shared prefix it starts with its index (make_numbered), so no two requests share more than
// the shared prefix (no accidental prefix-cache hits).
std::vector<BenchRequest> make_requests(const WorkloadOptions& o, const PromptMaker& maker, uint64_t first, size_t n);

// ---------------------------------------------------------------------------------------------
// What was measured

struct RequestResult {
    bool ok = false;
    std::string error;  // why it failed
    double ttft_s = 0, e2e_s = 0;
    std::vector<double> itl_s;  // gaps between successive content chunks
    int64_t prompt_tokens = 0, cached_tokens = 0, output_tokens = 0;
    int64_t content_chunks = 0;
    bool usage_reported = false;  // output_tokens came from usage (else: counted content chunks)
};

// One streamed answer read chunk by chunk: the SSE framing, then OpenAI chunk objects.
class StreamRecorder {
public:
    StreamRecorder(Endpoint endpoint, Clock::time_point sent) : endpoint_(endpoint), sent_(sent) {}
    // Bytes of the response body as they arrive, with their arrival time.
    void feed(std::string_view bytes, Clock::time_point at);
    // The request's result once the body is over (failed when no content chunk came, the stream
    // carried an error, or it ended before [DONE]).
    RequestResult finish();

private:
    void on_data(std::string_view data, Clock::time_point at);

    Endpoint endpoint_;
    Clock::time_point sent_, last_content_;
    std::string buffer_;
    RequestResult result_;
    bool saw_done_ = false;
};

// Whether one chunk object (chat.completion.chunk or text_completion) carries generated text.
bool chunk_has_content(const nlohmann::json& chunk, Endpoint endpoint);

struct Stat {
    double median = 0, mean = 0, p99 = 0;  // milliseconds
    size_t n = 0;
};
// Linear interpolation between closest ranks (numpy's default), p in [0, 100].
double percentile(std::vector<double> values, double p);
Stat stat_ms(const std::vector<double>& seconds);

struct Summary {
    int64_t completed = 0, failed = 0;
    double duration_s = 0;
    double request_throughput = 0, output_throughput = 0, total_throughput = 0;  // per second
    int64_t input_tokens = 0, cached_tokens = 0, output_tokens = 0;              // completed requests, summed
    Stat ttft, tpot, itl, e2e;
    std::vector<std::string> errors;  // the first few distinct failure messages
};
// `duration_s`: from the first send to the last answer's end.
Summary summarize(const std::vector<RequestResult>& results, double duration_s);
nlohmann::ordered_json to_json(const Summary& s);

// ---------------------------------------------------------------------------------------------
// Where requests go

class Target {
public:
    virtual ~Target() = default;
    virtual std::string name() const = 0;
    // Called before a run with the number of workers that will call send() concurrently.
    virtual void connect(int workers) = 0;
    // Sends one request from worker `worker`; blocks until its answer is over.
    virtual RequestResult send(int worker, const BenchRequest& request) = 0;
};

// An OpenAI-compatible HTTP server: url = http://host[:port][/prefix] (/v1/... is appended).
std::unique_ptr<Target> http_target(const std::string& url, const std::string& api_key, Endpoint endpoint,
                                    std::chrono::seconds timeout);
// The id of the first model GET /v1/models lists; empty when it cannot be had.
std::string first_model_id(const std::string& url, const std::string& api_key);

// `strata engine` started through serve::EngineClient (engine_argv: binary, "engine", -m, ...).
// Each body becomes the engine submit `strata serve` would send for it (same template, same
// tokens, same sampling fields); a tokens event with text counts as a content chunk.
std::unique_ptr<Target> engine_target(const std::string& model_path, std::vector<std::string> engine_argv, Endpoint endpoint);

struct RunResult {
    std::vector<RequestResult> requests;
    double duration_s = 0;
};

// Sends `requests` in order from `concurrency` workers (at most that many in flight). With a
// finite `request_rate` (requests/s) request i is not sent before its Poisson arrival time
// (exponential gaps drawn from `seed`); with infinity every request arrives at once.
RunResult run_load(Target& target, const std::vector<BenchRequest>& requests, int concurrency, double request_rate,
                   uint64_t seed);

}  // namespace strata::bench
