// Sampler cost per token: bench_sampler [--runs N] [--vocab V] [--scale S] [--device cuda [--rows R]]
// (STRATA_ISA=scalar: the baseline exp kernels instead of AVX2.)
// --device: the cost of one decode step's sampling for R rows (default 1) whose logits are on
// that backend, both ways the engine can do it: the rows copied to the host for
// Sampler::sample, and Backend::sample_rows with Sampler::sample_row (the whole row only where
// the summary cannot decide); medians of N runs of 20 steps each.
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

#include "devices/backend_factory.h"
#include "runtime/sampler.h"
#include "util/cpu_features.h"
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

// One decode step's sampling of n_rows rows on the backend, both ways (see the top).
int rows_on_device(const std::string& device, int n_rows, const std::vector<float>& logits, const std::vector<Case>& cases,
                   int runs) {
    namespace backend = strata::backend;
    namespace devices = strata::devices;
    devices::BackendOptions bo;
    bo.device = device;
    const auto be = devices::make_backend(bo);
    const int64_t vocab = static_cast<int64_t>(logits.size());
    backend::Buffer rows(be.get(), static_cast<size_t>(n_rows * vocab));
    for (int r = 0; r < n_rows; ++r) {  // each row the same values, rotated
        std::vector<float> row(logits.size());
        std::rotate_copy(logits.begin(), logits.begin() + (r * 7919) % vocab, logits.end(), row.begin());
        be->copy_from_host(row.data(), rows.data() + r * vocab, row.size());
    }
    std::vector<float> host(static_cast<size_t>(n_rows * vocab));
    std::printf("sampling %d rows of %lld logits on %s, per decode step, median of %d runs of 20 steps\n", n_rows,
                static_cast<long long>(vocab), device.c_str(), runs);
    std::printf(
        "| sampling | rows to the host + Sampler::sample | sample_rows + Sampler::sample_row | ratio | whole rows "
        "|\n|---|---:|---:|---:|---:|\n");
    const int32_t k = backend::kMaxRowSampleTop;
    for (const Case& c : cases) {
        std::vector<Sampler> samplers;
        for (int r = 0; r < n_rows; ++r) samplers.emplace_back(c.params, static_cast<int32_t>(vocab));
        std::vector<backend::RowSampleRequest> req(static_cast<size_t>(n_rows));
        std::vector<backend::RowSample> out(static_cast<size_t>(n_rows));
        std::vector<backend::TokenLogit> top(static_cast<size_t>(n_rows * k));
        int64_t whole = 0;
        auto host_step = [&] {
            be->copy_to_host(rows.data(), host.data(), host.size());
            for (int r = 0; r < n_rows; ++r) samplers[static_cast<size_t>(r)].sample(host.data() + r * vocab);
        };
        auto rows_step = [&] {
            for (int r = 0; r < n_rows; ++r) {
                req[static_cast<size_t>(r)] = *samplers[static_cast<size_t>(r)].row_request();
                req[static_cast<size_t>(r)].row = r;
            }
            be->sample_rows(rows.data(), vocab, req, k, out.data(), top.data());
            for (int r = 0; r < n_rows; ++r) {
                Sampler& s = samplers[static_cast<size_t>(r)];
                const auto got = s.sample_row(out[static_cast<size_t>(r)],
                                              {top.data() + r * k, static_cast<size_t>(out[static_cast<size_t>(r)].n_top)});
                if (!got) {
                    be->copy_to_host(rows.data() + r * vocab, host.data(), static_cast<size_t>(vocab));
                    s.sample_adjusted(host.data());
                    ++whole;
                }
            }
        };
        auto time_steps = [&](auto&& step) {
            for (int i = 0; i < 3; ++i) step();  // warm-up
            std::vector<double> us;
            for (int r = 0; r < runs; ++r) {
                const auto t0 = Clock::now();
                for (int i = 0; i < 20; ++i) step();
                us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 20);
            }
            return median(us);
        };
        const double h = time_steps(host_step);
        whole = 0;
        const double d = time_steps(rows_step);
        std::printf("| %s | %.1f us | %.1f us | %.1fx | %lld |\n", c.name, h, d, h / d, static_cast<long long>(whole));
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int runs = 15;
    int32_t vocab = 151936;
    float scale = 2.0f;
    std::string device;
    int n_rows = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
        else if (a == "--vocab" && i + 1 < argc) vocab = std::max(1, std::atoi(argv[++i]));
        else if (a == "--scale" && i + 1 < argc) scale = static_cast<float>(std::atof(argv[++i]));
        else if (a == "--device" && i + 1 < argc) device = argv[++i];
        else if (a == "--rows" && i + 1 < argc) n_rows = std::max(1, std::atoi(argv[++i]));
        else {
            std::fprintf(stderr, "usage: bench_sampler [--runs N] [--vocab V] [--scale S] [--device cuda [--rows R]]\n");
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
        if (!device.empty()) return rows_on_device(device, n_rows, logits, cases, runs);
        std::printf("sampler, %d logits ~ N(0, %.1f), median of %d runs, exp kernels: %s\n", vocab, static_cast<double>(scale),
                    runs, strata::util::isa_name(strata::util::best_isa()));
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
