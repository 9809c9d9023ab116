// The gateway's guards on request bodies, with a real lane model (the builtin byte-level
// tokenizer and template of `strata make-model`, window 1,024): a body that fits goes unchanged; a
// conversation beyond the window is abridged into one the lane's own count says fits, keeping the
// system prompt, the latest turn and the API's message rules; thinking budgets are clamped.
#include <gtest/gtest.h>

#include "gateway/lane.h"
#include "gateway/window_guard.h"
#include "serve/served_model.h"
#include "test_util.h"

namespace strata::gateway {
namespace {

using serve::ApiKind;
using serve::ojson;

constexpr int64_t kWindow = 1024;

class WindowGuardTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new test::TempDir();
        const auto model = (*dir_ / "lane.gguf").string();
        const auto r = test::run_strata("make-model " + model + " --arch qwen3moe --preset tiny --type q8_0");
        ASSERT_EQ(r.exit_code, 0) << r.err;
        lane_ = new LaneModel();
        lane_->lane = "test";
        lane_->id = "strata-tiny";
        lane_->window = kWindow;
        lane_->counter = std::make_shared<serve::ServedModel>(model, "strata-tiny");
    }
    static void TearDownTestSuite() {
        delete lane_;
        delete dir_;
    }
    // Prompt tokens of a body as the lane counts them.
    static int64_t lane_tokens(ApiKind api, const ojson& body) {
        serve::RequestLimits limits;
        const auto r =
            api == ApiKind::Anthropic
                ? serve::parse_anthropic_messages(
                      body, limits, [](const void*, const std::string&, const std::string&) { return true; }, nullptr, true)
                : serve::parse_openai_chat(body, limits);
        return lane_->counter->count_tokens(r);
    }
    WindowGuard guard() {
        LongContextConfig c;
        c.store_path = (*dir_ / ("s" + std::to_string(next_store_++) + ".sqlite")).string();
        c.default_output_tokens = 128;
        return WindowGuard(c);
    }
    static inline test::TempDir* dir_ = nullptr;
    static inline LaneModel* lane_ = nullptr;
    int next_store_ = 0;
};

// Filler sentences that differ (seeded), so retrieval has something to choose between.
std::string sentences(uint32_t seed, int n) {
    static const char* words[] = {"river",  "lantern", "copper",  "meadow", "signal",
                                  "harbor", "ledger",  "orchard", "quarry", "falcon"};
    std::mt19937 rng(seed);
    std::string out;
    for (int i = 0; i < n; ++i) {
        out += "The ";
        out += words[rng() % 10];
        out += " saw the ";
        out += words[rng() % 10];
        out += " on day " + std::to_string(rng() % 900 + 100) + ". ";
    }
    return out;
}

ojson openai_chat(int turns) {
    ojson messages = ojson::array();
    messages.push_back({{"role", "system"}, {"content", "You are terse."}});
    for (int t = 0; t < turns; ++t) {
        messages.push_back(
            {{"role", "user"}, {"content", (t == 3 ? std::string("The pantry code is 4417. ") : "") + sentences(t, 3)}});
        if (t % 5 == 4) {
            // An assistant tool call and its result: they must stay together or go together.
            messages.push_back({{"role", "assistant"},
                                {"content", nullptr},
                                {"tool_calls",
                                 {{{"id", "c" + std::to_string(t)},
                                   {"type", "function"},
                                   {"function", {{"name", "lookup"}, {"arguments", "{\"q\":\"x\"}"}}}}}}});
            messages.push_back({{"role", "tool"}, {"tool_call_id", "c" + std::to_string(t)}, {"content", sentences(t + 100, 2)}});
        }
        messages.push_back({{"role", "assistant"}, {"content", sentences(t + 1000, 2)}});
    }
    messages.push_back({{"role", "user"}, {"content", "What is the pantry code?"}});
    return {{"model", "strata-tiny"}, {"messages", messages}, {"max_tokens", 64}};
}

TEST_F(WindowGuardTest, ABodyThatFitsGoesUnchanged) {
    auto g = guard();
    ojson body = openai_chat(2);
    const ojson before = body;
    const auto report = g.apply(ApiKind::OpenAI, body, body.dump().size(), *lane_, "k");
    EXPECT_FALSE(report.abridged);
    EXPECT_EQ(body, before);
    EXPECT_LE(lane_tokens(ApiKind::OpenAI, body) + 64, kWindow);
}

TEST_F(WindowGuardTest, OpenAIConversationBeyondTheWindowIsAbridgedToFit) {
    auto g = guard();
    ojson body = openai_chat(60);
    ASSERT_GT(lane_tokens(ApiKind::OpenAI, body), 8 * kWindow);
    const auto report = g.apply(ApiKind::OpenAI, body, body.dump().size(), *lane_, "k");
    ASSERT_TRUE(report.abridged);
    EXPECT_EQ(report.retrieval, "bm25");
    const int64_t n = lane_tokens(ApiKind::OpenAI, body);
    EXPECT_EQ(n, report.prompt_tokens_out);
    EXPECT_LE(n + body["max_tokens"].get<int64_t>(), kWindow);
    const ojson& m = body["messages"];
    // The system prompt stays first, with the abridged history after it; the latest turn is last;
    // the verbatim tail starts at a user turn (no tool result without its call).
    ASSERT_GE(m.size(), 2u);
    EXPECT_EQ(m[0]["role"], "system");
    EXPECT_EQ(m[0]["content"].get<std::string>().rfind("You are terse.", 0), 0u);
    EXPECT_NE(m[0]["content"].get<std::string>().find("The pantry code is 4417."), std::string::npos)
        << "the old fact was not retrieved";
    EXPECT_EQ(m.back()["content"], "What is the pantry code?");
    EXPECT_EQ(m[1]["role"], "user");
    for (size_t i = 1; i < m.size(); ++i) {
        if (m[i]["role"] == "tool") {
            EXPECT_EQ(m[i - 1]["role"], "assistant") << i;
        }
    }
}

TEST_F(WindowGuardTest, AnthropicConversationKeepsSystemBlocksAndStartsAtAUserTurn) {
    auto g = guard();
    ojson messages = ojson::array();
    for (int t = 0; t < 40; ++t) {
        messages.push_back({{"role", "user"}, {"content", ojson::array({{{"type", "text"}, {"text", sentences(t, 4)}}})}});
        messages.push_back(
            {{"role", "assistant"},
             {"content",
              ojson::array(
                  {{{"type", "tool_use"}, {"id", "t" + std::to_string(t)}, {"name", "read"}, {"input", {{"path", "a"}}}}})}});
        messages.push_back({{"role", "user"},
                            {"content", ojson::array({{{"type", "tool_result"},
                                                       {"tool_use_id", "t" + std::to_string(t)},
                                                       {"content", sentences(t + 50, 3)}}})}});
        messages.push_back({{"role", "assistant"}, {"content", sentences(t + 500, 1)}});
    }
    messages.push_back({{"role", "user"}, {"content", "Summarise."}});
    ojson body = {{"model", "strata-tiny"},
                  {"max_tokens", 100},
                  {"system", ojson::array({{{"type", "text"}, {"text", "Be brief."}}})},
                  {"messages", messages}};
    const auto report = g.apply(ApiKind::Anthropic, body, body.dump().size(), *lane_, "k");
    ASSERT_TRUE(report.abridged);
    EXPECT_LE(lane_tokens(ApiKind::Anthropic, body) + 100, kWindow);
    ASSERT_TRUE(body["system"].is_array());
    EXPECT_EQ(body["system"][0]["text"], "Be brief.");
    ASSERT_EQ(body["system"].size(), 2u);
    const ojson& first = body["messages"][0];
    EXPECT_EQ(first["role"], "user");
    if (first["content"].is_array()) {
        for (const auto& part : first["content"]) {
            EXPECT_NE(part.value("type", ""), "tool_result");
        }
    }
    EXPECT_EQ(body["messages"].back()["content"], "Summarise.");
}

// Claude Code puts a system entry after the first user turn (its agent list); an abridged
// conversation keeps it as an instruction instead of retrieving or dropping it with the old turns.
TEST_F(WindowGuardTest, SystemEntriesBetweenTurnsSurviveAbridging) {
    auto g = guard();
    ojson anthropic = {{"model", "strata-tiny"}, {"max_tokens", 100}, {"system", "Be brief."}, {"messages", ojson::array()}};
    ojson& am = anthropic["messages"];
    am.push_back({{"role", "user"}, {"content", sentences(1, 4)}});
    am.push_back({{"role", "system"}, {"content", "Agents available: zebra-scout."}});
    for (int t = 0; t < 40; ++t) {
        am.push_back({{"role", "assistant"}, {"content", sentences(t + 500, 2)}});
        am.push_back({{"role", "user"}, {"content", sentences(t + 2, 4)}});
    }
    ASSERT_TRUE(g.apply(ApiKind::Anthropic, anthropic, anthropic.dump().size(), *lane_, "k").abridged);
    EXPECT_LE(lane_tokens(ApiKind::Anthropic, anthropic) + 100, kWindow);
    ASSERT_TRUE(anthropic["system"].is_string());
    const std::string system = anthropic["system"];
    EXPECT_EQ(system.rfind("Be brief.\n\nAgents available: zebra-scout.", 0), 0u) << system.substr(0, 200);
    for (const auto& m : anthropic["messages"]) EXPECT_NE(m["role"], "system");
    EXPECT_EQ(anthropic["messages"][0]["role"], "user");

    ojson openai = openai_chat(60);
    openai["messages"].insert(openai["messages"].begin() + 2, ojson{{"role", "developer"}, {"content", "Answer in French."}});
    ASSERT_TRUE(g.apply(ApiKind::OpenAI, openai, openai.dump().size(), *lane_, "k2").abridged);
    EXPECT_LE(lane_tokens(ApiKind::OpenAI, openai) + 64, kWindow);
    const ojson& om = openai["messages"];
    EXPECT_EQ(om[0]["role"], "system");
    ASSERT_GE(om.size(), 3u);
    EXPECT_EQ(om[1], (ojson{{"role", "developer"}, {"content", "Answer in French."}}));
    EXPECT_EQ(om[2]["role"], "user");
    EXPECT_EQ(om.back()["content"], "What is the pantry code?");
}

// What must stay verbatim does not fit: the error is worded as the lane's own (Claude Code
// compacts a conversation when it reads "prompt is too long").
TEST_F(WindowGuardTest, AConversationThatCannotBeAbridgedIsAPromptTooLongError) {
    auto g = guard();
    ojson body = openai_chat(30);
    body["messages"][0]["content"] = sentences(77, 200);  // a system prompt far beyond the window
    try {
        g.apply(ApiKind::OpenAI, body, body.dump().size(), *lane_, "k");
        FAIL() << "an oversized system prompt was accepted";
    } catch (const serve::ApiError& e) {
        EXPECT_EQ(e.status, 400);
        const std::string what = e.what();
        EXPECT_EQ(what.rfind("prompt is too long: ", 0), 0u) << what;
        EXPECT_NE(what.find(" maximum"), std::string::npos) << what;
    }
}

TEST_F(WindowGuardTest, OneHugeMessageKeepsHeadAndTailAndFits) {
    auto g = guard();
    const std::string paste = "HEAD-MARKER " + sentences(1, 1200) + "The boiler key hangs by the north door. " +
                              sentences(2, 1200) + " Where does the boiler key hang?";
    ojson body = {{"model", "strata-tiny"},
                  {"messages", ojson::array({{{"role", "user"}, {"content", paste}}})},
                  {"max_tokens", 32.0}};  // a whole float counts
    LaneModel lane = *lane_;
    lane.window = 4096;  // the byte-level tokenizer makes every byte a token: room for head, excerpts and tail
    const auto report = g.apply(ApiKind::OpenAI, body, body.dump().size(), lane, "k");
    ASSERT_TRUE(report.abridged);
    EXPECT_LE(lane_tokens(ApiKind::OpenAI, body) + 32, lane.window);
    const std::string sent = body["messages"].back()["content"].get<std::string>();
    EXPECT_EQ(sent.rfind("HEAD-MARKER", 0), 0u) << sent.substr(0, 600) << "\n...\n" << body.dump().substr(0, 1500);
    EXPECT_NE(sent.find("Where does the boiler key hang?"), std::string::npos);
    EXPECT_NE(sent.find("The boiler key hangs by the north door."), std::string::npos);
}

TEST_F(WindowGuardTest, AnOutputLimitBeyondTheWindowIsLowered) {
    auto g = guard();
    ojson body = openai_chat(1);
    body["max_tokens"] = 100000;
    const auto report = g.apply(ApiKind::OpenAI, body, body.dump().size(), *lane_, "k");
    EXPECT_FALSE(report.abridged);
    const int64_t n = lane_tokens(ApiKind::OpenAI, body);
    EXPECT_EQ(body["max_tokens"].get<int64_t>(), kWindow - n);
    EXPECT_EQ(report.max_tokens_out, kWindow - n);
}

TEST_F(WindowGuardTest, ThinkingBudgetsThatLeaveNoRoomAreClampedOrTurnedOff) {
    auto g = guard();
    ojson body = {{"model", "strata-tiny"},
                  {"max_tokens", 4000},
                  {"thinking", {{"type", "enabled"}, {"budget_tokens", 3999}}},
                  {"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})}};
    auto report = g.apply(ApiKind::Anthropic, body, body.dump().size(), *lane_, "k");
    EXPECT_TRUE(report.thinking_clamped);
    // The window (1,024) lowers max_tokens first; the budget then leaves a quarter for the answer,
    // and 1,024 (Anthropic's minimum) cannot fit below that: thinking is turned off.
    EXPECT_TRUE(report.thinking_disabled ||
                body["thinking"]["budget_tokens"].get<int64_t>() <= body["max_tokens"].get<int64_t>() * 3 / 4);

    LaneModel wide = *lane_;
    wide.window = 65536;
    ojson roomy = {{"model", "strata-tiny"},
                   {"max_tokens", 4000},
                   {"thinking", {{"type", "enabled"}, {"budget_tokens", 3999}}},
                   {"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})}};
    report = g.apply(ApiKind::Anthropic, roomy, roomy.dump().size(), wide, "k");
    EXPECT_TRUE(report.thinking_clamped);
    EXPECT_EQ(roomy["thinking"]["budget_tokens"], 3000);
    EXPECT_EQ(roomy["max_tokens"], 4000);

    ojson tight = {{"model", "strata-tiny"},
                   {"max_tokens", 1100},
                   {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                   {"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})}};
    report = g.apply(ApiKind::Anthropic, tight, tight.dump().size(), wide, "k");
    EXPECT_TRUE(report.thinking_disabled);
    EXPECT_EQ(tight["thinking"], (ojson{{"type", "disabled"}}));

    ojson fine = {{"model", "strata-tiny"},
                  {"max_tokens", 8000},
                  {"thinking", {{"type", "enabled"}, {"budget_tokens", 2048}}},
                  {"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})}};
    const ojson before = fine;
    report = g.apply(ApiKind::Anthropic, fine, fine.dump().size(), wide, "k");
    EXPECT_FALSE(report.thinking_clamped || report.thinking_disabled);
    EXPECT_EQ(fine, before);
}

}  // namespace
}  // namespace strata::gateway
