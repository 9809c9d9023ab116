// libFuzzer target over the request parsers of `strata serve`: any body, read by parse_json_body
// and then by one of the parsers, must either become a well-formed request or be refused with an
// ApiError (400 or 413, with a message). Any other exception, a crash or a sanitizer report is a
// finding; so is an accepted request that breaks what the server relies on (every message has a
// role and text, a forced tool exists, stop strings are within their limits, ...).
//
// Input: the first byte picks the parser (bits 0-1: 0 OpenAI chat, 1 Anthropic messages,
// 2 Anthropic count_tokens, 3 legacy completions) and bit 6 tight limits (two messages, two tools,
// two 8-byte stop strings, 64-byte strings) so that small inputs reach the limit checks. The rest
// is the body. Seed files start with '0'-'3' (normal limits) or 'p'-'s' (tight limits).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "serve/chat_request.h"

namespace {

using namespace strata::serve;

[[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "fuzz_request: %s\n", what.c_str());
    std::abort();
}

// Thinking signatures: "valid" passes, anything else does not (both paths get exercised).
bool verify(const void*, const std::string&, const std::string& signature) { return signature == "valid"; }

// A string the server may write into JSON: dumping it must not throw (valid UTF-8).
void check_text(const std::string& s, const char* what) {
    try {
        (void)ojson(s).dump();
    } catch (const ojson::exception&) {
        fail(std::string(what) + " is not valid UTF-8");
    }
}

void check_stop(const std::vector<std::string>& stop, const RequestLimits& limits) {
    if (static_cast<int64_t>(stop.size()) > limits.max_stop) fail("too many stop strings");
    for (const auto& s : stop)
        if (s.empty() || static_cast<int64_t>(s.size()) > limits.max_stop_bytes) fail("a stop string out of bounds");
}

void check_chat(const ChatRequest& r, const RequestLimits& limits, bool anthropic, bool count_tokens_only) {
    if (!r.messages.is_array() || r.messages.empty()) fail("no messages");
    for (const auto& m : r.messages) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string())
            fail("a message without a role or text content");
        const auto& role = m["role"].get_ref<const std::string&>();
        if (role != "system" && role != "user" && role != "assistant" && role != "tool") fail("unknown role " + role);
        check_text(m["content"].get_ref<const std::string&>(), "content");
        if (m.contains("tool_calls")) {
            if (role != "assistant" || !m["tool_calls"].is_array()) fail("tool_calls outside an assistant message");
            for (const auto& call : m["tool_calls"]) {
                const auto& fn = call.at("function");
                if (!fn.at("name").is_string()) fail("a tool call without a name");
                if (!fn.at("arguments").is_object() && !fn.at("arguments").is_string())
                    fail("tool call arguments of the wrong type");
            }
        }
    }
    if (static_cast<int64_t>(r.tools.size()) > limits.max_tools) fail("too many tools");
    std::set<std::string> names;
    for (const auto& t : r.tools) {
        if (t.name.empty() || !names.insert(t.name).second) fail("an empty or repeated tool name");
        if (!t.parameters.is_object()) fail("tool parameters are not an object");
    }
    const bool forced = r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named;
    if (forced && r.tools.empty()) fail("a forced tool without tools");
    if (r.tool_choice == ToolChoice::Named && !names.count(r.tool_name)) fail("the forced tool does not exist");
    check_stop(r.stop, limits);
    if (r.n < 1 || r.n > limits.max_n) fail("n out of bounds");
    if (r.top_logprobs < 0 || r.top_logprobs > 20 || (r.top_logprobs > 0 && !r.logprobs)) fail("top_logprobs out of bounds");
    if (anthropic) {
        if (forced && r.thinking.value_or(false)) fail("thinking with a forced tool");
        if (!count_tokens_only && r.thinking_budget && *r.thinking_budget >= r.max_tokens)
            fail("a thinking budget over max_tokens");
    }
}

void check_completion(const CompletionRequest& r, const RequestLimits& limits) {
    if (r.prompt_is_tokens) {
        if (r.prompt_tokens.empty()) fail("an empty token prompt");
        for (int32_t t : r.prompt_tokens)
            if (t < 0) fail("a negative token id");
    } else {
        check_text(r.prompt_text, "prompt");
    }
    check_stop(r.stop, limits);
    if (r.n < 1 || r.n > limits.max_n || r.logprobs < -1 || r.logprobs > 5 || r.max_tokens < 0) fail("a field out of bounds");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t selector = data[0];
    const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
    RequestLimits limits;
    if (selector & 0x40) {
        limits.max_messages = 2;
        limits.max_tools = 2;
        limits.max_stop = 2;
        limits.max_stop_bytes = 8;
        limits.max_n = 2;
        limits.max_logit_bias = 2;
        limits.max_text_bytes = 64;
    }
    try {
        const ojson json = parse_json_body(body);
        switch (selector & 3) {
            case 0: check_chat(parse_openai_chat(json, limits), limits, false, false); break;
            case 1: check_chat(parse_anthropic_messages(json, limits, verify, nullptr), limits, true, false); break;
            case 2: check_chat(parse_anthropic_messages(json, limits, verify, nullptr, true), limits, true, true); break;
            default: check_completion(parse_openai_completion(json, limits), limits); break;
        }
    } catch (const ApiError& e) {
        if (e.status != 400 && e.status != 413) fail("status " + std::to_string(e.status) + ": " + e.what());
        if (std::string(e.what()).empty()) fail("an ApiError without a message");
    }
    return 0;
}
