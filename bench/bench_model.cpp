// Prefill and decode speed of one sequence on the CPU backend, measured as llama-bench does:
// pp = a prompt of N tokens in one batch (tokens/s), tg = N tokens generated one at a time
// (tokens/s), each repeated and reported as the median. Also prints the weight bytes a decode
// step reads (attention, router, shared and the used experts' rows) and the bandwidth that
// implies, beside a streaming-read measurement of this machine taken in the same run.
//
// tg runs after the pp prompt (at depth pp) unless -d sets its depth: -d 0 starts from an empty
// cache, as llama-bench's tg does, and llama-bench -d N matches -d N here.
//
//   bench_model -m MODEL [-p 256] [-n 32] [-d DEPTH] [-r 3] [-t 2] [-b N] [-g] [--device cpu|cuda]
//
// -g: decode steps return only the greedy token ids (Backend::argmax_rows, as the engine runs
// greedy requests) instead of copying each logits row to the host.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu_backend.h"
#include "bench_util.h"
#include "devices/backend_factory.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "util/thread_pool.h"

using namespace strata;

namespace {

using bench::median;

// GB/s of a streaming read over a buffer far larger than the caches, with n threads.
double read_bandwidth(int threads) {
    const size_t n = size_t{1} << 28;  // 1 GiB of uint32
    static std::vector<uint32_t> buf;
    if (buf.size() != n) {
        buf.assign(n, 1u);
    }
    util::ThreadPool pool(threads);
    std::vector<double> runs;
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(threads, [&](int64_t task, int) {
            const size_t begin = n / static_cast<size_t>(threads) * static_cast<size_t>(task);
            const size_t end = task + 1 == threads ? n : begin + n / static_cast<size_t>(threads);
            uint64_t s = 0;
            for (size_t i = begin; i < end; i += 16) s += buf[i] ^ buf[i + 4] ^ buf[i + 8] ^ buf[i + 12];
            sums[static_cast<size_t>(task)] = s;
        });
        runs.push_back(static_cast<double>(n * 4) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                       1e9);
    }
    volatile uint64_t sink = sums[0];
    (void)sink;
    return median(runs);
}

}  // namespace

int main(int argc, char** argv) {
    std::string path;
    int pp = 256, tg = 32, reps = 3, threads = 2, batch = 1, depth = -1;
    std::string device = "cpu";
    bool greedy_ids = false;  // -g: decode steps return the greedy token, not the logits row
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
        else if (a == "-p") pp = std::atoi(next());
        else if (a == "-n") tg = std::atoi(next());
        else if (a == "-d") depth = std::atoi(next());
        else if (a == "-r") reps = std::atoi(next());
        else if (a == "-t") threads = std::atoi(next());
        else if (a == "-b") batch = std::atoi(next());
        else if (a == "--device") device = next();
        else if (a == "-g") greedy_ids = true;
        else {
            std::fprintf(stderr,
                         "usage: bench_model -m MODEL [-p N] [-n N] [-d N] [-r N] [-t N] [-b N] [-g] [--device cpu|cuda]\n");
            return 2;
        }
    }
    if (path.empty()) {
        std::fprintf(stderr, "usage: bench_model -m MODEL [-p N] [-n N] [-d N] [-r N] [-t N] [-b N] [-g] [--device cpu|cuda]\n");
        return 2;
    }
    try {
        devices::BackendOptions bo;
        bo.device = device;
        bo.threads = threads;
        const auto backend = devices::make_backend(bo);
        backend::Backend& be = *backend;
        const bool gpu = device != "cpu";
        auto m = model::Model::load(path, be);
        const auto& c = m->config();
        // Bytes a decode step reads: everything but the unused experts and the embedding table
        // (one row of it).
        uint64_t expert_bytes = 0, other = 0;
        for (const auto& t : m->file().tensors()) {
            if (t.name.find("_exps.") != std::string::npos) expert_bytes += t.n_bytes;
            else if (t.name != "token_embd.weight" || c.tied_output) other += t.n_bytes;
        }
        const double per_token = static_cast<double>(other) + static_cast<double>(expert_bytes) *
                                                                  static_cast<double>(c.n_expert_used) /
                                                                  static_cast<double>(c.n_expert);
        std::printf("model: %s (%s, %lld layers, %lld/%lld experts), %.2f GiB of weights, %d threads\n", path.c_str(),
                    c.arch_name.c_str(), static_cast<long long>(c.n_layer), static_cast<long long>(c.n_expert_used),
                    static_cast<long long>(c.n_expert), static_cast<double>(m->weight_bytes()) / (1 << 30), threads);
        if (gpu) std::printf("device: %s\n", device.c_str());
        std::vector<float> logits(static_cast<size_t>(c.n_vocab));
        std::vector<int32_t> ids(static_cast<size_t>(std::max(batch, 1)));
        // Decode steps as the engine runs them: the logits rows to the host, or with -g (greedy
        // requests) only the argmax ids (Backend::argmax_rows).
        const auto decode = [&](const model::Batch& b, std::span<model::SequenceState* const> seqs, float* out) {
            if (greedy_ids) m->forward(b, seqs, nullptr, ids.data());
            else m->forward(b, seqs, out);
        };
        std::vector<double> pp_runs, tg_runs;
        const auto prompt = [&](model::Batch& b, int n) {
            b.clear();
            for (int i = 0; i < n; ++i) b.add((i * 7919 + 13) % static_cast<int>(c.n_vocab), i, 0, i + 1 == n);
        };
        const int capacity = std::max(pp, depth) + tg + 1;
        // The sequences live across repetitions, reset in between, as a server's cache memory
        // does: a new allocation per repetition would move the cache and make every decode
        // graph be recorded anew (once per repetition, more with a caching allocator's churn).
        const bool own_depth = depth >= 0 && depth != pp;  // else tg continues the pp sequence
        auto pp_seq = m->new_sequence(capacity);
        auto tg_seq = own_depth ? m->new_sequence(capacity) : nullptr;
        for (int r = 0; r < reps + 1; ++r) {  // first repetition warms the page cache, not counted
            m->reset_sequence(*pp_seq);
            model::SequenceState* s = pp_seq.get();
            model::Batch b;
            prompt(b, pp);
            auto t0 = std::chrono::steady_clock::now();
            m->forward(b, {&s, 1}, logits.data());
            const double pp_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            int at = pp;
            if (own_depth) {  // tg at its own depth, in a fresh sequence
                m->reset_sequence(*tg_seq);
                s = tg_seq.get();
                prompt(b, depth);
                if (depth > 0) m->forward(b, {&s, 1}, logits.data());
                at = depth;
            }
            t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < tg; ++i) {
                b.clear();
                b.add((i * 104729 + 7) % static_cast<int>(c.n_vocab), at + i, 0, true);
                decode(b, {&s, 1}, logits.data());
            }
            const double tg_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (r > 0) {
                pp_runs.push_back(pp / pp_s);
                tg_runs.push_back(tg / tg_s);
            }
        }
        // Freed before the batch runs below, whose many small caches then take their place
        // (kept alive, batch 16 after pp512 measured 12 % slower in the same process).
        pp_seq.reset();
        tg_seq.reset();
        const double tg_med = median(tg_runs);
        std::printf("pp%d: %.1f t/s (median of %d)\n", pp, median(pp_runs), reps);
        std::printf("tg%d @ d%d: %.2f t/s (median of %d)\n", tg, depth >= 0 ? depth : pp, tg_med, reps);
        if (gpu) {
            // A decode step reads the weights once (a D2D copy both reads and writes its bytes).
            const double bw = devices::cuda_copy_bandwidth(0);
            std::printf("decode reads %.1f MB/token -> %.1f GB/s; device copy bandwidth %.1f GB/s: %.0f%%\n", per_token / 1e6,
                        per_token * tg_med / 1e9, bw, 100.0 * per_token * tg_med / 1e9 / bw);
        } else {
            const double bw = read_bandwidth(threads);
            std::printf("decode reads %.1f MB/token -> %.1f GB/s; machine read bandwidth (%d threads) %.1f GB/s: %.0f%%\n",
                        per_token / 1e6, per_token * tg_med / 1e9, threads, bw, 100.0 * per_token * tg_med / 1e9 / bw);
        }
        if (batch > 1) {
            // Aggregate decode: `batch` sequences (each prefilled with 64 tokens) step together.
            std::vector<double> runs;
            std::vector<std::unique_ptr<model::SequenceState>> seqs;
            std::vector<model::SequenceState*> ptrs;
            for (int s = 0; s < batch; ++s) {
                seqs.push_back(m->new_sequence(64 + tg + 1));
                ptrs.push_back(seqs.back().get());
            }
            for (int r = 0; r < reps + 1; ++r) {
                model::Batch b;
                for (int s = 0; s < batch; ++s) {
                    m->reset_sequence(*seqs[static_cast<size_t>(s)]);
                    for (int i = 0; i < 64; ++i) b.add((i * 7919 + 13 * s) % static_cast<int>(c.n_vocab), i, s, i + 1 == 64);
                }
                std::vector<float> out(static_cast<size_t>(batch * c.n_vocab));
                m->forward(b, ptrs, out.data());
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < tg; ++i) {
                    b.clear();
                    for (int s = 0; s < batch; ++s) b.add((i * 104729 + 7 * s) % static_cast<int>(c.n_vocab), 64 + i, s, true);
                    decode(b, ptrs, out.data());
                }
                const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                if (r > 0) runs.push_back(static_cast<double>(batch) * tg / secs);
            }
            std::printf("tg%d at batch %d: %.1f t/s aggregate (median of %d)\n", tg, batch, median(runs), reps);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_model: %s\n", e.what());
        return 1;
    }
    return 0;
}
