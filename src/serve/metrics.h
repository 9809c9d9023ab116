// Prometheus metrics of a serving process (text exposition format 0.0.4), named strata_*:
// request counters by API and outcome, token counters, and latency histograms measured the way
// vLLM measures them (TTFT from arrival to the first output token, inter-token latency between
// token events, end-to-end latency). Gauges of the engine (running, waiting, KV use, prefix
// cache) are added by the server at scrape time.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace strata::serve {

class Histogram {
public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double value);
    // Appends the _bucket / _sum / _count lines of `name`.
    void render(std::string& out, const std::string& name, const std::string& help) const;

private:
    std::vector<double> bounds_;
    mutable std::mutex mu_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative (+Inf last)
    double sum_ = 0;
    uint64_t count_ = 0;
};

class Metrics {
public:
    Metrics();
    Histogram ttft, inter_token, e2e, queue_time;
    std::atomic<uint64_t> prompt_tokens{0}, generation_tokens{0}, cached_prompt_tokens{0};

    // A request ended: api "openai" / "anthropic", outcome "stop", "length", "tool_calls", "error",
    // "cancelled", "rejected" (4xx), "overloaded" (queue full).
    void count_request(const std::string& api, const std::string& outcome);
    // Everything above, plus `extra` (already formatted lines from the server).
    std::string render(const std::string& extra) const;

private:
    mutable std::mutex mu_;
    std::map<std::pair<std::string, std::string>, uint64_t> requests_;
};

}  // namespace strata::serve
