// Sampler cost per token: bench_sampler [--runs N] [--vocab V] [--scale S]
// (STRATA_ISA=scalar: the baseline exp kernels instead of AVX2.)
// Times Sampler::sample on V (default 151,936) random normal logits of standard deviation S
// (default 2) for greedy, temperature alone, top_p 0.9, top_k 40, min_p 0.05 and combinations,
// and prints the median over N runs (default 15) of the mean of a batch of 50 calls, as wall
// time and as the thread's CPU time (steadier on a shared machine). No bias, penalties or mask,
// so sample() does not write the logits and one array serves every call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_features.h"
#include "runtime/sampler.h"
#include "util/error.h"

namespace {

using Clock = std::chrono::steady_clock;
using strata::runtime::Sampler;
using strata::runtime::SamplingParams;

double thread_cpu_us() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Case {
    const char* name;
    SamplingParams params;
};

SamplingParams params(float temperature, int32_t top_k, float top_p, float min_p, bool logprobs = false) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 1;
    p.logprobs = logprobs;
    return p;
}

}  // namespace

int main(int argc, char** argv) {
    int runs = 15;
    int32_t vocab = 151936;
    float scale = 2.0f;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
        else if (a == "--vocab" && i + 1 < argc) vocab = std::max(1, std::atoi(argv[++i]));
        else if (a == "--scale" && i + 1 < argc) scale = static_cast<float>(std::atof(argv[++i]));
        else {
            std::fprintf(stderr, "usage: bench_sampler [--runs N] [--vocab V] [--scale S]\n");
            return 2;
        }
    }
    try {
        std::mt19937 rng(42);
        std::normal_distribution<float> nd(0.0f, scale);
        std::vector<float> logits(static_cast<size_t>(vocab));
        for (float& x : logits) x = nd(rng);

        const std::vector<Case> cases = {
            {"greedy", params(0.0f, 0, 1.0f, 0.0f)},
            {"temperature 0.8", params(0.8f, 0, 1.0f, 0.0f)},
            {"temperature 0.8 + top_p 0.9", params(0.8f, 0, 0.9f, 0.0f)},
            {"top_k 40", params(1.0f, 40, 1.0f, 0.0f)},
            {"min_p 0.05", params(1.0f, 0, 1.0f, 0.05f)},
            {"T 0.8 + top_k 40 + top_p 0.9", params(0.8f, 40, 0.9f, 0.0f)},
            {"T 0.8 + top_p 0.9 + min_p 0.05", params(0.8f, 0, 0.9f, 0.05f)},
            {"T 0.8 + top_p 0.9 + logprobs", params(0.8f, 0, 0.9f, 0.0f, true)},
        };
        std::printf("sampler, %d logits ~ N(0, %.1f), median of %d runs, exp kernels: %s\n", vocab,
                    static_cast<double>(scale), runs, strata::cpu::isa_name(strata::cpu::best_isa()));
        for (const Case& c : cases) {
            Sampler sampler(c.params, vocab);
            const int batch = 50;
            for (int i = 0; i < batch; ++i) sampler.sample(logits.data());  // warm-up: scratch, caches
            std::vector<double> wall_us, cpu_us;
            for (int r = 0; r < runs; ++r) {
                const auto t0 = Clock::now();
                const double c0 = thread_cpu_us();
                for (int i = 0; i < batch; ++i) sampler.sample(logits.data());
                cpu_us.push_back((thread_cpu_us() - c0) / batch);
                wall_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / batch);
            }
            std::printf("  %-34s %8.1f us/token wall  %8.1f us/token cpu\n", c.name, median(wall_us), median(cpu_us));
        }
    } catch (const strata::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
