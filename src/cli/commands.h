// Subcommands of the strata binary. Each registers its flags on the CLI11 app and returns the
// callback that runs it; main.cpp only dispatches.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace strata::cli {

using Runner = std::function<int()>;

// `strata gguf info|dequant ...`
void add_gguf_commands(CLI::App& app, Runner& run);

// `strata template -m MODEL [--template FILE]`: chat request JSON on stdin, prompt on stdout.
void add_template_command(CLI::App& app, Runner& run);

// `strata tokenize ...` and `strata detokenize ...`
void add_tokenize_commands(CLI::App& app, Runner& run);

// `strata generate ...`
void add_generate_command(CLI::App& app, Runner& run);

// `strata make-model ...`, `strata quantize ...`
void add_model_tool_commands(CLI::App& app, Runner& run);

// `strata convert HF_DIR OUT.gguf [--outtype ...]`
void add_convert_command(CLI::App& app, Runner& run);

// `strata engine -m MODEL ...`: the engine process (docs/protocol.md)
void add_engine_command(CLI::App& app, Runner& run);

// `strata serve -m MODEL ...`: HTTP server (OpenAI + Anthropic APIs) over a supervised engine
void add_serve_command(CLI::App& app, Runner& run);

// `strata gateway ...`: the network-facing gateway over lanes (docs/gateway.md)
void add_gateway_command(CLI::App& app, Runner& run);

// `strata bench serve ...`: load generator for OpenAI-compatible servers (vs the engine alone)
void add_bench_commands(CLI::App& app, Runner& run);

// Blocks SIGINT/SIGTERM in every thread but one, which calls stop() on the first; runs listen()
// until it returns (after stop(), or on its own). `name` prefixes the log lines.
void serve_until_signal(const char* name, const std::function<void()>& listen, const std::function<void()>& stop);
// The first half of it, for commands that start threads before listening (call it first).
void block_stop_signals();

// For the HTTP processes (serve, gateway; call before any thread starts), so that memory freed
// goes back to the system and RSS stays flat (issue #31's soak). glibc gives each thread that
// allocates an arena of its own, up to 8 per core: hundreds of workers taking requests in turn
// leave freed memory scattered over dozens of arenas (RSS crept ~2 MiB a minute with 16, flat
// with 2), so at most 4 unless MALLOC_ARENA_MAX says otherwise. And its mmap threshold rises
// to the size of the largest mmapped block freed, after which blocks that size (a lane's model
// info, a request body: MiBs) come from an arena and stay there when freed (+14 MiB at a lane's
// first restart), so it is fixed at 1 MiB unless MALLOC_MMAP_THRESHOLD_ says otherwise. These
// processes allocate little and not in hot loops.
void tune_malloc_for_http();

// The running strata binary (to start `strata engine` children); throws strata::Error.
std::string self_exe();

// Secrets from a file instead of argv (where `ps` shows them): one per line, blank lines and
// surrounding whitespace ignored. An Error naming `flag` and the file when it cannot be read or
// holds none.
std::vector<std::string> read_secret_lines(const std::string& path, const std::string& flag);

// main() hands over the process's own argv before parsing, so that secrets given on the command
// line can be overwritten where /proc/PID/cmdline (what `ps` shows) reads them.
void keep_process_args(int argc, char** argv);
// Overwrites with 'x', in the original argv strings, every argument that is one of `secrets` and
// the value of every `--flag=SECRET` argument: /proc/PID/cmdline no longer holds them. The parsed
// copies are not touched. Empty secrets are ignored.
void wipe_secret_args(const std::vector<std::string>& secrets);
// Overwrites the value of environment variable `name` with 'x' where it lies (the original
// environment block, which /proc/PID/environ reads) and then removes it from the environment
// (children do not inherit it). Read the value first.
void wipe_secret_env(const char* name);

}  // namespace strata::cli
