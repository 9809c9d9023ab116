// Prompt lookup's own cost (runtime/prompt_lookup.h, issue #30: at most 2 % of a decode step at
// 128K tokens of context): indexing a context of N tokens (what the first drafting step of a
// request pays), then per decode step one push and one draft, against a step's time.
//   bench_prompt_lookup [--tokens 131072] [--steps 100000] [--k 8]
// The tokens: a real-text-like stream (Zipf-distributed ids over a 151,936 vocabulary, with
// copied stretches, as quoted text and edited code have), so the table sees realistic repeats.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/prompt_lookup.h"

int main(int argc, char** argv) {
    int64_t tokens = 131072, steps = 100000;
    int k = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--tokens") tokens = std::atoll(argv[i + 1]);
        else if (a == "--steps") steps = std::atoll(argv[i + 1]);
        else if (a == "--k") k = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: bench_prompt_lookup [--tokens N] [--steps N] [--k K]\n");
            return 2;
        }
    }
    std::mt19937_64 rng(7);
    std::vector<double> cdf(151936);
    double acc = 0;
    for (size_t r = 0; r < cdf.size(); ++r) cdf[r] = acc += 1.0 / std::pow(static_cast<double>(r + 1), 1.1);
    std::uniform_real_distribution<double> u(0.0, acc);
    std::vector<int32_t> stream;
    auto next = [&]() -> int32_t { return static_cast<int32_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin()); };
    while (static_cast<int64_t>(stream.size()) < tokens + steps) {
        if (stream.size() > 64 && rng() % 200 == 0) {  // copy a stretch from earlier
            const size_t from = rng() % (stream.size() - 32), n = 8 + rng() % 120;
            for (size_t j = 0; j < n; ++j) stream.push_back(stream[from + j]);
        } else {
            stream.push_back(next());
        }
    }
    strata::runtime::PromptLookup pl;
    auto t0 = std::chrono::steady_clock::now();
    pl.push(std::span<const int32_t>(stream.data(), static_cast<size_t>(tokens)));
    const double index_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t drafted = 0, found = 0;
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < steps; ++i) {
        pl.push(stream[static_cast<size_t>(tokens + i)]);
        const std::vector<int32_t> d = pl.draft(k);
        drafted += d.size();
        found += !d.empty();
    }
    const double step_us =
        1e6 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(steps);
    std::printf("prompt lookup: indexing %lld tokens %.1f ms (%.0f ns a token), table %.1f MiB\n", static_cast<long long>(tokens),
                index_ms, 1e6 * index_ms / static_cast<double>(tokens), static_cast<double>(pl.memory_bytes()) / (1 << 20));
    std::printf(
        "per decode step (one push, one draft of up to %d): %.3f us; a draft found at %.1f %% of steps, %.2f tokens a draft\n", k,
        step_us, 100.0 * static_cast<double>(found) / static_cast<double>(steps),
        found ? static_cast<double>(drafted) / static_cast<double>(found) : 0.0);
    std::printf("against a 15 ms decode step (30B-A3B geometry, 2 threads): %.4f %%; a 2.5 ms step (GPU): %.3f %%\n",
                100.0 * step_us / 15000.0, 100.0 * step_us / 2500.0);
    return 0;
}
