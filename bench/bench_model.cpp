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
//               [--vram-budget SIZE] [--ram-budget SIZE] [--expert-stats FILE] [--experts auto|on|off]
//               [--expert-slots N] [--expert-far F] [--expert-far-sweep F,F,...] [--prefill-balance-ab]
//               [--profile] [--verify K]
//
// With an expert store (the weights over --vram-budget, or --experts on): its split, and over the
// counted decode runs the hit rate, the pairs read in place, and the bytes the host executor read
// per token against the host's read bandwidth measured in the same run. --expert-far-sweep runs
// pp and tg again at each share of missing experts read in place (the same loaded model).
// --prefill-balance-ab runs them again with prefill's upload-or-host split from the cost model
// alone, then corrected from the layers' times again (ExpertStore::set_prefill_balance).
//
// -g: decode steps return only the greedy token ids (Backend::argmax_rows, as the engine runs
// greedy requests) instead of copying each logits row to the host.
//
// --profile (CPU backend): where a counted prefill and a decode step spend their time, per op and
// per part of the MoE op (util/phase_times.h), in ms per forward and as a share of it.
//
// --verify K (speculative decoding's cost): a step of k+1 positions of one sequence after the pp
// prompt, every row's argmax back, for k = 0..K (K <= -n), the median of -n steps each, and its
// ratio to one position.
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
#include "cli/expert_flags.h"
#include "devices/backend_factory.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "util/error.h"
#include "util/phase_times.h"
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

constexpr const char* kUsage =
    "usage: bench_model -m MODEL [-p N] [-n N] [-d N] [-r N] [-t N] [-b N] [-g] [--device cpu|cuda] [--vram-budget SIZE]\n"
    "       [--ram-budget SIZE] [--expert-stats FILE] [--experts auto|on|off] [--expert-slots N] [--expert-far F]\n"
    "       [--expert-far-sweep F,F,...] [--prefill-balance-ab] [--profile] [--verify K]\n";

int main(int argc, char** argv) {
    std::string path;
    int pp = 256, tg = 32, reps = 3, threads = 2, batch = 1, depth = -1;
    std::string device = "cpu", vram_budget;
    cli::ExpertFlags expert_flags;  // the same flags as generate/engine/serve take
    std::vector<double> far_sweep;  // --expert-far-sweep: decode again at each share
    bool balance_ab = false;        // --prefill-balance-ab
    bool greedy_ids = false;        // -g: decode steps return the greedy token, not the logits row
    bool profile = false;           // --profile: time per op of the CPU backend
    int verify = 0;                 // --verify K: a step of k+1 positions against one, k = 1..K
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
        else if (a == "--profile") profile = true;
        else if (a == "--verify") verify = std::atoi(next());
        else if (a == "--vram-budget") vram_budget = next();
        else if (a == "--ram-budget") expert_flags.ram_budget = next();
        else if (a == "--expert-stats") expert_flags.stats_file = next();
        else if (a == "--experts") expert_flags.mode = next();
        else if (a == "--expert-slots") expert_flags.slots = std::atoll(next());
        else if (a == "--expert-far") expert_flags.far = std::atof(next());
        else if (a == "--prefill-balance-ab") balance_ab = true;
        else if (a == "--expert-far-sweep") {
            std::string list = next();
            for (size_t at = 0; at < list.size();) {
                const size_t comma = std::min(list.find(',', at), list.size());
                far_sweep.push_back(std::atof(list.substr(at, comma - at).c_str()));
                at = comma + 1;
            }
        } else {
            std::fprintf(stderr, "%s", kUsage);
            return 2;
        }
    }
    if (path.empty()) {
        std::fprintf(stderr, "%s", kUsage);
        return 2;
    }
    if (verify < 0 || verify > 16 || verify > tg) {
        std::fprintf(stderr, "--verify must be within 0-16 and at most -n\n");
        return 2;
    }
    try {
        devices::BackendOptions bo;
        bo.device = device;
        bo.threads = threads;
        if (!vram_budget.empty()) bo.vram_budget = devices::parse_byte_size(vram_budget);
        const auto backend = devices::make_backend(bo);
        backend::Backend& be = *backend;
        const bool gpu = device != "cpu";
        model::LoadOptions lo;
        cli::apply_expert_flags(expert_flags, threads, lo);
        auto m = model::Model::load(path, be, lo);
        auto* cpu_be = dynamic_cast<backend::CpuBackend*>(&be);
        if (profile && cpu_be == nullptr) throw Error("--profile times the CPU backend's ops; this run uses " + device);
        util::PhaseTimes pp_times, tg_times;  // --profile: the counted runs' ops
        const auto time_ops = [&](util::PhaseTimes* t) {
            if (profile) cpu_be->set_phase_times(t);
        };
        experts::ExpertStore* store = m->expert_store();
        if (!far_sweep.empty() && store == nullptr) throw Error("--expert-far-sweep needs the expert store");
        if (balance_ab && store == nullptr) throw Error("--prefill-balance-ab needs the expert store");
        experts::StoreStats tg_stats;  // the store's counters over the counted decode runs
        double tg_secs = 0;
        int64_t tg_tokens = 0;
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
        // The batch's sequences: made here with an expert store, whose slots take what VRAM the
        // first forward finds free (as an engine's caches are made before its first forward);
        // else after the single-sequence runs (see below).
        std::vector<std::unique_ptr<model::SequenceState>> batch_seqs;
        std::vector<model::SequenceState*> batch_ptrs;
        const auto make_batch_seqs = [&] {
            for (int s = 0; s < batch; ++s) {
                batch_seqs.push_back(m->new_sequence(64 + tg + 1));
                batch_ptrs.push_back(batch_seqs.back().get());
            }
        };
        if (store != nullptr && batch > 1) make_batch_seqs();
        // The pp/tg repetitions, again for each share of --expert-far-sweep (pp_runs, tg_runs and
        // the store's counters restart for each).
        const auto measure = [&] {
            pp_runs.clear();
            tg_runs.clear();
            tg_stats = {};
            tg_secs = 0;
            tg_tokens = 0;
            pp_times.clear();
            tg_times.clear();
            for (int r = 0; r < reps + 1; ++r) {  // first repetition warms the page cache, not counted
                m->reset_sequence(*pp_seq);
                model::SequenceState* s = pp_seq.get();
                model::Batch b;
                prompt(b, pp);
                if (r > 0) time_ops(&pp_times);
                auto t0 = std::chrono::steady_clock::now();
                m->forward(b, {&s, 1}, logits.data());
                const double pp_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                time_ops(nullptr);
                int at = pp;
                if (own_depth) {  // tg at its own depth, in a fresh sequence
                    m->reset_sequence(*tg_seq);
                    s = tg_seq.get();
                    prompt(b, depth);
                    if (depth > 0) m->forward(b, {&s, 1}, logits.data());
                    at = depth;
                }
                const experts::StoreStats before = store != nullptr ? store->stats() : experts::StoreStats{};
                if (r > 0) time_ops(&tg_times);
                t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < tg; ++i) {
                    b.clear();
                    b.add((i * 104729 + 7) % static_cast<int>(c.n_vocab), at + i, 0, true);
                    decode(b, {&s, 1}, logits.data());
                }
                const double tg_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                time_ops(nullptr);
                if (r > 0 && store != nullptr) {
                    const experts::StoreStats after = store->stats();
                    tg_stats.pairs_vram += after.pairs_vram - before.pairs_vram;
                    tg_stats.pairs_host += after.pairs_host - before.pairs_host;
                    tg_stats.pairs_far += after.pairs_far - before.pairs_far;
                    tg_stats.host_bytes += after.host_bytes - before.host_bytes;
                    tg_stats.host_busy_s += after.host_busy_s - before.host_busy_s;
                    tg_secs += tg_s;
                    tg_tokens += tg;
                }
                if (r > 0) {
                    pp_runs.push_back(pp / pp_s);
                    tg_runs.push_back(tg / tg_s);
                }
            }
        };
        measure();
        const double tg_med = median(tg_runs);
        std::printf("pp%d: %.1f t/s (median of %d)\n", pp, median(pp_runs), reps);
        if (store != nullptr) std::printf("prefill host cost scale: %.3f\n", store->stats().prefill_host_scale);
        std::printf("tg%d @ d%d: %.2f t/s (median of %d)\n", tg, depth >= 0 ? depth : pp, tg_med, reps);
        if (profile) {
            // "moe" includes its parts (moe.*) and the residual add + norm it ends with. A counted
            // run is `tokens` tokens in `steps` forwards at the rate in runs.
            const auto report = [](const char* what, const util::PhaseTimes& t, const std::vector<double>& runs, int tokens,
                                   int steps) {
                if (runs.empty()) return;
                double total_s = 0;
                for (double rate : runs) total_s += tokens / rate;
                const auto forwards = static_cast<int64_t>(runs.size()) * steps;
                const double per = 1e3 * total_s / static_cast<double>(forwards);
                double ops_s = 0;
                for (const auto& e : t.sorted())
                    if (std::strchr(e.name, '.') == nullptr) ops_s += e.seconds;
                std::printf("profile %s: %.2f ms a forward, ops %.1f %% of it (moe.* are parts of moe)\n", what, per,
                            100.0 * ops_s / total_s);
                for (const auto& e : t.sorted())
                    std::printf("  %-16s %8.3f ms %5.1f %%  %6.1f calls\n", e.name,
                                1e3 * e.seconds / static_cast<double>(forwards), 100.0 * e.seconds / total_s,
                                static_cast<double>(e.calls) / static_cast<double>(forwards));
            };
            report(("pp" + std::to_string(pp)).c_str(), pp_times, pp_runs, pp, 1);
            report(("tg" + std::to_string(tg)).c_str(), tg_times, tg_runs, tg, tg);
        }
        const auto store_line = [&] {
            if (store == nullptr || tg_tokens == 0) return;
            const double bw = read_bandwidth(threads);
            const double per_tok = static_cast<double>(tg_stats.host_bytes) / static_cast<double>(tg_tokens);
            const double rate = per_tok * static_cast<double>(tg_tokens) / tg_secs / 1e9;
            std::printf(
                "decode with the expert store: %.1f %% of pairs from VRAM, %.1f %% read in place from host memory by the GPU; "
                "host "
                "executor read %.1f MB/token, busy %.0f %% of the step time, %.1f GB/s over the whole step (%.0f %% of the %.1f "
                "GB/s read bandwidth at %d threads), %.1f GB/s while busy\n",
                100.0 * tg_stats.hit_rate(),
                100.0 * static_cast<double>(tg_stats.pairs_far) /
                    static_cast<double>(std::max<uint64_t>(1, tg_stats.pairs_vram + tg_stats.pairs_far + tg_stats.pairs_host)),
                per_tok / 1e6, 100.0 * tg_stats.host_busy_s / tg_secs, rate, 100.0 * rate / bw, bw, threads,
                static_cast<double>(tg_stats.host_bytes) / std::max(tg_stats.host_busy_s, 1e-9) / 1e9);
        };
        if (store != nullptr) std::printf("%s\n", store->describe().c_str());
        store_line();
        for (double f : far_sweep) {
            m->expert_store()->set_far_fraction(f);
            measure();
            std::printf("expert-far %.2f: pp%d %.1f t/s, tg%d %.2f t/s (medians of %d)\n", f, pp, median(pp_runs), tg,
                        median(tg_runs), reps);
            store_line();
        }
        for (const bool on : balance_ab ? std::vector<bool>{false, true} : std::vector<bool>{}) {
            store->set_prefill_balance(on);
            measure();
            std::printf("prefill-balance %s: pp%d %.1f t/s, tg%d %.2f t/s (medians of %d; host cost scale %.3f)\n",
                        on ? "on" : "off", pp, median(pp_runs), tg, median(tg_runs), reps, store->stats().prefill_host_scale);
        }
        if (verify > 0) {
            // Speculative decoding's verify step (Scheduler::accept_drafts): the last token and
            // k drafted ones, k+1 positions of one sequence after a pp-token prompt, every row's
            // argmax back; `tg` steps at each k (the same positions rewritten), median step time.
            model::SequenceState* s = pp_seq.get();
            model::Batch b;
            std::vector<int32_t> vids(static_cast<size_t>(verify + 1));
            double one = 0;
            for (int k = 0; k <= verify; ++k) {
                m->reset_sequence(*s);
                prompt(b, pp);
                m->forward(b, {&s, 1}, logits.data());
                std::vector<double> steps;
                for (int i = 0; i < tg + 1; ++i) {
                    b.clear();
                    for (int j = 0; j <= k; ++j) b.add((i * 104729 + 31 * j + 7) % static_cast<int>(c.n_vocab), pp + j, 0, true);
                    const auto t0 = std::chrono::steady_clock::now();
                    m->forward(b, {&s, 1}, nullptr, vids.data());
                    if (i > 0) steps.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
                }
                const double ms = 1e3 * median(steps);
                if (k == 0) one = ms;
                std::printf("verify k=%d: %.3f ms a step of %d positions (%.2fx one)\n", k, ms, k + 1, ms / one);
            }
        }
        // Freed before the batch runs below, whose many small caches then take their place
        // (kept alive, batch 16 after pp512 measured 12 % slower in the same process).
        pp_seq.reset();
        tg_seq.reset();
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
            if (batch_seqs.empty()) make_batch_seqs();
            auto& seqs = batch_seqs;
            auto& ptrs = batch_ptrs;
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
