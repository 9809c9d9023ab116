// Sessions: isolation between scopes and between diverging conversations, persistence across a
// restart (only new messages are indexed), the store's and the cache's LRU byte bounds.
#include <gtest/gtest.h>

#include "../../bench/gateway_needles.h"
#include "context_test_util.h"
#include "gateway/context/context_assembler.h"
#include "gateway/context/session.h"
#include "gateway/context/session_store.h"
#include "test_util.h"

namespace strata::gateway {
namespace {

using bench::needles::Gen;
using test_helpers::paragraph;
using test_helpers::rough_count;

// A chat of `turns` exchanges, with `fact` said by the user in turn `fact_turn`.
Conversation chat(uint64_t seed, int turns, int fact_turn = -1, const std::string& fact = "") {
    Gen g(seed);
    Conversation c;
    c.system = "You remember things.";
    for (int t = 0; t < turns; ++t) {
        std::string u = paragraph(g, 3);
        if (t == fact_turn) u += " " + fact;
        c.messages.push_back({"user", u, true});
        c.messages.push_back({"assistant", paragraph(g, 6), false});
    }
    return c;
}

void ask(Conversation& c, const std::string& q) { c.messages.push_back({"user", q, true}); }

int expected_chunks(const Conversation& c, size_t from) {
    int n = 0;
    for (size_t i = from; i < c.messages.size(); ++i) n += static_cast<int>(chunk_text(c.messages[i].text).size());
    return n;
}

const std::string kFact = "My storage unit at Coldwater is number 8841 and the padlock code is 2207.";
const std::string kQuestion = "What is my storage unit number at Coldwater and the padlock code?";

TEST(GatewaySessions, ScopesNeverShare) {
    test::TempDir dir;
    SessionStore store({.path = dir / "s.db"});
    ContextAssembler a(&store, rough_count);
    Conversation secret = chat(1, 120, 10, kFact);
    ask(secret, kQuestion);
    const AssembleOptions o{.budget_tokens = 3000};
    const AssembleResult r1 = a.assemble("alice", secret, o);
    ASSERT_TRUE(r1.abridged);
    EXPECT_NE(r1.history_block.find(kFact), std::string::npos);
    // The same conversation under another key: a fresh session, indexed from scratch.
    const AssembleResult r2 = a.assemble("bob", secret, o);
    EXPECT_FALSE(r2.stats.session_hit);
    EXPECT_EQ(r2.stats.chunks_new, r2.stats.chunks_total);
    // Another conversation of bob's asking the same question never sees alice's fact.
    Conversation other = chat(2, 120);
    ask(other, kQuestion);
    const AssembleResult r3 = a.assemble("bob", other, o);
    EXPECT_EQ(r3.history_block.find("8841"), std::string::npos);
    EXPECT_FALSE(r3.stats.session_hit);
}

TEST(GatewaySessions, DivergedConversationSeesOnlyTheSharedPrefix) {
    ContextAssembler a(nullptr, rough_count);
    Conversation base = chat(3, 150, 100, kFact);  // the fact is in message 200
    ask(base, "Anything else?");
    const AssembleOptions o{.budget_tokens = 3000};
    ASSERT_TRUE(a.assemble("k", base, o).abridged);
    // Same first 150 messages, then a different path that asks for the fact.
    Conversation fork;
    fork.system = base.system;
    fork.messages.assign(base.messages.begin(), base.messages.begin() + 150);
    Gen g(77);
    for (int t = 0; t < 40; ++t) {
        fork.messages.push_back({"user", paragraph(g, 3), true});
        fork.messages.push_back({"assistant", paragraph(g, 6), false});
    }
    ask(fork, kQuestion);
    const AssembleResult r = a.assemble("k", fork, o);
    EXPECT_TRUE(r.stats.session_hit);
    EXPECT_EQ(r.stats.chunks_new, expected_chunks(fork, 150));
    EXPECT_EQ(r.history_block.find("8841"), std::string::npos) << "a fork saw its parent's later messages";
    // A retry of an earlier state of the original (a prefix of its session) reuses the session
    // and sees nothing past its own last message.
    Conversation earlier;
    earlier.system = base.system;
    earlier.messages.assign(base.messages.begin(), base.messages.begin() + 181);  // ends on a user turn
    const AssembleResult retry = a.assemble("k", earlier, o);
    EXPECT_TRUE(retry.stats.session_hit);
    EXPECT_EQ(retry.stats.chunks_new, 0);
    EXPECT_EQ(retry.history_block.find("8841"), std::string::npos);
    // The original conversation still finds its fact, incrementally.
    ask(base, kQuestion);
    const AssembleResult back = a.assemble("k", base, o);
    EXPECT_TRUE(back.stats.session_hit);
    EXPECT_EQ(back.stats.chunks_new, expected_chunks(base, base.messages.size() - 1));
    EXPECT_NE(back.history_block.find(kFact), std::string::npos);
}

TEST(GatewaySessions, RestartKeepsSessionsIncremental) {
    test::TempDir dir;
    Conversation c = chat(4, 200, 20, kFact);
    ask(c, "Shall we go on?");
    const AssembleOptions o{.budget_tokens = 4000};
    AssembleResult first;
    {
        SessionStore store({.path = dir / "sessions.db"});
        ContextAssembler a(&store, rough_count);
        first = a.assemble("key-1", c, o);
        EXPECT_FALSE(first.stats.session_hit);
        EXPECT_EQ(first.stats.chunks_new, first.stats.chunks_total);
        EXPECT_EQ(store.n_sessions(), 1);
    }
    c.messages.push_back({"assistant", "Sure, let us go on.", false});
    ask(c, kQuestion);
    SessionStore store({.path = dir / "sessions.db"});
    ContextAssembler a(&store, rough_count);
    const AssembleResult r = a.assemble("key-1", c, o);
    EXPECT_TRUE(r.stats.session_hit);
    EXPECT_EQ(r.stats.chunks_new, expected_chunks(c, c.messages.size() - 2));
    EXPECT_EQ(r.stats.chunks_total, first.stats.chunks_total + r.stats.chunks_new);
    EXPECT_NE(r.history_block.find(kFact), std::string::npos);
    // The next turn is served from memory.
    c.messages.push_back({"assistant", "It is unit 8841.", false});
    ask(c, "Thanks. And the padlock?");
    const AssembleResult r2 = a.assemble("key-1", c, o);
    EXPECT_TRUE(r2.stats.session_hit);
    EXPECT_EQ(r2.stats.chunks_new, expected_chunks(c, c.messages.size() - 2));
    EXPECT_EQ(store.n_sessions(), 1);
    // Another scope does not find it after the restart either.
    EXPECT_FALSE(a.assemble("key-2", c, o).stats.session_hit);
}

TEST(GatewaySessions, StoreEvictsLeastRecentlyUsedSessions) {
    test::TempDir dir;
    const int64_t bound = 400'000;
    SessionStore store({.path = dir / "s.db", .max_bytes = bound});
    std::vector<Conversation> convs;
    const int n = static_cast<int>(test::scaled(24, 8));
    {
        ContextAssembler a(&store, rough_count, {}, {.cache_max_bytes = 1});  // no memory cache to hide the store
        for (int i = 0; i < n; ++i) {
            convs.push_back(chat(100 + static_cast<uint64_t>(i), 60));
            ask(convs.back(), "Summarise.");
            a.assemble("k", convs.back(), {.budget_tokens = 2000});
            // Keep conversation 0 in use.
            a.assemble("k", convs[0], {.budget_tokens = 2000});
            EXPECT_LE(store.total_bytes(), bound + 200'000) << "after " << i;
        }
    }
    EXPECT_LE(store.total_bytes(), bound);
    EXPECT_LT(store.n_sessions(), n);
    auto chain_of = [](const Conversation& c) { return conversation_chain("k", c); };
    EXPECT_TRUE(store.find_prefix("k", chain_of(convs[0])).has_value()) << "the conversation in use was evicted";
    EXPECT_FALSE(store.find_prefix("k", chain_of(convs[1])).has_value()) << "an old idle conversation survived";
    EXPECT_TRUE(store.find_prefix("k", chain_of(convs.back())).has_value());
    EXPECT_FALSE(store.find_prefix("other", chain_of(convs.back())).has_value());
}

TEST(GatewaySessions, MemoryCacheIsBounded) {
    auto conversation = [](int i) {
        Conversation c = chat(300 + static_cast<uint64_t>(i), 80);
        ask(c, "Summarise.");
        return c;
    };
    int64_t one = 0;  // the bytes of one such session
    {
        ContextAssembler a(nullptr, rough_count);
        a.assemble("k", conversation(0), {.budget_tokens = 2000});
        one = a.cache().bytes();
    }
    ASSERT_GT(one, 0);
    const int64_t bound = one * 7 / 2;  // room for three sessions and a half
    ContextAssembler a(nullptr, rough_count, {}, {.cache_max_bytes = bound});
    for (int i = 0; i < 12; ++i) {
        a.assemble("k", conversation(i), {.budget_tokens = 2000});
        EXPECT_LE(a.cache().bytes(), bound);
        EXPECT_LE(a.cache().size(), 4u);
    }
    EXPECT_GE(a.cache().size(), 3u);
    // The most recent is in memory (a hit with nothing new), the oldest is not (indexed again).
    EXPECT_EQ(a.assemble("k", conversation(11), {.budget_tokens = 2000}).stats.chunks_new, 0);
    const AssembleResult old = a.assemble("k", conversation(0), {.budget_tokens = 2000});
    EXPECT_FALSE(old.stats.session_hit);
    EXPECT_EQ(old.stats.chunks_new, old.stats.chunks_total);
}

}  // namespace
}  // namespace strata::gateway
