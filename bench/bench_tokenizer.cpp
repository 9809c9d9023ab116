// Tokenizer throughput: bench_tokenizer -m MODEL FILE [--runs N] [--threads T] [--no-special]
// Encodes the whole file N times (after one warm-up) and prints the median tokens/s and MB/s,
// single-threaded and with encode_parallel on T threads (default 2). Also times decode.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class Fn>
double median_seconds(int runs, Fn&& fn) {
    fn();  // warm-up: page in the text, fill caches
    std::vector<double> t;
    for (int r = 0; r < runs; ++r) {
        const auto t0 = Clock::now();
        fn();
        t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int usage() {
    std::fprintf(stderr, "usage: bench_tokenizer -m MODEL FILE [--runs N] [--threads T] [--no-special]\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::string model, file;
    int runs = 9, threads = 2;
    bool parse_special = true;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-m" && i + 1 < argc) model = argv[++i];
        else if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
        else if (a == "--threads" && i + 1 < argc) threads = std::max(1, std::atoi(argv[++i]));
        else if (a == "--no-special") parse_special = false;
        else if (!a.empty() && a[0] != '-' && file.empty()) file = a;
        else return usage();
    }
    if (model.empty() || file.empty()) return usage();
    try {
        std::ifstream in(file, std::ios::binary);
        if (!in) throw strata::Error(file + ": cannot open");
        std::stringstream ss;
        ss << in.rdbuf();
        const std::string text = ss.str();

        const auto t_load0 = Clock::now();
        const auto gguf_file = strata::gguf::File::open(model);
        const auto tok = strata::tokenizer::Tokenizer::from_gguf(*gguf_file);
        const double load_s = std::chrono::duration<double>(Clock::now() - t_load0).count();

        std::vector<int32_t> ids;
        const double serial = median_seconds(runs, [&] { ids = tok->encode(text, parse_special); });
        std::vector<int32_t> ids_par;
        const double parallel = median_seconds(runs, [&] { ids_par = tok->encode_parallel(text, threads, parse_special); });
        std::string decoded;
        const double dec = median_seconds(runs, [&] { decoded = tok->decode(ids); });

        const double mb = static_cast<double>(text.size()) / 1e6;
        const double n = static_cast<double>(ids.size());
        std::printf("text: %s, %.2f MB, %zu tokens (%.2f bytes/token); vocabulary load %.0f ms\n", file.c_str(), mb, ids.size(),
                    static_cast<double>(text.size()) / n, load_s * 1e3);
        std::printf("encode, 1 thread:           %8.2f ms  %6.2f M tokens/s  %7.2f MB/s  (median of %d)\n", serial * 1e3,
                    n / serial / 1e6, mb / serial, runs);
        std::printf("encode_parallel, %d threads: %8.2f ms  %6.2f M tokens/s  %7.2f MB/s  %s\n", threads, parallel * 1e3,
                    n / parallel / 1e6, mb / parallel, ids_par == ids ? "(ids equal)" : "(IDS DIFFER)");
        std::printf("decode:                     %8.2f ms  %6.2f M tokens/s\n", dec * 1e3, n / dec / 1e6);
        return ids_par == ids ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
        return 1;
    }
}
