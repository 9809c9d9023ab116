// The engine supervisor against a real `strata engine` child process: routing of concurrent
// requests, kill -9 mid-stream (an error on that stream, then a restarted engine that serves
// the next request), requests waiting through a restart, and a model that cannot load.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
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

TEST(EngineClient, ModelThatCannotLoadFailsStart) {
    strata::test::TempDir dir;
    EngineClient c(engine_argv(dir / "missing.gguf"));
    EXPECT_THROW(c.start(20s), Error);
    EXPECT_FALSE(c.healthy());
}

}  // namespace
}  // namespace strata::serve
