// Dense retrieval in the gateway (context/dense_index.h, retriever.h's dense ranks, the
// assembler's embedding of new chunks): the int8 store's error bound on random vectors; a fact
// that shares no word with the question reaches the prompt only with dense ranks; each turn
// embeds only the chunks never embedded; a failing embedder leaves BM25 alone and the chunks
// for a later turn; a fork keeps its prefix's vectors; another request of the conversation does
// not wait for a lane call.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "../../bench/gateway_needles.h"
#include "context_test_util.h"
#include "gateway/context/context_assembler.h"
#include "gateway/context/dense_index.h"
#include "gateway/context/session_store.h"
#include "test_util.h"

namespace strata::gateway {
namespace {

using bench::needles::Gen;
using test_helpers::paragraph;
using test_helpers::rough_count;

TEST(GatewayDenseIndex, Int8VectorsKeepDotProductsWithinTheirBound) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    constexpr size_t kDims = 384;
    DenseIndex d;
    std::vector<std::vector<float>> v(50, std::vector<float>(kDims));
    for (uint32_t c = 0; c < 50; ++c) {
        if (c % 7 == 3) continue;  // some chunks never embedded
        float norm = 0;
        for (float& x : v[c]) {
            x = nd(rng);
            norm += x * x;
        }
        for (float& x : v[c]) x /= std::sqrt(norm);
        d.set(c, v[c]);
    }
    EXPECT_EQ(d.count(), 50u - 7u);
    EXPECT_EQ(d.dims(), kDims);
    std::vector<float> q(kDims);
    for (float& x : q) x = nd(rng);
    double q_l1 = 0;
    for (float x : q) q_l1 += std::abs(x);
    for (uint32_t c = 0; c < 50; ++c) {
        if (c % 7 == 3) {
            EXPECT_FALSE(d.has(c));
            continue;
        }
        double exact = 0, m = 0;
        for (size_t i = 0; i < kDims; ++i) {
            exact += static_cast<double>(q[i]) * v[c][i];
            m = std::max(m, static_cast<double>(std::abs(v[c][i])));
        }
        // Each stored component is off by at most half a step (max |v| / 127 / 2).
        const double bound = q_l1 * m / 254.0 + 1e-5;
        EXPECT_NEAR(d.dot(c, q), exact, bound) << "chunk " << c;
        EXPECT_GT(std::abs(d.dot(c, q) - exact), 0.0);  // it is int8, not the floats
    }
    const DenseIndex p = d.prefix(20);
    EXPECT_EQ(p.count(), 20u - 3u);  // 3, 10, 17 were never set
    EXPECT_DOUBLE_EQ(p.dot(5, q), d.dot(5, q));
    EXPECT_FALSE(p.has(25));
    // A vector read out and put back (the session store's copy) is the same vector.
    DenseIndex copy;
    for (uint32_t c = 0; c < 50; ++c)
        if (d.has(c)) copy.set_codes(c, d.scale(c), d.codes(c));
    EXPECT_EQ(copy.count(), d.count());
    for (uint32_t c = 0; c < 50; ++c) EXPECT_EQ(copy.dot(c, q), d.dot(c, q)) << "chunk " << c;
    EXPECT_EQ(d.scale(3), -1.0f);
    EXPECT_TRUE(d.codes(3).empty());
    // Vectors of other dimensions (the lane's model changed): the old ones go.
    d.set(60, std::vector<float>(16, 0.25f));
    EXPECT_EQ(d.count(), 1u);
    EXPECT_FALSE(d.has(5));
}

// An embedder whose dimensions are concepts: the words of a group land on one dimension, so
// "lighthouse keeper" and "beacon warden" are near, as a real embedding model makes them;
// other words spread over hashed dimensions. Counts what it embeds; fails while `down`.
class ConceptEmbedder : public Embedder {
public:
    std::vector<std::vector<float>> embed_passages(std::span<const std::string_view> texts) override {
        if (down) throw std::runtime_error("the embed lane is down");
        std::vector<std::vector<float>> out;
        for (std::string_view t : texts) out.push_back(vec(t));
        passages += static_cast<int>(texts.size());
        return out;
    }
    std::vector<float> embed_query(std::string_view q) override {
        if (down) throw std::runtime_error("the embed lane is down");
        ++queries;
        return vec(q);
    }
    std::atomic<bool> down{false};
    std::atomic<int> passages{0}, queries{0};  // requests may embed at once

private:
    static constexpr size_t kDims = 64;
    static std::vector<float> vec(std::string_view t) {
        static const std::vector<std::vector<std::string>> groups = {{"lighthouse", "beacon", "pharos"},
                                                                     {"keeper", "warden", "custodian"},
                                                                     {"storm", "gale", "tempest"},
                                                                     {"record", "logged", "noted", "wrote"}};
        std::vector<float> v(kDims, 0.0f);
        std::string word;
        auto flush = [&] {
            if (word.empty()) return;
            size_t dim = 8 + std::hash<std::string>()(word) % (kDims - 8);
            float w = 0.05f;  // other words: faint
            for (size_t g = 0; g < groups.size(); ++g)
                for (const auto& x : groups[g])
                    if (word == x) dim = g, w = 1.0f;
            v[dim] += w;
            word.clear();
        };
        for (char ch : t) {
            if (std::isalpha(static_cast<unsigned char>(ch)))
                word += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            else flush();
        }
        flush();
        float n = 0;
        for (float x : v) n += x * x;
        for (float& x : v) x /= n > 0 ? std::sqrt(n) : 1.0f;
        return v;
    }
};

// 120 turns of prose; at turn 40 a fact in words the question never uses.
Conversation beacon_conversation() {
    Gen g(77);
    Conversation c;
    for (int t = 0; t < 120; ++t) {
        std::string u = paragraph(g, 4);
        if (t == 40) u += " The beacon warden Ansel noted one tempest.";
        c.messages.push_back({"user", u, true});
        c.messages.push_back({"assistant", paragraph(g, 4), false});
    }
    c.messages.push_back({"user", "What did the lighthouse keeper record in the storm?", true});
    return c;
}

TEST(GatewayDenseRetrieval, AFactInOtherWordsComesInOnlyWithDenseRanks) {
    const Conversation c = beacon_conversation();
    const std::string fact = "The beacon warden Ansel noted one tempest.";
    {
        ContextAssembler a(nullptr, rough_count);
        const AssembleResult r = a.assemble("", c, {.budget_tokens = 1200});
        ASSERT_TRUE(r.abridged && r.fits);
        EXPECT_EQ(r.stats.retrieval, "bm25");
        EXPECT_EQ(r.history_block.find(fact), std::string::npos) << "BM25 alone found it: the test shows nothing";
    }
    auto embedder = std::make_shared<ConceptEmbedder>();
    RetrievalOptions ro;
    ro.embedder = embedder;
    ContextAssembler a(nullptr, rough_count, ro);
    const AssembleResult r = a.assemble("", c, {.budget_tokens = 1200});
    ASSERT_TRUE(r.abridged && r.fits);
    EXPECT_EQ(r.stats.retrieval, "bm25+dense");
    EXPECT_NE(r.history_block.find(fact), std::string::npos);
    EXPECT_GT(r.stats.chunks_embedded, 100);
    EXPECT_EQ(r.stats.chunks_unembedded, 0);
    EXPECT_EQ(embedder->passages.load(), r.stats.chunks_embedded);
    EXPECT_EQ(embedder->queries.load(), 1);
}

TEST(GatewayDenseRetrieval, EachTurnEmbedsOnlyChunksNeverEmbedded) {
    Conversation c = beacon_conversation();
    auto embedder = std::make_shared<ConceptEmbedder>();
    RetrievalOptions ro;
    ro.embedder = embedder;
    ContextAssembler a(nullptr, rough_count, ro);
    const AssembleResult r1 = a.assemble("", c, {.budget_tokens = 1200});
    ASSERT_TRUE(r1.abridged);
    const int first = r1.stats.chunks_embedded;
    // The next turn: the answer and a new question. The candidates grow by the turns that left
    // the verbatim window; only those are embedded.
    Gen g(5);
    c.messages.push_back({"assistant", paragraph(g, 3), false});
    c.messages.push_back({"user", "And who was the lighthouse keeper?", true});
    const AssembleResult r2 = a.assemble("", c, {.budget_tokens = 1200});
    ASSERT_TRUE(r2.abridged);
    EXPECT_TRUE(r2.stats.session_hit);
    EXPECT_LT(r2.stats.chunks_embedded, first / 4);
    EXPECT_EQ(embedder->passages.load(), first + r2.stats.chunks_embedded);
    // The same request again: nothing new to embed.
    const AssembleResult r3 = a.assemble("", c, {.budget_tokens = 1200});
    EXPECT_EQ(r3.stats.chunks_embedded, 0);
    EXPECT_EQ(r3.stats.retrieval, "bm25+dense");
}

TEST(GatewayDenseRetrieval, AFailingEmbedderLeavesBm25AndItsChunksForLater) {
    const Conversation c = beacon_conversation();
    auto embedder = std::make_shared<ConceptEmbedder>();
    embedder->down = true;
    RetrievalOptions ro;
    ro.embedder = embedder;
    ContextAssembler a(nullptr, rough_count, ro);
    const AssembleResult r1 = a.assemble("", c, {.budget_tokens = 1200});
    ASSERT_TRUE(r1.abridged && r1.fits);
    EXPECT_EQ(r1.stats.retrieval, "bm25");
    EXPECT_EQ(r1.stats.chunks_embedded, 0);
    EXPECT_GT(r1.stats.chunks_unembedded, 100);
    embedder->down = false;  // the lane is back
    const AssembleResult r2 = a.assemble("", c, {.budget_tokens = 1200});
    EXPECT_EQ(r2.stats.retrieval, "bm25+dense");
    EXPECT_EQ(r2.stats.chunks_embedded, r1.stats.chunks_unembedded);
    EXPECT_EQ(r2.stats.chunks_unembedded, 0);
}

TEST(GatewayDenseRetrieval, ABudgetOfNothingEmbedsNothingAndSaysSo) {
    const Conversation c = beacon_conversation();
    auto embedder = std::make_shared<ConceptEmbedder>();
    RetrievalOptions ro;
    ro.embedder = embedder;
    ro.dense_budget_ms = 0;
    ContextAssembler a(nullptr, rough_count, ro);
    const AssembleResult r = a.assemble("", c, {.budget_tokens = 1200});
    ASSERT_TRUE(r.abridged && r.fits);
    EXPECT_EQ(r.stats.chunks_embedded, 0);
    EXPECT_GT(r.stats.chunks_unembedded, 100);
    EXPECT_EQ(r.stats.retrieval, "bm25");  // no vectors stored: no dense ranks
    EXPECT_EQ(embedder->queries.load(), 0);
}

// The vectors live in the session store too: a restarted gateway (a new store on the same file,
// a new assembler with an empty cache) embeds nothing again and still ranks by them, also for a
// fork of the stored conversation (an edited last question) made after the restart; a vector
// changes nothing on the stored copy's ranking.
TEST(GatewayDenseRetrieval, ARestartedGatewayKeepsTheVectors) {
    test::TempDir dir;
    Conversation c = beacon_conversation();
    AssembleResult before;
    int embedded = 0;
    {
        SessionStore store({.path = dir / "s.db"});
        auto embedder = std::make_shared<ConceptEmbedder>();
        RetrievalOptions ro;
        ro.embedder = embedder;
        ContextAssembler a(&store, rough_count, ro);
        before = a.assemble("", c, {.budget_tokens = 1200});
        ASSERT_TRUE(before.abridged);
        EXPECT_EQ(before.stats.retrieval, "bm25+dense");
        embedded = embedder->passages.load();
        ASSERT_GT(embedded, 100);
    }
    SessionStore store({.path = dir / "s.db"});
    auto embedder = std::make_shared<ConceptEmbedder>();
    RetrievalOptions ro;
    ro.embedder = embedder;
    ContextAssembler a(&store, rough_count, ro);
    const AssembleResult after = a.assemble("", c, {.budget_tokens = 1200});
    EXPECT_EQ(after.stats.chunks_embedded, 0);
    EXPECT_EQ(after.stats.chunks_unembedded, 0);
    EXPECT_EQ(embedder->passages.load(), 0);
    EXPECT_EQ(after.stats.retrieval, "bm25+dense");
    EXPECT_EQ(after.history_block, before.history_block);
    c.messages.back().text = "Who kept the lighthouse during the storm?";
    const AssembleResult fork = a.assemble("", c, {.budget_tokens = 1200});
    EXPECT_EQ(fork.stats.chunks_embedded, 0);
    EXPECT_EQ(fork.stats.retrieval, "bm25+dense");
    EXPECT_NE(fork.history_block.find("The beacon warden Ansel noted one tempest."), std::string::npos);
}

// The lane's model changed (vectors of 32 dimensions where 64 were stored): the old rows go with
// the first new vector, and their bytes come off the store's count (before the fix the count
// only grew). The same turns with the old model are the baseline: the difference is the old
// rows' bytes (24 a row, a 4-byte scale, 64 codes each) and the new rows' 32 fewer codes.
TEST(GatewayDenseRetrieval, AModelChangeReplacesTheStoredVectorsAndTheirBytes) {
    class Half : public ConceptEmbedder {
    public:
        std::vector<std::vector<float>> embed_passages(std::span<const std::string_view> texts) override {
            auto v = ConceptEmbedder::embed_passages(texts);
            for (auto& x : v) {
                x.resize(32);
                float n = 0;
                for (float y : x) n += y * y;
                for (float& y : x) y /= n > 0 ? std::sqrt(n) : 1.0f;
            }
            return v;
        }
    };
    int64_t bytes[2] = {0, 0};
    int first_embedded = 0, second_embedded[2] = {0, 0};
    for (int changed = 0; changed < 2; ++changed) {
        test::TempDir dir;
        Conversation c = beacon_conversation();
        SessionStore store({.path = dir / "s.db"});
        {
            RetrievalOptions ro;
            ro.embedder = std::make_shared<ConceptEmbedder>();
            ContextAssembler a(&store, rough_count, ro);
            const AssembleResult r = a.assemble("", c, {.budget_tokens = 1200});
            ASSERT_TRUE(r.abridged);
            first_embedded = r.stats.chunks_embedded;
        }
        RetrievalOptions ro;
        ro.embedder = changed ? std::shared_ptr<Embedder>(std::make_shared<Half>()) : std::make_shared<ConceptEmbedder>();
        ContextAssembler a(&store, rough_count, ro);  // an empty cache: the session comes from the store
        // New turns, enough that earlier ones leave the verbatim window and become excerptable.
        const std::string question = c.messages.back().text;
        c.messages.pop_back();
        for (int t = 0; t < 12; ++t) {
            c.messages.push_back({"user",
                                  "Turn " + std::to_string(t) +
                                      ": the harbour cranes worked the night shift again, and "
                                      "the manifests for the grain ships were checked twice by the clerks.",
                                  true});
            c.messages.push_back({"assistant",
                                  "Noted for turn " + std::to_string(t) +
                                      ": cranes, night shift, grain manifests "
                                      "checked twice; nothing else changed at the quay.",
                                  false});
        }
        c.messages.push_back({"user", question, true});
        const AssembleResult r = a.assemble("", c, {.budget_tokens = 1200});
        ASSERT_TRUE(r.abridged);
        second_embedded[changed] = r.stats.chunks_embedded;
        bytes[changed] = store.total_bytes();
    }
    ASSERT_GT(first_embedded, 100);
    ASSERT_GT(second_embedded[1], 0);
    EXPECT_EQ(second_embedded[0], second_embedded[1]);
    // Kept in the baseline, gone after the change: the old rows; and each new row is 32 codes
    // shorter.
    EXPECT_EQ(bytes[0] - bytes[1], static_cast<int64_t>(first_embedded) * (24 + 4 + 64) + second_embedded[1] * 32);
}

// A file of the store's first schema (session ids could be reused): a cache, so it starts over.
TEST(GatewayDenseRetrieval, AStoreOfTheOldSchemaStartsOver) {
    test::TempDir dir;
    {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open((dir / "s.db").c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db,
                               "CREATE TABLE sessions(id INTEGER PRIMARY KEY, scope TEXT NOT NULL, n_messages INTEGER NOT NULL,"
                               " bytes INTEGER NOT NULL, last_used INTEGER NOT NULL);"
                               "INSERT INTO sessions VALUES(1, '', 0, 0, 1);",
                               nullptr, nullptr, nullptr),
                  SQLITE_OK);
        sqlite3_close(db);
    }
    std::vector<std::string> warnings;
    SessionStore store({.path = dir / "s.db", .log = [&](const std::string& w) { warnings.push_back(w); }});
    EXPECT_TRUE(store.available());
    EXPECT_EQ(store.n_sessions(), 0);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("starts empty"), std::string::npos) << warnings[0];
    RetrievalOptions ro;
    ro.embedder = std::make_shared<ConceptEmbedder>();
    ContextAssembler a(&store, rough_count, ro);
    EXPECT_TRUE(a.assemble("", beacon_conversation(), {.budget_tokens = 1200}).abridged);
    EXPECT_EQ(store.n_sessions(), 1);
}

// A lane at a fixed time per passage that records each call's size.
class SlowEmbedder : public ConceptEmbedder {
public:
    explicit SlowEmbedder(std::chrono::milliseconds per_passage) : per_(per_passage) {}
    std::vector<std::vector<float>> embed_passages(std::span<const std::string_view> texts) override {
        calls.push_back(texts.size());
        std::this_thread::sleep_for(per_ * static_cast<int>(texts.size()));
        return ConceptEmbedder::embed_passages(texts);
    }
    std::vector<size_t> calls;

private:
    std::chrono::milliseconds per_;
};

// A slow lane (50 ms a passage) and a dense budget of 1 s: the calls are sized to what the budget
// has left at the measured rate (a first call of 4, then about 19), so the turn spends about its
// budget, where calls of 64 would have spent 3.2 s; the rest of the chunks wait for later turns,
// and the next turn goes on at the measured rate from its first call.
TEST(GatewayDenseRetrieval, ASlowLanesCallsFitTheBudget) {
    const Conversation c = beacon_conversation();
    auto embedder = std::make_shared<SlowEmbedder>(std::chrono::milliseconds(50));
    RetrievalOptions ro;
    ro.embedder = embedder;
    ro.dense_budget_ms = 1000;
    ContextAssembler a(nullptr, rough_count, ro);
    const auto t0 = std::chrono::steady_clock::now();
    const AssembleResult r = a.assemble("", c, {.budget_tokens = 1200});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(r.abridged);
    ASSERT_GE(embedder->calls.size(), 2u);
    EXPECT_EQ(embedder->calls.front(), 4u);
    EXPECT_LE(r.stats.chunks_embedded, 21);  // 1 s at 20 a second, and no more
    EXPECT_GE(r.stats.chunks_embedded, 8);
    EXPECT_GT(r.stats.chunks_unembedded, 50);
    EXPECT_LT(s, 2.0) << "a call of 64 at 50 ms a passage alone is 3.2 s";
    const size_t first_turn_calls = embedder->calls.size();
    const AssembleResult r2 = a.assemble("", c, {.budget_tokens = 1200});
    ASSERT_GT(embedder->calls.size(), first_turn_calls);
    EXPECT_GT(embedder->calls[first_turn_calls], 4u);  // the rate is known: no probe
    EXPECT_LE(embedder->calls[first_turn_calls], 20u);
    EXPECT_GT(r2.stats.chunks_embedded, 0);
}

// Holds its first caller until released (or 20 s): a request of the same conversation arriving
// meanwhile must get through without waiting for that call.
class HeldEmbedder : public ConceptEmbedder {
public:
    std::vector<std::vector<float>> embed_passages(std::span<const std::string_view> texts) override {
        {
            std::unique_lock<std::mutex> l(mu);
            if (!held) {
                held = true;
                entered.notify_all();
                released_in_time = cv.wait_for(l, std::chrono::seconds(20), [&] { return released; });
            }
        }
        return ConceptEmbedder::embed_passages(texts);
    }
    void release() {
        std::lock_guard<std::mutex> l(mu);
        released = true;
        cv.notify_all();
    }
    void wait_entered() {
        std::unique_lock<std::mutex> l(mu);
        entered.wait(l, [&] { return held; });
    }
    std::mutex mu;
    std::condition_variable cv, entered;
    bool held = false, released = false, released_in_time = false;
};

TEST(GatewayDenseRetrieval, AnotherRequestOfTheConversationDoesNotWaitForItsEmbedding) {
    const Conversation c = beacon_conversation();
    auto embedder = std::make_shared<HeldEmbedder>();
    RetrievalOptions ro;
    ro.embedder = embedder;
    ContextAssembler a(nullptr, rough_count, ro);
    AssembleResult first;
    std::thread t([&] { first = a.assemble("", c, {.budget_tokens = 1200}); });
    embedder->wait_entered();  // the first request is inside a lane call now
    // The same conversation again: it embeds too (nothing has a vector yet) and finishes while
    // the first request's call is still held.
    const AssembleResult second = a.assemble("", c, {.budget_tokens = 1200});
    embedder->release();
    t.join();
    EXPECT_TRUE(embedder->released_in_time) << "the second request waited for the first one's lane call";
    ASSERT_TRUE(second.abridged && first.abridged);
    EXPECT_EQ(second.stats.retrieval, "bm25+dense");
    EXPECT_EQ(first.stats.retrieval, "bm25+dense");
    EXPECT_EQ(first.history_block, second.history_block);
}

TEST(GatewayDenseRetrieval, AForkKeepsItsPrefixsVectors) {
    Conversation c = beacon_conversation();
    auto embedder = std::make_shared<ConceptEmbedder>();
    RetrievalOptions ro;
    ro.embedder = embedder;
    ContextAssembler a(nullptr, rough_count, ro);
    const AssembleResult r1 = a.assemble("", c, {.budget_tokens = 1200});
    ASSERT_TRUE(r1.abridged);
    // An edited last question (a fork at the last message): every candidate chunk is shared.
    c.messages.back().text = "Who kept the lighthouse during the storm?";
    const AssembleResult r2 = a.assemble("", c, {.budget_tokens = 1200});
    ASSERT_TRUE(r2.abridged);
    EXPECT_EQ(r2.stats.chunks_embedded, 0);
    EXPECT_EQ(r2.stats.retrieval, "bm25+dense");
    EXPECT_NE(r2.history_block.find("The beacon warden Ansel noted one tempest."), std::string::npos);
}

}  // namespace
}  // namespace strata::gateway
