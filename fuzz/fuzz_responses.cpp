// libFuzzer target over the Responses API request parser of `strata serve`: any body, read by
// parse_json_body, then by parse_openai_responses and its items by responses_messages, must either
// become a well-formed request and template messages or be refused with an ApiError (400 or 413,
// with a message). Any other exception, a crash or a sanitizer report is a finding; so is an
// accepted request that breaks what the server relies on (messages with a role and text, tool
// calls with a name, a forced tool that exists, unique tool names).
//
// Input: the first byte's bit 6 picks tight limits (two items, two tools, 64-byte strings) so that
// small inputs reach the limit checks; the rest is the body. Seeds: fuzz/corpus/responses (Codex's
// request shape among them).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "serve/responses_request.h"

namespace {

using namespace strata::serve;

[[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "fuzz_responses: %s\n", what.c_str());
    std::abort();
}

void check_messages(const ojson& messages) {
    if (!messages.is_array() || messages.empty()) fail("no messages");
    for (const auto& m : messages) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string())
            fail("a message without a role or text content");
        const auto& role = m["role"].get_ref<const std::string&>();
        if (role != "system" && role != "user" && role != "assistant" && role != "tool") fail("unknown role " + role);
        try {
            (void)m.dump();
        } catch (const ojson::exception&) {
            fail("a message that cannot be written as JSON");
        }
        if (m.contains("tool_calls"))
            for (const auto& call : m["tool_calls"])
                if (!call.at("function").at("name").is_string()) fail("a tool call without a name");
    }
}

void check_request(const ResponsesRequest& r, const RequestLimits& limits) {
    if (static_cast<int64_t>(r.chat.tools.size()) > limits.max_tools) fail("too many tools");
    std::set<std::string> names;
    for (const auto& t : r.chat.tools)
        if (t.name.empty() || !names.insert(t.name).second) fail("an empty or repeated tool name");
    const bool forced = r.chat.tool_choice == ToolChoice::Required || r.chat.tool_choice == ToolChoice::Named;
    if (forced && r.chat.tools.empty()) fail("a forced tool without tools");
    if (r.chat.tool_choice == ToolChoice::Named && !names.count(r.chat.tool_name)) fail("the forced tool does not exist");
    if (static_cast<int64_t>(r.input.size()) > limits.max_messages) fail("too many items");
    if (r.chat.max_tokens == 0 || r.chat.max_tokens < -1) fail("max_output_tokens out of bounds");
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
        limits.max_text_bytes = 64;
    }
    try {
        const ResponsesRequest r = parse_openai_responses(parse_json_body(body), limits);
        check_request(r, limits);
        bool images = false;
        check_messages(responses_messages(
            r.instructions, r.input, [](const std::string& e) -> std::optional<std::string> { return e; }, images));
    } catch (const ApiError& e) {
        if (e.status != 400 && e.status != 413) fail("status " + std::to_string(e.status) + ": " + e.what());
        if (std::string(e.what()).empty()) fail("an ApiError without a message");
    }
    return 0;
}
