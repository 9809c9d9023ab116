// The engine supervisor against a real `strata engine` child process: routing of concurrent
// requests, kill -9 mid-stream (an error on that stream, then a restarted engine that serves
// the next request), requests waiting through a restart, and a model that cannot load; an engine
// that does not read (SIGSTOP): submits, cancels and stats never block, a full queue refuses;
// cancels across a restart; the engine inherits no descriptor of the server's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

#include "model_tools/make_model.h"
#include "serve/engine_client.h"
#include "test_util.h"
#include "util/error.h"

namespace strata::serve {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::filesystem::path& tiny_gguf() {
    static strata::test::TempDir dir;
    static const std::filesystem::path p = [] {
        model_tools::MakeModelOptions o;
        o.seed = 5;
        const auto path = dir / "tiny.gguf";
        model_tools::make_model(o, path);
        return path;
    }();
    return p;
}

std::vector<std::string> engine_argv(const std::filesystem::path& model) {
    return {STRATA_BINARY, "engine", "-m", model.string(), "--max-running", "8"};
}

// Collects the events of requests and lets a test wait for their end.
struct Collector {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, std::vector<json>> events;
    std::map<std::string, bool> over;

    EngineClient::Handler handler(const std::string& id) {
        return [this, id](const json& ev) {
            std::lock_guard<std::mutex> lock(mu);
            events[id].push_back(ev);
            if (ev["event"] == "done" || ev["event"] == "error") over[id] = true;
            cv.notify_all();
        };
    }
    bool wait(const std::string& id, std::chrono::seconds t = 60s) {
        std::unique_lock<std::mutex> lock(mu);
        return cv.wait_for(lock, t, [&] { return over[id]; });
    }
    bool wait_for_tokens(const std::string& id, std::chrono::seconds t = 60s) {
        std::unique_lock<std::mutex> lock(mu);
        return cv.wait_for(lock, t, [&] { return !events[id].empty(); });
    }
    std::string text(const std::string& id) {
        std::lock_guard<std::mutex> lock(mu);
        std::string s;
        for (const auto& e : events[id])
            if (e["event"] == "tokens") s += e["text"].get<std::string>();
        return s;
    }
    json last(const std::string& id) {
        std::lock_guard<std::mutex> lock(mu);
        return events[id].back();
    }
};

TEST(EngineClient, RoutesConcurrentRequestsToTheirOwnHandlers) {
    EngineClient c(engine_argv(tiny_gguf()));
    c.start();
    EXPECT_TRUE(c.healthy());
    EXPECT_EQ(c.ready_info()["protocol"], 1);
    Collector col;
    for (int i = 0; i < 6; ++i)
        c.submit("r" + std::to_string(i),
                 json{{"prompt", {65 + i, 66, 67}}, {"max_tokens", 5 + i}, {"temperature", 0}, {"ignore_eos", true}},
                 col.handler("r" + std::to_string(i)));
    EXPECT_THROW(c.submit("r0", json{{"prompt", {1}}}, col.handler("dup")), Error);
    for (int i = 0; i < 6; ++i) {
        const std::string id = "r" + std::to_string(i);
        ASSERT_TRUE(col.wait(id)) << id;
        const json done = col.last(id);
        EXPECT_EQ(done["event"], "done");
        EXPECT_EQ(done["usage"]["completion_tokens"], 5 + i);
    }
    // Same prompt, same greedy settings, alone: same text (no cross-talk between requests).
    c.submit("again", json{{"prompt", {67, 66, 67}}, {"max_tokens", 7}, {"temperature", 0}, {"ignore_eos", true}},
             col.handler("again"));
    ASSERT_TRUE(col.wait("again"));
    EXPECT_EQ(col.text("again"), col.text("r2"));
    EXPECT_GE(c.stats()["finished"].get<int>(), 7);
    EXPECT_EQ(c.in_flight(), 0);
}

TEST(EngineClient, KilledEngineEndsStreamsWithAnErrorAndComesBack) {
    EngineClient c(engine_argv(tiny_gguf()));
    c.start();
    Collector col;
    c.submit("long", json{{"prompt", {65, 66}}, {"max_tokens", 1000000}, {"ignore_eos", true}}, col.handler("long"));
    ASSERT_TRUE(col.wait_for_tokens("long"));
    const pid_t first = c.engine_pid();
    ASSERT_GT(first, 0);
    ASSERT_EQ(::kill(first, SIGKILL), 0);
    ASSERT_TRUE(col.wait("long"));
    EXPECT_EQ(col.last("long")["event"], "error");
    EXPECT_NE(col.last("long")["message"].get<std::string>().find("signal 9"), std::string::npos) << col.last("long");
    // Submitted while the engine may still be down: waits, then runs on the new engine.
    c.submit("after", json{{"prompt", {65, 66}}, {"max_tokens", 4}, {"ignore_eos", true}}, col.handler("after"));
    ASSERT_TRUE(col.wait("after"));
    EXPECT_EQ(col.last("after")["event"], "done");
    EXPECT_TRUE(c.healthy());
    EXPECT_EQ(c.restarts(), 1);
    EXPECT_NE(c.engine_pid(), first);
}

TEST(EngineClient, CancelEndsARequestWithCancelled) {
    EngineClient c(engine_argv(tiny_gguf()));
    c.start();
    Collector col;
    c.submit("x", json{{"prompt", {65}}, {"max_tokens", 1000000}, {"ignore_eos", true}}, col.handler("x"));
    ASSERT_TRUE(col.wait_for_tokens("x"));
    c.cancel("x");
    ASSERT_TRUE(col.wait("x"));
    EXPECT_EQ(col.last("x")["finish_reason"], "cancelled");
}

// Runs `f` and returns how long it took.
template <typename F>
std::chrono::milliseconds timed(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

// Waits until every thread of `pid` is stopped (a SIGSTOP takes effect at each thread's next
// kernel entry, not when kill() returns: a reader thread may still drain the pipe meanwhile).
bool wait_stopped(pid_t pid) {
    const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
    for (int i = 0; i < 500; ++i) {
        bool all = true;
        for (const auto& t : std::filesystem::directory_iterator(tasks)) {
            std::ifstream f(t.path() / "stat");
            std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            const size_t close = stat.rfind(')');
            if (close == std::string::npos || close + 2 >= stat.size() || (stat[close + 2] != 'T' && stat[close + 2] != 't'))
                all = false;
        }
        if (all) return true;
        std::this_thread::sleep_for(10ms);
    }
    return false;
}

TEST(EngineClient, AnEngineThatDoesNotReadNeverBlocksACallerAndAFullQueueRefuses) {
    EngineClient c(engine_argv(tiny_gguf()));
    c.set_max_queued_bytes(128 << 10);
    c.start();
    Collector col;
    const pid_t pid = c.engine_pid();
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    ASSERT_TRUE(wait_stopped(pid));
    // ~24 KB submits (4,000 tokens, within the engine's context): the pipe (64 KiB) fills at the
    // third, the queue after a few more.
    const int n_vocab = c.ready_info()["model"]["n_vocab"].get<int>();
    json prompt = json::array();
    for (int i = 0; i < 4000; ++i) prompt.push_back(n_vocab - 1 - i % 100);
    int accepted = 0, refused = 0;
    std::vector<std::string> ids;
    for (int i = 0; i < 16; ++i) {
        const std::string id = "big" + std::to_string(i);
        const auto took = timed([&] {
            try {
                c.submit(id, json{{"prompt", prompt}, {"max_tokens", 2}}, col.handler(id));
                ids.push_back(id);
                ++accepted;
            } catch (const EngineBusy& e) {
                ++refused;
                EXPECT_NE(std::string(e.what()).find("not reading"), std::string::npos) << e.what();
            }
        });
        EXPECT_LT(took, 1000ms) << "submit " << i << " blocked";
    }
    EXPECT_GE(accepted, 2);
    EXPECT_GE(refused, 4);
    EXPECT_LE(c.queued_bytes(), size_t{128 << 10});
    // The rest of the client is not held up: stats waits no longer than asked (and is empty),
    // cancels return at once.
    json stats;
    EXPECT_LT(timed([&] { stats = c.stats(1s); }), 3000ms);
    EXPECT_TRUE(stats.empty());
    EXPECT_LT(timed([&] {
                  for (const auto& id : ids) c.cancel(id);
              }),
              1000ms);
    // Running again, the engine reads the backlog: every accepted request ends (cancelled).
    ASSERT_EQ(::kill(pid, SIGCONT), 0);
    for (const auto& id : ids) {
        ASSERT_TRUE(col.wait(id)) << id;
        EXPECT_EQ(col.last(id)["event"], "done") << col.last(id);
    }
    c.submit("after", json{{"prompt", {65, 66}}, {"max_tokens", 3}, {"ignore_eos", true}}, col.handler("after"));
    ASSERT_TRUE(col.wait("after"));
    EXPECT_EQ(col.last("after")["usage"]["completion_tokens"], 3);
    EXPECT_EQ(c.queued_bytes(), 0u);
    EXPECT_EQ(c.restarts(), 0);
}

TEST(EngineClient, ARequestCancelledBeforeItsEngineDiedEndsCancelledInsteadOfRunningAgain) {
    EngineClient c(engine_argv(tiny_gguf()));
    c.start();
    Collector col;
    const pid_t pid = c.engine_pid();
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    ASSERT_TRUE(wait_stopped(pid));
    c.submit("q", json{{"prompt", {65, 66}}, {"max_tokens", 1000000}, {"ignore_eos", true}}, col.handler("q"));
    c.cancel("q");  // queued: the stopped engine never reads it
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_TRUE(col.wait("q", 30s));
    EXPECT_EQ(col.last("q")["event"], "done");
    EXPECT_EQ(col.last("q")["finish_reason"], "cancelled");
    // Streams with output get an error that says the engine was lost.
    c.submit("s", json{{"prompt", {65}}, {"max_tokens", 1000000}, {"ignore_eos", true}}, col.handler("s"));
    ASSERT_TRUE(col.wait_for_tokens("s"));
    ASSERT_EQ(::kill(c.engine_pid(), SIGKILL), 0);
    ASSERT_TRUE(col.wait("s"));
    EXPECT_EQ(col.last("s")["event"], "error");
    EXPECT_EQ(col.last("s").value("engine_lost", false), true);
    EXPECT_EQ(c.in_flight(), 0);
}

// Descriptors of the engine process other than stdin, stdout, stderr and those it opened itself
// (its model file, ...): none may be one of the server's (a socket, a pipe end).
TEST(EngineClient, TheEngineInheritsNoDescriptorOfTheServer) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);  // without close-on-exec, as an accept()ed socket
    EngineClient c(engine_argv(tiny_gguf()));
    c.start();
    const pid_t pid = c.engine_pid();
    auto socket_inode = [](const std::string& fd_path) {
        std::error_code ec;
        return std::filesystem::read_symlink(fd_path, ec).string();
    };
    const std::string mine0 = socket_inode("/proc/self/fd/" + std::to_string(sv[0]));
    const std::string mine1 = socket_inode("/proc/self/fd/" + std::to_string(sv[1]));
    ASSERT_NE(mine0.find("socket:"), std::string::npos);
    int sockets = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
        const std::string target = socket_inode(e.path().string());
        EXPECT_NE(target, mine0);
        EXPECT_NE(target, mine1);
        if (target.find("socket:") != std::string::npos) ++sockets;
    }
    EXPECT_EQ(sockets, 0);
    ::close(sv[0]);
    ::close(sv[1]);
}

TEST(EngineClient, ModelThatCannotLoadFailsStart) {
    strata::test::TempDir dir;
    EngineClient c(engine_argv(dir / "missing.gguf"));
    EXPECT_THROW(c.start(20s), Error);
    EXPECT_FALSE(c.healthy());
}

}  // namespace
}  // namespace strata::serve
