// `strata engine -m MODEL [options]`: the engine process. Commands arrive as JSON lines on stdin,
// events leave as JSON lines on stdout (docs/protocol.md); logs go to stderr. A reader thread
// splits stdin into lines; the engine thread parses them and owns the scheduler and all output,
// so events of one request are always in order. End of input drains the work in flight, then exits 0.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "cli/commands.h"
#include "cli/expert_flags.h"
#include "devices/backend_factory.h"
#include "model/model.h"
#include "runtime/engine_protocol.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::cli {

namespace {

using namespace strata::runtime;

struct EngineArgs {
    std::string model;
    int threads = 2;
    std::string device = "cpu", vram_budget;
    ExpertFlags experts;
    SchedulerOptions sched;
    int64_t kv_mib = 2048, snapshot_mib = 1024;
};

// Writes events to stdout; remembers which requests asked for logprobs and when they started.
class StdoutSink : public EventSink {
public:
    explicit StdoutSink(const tokenizer::Tokenizer& tok) : tok_(tok) {}
    void track(const std::string& id, bool logprobs) { reqs_[id] = {logprobs, std::chrono::steady_clock::now()}; }
    void on_tokens(const std::string& id, const std::vector<GeneratedToken>& toks, const std::string& text) override {
        const auto it = reqs_.find(id);
        line(tokens_event(tok_, id, toks, text, it != reqs_.end() && it->second.logprobs));
    }
    void on_admitted(const std::string& id, int64_t cached_tokens) override { line(admitted_event(id, cached_tokens)); }
    void on_pooled(const std::string& id, const std::vector<float>& hidden, const std::vector<float>& token_logits) override {
        line(pooled_event(id, hidden, token_logits));
    }
    void on_done(const std::string& id, FinishReason reason, const Usage& u, const std::string& detail) override {
        line(done_event(id, reason, u, detail));
        const auto it = reqs_.find(id);
        double ms = 0;
        if (it != reqs_.end()) {
            ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - it->second.start).count();
            reqs_.erase(it);
        }
        std::fprintf(stderr, "engine: %s %s: %lld prompt tokens (%lld cached), %lld generated, %.0f ms%s%s\n", id.c_str(),
                     finish_reason_name(reason), static_cast<long long>(u.prompt_tokens), static_cast<long long>(u.cached_tokens),
                     static_cast<long long>(u.completion_tokens), ms, reason == FinishReason::Error ? ": " : "",
                     reason == FinishReason::Error ? detail.c_str() : "");
    }
    void line(const std::string& s) {
        std::lock_guard<std::mutex> lock(stdout_mu());
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fputc('\n', stdout);
    }
    void flush() {
        std::lock_guard<std::mutex> lock(stdout_mu());
        if (std::fflush(stdout) != 0 || std::ferror(stdout)) throw Error("stdout closed: the client went away");
    }
    // The reader thread answers pings while the engine thread writes events: whole lines.
    static std::mutex& stdout_mu() {
        static std::mutex mu;
        return mu;
    }

private:
    struct Info {
        bool logprobs;
        std::chrono::steady_clock::time_point start;
    };
    const tokenizer::Tokenizer& tok_;
    std::unordered_map<std::string, Info> reqs_;
};

// Lines from stdin, handed to the engine thread. An overlong line is not buffered: it arrives
// as nullopt and is reported.
struct LineQueue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::optional<std::string>> lines;
    bool eof = false;
};

// When the engine thread's current step began (steady-clock ns; 0: between steps), for pings.
std::atomic<int64_t> g_step_started{0};

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// {"op":"ping"} is answered here, on the reader thread, at once: the client's heartbeat sees a
// stopped process (no answer) and a step that does not end (step_ms grows) apart from a busy one.
void answer_ping() {
    const int64_t started = g_step_started.load();
    const int64_t step_ms = started == 0 ? 0 : (now_ns() - started) / 1000000;
    std::lock_guard<std::mutex> lock(StdoutSink::stdout_mu());
    std::fprintf(stdout, "{\"event\":\"pong\",\"step_ms\":%lld}\n", static_cast<long long>(step_ms));
    std::fflush(stdout);
}

void read_lines(LineQueue& q) {
    std::string line;
    bool overlong = false;
    int c;
    auto push = [&](std::optional<std::string> s) {
        std::lock_guard<std::mutex> lock(q.mu);
        q.lines.push_back(std::move(s));
        q.cv.notify_one();
    };
    while ((c = std::getchar()) != EOF) {
        if (c == '\n') {
            if (!overlong && line == R"({"op":"ping"})") {
                answer_ping();
                line.clear();
                continue;
            }
            if (overlong) push(std::nullopt);
            else if (!line.empty()) push(std::move(line));
            line.clear();
            overlong = false;
        } else if (!overlong) {
            line.push_back(static_cast<char>(c));
            if (line.size() > kMaxLineBytes) {
                overlong = true;
                line.clear();
                line.shrink_to_fit();
            }
        }
    }
    if (!line.empty() && !overlong) push(std::move(line));
    std::lock_guard<std::mutex> lock(q.mu);
    q.eof = true;
    q.cv.notify_one();
}

int run_engine(EngineArgs& a) {
    std::signal(SIGPIPE, SIG_IGN);
    devices::BackendOptions bo;
    bo.device = a.device;
    bo.threads = a.threads;
    if (!a.vram_budget.empty()) bo.vram_budget = devices::parse_byte_size(a.vram_budget);
    const auto be = devices::make_backend(bo);
    const auto t0 = std::chrono::steady_clock::now();
    model::LoadOptions lo;
    apply_expert_flags(a.experts, a.threads, lo);
    auto model = model::Model::load(a.model, *be, lo);
    const auto tok = tokenizer::Tokenizer::from_gguf(model->file());
    a.sched.kv.kv_bytes = a.kv_mib << 20;
    a.sched.kv.snapshot_bytes = a.snapshot_mib << 20;
    Scheduler sched(*model, *tok, a.sched);
    const auto& c = model->config();
    const SchedulerStats st = sched.stats();
    std::fprintf(
        stderr,
        "engine: %s (%s, %lld layers), %.1f MiB of weights, loaded in %.0f ms; KV: %d blocks of %d positions "
        "(%lld positions per sequence at most), %d state snapshots; %d running at most, %d tokens per step, %d threads\n",
        a.model.c_str(), c.arch_name.c_str(), static_cast<long long>(c.n_layer),
        static_cast<double>(model->weight_bytes()) / (1 << 20),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), st.kv_blocks, st.block_size,
        static_cast<long long>(st.max_context), st.snapshot_capacity, sched.options().max_running,
        sched.options().max_batched_tokens, a.threads);

    StdoutSink sink(*tok);
    sink.line(ready_event(sched));
    sink.flush();

    LineQueue q;
    std::thread reader(read_lines, std::ref(q));
    reader.detach();  // blocked in getchar at exit; the process ends with it
    bool shutdown = false;
    while (!shutdown) {
        std::deque<std::optional<std::string>> lines;
        bool eof;
        {
            std::unique_lock<std::mutex> lock(q.mu);
            if (!sched.has_work()) q.cv.wait(lock, [&] { return !q.lines.empty() || q.eof; });
            lines.swap(q.lines);
            eof = q.eof;
        }
        for (const std::optional<std::string>& l : lines) {
            if (!l) {
                sink.line(error_event("", "command line longer than " + std::to_string(kMaxLineBytes >> 20) + " MiB"));
                continue;
            }
            ParsedLine p = parse_command(*l, sched);
            if (!p.command) {
                sink.line(error_event(p.id, p.error));
                continue;
            }
            Command& cmd = *p.command;
            switch (cmd.op) {
                case Command::Op::Submit: {
                    const bool lp = cmd.request.sampling.logprobs || cmd.request.sampling.top_logprobs > 0;
                    const std::string id = cmd.id;
                    try {
                        sched.submit(std::move(cmd.request), &sink);
                        sink.track(id, lp);
                    } catch (const Error& e) {
                        sink.line(error_event(id, e.what()));
                    }
                    break;
                }
                case Command::Op::Cancel:
                    if (!sched.cancel(cmd.id)) sink.line(error_event(cmd.id, "no request '" + cmd.id + "' in flight"));
                    break;
                case Command::Op::Stats: sink.line(stats_event(sched.stats(), cmd.id)); break;
                case Command::Op::Shutdown: shutdown = true; break;
            }
            if (shutdown) break;
        }
        if (shutdown) {
            sched.cancel_all(FinishReason::Cancelled, "engine shutting down");
            break;
        }
        if (sched.has_work()) {
            g_step_started = now_ns();
            sched.step();
            g_step_started = 0;
        }
        sink.flush();
        if (eof && !sched.has_work()) break;
    }
    sink.line(R"({"event":"bye"})");
    sink.flush();
    std::fprintf(stderr, "engine: exit\n");
    std::fflush(stderr);
    std::quick_exit(0);  // the reader thread may still sit in getchar
}

}  // namespace

void add_engine_command(CLI::App& app, Runner& run) {
    auto a = std::make_shared<EngineArgs>();
    CLI::App* cmd =
        app.add_subcommand("engine", "run the engine process: JSON-lines protocol on stdin/stdout (docs/protocol.md)");
    cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
    cmd->add_option("-t,--threads", a->threads, "compute threads")->check(CLI::Range(1, 1024));
    cmd->add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--vram-budget", a->vram_budget, "GPU memory the CUDA backend may use, e.g. 20G (default: free less 1 GiB)");
    add_expert_flags(cmd, &a->experts);
    cmd->add_option("--max-running", a->sched.max_running, "sequences computed at once")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd->add_option("--max-batched-tokens", a->sched.max_batched_tokens, "tokens in one forward pass")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--prefill-chunk", a->sched.prefill_chunk, "most prompt tokens of one sequence per step")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--spec-ngram", a->sched.spec_ngram,
                    "speculative decoding by prompt lookup: up to N drafted tokens a step, verified exactly (0: off)")
        ->check(CLI::Range(0, 16))
        ->capture_default_str();
    cmd->add_option("--ctx", a->sched.max_context, "positions per sequence (default: the model's, capped by KV memory)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
    cmd->add_option("--kv-mib", a->kv_mib, "memory for the paged KV cache, MiB")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
        ->capture_default_str();
    cmd->add_option("--block-size", a->sched.kv.block_size, "positions per KV block")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd->add_option("--snapshot-mib", a->snapshot_mib, "memory for recurrent-state snapshots of hybrid models, MiB")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
        ->capture_default_str();
    cmd->add_option("--snapshot-interval", a->sched.snapshot_interval,
                    "hybrid models: also snapshot every N prompt tokens (0: prompt ends only)")
        ->check(CLI::Range(0, 1 << 30))
        ->capture_default_str();
    cmd->add_flag("!--no-prefix-cache", a->sched.prefix_cache, "do not reuse KV of earlier requests");
    cmd->callback([&run, a] { run = [a] { return run_engine(*a); }; });
}

}  // namespace strata::cli
