// Request parsing for `strata serve`: OpenAI chat / legacy completions and Anthropic messages
// bodies of every supported shape become the expected ChatRequest / CompletionRequest, and every
// kind of bad input (wrong types, out-of-range numbers, missing fields, limits, oversized strings,
// broken JSON, broken images) becomes an ApiError whose status and message name the problem.
// Also the body reader (JSON validity, UTF-8, nesting bound), base64 and image validation.
#include "serve/chat_request.h"

#include <gtest/gtest.h>
#include <stb/stb_image_write.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace strata::serve {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Helpers

// `got` equals the JSON text `expected`, key order aside (templates read keys by name).
testing::AssertionResult same_json(const ojson& got, const std::string& expected) {
    if (json(got) == json::parse(expected)) return testing::AssertionSuccess();
    return testing::AssertionFailure() << "got " << got.dump() << "\nexpected " << json::parse(expected).dump();
}

// `got` samples as the engine's submit fields `expected` say (runtime::sampling_from_json).
testing::AssertionResult same_sampling(const runtime::SamplingParams& got, const std::string& expected) {
    if (got == runtime::sampling_from_json(ojson::parse(expected), INT32_MAX)) return testing::AssertionSuccess();
    return testing::AssertionFailure() << "got " << runtime::to_json(got).dump() << "\nexpected " << expected;
}

// `fn` throws an ApiError with `status` and `param` whose message contains `named`.
testing::AssertionResult fails_with(const std::function<void()>& fn, int status, const std::string& param,
                                    const std::string& named) {
    try {
        fn();
    } catch (const ApiError& e) {
        const std::string message = e.what();
        if (e.status != status)
            return testing::AssertionFailure() << "status " << e.status << " (" << message << "), expected " << status;
        if (e.param != param)
            return testing::AssertionFailure() << "param \"" << e.param << "\" (" << message << "), expected \"" << param << "\"";
        if (message.find(named) == std::string::npos)
            return testing::AssertionFailure() << "message \"" << message << "\" does not name \"" << named << "\"";
        return testing::AssertionSuccess();
    } catch (const std::exception& e) {
        return testing::AssertionFailure() << "threw something other than an ApiError: " << e.what();
    }
    return testing::AssertionFailure() << "did not throw";
}

// Minimal valid bodies; a test case's fields are merged over them (replacing fields of the same name).
constexpr const char* kChatBase = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})";
constexpr const char* kMessagesBase =
    R"({"model": "claude", "max_tokens": 4096, "messages": [{"role": "user", "content": "Hi"}]})";
constexpr const char* kCompletionBase = R"({"model": "m", "prompt": "Once upon a time"})";

ojson merged(const char* base, const std::string& fields) {
    ojson body = ojson::parse(base);
    body.update(ojson::parse(fields));
    return body;
}

ChatRequest chat(const std::string& fields, const RequestLimits& limits = {}) {
    return parse_openai_chat(merged(kChatBase, fields), limits);
}

// Accepts a thinking block when its signature is "sig:" + its text; remembers what it was asked.
struct SignatureCheck {
    mutable std::vector<std::pair<std::string, std::string>> asked;
};
bool check_signature(const void* context, const std::string& thinking, const std::string& signature) {
    static_cast<const SignatureCheck*>(context)->asked.emplace_back(thinking, signature);
    return signature == "sig:" + thinking;
}

ChatRequest anthropic(const std::string& fields, const RequestLimits& limits = {}, const SignatureCheck* check = nullptr,
                      bool count_tokens_only = false) {
    return parse_anthropic_messages(merged(kMessagesBase, fields), limits, check ? check_signature : nullptr, check,
                                    count_tokens_only);
}

CompletionRequest completion(const std::string& fields, const RequestLimits& limits = {}) {
    return parse_openai_completion(merged(kCompletionBase, fields), limits);
}

struct ErrorCase {
    std::string fields;  // merged over the parser's minimal valid body
    std::string param;   // the expected ApiError::param
    int status = 400;
    std::string named;  // what the message must contain, when not `param` itself
};

void expect_errors(const std::vector<ErrorCase>& cases, const std::function<void(const std::string&)>& parse) {
    for (const ErrorCase& c : cases) {
        SCOPED_TRACE(c.fields);
        EXPECT_TRUE(fails_with([&] { parse(c.fields); }, c.status, c.param, c.named.empty() ? c.param : c.named));
    }
}

// `n` comma-separated copies of `item`, for lists over a limit.
std::string repeated(const std::string& item, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += (i ? "," : "") + item;
    return out;
}

// `levels` nested arrays (or objects) around `inner`.
std::string nested(int levels, const std::string& inner, bool objects = false) {
    std::string out;
    for (int i = 0; i < levels; ++i) out += objects ? R"({"a":)" : "[";
    out += inner;
    for (int i = 0; i < levels; ++i) out += objects ? "}" : "]";
    return out;
}

// Images made in the test: stb's writers, on pixels that vary (never a blank image).
std::vector<uint8_t> test_pixels(int width, int height) {
    std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * 3);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(37 + 53 * i);
    return pixels;
}
void append_bytes(void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}
std::string png_image(int width, int height) {
    const auto pixels = test_pixels(width, height);
    std::string out;
    stbi_write_png_to_func(append_bytes, &out, width, height, 3, pixels.data(), width * 3);
    return out;
}
std::string jpeg_image(int width, int height) {
    const auto pixels = test_pixels(width, height);
    std::string out;
    stbi_write_jpg_to_func(append_bytes, &out, width, height, 3, pixels.data(), 90);
    return out;
}
// A 1x1 GIF, written out by hand (stb has no GIF writer).
const std::string kGif1x1(
    "GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00"
    ",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00;",
    43);

std::string data_url(const std::string& media_type, const std::string& bytes) {
    return "data:" + media_type + ";base64," + base64_encode(bytes);
}

// ---------------------------------------------------------------------------------------------
// OpenAI chat: accepted shapes

TEST(OpenAIChat, MinimalBodyKeepsDefaults) {
    const ChatRequest r = chat("{}");
    EXPECT_EQ(r.api, ApiKind::OpenAI);
    EXPECT_EQ(r.model, "m");
    EXPECT_TRUE(same_json(r.messages, R"([{"role": "user", "content": "Hi"}])"));
    EXPECT_TRUE(r.tools.empty());
    EXPECT_EQ(r.tool_choice, ToolChoice::Auto);
    EXPECT_TRUE(r.parallel_tool_calls);
    EXPECT_FALSE(r.thinking.has_value());
    EXPECT_FALSE(r.thinking_budget.has_value());
    EXPECT_EQ(r.max_tokens, -1);
    EXPECT_TRUE(r.sampling == runtime::SamplingParams{});
    EXPECT_TRUE(r.stop.empty());
    EXPECT_TRUE(r.response_format.is_null());
    EXPECT_EQ(r.n, 1);
    EXPECT_FALSE(r.stream);
    EXPECT_FALSE(r.has_images);
}

TEST(OpenAIChat, ContentPartsJoinAndDeveloperIsSystem) {
    const ChatRequest r = chat(R"({"messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": [{"type": "text", "text": "Bon"}, {"type": "input_text", "text": "jour"}], "name": "ann"}]})");
    EXPECT_TRUE(same_json(r.messages, R"([
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Bonjour", "name": "ann"}])"));
}

TEST(OpenAIChat, ToolCallsWithStringAndObjectArguments) {
    const ChatRequest r = chat(R"({"messages": [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": null, "reasoning_content": "Two cities.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}},
            {"type": "function", "function": {"name": "now", "arguments": ""}},
            {"type": "function", "function": {"name": "raw", "arguments": "not json"}},
            {"type": "function", "function": {"name": "list", "arguments": "[1, 2]"}},
            {"type": "function", "function": {"name": "noargs"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "-3C"}]}]})");
    EXPECT_TRUE(same_json(r.messages, R"([
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "", "reasoning_content": "Two cities.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}},
            {"type": "function", "function": {"name": "now", "arguments": {}}},
            {"type": "function", "function": {"name": "raw", "arguments": "not json"}},
            {"type": "function", "function": {"name": "list", "arguments": "[1, 2]"}},
            {"type": "function", "function": {"name": "noargs", "arguments": {}}}]},
        {"role": "tool", "content": "18C", "tool_call_id": "c1"},
        {"role": "tool", "content": "-3C", "tool_call_id": "c2"}])"));
}

TEST(OpenAIChat, ReasoningAliasOnAssistantMessages) {
    const ChatRequest r = chat(R"({"messages": [{"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning": "thought"}, {"role": "user", "content": "q2"}]})");
    EXPECT_EQ(r.messages[1]["reasoning_content"], "thought");
    EXPECT_FALSE(r.messages[0].contains("reasoning_content"));
}

TEST(OpenAIChat, ToolsAndToolChoice) {
    const std::string tools = R"("tools": [
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"function": {"name": "now"}}])";
    const ChatRequest r = chat("{" + tools + "}");
    ASSERT_EQ(r.tools.size(), 2u);
    EXPECT_EQ(r.tools[0].name, "get_weather");
    EXPECT_EQ(r.tools[0].description, "Current weather");
    EXPECT_TRUE(same_json(r.tools[0].parameters,
                          R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"));
    EXPECT_EQ(r.tools[1].name, "now");
    EXPECT_TRUE(same_json(r.tools[1].parameters, R"({"type": "object", "properties": {}})"));

    EXPECT_EQ(chat("{" + tools + R"(, "tool_choice": "none"})").tool_choice, ToolChoice::None);
    EXPECT_EQ(chat("{" + tools + R"(, "tool_choice": "auto"})").tool_choice, ToolChoice::Auto);
    EXPECT_EQ(chat("{" + tools + R"(, "tool_choice": "required"})").tool_choice, ToolChoice::Required);
    const ChatRequest named = chat(
        "{" + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "now"}}, "parallel_tool_calls": false})");
    EXPECT_EQ(named.tool_choice, ToolChoice::Named);
    EXPECT_EQ(named.tool_name, "now");
    EXPECT_FALSE(named.parallel_tool_calls);
    // "none" needs no tools.
    EXPECT_EQ(chat(R"({"tool_choice": "none"})").tool_choice, ToolChoice::None);
}

TEST(OpenAIChat, SamplingFields) {
    const ChatRequest r = chat(R"({"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -42,
        "presence_penalty": -1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1, "logit_bias": {"15": -100, "7": 5.5}})");
    EXPECT_TRUE(same_sampling(r.sampling, R"({"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -42,
        "presence_penalty": -1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1, "logit_bias": {"15": -100.0, "7": 5.5}})"));
    // top_p 0 means "the most likely token only": kept just above zero for the sampler.
    EXPECT_FLOAT_EQ(chat(R"({"top_p": 0})").sampling.top_p, 1e-6f);
    // A whole-number float is an integer; the ends of the ranges are inside.
    EXPECT_EQ(chat(R"({"top_k": 8.0, "temperature": 2})").sampling.top_k, 8);
    EXPECT_EQ(static_cast<int64_t>(chat(R"({"seed": 9223372036854775807})").sampling.seed.value()), INT64_MAX);
    EXPECT_EQ(static_cast<int64_t>(chat(R"({"seed": -9223372036854775808})").sampling.seed.value()), INT64_MIN);
    // null is the same as absent.
    EXPECT_TRUE(chat(R"({"temperature": null, "stop": null, "tools": null})").sampling == runtime::SamplingParams{});
}

TEST(OpenAIChat, LimitsAndOutputOptions) {
    const ChatRequest r = chat(R"({"max_tokens": 100, "stop": ["\n\n", "END"], "n": 3, "logprobs": true,
        "top_logprobs": 5, "stream": true, "stream_options": {"include_usage": true}})");
    EXPECT_EQ(r.max_tokens, 100);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
    EXPECT_EQ(r.n, 3);
    EXPECT_TRUE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, 5);
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    // max_completion_tokens wins over the older max_tokens.
    EXPECT_EQ(chat(R"({"max_tokens": 100, "max_completion_tokens": 7})").max_tokens, 7);
    EXPECT_EQ(chat(R"({"stop": "###"})").stop, std::vector<std::string>{"###"});
}

TEST(OpenAIChat, ResponseFormats) {
    EXPECT_TRUE(chat(R"({"response_format": {"type": "text"}})").response_format.is_null());
    EXPECT_TRUE(same_json(chat(R"({"response_format": {"type": "json_object"}})").response_format, R"({"type": "json_object"})"));
    EXPECT_TRUE(same_json(chat(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})")
                              .response_format,
                          R"({"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}})"));
    EXPECT_TRUE(same_json(chat(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})").response_format,
                          R"({"type": "json_schema", "schema": {}})"));
}

TEST(OpenAIChat, ThinkingSwitches) {
    EXPECT_EQ(chat(R"({"chat_template_kwargs": {"enable_thinking": false}})").thinking, std::optional<bool>(false));
    EXPECT_EQ(chat(R"({"chat_template_kwargs": {"enable_thinking": true}})").thinking, std::optional<bool>(true));
    EXPECT_EQ(chat(R"({"reasoning_effort": "none"})").thinking, std::optional<bool>(false));
    EXPECT_EQ(chat(R"({"reasoning_effort": "high"})").thinking, std::optional<bool>(true));
    EXPECT_EQ(chat(R"({"reasoning_effort": "minimal"})").thinking, std::optional<bool>(true));
    EXPECT_FALSE(chat(R"({"chat_template_kwargs": {"other": 1}})").thinking.has_value());
    EXPECT_EQ(chat(R"({"thinking_budget": 300})").thinking_budget, std::optional<int64_t>(300));
}

TEST(OpenAIChat, DataUrlImagesAreValidatedAndNoted) {
    const std::string png = png_image(3, 2);
    ASSERT_EQ(png.substr(1, 3), "PNG");
    const ChatRequest r = chat(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": ")" +
                               data_url("image/png", png) + R"("}}]}]})");
    EXPECT_TRUE(r.has_images);
    EXPECT_EQ(r.messages[0]["content"], "What is this?");  // images are not text
    // The bare-string form of image_url, and JPEG / GIF data.
    for (const std::string& url : {data_url("image/jpeg", jpeg_image(5, 4)), data_url("image/gif", kGif1x1)}) {
        SCOPED_TRACE(url.substr(0, 20));
        EXPECT_TRUE(chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": ")" + url + R"("}]}]})")
                        .has_images);
    }
}

// ---------------------------------------------------------------------------------------------
// OpenAI chat: rejected input

TEST(OpenAIChat, RejectsBadMessages) {
    expect_errors(
        {
            {R"({"messages": "hi"})", "messages"},
            {R"({"messages": []})", "messages"},
            {R"({"messages": {"role": "user"}})", "messages"},
            {R"({"messages": [5]})", "messages[0]"},
            {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
            {R"({"messages": [{"role": 5, "content": "x"}]})", "messages[0].role"},
            {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role", 400, "\"wizard\""},
            {R"({"messages": [{"role": "user", "content": "a"}, {"role": "function", "content": "x"}]})", "messages[1].role"},
            {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
            {R"({"messages": [{"role": "system", "content": 5}]})", "messages[0].content"},
            {R"({"messages": [{"role": "user", "content": {"text": "x"}}]})", "messages[0].content"},
            {R"({"messages": [{"role": "user", "content": ["x"]}]})", "messages[0].content[0]"},
            {R"({"messages": [{"role": "user", "content": [{"text": "x"}]}]})", "messages[0].content[0].type"},
            {R"({"messages": [{"role": "user", "content": [{"type": "audio", "audio": {}}]}]})", "messages[0].content[0].type",
             400, "\"audio\""},
            {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text"},
            {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": ["x"]}]}]})", "messages[0].content[0].text"},
            {R"({"messages": [{"role": "user", "content": "a", "name": 5}]})", "messages[0].name"},
            {R"({"messages": [{"role": "assistant", "content": "a", "reasoning_content": 5}]})", "messages[0].reasoning_content"},
            {R"({"messages": [{"role": "tool", "content": "a", "tool_call_id": 5}]})", "messages[0].tool_call_id"},
            {R"({"model": 5})", "model"},
        },
        [](const std::string& f) { chat(f); });
    EXPECT_TRUE(fails_with([] { parse_openai_chat(ojson::parse("[1]"), {}); }, 400, "", "JSON object"));
    EXPECT_TRUE(
        fails_with([] { parse_openai_chat(ojson::parse(R"({"model": "m"})"), {}); }, 400, "messages", "messages: missing"));
}

TEST(OpenAIChat, RejectsBadToolCalls) {
    const auto with_calls = [](const std::string& calls) {
        return R"({"messages": [{"role": "assistant", "content": "", "tool_calls": )" + calls + "}]}";
    };
    expect_errors(
        {
            {with_calls(R"("x")"), "messages[0].tool_calls"},
            {with_calls(R"([5])"), "messages[0].tool_calls[0]"},
            {with_calls(R"([{"id": "c"}])"), "messages[0].tool_calls[0].function"},
            {with_calls(R"([{"function": "f"}])"), "messages[0].tool_calls[0].function"},
            {with_calls(R"([{"function": {"arguments": "{}"}}])"), "messages[0].tool_calls[0].function.name"},
            {with_calls(R"([{"function": {"name": ["f"]}}])"), "messages[0].tool_calls[0].function.name"},
            {with_calls(R"([{"function": {"name": "f", "arguments": 5}}])"), "messages[0].tool_calls[0].function.arguments"},
            {with_calls(R"([{"function": {"name": "f", "arguments": [1]}}])"), "messages[0].tool_calls[0].function.arguments"},
            {with_calls(R"([{"id": 5, "function": {"name": "f"}}])"), "messages[0].tool_calls[0].id"},
        },
        [](const std::string& f) { chat(f); });
    RequestLimits limits;
    limits.max_tools = 2;
    const std::string call = R"({"function": {"name": "f"}})";
    EXPECT_NO_THROW(chat(with_calls("[" + repeated(call, 2) + "]"), limits));
    EXPECT_TRUE(fails_with([&] { chat(with_calls("[" + repeated(call, 3) + "]"), limits); }, 400, "messages[0].tool_calls",
                           "limit of 2"));
}

TEST(OpenAIChat, RejectsBadTools) {
    const std::string weather = R"({"type": "function", "function": {"name": "get_weather"}})";
    expect_errors(
        {
            {R"({"tools": "x"})", "tools"},
            {R"({"tools": [5]})", "tools[0]"},
            {R"({"tools": [{"type": "retrieval"}]})", "tools[0].type"},
            {R"({"tools": [{"type": 5, "function": {"name": "f"}}]})", "tools[0].type"},
            {R"({"tools": [{"type": "function"}]})", "tools[0].function"},
            {R"({"tools": [{"type": "function", "function": "f"}]})", "tools[0].function"},
            {R"({"tools": [{"type": "function", "function": {"description": "d"}}]})", "tools[0].function.name"},
            {R"({"tools": [{"type": "function", "function": {"name": ""}}]})", "tools[0].function.name"},
            {R"({"tools": [{"type": "function", "function": {"name": ")" + std::string(257, 'n') + R"("}}]})",
             "tools[0].function.name", 400, "1 to 256"},
            {R"({"tools": [{"type": "function", "function": {"name": "f", "description": 5}}]})",
             "tools[0].function.description"},
            {R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]})",
             "tools[0].function.parameters"},
            {R"({"tools": [)" + weather + "," + weather + "]}", "tools", 400, "\"get_weather\""},
            {R"({"tool_choice": "sometimes"})", "tool_choice", 400, "\"sometimes\""},
            {R"({"tool_choice": 5})", "tool_choice"},
            {R"({"tool_choice": "required"})", "tool_choice"},
            {R"({"tool_choice": {"type": "function", "function": {"name": "f"}}})", "tool_choice"},
            {R"({"tools": [)" + weather + R"(], "tool_choice": {"type": "function"}})", "tool_choice"},
            {R"({"tools": [)" + weather + R"(], "tool_choice": {"type": "function", "function": {"name": 5}}})",
             "tool_choice.function.name"},
            {R"({"tools": [)" + weather + R"(], "tool_choice": {"type": "function", "function": {"name": "nope"}}})",
             "tool_choice", 400, "\"nope\""},
            {R"({"parallel_tool_calls": "yes"})", "parallel_tool_calls"},
        },
        [](const std::string& f) { chat(f); });
    RequestLimits limits;
    limits.max_tools = 1;
    EXPECT_TRUE(fails_with([&] { chat(R"({"tools": [)" + weather + R"(, {"function": {"name": "g"}}]})", limits); }, 400, "tools",
                           "limit of 1"));
}

TEST(OpenAIChat, RejectsBadNumbers) {
    expect_errors(
        {
            {R"({"temperature": "hot"})", "temperature"},
            {R"({"temperature": true})", "temperature"},
            {R"({"temperature": 2.5})", "temperature", 400, "out of range"},
            {R"({"temperature": -1})", "temperature"},
            {R"({"temperature": 1e300})", "temperature"},
            {R"({"top_p": 1.5})", "top_p"},
            {R"({"top_p": -0.1})", "top_p"},
            {R"({"top_k": 1.5})", "top_k", 400, "integer"},
            {R"({"top_k": -2})", "top_k"},
            {R"({"top_k": 1e300})", "top_k"},
            {R"({"top_k": "40"})", "top_k"},
            {R"({"min_p": 2})", "min_p"},
            {R"({"seed": 18446744073709551615})", "seed", 400, "out of range"},
            {R"({"seed": 9223372036854775808})", "seed"},
            // 2^63 as a float: a whole number past the int64 range (double(INT64_MAX) rounds up to it).
            {R"({"seed": 9223372036854775808.0})", "seed"},
            {R"({"seed": -1e19})", "seed"},
            {R"({"seed": 1.5})", "seed"},
            {R"({"presence_penalty": -3})", "presence_penalty"},
            {R"({"frequency_penalty": 2.1})", "frequency_penalty"},
            {R"({"repetition_penalty": 0})", "repetition_penalty"},
            {R"({"repetition_penalty": -1})", "repetition_penalty"},
            {R"({"repetition_penalty": 11})", "repetition_penalty"},
            {R"({"logit_bias": [1]})", "logit_bias"},
            {R"({"logit_bias": {"abc": 1}})", "logit_bias", 400, "\"abc\""},
            {R"({"logit_bias": {"-1": 1}})", "logit_bias"},
            {R"({"logit_bias": {"4294967296": 1}})", "logit_bias"},
            {R"({"logit_bias": {"": 1}})", "logit_bias"},
            {R"({"logit_bias": {"12x": 1}})", "logit_bias"},
            {R"({"logit_bias": {"15": 101}})", "logit_bias.15"},
            {R"({"logit_bias": {"15": "up"}})", "logit_bias.15"},
            {R"({"max_tokens": 0})", "max_tokens"},
            {R"({"max_tokens": -1})", "max_tokens"},
            {R"({"max_tokens": 1e300})", "max_tokens"},
            {R"({"max_tokens": 2.5})", "max_tokens"},
            {R"({"max_tokens": "100"})", "max_tokens"},
            {R"({"max_tokens": 18446744073709551615})", "max_tokens"},
            {R"({"max_completion_tokens": 2199023255553})", "max_completion_tokens"},
            {R"({"n": 0})", "n"},
            {R"({"n": 17})", "n"},
            {R"({"n": "2"})", "n"},
            {R"({"top_logprobs": 21, "logprobs": true})", "top_logprobs"},
            {R"({"top_logprobs": -1, "logprobs": true})", "top_logprobs"},
            {R"({"top_logprobs": 3})", "top_logprobs", 400, "logprobs: true"},
            {R"({"thinking_budget": -1})", "thinking_budget"},
            {R"({"thinking_budget": "lots"})", "thinking_budget"},
        },
        [](const std::string& f) { chat(f); });
    RequestLimits limits;
    limits.max_logit_bias = 2;
    EXPECT_NO_THROW(chat(R"({"logit_bias": {"1": 1, "2": 2}})", limits));
    EXPECT_TRUE(fails_with([&] { chat(R"({"logit_bias": {"1": 1, "2": 2, "3": 3}})", limits); }, 400, "logit_bias", "2 entries"));
}

TEST(OpenAIChat, RejectsBadOptions) {
    expect_errors(
        {
            {R"({"stop": ""})", "stop", 400, "empty"},
            {R"({"stop": ["a", ""]})", "stop"},
            {R"({"stop": [1]})", "stop[0]"},
            {R"({"stop": 5})", "stop"},
            {R"({"stop": [)" + repeated(R"("s")", 17) + "]}", "stop", 400, "limit of 16"},
            {R"({"stop": [")" + std::string(257, 's') + R"("]})", "stop", 400, "256 bytes"},
            {R"({"logprobs": "true"})", "logprobs"},
            {R"({"stream": "yes"})", "stream"},
            {R"({"stream_options": 1})", "stream_options"},
            {R"({"stream_options": {"include_usage": "y"}})", "stream_options.include_usage"},
            {R"({"response_format": "json"})", "response_format"},
            {R"({"response_format": {}})", "response_format.type"},
            {R"({"response_format": {"type": "yaml"}})", "response_format.type", 400, "\"yaml\""},
            {R"({"response_format": {"type": "json_schema"}})", "response_format.json_schema"},
            {R"({"response_format": {"type": "json_schema", "json_schema": "s"}})", "response_format.json_schema"},
            {R"({"chat_template_kwargs": []})", "chat_template_kwargs"},
            {R"({"chat_template_kwargs": {"enable_thinking": "yes"}})", "chat_template_kwargs.enable_thinking"},
            {R"({"reasoning_effort": "extreme"})", "reasoning_effort", 400, "\"extreme\""},
            {R"({"reasoning_effort": 5})", "reasoning_effort"},
        },
        [](const std::string& f) { chat(f); });
    // At the limits: 16 stop strings of 256 bytes each are fine.
    EXPECT_EQ(chat(R"({"stop": [)" + repeated('"' + std::string(256, 's') + '"', 16) + "]}").stop.size(), 16u);
}

TEST(OpenAIChat, TooManyMessages) {
    RequestLimits limits;
    limits.max_messages = 2;
    const std::string two = R"({"role": "user", "content": "a"}, {"role": "assistant", "content": "b"})";
    EXPECT_EQ(chat(R"({"messages": [)" + two + "]}", limits).messages.size(), 2u);
    EXPECT_TRUE(fails_with([&] { chat(R"({"messages": [)" + two + R"(, {"role": "user", "content": "c"}]})", limits); }, 400,
                           "messages", "limit of 2"));
}

TEST(OpenAIChat, StringsOverTheTextLimitAre413) {
    RequestLimits limits;
    limits.max_text_bytes = 8;
    EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "12345678"}]})", limits).messages[0]["content"], "12345678");
    expect_errors(
        {
            {R"({"messages": [{"role": "user", "content": "123456789"}]})", "messages[0].content", 413, "limit of 8"},
            {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "123456789"}]}]})",
             "messages[0].content[0].text", 413},
            {R"({"model": "a-long-model-name"})", "model", 413},
            {R"({"tools": [{"type": "function", "function": {"name": "f", "description": "a long description"}}]})",
             "tools[0].function.description", 413},
            {R"({"stop": ["123456789"]})", "stop[0]", 413},
        },
        [&](const std::string& f) { chat(f, limits); });
}

TEST(OpenAIChat, RejectsBadImages) {
    const std::string png = png_image(4, 4);
    const auto with_image = [](const std::string& image_url) {
        return R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": )" + image_url + "}]}]}";
    };
    const std::string p = "messages[0].content[0].image_url";
    expect_errors(
        {
            {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", p},
            {with_image(R"("https://example.com/cat.png")"), p + ".url", 400, "data: URLs"},
            {with_image(R"({"url": "https://example.com/cat.png"})"), p + ".url"},
            {with_image(R"({})"), p + ".url"},
            {with_image(R"({"url": 5})"), p + ".url"},
            {with_image(R"(5)"), p},
            {with_image(R"({"url": "data:image/png,iVBORw0KGgo="})"), p + ".url", 400, "base64"},
            {with_image(R"({"url": "data:image/png;base64"})"), p + ".url"},
            {with_image(R"({"url": "data:image/png;base64,@@@@"})"), p + ".url", 400, "not a valid"},
            {with_image(R"({"url": ")" + data_url("image/png", "plain text, not a picture") + R"("})"), p + ".url"},
            {with_image(R"({"url": ")" + data_url("image/png", png.substr(0, png.size() / 2)) + R"("})"), p + ".url"},
        },
        [](const std::string& f) { chat(f); });
}

// ---------------------------------------------------------------------------------------------
// Anthropic messages: accepted shapes

TEST(AnthropicMessages, MinimalBody) {
    const ChatRequest r = anthropic("{}");
    EXPECT_EQ(r.api, ApiKind::Anthropic);
    EXPECT_EQ(r.model, "claude");
    EXPECT_EQ(r.max_tokens, 4096);
    EXPECT_TRUE(same_json(r.messages, R"([{"role": "user", "content": "Hi"}])"));
    EXPECT_EQ(r.thinking, std::optional<bool>(false));  // Anthropic's default: no thinking unless asked
    EXPECT_EQ(r.tool_choice, ToolChoice::Auto);
    EXPECT_TRUE(r.parallel_tool_calls);
    // max_tokens 0 is allowed (cache pre-warming).
    EXPECT_EQ(anthropic(R"({"max_tokens": 0})").max_tokens, 0);
}

TEST(AnthropicMessages, SystemStringBlocksAndBillingHeader) {
    EXPECT_TRUE(same_json(anthropic(R"({"system": "Be brief."})").messages,
                          R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])"));
    // The per-request attribution block is dropped so the prompt prefix stays the same.
    EXPECT_TRUE(
        same_json(anthropic(
                      R"({"system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1.0; cch=7f3a"},
                                                   {"type": "text", "text": "You are helpful."},
                                                   {"type": "text", "text": "Use tools.", "cache_control": {"type": "ephemeral"}}]})")
                      .messages,
                  R"([{"role": "system", "content": "You are helpful.\n\nUse tools."}, {"role": "user", "content": "Hi"}])"));
    EXPECT_TRUE(same_json(anthropic(R"({"system": [{"type": "text", "text": "x-anthropic-billing-header: abc"}]})").messages,
                          R"([{"role": "user", "content": "Hi"}])"));
    // The header only counts at the start of a block.
    EXPECT_EQ(
        anthropic(R"({"system": [{"type": "text", "text": "Note: x-anthropic-billing-header: abc"}]})").messages[0]["content"],
        "Note: x-anthropic-billing-header: abc");
    // role "system" inside messages is kept in place.
    EXPECT_TRUE(
        same_json(anthropic(R"({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"},
                                                     {"role": "user", "content": "c"}]})")
                      .messages,
                  R"([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}, {"role": "user", "content": "c"}])"));
}

TEST(AnthropicMessages, TextBlocksJoinAndEmptyMessagesStay) {
    EXPECT_TRUE(same_json(anthropic(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hel"},
                                                      {"type": "text", "text": "lo", "cache_control": {"type": "ephemeral"}}]},
                                                     {"role": "assistant", "content": []}]})")
                              .messages,
                          R"([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": ""}])"));
}

TEST(AnthropicMessages, ToolUseAndToolResult) {
    const ChatRequest r = anthropic(R"({"messages": [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": "{\"city\": \"Oslo\"}"},
            {"type": "tool_use", "id": "toolu_3", "name": "now"}]},
        {"role": "user", "content": [
            {"type": "text", "text": "Here:"},
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "-3C"}, {"type": "text", "text": "snow"}]},
            {"type": "tool_result", "tool_use_id": "toolu_3", "content": "no clock", "is_error": true},
            {"type": "tool_result", "tool_use_id": "toolu_4", "is_error": false},
            {"type": "text", "text": "Thanks."}]}]})");
    EXPECT_TRUE(same_json(r.messages, R"([
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
            {"id": "toolu_3", "type": "function", "function": {"name": "now", "arguments": {}}}]},
        {"role": "user", "content": "Here:"},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "-3C\nsnow"},
        {"role": "tool", "tool_call_id": "toolu_3", "content": "Error: no clock"},
        {"role": "tool", "tool_call_id": "toolu_4", "content": ""},
        {"role": "user", "content": "Thanks."}])"));
    EXPECT_FALSE(r.has_images);
}

TEST(AnthropicMessages, ToolResultImagesAreNoted) {
    const ChatRequest r = anthropic(R"({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
        "content": [{"type": "text", "text": "chart:"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}]}]}]})");
    EXPECT_TRUE(r.has_images);
    EXPECT_EQ(r.messages[0]["content"], "chart:");
}

TEST(AnthropicMessages, ThinkingBlocksAreVerified) {
    const std::string body = R"({"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Add them.", "signature": "sig:Add them."},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy"},
            {"type": "thinking", "thinking": "It is 4.", "signature": "SIGNATURE"},
            {"type": "text", "text": "4"}]},
        {"role": "user", "content": "Thanks"}]})";
    SignatureCheck check;
    EXPECT_TRUE(fails_with([&] { anthropic(body, {}, &check); }, 400, "messages.1.content.2.signature", "signature"));
    ASSERT_EQ(check.asked.size(), 2u);
    EXPECT_EQ(check.asked[0], (std::pair<std::string, std::string>{"Add them.", "sig:Add them."}));
    EXPECT_EQ(check.asked[1], (std::pair<std::string, std::string>{"It is 4.", "SIGNATURE"}));

    std::string signed_body = body;
    signed_body.replace(signed_body.find("SIGNATURE"), 9, "sig:It is 4.");
    const ChatRequest r = anthropic(signed_body, {}, &check);
    EXPECT_TRUE(same_json(r.messages, R"([{"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Add them.\nIt is 4."}, {"role": "user", "content": "Thanks"}])"));
    // Without a verifier every signature is taken.
    EXPECT_EQ(anthropic(body).messages[1]["reasoning_content"], "Add them.\nIt is 4.");
    // A message of nothing but redacted thinking says nothing to the model.
    EXPECT_EQ(
        anthropic(
            R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
                                       {"role": "user", "content": "b"}]})")
            .messages.size(),
        2u);
}

TEST(AnthropicMessages, ToolsAndToolChoice) {
    const std::string tools = R"("tools": [
        {"name": "get_weather", "description": "Current weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"type": "custom", "name": "now", "input_schema": {"type": "object"}}])";
    const ChatRequest r = anthropic("{" + tools + "}");
    ASSERT_EQ(r.tools.size(), 2u);
    EXPECT_EQ(r.tools[0].name, "get_weather");
    EXPECT_EQ(r.tools[0].description, "Current weather");
    EXPECT_TRUE(same_json(r.tools[0].parameters, R"({"type": "object", "properties": {"city": {"type": "string"}}})"));
    EXPECT_EQ(r.tools[1].name, "now");

    EXPECT_EQ(anthropic("{" + tools + R"(, "tool_choice": {"type": "auto"}})").tool_choice, ToolChoice::Auto);
    EXPECT_EQ(anthropic("{" + tools + R"(, "tool_choice": {"type": "any"}})").tool_choice, ToolChoice::Required);
    EXPECT_EQ(anthropic("{" + tools + R"(, "tool_choice": {"type": "none"}})").tool_choice, ToolChoice::None);
    const ChatRequest named =
        anthropic("{" + tools + R"(, "tool_choice": {"type": "tool", "name": "now", "disable_parallel_tool_use": true}})");
    EXPECT_EQ(named.tool_choice, ToolChoice::Named);
    EXPECT_EQ(named.tool_name, "now");
    EXPECT_FALSE(named.parallel_tool_calls);
    EXPECT_TRUE(
        anthropic("{" + tools + R"(, "tool_choice": {"type": "auto", "disable_parallel_tool_use": false}})").parallel_tool_calls);
}

TEST(AnthropicMessages, ThinkingModes) {
    const ChatRequest enabled = anthropic(R"({"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}})");
    EXPECT_EQ(enabled.thinking, std::optional<bool>(true));
    EXPECT_EQ(enabled.thinking_budget, std::optional<int64_t>(2048));
    EXPECT_EQ(anthropic(R"({"max_tokens": 2049, "thinking": {"type": "enabled", "budget_tokens": 2048}})").thinking_budget,
              std::optional<int64_t>(2048));
    const ChatRequest adaptive = anthropic(R"({"thinking": {"type": "adaptive"}})");
    EXPECT_EQ(adaptive.thinking, std::optional<bool>(true));
    EXPECT_FALSE(adaptive.thinking_budget.has_value());
    EXPECT_EQ(anthropic(R"({"thinking": {"type": "disabled"}})").thinking, std::optional<bool>(false));
    // A forced tool is fine with thinking off.
    EXPECT_EQ(
        anthropic(
            R"({"tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "any"}, "thinking": {"type": "disabled"}})")
            .tool_choice,
        ToolChoice::Required);
    // count_tokens bodies have no max_tokens, so the budget is not compared with it.
    const ChatRequest counted = parse_anthropic_messages(
        ojson::parse(
            R"({"model": "c", "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 9000}})"),
        {}, nullptr, nullptr, true);
    EXPECT_EQ(counted.thinking_budget, std::optional<int64_t>(9000));
}

TEST(AnthropicMessages, SamplingAndOptions) {
    const ChatRequest r = anthropic(
        R"({"temperature": 1, "top_p": 0.8, "top_k": 5, "stop_sequences": ["</answer>"], "stream": true,
        "metadata": {"user_id": "u1"}})");
    EXPECT_TRUE(same_sampling(r.sampling, R"({"temperature": 1.0, "top_p": 0.8, "top_k": 5})"));
    EXPECT_EQ(r.stop, std::vector<std::string>{"</answer>"});
    EXPECT_TRUE(r.stream);
}

TEST(AnthropicMessages, Base64ImagesAreValidatedAndNoted) {
    const auto with_image = [](const std::string& media, const std::string& data) {
        return R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": ")" +
               media + R"(", "data": ")" + data + R"("}}, {"type": "text", "text": "What is it?"}]}]})";
    };
    const ChatRequest r = anthropic(with_image("image/png", base64_encode(png_image(2, 3))));
    EXPECT_TRUE(r.has_images);
    EXPECT_TRUE(same_json(r.messages, R"([{"role": "user", "content": "What is it?"}])"));
    EXPECT_TRUE(anthropic(with_image("image/jpeg", base64_encode(jpeg_image(8, 8)))).has_images);
    EXPECT_TRUE(anthropic(with_image("image/gif", base64_encode(kGif1x1))).has_images);
    EXPECT_TRUE(
        anthropic(with_image("image/webp", base64_encode(std::string("RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00\x00", 20))))
            .has_images);

    const std::string p = "messages.0.content.0.source";
    expect_errors(
        {
            {with_image("image/bmp", base64_encode(png_image(2, 2))), p + ".media_type", 400, "\"image/bmp\""},
            {with_image("image/png", "not base64!"), p + ".data", 400, "base64"},
            {with_image("image/png", base64_encode("just words")), p + ".data", 400, "image/png"},
            {with_image("image/webp", base64_encode(png_image(2, 2))), p + ".data"},
            {with_image("image/png", base64_encode(png_image(2, 2).substr(0, 40))), p + ".data"},
            {R"({"messages": [{"role": "user", "content": [{"type": "image"}]}]})", p},
            {R"({"messages": [{"role": "user", "content": [{"type": "image", "source": "x"}]}]})", p},
            {R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]})",
             p, 400, "base64"},
            {R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]})",
             p + ".type"},
            {R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AAAA"}}]}]})",
             p + ".media_type"},
            {R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png"}}]}]})",
             p + ".data"},
        },
        [](const std::string& f) { anthropic(f); });
}

// ---------------------------------------------------------------------------------------------
// Anthropic messages: rejected input

TEST(AnthropicMessages, RejectsBadTopLevelFields) {
    expect_errors(
        {
            {R"({"model": 5})", "model"},
            {R"({"max_tokens": -1})", "max_tokens"},
            {R"({"max_tokens": "100"})", "max_tokens"},
            {R"({"max_tokens": 1e300})", "max_tokens"},
            {R"({"max_tokens": 18446744073709551615})", "max_tokens"},
            {R"({"system": 5})", "system"},
            {R"({"system": [5]})", "system[0]"},
            {R"({"system": [{"type": "image"}]})", "system[0].type", 400, "text"},
            {R"({"system": [{"type": "text"}]})", "system[0].text"},
            {R"({"messages": "hi"})", "messages"},
            {R"({"messages": []})", "messages", 400, "at least one"},
            {R"({"system": "s", "messages": []})", "messages"},
            {R"({"temperature": 1.5})", "temperature"},
            {R"({"top_k": -5})", "top_k"},
            {R"({"stop_sequences": [""]})", "stop_sequences"},
            {R"({"stop_sequences": [1]})", "stop_sequences[0]"},
            {R"({"stop_sequences": [)" + repeated(R"("s")", 17) + "]}", "stop_sequences"},
            {R"({"stream": 1})", "stream"},
            {R"({"metadata": "m"})", "metadata"},
        },
        [](const std::string& f) { anthropic(f); });
    EXPECT_TRUE(
        fails_with([] { parse_anthropic_messages(ojson::parse(R"({"max_tokens": 1, "messages": []})"), {}, nullptr, nullptr); },
                   400, "model", "model"));
    EXPECT_TRUE(fails_with(
        [] {
            parse_anthropic_messages(ojson::parse(R"({"model": "c", "messages": [{"role": "user", "content": "x"}]})"), {},
                                     nullptr, nullptr);
        },
        400, "max_tokens", "max_tokens"));
    EXPECT_TRUE(
        fails_with([] { parse_anthropic_messages(ojson::parse(R"({"model": "c", "max_tokens": 1})"), {}, nullptr, nullptr); },
                   400, "messages", "messages"));
    EXPECT_TRUE(
        fails_with([] { parse_anthropic_messages(ojson::parse(R"("hi")"), {}, nullptr, nullptr); }, 400, "", "JSON object"));
}

TEST(AnthropicMessages, RejectsBadMessagesAndBlocks) {
    const auto blocks = [](const std::string& role, const std::string& content) {
        return R"({"messages": [{"role": ")" + role + R"(", "content": )" + content + "}]}";
    };
    const std::string b = "messages.0.content.0";
    expect_errors(
        {
            {R"({"messages": [5]})", "messages.0"},
            {R"({"messages": [{"content": "x"}]})", "messages.0.role"},
            {R"({"messages": [{"role": "bot", "content": "x"}]})", "messages.0.role", 400, "'user', 'assistant'"},
            {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages.0.role"},
            {R"({"messages": [{"role": "user"}]})", "messages.0.content"},
            {R"({"messages": [{"role": "user", "content": 5}]})", "messages.0.content"},
            {blocks("user", R"(["x"])"), b},
            {blocks("user", R"([{"text": "x"}])"), b + ".type"},
            {blocks("user", R"([{"type": "video"}])"), b + ".type", 400, "\"video\""},
            {blocks("user", R"([{"type": "document", "source": {}}])"), b + ".type", 400, "not supported"},
            {blocks("user", R"([{"type": "text"}])"), b + ".text"},
            {blocks("user", R"([{"type": "text", "text": 5}])"), b + ".text"},
            {blocks("user", R"([{"type": "tool_use", "id": "t", "name": "f", "input": {}}])"), b + ".type", 400,
             b + ": tool_use"},
            {blocks("assistant", R"([{"type": "tool_use", "name": "f"}])"), b, 400, "id and name"},
            {blocks("assistant", R"([{"type": "tool_use", "id": "t"}])"), b},
            {blocks("assistant", R"([{"type": "tool_use", "id": 5, "name": "f"}])"), b + ".id"},
            {blocks("assistant", R"([{"type": "tool_use", "id": "t", "name": 5}])"), b + ".name"},
            {blocks("assistant", R"([{"type": "tool_use", "id": "t", "name": "f", "input": 5}])"), b + ".input"},
            {blocks("assistant", R"([{"type": "tool_result", "tool_use_id": "t", "content": "x"}])"), b + ".type", 400,
             b + ": tool_result"},
            {blocks("user", R"([{"type": "tool_result", "content": "x"}])"), b + ".tool_use_id"},
            {blocks("user", R"([{"type": "tool_result", "tool_use_id": 5}])"), b + ".tool_use_id"},
            {blocks("user", R"([{"type": "tool_result", "tool_use_id": "t", "content": 5}])"), b + ".content"},
            {blocks("user", R"([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "video"}]}])"),
             b + ".content[0].type", 400, "\"video\""},
            {blocks("user", R"([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text"}]}])"),
             b + ".content[0].text"},
            {blocks("user", R"([{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}])"), b + ".is_error"},
            {blocks("user", R"([{"type": "thinking", "thinking": "x", "signature": "s"}])"), b + ".type", 400, b + ": thinking"},
            {blocks("assistant", R"([{"type": "thinking", "signature": "s"}])"), b + ".thinking"},
            {blocks("assistant", R"([{"type": "thinking", "thinking": "x", "signature": 5}])"), b + ".signature"},
            {blocks("user", R"([{"type": "redacted_thinking", "data": "x"}])"), b + ".type", 400, b + ": redacted_thinking"},
            {blocks("assistant",
                    R"([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}])"),
             b + ".type", 400, "only accepted in user messages"},
        },
        [](const std::string& f) { anthropic(f); });
}

TEST(AnthropicMessages, RejectsBadToolsAndChoices) {
    const std::string tool = R"({"name": "get_weather", "input_schema": {"type": "object"}})";
    expect_errors(
        {
            {R"({"tools": {}})", "tools"},
            {R"({"tools": [5]})", "tools.0"},
            {R"({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})", "tools.0.type", 400,
             "\"web_search_20250305\""},
            {R"({"tools": [{"input_schema": {}}]})", "tools.0.name"},
            {R"({"tools": [{"name": "f"}]})", "tools.0.input_schema"},
            {R"({"tools": [{"name": "f", "input_schema": "x"}]})", "tools.0.parameters"},
            {R"({"tools": [{"name": "", "input_schema": {}}]})", "tools.0.name"},
            {R"({"tools": [)" + tool + "," + tool + "]}", "tools", 400, "\"get_weather\""},
            {R"({"tool_choice": "auto"})", "tool_choice"},
            {R"({"tool_choice": {}})", "tool_choice.type"},
            {R"({"tool_choice": {"type": "sometimes"}})", "tool_choice.type", 400, "\"sometimes\""},
            {R"({"tool_choice": {"type": "any"}})", "tool_choice", 400, "no tools"},
            {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "tool"}})", "tool_choice.name"},
            {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "tool", "name": "nope"}})", "tool_choice.name", 400,
             "\"nope\""},
            {R"({"tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}})", "tool_choice.disable_parallel_tool_use"},
        },
        [](const std::string& f) { anthropic(f); });
}

TEST(AnthropicMessages, RejectsBadThinking) {
    const std::string tools = R"("tools": [{"name": "f", "input_schema": {}}])";
    expect_errors(
        {
            {R"({"thinking": true})", "thinking"},
            {R"({"thinking": {}})", "thinking.type"},
            {R"({"thinking": {"type": "on"}})", "thinking.type", 400, "\"on\""},
            {R"({"thinking": {"type": "enabled"}})", "thinking.budget_tokens"},
            {R"({"thinking": {"type": "enabled", "budget_tokens": 1023}})", "thinking.budget_tokens"},
            {R"({"thinking": {"type": "enabled", "budget_tokens": "2048"}})", "thinking.budget_tokens"},
            // The budget must leave room for the answer: max_tokens > budget_tokens.
            {R"({"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 2048}})", "thinking.budget_tokens", 400,
             "`max_tokens` must be greater than `thinking.budget_tokens`"},
            {R"({"max_tokens": 1024, "thinking": {"type": "enabled", "budget_tokens": 4096}})", "thinking.budget_tokens"},
            // A forced tool call starts at once: no room for thinking first.
            {"{" + tools + R"(, "tool_choice": {"type": "any"}, "thinking": {"type": "enabled", "budget_tokens": 1024}})",
             "tool_choice", 400, "tool_choice forces tool use"},
            {"{" + tools + R"(, "tool_choice": {"type": "tool", "name": "f"}, "thinking": {"type": "adaptive"}})", "tool_choice"},
        },
        [](const std::string& f) { anthropic(f); });
}

TEST(AnthropicMessages, LimitsOnCountsAndSizes) {
    RequestLimits limits;
    limits.max_messages = 2;
    limits.max_tools = 1;
    limits.max_text_bytes = 12;  // room for every block type name ("tool_result")
    EXPECT_EQ(anthropic(R"({"model": "c", "system": "123456789012"})", limits).messages[0]["content"], "123456789012");
    const std::string over = "1234567890123";
    expect_errors(
        {
            {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]})",
             "messages", 400, "limit of 2"},
            {R"({"tools": [{"name": "f", "input_schema": {}}, {"name": "g", "input_schema": {}}]})", "tools", 400, "limit of 1"},
            {R"({"model": "c", "system": ")" + over + R"("})", "system", 413, "limit of 12"},
            {R"({"model": "c", "system": [{"type": "text", "text": ")" + over + R"("}]})", "system[0].text", 413},
            {R"({"model": "c", "messages": [{"role": "user", "content": ")" + over + R"("}]})", "messages.0.content", 413},
            {R"({"model": "c", "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": ")" +
                 over + R"("}]}]})",
             "messages.0.content.0.content", 413},
            {R"({"model": "c", "messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": ")" + over +
                 R"(", "signature": ""}]}]})",
             "messages.0.content.0.thinking", 413},
            {R"({"model": "c", "tools": [{"name": "f", "description": ")" + over + R"(", "input_schema": {}}]})",
             "tools.0.description", 413},
        },
        [&](const std::string& f) { anthropic(f, limits); });
}

// ---------------------------------------------------------------------------------------------
// Tool-call arguments sent as JSON text

// An assistant turn whose one tool call carries `arguments` as a string, in each API's shape.
ojson openai_call_with(const std::string& arguments) {
    ojson body = ojson::parse(kChatBase);
    body["messages"] =
        ojson::array({{{"role", "assistant"},
                       {"content", ""},
                       {"tool_calls", ojson::array({{{"function", {{"name", "f"}, {"arguments", arguments}}}}})}}});
    return body;
}
ojson anthropic_call_with(const std::string& input) {
    ojson body = ojson::parse(kMessagesBase);
    body["messages"] =
        ojson::array({{{"role", "assistant"},
                       {"content", ojson::array({{{"type", "tool_use"}, {"id", "t"}, {"name", "f"}, {"input", input}}})}}});
    return body;
}

TEST(ToolCallArguments, JsonTextNestsNoDeeperThanTheBody) {
    // An object `levels` containers deep.
    const auto deep = [](int levels) { return R"({"a":)" + nested(levels - 1, "1") + "}"; };
    const ChatRequest openai = parse_openai_chat(openai_call_with(deep(64)), {});
    EXPECT_TRUE(openai.messages[0]["tool_calls"][0]["function"]["arguments"].is_object());
    const ChatRequest claude = parse_anthropic_messages(anthropic_call_with(deep(64)), {}, nullptr, nullptr);
    EXPECT_TRUE(claude.messages[0]["tool_calls"][0]["function"]["arguments"].is_object());
    // One level more is refused, however it is deep: copying a value recurses once per level, so
    // a string of a few hundred kilobytes would otherwise overflow the stack.
    for (const int levels : {65, 300000}) {
        SCOPED_TRACE(levels);
        EXPECT_TRUE(fails_with([&] { parse_openai_chat(openai_call_with(deep(levels)), {}); }, 400,
                               "messages[0].tool_calls[0].function.arguments", "deeper than 64"));
        EXPECT_TRUE(fails_with([&] { parse_anthropic_messages(anthropic_call_with(deep(levels)), {}, nullptr, nullptr); }, 400,
                               "messages.0.content.0.input", "deeper than 64"));
        EXPECT_TRUE(fails_with([&] { parse_openai_chat(openai_call_with(nested(levels, "")), {}); }, 400,
                               "messages[0].tool_calls[0].function.arguments", "deeper than 64"));
    }
}

// ---------------------------------------------------------------------------------------------
// Legacy completions

TEST(OpenAICompletion, PromptShapesAndFields) {
    const CompletionRequest r = completion("{}");
    EXPECT_EQ(r.model, "m");
    EXPECT_EQ(r.prompt_text, "Once upon a time");
    EXPECT_FALSE(r.prompt_is_tokens);
    EXPECT_EQ(r.max_tokens, 16);  // the legacy API's default
    EXPECT_EQ(r.logprobs, -1);
    EXPECT_EQ(r.n, 1);

    EXPECT_EQ(completion(R"({"prompt": ["Hello"]})").prompt_text, "Hello");
    const CompletionRequest tokens = completion(R"({"prompt": [15, 2147483647, 7]})");
    EXPECT_TRUE(tokens.prompt_is_tokens);
    EXPECT_EQ(tokens.prompt_tokens, (std::vector<int32_t>{15, 2147483647, 7}));

    const CompletionRequest full = completion(R"({"max_tokens": 0, "echo": true, "logprobs": 3, "n": 2, "stream": true,
        "stream_options": {"include_usage": true}, "stop": ["\n"], "best_of": 1, "temperature": 1.5, "seed": 9})");
    EXPECT_EQ(full.max_tokens, 0);
    EXPECT_TRUE(full.echo);
    EXPECT_EQ(full.logprobs, 3);
    EXPECT_EQ(full.n, 2);
    EXPECT_TRUE(full.stream);
    EXPECT_TRUE(full.include_usage);
    EXPECT_EQ(full.stop, std::vector<std::string>{"\n"});
    EXPECT_TRUE(same_sampling(full.sampling, R"({"temperature": 1.5, "seed": 9})"));
}

TEST(OpenAICompletion, RejectsBadInput) {
    expect_errors(
        {
            {R"({"prompt": 5})", "prompt"},
            {R"({"prompt": []})", "prompt"},
            {R"({"prompt": ["a", "b"]})", "prompt", 400, "one string"},
            {R"({"prompt": [{"text": "a"}]})", "prompt"},
            {R"({"prompt": [1, "a"]})", "prompt[1]"},
            {R"({"prompt": [-1]})", "prompt[0]"},
            {R"({"prompt": [2147483648]})", "prompt[0]", 400, "out of range"},
            {R"({"prompt": [1.5]})", "prompt[0]"},
            {R"({"max_tokens": -1})", "max_tokens"},
            {R"({"max_tokens": 1e300})", "max_tokens"},
            {R"({"logprobs": 6})", "logprobs"},
            {R"({"logprobs": true})", "logprobs"},
            {R"({"n": 0})", "n"},
            {R"({"echo": "yes"})", "echo"},
            {R"({"stream": "no"})", "stream"},
            {R"({"stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
            {R"({"suffix": "end"})", "suffix", 400, "not supported"},
            {R"({"best_of": 2})", "best_of"},
            {R"({"best_of": "1"})", "best_of"},
            {R"({"stop": [""]})", "stop"},
            {R"({"temperature": 3})", "temperature"},
            {R"({"model": []})", "model"},
        },
        [](const std::string& f) { completion(f); });
    EXPECT_TRUE(
        fails_with([] { parse_openai_completion(ojson::parse(R"({"model": "m"})"), {}); }, 400, "prompt", "prompt: missing"));
    EXPECT_TRUE(fails_with([] { parse_openai_completion(ojson::parse("[]"), {}); }, 400, "", "JSON object"));
    RequestLimits limits;
    limits.max_text_bytes = 8;
    EXPECT_TRUE(fails_with([&] { completion(R"({"prompt": "123456789"})", limits); }, 413, "prompt", "limit of 8"));
    EXPECT_TRUE(fails_with([&] { completion(R"({"prompt": ["123456789"]})", limits); }, 413, "prompt[0]", "prompt[0]"));
}

// ---------------------------------------------------------------------------------------------
// The body reader

TEST(ParseJsonBody, ReadsObjectsInOrder) {
    const ojson body = parse_json_body(R"({"b": 1, "a": [true, null, "x\u00e9"], "c": {"d": -2.5}})");
    ASSERT_TRUE(body.is_object());
    std::vector<std::string> keys;
    for (const auto& [key, value] : body.items()) keys.push_back(key);
    EXPECT_EQ(keys, (std::vector<std::string>{"b", "a", "c"}));
    EXPECT_EQ(body["a"][2], "x\xc3\xa9");
    EXPECT_DOUBLE_EQ(body["c"]["d"].get<double>(), -2.5);
}

TEST(ParseJsonBody, RejectsInvalidJsonAndUtf8) {
    for (const std::string text : {"{", "{\"a\": 1,}", "{} x", "{'a': 1}", "{\"a\": tru}", "nul", "{\"a\": 01}", "\"\\x\""}) {
        SCOPED_TRACE(text);
        EXPECT_TRUE(fails_with([&] { parse_json_body(text); }, 400, "", "not valid JSON"));
    }
    EXPECT_TRUE(fails_with([] { parse_json_body(""); }, 400, "", "empty"));
    // Invalid UTF-8 in a string: a stray continuation byte, an overlong '/', a truncated sequence,
    // a UTF-16 surrogate written as UTF-8, and an unpaired surrogate escape.
    for (const std::string text : {"{\"a\": \"\x80\"}", "{\"a\": \"\xc0\xaf\"}", "{\"a\": \"\xe2\x82\"}",
                                   "{\"a\": \"\xed\xa0\x80\"}", "{\"a\": \"\\ud800\"}", "{\"\xff\": 1}"}) {
        SCOPED_TRACE(testing::PrintToString(text));
        EXPECT_TRUE(fails_with([&] { parse_json_body(text); }, 400, "", "not valid JSON"));
    }
}

TEST(ParseJsonBody, NumbersBeyondDoubleAre400) {
    // 1e300 is a number (and a parser says it is out of range); 1e400 is not a double at all.
    EXPECT_DOUBLE_EQ(parse_json_body(R"({"t": 1e300})")["t"].get<double>(), 1e300);
    for (const std::string text : {R"({"t": 1e400})", R"({"t": -1e400})", R"([1e99999])"}) {
        SCOPED_TRACE(text);
        EXPECT_TRUE(fails_with([&] { parse_json_body(text); }, 400, "", "not valid JSON"));
    }
}

TEST(ParseJsonBody, NestingIsBounded) {
    // 64 levels of containers are fine whatever is innermost; 65 are not.
    for (const bool objects : {false, true})
        for (const std::string inner : {"1", "\"s\"", "[]", "{}"}) {
            SCOPED_TRACE(std::string(objects ? "objects around " : "arrays around ") + inner);
            const int inner_levels = inner == "[]" || inner == "{}" ? 1 : 0;
            EXPECT_NO_THROW(parse_json_body(nested(64 - inner_levels, inner, objects)));
            EXPECT_TRUE(
                fails_with([&] { parse_json_body(nested(65 - inner_levels, inner, objects)); }, 400, "", "deeper than 64"));
        }
    EXPECT_TRUE(fails_with([] { parse_json_body(nested(100000, "1")); }, 400, "", "deeper than 64"));
    EXPECT_NO_THROW(parse_json_body(nested(3, "1"), 3));
    EXPECT_TRUE(fails_with([] { parse_json_body(nested(4, "1"), 3); }, 400, "", "deeper than 3"));
    // Deep within the bound, and wide: fine.
    EXPECT_EQ(parse_json_body("[" + repeated(nested(30, "7"), 200) + "]").size(), 200u);
}

TEST(ParseJsonBody, FeedsTheParsers) {
    // The whole path a request takes: text -> JSON -> ChatRequest.
    const ChatRequest r = parse_openai_chat(
        parse_json_body(R"({"messages": [{"role": "user", "content": "caf\u00e9"}], "temperature": 0.25})"), {});
    EXPECT_EQ(r.messages[0]["content"], "caf\xc3\xa9");
    EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.25);
    EXPECT_TRUE(fails_with(
        [] {
            parse_openai_chat(parse_json_body(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 1e300})"), {});
        },
        400, "temperature", "out of range"));
}

// ---------------------------------------------------------------------------------------------
// base64 and images

TEST(Base64, KnownVectors) {
    const std::vector<std::pair<std::string, std::string>> vectors = {{"", ""},
                                                                      {"f", "Zg=="},
                                                                      {"fo", "Zm8="},
                                                                      {"foo", "Zm9v"},
                                                                      {"foob", "Zm9vYg=="},
                                                                      {"fooba", "Zm9vYmE="},
                                                                      {"foobar", "Zm9vYmFy"},
                                                                      {std::string("\x00\xff\xfe", 3), "AP/+"},
                                                                      {"\xfb\xef\xbe", "++++"},
                                                                      {"\xff\xff\xff", "////"}};
    for (const auto& [bytes, text] : vectors) {
        SCOPED_TRACE(text);
        EXPECT_EQ(base64_encode(bytes), text);
        EXPECT_EQ(base64_decode(text), std::optional<std::string>(bytes));
    }
}

TEST(Base64, DecodingIsStrict) {
    EXPECT_EQ(base64_decode("Zm9v\r\nYmFy\n"),
              std::optional<std::string>("foobar"));                  // MIME line breaks are allowed
    EXPECT_EQ(base64_decode("Zg"), std::optional<std::string>("f"));  // and so is missing padding
    for (const std::string text : {"Z", "Zm9vY", "Zg=a", "Zg===", "Zm9v YmFy", "Zm9v-_", "Zm9v\x80", "Zm=9v", "===="}) {
        SCOPED_TRACE(text);
        EXPECT_EQ(base64_decode(text), std::nullopt);
    }
}

TEST(Base64, RandomBytesRoundTrip) {
    std::mt19937 rng(20240611);
    const int64_t rounds = strata::test::scaled(2000, 200);
    for (int64_t round = 0; round < rounds; ++round) {
        const size_t size = rng() % 300;
        std::string bytes(size, '\0');
        for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
        const std::string text = base64_encode(bytes);
        ASSERT_EQ(text.size(), (size + 2) / 3 * 4);
        ASSERT_EQ(text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="), std::string::npos);
        ASSERT_EQ(base64_decode(text), std::optional<std::string>(bytes)) << "size " << size;
        // One character outside the alphabet anywhere makes it invalid.
        if (!text.empty()) {
            std::string broken = text;
            broken[rng() % broken.size()] = "!*.~ "[rng() % 5];
            ASSERT_EQ(base64_decode(broken), std::nullopt) << broken;
        }
    }
}

TEST(ImageInfo, ReadsRealImages) {
    int width = 0, height = 0;
    const std::string png = png_image(7, 3);
    ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n"));
    EXPECT_TRUE(image_info(png, "image/png", width, height));
    EXPECT_EQ(width, 7);
    EXPECT_EQ(height, 3);
    EXPECT_TRUE(image_info(jpeg_image(5, 9), "image/jpeg", width, height));
    EXPECT_EQ(width, 5);
    EXPECT_EQ(height, 9);
    EXPECT_TRUE(image_info(kGif1x1, "image/gif", width, height));
    EXPECT_EQ(width, 1);
    EXPECT_EQ(height, 1);
    EXPECT_TRUE(image_info(std::string("RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00\x00", 20), "image/webp", width, height));
}

TEST(ImageInfo, RejectsCorruptAndOversizedImages) {
    int width = 0, height = 0;
    const std::string png = png_image(16, 16);
    EXPECT_FALSE(image_info("", "image/png", width, height));
    EXPECT_FALSE(image_info("plain text, not a picture", "image/png", width, height));
    // A PNG cut short: the header reads, the pixels do not.
    EXPECT_FALSE(image_info(png.substr(0, png.size() - 20), "image/png", width, height));
    EXPECT_FALSE(image_info(png.substr(0, 33), "image/png", width, height));
    // A header that lies: it claims 16 x 17, the pixel data holds 16 x 16 (stb does not check CRCs).
    std::string taller = png;
    taller.replace(20, 4, std::string("\x00\x00\x00\x11", 4));
    EXPECT_FALSE(image_info(taller, "image/png", width, height));
    // Sizes are bounded: 8192 pixels a side.
    EXPECT_TRUE(image_info(png_image(8192, 1), "image/png", width, height));
    EXPECT_EQ(width, 8192);
    EXPECT_FALSE(image_info(png_image(8193, 1), "image/png", width, height));
    EXPECT_FALSE(image_info(png_image(1, 8193), "image/png", width, height));
    // A PNG declared as WebP, and a RIFF file that is not WebP.
    EXPECT_FALSE(image_info(png, "image/webp", width, height));
    EXPECT_FALSE(image_info(std::string("RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00", 20), "image/webp", width, height));
    // Random bytes.
    std::mt19937 rng(7);
    std::string noise(512, '\0');
    for (char& c : noise) c = static_cast<char>(rng() & 0xFF);
    EXPECT_FALSE(image_info(noise, "image/jpeg", width, height));
}

}  // namespace
}  // namespace strata::serve

namespace strata::serve {
namespace {

// Anthropic structured output: output_config.format and the beta's output_format become the
// engine's json_schema constraint, as OpenAI's response_format does.
TEST(AnthropicParse, StructuredOutputFormats) {
    const char* schema = R"({"type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"]})";
    for (const std::string& field :
         {std::string(R"({"output_config": {"effort": "low", "format": {"type": "json_schema", "schema": )") + schema + "}}}",
          std::string(R"({"output_format": {"type": "json_schema", "schema": )") + schema + "}}"}) {
        const ChatRequest r = anthropic(field);
        EXPECT_EQ(r.response_format, (ojson{{"type", "json_schema"}, {"schema", ojson::parse(schema)}})) << field;
    }
    EXPECT_EQ(anthropic(R"({"output_config": {"effort": "low"}})").response_format, ojson());
    EXPECT_EQ(anthropic(R"({"output_config": {"format": null}})").response_format, ojson());
    expect_errors(
        {{R"({"output_config": 3})", "output_config"},
         {R"({"output_config": {"format": {"type": "text"}}})", "output_config.format.type"},
         {R"({"output_config": {"format": {"type": "json_schema"}}})", "output_config.format.schema"},
         {R"({"output_format": {"type": "json_schema", "schema": []}})", "output_format.schema"},
         {R"({"output_format": {"type": "json_schema", "schema": {}}, "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}})",
          "output_format"}},
        [](const std::string& f) { anthropic(f); });
}

}  // namespace
}  // namespace strata::serve
