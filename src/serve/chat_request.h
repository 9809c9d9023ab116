// A chat request as the server works with it, whichever API it came through: OpenAI's
// /v1/chat/completions and Anthropic's /v1/messages bodies both become a ChatRequest (messages in
// the shape chat templates expect, tools, sampling, limits), and every problem with a body becomes
// an ApiError that each API words in its own error shape (docs/api.md).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampling_params.h"
#include "runtime/stop_strings.h"

namespace strata::serve {

using ojson = nlohmann::ordered_json;

// A failure the client is told about: an HTTP status and a message in the client's terms.
// `param` names the offending field where there is one (OpenAI's `param`).
class ApiError : public std::runtime_error {
public:
    ApiError(int status, const std::string& message, std::string param = {})
        : std::runtime_error(message), status(status), param(std::move(param)) {}
    int status;
    std::string param;
    int retry_after_s = 0;  // > 0: sent as Retry-After (429 / 529 / 503)
};

// Bounds on what a client may send (every count and size is bounded).
struct RequestLimits {
    int64_t max_messages = 4096;
    int64_t max_tools = 512;
    int64_t max_stop = 16;  // one less than the engine takes: a thinking budget adds "</think>"
    int64_t max_stop_bytes = runtime::StopStringMatcher::kMaxStopBytes;
    int64_t max_n = 16;
    int64_t max_logit_bias = runtime::SamplingParams::kMaxLogitBias;  // more than the engine's is not allowed
    int64_t max_text_bytes = 16ll << 20;                              // one string (message text, tool schema text, ...)
    int64_t n_vocab = 0;  // logit_bias ids must be below it; 0: not known here (the engine checks)
};

struct ToolDef {
    std::string name, description;
    ojson parameters;  // JSON schema of the arguments object
};

enum class ToolChoice { Auto, None, Required, Named };
// Responses: OpenAI's /v1/responses (OpenAI's error shape, its own stream events).
enum class ApiKind { OpenAI, Anthropic, Responses };

struct ChatRequest {
    ApiKind api = ApiKind::OpenAI;
    std::string model;
    // Template-ready messages: {"role", "content": string, "tool_calls": [{"id", "type",
    // "function": {"name", "arguments": object}}], "tool_call_id", "reasoning_content"}.
    ojson messages = ojson::array();
    std::vector<ToolDef> tools;
    ToolChoice tool_choice = ToolChoice::Auto;
    std::string tool_name;  // ToolChoice::Named
    bool parallel_tool_calls = true;

    // Thinking: unset = the template's default; budget = most reasoning tokens (enforced).
    std::optional<bool> thinking;
    std::optional<int64_t> thinking_budget;

    int64_t max_tokens = -1;  // -1: up to the context
    // The knobs the body set (runtime::kSamplingKnobs: temperature, top_p, top_k, min_p, seed,
    // penalties, ignore_eos, logit_bias); logprobs, max_tokens and stop are this API's own fields.
    runtime::SamplingParams sampling;
    std::vector<std::string> stop;
    ojson response_format;  // engine form: {"type":"json_object"} / {"type":"json_schema","schema":...}; null: none
    std::string response_format_param = "response_format";  // the field it came from (errors name it)
    bool logprobs = false;
    int top_logprobs = 0;
    int n = 1;
    bool stream = false;
    bool include_usage = false;  // OpenAI stream_options.include_usage
    bool has_images = false;     // validated image parts were present
};

// Parses and validates a body. Throws ApiError (status 400, 413 for an oversized string) naming the
// field and the problem.
// `verify_thinking(text, signature)`: checks signatures of thinking blocks sent back (Anthropic).
ChatRequest parse_openai_chat(const ojson& body, const RequestLimits& limits);
using ThinkingVerifier = bool (*)(const void* context, const std::string& thinking, const std::string& signature);
ChatRequest parse_anthropic_messages(const ojson& body, const RequestLimits& limits, ThinkingVerifier verify,
                                     const void* verify_context, bool count_tokens_only = false);

// A legacy /v1/completions body: the prompt text (or token ids) plus the same sampling fields.
struct CompletionRequest {
    std::string model;
    std::string prompt_text;
    std::vector<int32_t> prompt_tokens;  // when the prompt was given as token ids
    bool prompt_is_tokens = false;
    bool echo = false;
    int64_t max_tokens = 16;
    runtime::SamplingParams sampling;  // as ChatRequest::sampling
    std::vector<std::string> stop;
    int logprobs = -1;  // -1: none; 0..5: the legacy `logprobs` count
    int n = 1;
    bool stream = false;
    bool include_usage = false;
};
CompletionRequest parse_openai_completion(const ojson& body, const RequestLimits& limits);

// Reads JSON with a nesting bound; throws ApiError 400 for invalid JSON, invalid UTF-8, or
// nesting deeper than max_depth.
ojson parse_json_body(const std::string& body, int max_depth = 64);

// Whether `data` (already base64-decoded) is a JPEG/PNG/GIF/WebP image stb can read; fills the
// size. WebP is checked by its RIFF header (stb does not read WebP).
bool image_info(const std::string& data, const std::string& media_type, int& width, int& height);
// Strict base64 decoding; nullopt when the text is not base64.
std::optional<std::string> base64_decode(const std::string& text);
std::string base64_encode(const std::string& bytes);

}  // namespace strata::serve
