// GEMV / small-batch matmul throughput of the CPU kernels, in GB/s of weight bytes, printed next to
// this machine's memory read bandwidth measured in the same run (a streaming read of a large
// buffer with the same thread counts).
//
// Each timed call multiplies one rows x cols weight matrix by `batch` activation rows; several
// copies of the matrix (together >= --min-mb, well past L3) are used in rotation so every call
// streams its weights from DRAM. Reported: median over --reps calls (and min), GB/s = weight
// bytes / time; for batch > 1 also tokens/s (= batch / time).
//
//   bench_gemv [--types q4_K,q8_0] [--threads 1,2] [--batch 1,8,16] [--reps 30] [--isa avx2]
//              [--rows 4096] [--cols 14336] [--min-mb 160] [--no-bw]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "util/cpu_features.h"
#include "util/fp16.h"
#include "util/thread_pool.h"

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (!item.empty()) out.push_back(item);
    }
    return out;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string loadavg() {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c;
    f >> a >> b >> c;
    return a + " " + b + " " + c;
}

// 64-byte aligned buffer that is never all zero pages (touched on creation).
struct Buffer {
    std::unique_ptr<uint8_t[]> raw;
    uint8_t* data = nullptr;
    size_t size = 0;
    explicit Buffer(size_t n) : raw(new uint8_t[n + 64]), size(n) {
        const auto addr = reinterpret_cast<uintptr_t>(raw.get());
        data = raw.get() + ((64 - addr % 64) % 64);
    }
};

// One weight row pattern per distinct row: quantised random floats where a quantiser exists,
// else random bytes with finite scale fields. Timing does not depend on the values.
std::vector<uint8_t> make_rows(quant::Type t, int64_t rows, int64_t cols) {
    const size_t rb = static_cast<size_t>(*quant::row_bytes(t, static_cast<uint64_t>(cols)));
    std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
    std::mt19937 rng(1234);
    if (quant::can_quantize(t)) {
        std::normal_distribution<float> nd(0.0f, 0.05f);
        std::vector<float> v(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            for (auto& x : v) x = nd(rng);
            quant::quantize_row(t, v.data(), out.data() + static_cast<size_t>(r) * rb, cols);
        }
        return out;
    }
    for (auto& b : out) b = static_cast<uint8_t>(rng());
    const auto& info = quant::type_info(t);
    const size_t bb = static_cast<size_t>(info.block_bytes);
    std::vector<size_t> halves;
    using namespace quant;
    switch (t) {
        case Type::Q2_K: halves = {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}; break;
        case Type::Q3_K: halves = {offsetof(BlockQ3_K, d)}; break;
        case Type::IQ2_XXS: halves = {offsetof(BlockIQ2_XXS, d)}; break;
        case Type::IQ2_XS: halves = {offsetof(BlockIQ2_XS, d)}; break;
        case Type::IQ2_S: halves = {offsetof(BlockIQ2_S, d)}; break;
        case Type::IQ3_XXS: halves = {offsetof(BlockIQ3_XXS, d)}; break;
        case Type::IQ3_S: halves = {offsetof(BlockIQ3_S, d)}; break;
        default: break;
    }
    for (size_t b = 0; b < out.size() / bb; ++b) {
        for (size_t off : halves) {
            const uint16_t h = f32_to_f16(0.01f);
            std::memcpy(out.data() + b * bb + off, &h, 2);
        }
        if (t == Type::MXFP4) out[b * bb] = 120;
    }
    return out;
}

// Sum of the whole 128-byte steps of a range, with AVX2 loads (the widest loads this
// baseline file may use, and only after the CPU check in read_bandwidth).
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t* p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    return static_cast<uint64_t>(_mm256_extract_epi64(a0, 0) + _mm256_extract_epi64(a0, 1) + _mm256_extract_epi64(a0, 2) +
                                 _mm256_extract_epi64(a0, 3));
}

// Streaming read of `bytes` split over the pool's threads; returns GB/s (median of reps).
double read_bandwidth(util::ThreadPool& pool, const Buffer& buf, int reps, double* best) {
    std::vector<double> gbs;
    volatile uint64_t sink = 0;
    const int64_t tasks = pool.size() * 8;
    const bool avx2 = util::isa_supported(util::Isa::Avx2);
    for (int rep = 0; rep < reps; ++rep) {
        std::vector<uint64_t> partial(static_cast<size_t>(tasks), 0);
        const auto t0 = Clock::now();
        pool.parallel_for(tasks, [&](int64_t task, int) {
            // Each task reads one contiguous slice (a remainder under 128 bytes is skipped).
            const size_t begin = buf.size * static_cast<size_t>(task) / static_cast<size_t>(tasks);
            const size_t end = buf.size * static_cast<size_t>(task + 1) / static_cast<size_t>(tasks);
            if (avx2) {
                partial[static_cast<size_t>(task)] = read_avx2(buf.data + begin, end - begin);
                return;
            }
            const auto* p = reinterpret_cast<const uint64_t*>(buf.data + begin);
            uint64_t s[8] = {};
            for (size_t i = 0; i + 8 <= (end - begin) / 8; i += 8) {
                for (int k = 0; k < 8; ++k) s[k] += p[i + static_cast<size_t>(k)];
            }
            partial[static_cast<size_t>(task)] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
        });
        const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
        uint64_t s = 0;
        for (auto v : partial) s += v;
        sink = sink + s;
        gbs.push_back(static_cast<double>(buf.size) / sec / 1e9);
    }
    *best = *std::max_element(gbs.begin(), gbs.end());
    return median(gbs);
}

struct Options {
    std::vector<std::string> types = {"q4_K",   "q8_0",    "q4_0",    "q5_K", "q6_K", "iq4_xs",
                                      "iq4_nl", "iq3_xxs", "iq2_xxs", "f16",  "bf16"};
    std::vector<int> threads = {1, 2};
    std::vector<int> batches = {1, 8, 16};
    int reps = 30;
    int64_t rows = 4096;
    int64_t cols = 14336;
    double min_mb = 160.0;
    std::string isa;
    bool measure_bw = true;
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "missing value after %s\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--types") {
            o.types = split(next());
        } else if (a == "--threads") {
            o.threads.clear();
            for (const auto& s : split(next())) o.threads.push_back(std::atoi(s.c_str()));
        } else if (a == "--batch") {
            o.batches.clear();
            for (const auto& s : split(next())) o.batches.push_back(std::atoi(s.c_str()));
        } else if (a == "--reps") {
            o.reps = std::max(1, std::atoi(next().c_str()));
        } else if (a == "--rows") {
            o.rows = std::atoll(next().c_str());
        } else if (a == "--cols") {
            o.cols = std::atoll(next().c_str());
        } else if (a == "--min-mb") {
            o.min_mb = std::atof(next().c_str());
        } else if (a == "--isa") {
            o.isa = next();
        } else if (a == "--no-bw") {
            o.measure_bw = false;
        } else {
            std::fprintf(
                stderr,
                "usage: bench_gemv [--types q4_K,q8_0] [--threads 1,2] [--batch 1,8,16] [--reps N] [--isa scalar|avx2|avx512]\n"
                "                  [--rows R] [--cols C] [--min-mb MB] [--no-bw]\n");
            std::exit(a == "--help" || a == "-h" ? 0 : 2);
        }
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const Options opt = parse(argc, argv);
    util::Isa isa = util::best_isa();
    if (!opt.isa.empty()) {
        const auto want = util::isa_from_name(opt.isa);
        if (!want || !util::isa_supported(*want)) {
            std::fprintf(stderr, "level %s is unknown or not supported by this CPU (best: %s)\n", opt.isa.c_str(),
                         util::isa_name(util::detected_isa()));
            return 2;
        }
        isa = *want;
    }
    const cpu::KernelSet& ks = cpu::kernel_set(isa);
    std::printf("bench_gemv: kernels %s (CPU supports up to %s), matrix %lld x %lld (rows x cols), %d reps, load avg %s\n",
                util::isa_name(isa), util::isa_name(util::detected_isa()), static_cast<long long>(opt.rows),
                static_cast<long long>(opt.cols), opt.reps, loadavg().c_str());

    // Memory read bandwidth with each thread count.
    std::vector<double> bw(opt.threads.size(), NAN);
    if (opt.measure_bw) {
        Buffer buf(static_cast<size_t>(512) << 20);
        std::memset(buf.data, 1, buf.size);
        for (size_t i = 0; i < opt.threads.size(); ++i) {
            util::ThreadPool pool(opt.threads[i]);
            double best = 0.0;
            read_bandwidth(pool, buf, 2, &best);  // warm-up
            bw[i] = read_bandwidth(pool, buf, 9, &best);
            std::printf("memory read bandwidth, %d thread(s): %.1f GB/s median, %.1f GB/s best\n", opt.threads[i], bw[i], best);
        }
    }

    std::printf("%-8s %7s %5s %10s %10s %9s %10s %9s\n", "type", "threads", "batch", "ms/call", "GB/s", "% of bw", "best GB/s",
                "tokens/s");
    for (const auto& name : opt.types) {
        const auto type = quant::type_from_name(name);
        if (!type || ks.dot_for(*type) == nullptr) {
            std::printf("%-8s (no kernel)\n", name.c_str());
            continue;
        }
        if (opt.cols % quant::type_info(*type).block_elems != 0) {
            std::printf("%-8s (cols not a multiple of the block)\n", name.c_str());
            continue;
        }
        const size_t rb = static_cast<size_t>(*quant::row_bytes(*type, static_cast<uint64_t>(opt.cols)));
        const size_t mat_bytes = rb * static_cast<size_t>(opt.rows);
        const int copies = std::max(2, static_cast<int>(std::ceil(opt.min_mb * 1e6 / static_cast<double>(mat_bytes))));
        // Distinct rows to tile the matrices with (timing is independent of the values).
        const int64_t pattern_rows = 16;
        const auto pattern = make_rows(*type, pattern_rows, opt.cols);
        std::vector<Buffer> mats;
        for (int m = 0; m < copies; ++m) {
            mats.emplace_back(mat_bytes);
            for (int64_t r = 0; r < opt.rows; ++r) {
                std::memcpy(mats.back().data + static_cast<size_t>(r) * rb,
                            pattern.data() + static_cast<size_t>(r % pattern_rows) * rb, rb);
            }
        }
        const int max_batch = *std::max_element(opt.batches.begin(), opt.batches.end());
        std::vector<float> x(static_cast<size_t>(max_batch * opt.cols));
        std::mt19937 rng(7);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& v : x) v = nd(rng);
        std::vector<float> y(static_cast<size_t>(max_batch * opt.rows));

        for (size_t ti = 0; ti < opt.threads.size(); ++ti) {
            util::ThreadPool pool(opt.threads[ti]);
            for (int batch : opt.batches) {
                std::vector<double> secs;
                for (int rep = -copies; rep < opt.reps; ++rep) {  // first pass over the copies: warm-up
                    const cpu::WeightMatrix w{*type, mats[static_cast<size_t>((rep + copies) % copies)].data, opt.rows, opt.cols};
                    const auto t0 = Clock::now();
                    cpu::matmul(w, x.data(), opt.cols, batch, y.data(), opt.rows, &pool, ks);
                    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
                    if (rep >= 0) secs.push_back(sec);
                }
                const double med = median(secs);
                const double best = *std::min_element(secs.begin(), secs.end());
                const double gbs = static_cast<double>(mat_bytes) / med / 1e9;
                char tok[32] = "";
                if (batch > 1) std::snprintf(tok, sizeof tok, "%9.1f", batch / med);
                std::printf("%-8s %7d %5d %10.3f %10.2f %8.0f%% %10.2f %9s\n", name.c_str(), opt.threads[ti], batch, med * 1e3,
                            gbs, 100.0 * gbs / bw[ti], static_cast<double>(mat_bytes) / best / 1e9, tok);
                std::fflush(stdout);
            }
        }
    }
    std::printf("load avg at end: %s\n", loadavg().c_str());
    return 0;
}
