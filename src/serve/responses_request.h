// The OpenAI Responses API's request (POST /v1/responses) as the server works with it: the body
// is checked and its `input` items normalized (ResponsesRequest), and a conversation of items,
// with the instructions in front, becomes the template-ready messages of a ChatRequest
// (responses_messages), so that the rest is the chat machinery (docs/api.md, "Responses").
//
// Items (normalized: `content` always an array of parts, `arguments` always a string):
//   {"type":"message","role":"user"|"assistant"|"system"|"developer","content":[{"type":"input_text"|
//     "output_text"|"refusal","text"|"refusal"},...]}          -> a message (developer -> system)
//   {"type":"reasoning","summary":[{"type":"summary_text","text"}],"content":[{"type":"reasoning_text",
//     "text"}],"encrypted_content"}                            -> reasoning_content of the next
//                                                                 assistant message
//   {"type":"function_call","call_id","name","arguments"}      -> an assistant tool call (calls
//   {"type":"custom_tool_call","call_id","name","input"}          in a row join one message)
//   {"type":"local_shell_call","call_id","action"}
//   {"type":"function_call_output"|"custom_tool_call_output"|"local_shell_call_output","call_id",
//     "output"}                                                -> a tool message
//   hosted tools' records (web_search_call, file_search_call, computer_call, image_generation_call,
//     code_interpreter_call, mcp_*...)                         -> kept in the items, not shown to
//                                                                 the model (it cannot use them)
// Tools: `function` tools are the model's; tools a local server cannot run (web_search,
// local_shell, custom, image_generation, mcp, ...) are accepted and left out.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "serve/chat_request.h"

namespace strata::serve {

struct ResponsesRequest {
    // Tools, tool choice, sampling, max_tokens (max_output_tokens), structured output
    // (text.format), thinking (reasoning.effort), stream. `messages` is empty until
    // responses_messages fills it.
    ChatRequest chat;
    std::optional<std::string> instructions;
    ojson input = ojson::array();  // this request's items, normalized
    std::string previous_response_id;
    bool store = true;
    bool include_encrypted_reasoning = false;  // include: ["reasoning.encrypted_content"]
    bool reasoning_summary = false;            // reasoning.summary set: reasoning goes out as a summary too
    // What the response object repeats of the request (tools as sent, tool_choice, text,
    // reasoning, metadata, temperature, top_p, max_output_tokens, truncation, ...).
    ojson echo = ojson::object();
};

// Checks and normalizes a body. Throws ApiError 400 (413: a string over max_text_bytes) naming
// the field.
ResponsesRequest parse_openai_responses(const ojson& body, const RequestLimits& limits);

// Sets the request's tool choice as a body's `tool_choice` would ("auto", "none", "required",
// {"type":"function","name"}, ...). Throws ApiError 400 naming `param`.
void set_responses_tool_choice(ResponsesRequest& r, const ojson& choice, const RequestLimits& limits);

// The text of a reasoning item's encrypted_content, when this server made it (nullopt: not ours,
// or altered); null function: encrypted_content is ignored.
using ReasoningDecrypter = std::function<std::optional<std::string>(const std::string& encrypted)>;

// Template-ready messages (ChatRequest::messages) of `items`, the instructions first as the system
// message. `has_images`: set when a message or tool output carried an image. Throws ApiError 400.
ojson responses_messages(const std::optional<std::string>& instructions, const ojson& items, const ReasoningDecrypter& decrypt,
                         bool& has_images);

}  // namespace strata::serve
