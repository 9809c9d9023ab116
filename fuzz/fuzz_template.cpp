// libFuzzer target over the chat-template engine: any template text must parse and render a
// fixed conversation, or fail with strata::Error — never crash, hang or exhaust memory (the
// engine's own limits bound work, output and recursion).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "template/chat_template.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const nlohmann::ordered_json request = nlohmann::ordered_json::parse(R"({
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "What is 2+2? \u00e9\u4e2d"},
            {"role": "assistant", "content": "", "reasoning_content": "add",
             "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
            {"role": "tool", "content": "4"},
            {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
        ],
        "tools": [{"type": "function", "function": {"name": "add", "description": "sum",
                   "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}],
        "add_generation_prompt": true,
        "enable_thinking": false
    })");
    try {
        const auto t = strata::tmpl::ChatTemplate::from_source(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
        (void)t.render(request);
    } catch (const strata::Error&) {
    }
    return 0;
}
