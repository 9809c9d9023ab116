// The gateway's TOML config and keys: the example config parses, every mistake is an error that
// names the file and the key, and a key limiter identifies keys by digest and enforces each
// key's concurrency (FIFO queue, positions) and rate.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "gateway/gateway_config.h"
#include "gateway/key_limiter.h"
#include "serve/api_shapes.h"
#include "test_util.h"
#include "util/error.h"

namespace strata::gateway {
namespace {

std::string write(const test::TempDir& dir, const std::string& name, const std::string& text) {
    const auto path = dir / name;
    std::ofstream(path) << text;
    return path.string();
}

std::string error_of(const std::string& path) {
    try {
        load_gateway_config(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

const std::string kLane = "[[lanes]]\nname = \"a\"\nupstream = \"http://127.0.0.1:9000\"\nmodels = [\"m\"]\n";

TEST(GatewayConfig, TheExampleConfigParses) {
    const auto c = load_gateway_config(std::string(STRATA_SOURCE_DIR) + "/examples/gateway.toml");
    EXPECT_EQ(c.host, "127.0.0.1");
    EXPECT_EQ(c.port, 8090);
    ASSERT_EQ(c.lanes.size(), 1u);
    EXPECT_EQ(c.lanes[0].command.at(0), "strata");
    EXPECT_EQ(c.lanes[0].models, (std::vector<std::string>{"strata-tiny", "strata-tiny-fast"}));
    EXPECT_EQ(c.limits.queue_per_key, 64);
    EXPECT_DOUBLE_EQ(c.long_context.recent_fraction, 0.25);
    EXPECT_EQ(c.long_context.store_max_bytes, int64_t{1024} << 20);
    EXPECT_EQ(c.long_context.cache_max_bytes, int64_t{1024} << 20);
    EXPECT_EQ(c.limits.lane_dead_s, 6);
    EXPECT_EQ(c.limits.upstream_first_byte_s, 1800);
}

TEST(GatewayConfig, ReadsEveryTable) {
    test::TempDir dir;
    const std::string digest = serve::hex_of(serve::sha256_digest("sk-one"));
    const auto path = write(
        dir, "g.toml",
        "[server]\nlisten = \"0.0.0.0:8443\"\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\ndebug_endpoints = true\n"
        "[limits]\nmax_concurrency_per_key = 3\nqueue_per_key = 7\nrequests_per_minute = 90\nmax_body_mib = 8\nlane_wait_s = 5\n"
        "lane_dead_s = 9\nupstream_first_byte_s = 600\nupstream_idle_s = 120\n"
        "[long_context]\nenabled = false\nrecent_fraction = 0.5\nstore = \"s.sqlite\"\nstore_max_mib = 10\ndefault_output_tokens "
        "= 512\ncache_max_mib = 64\nrerank_lane = \"small\"\nembed_lane = \"small\"\nembed_timeout_ms = 700\nembed_budget_ms = "
        "0\n"
        "embed_instruction = \"Find it\"\nembed_dimensions = 256\n"
        "[[lanes]]\nname = \"big\"\ncommand = [\"strata\", \"serve\", \"-m\", \"x.gguf\"]\nmodels = [\"q\", \"q-fast\"]\n"
        "cpus = \"0-3,8\"\ngpu = \"1\"\nfallback = \"small\"\n"
        "[[lanes]]\nname = \"small\"\nupstream = \"http://127.0.0.1:8081\"\nmodels = [\"*\"]\nupstream_key = \"lane-secret\"\n"
        "[[keys]]\nname = \"alice\"\nsha256 = \"" +
            digest + "\"\nmax_concurrency = 2\nrequests_per_minute = 30\n");
    const auto c = load_gateway_config(path);
    EXPECT_EQ(c.host, "0.0.0.0");
    EXPECT_EQ(c.port, 8443);
    EXPECT_EQ(c.tls_cert, "c.pem");
    EXPECT_TRUE(c.debug_endpoints);
    EXPECT_EQ(c.limits.max_concurrency_per_key, 3);
    EXPECT_EQ(c.limits.queue_per_key, 7);
    EXPECT_DOUBLE_EQ(c.limits.requests_per_minute, 90);
    EXPECT_EQ(c.limits.max_body_bytes, int64_t{8} << 20);
    EXPECT_EQ(c.limits.lane_dead_s, 9);
    EXPECT_EQ(c.limits.upstream_first_byte_s, 600);
    EXPECT_EQ(c.limits.upstream_idle_s, 120);
    EXPECT_EQ(c.long_context.cache_max_bytes, int64_t{64} << 20);
    EXPECT_FALSE(c.long_context.enabled);
    EXPECT_EQ(c.long_context.store_path, "s.sqlite");
    EXPECT_EQ(c.long_context.default_output_tokens, 512);
    EXPECT_EQ(c.long_context.rerank_lane, "small");
    EXPECT_EQ(c.long_context.embed_lane, "small");
    EXPECT_EQ(c.long_context.embed_timeout_ms, 700);
    EXPECT_EQ(c.long_context.embed_budget_ms, 0);
    EXPECT_EQ(c.long_context.embed_instruction, "Find it");
    EXPECT_EQ(c.long_context.embed_dimensions, 256);
    ASSERT_EQ(c.lanes.size(), 2u);
    EXPECT_EQ(c.lanes[0].cpus, "0-3,8");
    EXPECT_EQ(c.lanes[0].fallback, "small");
    EXPECT_EQ(c.lanes[1].upstream_key, "lane-secret");
    ASSERT_EQ(c.keys.size(), 1u);
    EXPECT_EQ(c.keys[0].sha256_hex, digest);
    EXPECT_EQ(c.keys[0].max_concurrency, 2);
}

TEST(GatewayConfig, MistakesAreErrorsNamingTheFileAndKey) {
    test::TempDir dir;
    struct Case {
        std::string text, expected;
    };
    const std::vector<Case> cases = {
        {"[server]\nlisten = \"nowhere\"\n" + kLane, "must be HOST:PORT"},
        {"[server]\nlisten = \"127.0.0.1:99999\"\n" + kLane, "port must be a number"},
        {"[server]\nlistne = \"127.0.0.1:1\"\n" + kLane, "unknown key 'listne' in [server]"},
        {"[limits]\nqueue_per_key = \"many\"\n" + kLane, "'queue_per_key' in [limits] must be a non-negative integer"},
        {"[limits]\nqueue_per_key = -1\n" + kLane, "must be a non-negative integer"},
        {"[server]\n", "no lanes"},
        {"[[lanes]]\nname = \"a\"\nmodels = [\"m\"]\n", "exactly one of upstream or command"},
        {"[[lanes]]\nname = \"a\"\nupstream = \"https://example.com\"\nmodels = [\"m\"]\n", "must be an http:// URL"},
        {"[[lanes]]\nname = \"a\"\nupstream = \"http://127.0.0.1:1\"\n", "routes no models"},
        {kLane + kLane, "two lanes are named 'a'"},
        {kLane + "[[lanes]]\nname = \"b\"\nupstream = \"http://127.0.0.1:2\"\nmodels = [\"m\"]\n", "routed to two lanes"},
        {"[[lanes]]\nname = \"a\"\nupstream = \"http://127.0.0.1:1\"\nmodels = [\"m\"]\nfallback = \"zz\"\n",
         "fallback 'zz' is not another lane"},
        {kLane + "[[keys]]\nname = \"k\"\nsha256 = \"abc\"\n", "sha256 must be 64 hex digits"},
        {kLane + "[[keys]]\nname = \"k\"\nsecret = \"plain\"\n", "unknown key 'secret'"},
        {"[server]\ntls_cert = \"c.pem\"\n" + kLane, "TLS needs both"},
        {"[long_context]\nrecent_fraction = 2.0\n" + kLane, "recent_fraction"},
        {"[limits]\nlane_dead_s = 1\n" + kLane, "lane_dead_s must be at least 2"},
        {"[long_context]\nembed_lane = \"zz\"\n" + kLane, "embed_lane: no lane is named 'zz'"},
        {"[long_context]\nrerank_lane = \"zz\"\n" + kLane, "rerank_lane: no lane is named 'zz'"},
        {"[long_context]\nembed_budget_ms = -1\n" + kLane, "embed_budget_ms"},
        {"[long_context]\nembed_timeout_ms = 0\n" + kLane, "embed_timeout_ms must be within 1-600000"},
        {"[long_context]\nembed_dimensions = -4\n" + kLane, "embed_dimensions"},
        {"[limits]\nupstream_first_byte_s = 0\n" + kLane, "upstream_first_byte_s"},
        {"this is not toml", "g.toml"},
    };
    for (const auto& c : cases) {
        const auto path = write(dir, "g.toml", c.text);
        const std::string e = error_of(path);
        EXPECT_NE(e.find(c.expected), std::string::npos) << "config:\n" << c.text << "\nerror: " << e;
        EXPECT_NE(e.find("g.toml"), std::string::npos) << e;
    }
}

TEST(GatewayConfig, KeysFileAndHashKeyEntryRoundTrip) {
    test::TempDir dir;
    const auto path =
        write(dir, "keys.toml", hashed_key_entry("alice", "sk-alice-secret") + hashed_key_entry("bob", "sk-bob-secret"));
    const auto keys = load_keys_file(path);
    ASSERT_EQ(keys.size(), 2u);
    EXPECT_EQ(keys[1].name, "bob");
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("sk-alice-secret"), std::string::npos) << "a secret was written";
    KeyLimiter limiter(keys, LimitsConfig{});
    EXPECT_EQ(limiter.identify("sk-bob-secret"), "bob");
    EXPECT_EQ(limiter.identify("sk-alice-secret"), "alice");
    EXPECT_FALSE(limiter.identify("sk-alice-secreT"));
    EXPECT_FALSE(limiter.identify(""));
    KeyLimiter open({}, LimitsConfig{});
    EXPECT_FALSE(open.auth_required());
    EXPECT_EQ(open.identify(""), "");
}

TEST(KeyLimiter, ConcurrencyQueueIsFifoWithPositionsAndBounded) {
    LimitsConfig limits;
    limits.max_concurrency_per_key = 1;
    limits.queue_per_key = 2;
    KeyLimiter limiter({}, limits);
    KeyLimiter::Slot first;
    ASSERT_EQ(limiter.acquire("k", nullptr, nullptr, first).outcome, KeyLimiter::Outcome::Admitted);
    std::vector<int> order;
    std::mutex mu;
    std::atomic<int> position2{0}, position3{0};
    std::thread t2([&] {
        KeyLimiter::Slot s;
        const auto r = limiter.acquire(
            "k", nullptr,
            [&](int p) {
                if (p > 0) position2 = p;
            },
            s);
        std::lock_guard lock(mu);
        order.push_back(r.outcome == KeyLimiter::Outcome::Admitted ? 2 : -2);
    });
    while (position2.load() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::thread t3([&] {
        KeyLimiter::Slot s;
        const auto r = limiter.acquire(
            "k", nullptr,
            [&](int p) {
                if (p > 0) position3 = p;
            },
            s);
        std::lock_guard lock(mu);
        order.push_back(r.outcome == KeyLimiter::Outcome::Admitted ? 3 : -3);
    });
    while (position3.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // The queue holds two: a third waiter is refused at once.
    KeyLimiter::Slot refused;
    EXPECT_EQ(limiter.acquire("k", nullptr, nullptr, refused).outcome, KeyLimiter::Outcome::QueueFull);
    // Another key is not held up by this one's queue.
    KeyLimiter::Slot other;
    EXPECT_EQ(limiter.acquire("other", nullptr, nullptr, other).outcome, KeyLimiter::Outcome::Admitted);
    auto snap = limiter.snapshot();
    ASSERT_EQ(snap.size(), 2u);
    EXPECT_EQ(snap[0].name, "k");
    EXPECT_EQ(snap[0].running, 1);
    EXPECT_EQ(snap[0].queued, 2);
    first = KeyLimiter::Slot();  // release: the waiters run in arrival order
    t2.join();
    t3.join();
    EXPECT_EQ(order, (std::vector<int>{2, 3}));
}

TEST(KeyLimiter, AWaiterWhoseClientLeftLeavesTheQueue) {
    LimitsConfig limits;
    limits.max_concurrency_per_key = 1;
    KeyLimiter limiter({}, limits);
    KeyLimiter::Slot held;
    ASSERT_EQ(limiter.acquire("k", nullptr, nullptr, held).outcome, KeyLimiter::Outcome::Admitted);
    std::atomic<bool> gone{false};
    KeyLimiter::Result r;
    std::thread t([&] {
        KeyLimiter::Slot s;
        r = limiter.acquire(
            "k", [&] { return gone.load(); }, nullptr, s);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gone = true;
    t.join();
    EXPECT_EQ(r.outcome, KeyLimiter::Outcome::Gone);
    EXPECT_EQ(limiter.snapshot()[0].queued, 0);
}

TEST(KeyLimiter, RateLimitRefusesWithRetryAfter) {
    const std::string digest = serve::hex_of(serve::sha256_digest("s"));
    LimitsConfig limits;
    limits.requests_per_minute = 1000;                     // the default for keys without their own rate
    KeyLimiter limiter({{"slow", digest, 0, 6}}, limits);  // 6 a minute: a burst of six, then one per 10 s
    for (int i = 0; i < 6; ++i) {
        KeyLimiter::Slot s;
        ASSERT_EQ(limiter.acquire("slow", nullptr, nullptr, s).outcome, KeyLimiter::Outcome::Admitted) << i;
    }
    KeyLimiter::Slot b;
    const auto r = limiter.acquire("slow", nullptr, nullptr, b);
    EXPECT_EQ(r.outcome, KeyLimiter::Outcome::RateLimited);
    EXPECT_GE(r.retry_after_s, 9);
    EXPECT_LE(r.retry_after_s, 10);
    // The default rate applies to other keys: a minute's worth passes at once.
    for (int i = 0; i < 1000; ++i) {
        KeyLimiter::Slot s;
        ASSERT_EQ(limiter.acquire("fast", nullptr, nullptr, s).outcome, KeyLimiter::Outcome::Admitted) << i;
    }
}

}  // namespace
}  // namespace strata::gateway
