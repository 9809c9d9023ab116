// What a gateway runs with: where it listens, its lanes, keys, limits and long-context settings.
// Filled from the command line (quick start: one upstream lane) or from a TOML file
// (docs/gateway.md has every key; examples/gateway.toml runs from the repository).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::gateway {

struct LaneConfig {
    std::string name;
    // Either an upstream URL (http://host:port of a running `strata serve`) or a command line the
    // gateway starts and supervises (a `strata serve ...` without --host/--port: the gateway adds
    // --host 127.0.0.1 --port 0 and reads the port the lane prints).
    std::string upstream;
    std::vector<std::string> command;
    std::vector<std::string> models;  // model ids routed here (aliases too); "*": any id no other lane names
    std::string fallback;             // a lane that takes this one's requests while it is down
    std::string cpus;                 // supervised lanes: CPU list to pin to ("0-7,16")
    std::string gpu;                  // supervised lanes: CUDA_VISIBLE_DEVICES
    std::string upstream_key;         // the key the lane itself expects, if any (sent as x-api-key)
};

struct KeyConfig {
    std::string name;                 // what logs, /concurrency and the lane see
    std::string sha256_hex;           // digest of the secret; the secret itself is never stored
    int max_concurrency = 0;          // 0: limits.max_concurrency_per_key
    double requests_per_minute = -1;  // < 0: limits.requests_per_minute
};

struct LimitsConfig {
    int max_concurrency_per_key = 16;  // requests of one key in flight; more wait in its queue
    int queue_per_key = 64;            // waiting requests of one key; more get 429 / 529
    double requests_per_minute = 0;    // per key; 0: unlimited
    int64_t max_body_bytes = 64ll << 20;
    int lane_wait_s = 30;  // how long a request waits for a dead lane to come back
    int http_threads = 0;  // handler threads; 0: 512
    // The HTTP layer (net/http_server.h): connections in total and from one address; seconds for
    // a request head, a body, an idle keep-alive, and output the client does not read.
    int max_connections = 4096;
    int max_connections_per_peer = 256;
    int header_timeout_s = 10;
    int body_timeout_s = 60;
    int keepalive_timeout_s = 30;
    int write_timeout_s = 60;
    int max_header_kib = 16;
    int max_headers = 100;
    // A lane that answered /health and then answers nothing (not even a 503) for this long is
    // dead: its calls in flight end, a supervised one is killed and restarted.
    int lane_dead_s = 6;
    // Deadlines of a call to a lane: its first body byte (a whole answer's only bytes; a stream's
    // opening event) and then the longest silence between bytes. Both must outlast the longest
    // prefill (an OpenAI stream is silent from its opening chunk to its first token); a hung lane
    // is found sooner by lane_dead_s.
    int upstream_first_byte_s = 1800;
    int upstream_idle_s = 900;
};

struct LongContextConfig {
    bool enabled = true;
    double recent_fraction = 0.25;  // of the window, for the latest turns kept verbatim
    std::string store_path;         // SQLite session store; "": sessions kept in memory only
    int64_t store_max_bytes = 1ll << 30;
    int64_t cache_max_bytes = 1ll << 30;   // in-memory sessions of all lanes together
    int64_t default_output_tokens = 4096;  // reserved for the answer when a request names no max
    std::string rerank_lane;               // a lane whose /v1/rerank reorders retrieval's pool ("": BM25 alone)
    int64_t rerank_timeout_ms = 5000;      // its answer's first byte at most this late, else BM25 alone
    std::string embed_lane;                // a lane whose /v1/embeddings adds dense ranks to retrieval ("": none)
    int64_t embed_timeout_ms = 30000;      // each of its answers' first byte at most this late
    int64_t embed_budget_ms = 15000;       // a request embeds its new chunks for at most this long (the rest: later turns)
    std::string embed_instruction = "Given a web search query, retrieve relevant passages that answer the query";
    int64_t embed_dimensions = 0;  // the vectors' leading dimensions kept (0: all)
};

struct GatewayConfig {
    std::string host = "127.0.0.1";
    int port = 8090;
    std::string tls_cert, tls_key;  // both set: HTTPS
    bool debug_endpoints = false;   // POST /v1/gateway/assemble (loopback clients only)
    std::vector<LaneConfig> lanes;
    std::vector<KeyConfig> keys;  // empty: no authentication
    LimitsConfig limits;
    LongContextConfig long_context;
};

// Parses a TOML config. Throws strata::Error "PATH: problem" (unknown keys are errors too, so a
// typo is not silently ignored).
GatewayConfig load_gateway_config(const std::string& path);
// A keys file: [[keys]] tables as in the config. Throws strata::Error.
std::vector<KeyConfig> load_keys_file(const std::string& path);
// Checks lanes (names unique, upstream or command, fallbacks exist) and keys. Throws strata::Error.
void validate(const GatewayConfig& config);
// "HOST:PORT" -> host, port. Throws strata::Error naming `what`.
void parse_listen(const std::string& text, std::string& host, int& port, const std::string& what);

}  // namespace strata::gateway
