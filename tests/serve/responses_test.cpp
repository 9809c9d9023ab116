// The Responses API's pieces without a server: the request parser (Codex's real request shape,
// every item and tool kind, the bounds and the 400s), the mapping of items onto template
// messages (instructions, reasoning, calls joined into one assistant turn, tool outputs), the
// output builder's items and published event sequence (reasoning, text, calls; cut and broken
// calls), and the bounded store (count, bytes, owners).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "serve/responses_output.h"
#include "serve/responses_request.h"
#include "serve/responses_store.h"

namespace strata::serve {
namespace {

using Kind = OutputEvent::Kind;

ResponsesRequest resp_parse(const std::string& body, const RequestLimits& limits = {}) {
    return parse_openai_responses(ojson::parse(body), limits);
}

// The body fails with `status`, naming `param`, with `words` in the message.
void resp_expect_error(const std::string& body, int status, const std::string& param, const std::string& words,
                       const RequestLimits& limits = {}) {
    try {
        resp_parse(body, limits);
        ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, status) << body << ": " << e.what();
        EXPECT_EQ(e.param, param) << body << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
}

ojson resp_messages(const ResponsesRequest& r) {
    bool images = false;
    return responses_messages(r.instructions, r.input, nullptr, images);
}

TEST(ResponsesRequest, CodexRequestShape) {
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/tests/integration/fixtures/codex_request.json");
    ASSERT_TRUE(in) << "the Codex fixture";
    std::stringstream text;
    text << in.rdbuf();
    const ResponsesRequest r = resp_parse(text.str());
    EXPECT_TRUE(r.chat.stream);
    EXPECT_FALSE(r.store);
    EXPECT_TRUE(r.include_encrypted_reasoning);
    EXPECT_TRUE(r.reasoning_summary);
    EXPECT_EQ(r.chat.tool_choice, ToolChoice::Auto);
    // Its function tools are the model's; web_search and the namespace of sub-agent tools are left out.
    std::vector<std::string> names;
    for (const auto& t : r.chat.tools) names.push_back(t.name);
    EXPECT_NE(std::find(names.begin(), names.end(), "exec_command"), names.end());
    EXPECT_EQ(std::find(names.begin(), names.end(), "close_agent"), names.end());
    const ojson messages = resp_messages(r);
    ASSERT_GE(messages.size(), 4u);
    EXPECT_EQ(messages[0]["role"], "system");  // developer
    EXPECT_NE(messages[0]["content"].get<std::string>().find("Codex"), std::string::npos);
    EXPECT_EQ(messages.back()["role"], "user");
    EXPECT_EQ(r.echo["prompt_cache_key"], "01a23544-0000-7000-8000-000000000001");
    EXPECT_EQ(r.echo["tools"].size(), ojson::parse(text.str())["tools"].size());  // echoed as sent
}

TEST(ResponsesRequest, StringInputAndInstructions) {
    const auto r = resp_parse(R"({"model":"m","input":"hello","instructions":"be brief","max_output_tokens":32,
        "temperature":0.5,"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"}}}})");
    EXPECT_EQ(r.chat.max_tokens, 32);
    EXPECT_FLOAT_EQ(r.chat.sampling.temperature, 0.5f);
    EXPECT_EQ(r.chat.response_format["type"], "json_schema");
    EXPECT_TRUE(r.store);  // the spec's default
    const ojson m = resp_messages(r);
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m[0], (ojson{{"role", "system"}, {"content", "be brief"}}));
    EXPECT_EQ(m[1], (ojson{{"role", "user"}, {"content", "hello"}}));
}

TEST(ResponsesRequest, ToolRoundTripBecomesOneAssistantTurn) {
    const auto r = resp_parse(R"({"input":[
        {"role":"user","content":"weather?"},
        {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"short"}],
         "content":[{"type":"reasoning_text","text":"think"}]},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me look."}]},
        {"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
        {"type":"function_call","call_id":"c2","name":"get_weather","arguments":"{\"city\":\"Rome\"}"},
        {"type":"function_call_output","call_id":"c1","output":"sunny"},
        {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]},
        {"type":"web_search_call","id":"ws_1","status":"completed"}],
      "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}},{"type":"web_search"},
               {"type":"custom","name":"apply_patch"},{"type":"local_shell"},{"type":"image_generation"}]})");
    ASSERT_EQ(r.chat.tools.size(), 1u);
    const ojson m = resp_messages(r);
    ASSERT_EQ(m.size(), 4u) << m.dump();
    EXPECT_EQ(m[1]["role"], "assistant");
    EXPECT_EQ(m[1]["content"], "Let me look.");
    EXPECT_EQ(m[1]["reasoning_content"], "think");  // the reasoning text, not the summary
    ASSERT_EQ(m[1]["tool_calls"].size(), 2u);
    EXPECT_EQ(m[1]["tool_calls"][0]["id"], "c1");
    EXPECT_EQ(m[1]["tool_calls"][1]["function"]["arguments"], (ojson{{"city", "Rome"}}));
    EXPECT_EQ(m[2], (ojson{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}));
    EXPECT_EQ(m[3]["content"], "rain");
}

TEST(ResponsesRequest, EncryptedReasoningIsReadBackWhenVerified) {
    const auto r = resp_parse(R"({"input":[{"role":"user","content":"hi"},
        {"type":"reasoning","summary":[],"encrypted_content":"ours"},{"role":"assistant","content":"ok"},
        {"role":"user","content":"again"}]})");
    bool images = false;
    const ojson m = responses_messages(
        r.instructions, r.input,
        [](const std::string& e) -> std::optional<std::string> {
            if (e == "ours") return std::string("hidden thoughts");
            return std::nullopt;
        },
        images);
    EXPECT_EQ(m[1]["reasoning_content"], "hidden thoughts");
}

TEST(ResponsesRequest, ToolChoices) {
    const std::string tools = R"("tools":[{"type":"function","name":"a"},{"type":"function","name":"b"},{"type":"web_search"}])";
    auto r = resp_parse("{\"input\":\"x\"," + tools + R"(,"tool_choice":{"type":"function","name":"b"}})");
    EXPECT_EQ(r.chat.tool_choice, ToolChoice::Named);
    EXPECT_EQ(r.chat.tool_name, "b");
    r = resp_parse("{\"input\":\"x\"," + tools +
                   R"(,"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"a"}]}})");
    EXPECT_EQ(r.chat.tool_choice, ToolChoice::Required);
    ASSERT_EQ(r.chat.tools.size(), 1u);
    EXPECT_EQ(r.chat.tools[0].name, "a");
    resp_expect_error("{\"input\":\"x\"," + tools + R"(,"tool_choice":{"type":"function","name":"zz"}})", 400, "tool_choice.name",
                      "no function tool named");
    resp_expect_error("{\"input\":\"x\"," + tools + R"(,"tool_choice":{"type":"web_search_preview"}})", 400, "tool_choice.type",
                      "not supported");
    resp_expect_error(R"({"input":"x","tools":[{"type":"web_search"}],"tool_choice":"required"})", 400, "tool_choice",
                      "no function tools");
}

TEST(ResponsesRequest, BadInputIsA400NamingTheField) {
    resp_expect_error(R"({"model":"m"})", 400, "input", "missing");
    resp_expect_error(R"([1])", 400, "", "JSON object");
    resp_expect_error(R"({"input":[{"type":"message","role":"robot","content":"x"}]})", 400, "input[0].role", "unknown role");
    resp_expect_error(R"({"input":[{"type":"telepathy"}]})", 400, "input[0].type", "unknown input item type");
    resp_expect_error(R"({"input":[{"type":"function_call","name":"f"}]})", 400, "input[0].call_id", "missing");
    resp_expect_error(R"({"input":[{"type":"function_call_output","call_id":"c"}]})", 400, "input[0].output", "missing");
    resp_expect_error(R"({"input":[{"type":"item_reference","id":"x"}]})", 400, "input[0].type", "item_reference");
    resp_expect_error(R"({"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]})", 400,
                      "input[0].content[0].type", "not supported");
    resp_expect_error(R"({"input":"x","max_output_tokens":0})", 400, "max_output_tokens", "");
    resp_expect_error(R"({"input":"x","temperature":9})", 400, "temperature", "");
    resp_expect_error(R"({"input":"x","text":{"format":{"type":"xml"}}})", 400, "text.format.type", "not one of");
    resp_expect_error(R"({"input":"x","text":{"format":{"type":"json_schema","name":"n"}}})", 400, "text.format.schema",
                      "missing");
    resp_expect_error(R"({"input":"x","reasoning":{"effort":"maximal"}})", 400, "reasoning.effort", "not one of");
    resp_expect_error(R"({"input":"x","include":["everything"]})", 400, "include[0]", "not a value");
    resp_expect_error(R"({"input":"x","background":true})", 400, "background", "not supported");
    resp_expect_error(R"({"input":"x","store":"yes"})", 400, "store", "");
    resp_expect_error(R"({"input":"x","truncation":"sometimes"})", 400, "truncation", "not one of");
    resp_expect_error(R"({"input":"x","metadata":{"k":1}})", 400, "metadata.k", "string");
    resp_expect_error(R"({"input":"x","tools":[{"type":"function","name":"a"},{"type":"function","name":"a"}]})", 400, "tools",
                      "two tools");
    resp_expect_error(R"({"input":"x","tools":[{"name":"a"}]})", 400, "tools[0].type", "missing");
    resp_expect_error(
        R"({"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"}]})",
        400, "input[0].arguments", "deeper");
    // Only instructions, no turn: nothing to answer.
    const auto r = resp_parse(R"({"instructions":"x","input":[{"role":"developer","content":"y"}]})");
    bool images = false;
    EXPECT_THROW(responses_messages(r.instructions, r.input, nullptr, images), ApiError);
}

TEST(ResponsesRequest, BoundsFromTheLimits) {
    RequestLimits tight;
    tight.max_messages = 2;
    tight.max_tools = 1;
    tight.max_text_bytes = 16;
    resp_expect_error(R"({"input":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]})",
                      400, "input", "limit of 2", tight);
    resp_expect_error(R"({"input":"x","tools":[{"type":"web_search"},{"type":"web_search"}]})", 400, "tools", "limit of 1",
                      tight);
    resp_expect_error(R"({"input":"a string longer than sixteen bytes"})", 413, "input", "longer than the limit", tight);
    std::string meta = "{";
    for (int i = 0; i < 17; ++i) meta += std::string(i ? "," : "") + "\"k" + std::to_string(i) + "\":\"v\"";
    resp_expect_error(R"({"input":"x","metadata":)" + meta + "}}", 400, "metadata", "limit of 16");
}

// ---------------------------------------------------------------------------------------------
// Output items and events

ResponseOutput::Options resp_options(bool summary = false) {
    ResponseOutput::Options o;
    o.summary = summary;
    o.make_id = [n = 0](const std::string& prefix) mutable { return prefix + std::to_string(n++); };
    return o;
}

OutputEvent resp_event(Kind kind, std::string text = {}, std::string name = {}, bool complete = true, bool truncated = false) {
    OutputEvent e;
    e.kind = kind;
    e.text = std::move(text);
    e.name = std::move(name);
    e.index = 0;
    e.complete = complete;
    e.truncated = truncated;
    return e;
}

std::vector<std::string> resp_types(const std::vector<ojson>& events) {
    std::vector<std::string> out;
    for (const auto& e : events) out.push_back(e["type"]);
    return out;
}

TEST(ResponsesOutput, PublishedEventSequence) {
    ResponseOutput out(resp_options());
    std::vector<ojson> ev;
    for (const auto& e : {resp_event(Kind::Reasoning, "hm"), resp_event(Kind::Reasoning, "m"), resp_event(Kind::Content, "Hi"),
                          resp_event(Kind::Content, "!"), resp_event(Kind::ToolCallBegin, "", "f"),
                          resp_event(Kind::ToolCallArguments, "{\"a\":"), resp_event(Kind::ToolCallArguments, "1}"),
                          resp_event(Kind::ToolCallEnd)})
        out.add(e, ev);
    out.finish(false, ev);
    const std::vector<std::string> expected = {"response.output_item.added",
                                               "response.content_part.added",
                                               "response.reasoning_text.delta",
                                               "response.reasoning_text.delta",
                                               "response.reasoning_text.done",
                                               "response.content_part.done",
                                               "response.output_item.done",
                                               "response.output_item.added",
                                               "response.content_part.added",
                                               "response.output_text.delta",
                                               "response.output_text.delta",
                                               "response.output_text.done",
                                               "response.content_part.done",
                                               "response.output_item.done",
                                               "response.output_item.added",
                                               "response.function_call_arguments.delta",
                                               "response.function_call_arguments.delta",
                                               "response.function_call_arguments.done",
                                               "response.output_item.done"};
    EXPECT_EQ(resp_types(ev), expected);
    // Indices and ids tie each event to its item.
    EXPECT_EQ(ev[2]["output_index"], 0);
    EXPECT_EQ(ev[2]["item_id"], "rs_0");
    EXPECT_EQ(ev[9]["output_index"], 1);
    EXPECT_EQ(ev[9]["content_index"], 0);
    EXPECT_EQ(ev[11]["text"], "Hi!");
    EXPECT_EQ(ev[17]["arguments"], "{\"a\":1}");
    EXPECT_EQ(ev[17]["name"], "f");
    const ojson& items = out.items();
    ASSERT_EQ(items.size(), 3u);
    EXPECT_EQ(items[0]["content"][0], (ojson{{"type", "reasoning_text"}, {"text", "hmm"}}));
    EXPECT_EQ(items[0]["summary"], ojson::array());
    EXPECT_EQ(items[1]["content"][0]["text"], "Hi!");
    EXPECT_EQ(items[1]["status"], "completed");
    EXPECT_EQ(items[2]["type"], "function_call");
    EXPECT_EQ(items[2]["call_id"], "call_3");
    EXPECT_EQ(items[2]["status"], "completed");
    EXPECT_TRUE(out.any_call());
    // Each item's done event carries the item as it ends.
    EXPECT_EQ(ev[6]["item"], items[0]);
    EXPECT_EQ(ev[18]["item"], items[2]);
}

TEST(ResponsesOutput, SummaryAndEncryptedContentWhenAskedFor) {
    auto o = resp_options(true);
    o.encrypt = [](const std::string& t) { return "enc(" + t + ")"; };
    ResponseOutput out(o);
    std::vector<ojson> ev;
    out.add(resp_event(Kind::Reasoning, "why"), ev);
    out.finish(false, ev);
    EXPECT_EQ(resp_types(ev), (std::vector<std::string>{"response.output_item.added", "response.reasoning_summary_part.added",
                                                        "response.content_part.added", "response.reasoning_summary_text.delta",
                                                        "response.reasoning_text.delta", "response.reasoning_summary_text.done",
                                                        "response.reasoning_summary_part.done", "response.reasoning_text.done",
                                                        "response.content_part.done", "response.output_item.done"}));
    EXPECT_EQ(out.items()[0]["summary"][0]["text"], "why");
    EXPECT_EQ(out.items()[0]["encrypted_content"], "enc(why)");
}

TEST(ResponsesOutput, CutAndBrokenCalls) {
    {
        ResponseOutput out(resp_options());
        std::vector<ojson> ev;
        out.add(resp_event(Kind::Content, "text"), ev);
        out.finish(true, ev);  // max_output_tokens
        EXPECT_EQ(out.items()[0]["status"], "incomplete");
    }
    {
        ResponseOutput out(resp_options());
        std::vector<ojson> ev;
        out.add(resp_event(Kind::ToolCallBegin, "", "f"), ev);
        out.add(resp_event(Kind::ToolCallArguments, "{\"a\": 1"), ev);
        out.add(resp_event(Kind::ToolCallEnd, "", "", false, true), ev);
        out.finish(true, ev);
        ASSERT_EQ(out.items().size(), 1u);
        EXPECT_EQ(out.items()[0]["status"], "incomplete");
        EXPECT_EQ(out.items()[0]["arguments"], "{\"a\": 1");  // as far as it got
    }
    {
        ResponseOutput out(resp_options());
        std::vector<ojson> ev;
        out.add(resp_event(Kind::ToolCallBegin, "", "f"), ev);
        out.add(resp_event(Kind::ToolCallEnd, "<tool_call>\n{\"name\": \"f\", oops</tool_call>", "", false, false), ev);
        out.finish(false, ev);
        ASSERT_EQ(out.items().size(), 2u);
        EXPECT_EQ(out.items()[0]["status"], "incomplete");
        EXPECT_EQ(out.items()[1]["type"], "message");
        EXPECT_EQ(out.items()[1]["content"][0]["text"], "<tool_call>\n{\"name\": \"f\", oops</tool_call>");
    }
}

TEST(ResponsesOutput, Usage) {
    runtime::Usage u;
    u.prompt_tokens = 10;
    u.cached_tokens = 4;
    u.completion_tokens = 7;
    u.reasoning_tokens = 3;
    EXPECT_EQ(responses_usage(u), ojson::parse(R"({"input_tokens":10,"input_tokens_details":{"cached_tokens":4},
        "output_tokens":7,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":17})"));
}

// ---------------------------------------------------------------------------------------------
// Store

StoredResponse resp_stored(const std::string& id, const std::string& owner, size_t pad = 0) {
    StoredResponse s;
    s.id = id;
    s.owner = owner;
    s.response = {{"id", id}, {"pad", std::string(pad, 'x')}};
    return s;
}

TEST(ResponsesStore, BoundedByCountOldestFirst) {
    ResponseStore store(2, 1 << 20);
    store.put(resp_stored("a", "k"));
    store.put(resp_stored("b", "k"));
    store.put(resp_stored("c", "k"));
    EXPECT_EQ(store.count(), 2);
    EXPECT_EQ(store.get("a", "k"), nullptr);
    EXPECT_NE(store.get("b", "k"), nullptr);
    EXPECT_NE(store.get("c", "k"), nullptr);
}

TEST(ResponsesStore, BoundedByBytes) {
    ResponseStore store(100, 3000);
    store.put(resp_stored("a", "k", 1000));
    store.put(resp_stored("b", "k", 1000));
    store.put(resp_stored("c", "k", 1000));
    EXPECT_LE(store.bytes(), 3000);
    EXPECT_EQ(store.get("a", "k"), nullptr);
    EXPECT_NE(store.get("c", "k"), nullptr);
    store.put(resp_stored("huge", "k", 5000));  // larger than the bound alone: not kept
    EXPECT_EQ(store.get("huge", "k"), nullptr);
    EXPECT_NE(store.get("c", "k"), nullptr);
}

TEST(ResponsesStore, OwnersOnlyAndDelete) {
    ResponseStore store(10, 1 << 20);
    store.put(resp_stored("a", "alice"));
    EXPECT_EQ(store.get("a", "bob"), nullptr);
    EXPECT_FALSE(store.erase("a", "bob"));
    EXPECT_TRUE(store.erase("a", "alice"));
    EXPECT_EQ(store.get("a", "alice"), nullptr);
    EXPECT_EQ(store.bytes(), 0);
    ResponseStore none(0, 1 << 20);
    none.put(resp_stored("a", "alice"));
    EXPECT_EQ(none.count(), 0);
}

TEST(ResponsesStore, InFlightEntriesGoWithTheirToken) {
    ResponseStore store(10, 1 << 20);
    auto flight = std::make_shared<ResponseStore::InFlight>();
    flight->owner = "alice";
    auto token = store.begin("r", flight);
    EXPECT_EQ(store.in_flight("r", "alice"), flight);
    EXPECT_EQ(store.in_flight("r", "bob"), nullptr);
    token.reset();
    EXPECT_EQ(store.in_flight("r", "alice"), nullptr);
}

}  // namespace
}  // namespace strata::serve
