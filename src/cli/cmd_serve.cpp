// `strata serve -m MODEL [options]`: the HTTP server of one lane over a supervised engine child
// process (docs/serve.md). Engine options are passed through to `strata engine`.
#include <malloc.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string_view>
#include <thread>

#include "cli/commands.h"
#include "cli/expert_flags.h"
#include "devices/backend_factory.h"
#include "serve/server.h"
#include "util/error.h"

namespace strata::cli {

std::string self_exe() {
    char buf[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) throw Error("cannot find the strata binary (/proc/self/exe)");
    return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> read_secret_lines(const std::string& path, const std::string& flag) {
    std::ifstream in(path);
    if (!in) throw Error(flag + " " + path + ": cannot read the file");
    std::vector<std::string> out;
    std::string line;
    while (std::getline(in, line)) {
        const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
        if (b != std::string::npos) out.push_back(line.substr(b, e - b + 1));
        OPENSSL_cleanse(line.data(), line.size());
    }
    if (out.empty()) throw Error(flag + " " + path + ": the file holds no key");
    return out;
}

namespace {
int g_argc = 0;
char** g_argv = nullptr;

void overwrite(char* p, size_t n) {
    volatile char* v = p;  // memory the kernel reads for /proc/PID: never optimized away
    for (size_t i = 0; i < n; ++i) v[i] = 'x';
}
}  // namespace

void keep_process_args(int argc, char** argv) {
    g_argc = argc;
    g_argv = argv;
}

void wipe_secret_args(const std::vector<std::string>& secrets) {
    for (int i = 1; i < g_argc && g_argv; ++i) {
        char* arg = g_argv[i];
        if (!arg) continue;
        const std::string_view a(arg);
        for (const std::string& s : secrets) {
            if (s.empty()) continue;
            if (a == s) {
                overwrite(arg, a.size());
                break;
            }
            const size_t eq = a.find('=');
            if (a.rfind("--", 0) == 0 && eq != std::string_view::npos && a.substr(eq + 1) == s) {
                overwrite(arg + eq + 1, a.size() - eq - 1);
                break;
            }
        }
    }
}

void wipe_secret_env(const char* name) {
    if (char* v = std::getenv(name)) overwrite(v, std::strlen(v));
    ::unsetenv(name);
}

namespace {

struct ServeArgs {
    serve::ServeOptions o;
    std::vector<std::string> keys;
    std::string key_file;
    std::string device = "cpu", vram_budget;
    ExpertFlags experts;
    int threads = 2, max_batched_tokens = 512, prefill_chunk = 256, spec_ngram = 0;
    int64_t ctx = 0, kv_mib = 2048, snapshot_mib = 1024;
    bool no_prefix_cache = false;
    int header_timeout_s = 10, keepalive_timeout_s = 30;
};

int run_serve(ServeArgs& a) {
    if (a.device != "cpu") {
        std::string why;
        if (!devices::cuda_usable(&why)) throw Error("--device " + a.device + ": " + why);
    }
    if (!a.vram_budget.empty()) (void)devices::parse_byte_size(a.vram_budget);  // refuse a bad size before starting
    auto& o = a.o;
    o.head_timeout = std::chrono::seconds(a.header_timeout_s);
    o.idle_timeout = std::chrono::seconds(a.keepalive_timeout_s);
    o.api_keys = a.keys;
    if (!a.key_file.empty())
        for (std::string& k : read_secret_lines(a.key_file, "--api-key-file")) o.api_keys.push_back(std::move(k));
    if (const char* env = std::getenv("STRATA_API_KEY"); env && *env && o.api_keys.empty()) o.api_keys.push_back(env);
    // Out of /proc/PID/cmdline and /proc/PID/environ (ps, other users' tools); the engine child
    // has no use for the clients' key.
    wipe_secret_args(a.keys);
    wipe_secret_env("STRATA_API_KEY");
    o.engine_argv = {self_exe(),
                     "engine",
                     "-m",
                     o.model_path,
                     "-t",
                     std::to_string(a.threads),
                     "--max-running",
                     std::to_string(o.parallel),
                     "--max-batched-tokens",
                     std::to_string(a.max_batched_tokens),
                     "--prefill-chunk",
                     std::to_string(a.prefill_chunk),
                     "--kv-mib",
                     std::to_string(a.kv_mib),
                     "--snapshot-mib",
                     std::to_string(a.snapshot_mib)};
    if (a.ctx > 0) o.engine_argv.insert(o.engine_argv.end(), {"--ctx", std::to_string(a.ctx)});
    if (a.no_prefix_cache) o.engine_argv.push_back("--no-prefix-cache");
    if (a.spec_ngram > 0) o.engine_argv.insert(o.engine_argv.end(), {"--spec-ngram", std::to_string(a.spec_ngram)});
    o.engine_argv.insert(o.engine_argv.end(), {"--device", a.device});
    if (!a.vram_budget.empty()) o.engine_argv.insert(o.engine_argv.end(), {"--vram-budget", a.vram_budget});
    {
        model::LoadOptions check;
        apply_expert_flags(a.experts, a.threads, check);  // refuse bad expert flags before starting
        for (std::string& s : expert_flag_args(a.experts)) o.engine_argv.push_back(std::move(s));
    }

    tune_malloc_for_http();
    block_stop_signals();
    // A file-size limit makes a write of the responses database fail (EFBIG: the store degrades
    // to memory) instead of killing serve.
    ::signal(SIGXFSZ, SIG_IGN);
    serve::Server server(o);
    server.start();
    server.bind();
    serve_until_signal(
        "serve", [&] { server.listen(); }, [&] { server.stop(); });
    std::fprintf(stderr, "serve: stopped\n");
    return 0;
}

}  // namespace

namespace {
sigset_t stop_signal_set() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    return set;
}
}  // namespace

void tune_malloc_for_http() {
#ifdef __GLIBC__
    if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 4);
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

void block_stop_signals() {
    const sigset_t set = stop_signal_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void serve_until_signal(const char* name, const std::function<void()>& listen, const std::function<void()>& stop) {
    block_stop_signals();
    const sigset_t set = stop_signal_set();
    std::thread waiter([&] {
        int sig = 0;
        sigwait(&set, &sig);
        std::fprintf(stderr, "%s: signal %d, stopping\n", name, sig);
        stop();
    });
    listen();
    // listen() returns after stop(): wake the waiter if it stopped for another reason.
    ::kill(::getpid(), SIGTERM);
    waiter.join();
}

void add_serve_command(CLI::App& app, Runner& run) {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("serve", "serve a model over HTTP: OpenAI and Anthropic APIs (docs/serve.md)");
    cmd->add_option("-m,--model", a->o.model_path, "GGUF model file")->required()->check(CLI::ExistingFile);
    cmd->add_option("--name", a->o.model_name, "model id clients use (default: the file name without .gguf)");
    cmd->add_option("--host", a->o.host, "address to bind (only the gateway should face the network)")->capture_default_str();
    cmd->add_option("--port", a->o.port, "port (0: any free one)")->check(CLI::Range(0, 65535))->capture_default_str();
    cmd->add_option("--api-key", a->keys, "accepted API key (repeatable; Bearer or x-api-key); also STRATA_API_KEY");
    cmd->add_option("--api-key-file", a->key_file, "accepted API keys, one per line (keeps them out of ps)");
    cmd->add_option("--parallel", a->o.parallel, "requests computed at once")->check(CLI::Range(1, 4096))->capture_default_str();
    cmd->add_option("--queue", a->o.max_queue, "requests that may wait beyond --parallel; more get 429/529")
        ->check(CLI::Range(0, 100000))
        ->capture_default_str();
    cmd->add_option("--max-body-mib", a->o.max_body_bytes, "largest request body, MiB")
        ->check(CLI::Range(int64_t{1}, int64_t{1024}))
        ->transform([](std::string s) { return std::to_string(std::stoll(s) << 20); });
    cmd->add_option("--max-connections", a->o.max_connections, "open connections at most (more get 503)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--max-connections-per-peer", a->o.max_connections_per_peer,
                    "open connections from one address at most (more get 503)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--header-timeout", a->header_timeout_s, "seconds for a request's head to arrive")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
    cmd->add_option("--keepalive-timeout", a->keepalive_timeout_s, "seconds an idle keep-alive connection stays open")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
    cmd->add_option("--responses-store", a->o.responses_store_max,
                    "Responses API responses kept for previous_response_id and GET (store: true; oldest go first; 0: none)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
        ->capture_default_str();
    cmd->add_option("--responses-store-mib", a->o.responses_store_bytes,
                    "memory the stored responses may take, MiB (default 256)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
        ->transform([](std::string s) { return std::to_string(std::stoll(s) << 20); });
    cmd->add_option("--responses-db", a->o.responses_db,
                    "SQLite file the stored responses are also kept in, so a restart keeps them (default: memory only)");
    cmd->add_option("--device", a->device, "cpu, cuda or cuda:N (the engine's compute device)")->capture_default_str();
    cmd->add_option("--vram-budget", a->vram_budget, "GPU memory the CUDA backend may use, e.g. 20G (default: free less 1 GiB)");
    add_expert_flags(cmd, &a->experts);
    cmd->add_option("-t,--threads", a->threads, "engine compute threads")->check(CLI::Range(1, 1024))->capture_default_str();
    cmd->add_option("--ctx", a->ctx, "positions per sequence (default: the model's, capped by KV memory)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
    cmd->add_option("--kv-mib", a->kv_mib, "paged KV memory, MiB")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
        ->capture_default_str();
    cmd->add_option("--snapshot-mib", a->snapshot_mib, "recurrent-state snapshots (hybrid models), MiB")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
        ->capture_default_str();
    cmd->add_option("--max-batched-tokens", a->max_batched_tokens, "tokens in one forward pass")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--prefill-chunk", a->prefill_chunk, "most prompt tokens of one sequence per step")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "do not reuse KV of earlier requests");
    cmd->add_option("--spec-ngram", a->spec_ngram,
                    "speculative decoding by prompt lookup: up to N drafted tokens a step, verified exactly (0: off)")
        ->check(CLI::Range(0, 16))
        ->capture_default_str();
    cmd->callback([&run, a] { run = [a] { return run_serve(*a); }; });
}

}  // namespace strata::cli
