// `strata gateway`: the process that faces the network (docs/gateway.md). It authenticates keys,
// routes each request by model id to a lane (a `strata serve` over loopback), limits each key's
// concurrency and rate, guards the thinking budget and the lane's window (abridging conversations
// that do not fit by retrieval), streams the lane's answer through, and reports what is in
// flight (/concurrency) and how it went (/metrics).
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gateway/gateway_config.h"
#include "gateway/key_limiter.h"
#include "serve/chat_request.h"
#include "serve/metrics.h"

namespace strata::net {
class Server;
struct Request;
struct Response;
}  // namespace strata::net

namespace strata::gateway {

class Lane;
class LaneReranker;
class LaneEmbedder;
class WindowGuard;

class Gateway {
public:
    explicit Gateway(GatewayConfig config);
    ~Gateway();
    Gateway(const Gateway&) = delete;
    Gateway& operator=(const Gateway&) = delete;

    // Starts supervised lanes and waits for them (upstream lanes are waited for at most a
    // moment); opens the session store. Throws strata::Error.
    void start();
    int bind();     // throws strata::Error; returns the bound port
    void listen();  // until stop()
    void stop();

private:
    struct Flight;  // one request in flight
    void route();
    // The key's name ("" without keys), or nullopt after answering 401.
    std::optional<std::string> authenticate(const net::Request& req, net::Response& res, serve::ApiKind api);
    bool trusted_peer(const net::Request& req) const;  // loopback
    Lane* lane_for(const std::string& model) const;
    std::shared_ptr<Flight> begin_flight(const net::Request& req, serve::ApiKind api, const std::string& key);
    void register_flight(const std::shared_ptr<Flight>& f);
    void set_lane(Flight& f, const std::string& lane);
    void end_flight(const std::shared_ptr<Flight>& f, const std::string& outcome);
    void reply_error(net::Response& res, serve::ApiKind api, const serve::ApiError& e, const std::string& request_id);

    // POST routes that go to a lane: chat completions, completions, messages, count_tokens.
    void forward(const net::Request& req, net::Response& res, serve::ApiKind api, bool guard_window);
    void forward_authenticated(const net::Request& req, net::Response& res, serve::ApiKind api, bool guard_window,
                               const std::string& key_name, std::shared_ptr<Flight>& flight_out);
    // GET / DELETE /v1/responses/{id}, POST .../cancel, GET .../input_items: asked of the lanes.
    void stored_response(const net::Request& req, net::Response& res);
    void assemble_debug(const net::Request& req, net::Response& res);
    void models(const net::Request& req, net::Response& res);
    void health(net::Response& res);
    void concurrency(net::Response& res);
    void metrics(net::Response& res);

    GatewayConfig config_;
    std::vector<std::unique_ptr<Lane>> lanes_;
    std::map<std::string, Lane*> by_model_;
    Lane* any_model_ = nullptr;  // the lane of "*"
    KeyLimiter limiter_;
    std::unique_ptr<WindowGuard> guard_;
    std::unique_ptr<net::Server> http_;
    serve::Metrics metrics_;
    serve::Histogram assemble_seconds_{{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10}};
    // Abridged requests by retrieval mode: bm25, bm25+dense, bm25+rerank, bm25+dense+rerank.
    static constexpr const char* kRetrievalModes[4] = {"bm25", "bm25+dense", "bm25+rerank", "bm25+dense+rerank"};
    std::atomic<uint64_t> abridged_[4] = {};
    std::atomic<uint64_t> thinking_clamped_{0}, lane_retries_{0};
    std::shared_ptr<LaneReranker> reranker_;  // [long_context] rerank_lane's (null: none)
    std::shared_ptr<LaneEmbedder> embedder_;  // [long_context] embed_lane's (null: none)
    mutable std::mutex flights_mu_;
    std::map<std::string, std::shared_ptr<Flight>> flights_;
    std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace strata::gateway
