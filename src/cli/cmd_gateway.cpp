// `strata gateway`: the process that faces the network, over one or more lanes (docs/gateway.md).
//   quick start:  strata gateway --upstream http://127.0.0.1:8080 [--listen HOST:PORT] [--api-key K | --keys FILE]
//   full setup:   strata gateway --config gateway.toml
//   keys:         strata gateway hash-key --name alice < secret   (a [[keys]] entry: the digest, never the secret)
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include <openssl/crypto.h>

#include "cli/commands.h"
#include "gateway/gateway.h"
#include "gateway/key_limiter.h"
#include "serve/api_shapes.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct GatewayArgs {
    std::string config_path, upstream, upstream_key, upstream_key_file, listen, keys_path, store = "default";
    std::vector<std::string> api_keys;
    bool debug_endpoints = false, no_long_context = false;
    int lane_wait_s = -1;
    std::string key_name = "default";
};

std::string default_store_path() {
    const char* state = std::getenv("XDG_STATE_HOME");
    const char* home = std::getenv("HOME");
    std::filesystem::path dir = state && *state ? std::filesystem::path(state) / "strata"
                                : home && *home ? std::filesystem::path(home) / ".local/state/strata"
                                                : std::filesystem::temp_directory_path() / "strata";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);  // when it cannot be made, the store says so and keeps to memory
    return (dir / "gateway-sessions.sqlite").string();
}

int run_gateway(GatewayArgs& a) {
    gateway::GatewayConfig c;
    if (!a.upstream_key_file.empty()) {
        if (!a.upstream_key.empty()) throw Error("give either --upstream-key or --upstream-key-file, not both");
        a.upstream_key = read_secret_lines(a.upstream_key_file, "--upstream-key-file").front();
    }
    if (!a.config_path.empty()) {
        if (!a.upstream.empty()) throw Error("give either --config or --upstream, not both");
        if (!a.upstream_key.empty())
            throw Error("--upstream-key goes with --upstream; in a config, give upstream_key in the lane's entry");
        c = gateway::load_gateway_config(a.config_path);
    } else {
        if (a.upstream.empty()) throw Error("no lanes: give --upstream URL (a running `strata serve`) or --config FILE");
        gateway::LaneConfig lane;
        lane.name = "default";
        lane.upstream = a.upstream;
        lane.upstream_key = a.upstream_key;
        lane.models = {"*"};
        c.lanes.push_back(lane);
    }
    if (!a.listen.empty()) gateway::parse_listen(a.listen, c.host, c.port, "--listen");
    if (a.debug_endpoints) c.debug_endpoints = true;
    if (a.lane_wait_s >= 0) c.limits.lane_wait_s = a.lane_wait_s;
    if (a.no_long_context) c.long_context.enabled = false;
    if (a.store != "default") c.long_context.store_path = a.store;
    else if (c.long_context.store_path.empty() && a.config_path.empty()) c.long_context.store_path = default_store_path();
    if (!a.keys_path.empty()) {
        auto keys = gateway::load_keys_file(a.keys_path);
        c.keys.insert(c.keys.end(), keys.begin(), keys.end());
    }
    if (const char* env = std::getenv("STRATA_API_KEY"); env && *env && a.api_keys.empty()) a.api_keys.push_back(env);
    // Out of /proc/PID/cmdline and /proc/PID/environ for the gateway's lifetime (ps shows them);
    // supervised lanes must not take the clients' key as their own.
    {
        std::vector<std::string> secrets = a.api_keys;
        secrets.push_back(a.upstream_key);
        wipe_secret_args(secrets);
        for (std::string& s : secrets) OPENSSL_cleanse(s.data(), s.size());
    }
    wipe_secret_env("STRATA_API_KEY");
    for (size_t i = 0; i < a.api_keys.size(); ++i) {
        gateway::KeyConfig k;
        k.name = a.api_keys.size() == 1 ? a.key_name : a.key_name + "-" + std::to_string(i + 1);
        k.sha256_hex = serve::hex_of(serve::sha256_digest(a.api_keys[i]));
        c.keys.push_back(k);
        OPENSSL_cleanse(a.api_keys[i].data(), a.api_keys[i].size());  // only the digest stays
    }
    a.api_keys.clear();
    for (auto& lane : c.lanes)
        if (!lane.command.empty() && lane.command[0] == "strata") lane.command[0] = self_exe();
    gateway::validate(c);

    tune_malloc_for_http();
    block_stop_signals();  // before any thread (lanes' monitors) starts
    ::signal(SIGPIPE, SIG_IGN);
    // A file-size limit makes a session-store write fail (EFBIG: the store degrades) instead of
    // killing the gateway.
    ::signal(SIGXFSZ, SIG_IGN);

    // No temporary files: lanes' tokenizers are loaded from memory.
    gateway::Gateway gw(c);
    gw.start();
    gw.bind();
    serve_until_signal(
        "gateway", [&] { gw.listen(); }, [&] { gw.stop(); });
    std::fprintf(stderr, "gateway: stopped\n");
    return 0;
}

}  // namespace

void add_gateway_command(CLI::App& app, Runner& run) {
    auto a = std::make_shared<GatewayArgs>();
    CLI::App* cmd = app.add_subcommand(
        "gateway", "the network-facing gateway: lanes, keys, limits, 1M-token conversations (docs/gateway.md)");
    cmd->add_option("--config", a->config_path,
                    "TOML config: listen, TLS, lanes, keys, limits, long context (examples/gateway.toml)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--upstream", a->upstream,
                    "quick start: one lane, a running `strata serve` at this http:// URL; every model id goes there");
    cmd->add_option("--upstream-key-file", a->upstream_key_file,
                    "a file holding the --upstream-key (its first line; keeps it out of ps)");
    cmd->add_option("--upstream-key", a->upstream_key,
                    "the key the --upstream lane itself expects (its --api-key), sent as x-api-key");
    cmd->add_option("--listen", a->listen, "HOST:PORT to listen on (default 127.0.0.1:8090; 0.0.0.0:PORT to face the network)");
    cmd->add_option("--api-key", a->api_keys, "accepted key (repeatable; also STRATA_API_KEY); kept only as a digest");
    cmd->add_option("--key-name", a->key_name, "the name --api-key keys go by in logs, /concurrency and the lane")
        ->capture_default_str();
    cmd->add_option("--keys", a->keys_path, "TOML file of [[keys]] entries (name, sha256; see `strata gateway hash-key`)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--store", a->store,
                    "session store (SQLite) for long conversations; \"\": in memory only (default: "
                    "$XDG_STATE_HOME/strata/gateway-sessions.sqlite)");
    cmd->add_flag("--no-long-context", a->no_long_context,
                  "never abridge: a conversation beyond the lane's window gets the lane's 400");
    cmd->add_flag("--debug-endpoints", a->debug_endpoints, "serve POST /v1/gateway/assemble to loopback clients");
    cmd->add_option("--lane-wait", a->lane_wait_s,
                    "seconds a request waits for a dead lane before a 503 (default 30; [limits] lane_wait_s)")
        ->check(CLI::Range(0, 3600));
    cmd->callback([&run, a, cmd] {
        if (cmd->get_subcommands().empty()) run = [a] { return run_gateway(*a); };
    });

    auto name = std::make_shared<std::string>();
    CLI::App* hash =
        cmd->add_subcommand("hash-key", "read a secret key on stdin; print a [[keys]] entry with its SHA-256 digest");
    hash->add_option("--name", *name, "the key's name")->required();
    hash->callback([&run, name] {
        run = [name] {
            std::string secret;
            std::getline(std::cin, secret);
            while (!secret.empty() && (secret.back() == '\r' || secret.back() == ' ')) secret.pop_back();
            if (secret.empty()) throw Error("hash-key: no key on stdin");
            std::fputs(gateway::hashed_key_entry(*name, secret).c_str(), stdout);
            return 0;
        };
    });
}

}  // namespace strata::cli
