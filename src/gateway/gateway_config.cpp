#include "gateway/gateway_config.h"

#include <cpptoml.h>

#include <algorithm>
#include <set>

#include "util/error.h"

namespace strata::gateway {

namespace {

// Reads typed values of one TOML table, naming the file and the table in every error, and
// rejecting keys it was not asked about.
class TableReader {
public:
    TableReader(std::shared_ptr<cpptoml::table> t, std::string file, std::string where)
        : t_(std::move(t)), file_(std::move(file)), where_(std::move(where)) {}

    template <typename T>
    void get(const std::string& key, T& out) {
        seen_.insert(key);
        if (!t_->contains(key)) return;
        if constexpr (std::is_same_v<T, int>) {
            auto v = t_->get_as<int64_t>(key);
            if (!v || *v < 0 || *v > (int64_t{1} << 31) - 1) fail(key, "a non-negative integer");
            out = static_cast<int>(*v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
            auto v = t_->get_as<int64_t>(key);
            if (!v || *v < 0) fail(key, "a non-negative integer");
            out = *v;
        } else if constexpr (std::is_same_v<T, double>) {
            auto v = t_->get_as<double>(key);
            if (!v) {
                auto i = t_->get_as<int64_t>(key);
                if (!i) fail(key, "a number");
                out = static_cast<double>(*i);
            } else {
                out = *v;
            }
        } else if constexpr (std::is_same_v<T, bool>) {
            auto v = t_->get_as<bool>(key);
            if (!v) fail(key, "true or false");
            out = *v;
        } else if constexpr (std::is_same_v<T, std::string>) {
            auto v = t_->get_as<std::string>(key);
            if (!v) fail(key, "a string");
            out = *v;
        } else {
            auto v = t_->get_array_of<std::string>(key);
            if (!v) fail(key, "an array of strings");
            out = *v;
        }
    }
    std::shared_ptr<cpptoml::table> table(const std::string& key) {
        seen_.insert(key);
        if (!t_->contains(key)) return nullptr;
        auto sub = t_->get_table(key);
        if (!sub) fail(key, "a table ([" + key + "])");
        return sub;
    }
    std::shared_ptr<cpptoml::table_array> tables(const std::string& key) {
        seen_.insert(key);
        if (!t_->contains(key)) return nullptr;
        auto arr = t_->get_table_array(key);
        if (!arr) fail(key, "an array of tables ([[" + key + "]])");
        return arr;
    }
    // Every key of the table must have been asked for.
    void finish() const {
        for (const auto& [key, value] : *t_)
            if (!seen_.count(key)) throw Error(file_ + ": unknown key '" + key + "'" + (where_.empty() ? "" : " in " + where_));
    }

private:
    [[noreturn]] void fail(const std::string& key, const std::string& expected) const {
        throw Error(file_ + ": '" + key + "'" + (where_.empty() ? "" : " in " + where_) + " must be " + expected);
    }
    std::shared_ptr<cpptoml::table> t_;
    std::string file_, where_;
    std::set<std::string> seen_;
};

std::shared_ptr<cpptoml::table> parse_toml(const std::string& path) {
    try {
        return cpptoml::parse_file(path);
    } catch (const cpptoml::parse_exception& e) {
        throw Error(path + ": " + e.what());
    }
}

std::vector<KeyConfig> read_keys(TableReader& root, const std::string& path) {
    std::vector<KeyConfig> keys;
    if (auto arr = root.tables("keys")) {
        for (const auto& t : *arr) {
            TableReader r(t, path, "[[keys]] #" + std::to_string(keys.size() + 1));
            KeyConfig k;
            r.get("name", k.name);
            r.get("sha256", k.sha256_hex);
            r.get("max_concurrency", k.max_concurrency);
            r.get("requests_per_minute", k.requests_per_minute);
            r.finish();
            keys.push_back(std::move(k));
        }
    }
    return keys;
}

}  // namespace

void parse_listen(const std::string& text, std::string& host, int& port, const std::string& what) {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) throw Error(what + " '" + text + "' must be HOST:PORT");
    host = text.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    try {
        size_t used = 0;
        port = std::stoi(text.substr(colon + 1), &used);
        if (used != text.size() - colon - 1 || port < 0 || port > 65535) throw std::out_of_range("port");
    } catch (const std::exception&) {
        throw Error(what + " '" + text + "': the port must be a number 0-65535");
    }
}

GatewayConfig load_gateway_config(const std::string& path) {
    auto doc = parse_toml(path);
    TableReader root(doc, path, "");
    GatewayConfig c;
    if (auto t = root.table("server")) {
        TableReader r(t, path, "[server]");
        std::string listen;
        r.get("listen", listen);
        if (!listen.empty()) parse_listen(listen, c.host, c.port, path + ": [server] listen");
        r.get("tls_cert", c.tls_cert);
        r.get("tls_key", c.tls_key);
        r.get("debug_endpoints", c.debug_endpoints);
        r.finish();
    }
    if (auto t = root.table("limits")) {
        TableReader r(t, path, "[limits]");
        r.get("max_concurrency_per_key", c.limits.max_concurrency_per_key);
        r.get("queue_per_key", c.limits.queue_per_key);
        r.get("requests_per_minute", c.limits.requests_per_minute);
        int64_t mib = c.limits.max_body_bytes >> 20;
        r.get("max_body_mib", mib);
        c.limits.max_body_bytes = mib << 20;
        r.get("lane_wait_s", c.limits.lane_wait_s);
        r.get("lane_dead_s", c.limits.lane_dead_s);
        r.get("upstream_first_byte_s", c.limits.upstream_first_byte_s);
        r.get("upstream_idle_s", c.limits.upstream_idle_s);
        r.get("http_threads", c.limits.http_threads);
        r.get("max_connections", c.limits.max_connections);
        r.get("max_connections_per_peer", c.limits.max_connections_per_peer);
        r.get("header_timeout_s", c.limits.header_timeout_s);
        r.get("body_timeout_s", c.limits.body_timeout_s);
        r.get("keepalive_timeout_s", c.limits.keepalive_timeout_s);
        r.get("write_timeout_s", c.limits.write_timeout_s);
        r.get("max_header_kib", c.limits.max_header_kib);
        r.get("max_headers", c.limits.max_headers);
        r.finish();
    }
    if (auto t = root.table("long_context")) {
        TableReader r(t, path, "[long_context]");
        r.get("enabled", c.long_context.enabled);
        r.get("recent_fraction", c.long_context.recent_fraction);
        r.get("store", c.long_context.store_path);
        int64_t mib = c.long_context.store_max_bytes >> 20;
        r.get("store_max_mib", mib);
        c.long_context.store_max_bytes = mib << 20;
        int64_t cache_mib = c.long_context.cache_max_bytes >> 20;
        r.get("cache_max_mib", cache_mib);
        c.long_context.cache_max_bytes = cache_mib << 20;
        r.get("default_output_tokens", c.long_context.default_output_tokens);
        r.get("rerank_lane", c.long_context.rerank_lane);
        r.get("rerank_timeout_ms", c.long_context.rerank_timeout_ms);
        r.get("embed_lane", c.long_context.embed_lane);
        r.get("embed_timeout_ms", c.long_context.embed_timeout_ms);
        r.get("embed_budget_ms", c.long_context.embed_budget_ms);
        r.get("embed_instruction", c.long_context.embed_instruction);
        r.get("embed_dimensions", c.long_context.embed_dimensions);
        r.finish();
    }
    if (auto arr = root.tables("lanes")) {
        for (const auto& t : *arr) {
            TableReader r(t, path, "[[lanes]] #" + std::to_string(c.lanes.size() + 1));
            LaneConfig l;
            r.get("name", l.name);
            r.get("upstream", l.upstream);
            r.get("command", l.command);
            r.get("models", l.models);
            r.get("fallback", l.fallback);
            r.get("cpus", l.cpus);
            r.get("gpu", l.gpu);
            r.get("upstream_key", l.upstream_key);
            r.finish();
            c.lanes.push_back(std::move(l));
        }
    }
    c.keys = read_keys(root, path);
    root.finish();
    try {
        validate(c);
    } catch (const Error& e) {
        throw Error(path + ": " + e.what());
    }
    return c;
}

std::vector<KeyConfig> load_keys_file(const std::string& path) {
    auto doc = parse_toml(path);
    TableReader root(doc, path, "");
    auto keys = read_keys(root, path);
    root.finish();
    if (keys.empty()) throw Error(path + ": no [[keys]] entries");
    return keys;
}

void validate(const GatewayConfig& c) {
    if (c.lanes.empty()) throw Error("no lanes: give --upstream URL or [[lanes]] in a config");
    std::set<std::string> names, ids;
    for (const auto& l : c.lanes) {
        if (l.name.empty()) throw Error("a lane has no name");
        if (!names.insert(l.name).second) throw Error("two lanes are named '" + l.name + "'");
        if (l.upstream.empty() == l.command.empty())
            throw Error("lane '" + l.name + "' needs exactly one of upstream or command");
        if (!l.upstream.empty() && l.upstream.rfind("http://", 0) != 0)
            throw Error("lane '" + l.name + "': upstream '" + l.upstream +
                        "' must be an http:// URL (lanes are local; only the gateway faces the network)");
        if (l.models.empty())
            throw Error("lane '" + l.name + "' routes no models (models = [\"name\", \"alias\", ...] or [\"*\"])");
        for (const auto& m : l.models)
            if (!ids.insert(m).second) throw Error("model id '" + m + "' is routed to two lanes");
    }
    for (const auto& l : c.lanes)
        if (!l.fallback.empty() && (!names.count(l.fallback) || l.fallback == l.name))
            throw Error("lane '" + l.name + "': fallback '" + l.fallback + "' is not another lane");
    std::set<std::string> key_names;
    for (const auto& k : c.keys) {
        if (k.name.empty()) throw Error("a key has no name");
        if (!key_names.insert(k.name).second) throw Error("two keys are named '" + k.name + "'");
        if (k.sha256_hex.size() != 64 || !std::all_of(k.sha256_hex.begin(), k.sha256_hex.end(),
                                                      [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)); }))
            throw Error("key '" + k.name + "': sha256 must be 64 hex digits (make it with `strata gateway hash-key`)");
    }
    if (c.tls_cert.empty() != c.tls_key.empty()) throw Error("TLS needs both tls_cert and tls_key");
    if (!c.long_context.rerank_lane.empty() &&
        std::none_of(c.lanes.begin(), c.lanes.end(), [&](const LaneConfig& l) { return l.name == c.long_context.rerank_lane; }))
        throw Error("long_context.rerank_lane: no lane is named '" + c.long_context.rerank_lane + "'");
    if (c.long_context.rerank_timeout_ms < 1 || c.long_context.rerank_timeout_ms > 600000)
        throw Error("long_context.rerank_timeout_ms must be within 1-600000");
    const LongContextConfig& lc = c.long_context;
    if (!lc.embed_lane.empty() &&
        std::none_of(c.lanes.begin(), c.lanes.end(), [&](const LaneConfig& l) { return l.name == lc.embed_lane; }))
        throw Error("long_context.embed_lane: no lane is named '" + lc.embed_lane + "'");
    if (lc.embed_timeout_ms < 1 || lc.embed_timeout_ms > 600000)
        throw Error("long_context.embed_timeout_ms must be within 1-600000");
    if (lc.embed_budget_ms < 0 || lc.embed_budget_ms > 600000)
        throw Error("long_context.embed_budget_ms must be within 0-600000");
    if (lc.embed_dimensions < 0 || lc.embed_dimensions > 65536)
        throw Error("long_context.embed_dimensions must be within 0-65536");
    if (lc.embed_instruction.size() > 4096) throw Error("long_context.embed_instruction: at most 4096 bytes");
    if (c.long_context.recent_fraction < 0 || c.long_context.recent_fraction > 0.9)
        throw Error("long_context.recent_fraction must be within 0-0.9");
    if (c.limits.max_concurrency_per_key < 1) throw Error("limits.max_concurrency_per_key must be at least 1");
    const LimitsConfig& l = c.limits;
    if (l.max_connections < 1 || l.max_connections_per_peer < 1)
        throw Error("limits.max_connections and limits.max_connections_per_peer must be at least 1");
    if (l.header_timeout_s < 1 || l.body_timeout_s < 1 || l.keepalive_timeout_s < 1 || l.write_timeout_s < 1)
        throw Error("limits.header_timeout_s, body_timeout_s, keepalive_timeout_s and write_timeout_s must be at least 1");
    if (l.max_header_kib < 1 || l.max_header_kib > 1024 || l.max_headers < 1 || l.max_headers > 10000)
        throw Error("limits.max_header_kib must be within 1-1024 and limits.max_headers within 1-10000");
    if (c.limits.lane_dead_s < 2) throw Error("limits.lane_dead_s must be at least 2 (a /health probe may take a second)");
    if (c.limits.upstream_first_byte_s < 1 || c.limits.upstream_idle_s < 1)
        throw Error("limits.upstream_first_byte_s and limits.upstream_idle_s must be at least 1");
}

}  // namespace strata::gateway
