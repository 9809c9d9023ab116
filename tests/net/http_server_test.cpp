// net::Server over real loopback sockets, spoken to byte by byte: pipelined requests answered in
// order, framing errors answered and the connection closed, the head/body/idle/write deadlines, the
// per-address and total connection caps, HEAD and 100-continue, a client that leaves seen by its
// handler, and a stream whose reader does not read parked without holding the only worker thread,
// then dropped with its releaser told so. Deadlines are set short; waits are bounded by kPatience
// and only reached when something is wrong.
#include "net/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace strata::net {
namespace {

using namespace std::chrono_literals;
constexpr auto kPatience = 20s;

class TestServer {
public:
    explicit TestServer(ServerLimits limits, const std::function<void(Server&)>& routes) : server_(limits) {
        routes(server_);
        port_ = server_.bind("127.0.0.1", 0);
        EXPECT_GT(port_, 0);
        thread_ = std::thread([this] { server_.listen(); });
    }
    ~TestServer() {
        server_.stop();
        thread_.join();
    }
    int port() const { return port_; }
    Server& server() { return server_; }

private:
    Server server_;
    int port_ = -1;
    std::thread thread_;
};

int connect_to(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
}

void send_all(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
        const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return;
        off += static_cast<size_t>(n);
    }
}

// Reads until the peer closes, `until` appears in what was read, or kPatience passes.
// `closed` says whether the peer closed.
std::string read_until(int fd, const std::string& until, bool* closed = nullptr) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    if (closed) *closed = false;
    while (std::chrono::steady_clock::now() < deadline) {
        if (!until.empty() && got.find(until) != std::string::npos) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        char buf[65536];
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            if (closed) *closed = true;
            break;
        }
        got.append(buf, static_cast<size_t>(n));
    }
    return got;
}

int count(const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
}

ServerLimits small_limits() {
    ServerLimits l;
    l.worker_threads = 4;
    l.max_body_bytes = 1024;
    l.max_header_bytes = 2048;
    l.max_headers = 20;
    return l;
}

void echo_routes(Server& s) {
    s.Get("/slow", [](const Request&, Response& res) {
        std::this_thread::sleep_for(200ms);
        res.set_content("slow", "text/plain");
    });
    s.Get(R"(/echo/(\w+))",
          [](const Request& req, Response& res) { res.set_content("echo:" + req.matches[1].str(), "text/plain"); });
    s.Post("/body",
           [](const Request& req, Response& res) { res.set_content("len=" + std::to_string(req.body.size()), "text/plain"); });
}

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
    TestServer ts(small_limits(), echo_routes);
    const int fd = connect_to(ts.port());
    send_all(fd,
             "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
             "POST /body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
             "GET /echo/last HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string got = read_until(fd, "echo:last");
    const size_t a = got.find("slow"), b = got.find("len=3"), c = got.find("echo:last");
    ASSERT_NE(a, std::string::npos) << got;
    ASSERT_NE(b, std::string::npos) << got;
    ASSERT_NE(c, std::string::npos) << got;
    EXPECT_LT(a, b);
    EXPECT_LT(b, c);
    EXPECT_EQ(count(got, "HTTP/1.1 200 OK"), 3);
    ::close(fd);
}

TEST(HttpServer, FramingErrorsAreAnsweredThenClosed) {
    TestServer ts(small_limits(), echo_routes);
    const std::pair<std::string, std::string> cases[] = {
        {"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "400"},
        {"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\nabc", "400"},
        {"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc", "400"},
        {"POST /body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "400"},
        {"POST /body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + std::string(1024, 'a') + "\r\n1\r\n",
         "413"},
        {"GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(4000, 'a') + "\r\n\r\n", "431"},
    };
    for (const auto& [wire, status] : cases) {
        const int fd = connect_to(ts.port());
        // A second request after the bad one must never be answered: the connection is closed.
        send_all(fd, wire + "GET /echo/after HTTP/1.1\r\nHost: x\r\n\r\n");
        bool closed = false;
        const std::string got = read_until(fd, "", &closed);
        EXPECT_EQ(got.rfind("HTTP/1.1 " + status, 0), 0u) << wire.substr(0, 80) << "\n-> " << got.substr(0, 200);
        EXPECT_NE(got.find("Connection: close"), std::string::npos);
        EXPECT_EQ(got.find("echo:after"), std::string::npos);
        EXPECT_TRUE(closed);
        ::close(fd);
    }
    EXPECT_GE(ts.server().stats().bad_requests, 6);
}

TEST(HttpServer, HeadDeadlineAnswers408AndIdleConnectionsClose) {
    ServerLimits l = small_limits();
    l.head_timeout = 300ms;
    l.idle_timeout = 300ms;
    TestServer ts(l, echo_routes);
    // A head that trickles: 408 once the deadline passes, though bytes keep coming.
    const int slow = connect_to(ts.port());
    send_all(slow, "GET /echo/a HTTP/1.1\r\n");
    bool closed = false;
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (!closed && std::chrono::steady_clock::now() < deadline) {
        send_all(slow, "X: y\r\n");
        got += read_until(slow, "\r\n\r\n", &closed);
    }
    EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
    ::close(slow);
    // A keep-alive connection after its answer: closed without a word after the idle timeout.
    const int idle = connect_to(ts.port());
    send_all(idle, "GET /echo/b HTTP/1.1\r\nHost: x\r\n\r\n");
    got = read_until(idle, "", &closed);
    EXPECT_NE(got.find("echo:b"), std::string::npos);
    EXPECT_TRUE(closed);
    ::close(idle);
    // A connection that never sends anything is closed too.
    const int silent = connect_to(ts.port());
    got = read_until(silent, "", &closed);
    EXPECT_TRUE(got.empty());
    EXPECT_TRUE(closed);
    ::close(silent);
}

TEST(HttpServer, ConnectionsFromOneAddressAreCapped) {
    ServerLimits l = small_limits();
    l.max_connections_per_peer = 2;
    TestServer ts(l, echo_routes);
    const int a = connect_to(ts.port()), b = connect_to(ts.port());
    // Both are in (answered) before the third is tried.
    send_all(a, "GET /echo/a HTTP/1.1\r\nHost: x\r\n\r\n");
    send_all(b, "GET /echo/b HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_NE(read_until(a, "echo:a").find("echo:a"), std::string::npos);
    EXPECT_NE(read_until(b, "echo:b").find("echo:b"), std::string::npos);
    const int c = connect_to(ts.port());
    bool closed = false;
    const std::string got = read_until(c, "", &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
    EXPECT_TRUE(closed);
    ::close(c);
    ::close(a);
    // Once one has gone, a new one is let in.
    std::string ok;
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (ok.find("echo:d") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        const int d = connect_to(ts.port());
        send_all(d, "GET /echo/d HTTP/1.1\r\nHost: x\r\n\r\n");
        ok = read_until(d, "echo:d");
        ::close(d);
    }
    EXPECT_NE(ok.find("echo:d"), std::string::npos);
    ::close(b);
}

TEST(HttpServer, BodyDeadlineAnswers408ThoughBytesKeepComing) {
    ServerLimits l = small_limits();
    l.head_timeout = 5s;  // only the body is late
    l.body_timeout = 400ms;
    TestServer ts(l, echo_routes);
    // The head at once, then the body a byte every 50 ms: 100 bytes would take 5 s.
    const int slow = connect_to(ts.port());
    const auto t0 = std::chrono::steady_clock::now();
    send_all(slow, "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
    bool closed = false;
    std::string got;
    for (int i = 0; i < 100 && !closed && std::chrono::steady_clock::now() - t0 < kPatience; ++i) {
        send_all(slow, "a");
        pollfd p{slow, POLLIN, 0};
        if (::poll(&p, 1, 50) > 0) got += read_until(slow, "", &closed);
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
    EXPECT_TRUE(closed);
    EXPECT_LT(took, 2s) << "answered after " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
    EXPECT_GE(took, 400ms);  // the body's deadline, not the head's (5 s)
    EXPECT_GE(ts.server().stats().timed_out, 1);
    ::close(slow);
    // A body that comes in time is served on the same server.
    const int ok = connect_to(ts.port());
    send_all(ok, "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    EXPECT_NE(read_until(ok, "len=3").find("len=3"), std::string::npos);
    ::close(ok);
}

// Connects from another loopback address (127.0.0.N), so that the per-address cap is not what
// refuses it.
int connect_from(int n, int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl(INADDR_LOOPBACK + static_cast<uint32_t>(n - 1));
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local), 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
}

TEST(HttpServer, ConnectionsBeyondTheTotalCapAreRefusedWhileThoseInWork) {
    ServerLimits l = small_limits();
    l.max_connections = 16;  // the least bind() keeps
    l.max_connections_per_peer = 16;
    TestServer ts(l, echo_routes);
    ASSERT_EQ(ts.server().limits().max_connections, 16);
    // 16 connections from 4 addresses (4 each: no address is near its own cap), each answered.
    std::vector<int> held;
    for (int i = 0; i < 16; ++i) {
        const int fd = connect_from(2 + i % 4, ts.port());
        const std::string path = "/echo/c" + std::to_string(i);
        send_all(fd, "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
        const std::string want = "echo:c" + std::to_string(i);
        ASSERT_NE(read_until(fd, want).find(want), std::string::npos) << i;
        held.push_back(fd);
    }
    // The 17th, from an address of its own: a 503 naming the server's cap, then closed.
    const int extra = connect_from(9, ts.port());
    bool closed = false;
    const std::string got = read_until(extra, "", &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
    EXPECT_NE(got.find("too many connections to this server"), std::string::npos) << got;
    EXPECT_TRUE(closed);
    ::close(extra);
    EXPECT_GE(ts.server().stats().refused, 1);
    // Those already in keep working.
    for (int i = 0; i < 16; i += 5) {
        send_all(held[i], "GET /echo/again HTTP/1.1\r\nHost: x\r\n\r\n");
        EXPECT_NE(read_until(held[i], "echo:again").find("echo:again"), std::string::npos) << i;
    }
    // Once one has gone, a new one is let in.
    ::close(held.back());
    held.pop_back();
    std::string ok;
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (ok.find("echo:new") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        const int fd = connect_from(9, ts.port());
        send_all(fd, "GET /echo/new HTTP/1.1\r\nHost: x\r\n\r\n");
        ok = read_until(fd, "echo:new");
        ::close(fd);
    }
    EXPECT_NE(ok.find("echo:new"), std::string::npos);
    for (const int fd : held) ::close(fd);
}

TEST(HttpServer, PathsTooLongToRouteAre414) {
    ServerLimits l = small_limits();
    l.max_header_bytes = 64 << 10;  // the head may hold it; the router's regexes must not see it
    TestServer ts(l, echo_routes);
    const int fd = connect_to(ts.port());
    send_all(fd,
             "GET /echo/" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\nGET /echo/next HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string got = read_until(fd, "echo:next");
    EXPECT_EQ(got.rfind("HTTP/1.1 414", 0), 0u) << got.substr(0, 100);
    EXPECT_NE(got.find("echo:next"), std::string::npos);
    ::close(fd);
}

TEST(HttpServer, HeadAndExpectContinue) {
    TestServer ts(small_limits(), echo_routes);
    const int fd = connect_to(ts.port());
    send_all(fd, "HEAD /echo/h HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string got = read_until(fd, "\r\n\r\n");
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u);
    EXPECT_NE(got.find("Content-Length: 6"), std::string::npos);
    send_all(fd, "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    got = read_until(fd, "100 Continue\r\n\r\n");
    EXPECT_EQ(got.rfind("HTTP/1.1 100 Continue", 0), 0u) << got;  // nothing of HEAD's answer had a body
    send_all(fd, "abcd");
    EXPECT_NE(read_until(fd, "len=4").find("len=4"), std::string::npos);
    ::close(fd);
}

TEST(HttpServer, PreRoutingAnswersBeforeTheBodyAndTheNextRequestIsItsOwn) {
    TestServer ts(small_limits(), [](Server& s) {
        echo_routes(s);
        s.set_pre_routing_handler([](const Request& req, Response& res) {
            if (req.get_header_value("k") == "ok") return Server::HandlerResponse::Unhandled;
            res.status = 401;
            res.set_content("denied", "text/plain");
            return Server::HandlerResponse::Handled;
        });
    });
    const int fd = connect_to(ts.port());
    send_all(fd, "GET /echo/one HTTP/1.1\r\nHost: x\r\n\r\nGET /echo/two HTTP/1.1\r\nHost: x\r\nk: ok\r\n\r\n");
    const std::string got = read_until(fd, "echo:two");
    EXPECT_EQ(got.rfind("HTTP/1.1 401", 0), 0u) << got;
    EXPECT_NE(got.find("echo:two"), std::string::npos) << got;
    EXPECT_EQ(got.find("echo:one"), std::string::npos);
    // With a body it never read, the server closes after its answer.
    send_all(fd, "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    bool closed = false;
    const std::string denied = read_until(fd, "", &closed);
    EXPECT_EQ(denied.rfind("HTTP/1.1 401", 0), 0u) << denied;
    EXPECT_NE(denied.find("Connection: close"), std::string::npos);
    EXPECT_TRUE(closed);
    ::close(fd);
}

TEST(HttpServer, HandlerSeesTheClientLeave) {
    std::atomic<bool> saw_gone{false};
    TestServer ts(small_limits(), [&](Server& s) {
        s.Get("/wait", [&](const Request& req, Response& res) {
            const auto deadline = std::chrono::steady_clock::now() + kPatience;
            while (!req.is_connection_closed() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
            saw_gone = req.is_connection_closed();
            res.status = 499;
        });
    });
    const int fd = connect_to(ts.port());
    send_all(fd, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
    std::this_thread::sleep_for(100ms);
    ::close(fd);
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (!saw_gone && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(saw_gone);
}

TEST(HttpServer, SlowReaderParksWithoutAThreadAndIsDropped) {
    ServerLimits l = small_limits();
    l.worker_threads = 1;  // the stream must not hold it
    l.write_timeout = 500ms;
    l.output_high_water = 64 << 10;
    std::atomic<int> released{-1};
    TestServer ts(l, [&](Server& s) {
        echo_routes(s);
        s.Get("/stream", [&](const Request&, Response& res) {
            res.set_chunked_content_provider(
                "text/event-stream",
                [](size_t, DataSink& sink) {
                    const std::string chunk(16 << 10, 'x');
                    return sink.write(chunk.data(), chunk.size());  // forever, as fast as it is let
                },
                [&](bool ok) { released = ok ? 1 : 0; });
        });
    });
    const int reader = connect_to(ts.port());
    const int rcvbuf = 4096;
    setsockopt(reader, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    send_all(reader, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");  // and never read
    std::this_thread::sleep_for(100ms);
    // The one worker is free for others while the stream waits for its reader.
    const int other = connect_to(ts.port());
    send_all(other, "GET /echo/free HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_NE(read_until(other, "echo:free").find("echo:free"), std::string::npos);
    ::close(other);
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (released < 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(released, 0);  // cut: the handler was told the client is gone
    EXPECT_GE(ts.server().stats().dropped_slow_readers, 1);
    ::close(reader);
}

TEST(HttpServer, StreamsAreChunkedAndEndCleanly) {
    std::atomic<int> released{-1};
    TestServer ts(small_limits(), [&](Server& s) {
        s.Get("/sse", [&](const Request&, Response& res) {
            auto n = std::make_shared<int>(0);
            res.set_chunked_content_provider(
                "text/event-stream",
                [n](size_t, DataSink& sink) {
                    if (++*n > 3) {
                        sink.done();
                        return true;
                    }
                    return sink.write("data: " + std::to_string(*n) + "\n\n");
                },
                [&](bool ok) { released = ok ? 1 : 0; });
        });
    });
    const int fd = connect_to(ts.port());
    send_all(fd, "GET /sse HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string got = read_until(fd, "0\r\n\r\n");
    EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos);
    EXPECT_NE(got.find("9\r\ndata: 3\n\n\r\n0\r\n\r\n"), std::string::npos) << got;
    // The connection stays usable after the stream.
    send_all(fd, "GET /sse HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    bool closed = false;
    const std::string again = read_until(fd, "", &closed);
    EXPECT_NE(again.find("data: 1"), std::string::npos);
    EXPECT_TRUE(closed);
    EXPECT_EQ(released, 1);
    ::close(fd);
}

}  // namespace
}  // namespace strata::net
