#include "serve/metrics.h"

#include <algorithm>
#include <cstdio>

namespace strata::serve {

namespace {

std::string number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

std::vector<double> latency_buckets() {
    return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.25,  0.5,   0.75,
            1.0,   2.5,    5.0,   7.5,  10.0,  20.0, 40.0,  80.0, 160.0, 320.0, 640.0};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
    const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[i];
    sum_ += value;
    ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
    std::lock_guard<std::mutex> lock(mu_);
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += counts_[i];
        out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
    }
    cumulative += counts_.back();
    out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
    out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft(latency_buckets()), inter_token(latency_buckets()), e2e(latency_buckets()), queue_time(latency_buckets()) {}

void Metrics::count_request(const std::string& api, const std::string& outcome) {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_[{api, outcome}];
}

std::string Metrics::render(const std::string& extra) const {
    std::string out;
    out += "# HELP strata_requests_total Requests answered, by API and outcome.\n# TYPE strata_requests_total counter\n";
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [key, n] : requests_)
            out += "strata_requests_total{api=\"" + key.first + "\",outcome=\"" + key.second + "\"} " + std::to_string(n) + "\n";
    }
    out += "# HELP strata_prompt_tokens_total Prompt tokens of admitted requests.\n# TYPE strata_prompt_tokens_total counter\n";
    out += "strata_prompt_tokens_total " + std::to_string(prompt_tokens.load()) + "\n";
    out +=
        "# HELP strata_cached_prompt_tokens_total Prompt tokens served from the prefix cache.\n# TYPE "
        "strata_cached_prompt_tokens_total counter\n";
    out += "strata_cached_prompt_tokens_total " + std::to_string(cached_prompt_tokens.load()) + "\n";
    out += "# HELP strata_generation_tokens_total Generated tokens.\n# TYPE strata_generation_tokens_total counter\n";
    out += "strata_generation_tokens_total " + std::to_string(generation_tokens.load()) + "\n";
    ttft.render(out, "strata_time_to_first_token_seconds", "From arrival to the first generated token.");
    inter_token.render(out, "strata_inter_token_latency_seconds", "Between successive token events of a request.");
    e2e.render(out, "strata_e2e_request_latency_seconds", "From arrival to the last token.");
    queue_time.render(out, "strata_request_queue_time_seconds", "Time spent waiting for admission.");
    out += extra;
    return out;
}

}  // namespace strata::serve
