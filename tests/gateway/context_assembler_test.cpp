// ContextAssembler: passthrough, the budget (property test over random conversations, counted
// independently on the final texts), excerpt order and labels, huge-message splits, concurrency.
#include <gtest/gtest.h>

#include <regex>
#include <thread>

#include "../../bench/gateway_needles.h"
#include "context_test_util.h"
#include "gateway/context/context_assembler.h"
#include "gateway/context/session_store.h"
#include "test_util.h"

namespace strata::gateway {
namespace {

using bench::needles::Gen;
using test_helpers::paragraph;
using test_helpers::rough_count;

// What the lane is sent, counted the way the caller will count it.
int64_t counted(const Conversation& c, const AssembleResult& r, const TokenCounter& count) {
    int64_t total = count(system_with_history(c.system, r.history_block));
    for (size_t i = r.first_verbatim; i < c.messages.size(); ++i)
        total += count(r.split_message && *r.split_message == i ? r.split_text : c.messages[i].text);
    return total;
}

Conversation random_conversation(Gen& g) {
    Conversation c;
    c.system = paragraph(g, static_cast<int>(g.uniform(0, 6)));
    const int turns = static_cast<int>(g.uniform(1, 40));
    for (int t = 0; t < turns; ++t) {
        const bool huge = g.uniform(0, 15) == 0;
        std::string user;
        for (int64_t p = huge ? g.uniform(30, 120) : g.uniform(1, 3); p > 0; --p)
            user += paragraph(g, static_cast<int>(g.uniform(1, 8))) + "\n\n";
        user += "What happened to the " + std::string(g.pick(bench::needles::pools().noun)) + "?";
        c.messages.push_back({"user", user, g.uniform(0, 9) != 0 || t == 0});
        for (int64_t k = g.uniform(0, 2); k > 0; --k) {
            c.messages.push_back({"assistant", "Calling a tool: lookup(" + std::to_string(g.uniform(1, 99)) + ")", false});
            c.messages.push_back({"tool", paragraph(g, static_cast<int>(g.uniform(1, 20))), false});
        }
        c.messages.push_back({"assistant", paragraph(g, static_cast<int>(g.uniform(1, 12))), false});
    }
    if (g.uniform(0, 1) == 0) c.messages.pop_back();  // end on the user's question half the time
    return c;
}

TEST(GatewayAssembler, PassthroughWhenItFits) {
    Gen g(1);
    Conversation c;
    c.system = "Be brief.";
    for (int i = 0; i < 6; ++i) c.messages.push_back({i % 2 ? "assistant" : "user", paragraph(g, 3), i % 2 == 0});
    ContextAssembler a(nullptr, rough_count);
    int64_t total = rough_count(c.system);
    for (const auto& m : c.messages) total += rough_count(m.text);
    AssembleOptions o{.budget_tokens = total};
    const AssembleResult r = a.assemble("", c, o);
    EXPECT_FALSE(r.abridged);
    EXPECT_TRUE(r.history_block.empty());
    EXPECT_EQ(r.stats.tokens_in, total);
    o.budget_tokens = total - 1;
    const AssembleResult r2 = a.assemble("", c, o);
    EXPECT_TRUE(r2.abridged);
    EXPECT_TRUE(r2.stats.session_hit);
    EXPECT_EQ(r2.stats.chunks_new, 0);
    EXPECT_LE(counted(c, r2, rough_count), o.budget_tokens);
    // No messages: passthrough, or (a system prompt alone over the budget) does not fit.
    Conversation empty{.system = "Be brief."};
    EXPECT_FALSE(a.assemble("", empty, {.budget_tokens = 100}).abridged);
    const AssembleResult none = a.assemble("", empty, {.budget_tokens = 1});
    EXPECT_TRUE(none.abridged);
    EXPECT_FALSE(none.fits);
}

TEST(GatewayAssembler, BudgetNeverExceeded) {
    ContextAssembler a(nullptr, rough_count);
    int fitted = 0;
    const int64_t n = test::scaled(150, 20);
    for (int64_t i = 0; i < n; ++i) {
        Gen g(1000 + static_cast<uint64_t>(i));
        const Conversation c = random_conversation(g);
        AssembleOptions o;
        o.budget_tokens = g.uniform(300, 6000);
        o.recent_fraction = 0.1 + 0.5 * g.unit();
        const AssembleResult r = a.assemble("s" + std::to_string(i % 3), c, o);
        const int64_t out = counted(c, r, rough_count);
        if (!r.abridged) {
            EXPECT_LE(r.stats.tokens_in, o.budget_tokens);
            continue;
        }
        if (r.fits) {
            EXPECT_EQ(out, r.stats.tokens_out) << "case " << i;
            ++fitted;
            EXPECT_LE(out, o.budget_tokens) << "case " << i;
            // The verbatim tail starts at a turn.
            EXPECT_TRUE(c.messages[r.first_verbatim].turn_start) << "case " << i;
        }
    }
    EXPECT_GT(fitted, n / 2);
}

TEST(GatewayAssembler, ExcerptsInOriginalOrderWithLabels) {
    // 200 turns; facts about one topic spread over many of them.
    Gen g(5);
    Conversation c;
    c.system = "System prompt.";
    std::vector<std::string> facts;
    for (int t = 0; t < 200; ++t) {
        std::string user = paragraph(g, 2);
        if (t % 17 == 3) {
            facts.push_back("Fact " + std::to_string(t) + ": the zeppelin hangar of Aldmere holds " +
                            std::to_string(g.uniform(2, 900)) + " crates.");
            user += " " + facts.back();
        }
        c.messages.push_back({"user", user, true});
        c.messages.push_back({"assistant", paragraph(g, 4), false});
    }
    c.messages.push_back({"user", "Tell me everything about the zeppelin hangar of Aldmere and its crates.", true});
    ContextAssembler a(nullptr, rough_count);
    const AssembleResult r = a.assemble("", c, {.budget_tokens = 3000});
    ASSERT_TRUE(r.abridged);
    ASSERT_TRUE(r.fits);
    EXPECT_EQ(r.stats.retrieval, "bm25");
    // Labels are increasing; each fact is under its own turn's label.
    const std::regex label(R"(\[earlier turn (\d+), (user|assistant)\])");
    int last = 0, labels = 0;
    for (auto it = std::sregex_iterator(r.history_block.begin(), r.history_block.end(), label); it != std::sregex_iterator();
         ++it) {
        const int turn = std::stoi((*it)[1]);
        EXPECT_GE(turn, last);
        last = turn;
        ++labels;
    }
    EXPECT_GT(labels, 3);
    size_t prev = 0;
    int found = 0;
    for (const std::string& f : facts) {
        const size_t at = r.history_block.find(f);
        if (at == std::string::npos) continue;
        ++found;
        EXPECT_GT(at, prev) << "facts out of order";
        prev = at;
        const int turn = std::stoi(f.substr(5)) + 1;
        const size_t lab = r.history_block.rfind("[earlier turn ", at);
        ASSERT_NE(lab, std::string::npos);
        EXPECT_EQ(std::stoi(r.history_block.substr(lab + 14)), turn);
    }
    EXPECT_EQ(found, static_cast<int>(facts.size()));
    EXPECT_EQ(r.history_block.rfind("[Earlier conversation abridged", 0), 0u);
}

TEST(GatewayAssembler, HugeMessageKeepsHeadAndTail) {
    Gen g(9);
    std::string body;
    for (int p = 0; p < 3000; ++p) body += paragraph(g, 4) + "\n\n";
    const std::string needle = "The vault under the Stonebury granary opens with the word marmalade.";
    body.insert(body.size() / 2, needle + " ");
    Conversation c;
    c.messages.push_back({"user", "Please read.\n\n" + body + "What opens the vault under the Stonebury granary?", true});
    ContextAssembler a(nullptr, rough_count);
    const AssembleOptions o{.budget_tokens = 8000, .huge_message_head_tokens = 1000, .huge_message_tail_tokens = 500};
    const AssembleResult r = a.assemble("k", c, o);
    ASSERT_TRUE(r.abridged && r.fits);
    ASSERT_EQ(r.split_message, std::optional<size_t>(0));
    EXPECT_EQ(r.first_verbatim, 0u);
    EXPECT_TRUE(r.history_block.empty());
    const std::string& text = c.messages[0].text;
    // Head and tail verbatim, of about the sizes asked for.
    const size_t note = r.split_text.find("\n[… the gateway left out");
    ASSERT_NE(note, std::string::npos);
    EXPECT_EQ(text.compare(0, note, r.split_text, 0, note), 0);
    EXPECT_GT(rough_count(std::string_view(r.split_text).substr(0, note)), 700);
    const size_t tail = r.split_text.find("the message ends with …]\n\n");
    ASSERT_NE(tail, std::string::npos);
    const std::string tail_text = r.split_text.substr(tail + 27);
    EXPECT_EQ(text.substr(text.size() - tail_text.size()), tail_text);
    EXPECT_LE(rough_count(tail_text), 500);
    EXPECT_NE(r.split_text.find(needle), std::string::npos);
    EXPECT_LE(counted(c, r, rough_count), o.budget_tokens);
    // Excerpts in order of position.
    const std::regex at(R"(\[excerpt at (\d+)% of this message\])");
    int last = -1;
    for (auto it = std::sregex_iterator(r.split_text.begin(), r.split_text.end(), at); it != std::sregex_iterator(); ++it) {
        EXPECT_GE(std::stoi((*it)[1]), last);
        last = std::stoi((*it)[1]);
    }
    EXPECT_GE(last, 0);
}

// A reranker that only likes passages naming the lighthouse: fused with BM25 by reciprocal
// rank, it lifts the one fact BM25 alone ranks low.
class LighthouseReranker : public Reranker {
public:
    std::vector<double> score(std::string_view, std::span<const std::string_view> passages) override {
        ++calls;
        std::vector<double> s;
        for (std::string_view p : passages) s.push_back(p.find("lighthouse keeper Ansel") != std::string_view::npos ? 1.0 : 0.0);
        return s;
    }
    int calls = 0;
};

TEST(GatewayAssembler, RerankerIsFusedWhenGiven) {
    Gen g(21);
    Conversation c;
    const std::string fact = "The lighthouse keeper Ansel logged one storm in the red ledger.";
    for (int t = 0; t < 120; ++t) {
        std::string u = paragraph(g, 3);
        for (int k = 0; k < 3; ++k)
            u += " The red ledger of the harbor was " + std::string(g.pick(bench::needles::pools().verb)) + " again.";
        if (t == 40) u += " " + fact;
        c.messages.push_back({"user", u, true});
        c.messages.push_back({"assistant", paragraph(g, 5), false});
    }
    c.messages.push_back({"user", "What did the red ledger record?", true});
    auto reranker = std::make_shared<LighthouseReranker>();
    RetrievalOptions ro;
    ro.reranker = reranker;
    ContextAssembler a(nullptr, rough_count, ro);
    const AssembleResult r = a.assemble("", c, {.budget_tokens = 1200});
    ASSERT_TRUE(r.abridged && r.fits);
    EXPECT_EQ(r.stats.retrieval, "bm25+rerank");
    EXPECT_EQ(reranker->calls, 1);
    EXPECT_NE(r.history_block.find(fact), std::string::npos);
}

TEST(GatewayAssembler, ManyThreadsShareSessions) {
    test::TempDir dir;
    SessionStore store({.path = dir / "s.db"});
    ContextAssembler a(&store, rough_count);
    std::vector<Conversation> convs;
    for (int i = 0; i < 4; ++i) {
        Gen g(50 + static_cast<uint64_t>(i));
        convs.push_back(random_conversation(g));
    }
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
        threads.emplace_back([&, t] {
            for (int64_t k = 0; k < test::scaled(12, 3); ++k) {
                Conversation c = convs[static_cast<size_t>(t + k) % convs.size()];
                c.messages.resize(std::max<size_t>(1, c.messages.size() - static_cast<size_t>(k % 3)));  // earlier states, forks
                const AssembleOptions o{.budget_tokens = 1500};
                const AssembleResult r = a.assemble(t % 2 ? "a" : "b", c, o);
                if (r.fits && counted(c, r, rough_count) > o.budget_tokens) ++bad;
            }
        });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_GT(store.n_sessions(), 0);
}

}  // namespace
}  // namespace strata::gateway
