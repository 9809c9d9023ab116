// net::Server: the HTTP/1.1 server of `strata serve` and `strata gateway` (docs/serve.md,
// docs/gateway.md). One I/O thread owns every socket (epoll, non-blocking; TLS through OpenSSL on
// the same loop); route handlers, which block (on the engine, on a lane), run on a bounded pool of
// worker threads. A connection costs memory, not a thread: an idle or trickling client holds no
// worker.
//
// Per connection, one request at a time, answered in order (pipelined requests wait in the input
// buffer): its head must arrive within head_timeout (from the connection's start, or from the
// request's first byte after an idle keep-alive), its body within body_timeout after the head; an
// idle keep-alive connection is closed after idle_timeout. Requests are parsed strictly
// (net/request_parser.h); a framing error is answered (400, 408, 413, 417, 431, 501, 505) and the
// connection closed. Connections beyond max_connections in total or max_connections_per_peer from
// one address get a 503 and are closed; a request that finds every worker busy and the pool's
// queue full gets a 503.
//
// Responses: a whole body, or a chunked stream from a content provider. A provider writes into
// the connection's output buffer and is called again on a worker only while that buffer is below
// output_high_water: a slow reader parks its stream (no thread waits for it), and one that takes
// no bytes for write_timeout is dropped, its provider's releaser told false (the client is gone).
//
// Order of a request: head parsed -> pre-routing handler (on the I/O thread, before the body is
// read: it must not block; "Handled" answers without reading the body) -> 100 Continue when
// asked -> body -> the route's handler on a worker (Get handlers also answer HEAD) -> the error
// handler for a status >= 400 without a body -> the logger -> the response.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "net/http.h"

namespace strata::net {

struct ServerLimits {
    int max_connections = 4096;           // in total; lowered to fit the process's open-file limit
    int max_connections_per_peer = 1024;  // from one client address
    std::chrono::milliseconds head_timeout{10'000};
    std::chrono::milliseconds body_timeout{60'000};
    std::chrono::milliseconds idle_timeout{30'000};   // a keep-alive connection between requests
    std::chrono::milliseconds write_timeout{60'000};  // pending output that no byte of leaves
    size_t max_header_bytes = 16 << 10;               // the request line and fields together
    int max_headers = 100;
    int64_t max_body_bytes = 32ll << 20;
    int worker_threads = 64;
    int max_waiting = 0;  // requests queued for a worker beyond those; 0: worker_threads
    size_t output_high_water = 256 << 10;
};

struct ServerStats {
    int64_t connections = 0;  // open now
    int64_t accepted = 0, refused = 0, timed_out = 0, bad_requests = 0, dropped_slow_readers = 0;
};

class Server {
public:
    using Handler = std::function<void(const Request&, Response&)>;
    using ExceptionHandler = std::function<void(const Request&, Response&, std::exception_ptr)>;
    using Logger = std::function<void(const Request&, const Response&)>;
    enum class HandlerResponse { Handled, Unhandled };
    using PreRoutingHandler = std::function<HandlerResponse(const Request&, Response&)>;

    explicit Server(ServerLimits limits);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // HTTPS with this PEM certificate chain and key; false (with `why`) when they cannot be used.
    bool use_tls(const std::string& cert_file, const std::string& key_file, std::string& why);

    // Routes: the pattern is an ECMAScript regex matched against the whole decoded path.
    void Get(const std::string& pattern, Handler h) { add_route("GET", pattern, std::move(h)); }
    void Post(const std::string& pattern, Handler h) { add_route("POST", pattern, std::move(h)); }
    void Put(const std::string& pattern, Handler h) { add_route("PUT", pattern, std::move(h)); }
    void Delete(const std::string& pattern, Handler h) { add_route("DELETE", pattern, std::move(h)); }
    void Patch(const std::string& pattern, Handler h) { add_route("PATCH", pattern, std::move(h)); }
    void Options(const std::string& pattern, Handler h) { add_route("OPTIONS", pattern, std::move(h)); }
    void set_pre_routing_handler(PreRoutingHandler h);
    void set_error_handler(Handler h);
    void set_exception_handler(ExceptionHandler h);
    void set_logger(Logger l);

    // Binds and listens; port 0: any free one. Returns the port, or -1. Raises the soft limit of
    // open files to the hard one and keeps max_connections below it.
    int bind(const std::string& host, int port);
    // Serves until stop() (from any thread); then every connection is closed and in-flight
    // handlers are told the client is gone; returns once the workers have finished.
    void listen();
    void stop();

    const ServerLimits& limits() const;  // as in force (after bind)
    ServerStats stats() const;

private:
    void add_route(const char* method, const std::string& pattern, Handler h);
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace strata::net
