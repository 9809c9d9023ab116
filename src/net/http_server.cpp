// net::Server's event loop, connections and worker pool (contract in http_server.h).
//
// Threads: the loop thread owns the sockets, the epoll set, each connection's parser and input
// buffer and its phase; workers run handlers and content providers. What both touch is a
// connection's output side (its buffer, the state of its exchange, `dead`), under the
// connection's mutex, and its `gone` flag. A worker never touches a socket: it appends to the
// output buffer and posts the connection to the loop (an eventfd wakes it), which writes.
// Connections are held by shared_ptr, so a worker's connection outlives its socket; epoll events
// carry a connection id, never a pointer or an fd that may have been reused.
#include "net/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "net/request_parser.h"

namespace strata::net {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenId = 0, kWakeId = 1;
constexpr auto kSweep = std::chrono::milliseconds(100);
constexpr auto kLinger = std::chrono::seconds(2);  // reading (and dropping) what a refused client still sends
constexpr size_t kReadChunk = 16 << 10;
constexpr int kReadsPerEvent = 8;  // then other connections get their turn (the event comes again)

const char* reason_phrase(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 201: return "Created";
        case 204: return "No Content";
        case 304: return "Not Modified";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 402: return "Payment Required";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 409: return "Conflict";
        case 413: return "Content Too Large";
        case 414: return "URI Too Long";
        case 417: return "Expectation Failed";
        case 422: return "Unprocessable Content";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 499: return "Client Closed Request";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        case 505: return "HTTP Version Not Supported";
        case 529: return "Overloaded";
        default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
    }
}

std::string address_text(const sockaddr_storage& a, int& port) {
    char text[INET6_ADDRSTRLEN] = {};
    port = -1;
    if (a.ss_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
        inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
        port = ntohs(in->sin_port);
    } else if (a.ss_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
        inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
        port = ntohs(in6->sin6_port);
    }
    return text;
}

}  // namespace

// Threads that run handlers. New requests are refused when `bound` tasks already wait;
// continuations of accepted work (a parked stream resumed, a releaser) are always taken.
// A task goes to the worker that went idle last (a stack of idle workers, each woken on its own):
// the same few threads serve a light load, so only as many thread stacks and per-thread
// allocator caches are touched as requests ran at once, not all of the pool's hundreds in turn
// (with one shared condition variable every worker took requests in turn, and RSS crept up for
// minutes: issue #31's soak).
class WorkerPool {
public:
    explicit WorkerPool(int n) {
        for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this] { run(); });
    }
    ~WorkerPool() { shutdown(); }
    bool submit(std::function<void()> task, size_t bound) {
        std::lock_guard lock(mu_);
        if (stopping_) return false;
        if (!idle_.empty()) {
            Idle* w = idle_.back();
            idle_.pop_back();
            w->task = std::move(task);
            w->given = true;
            w->cv.notify_one();
            return true;
        }
        if (bound > 0 && queue_.size() >= bound) return false;
        queue_.push_back(std::move(task));
        return true;
    }
    // Runs what is queued, then joins.
    void shutdown() {
        {
            std::lock_guard lock(mu_);
            if (stopping_) return;
            stopping_ = true;
            for (Idle* w : idle_) w->cv.notify_one();
        }
        for (auto& t : threads_) t.join();
    }

private:
    struct Idle {
        std::condition_variable cv;
        std::function<void()> task;
        bool given = false;
    };
    void run() {
        Idle me;
        for (;;) {
            std::function<void()> task;
            {
                std::unique_lock lock(mu_);
                if (queue_.empty() && !stopping_) {
                    idle_.push_back(&me);
                    me.cv.wait(lock, [&] { return me.given || stopping_; });
                    if (!me.given) idle_.erase(std::find(idle_.begin(), idle_.end(), &me));
                }
                if (me.given) {
                    task = std::move(me.task);
                    me.given = false;
                } else if (!queue_.empty()) {
                    task = std::move(queue_.front());
                    queue_.pop_front();
                } else {
                    return;  // stopping, nothing queued
                }
            }
            task();
        }
    }
    std::mutex mu_;
    std::deque<std::function<void()>> queue_;
    std::vector<Idle*> idle_;  // the last to go idle at the back
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

struct Conn;

// What a worker needs of the loop: a way to post a connection to it.
class ServerImplPoster {
public:
    virtual ~ServerImplPoster() = default;
    virtual void post(Conn& c) = 0;
};

// One request being answered, and the sink its content provider writes to.
struct Exchange : DataSink::Target {
    explicit Exchange(Conn& c) : conn(c) {}
    bool write(const char* data, size_t n) override;
    void done() override;
    bool is_writable() const override;

    Conn& conn;
    Request req;
    Response res;
    bool head_only = false;   // HEAD: the head of what GET answers
    bool keep_alive = true;   // the request's wish
    bool chunked_out = true;  // false: an HTTP/1.0 stream, ended by closing
    size_t offset = 0;
    bool sink_done = false;  // under conn.mu
    std::atomic<bool> released{false};
};

struct Conn {
    enum class Phase { Head, Body, Busy, Lingering };
    enum class Ex { None, Running, Parked, Finished };

    uint64_t id = 0;
    int fd = -1;
    SSL* ssl = nullptr;
    std::string peer, local;
    int peer_port = -1, local_port = -1;

    // Loop thread only.
    Phase phase = Phase::Head;
    RequestParser parser;
    std::string in;
    size_t in_off = 0;
    bool first_request = true, eof = false, rdhup_seen = false, ssl_wants_write = false;
    bool head_started = false;
    Clock::time_point phase_start = Clock::now(), head_start, linger_until;
    uint32_t events = 0;
    std::unique_ptr<Exchange> ex;

    // Shared with workers.
    std::mutex mu;
    std::string out;
    size_t out_off = 0;
    Ex ex_state = Ex::None;
    bool finish_keep_alive = false;
    bool dead = false;
    Clock::time_point last_progress = Clock::now();
    std::atomic<bool> gone{false}, posted{false};
    ServerImplPoster* poster = nullptr;

    size_t pending() const { return out.size() - out_off; }
    // Appends output (caller holds mu); the write clock starts when output starts waiting.
    void append(std::string_view s) {
        if (pending() == 0) last_progress = Clock::now();
        out.append(s);
    }
    ~Conn() {
        if (ssl) SSL_free(ssl);
    }
};

bool Exchange::write(const char* data, size_t n) {
    {
        std::lock_guard lock(conn.mu);
        if (conn.dead || conn.gone) return false;
        if (n == 0) return true;
        if (chunked_out) {
            char size[24];
            std::snprintf(size, sizeof size, "%zx\r\n", n);
            conn.append(size);
            conn.append(std::string_view(data, n));
            conn.append("\r\n");
        } else {
            conn.append(std::string_view(data, n));
        }
        offset += n;
    }
    conn.poster->post(conn);
    return true;
}

void Exchange::done() {
    {
        std::lock_guard lock(conn.mu);
        if (conn.dead || sink_done) return;
        if (chunked_out) conn.append("0\r\n\r\n");
        sink_done = true;
    }
    conn.poster->post(conn);
}

bool Exchange::is_writable() const {
    std::lock_guard lock(conn.mu);
    return !conn.dead && !conn.gone;
}

struct Server::Impl : ServerImplPoster {
    struct Route {
        std::string method;
        std::regex pattern;
        Handler handler;
    };

    ServerLimits limits;
    std::vector<Route> routes;
    PreRoutingHandler pre_routing;
    Handler error_handler;
    ExceptionHandler exception_handler;
    Logger logger;
    SSL_CTX* tls = nullptr;

    int listen_fd = -1, epfd = -1, wake_fd = -1;
    std::atomic<bool> stopping{false};
    bool listening_paused = false;
    Clock::time_point resume_listening;
    uint64_t next_id = 2;
    std::unordered_map<uint64_t, std::shared_ptr<Conn>> conns;
    std::unordered_map<std::string, int> per_peer;
    std::mutex post_mu;
    std::vector<std::shared_ptr<Conn>> posted;
    std::unique_ptr<WorkerPool> pool;
    std::mutex pool_mu;  // pool creation and shutdown (listen vs the destructor)

    std::atomic<int64_t> n_connections{0}, n_accepted{0}, n_refused{0}, n_timed_out{0}, n_bad{0}, n_dropped_slow{0};

    ~Impl() override {
        if (listen_fd >= 0) ::close(listen_fd);
        if (epfd >= 0) ::close(epfd);
        if (wake_fd >= 0) ::close(wake_fd);
        if (tls) SSL_CTX_free(tls);
    }

    // ---- worker side ----
    void post(Conn& c) override {
        if (c.posted.exchange(true)) return;
        {
            std::lock_guard lock(post_mu);
            if (auto it = conns_snapshot_find(c.id)) posted.push_back(std::move(it));
        }
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t w = ::write(wake_fd, &one, sizeof one);
    }
    // The connection by id for a post from a worker: the loop's map is not to be read from there,
    // so connections are also kept in a registry under post_mu.
    std::unordered_map<uint64_t, std::weak_ptr<Conn>> registry;  // under post_mu
    std::shared_ptr<Conn> conns_snapshot_find(uint64_t id) {
        auto it = registry.find(id);
        return it == registry.end() ? nullptr : it->second.lock();
    }

    void release(Exchange& ex, bool ok) {
        if (ex.released.exchange(true)) return;
        if (!ex.res.releaser) return;
        try {
            ex.res.releaser(ok);
        } catch (...) {
        }
    }

    void finish(Conn& c, bool keep_alive) {
        {
            std::lock_guard lock(c.mu);
            if (c.dead) return;
            c.ex_state = Conn::Ex::Finished;
            c.finish_keep_alive = keep_alive;
        }
        post(c);
    }

    std::string response_head(const Exchange& ex, const Response& res, bool chunked, size_t length, bool keep_alive) {
        std::string h = "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
        for (const auto& [k, v] : res.headers) {
            if (iequals(k, "content-length") || iequals(k, "transfer-encoding") || iequals(k, "connection")) continue;
            h += k + ": " + v + "\r\n";
        }
        const bool bodiless = res.status < 200 || res.status == 204 || res.status == 304;
        if (!bodiless) {
            if (chunked) h += "Transfer-Encoding: chunked\r\n";
            else if (ex.chunked_out || !res.provider) h += "Content-Length: " + std::to_string(length) + "\r\n";
        }
        if (!keep_alive) h += "Connection: close\r\n";
        else if (ex.req.version == "HTTP/1.0") h += "Connection: keep-alive\r\n";
        h += "\r\n";
        return h;
    }

    // After the handler (or the pre-routing handler) filled the response: the error handler,
    // the logger.
    void complete_response(Exchange& ex) {
        Response& res = ex.res;
        if (res.status == -1) res.status = 200;
        if (res.status >= 400 && res.body.empty() && !res.provider && error_handler) {
            try {
                error_handler(ex.req, res);
            } catch (...) {
            }
        }
        if (logger) {
            try {
                logger(ex.req, res);
            } catch (...) {
            }
        }
    }

    // Puts a whole response (or a stream's head) into the output buffer.
    void write_response(Conn& c, Exchange& ex, bool keep_alive) {
        Response& res = ex.res;
        const bool stream = static_cast<bool>(res.provider) && !ex.head_only;
        std::string out = response_head(ex, res, stream && ex.chunked_out, res.body.size(), keep_alive);
        const bool bodiless = res.status < 200 || res.status == 204 || res.status == 304;
        std::lock_guard lock(c.mu);
        if (c.dead) return;
        c.append(out);
        if (!stream && !ex.head_only && !bodiless) c.append(res.body);
    }

    // Worker: route, handle, answer (a stream then runs step by step).
    void run_exchange(const std::shared_ptr<Conn>& c) {
        Exchange& ex = *c->ex;
        Request& req = ex.req;
        Response& res = ex.res;
        try {
            // std::regex matches recursively, a frame or so per character: a path longer than
            // this (a head limit raised far) could overflow a worker's stack.
            constexpr size_t kMaxRoutedPath = 16 << 10;
            const std::string method = req.method == "HEAD" ? "GET" : req.method;
            const Route* found = nullptr;
            bool other_method = false;
            const bool routable = req.path.size() <= kMaxRoutedPath;
            for (const Route& r : routes) {
                if (!routable) break;
                std::smatch m;
                if (!std::regex_match(req.path, m, r.pattern)) continue;
                if (r.method != method) {
                    other_method = true;
                    continue;
                }
                req.matches = std::move(m);
                found = &r;
                break;
            }
            if (found) {
                found->handler(req, res);
            } else if (other_method) {
                res.status = 405;
                std::string allow;
                for (const Route& r : routes)
                    if (std::regex_match(req.path, r.pattern) && allow.find(r.method) == std::string::npos)
                        allow += (allow.empty() ? "" : ", ") + r.method;
                res.set_header("Allow", allow);
            } else if (!routable) {
                res.status = 414;
                res.reason = "the request path is longer than " + std::to_string(kMaxRoutedPath) + " bytes";
            } else {
                res.status = 404;
            }
        } catch (...) {
            res = Response();
            res.status = 500;
            if (exception_handler) {
                try {
                    exception_handler(req, res, std::current_exception());
                } catch (...) {
                }
            }
        }
        complete_response(ex);
        if (res.provider && !ex.head_only) {
            write_response(*c, ex, ex.keep_alive && ex.chunked_out);
            post(*c);
            stream(c);
            return;
        }
        if (res.provider) release(ex, false);  // HEAD of a stream: nothing is produced
        write_response(*c, ex, ex.keep_alive);
        finish(*c, ex.keep_alive);
    }

    // Worker: calls the provider while the output buffer has room; parks the stream when it has
    // none (the loop resumes it once the client has read).
    void stream(const std::shared_ptr<Conn>& c) {
        Exchange& ex = *c->ex;
        DataSink sink(ex);
        bool ok = true;
        for (;;) {
            {
                std::lock_guard lock(c->mu);
                if (c->dead || c->gone) {
                    ok = false;
                    break;
                }
                if (ex.sink_done) break;
                if (c->pending() >= limits.output_high_water) {
                    c->ex_state = Conn::Ex::Parked;
                    goto parked;
                }
            }
            try {
                ok = ex.res.provider(ex.offset, sink);
            } catch (...) {
                ok = false;
            }
            if (!ok) break;
        }
        release(ex, ok);
        finish(*c, ok && ex.keep_alive && ex.chunked_out);
        return;
    parked:
        post(*c);
    }

    // ---- loop side ----
    void update_interest(Conn& c) {
        bool want_out;
        {
            std::lock_guard lock(c.mu);
            want_out = c.pending() > 0;
        }
        want_out = want_out || c.ssl_wants_write;
        bool want_in = !c.eof;
        if (c.phase == Conn::Phase::Busy) want_in = want_in && c.in.size() - c.in_off < limits.max_header_bytes + (64 << 10);
        const uint32_t ev = (want_in ? EPOLLIN : 0u) | (want_out ? EPOLLOUT : 0u) | (c.rdhup_seen ? 0u : EPOLLRDHUP);
        if (ev == c.events) return;
        epoll_event e{};
        e.events = ev;
        e.data.u64 = c.id;
        epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &e);
        c.events = ev;
    }

    // Bytes read (> 0), 0 (nothing now), -1 end of stream, -2 error.
    ssize_t transport_read(Conn& c, char* buf, size_t n) {
        if (!c.ssl) {
            for (;;) {
                const ssize_t r = ::recv(c.fd, buf, n, 0);
                if (r > 0) return r;
                if (r == 0) return -1;
                if (errno == EINTR) continue;
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -2;
            }
        }
        ERR_clear_error();
        c.ssl_wants_write = false;
        const int r = SSL_read(c.ssl, buf, static_cast<int>(n));
        if (r > 0) return r;
        switch (SSL_get_error(c.ssl, r)) {
            case SSL_ERROR_WANT_READ: return 0;
            case SSL_ERROR_WANT_WRITE: c.ssl_wants_write = true; return 0;
            case SSL_ERROR_ZERO_RETURN: return -1;
            case SSL_ERROR_SYSCALL: return r == 0 ? -1 : -2;
            default: return -2;
        }
    }

    ssize_t transport_write(Conn& c, const char* buf, size_t n) {
        if (!c.ssl) {
            for (;;) {
                const ssize_t r = ::send(c.fd, buf, n, MSG_NOSIGNAL);
                if (r >= 0) return r;
                if (errno == EINTR) continue;
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -2;
            }
        }
        ERR_clear_error();
        const int r = SSL_write(c.ssl, buf, static_cast<int>(std::min<size_t>(n, 1 << 20)));
        if (r > 0) return r;
        switch (SSL_get_error(c.ssl, r)) {
            case SSL_ERROR_WANT_READ:
            case SSL_ERROR_WANT_WRITE: return 0;
            default: return -2;
        }
    }

    void register_conn(const std::shared_ptr<Conn>& c) {
        conns[c->id] = c;
        std::lock_guard lock(post_mu);
        registry[c->id] = c;
    }

    // Closes at once: the socket goes, a parked stream is told the client is gone.
    void drop(const std::shared_ptr<Conn>& c) {
        if (conns.erase(c->id) == 0) return;
        {
            std::lock_guard lock(post_mu);
            registry.erase(c->id);
        }
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, nullptr);
        ::close(c->fd);
        if (auto it = per_peer.find(c->peer); it != per_peer.end() && --it->second <= 0) per_peer.erase(it);
        --n_connections;
        bool parked = false;
        {
            std::lock_guard lock(c->mu);
            c->dead = true;
            parked = c->ex_state == Conn::Ex::Parked;
            c->ex_state = Conn::Ex::None;
            c->out.clear();
            c->out.shrink_to_fit();
            c->out_off = 0;
        }
        c->gone = true;
        if (parked) pool->submit([this, c] { release(*c->ex, false); }, 0);
    }

    // Ends the connection after its last response: stop sending, read and drop what the client
    // still sends for a moment (so that it sees the response, not a reset), then close.
    void close_gracefully(const std::shared_ptr<Conn>& c) {
        if (c->ssl) SSL_shutdown(c->ssl);
        ::shutdown(c->fd, SHUT_WR);
        c->phase = Conn::Phase::Lingering;
        c->linger_until = Clock::now() + kLinger;
        if (c->eof) return drop(c);
        update_interest(*c);
    }

    void flush(const std::shared_ptr<Conn>& c) {
        std::unique_lock lock(c->mu);
        while (c->pending() > 0) {
            const ssize_t n = transport_write(*c, c->out.data() + c->out_off, c->pending());
            if (n == 0) break;
            if (n < 0) {
                lock.unlock();
                return drop(c);
            }
            c->out_off += static_cast<size_t>(n);
            c->last_progress = Clock::now();
        }
        if (c->pending() == 0) {
            c->out.clear();
            c->out_off = 0;
            if (c->out.capacity() > (1 << 20)) c->out.shrink_to_fit();
        } else if (c->out_off > (1 << 20)) {
            c->out.erase(0, c->out_off);
            c->out_off = 0;
        }
    }

    // After output moved: resume a parked stream, end a finished exchange.
    void after_output(const std::shared_ptr<Conn>& c) {
        if (!conns.count(c->id)) return;
        bool end = false, keep = false;
        {
            std::lock_guard lock(c->mu);
            if (c->ex_state == Conn::Ex::Parked && c->pending() <= limits.output_high_water / 2) {
                c->ex_state = Conn::Ex::Running;
                pool->submit([this, c] { stream(c); }, 0);
            } else if (c->ex_state == Conn::Ex::Finished && c->pending() == 0) {
                c->ex_state = Conn::Ex::None;
                end = true;
                keep = c->finish_keep_alive;
            }
        }
        if (!end) return;
        c->ex.reset();
        if (c->phase == Conn::Phase::Lingering) return;
        if (!keep || c->gone || c->eof || stopping) return close_gracefully(c);
        c->phase = Conn::Phase::Head;
        c->first_request = false;
        c->head_started = false;
        c->phase_start = Clock::now();
        advance(c);  // a pipelined request may be waiting
        if (conns.count(c->id) && c->phase == Conn::Phase::Head) read_some(c);
    }

    // A refusal or framing error answered by the loop, then the connection closed.
    void answer_and_close(const std::shared_ptr<Conn>& c, int status, const std::string& why) {
        if (!c->ex) {
            c->ex = std::make_unique<Exchange>(*c);
            c->ex->req.remote_addr = c->peer;
            c->ex->req.remote_port = c->peer_port;
        }
        Exchange& ex = *c->ex;
        ex.res = Response();
        ex.res.status = status;
        ex.res.reason = why;
        complete_response(ex);
        ex.head_only = ex.req.method == "HEAD";
        write_response(*c, ex, false);
        {
            std::lock_guard lock(c->mu);
            c->ex_state = Conn::Ex::Finished;
            c->finish_keep_alive = false;
        }
        c->phase = Conn::Phase::Busy;
        flush(c);
        if (conns.count(c->id)) after_output(c);
        if (conns.count(c->id)) update_interest(*c);
    }

    // The head is in: the request as handlers see it, then the pre-routing handler. True when
    // that answered.
    bool on_head(const std::shared_ptr<Conn>& c) {
        const RequestHead& h = c->parser.head();
        c->ex = std::make_unique<Exchange>(*c);
        Exchange& ex = *c->ex;
        Request& req = ex.req;
        req.method = h.method;
        req.target = h.target;
        req.version = h.minor_version == 0 ? "HTTP/1.0" : "HTTP/1.1";
        for (const auto& [k, v] : h.fields) req.headers.emplace(k, v);
        std::string_view t = h.target;
        if (t.rfind("http://", 0) == 0 || t.rfind("https://", 0) == 0) {
            const size_t slash = t.find('/', t.find("//") + 2);
            t = slash == std::string_view::npos ? std::string_view("/") : t.substr(slash);
        }
        const size_t q = t.find('?');
        req.path = percent_decode(t.substr(0, q), false);
        if (q != std::string_view::npos) {
            std::string_view query = t.substr(q + 1);
            while (!query.empty()) {
                const size_t amp = query.find('&');
                const std::string_view pair = query.substr(0, amp);
                const size_t eq = pair.find('=');
                if (!pair.empty())
                    req.params.emplace(percent_decode(pair.substr(0, eq), true),
                                       eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true));
                if (amp == std::string_view::npos) break;
                query = query.substr(amp + 1);
            }
        }
        req.remote_addr = c->peer;
        req.remote_port = c->peer_port;
        req.local_addr = c->local;
        req.local_port = c->local_port;
        std::weak_ptr<Conn> weak = conns[c->id];
        req.is_connection_closed = [weak] {
            auto p = weak.lock();
            return !p || p->gone.load();
        };
        ex.keep_alive = h.keep_alive;
        ex.head_only = h.method == "HEAD";
        ex.chunked_out = h.minor_version >= 1;
        if (pre_routing) {
            HandlerResponse r = HandlerResponse::Unhandled;
            try {
                r = pre_routing(req, ex.res);
            } catch (...) {
                ex.res = Response();
                ex.res.status = 500;
                r = HandlerResponse::Handled;
            }
            if (r == HandlerResponse::Handled) {
                // Answered without reading the body: the connection cannot go on unless it had none.
                const bool keep = h.keep_alive && !h.chunked && h.content_length == 0;
                complete_response(ex);
                write_response(*c, ex, keep);
                {
                    std::lock_guard lock(c->mu);
                    c->ex_state = Conn::Ex::Finished;
                    c->finish_keep_alive = keep;
                }
                c->phase = Conn::Phase::Busy;
                c->parser.reset();  // its body, if any, is never read: the connection closes
                return true;
            }
        }
        if (h.expect_continue) {
            std::lock_guard lock(c->mu);
            c->append("HTTP/1.1 100 Continue\r\n\r\n");
        }
        return false;
    }

    void dispatch(const std::shared_ptr<Conn>& c) {
        c->ex->req.body = std::move(c->parser.body());
        c->parser.reset();
        c->phase = Conn::Phase::Busy;
        {
            std::lock_guard lock(c->mu);
            c->ex_state = Conn::Ex::Running;
        }
        const size_t bound = static_cast<size_t>(limits.max_waiting > 0 ? limits.max_waiting : limits.worker_threads);
        if (!pool->submit([this, c] { run_exchange(c); }, bound)) {
            {
                std::lock_guard lock(c->mu);
                c->ex_state = Conn::Ex::None;
            }
            answer_and_close(c, 503, "the server is at capacity (every worker busy); retry later");
        }
    }

    // Feeds buffered input to the parser while the connection is reading a request.
    void advance(const std::shared_ptr<Conn>& c) {
        while (c->phase == Conn::Phase::Head || c->phase == Conn::Phase::Body) {
            const size_t avail = c->in.size() - c->in_off;
            if (c->phase == Conn::Phase::Head && avail == 0 && !c->eof) break;
            const size_t used = c->parser.feed(c->in.data() + c->in_off, avail);
            c->in_off += used;
            if (c->in_off == c->in.size()) {
                c->in.clear();
                c->in_off = 0;
            }
            if (c->parser.started() && !c->head_started) {
                c->head_started = true;
                c->head_start = Clock::now();
            }
            const auto st = c->parser.state();
            if (st == RequestParser::State::Failed) {
                ++n_bad;
                return answer_and_close(c, c->parser.error_status(), c->parser.error());
            }
            if (c->phase == Conn::Phase::Head && st != RequestParser::State::Head) {
                c->phase = Conn::Phase::Body;
                c->phase_start = Clock::now();
                if (on_head(c)) {
                    flush(c);
                    if (conns.count(c->id)) after_output(c);
                    return;
                }
                continue;
            }
            if (st == RequestParser::State::Done) return dispatch(c);
            if (c->eof) {
                // The client ended its side: what it sent is all there will be.
                if (c->parser.started() || c->phase == Conn::Phase::Body) ++n_bad;
                return drop(c);
            }
            break;
        }
    }

    void read_some(const std::shared_ptr<Conn>& c) {
        char buf[kReadChunk];
        for (int i = 0; i < kReadsPerEvent && !c->eof; ++i) {
            if (c->phase == Conn::Phase::Busy && c->in.size() - c->in_off >= limits.max_header_bytes + (64 << 10)) break;
            const ssize_t n = transport_read(*c, buf, sizeof buf);
            if (n == 0) break;
            if (n == -2) return drop(c);
            if (n == -1) {
                c->eof = true;
                c->gone = true;  // as a closed peer: a handler waiting for it cancels
                if (c->phase == Conn::Phase::Lingering) return drop(c);
                break;
            }
            if (c->phase == Conn::Phase::Lingering) continue;  // read and dropped
            c->in.append(buf, static_cast<size_t>(n));
            advance(c);
            if (!conns.count(c->id)) return;
        }
        if (c->eof) advance(c);
    }

    void on_event(const std::shared_ptr<Conn>& c, uint32_t events) {
        // An error or a hang-up of both directions (a reset): nothing more can be written.
        if (events & (EPOLLERR | EPOLLHUP)) return drop(c);
        if (events & EPOLLRDHUP) {
            c->rdhup_seen = true;
            if (c->phase == Conn::Phase::Busy) c->gone = true;
        }
        if (events & (EPOLLIN | EPOLLRDHUP) || (c->ssl_wants_write && (events & EPOLLOUT))) read_some(c);
        if (!conns.count(c->id)) return;
        flush(c);
        if (!conns.count(c->id)) return;
        after_output(c);
        if (conns.count(c->id)) update_interest(*c);
    }

    void refuse(int fd, const char* why) {
        ++n_refused;
        if (!tls) {
            const std::string body = std::string(R"({"error":{"message":")") + why + R"(","type":"server_error"}})";
            const std::string r = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
                                  std::to_string(body.size()) + "\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" + body;
            [[maybe_unused]] const ssize_t w = ::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            ::shutdown(fd, SHUT_WR);
        }
        ::close(fd);
    }

    void accept_all() {
        for (;;) {
            sockaddr_storage peer{};
            socklen_t len = sizeof peer;
            const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                    // Out of descriptors: stop accepting for a moment (the backlog holds the rest).
                    epoll_ctl(epfd, EPOLL_CTL_DEL, listen_fd, nullptr);
                    listening_paused = true;
                    resume_listening = Clock::now() + std::chrono::milliseconds(100);
                }
                return;
            }
            int port = -1;
            std::string addr = address_text(peer, port);
            if (addr.rfind("::ffff:", 0) == 0 && addr.find('.') != std::string::npos) addr = addr.substr(7);
            if (static_cast<int>(conns.size()) >= limits.max_connections) {
                refuse(fd, "too many connections to this server; retry later");
                continue;
            }
            int& from_peer = per_peer[addr];
            if (from_peer >= limits.max_connections_per_peer) {
                refuse(fd, "too many connections from this address; retry later");
                continue;
            }
            ++from_peer;
            ++n_accepted;
            ++n_connections;
            const int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            auto c = std::make_shared<Conn>();
            c->id = next_id++;
            c->fd = fd;
            c->poster = this;
            c->peer = addr;
            c->peer_port = port;
            c->parser = RequestParser(ParserLimits{limits.max_header_bytes, limits.max_headers, limits.max_body_bytes});
            sockaddr_storage local{};
            socklen_t ll = sizeof local;
            if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) == 0) c->local = address_text(local, c->local_port);
            if (tls) {
                c->ssl = SSL_new(tls);
                SSL_set_fd(c->ssl, fd);
                SSL_set_accept_state(c->ssl);
                SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
            }
            epoll_event e{};
            e.events = EPOLLIN | EPOLLRDHUP;
            e.data.u64 = c->id;
            c->events = e.events;
            epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e);
            register_conn(c);
        }
    }

    // Deadlines: a head, a body, an idle keep-alive, output nobody reads, a lingering close.
    void sweep() {
        const auto now = Clock::now();
        std::vector<std::pair<std::shared_ptr<Conn>, int>> expired;  // 0 drop, 408 answer
        for (auto& [id, c] : conns) {
            switch (c->phase) {
                case Conn::Phase::Head:
                    if (c->first_request || c->head_started) {
                        const auto from = c->head_started && !c->first_request ? c->head_start : c->phase_start;
                        if (now - from > limits.head_timeout) expired.emplace_back(c, c->head_started ? 408 : 0);
                    } else if (now - c->phase_start > limits.idle_timeout) {
                        expired.emplace_back(c, 0);
                    }
                    break;
                case Conn::Phase::Body:
                    if (now - c->phase_start > limits.body_timeout) expired.emplace_back(c, 408);
                    break;
                case Conn::Phase::Busy: {
                    std::lock_guard lock(c->mu);
                    if (c->pending() > 0 && now - c->last_progress > limits.write_timeout) expired.emplace_back(c, -1);
                    break;
                }
                case Conn::Phase::Lingering:
                    if (now > c->linger_until) expired.emplace_back(c, 0);
                    break;
            }
        }
        for (auto& [c, what] : expired) {
            if (!conns.count(c->id)) continue;
            if (what == 408) {
                ++n_timed_out;
                const bool head = c->phase == Conn::Phase::Head;
                const auto limit = head ? limits.head_timeout : limits.body_timeout;
                answer_and_close(c, 408,
                                 std::string(head ? "the request head" : "the request body") + " did not arrive within " +
                                     std::to_string(limit.count() / 1000.0).substr(0, 5) + " s");
            } else {
                if (what == -1) ++n_dropped_slow;
                else if (c->phase == Conn::Phase::Head) ++n_timed_out;
                drop(c);
            }
        }
        if (listening_paused && now >= resume_listening) {
            epoll_event e{};
            e.events = EPOLLIN;
            e.data.u64 = kListenId;
            epoll_ctl(epfd, EPOLL_CTL_ADD, listen_fd, &e);
            listening_paused = false;
        }
    }

    void process_posted() {
        std::vector<std::shared_ptr<Conn>> batch;
        {
            std::lock_guard lock(post_mu);
            batch.swap(posted);
        }
        for (auto& c : batch) {
            c->posted = false;
            if (!conns.count(c->id)) continue;
            flush(c);
            if (!conns.count(c->id)) continue;
            after_output(c);
            if (conns.count(c->id)) update_interest(*c);
        }
    }

    void loop() {
        epoll_event events[256];
        auto last_sweep = Clock::now();
        while (!stopping) {
            const int n = epoll_wait(epfd, events, 256, static_cast<int>(kSweep.count()));
            for (int i = 0; i < n && !stopping; ++i) {
                const uint64_t id = events[i].data.u64;
                if (id == kListenId) {
                    accept_all();
                } else if (id == kWakeId) {
                    uint64_t v;
                    [[maybe_unused]] const ssize_t r = ::read(wake_fd, &v, sizeof v);
                } else if (auto it = conns.find(id); it != conns.end()) {
                    auto c = it->second;  // on_event may drop it
                    on_event(c, events[i].events);
                }
            }
            process_posted();
            if (Clock::now() - last_sweep >= kSweep) {
                sweep();
                last_sweep = Clock::now();
            }
        }
        std::vector<std::shared_ptr<Conn>> all;
        for (auto& [id, c] : conns) all.push_back(c);
        for (auto& c : all) drop(c);
    }
};

Server::Server(ServerLimits limits) : impl_(std::make_unique<Impl>()) { impl_->limits = limits; }

Server::~Server() {
    stop();
    std::lock_guard lock(impl_->pool_mu);
    if (impl_->pool) impl_->pool->shutdown();
}

bool Server::use_tls(const std::string& cert_file, const std::string& key_file, std::string& why) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        why = "cannot make a TLS context";
        return false;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        char err[256] = {};
        ERR_error_string_n(ERR_get_error(), err, sizeof err);
        why = err;
        SSL_CTX_free(ctx);
        return false;
    }
    if (impl_->tls) SSL_CTX_free(impl_->tls);
    impl_->tls = ctx;
    return true;
}

void Server::add_route(const char* method, const std::string& pattern, Handler h) {
    impl_->routes.push_back({method, std::regex(pattern), std::move(h)});
}
void Server::set_pre_routing_handler(PreRoutingHandler h) { impl_->pre_routing = std::move(h); }
void Server::set_error_handler(Handler h) { impl_->error_handler = std::move(h); }
void Server::set_exception_handler(ExceptionHandler h) { impl_->exception_handler = std::move(h); }
void Server::set_logger(Logger l) { impl_->logger = std::move(l); }
const ServerLimits& Server::limits() const { return impl_->limits; }

ServerStats Server::stats() const {
    ServerStats s;
    s.connections = impl_->n_connections;
    s.accepted = impl_->n_accepted;
    s.refused = impl_->n_refused;
    s.timed_out = impl_->n_timed_out;
    s.bad_requests = impl_->n_bad;
    s.dropped_slow_readers = impl_->n_dropped_slow;
    return s;
}

int Server::bind(const std::string& host, int port) {
    Impl& m = *impl_;
    // Connections are file descriptors: take what the hard limit allows, and keep room for the
    // rest of the process (engine pipes, upstream calls of the workers, the session store).
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        const int64_t reserve = 128 + 2 * static_cast<int64_t>(m.limits.worker_threads);
        const int64_t room = static_cast<int64_t>(std::min<rlim_t>(rl.rlim_cur, 1 << 30)) - reserve;
        m.limits.max_connections = static_cast<int>(std::max<int64_t>(16, std::min<int64_t>(m.limits.max_connections, room)));
    }
    m.limits.max_connections_per_peer = std::max(1, std::min(m.limits.max_connections_per_peer, m.limits.max_connections));

    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    if (getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return -1;
    int fd = -1;
    for (addrinfo* a = res; a; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) break;
        ::close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return -1;
    sockaddr_storage bound{};
    socklen_t bl = sizeof bound;
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bl);
    int bound_port = -1;
    address_text(bound, bound_port);
    m.listen_fd = fd;
    return bound_port;
}

void Server::listen() {
    Impl& m = *impl_;
    if (m.listen_fd < 0 || m.stopping) return;
    ::signal(SIGPIPE, SIG_IGN);  // a TLS write to a closed peer must be an error, not the end of the process
    m.epfd = epoll_create1(EPOLL_CLOEXEC);
    m.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = kListenId;
    epoll_ctl(m.epfd, EPOLL_CTL_ADD, m.listen_fd, &e);
    e.data.u64 = kWakeId;
    epoll_ctl(m.epfd, EPOLL_CTL_ADD, m.wake_fd, &e);
    {
        std::lock_guard lock(m.pool_mu);
        m.pool = std::make_unique<WorkerPool>(m.limits.worker_threads);
    }
    m.loop();
    std::lock_guard lock(m.pool_mu);
    m.pool->shutdown();
}

void Server::stop() {
    Impl& m = *impl_;
    m.stopping = true;
    if (m.wake_fd >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t w = ::write(m.wake_fd, &one, sizeof one);
    }
}

}  // namespace strata::net
