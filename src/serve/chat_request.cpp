#include "serve/chat_request.h"

#include "serve/request_fields.h"

#include <stb/stb_image.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace strata::serve {

// The field readers shared with the Responses parser (request_fields.h).
namespace request_fields {

// The field readers are the engine's (runtime/json_fields.h): one wording for both. Their
// FieldError, and bad()'s, become a 400 naming the field where a body's parse returns
// (as_api_errors).
using runtime::fields::need_bool;
using runtime::fields::need_int;
using runtime::fields::need_number;
using runtime::fields::need_object;
using runtime::fields::type_name;

[[noreturn]] void bad(const std::string& param, const std::string& message) { runtime::fields::fail(param, message); }

const ojson* field(const ojson& obj, const char* key) { return runtime::fields::find(obj, key); }

std::string need_string(const ojson& v, const std::string& param, const RequestLimits& limits) {
    if (!v.is_string()) bad(param, param + ": expected a string, got " + type_name(v));
    const auto& s = v.get_ref<const std::string&>();
    if (static_cast<int64_t>(s.size()) > limits.max_text_bytes)
        throw ApiError(413,
                       param + ": string of " + std::to_string(s.size()) + " bytes is longer than the limit of " +
                           std::to_string(limits.max_text_bytes),
                       param);
    return s;
}

// Whether a parse event opens a container past `max_depth` levels. `depth` counts the containers
// already open, so a container opened at depth max_depth is one too many (checking values instead
// would let empty containers through).
bool opens_too_deep(int depth, ojson::parse_event_t event, int max_depth) {
    return (event == ojson::parse_event_t::object_start || event == ojson::parse_event_t::array_start) && depth >= max_depth;
}

void need_array(const ojson& v, const std::string& param, int64_t max_items) {
    if (!v.is_array()) bad(param, param + ": expected an array, got " + type_name(v));
    if (static_cast<int64_t>(v.size()) > max_items)
        bad(param, param + ": " + std::to_string(v.size()) + " items, more than the limit of " + std::to_string(max_items));
}

std::vector<std::string> read_stop(const ojson& v, const std::string& param, const RequestLimits& limits) {
    std::vector<std::string> out;
    if (v.is_string()) {
        out.push_back(need_string(v, param, limits));
    } else {
        need_array(v, param, limits.max_stop);
        for (size_t i = 0; i < v.size(); ++i) out.push_back(need_string(v[i], param + "[" + std::to_string(i) + "]", limits));
    }
    for (const auto& s : out) {
        if (s.empty()) bad(param, param + ": stop strings must not be empty");
        if (static_cast<int64_t>(s.size()) > limits.max_stop_bytes)
            bad(param, param + ": a stop string is longer than " + std::to_string(limits.max_stop_bytes) + " bytes");
    }
    return out;
}

// The sampling knobs both APIs share with the engine's submit (runtime::kSamplingKnobs), read
// and checked by the engine's own reader. Anthropic's API takes temperature up to 1.
void read_common_sampling(const ojson& body, runtime::SamplingParams& sampling, const RequestLimits& limits, bool anthropic) {
    runtime::SamplingReadOptions options;
    options.max_temperature = anthropic ? 1.0 : runtime::kMaxTemperature;
    options.max_logit_bias =
        static_cast<size_t>(std::clamp<int64_t>(limits.max_logit_bias, 0, runtime::SamplingParams::kMaxLogitBias));
    options.n_vocab = limits.n_vocab;
    runtime::read_sampling_knobs(body, sampling, options);
}

ToolDef read_tool_common(const ojson& name, const ojson* description, const ojson* schema, const std::string& param,
                         const RequestLimits& limits) {
    ToolDef t;
    t.name = need_string(name, param + ".name", limits);
    if (t.name.empty() || t.name.size() > 256) bad(param + ".name", param + ".name: must be 1 to 256 characters");
    if (description) t.description = need_string(*description, param + ".description", limits);
    if (schema) {
        need_object(*schema, param + ".parameters");
        t.parameters = *schema;
    } else {
        t.parameters = ojson{{"type", "object"}, {"properties", ojson::object()}};
    }
    return t;
}

// The template form of a tool: OpenAI's {"type":"function","function":{...}} (what Qwen templates read).
void check_unique_tools(const std::vector<ToolDef>& tools, const char* param) {
    for (size_t i = 0; i < tools.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (tools[i].name == tools[j].name)
                bad(param, std::string(param) + ": two tools are named \"" + tools[i].name + "\"");
}

// Arguments of a tool call sent back by a client: an object, or a string holding one.
ojson call_arguments(const ojson& v, const std::string& param) {
    if (v.is_object()) return v;
    if (v.is_string()) {
        const auto& s = v.get_ref<const std::string&>();
        if (s.empty()) return ojson::object();
        try {
            // The body's nesting bound holds inside the string too: copying or printing a value
            // recurses once per level, and a deep enough one overflows the stack.
            constexpr int max_depth = 64;
            ojson parsed = ojson::parse(s, [&](int depth, ojson::parse_event_t event, ojson&) {
                if (opens_too_deep(depth, event, max_depth))
                    bad(param, param + ": the JSON nests deeper than " + std::to_string(max_depth) + " levels");
                return true;
            });
            if (parsed.is_object()) return parsed;
        } catch (const ojson::exception&) {
        }
        return v;  // kept as text: the template writes it as it is
    }
    bad(param, param + ": expected an object or a JSON string, got " + type_name(v));
}

// ---------------------------------------------------------------------------------------------
// OpenAI

// Text of an OpenAI content value: a string or an array of parts; images are validated and noted.
std::string openai_content_text(const ojson& content, const std::string& param, const RequestLimits& limits, bool& has_images) {
    if (content.is_string()) return need_string(content, param, limits);
    need_array(content, param, 10000);
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
        const auto& part = content[i];
        const std::string p = param + "[" + std::to_string(i) + "]";
        need_object(part, p);
        auto* type = field(part, "type");
        if (!type) bad(p + ".type", p + ".type: missing");
        const std::string t = need_string(*type, p + ".type", limits);
        if (t == "text" || t == "input_text") {
            auto* tx = field(part, "text");
            if (!tx) bad(p + ".text", p + ".text: missing");
            text += need_string(*tx, p + ".text", limits);
        } else if (t == "image_url") {
            auto* iu = field(part, "image_url");
            if (!iu) bad(p + ".image_url", p + ".image_url: missing");
            const std::string url = iu->is_string() ? need_string(*iu, p + ".image_url", limits)
                                                    : (need_object(*iu, p + ".image_url"),
                                                       need_string(iu->value("url", ojson()), p + ".image_url.url", limits));
            if (!url.starts_with("data:"))
                bad(p + ".image_url.url", p + ".image_url.url: only data: URLs are accepted (this server does not fetch images)");
            const size_t comma = url.find(',');
            const std::string meta = url.substr(5, comma == std::string::npos ? 0 : comma - 5);
            if (comma == std::string::npos || !meta.ends_with(";base64"))
                bad(p + ".image_url.url", p + ".image_url.url: expected data:<media type>;base64,<data>");
            const auto bytes = base64_decode(url.substr(comma + 1));
            int w = 0, h = 0;
            if (!bytes || !image_info(*bytes, meta.substr(0, meta.size() - 7), w, h))
                bad(p + ".image_url.url", p + ".image_url.url: not a valid JPEG, PNG, GIF or WebP image");
            has_images = true;
        } else {
            bad(p + ".type", p + ".type: unsupported content part type \"" + t + "\"");
        }
    }
    return text;
}

}  // namespace request_fields

using namespace request_fields;

static ChatRequest read_openai_chat(const ojson& body, const RequestLimits& limits) {
    if (!body.is_object()) bad("", "the request body must be a JSON object");
    ChatRequest r;
    r.api = ApiKind::OpenAI;
    if (auto* v = field(body, "model")) r.model = need_string(*v, "model", limits);
    auto* msgs = field(body, "messages");
    if (!msgs) bad("messages", "messages: missing");
    need_array(*msgs, "messages", limits.max_messages);
    if (msgs->empty()) bad("messages", "messages: must not be empty");
    for (size_t i = 0; i < msgs->size(); ++i) {
        const auto& m = (*msgs)[i];
        const std::string p = "messages[" + std::to_string(i) + "]";
        need_object(m, p);
        auto* role_v = field(m, "role");
        if (!role_v) bad(p + ".role", p + ".role: missing");
        std::string role = need_string(*role_v, p + ".role", limits);
        if (role == "developer") role = "system";
        if (role != "system" && role != "user" && role != "assistant" && role != "tool")
            bad(p + ".role", p + ".role: unknown role \"" + role + "\" (system, developer, user, assistant, tool)");
        ojson out{{"role", role}};
        auto* content = field(m, "content");
        if (content) out["content"] = openai_content_text(*content, p + ".content", limits, r.has_images);
        else if (role != "assistant") bad(p + ".content", p + ".content: missing");
        else out["content"] = "";
        if (role == "assistant") {
            for (const char* key : {"reasoning_content", "reasoning"})
                if (auto* rc = field(m, key)) {
                    out["reasoning_content"] = need_string(*rc, p + "." + key, limits);
                    break;
                }
            if (auto* calls = field(m, "tool_calls")) {
                need_array(*calls, p + ".tool_calls", limits.max_tools);
                ojson list = ojson::array();
                for (size_t c = 0; c < calls->size(); ++c) {
                    const auto& call = (*calls)[c];
                    const std::string cp = p + ".tool_calls[" + std::to_string(c) + "]";
                    need_object(call, cp);
                    auto* fn = field(call, "function");
                    if (!fn) bad(cp + ".function", cp + ".function: missing");
                    need_object(*fn, cp + ".function");
                    auto* name = field(*fn, "name");
                    if (!name) bad(cp + ".function.name", cp + ".function.name: missing");
                    ojson entry{{"type", "function"},
                                {"function",
                                 {{"name", need_string(*name, cp + ".function.name", limits)},
                                  {"arguments", call_arguments(fn->value("arguments", ojson("")), cp + ".function.arguments")}}}};
                    if (auto* id = field(call, "id")) entry["id"] = need_string(*id, cp + ".id", limits);
                    list.push_back(std::move(entry));
                }
                out["tool_calls"] = std::move(list);
            }
        }
        if (role == "tool") {
            auto* id = field(m, "tool_call_id");
            if (id) out["tool_call_id"] = need_string(*id, p + ".tool_call_id", limits);
        }
        if (auto* name = field(m, "name")) out["name"] = need_string(*name, p + ".name", limits);
        r.messages.push_back(std::move(out));
    }

    if (auto* tools = field(body, "tools")) {
        need_array(*tools, "tools", limits.max_tools);
        for (size_t i = 0; i < tools->size(); ++i) {
            const auto& t = (*tools)[i];
            const std::string p = "tools[" + std::to_string(i) + "]";
            need_object(t, p);
            const std::string type = need_string(t.value("type", ojson("function")), p + ".type", limits);
            if (type != "function") bad(p + ".type", p + ".type: only \"function\" tools are supported");
            auto* fn = field(t, "function");
            if (!fn) bad(p + ".function", p + ".function: missing");
            need_object(*fn, p + ".function");
            auto* name = field(*fn, "name");
            if (!name) bad(p + ".function.name", p + ".function.name: missing");
            r.tools.push_back(
                read_tool_common(*name, field(*fn, "description"), field(*fn, "parameters"), p + ".function", limits));
        }
        check_unique_tools(r.tools, "tools");
    }
    if (auto* tc = field(body, "tool_choice")) {
        if (tc->is_string()) {
            const auto s = need_string(*tc, "tool_choice", limits);
            if (s == "auto") r.tool_choice = ToolChoice::Auto;
            else if (s == "none") r.tool_choice = ToolChoice::None;
            else if (s == "required") r.tool_choice = ToolChoice::Required;
            else bad("tool_choice", "tool_choice: \"" + s + "\" is not one of none, auto, required");
        } else {
            need_object(*tc, "tool_choice");
            auto* fn = field(*tc, "function");
            if (!fn || !fn->is_object() || !field(*fn, "name"))
                bad("tool_choice", "tool_choice: expected {\"type\":\"function\",\"function\":{\"name\":...}}");
            r.tool_choice = ToolChoice::Named;
            r.tool_name = need_string((*fn)["name"], "tool_choice.function.name", limits);
        }
        if (r.tool_choice != ToolChoice::Auto && r.tool_choice != ToolChoice::None && r.tools.empty())
            bad("tool_choice", "tool_choice: a tool is required but no tools were given");
        if (r.tool_choice == ToolChoice::Named) {
            bool found = false;
            for (const auto& t : r.tools) found = found || t.name == r.tool_name;
            if (!found) bad("tool_choice", "tool_choice: no tool named \"" + r.tool_name + "\"");
        }
    }
    if (auto* v = field(body, "parallel_tool_calls")) r.parallel_tool_calls = need_bool(*v, "parallel_tool_calls");

    read_common_sampling(body, r.sampling, limits, false);
    if (auto* v = field(body, "max_completion_tokens")) r.max_tokens = need_int(*v, "max_completion_tokens", 1, 1ll << 40);
    else if (auto* v2 = field(body, "max_tokens")) r.max_tokens = need_int(*v2, "max_tokens", 1, 1ll << 40);
    if (auto* v = field(body, "stop")) r.stop = read_stop(*v, "stop", limits);
    if (auto* v = field(body, "n")) r.n = static_cast<int>(need_int(*v, "n", 1, limits.max_n));
    if (auto* v = field(body, "logprobs")) r.logprobs = need_bool(*v, "logprobs");
    if (auto* v = field(body, "top_logprobs")) {
        r.top_logprobs = static_cast<int>(need_int(*v, "top_logprobs", 0, 20));
        if (r.top_logprobs > 0 && !r.logprobs) bad("top_logprobs", "top_logprobs: needs logprobs: true");
    }
    if (auto* v = field(body, "stream")) r.stream = need_bool(*v, "stream");
    if (auto* v = field(body, "stream_options")) {
        need_object(*v, "stream_options");
        if (auto* u = field(*v, "include_usage")) r.include_usage = need_bool(*u, "stream_options.include_usage");
    }
    if (auto* v = field(body, "response_format")) {
        need_object(*v, "response_format");
        const std::string type = need_string(v->value("type", ojson()), "response_format.type", limits);
        if (type == "json_object") {
            r.response_format = ojson{{"type", "json_object"}};
        } else if (type == "json_schema") {
            auto* js = field(*v, "json_schema");
            if (!js) bad("response_format.json_schema", "response_format.json_schema: missing");
            need_object(*js, "response_format.json_schema");
            auto* schema = field(*js, "schema");
            r.response_format = ojson{{"type", "json_schema"}, {"schema", schema ? *schema : ojson::object()}};
        } else if (type != "text") {
            bad("response_format.type", "response_format.type: \"" + type + "\" is not one of text, json_object, json_schema");
        }
    }
    // Thinking switches other servers accept: chat_template_kwargs.enable_thinking, reasoning_effort.
    if (auto* v = field(body, "chat_template_kwargs")) {
        need_object(*v, "chat_template_kwargs");
        if (auto* e = field(*v, "enable_thinking")) r.thinking = need_bool(*e, "chat_template_kwargs.enable_thinking");
    }
    if (auto* v = field(body, "reasoning_effort")) {
        const std::string e = need_string(*v, "reasoning_effort", limits);
        if (e == "none") r.thinking = false;
        else if (e == "minimal" || e == "low" || e == "medium" || e == "high") r.thinking = true;
        else bad("reasoning_effort", "reasoning_effort: \"" + e + "\" is not one of none, minimal, low, medium, high");
    }
    if (auto* v = field(body, "thinking_budget")) r.thinking_budget = need_int(*v, "thinking_budget", 0, 1ll << 40);
    return r;
}

// ---------------------------------------------------------------------------------------------
// Anthropic

namespace {

// Text of a tool_result's content: a string or blocks (text; images noted and dropped).
std::string tool_result_text(const ojson& content, const std::string& param, const RequestLimits& limits, bool& has_images) {
    if (content.is_string()) return need_string(content, param, limits);
    need_array(content, param, 10000);
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
        const auto& b = content[i];
        const std::string p = param + "[" + std::to_string(i) + "]";
        need_object(b, p);
        const std::string type = need_string(b.value("type", ojson()), p + ".type", limits);
        if (type == "text") {
            if (!text.empty()) text += "\n";
            text += need_string(b.value("text", ojson()), p + ".text", limits);
        } else if (type == "image") {
            has_images = true;
        } else if (type != "search_result" && type != "document") {
            bad(p + ".type", p + ".type: unsupported block type \"" + type + "\" in tool_result content");
        }
    }
    return text;
}

void check_anthropic_image(const ojson& block, const std::string& p, const RequestLimits& limits) {
    auto* src = field(block, "source");
    if (!src) bad(p + ".source", p + ".source: missing");
    need_object(*src, p + ".source");
    const std::string type = need_string(src->value("type", ojson()), p + ".source.type", limits);
    if (type == "url") bad(p + ".source", p + ".source: image URLs are not fetched by this server; send the image as base64");
    if (type != "base64") bad(p + ".source.type", p + ".source.type: \"" + type + "\" is not supported (base64)");
    const std::string media = need_string(src->value("media_type", ojson()), p + ".source.media_type", limits);
    if (media != "image/jpeg" && media != "image/png" && media != "image/gif" && media != "image/webp")
        bad(p + ".source.media_type",
            p + ".source.media_type: \"" + media + "\" is not one of image/jpeg, image/png, image/gif, image/webp");
    const auto bytes = base64_decode(need_string(src->value("data", ojson()), p + ".source.data", limits));
    int w = 0, h = 0;
    if (!bytes) bad(p + ".source.data", p + ".source.data: not valid base64");
    if (!image_info(*bytes, media, w, h)) bad(p + ".source.data", p + ".source.data: not a valid " + media + " image");
}

}  // namespace

static ChatRequest read_anthropic_messages(const ojson& body, const RequestLimits& limits, ThinkingVerifier verify,
                                           const void* verify_context, bool count_tokens_only) {
    if (!body.is_object()) bad("", "the request body must be a JSON object");
    ChatRequest r;
    r.api = ApiKind::Anthropic;
    auto* model = field(body, "model");
    if (!model) bad("model", "model: Field required");
    r.model = need_string(*model, "model", limits);
    if (!count_tokens_only) {
        auto* mt = field(body, "max_tokens");
        if (!mt) bad("max_tokens", "max_tokens: Field required");
        r.max_tokens = need_int(*mt, "max_tokens", 0, 1ll << 40);
    }

    // system: a string or text blocks. The attribution block some clients put first
    // ("x-anthropic-billing-header: ...", different on every request) is dropped: it says nothing
    // to the model and would defeat prefix caching.
    std::string system;
    if (auto* s = field(body, "system")) {
        if (s->is_string()) {
            system = need_string(*s, "system", limits);
        } else {
            need_array(*s, "system", 10000);
            for (size_t i = 0; i < s->size(); ++i) {
                const auto& b = (*s)[i];
                const std::string p = "system[" + std::to_string(i) + "]";
                need_object(b, p);
                const std::string type = need_string(b.value("type", ojson()), p + ".type", limits);
                if (type != "text") bad(p + ".type", p + ".type: system blocks must be text");
                const std::string text = need_string(b.value("text", ojson()), p + ".text", limits);
                if (text.starts_with("x-anthropic-billing-header:")) continue;
                if (!system.empty()) system += "\n\n";
                system += text;
            }
        }
    }
    if (!system.empty()) r.messages.push_back(ojson{{"role", "system"}, {"content", system}});

    auto* msgs = field(body, "messages");
    if (!msgs) bad("messages", "messages: Field required");
    need_array(*msgs, "messages", limits.max_messages);
    for (size_t i = 0; i < msgs->size(); ++i) {
        const auto& m = (*msgs)[i];
        const std::string p = "messages." + std::to_string(i);
        need_object(m, p);
        const std::string role = need_string(m.value("role", ojson()), p + ".role", limits);
        if (role != "user" && role != "assistant" && role != "system")
            bad(p + ".role", p + ".role: Input should be 'user', 'assistant' or 'system'");
        auto* content = field(m, "content");
        if (!content) bad(p + ".content", p + ".content: Field required");
        if (content->is_string()) {
            r.messages.push_back(ojson{{"role", role}, {"content", need_string(*content, p + ".content", limits)}});
            continue;
        }
        need_array(*content, p + ".content", 10000);
        // Blocks in order: text accumulates into the current message; tool_result blocks become
        // "tool" messages; tool_use blocks become the assistant message's tool_calls.
        ojson current{{"role", role}, {"content", ""}};
        bool current_used = false;
        auto flush = [&] {
            if (current_used) r.messages.push_back(current);
            current = ojson{{"role", role}, {"content", ""}};
            current_used = false;
        };
        for (size_t b = 0; b < content->size(); ++b) {
            const auto& block = (*content)[b];
            const std::string bp = p + ".content." + std::to_string(b);
            need_object(block, bp);
            const std::string type = need_string(block.value("type", ojson()), bp + ".type", limits);
            if (type == "text") {
                std::string& c = current["content"].get_ref<std::string&>();
                c += need_string(block.value("text", ojson()), bp + ".text", limits);
                current_used = true;
            } else if (type == "image") {
                if (role != "user") bad(bp + ".type", bp + ": images are only accepted in user messages");
                check_anthropic_image(block, bp, limits);
                r.has_images = true;
                current_used = true;
            } else if (type == "tool_use") {
                if (role != "assistant") bad(bp + ".type", bp + ": tool_use blocks belong in assistant messages");
                auto* name = field(block, "name");
                auto* id = field(block, "id");
                if (!name || !id) bad(bp, bp + ": tool_use needs id and name");
                auto* input = field(block, "input");
                ojson call{{"id", need_string(*id, bp + ".id", limits)},
                           {"type", "function"},
                           {"function",
                            {{"name", need_string(*name, bp + ".name", limits)},
                             {"arguments", input ? call_arguments(*input, bp + ".input") : ojson::object()}}}};
                if (!current.contains("tool_calls")) current["tool_calls"] = ojson::array();
                current["tool_calls"].push_back(std::move(call));
                current_used = true;
            } else if (type == "tool_result") {
                if (role != "user") bad(bp + ".type", bp + ": tool_result blocks belong in user messages");
                flush();
                auto* id = field(block, "tool_use_id");
                if (!id) bad(bp + ".tool_use_id", bp + ".tool_use_id: Field required");
                std::string text;
                if (auto* c = field(block, "content")) text = tool_result_text(*c, bp + ".content", limits, r.has_images);
                if (auto* e = field(block, "is_error"); e && need_bool(*e, bp + ".is_error")) text = "Error: " + text;
                r.messages.push_back(
                    ojson{{"role", "tool"}, {"tool_call_id", need_string(*id, bp + ".tool_use_id", limits)}, {"content", text}});
            } else if (type == "thinking") {
                if (role != "assistant") bad(bp + ".type", bp + ": thinking blocks belong in assistant messages");
                const std::string thinking = need_string(block.value("thinking", ojson()), bp + ".thinking", limits);
                const std::string signature = need_string(block.value("signature", ojson("")), bp + ".signature", limits);
                if (verify && !verify(verify_context, thinking, signature))
                    bad(bp + ".signature", bp + ": Invalid `signature` in `thinking` block");
                std::string prev = current.value("reasoning_content", std::string());
                current["reasoning_content"] = prev.empty() ? thinking : prev + "\n" + thinking;
                current_used = true;
            } else if (type == "redacted_thinking") {
                if (role != "assistant") bad(bp + ".type", bp + ": redacted_thinking blocks belong in assistant messages");
                // Opaque to us (we never produce it): accepted and not shown to the model.
            } else if (type == "document" || type == "search_result" || type == "server_tool_use" ||
                       type == "web_search_tool_result" || type == "container_upload") {
                bad(bp + ".type", bp + ".type: \"" + type + "\" blocks are not supported by this server");
            } else {
                bad(bp + ".type", bp + ".type: unknown content block type \"" + type + "\"");
            }
        }
        if (current_used) r.messages.push_back(current);
        else if (content->empty()) r.messages.push_back(current);  // an empty message stays a message
    }
    if (r.messages.empty() || (r.messages.size() == 1 && r.messages[0]["role"] == "system"))
        bad("messages", "messages: at least one message is required");

    if (auto* tools = field(body, "tools")) {
        need_array(*tools, "tools", limits.max_tools);
        for (size_t i = 0; i < tools->size(); ++i) {
            const auto& t = (*tools)[i];
            const std::string p = "tools." + std::to_string(i);
            need_object(t, p);
            if (auto* type = field(t, "type"); type && type->is_string() && *type != "custom")
                bad(p + ".type", p + ".type: server tool \"" + type->get<std::string>() + "\" is not supported by this server");
            auto* name = field(t, "name");
            if (!name) bad(p + ".name", p + ".name: Field required");
            auto* schema = field(t, "input_schema");
            if (!schema) bad(p + ".input_schema", p + ".input_schema: Field required");
            r.tools.push_back(read_tool_common(*name, field(t, "description"), schema, p, limits));
        }
        check_unique_tools(r.tools, "tools");
    }
    if (auto* tc = field(body, "tool_choice")) {
        need_object(*tc, "tool_choice");
        const std::string type = need_string(tc->value("type", ojson()), "tool_choice.type", limits);
        if (type == "auto") r.tool_choice = ToolChoice::Auto;
        else if (type == "none") r.tool_choice = ToolChoice::None;
        else if (type == "any") r.tool_choice = ToolChoice::Required;
        else if (type == "tool") {
            r.tool_choice = ToolChoice::Named;
            r.tool_name = need_string(tc->value("name", ojson()), "tool_choice.name", limits);
        } else {
            bad("tool_choice.type", "tool_choice.type: \"" + type + "\" is not one of auto, any, tool, none");
        }
        if (auto* d = field(*tc, "disable_parallel_tool_use"))
            r.parallel_tool_calls = !need_bool(*d, "tool_choice.disable_parallel_tool_use");
        if ((r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) && r.tools.empty())
            bad("tool_choice", "tool_choice: forces a tool but no tools were given");
        if (r.tool_choice == ToolChoice::Named) {
            bool found = false;
            for (const auto& t : r.tools) found = found || t.name == r.tool_name;
            if (!found) bad("tool_choice.name", "tool_choice.name: no tool named \"" + r.tool_name + "\"");
        }
    }

    if (auto* th = field(body, "thinking")) {
        need_object(*th, "thinking");
        const std::string type = need_string(th->value("type", ojson()), "thinking.type", limits);
        if (type == "enabled") {
            auto* b = field(*th, "budget_tokens");
            if (!b) bad("thinking.budget_tokens", "thinking.budget_tokens: Field required");
            const int64_t budget = need_int(*b, "thinking.budget_tokens", 1024, 1ll << 40);
            if (!count_tokens_only && budget >= r.max_tokens)
                bad("thinking.budget_tokens", "`max_tokens` must be greater than `thinking.budget_tokens`");
            r.thinking = true;
            r.thinking_budget = budget;
        } else if (type == "adaptive") {
            r.thinking = true;
        } else if (type == "disabled") {
            r.thinking = false;
        } else {
            bad("thinking.type", "thinking.type: \"" + type + "\" is not one of enabled, adaptive, disabled");
        }
        if (r.thinking.value_or(false) && (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named))
            bad("tool_choice", "Thinking may not be enabled when tool_choice forces tool use.");
    } else {
        r.thinking = false;  // Anthropic's default: no thinking unless asked for
    }

    read_common_sampling(body, r.sampling, limits, true);
    if (auto* v = field(body, "stop_sequences")) r.stop = read_stop(*v, "stop_sequences", limits);
    if (auto* v = field(body, "stream")) r.stream = need_bool(*v, "stream");
    if (auto* v = field(body, "metadata")) need_object(*v, "metadata");
    // Structured output: output_config.format, or the beta's output_format (the SDKs' parse()
    // and Claude Code's session titles send one of them), constrained as OpenAI's json_schema.
    const ojson* format = nullptr;
    std::string format_param;
    if (auto* oc = field(body, "output_config")) {
        need_object(*oc, "output_config");
        if (auto* f = field(*oc, "format"); f && !f->is_null()) {
            format = f;
            format_param = "output_config.format";
        }
    }
    if (auto* f = field(body, "output_format"); f && !f->is_null()) {
        if (format && *format != *f) bad("output_format", "output_format: differs from output_config.format (send one of them)");
        format = f;
        format_param = "output_format";
    }
    if (format) {
        need_object(*format, format_param);
        const std::string type = need_string(format->value("type", ojson()), format_param + ".type", limits);
        if (type != "json_schema") bad(format_param + ".type", format_param + ".type: \"" + type + "\" is not json_schema");
        auto* schema = field(*format, "schema");
        if (!schema) bad(format_param + ".schema", format_param + ".schema: Field required");
        need_object(*schema, format_param + ".schema");
        r.response_format = ojson{{"type", "json_schema"}, {"schema", *schema}};
        r.response_format_param = format_param;
    }
    return r;
}

// ---------------------------------------------------------------------------------------------
// Legacy completions

static CompletionRequest read_openai_completion(const ojson& body, const RequestLimits& limits) {
    if (!body.is_object()) bad("", "the request body must be a JSON object");
    CompletionRequest r;
    if (auto* v = field(body, "model")) r.model = need_string(*v, "model", limits);
    auto* prompt = field(body, "prompt");
    if (!prompt) bad("prompt", "prompt: missing");
    if (prompt->is_string()) {
        r.prompt_text = need_string(*prompt, "prompt", limits);
    } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
        need_array(*prompt, "prompt", 1 << 22);
        for (size_t i = 0; i < prompt->size(); ++i)
            r.prompt_tokens.push_back(static_cast<int32_t>(
                need_int((*prompt)[i], "prompt[" + std::to_string(i) + "]", 0, std::numeric_limits<int32_t>::max())));
        r.prompt_is_tokens = true;
    } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
        r.prompt_text = need_string((*prompt)[0], "prompt[0]", limits);
    } else {
        bad("prompt", "prompt: expected a string, one string in an array, or an array of token ids");
    }
    read_common_sampling(body, r.sampling, limits, false);
    if (auto* v = field(body, "max_tokens")) r.max_tokens = need_int(*v, "max_tokens", 0, 1ll << 40);
    if (auto* v = field(body, "stop")) r.stop = read_stop(*v, "stop", limits);
    if (auto* v = field(body, "n")) r.n = static_cast<int>(need_int(*v, "n", 1, limits.max_n));
    if (auto* v = field(body, "logprobs")) r.logprobs = static_cast<int>(need_int(*v, "logprobs", 0, 5));
    if (auto* v = field(body, "echo")) r.echo = need_bool(*v, "echo");
    if (auto* v = field(body, "stream")) r.stream = need_bool(*v, "stream");
    if (auto* v = field(body, "stream_options")) {
        need_object(*v, "stream_options");
        if (auto* u = field(*v, "include_usage")) r.include_usage = need_bool(*u, "stream_options.include_usage");
    }
    if (field(body, "suffix")) bad("suffix", "suffix: not supported by this server");
    if (auto* v = field(body, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
        bad("best_of", "best_of: only 1 is supported");
    return r;
}

ChatRequest parse_openai_chat(const ojson& body, const RequestLimits& limits) {
    return as_api_errors([&] { return read_openai_chat(body, limits); });
}

ChatRequest parse_anthropic_messages(const ojson& body, const RequestLimits& limits, ThinkingVerifier verify,
                                     const void* verify_context, bool count_tokens_only) {
    return as_api_errors([&] { return read_anthropic_messages(body, limits, verify, verify_context, count_tokens_only); });
}

CompletionRequest parse_openai_completion(const ojson& body, const RequestLimits& limits) {
    return as_api_errors([&] { return read_openai_completion(body, limits); });
}

// ---------------------------------------------------------------------------------------------
// Body parsing, base64, images

ojson parse_json_body(const std::string& body, int max_depth) {
    if (body.empty()) throw ApiError(400, "the request body is empty; expected a JSON object");
    bool too_deep = false;
    ojson out;
    try {
        out = ojson::parse(body, [&](int depth, ojson::parse_event_t event, ojson&) {
            if (opens_too_deep(depth, event, max_depth)) {
                too_deep = true;
                throw ApiError(400, "the request body nests deeper than " + std::to_string(max_depth) + " levels");
            }
            return true;
        });
    } catch (const ojson::exception& e) {
        // parse_error, and out_of_range for numbers beyond double ("1e400")
        std::string what = e.what();
        if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
        throw ApiError(400, "the request body is not valid JSON: " + what);
    }
    (void)too_deep;
    return out;
}

std::optional<std::string> base64_decode(const std::string& text) {
    static const auto table = [] {
        std::array<int8_t, 256> t{};
        t.fill(-1);
        const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
        return t;
    }();
    std::string out;
    out.reserve(text.size() / 4 * 3);
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    for (const char c : text) {
        if (c == '=') {
            ++pad;
            continue;
        }
        if (c == '\n' || c == '\r') continue;
        if (pad) return std::nullopt;  // data after padding
        const int8_t v = table[static_cast<uint8_t>(c)];
        if (v < 0) return std::nullopt;
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xFF);
        }
    }
    if (pad > 2 || bits >= 6) return std::nullopt;
    return out;
}

std::string base64_encode(const std::string& bytes) {
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < bytes.size(); i += 3) {
        const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
        for (int k = 3; k >= 0; --k) out += alphabet[(v >> (6 * k)) & 63];
    }
    if (i < bytes.size()) {
        uint32_t v = uint8_t(bytes[i]) << 16;
        if (i + 1 < bytes.size()) v |= uint8_t(bytes[i + 1]) << 8;
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += i + 1 < bytes.size() ? alphabet[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

bool image_info(const std::string& data, const std::string& media_type, int& width, int& height) {
    if (data.size() > (64u << 20)) return false;
    if (media_type == "image/webp") {
        if (data.size() < 16 || data.compare(0, 4, "RIFF") != 0 || data.compare(8, 4, "WEBP") != 0) return false;
        width = height = 0;  // not decoded: the size is not needed until a model takes images
        return true;
    }
    int comp = 0;
    if (!stbi_info_from_memory(reinterpret_cast<const stbi_uc*>(data.data()), static_cast<int>(data.size()), &width, &height,
                               &comp))
        return false;
    // Decoding is bounded: at most 8192 x 8192 and 32 M pixels.
    if (width <= 0 || height <= 0 || width > 8192 || height > 8192 || int64_t{width} * height > (32ll << 20)) return false;
    // The header alone can lie: decode it to be sure (bounded by the size check above).
    int w = 0, h = 0;
    stbi_uc* pixels =
        stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(data.data()), static_cast<int>(data.size()), &w, &h, &comp, 0);
    if (!pixels) return false;
    stbi_image_free(pixels);
    return true;
}

}  // namespace strata::serve
