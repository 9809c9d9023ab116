#include "serve/responses_request.h"

#include "serve/request_fields.h"

#include <algorithm>
#include <utility>

namespace strata::serve {

namespace {

using namespace request_fields;

constexpr int64_t kMaxParts = 10000;       // content parts of one item
constexpr int64_t kMaxMetadata = 16;       // metadata entries (OpenAI's limit)
constexpr size_t kMaxMetadataKey = 64;     // characters of a metadata key
constexpr size_t kMaxMetadataValue = 512;  // characters of a metadata value
constexpr int64_t kMaxInclude = 32;

// The tool types a local server cannot run: accepted, left out of the prompt.
bool hosted_tool_type(const std::string& type) { return type != "function"; }

// Records of hosted tools in a conversation: kept, not shown to the model.
bool hosted_item_type(const std::string& type) {
    static const char* const kinds[] = {"web_search_call",
                                        "file_search_call",
                                        "computer_call",
                                        "computer_call_output",
                                        "image_generation_call",
                                        "code_interpreter_call",
                                        "mcp_list_tools",
                                        "mcp_approval_request",
                                        "mcp_approval_response",
                                        "mcp_call",
                                        "shell_call",
                                        "shell_call_output",
                                        "apply_patch_call",
                                        "apply_patch_call_output",
                                        "compaction"};
    for (const char* k : kinds)
        if (type == k) return true;
    return false;
}

std::string item_type_of(const ojson& item, const std::string& p, const RequestLimits& limits) {
    if (auto* t = field(item, "type")) return need_string(*t, p + ".type", limits);
    // An "easy" input message has no type: {"role", "content"}.
    if (field(item, "role")) return "message";
    bad(p + ".type", p + ".type: missing");
}

// A message's content, normalized to parts. Strings become one input_text (output_text for the
// assistant) part; images are noted (the model decides whether it takes them).
ojson message_parts(const ojson& content, const std::string& role, const std::string& p, const RequestLimits& limits) {
    if (content.is_string())
        return ojson::array(
            {ojson{{"type", role == "assistant" ? "output_text" : "input_text"}, {"text", need_string(content, p, limits)}}});
    need_array(content, p, kMaxParts);
    ojson parts = ojson::array();
    for (size_t i = 0; i < content.size(); ++i) {
        const auto& part = content[i];
        const std::string pp = p + "[" + std::to_string(i) + "]";
        need_object(part, pp);
        auto* type_v = field(part, "type");
        if (!type_v) bad(pp + ".type", pp + ".type: missing");
        const std::string type = need_string(*type_v, pp + ".type", limits);
        if (type == "input_text" || type == "output_text" || type == "text") {
            auto* text = field(part, "text");
            if (!text) bad(pp + ".text", pp + ".text: missing");
            parts.push_back(ojson{{"type", type == "text" ? (role == "assistant" ? "output_text" : "input_text") : type},
                                  {"text", need_string(*text, pp + ".text", limits)}});
        } else if (type == "refusal") {
            auto* text = field(part, "refusal");
            if (!text) bad(pp + ".refusal", pp + ".refusal: missing");
            parts.push_back(ojson{{"type", "refusal"}, {"refusal", need_string(*text, pp + ".refusal", limits)}});
        } else if (type == "input_image") {
            ojson image{{"type", "input_image"}};
            if (auto* url = field(part, "image_url"); url && !url->is_null())
                image["image_url"] = need_string(*url, pp + ".image_url", limits);
            if (auto* id = field(part, "file_id"); id && !id->is_null())
                image["file_id"] = need_string(*id, pp + ".file_id", limits);
            if (!image.contains("image_url") && !image.contains("file_id"))
                bad(pp + ".image_url", pp + ": an input_image needs image_url or file_id");
            parts.push_back(std::move(image));
        } else if (type == "input_file" || type == "input_audio") {
            bad(pp + ".type", pp + ".type: \"" + type + "\" parts are not supported by this server");
        } else {
            bad(pp + ".type", pp + ".type: unknown content part type \"" + type + "\"");
        }
    }
    return parts;
}

// A tool output: a string, or parts (input_text, input_image) normalized like a message's.
ojson tool_output(const ojson& output, const std::string& p, const RequestLimits& limits) {
    if (output.is_string()) return need_string(output, p, limits);
    return message_parts(output, "tool", p, limits);
}

std::string need_call_id(const ojson& item, const std::string& p, const RequestLimits& limits) {
    auto* id = field(item, "call_id");
    if (!id) bad(p + ".call_id", p + ".call_id: missing");
    const std::string s = need_string(*id, p + ".call_id", limits);
    if (s.empty() || s.size() > 256) bad(p + ".call_id", p + ".call_id: must be 1 to 256 characters");
    return s;
}

void copy_optional_string(const ojson& from, ojson& to, const char* key, const std::string& p, const RequestLimits& limits) {
    if (auto* v = field(from, key); v && !v->is_null()) to[key] = need_string(*v, p + "." + key, limits);
}

ojson read_summary_list(const ojson& v, const char* part_type, const std::string& p, const RequestLimits& limits) {
    need_array(v, p, kMaxParts);
    ojson out = ojson::array();
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string pp = p + "[" + std::to_string(i) + "]";
        need_object(v[i], pp);
        auto* text = field(v[i], "text");
        if (!text) bad(pp + ".text", pp + ".text: missing");
        out.push_back(ojson{{"type", part_type}, {"text", need_string(*text, pp + ".text", limits)}});
    }
    return out;
}

ojson read_item(const ojson& item, const std::string& p, const RequestLimits& limits) {
    need_object(item, p);
    const std::string type = item_type_of(item, p, limits);
    ojson out{{"type", type}};
    copy_optional_string(item, out, "id", p, limits);
    if (type == "message") {
        auto* role_v = field(item, "role");
        if (!role_v) bad(p + ".role", p + ".role: missing");
        const std::string role = need_string(*role_v, p + ".role", limits);
        if (role != "user" && role != "assistant" && role != "system" && role != "developer")
            bad(p + ".role", p + ".role: unknown role \"" + role + "\" (user, assistant, system, developer)");
        auto* content = field(item, "content");
        if (!content) bad(p + ".content", p + ".content: missing");
        out["role"] = role;
        out["content"] = message_parts(*content, role, p + ".content", limits);
        copy_optional_string(item, out, "status", p, limits);
    } else if (type == "reasoning") {
        out["summary"] = ojson::array();
        if (auto* s = field(item, "summary"); s && !s->is_null())
            out["summary"] = read_summary_list(*s, "summary_text", p + ".summary", limits);
        if (auto* c = field(item, "content"); c && !c->is_null())
            out["content"] = read_summary_list(*c, "reasoning_text", p + ".content", limits);
        copy_optional_string(item, out, "encrypted_content", p, limits);
    } else if (type == "function_call") {
        out["call_id"] = need_call_id(item, p, limits);
        auto* name = field(item, "name");
        if (!name) bad(p + ".name", p + ".name: missing");
        out["name"] = need_string(*name, p + ".name", limits);
        const ojson* args = field(item, "arguments");
        if (!args || args->is_null()) out["arguments"] = "{}";
        else if (args->is_object()) out["arguments"] = args->dump();
        else out["arguments"] = need_string(*args, p + ".arguments", limits);
        (void)call_arguments(out["arguments"], p + ".arguments");  // the nesting bound holds inside the string
        copy_optional_string(item, out, "status", p, limits);
    } else if (type == "custom_tool_call") {
        out["call_id"] = need_call_id(item, p, limits);
        auto* name = field(item, "name");
        if (!name) bad(p + ".name", p + ".name: missing");
        out["name"] = need_string(*name, p + ".name", limits);
        auto* input = field(item, "input");
        out["input"] = input ? need_string(*input, p + ".input", limits) : std::string();
    } else if (type == "local_shell_call") {
        out["call_id"] = need_call_id(item, p, limits);
        auto* action = field(item, "action");
        if (!action) bad(p + ".action", p + ".action: missing");
        need_object(*action, p + ".action");
        out["action"] = *action;
    } else if (type == "function_call_output" || type == "custom_tool_call_output" || type == "local_shell_call_output") {
        // local_shell_call_output names its call by `id` in the spec; `call_id` is taken too.
        if (type == "local_shell_call_output" && !field(item, "call_id")) {
            auto* id = field(item, "id");
            if (!id) bad(p + ".id", p + ".id: missing");
            out["call_id"] = need_string(*id, p + ".id", limits);
        } else {
            out["call_id"] = need_call_id(item, p, limits);
        }
        auto* output = field(item, "output");
        if (!output) bad(p + ".output", p + ".output: missing");
        out["output"] = tool_output(*output, p + ".output", limits);
    } else if (type == "item_reference") {
        bad(p + ".type", p + ".type: item_reference is not supported by this server (send the items, or previous_response_id)");
    } else if (hosted_item_type(type)) {
        return item;  // kept as sent (bounded by the body), not shown to the model
    } else {
        bad(p + ".type", p + ".type: unknown input item type \"" + type + "\"");
    }
    return out;
}

void read_tools(const ojson& tools, ResponsesRequest& r, const RequestLimits& limits) {
    need_array(tools, "tools", limits.max_tools);
    for (size_t i = 0; i < tools.size(); ++i) {
        const auto& t = tools[i];
        const std::string p = "tools[" + std::to_string(i) + "]";
        need_object(t, p);
        auto* type_v = field(t, "type");
        if (!type_v) bad(p + ".type", p + ".type: missing");
        const std::string type = need_string(*type_v, p + ".type", limits);
        if (hosted_tool_type(type)) continue;
        auto* name = field(t, "name");
        if (!name) bad(p + ".name", p + ".name: missing");
        const ojson* params = field(t, "parameters");
        if (params && params->is_null()) params = nullptr;
        r.chat.tools.push_back(read_tool_common(*name, field(t, "description"), params, p, limits));
        if (auto* s = field(t, "strict"); s && !s->is_null()) need_bool(*s, p + ".strict");
    }
    check_unique_tools(r.chat.tools, "tools");
}

void read_tool_choice(const ojson& tc, ResponsesRequest& r, const RequestLimits& limits) {
    ChatRequest& c = r.chat;
    if (tc.is_string()) {
        const std::string s = need_string(tc, "tool_choice", limits);
        if (s == "auto") c.tool_choice = ToolChoice::Auto;
        else if (s == "none") c.tool_choice = ToolChoice::None;
        else if (s == "required") c.tool_choice = ToolChoice::Required;
        else bad("tool_choice", "tool_choice: \"" + s + "\" is not one of none, auto, required");
    } else {
        need_object(tc, "tool_choice");
        const std::string type = need_string(tc.value("type", ojson()), "tool_choice.type", limits);
        if (type == "function") {
            c.tool_choice = ToolChoice::Named;
            c.tool_name = need_string(tc.value("name", ojson()), "tool_choice.name", limits);
        } else if (type == "allowed_tools") {
            // Only the listed function tools are offered; the mode says whether one must be called.
            const std::string mode = need_string(tc.value("mode", ojson("auto")), "tool_choice.mode", limits);
            if (mode == "auto") c.tool_choice = ToolChoice::Auto;
            else if (mode == "required") c.tool_choice = ToolChoice::Required;
            else bad("tool_choice.mode", "tool_choice.mode: \"" + mode + "\" is not one of auto, required");
            auto* list = field(tc, "tools");
            if (!list) bad("tool_choice.tools", "tool_choice.tools: missing");
            need_array(*list, "tool_choice.tools", limits.max_tools);
            std::vector<std::string> allowed;
            for (size_t i = 0; i < list->size(); ++i) {
                const std::string p = "tool_choice.tools[" + std::to_string(i) + "]";
                need_object((*list)[i], p);
                if ((*list)[i].value("type", ojson("function")) != "function") continue;
                allowed.push_back(need_string((*list)[i].value("name", ojson()), p + ".name", limits));
            }
            std::vector<ToolDef> kept;
            for (auto& t : c.tools)
                if (std::find(allowed.begin(), allowed.end(), t.name) != allowed.end()) kept.push_back(std::move(t));
            c.tools = std::move(kept);
        } else if (type == "auto" || type == "none" || type == "required") {
            read_tool_choice(ojson(type), r, limits);
        } else {
            bad("tool_choice.type", "tool_choice.type: forcing the \"" + type +
                                        "\" tool is not supported by this server (it runs function tools only)");
        }
    }
    if ((c.tool_choice == ToolChoice::Required || c.tool_choice == ToolChoice::Named) && c.tools.empty())
        bad("tool_choice", "tool_choice: a tool is required but no function tools were given");
    if (c.tool_choice == ToolChoice::Named) {
        bool found = false;
        for (const auto& t : c.tools) found = found || t.name == c.tool_name;
        if (!found) bad("tool_choice.name", "tool_choice.name: no function tool named \"" + c.tool_name + "\"");
    }
}

void read_text_config(const ojson& text, ResponsesRequest& r, const RequestLimits& limits) {
    need_object(text, "text");
    if (auto* f = field(text, "format"); f && !f->is_null()) {
        need_object(*f, "text.format");
        const std::string type = need_string(f->value("type", ojson()), "text.format.type", limits);
        if (type == "json_object") {
            r.chat.response_format = ojson{{"type", "json_object"}};
        } else if (type == "json_schema") {
            auto* schema = field(*f, "schema");
            if (!schema) bad("text.format.schema", "text.format.schema: missing");
            need_object(*schema, "text.format.schema");
            if (auto* name = field(*f, "name")) need_string(*name, "text.format.name", limits);
            if (auto* s = field(*f, "strict"); s && !s->is_null()) need_bool(*s, "text.format.strict");
            r.chat.response_format = ojson{{"type", "json_schema"}, {"schema", *schema}};
        } else if (type != "text") {
            bad("text.format.type", "text.format.type: \"" + type + "\" is not one of text, json_object, json_schema");
        }
    }
    if (auto* v = field(text, "verbosity"); v && !v->is_null()) {
        const std::string s = need_string(*v, "text.verbosity", limits);
        if (s != "low" && s != "medium" && s != "high")
            bad("text.verbosity", "text.verbosity: \"" + s + "\" is not one of low, medium, high");
    }
}

void read_reasoning(const ojson& v, ResponsesRequest& r, const RequestLimits& limits) {
    need_object(v, "reasoning");
    if (auto* e = field(v, "effort"); e && !e->is_null()) {
        const std::string s = need_string(*e, "reasoning.effort", limits);
        if (s == "none") r.chat.thinking = false;
        else if (s == "minimal" || s == "low" || s == "medium" || s == "high" || s == "xhigh") r.chat.thinking = true;
        else bad("reasoning.effort", "reasoning.effort: \"" + s + "\" is not one of none, minimal, low, medium, high, xhigh");
    }
    for (const char* key : {"summary", "generate_summary"})
        if (auto* s = field(v, key); s && !s->is_null()) {
            const std::string p = std::string("reasoning.") + key;
            const std::string mode = need_string(*s, p, limits);
            if (mode != "auto" && mode != "concise" && mode != "detailed")
                bad(p, p + ": \"" + mode + "\" is not one of auto, concise, detailed");
            r.reasoning_summary = true;
        }
}

void read_metadata(const ojson& v) {
    if (v.is_null()) return;
    need_object(v, "metadata");
    if (static_cast<int64_t>(v.size()) > kMaxMetadata)
        bad("metadata",
            "metadata: " + std::to_string(v.size()) + " entries, more than the limit of " + std::to_string(kMaxMetadata));
    for (const auto& [key, value] : v.items()) {
        if (key.size() > kMaxMetadataKey) bad("metadata", "metadata: a key is longer than 64 characters");
        if (!value.is_string()) bad("metadata." + key, "metadata." + key + ": expected a string, got " + type_name(value));
        if (value.get_ref<const std::string&>().size() > kMaxMetadataValue)
            bad("metadata." + key, "metadata." + key + ": longer than 512 characters");
    }
}

ResponsesRequest read_responses(const ojson& body, const RequestLimits& limits) {
    if (!body.is_object()) bad("", "the request body must be a JSON object");
    ResponsesRequest r;
    ChatRequest& c = r.chat;
    c.api = ApiKind::Responses;
    if (auto* v = field(body, "model")) c.model = need_string(*v, "model", limits);
    if (auto* v = field(body, "instructions"); v && !v->is_null()) r.instructions = need_string(*v, "instructions", limits);
    if (auto* v = field(body, "previous_response_id"); v && !v->is_null()) {
        r.previous_response_id = need_string(*v, "previous_response_id", limits);
        if (r.previous_response_id.empty() || r.previous_response_id.size() > 256)
            bad("previous_response_id", "previous_response_id: must be 1 to 256 characters");
    }
    if (auto* v = field(body, "conversation"); v && !v->is_null())
        bad("conversation", "conversation: conversations are not supported by this server (use previous_response_id)");
    if (auto* v = field(body, "prompt"); v && !v->is_null())
        bad("prompt", "prompt: reusable prompts are not supported by this server");
    if (auto* v = field(body, "background"); v && !v->is_null() && need_bool(*v, "background"))
        bad("background", "background: background responses are not supported by this server");

    auto* input = field(body, "input");
    if (!input || input->is_null()) {
        if (r.previous_response_id.empty()) bad("input", "input: missing");
    } else if (input->is_string()) {
        r.input.push_back(
            ojson{{"type", "message"},
                  {"role", "user"},
                  {"content", ojson::array({ojson{{"type", "input_text"}, {"text", need_string(*input, "input", limits)}}})}});
    } else {
        need_array(*input, "input", limits.max_messages);
        for (size_t i = 0; i < input->size(); ++i)
            r.input.push_back(read_item((*input)[i], "input[" + std::to_string(i) + "]", limits));
    }

    if (auto* v = field(body, "tools"); v && !v->is_null()) {
        read_tools(*v, r, limits);
        r.echo["tools"] = *v;
    } else {
        r.echo["tools"] = ojson::array();
    }
    if (auto* v = field(body, "tool_choice"); v && !v->is_null()) {
        read_tool_choice(*v, r, limits);
        r.echo["tool_choice"] = *v;
    } else {
        r.echo["tool_choice"] = "auto";
    }
    if (auto* v = field(body, "parallel_tool_calls"); v && !v->is_null())
        c.parallel_tool_calls = need_bool(*v, "parallel_tool_calls");
    r.echo["parallel_tool_calls"] = c.parallel_tool_calls;
    if (auto* v = field(body, "max_tool_calls"); v && !v->is_null())
        r.echo["max_tool_calls"] = need_int(*v, "max_tool_calls", 1, 1 << 20);
    else r.echo["max_tool_calls"] = nullptr;

    read_common_sampling(body, c.sampling, limits, false);
    for (const char* key : {"temperature", "top_p"}) {
        const ojson* v = field(body, key);
        r.echo[key] = v && v->is_number() ? *v : ojson(1.0);
    }
    if (auto* v = field(body, "max_output_tokens"); v && !v->is_null()) {
        c.max_tokens = need_int(*v, "max_output_tokens", 1, 1ll << 40);
        r.echo["max_output_tokens"] = c.max_tokens;
    } else {
        r.echo["max_output_tokens"] = nullptr;
    }
    if (auto* v = field(body, "top_logprobs"); v && !v->is_null()) r.echo["top_logprobs"] = need_int(*v, "top_logprobs", 0, 20);
    else r.echo["top_logprobs"] = 0;

    r.echo["text"] = ojson{{"format", {{"type", "text"}}}, {"verbosity", "medium"}};
    if (auto* v = field(body, "text"); v && !v->is_null()) {
        read_text_config(*v, r, limits);
        if (auto* f = field(*v, "format"); f && !f->is_null()) r.echo["text"]["format"] = *f;
        if (auto* vb = field(*v, "verbosity"); vb && !vb->is_null()) r.echo["text"]["verbosity"] = *vb;
    }
    r.echo["reasoning"] = ojson{{"effort", nullptr}, {"summary", nullptr}};
    if (auto* v = field(body, "reasoning"); v && !v->is_null()) {
        read_reasoning(*v, r, limits);
        for (const char* key : {"effort", "summary"})
            if (auto* e = field(*v, key)) r.echo["reasoning"][key] = *e;
    }
    if (auto* v = field(body, "include"); v && !v->is_null()) {
        need_array(*v, "include", kMaxInclude);
        for (size_t i = 0; i < v->size(); ++i) {
            const std::string p = "include[" + std::to_string(i) + "]";
            const std::string what = need_string((*v)[i], p, limits);
            if (what == "reasoning.encrypted_content") r.include_encrypted_reasoning = true;
            else if (what != "message.output_text.logprobs" && what != "web_search_call.action.sources" &&
                     what != "web_search_call.results" && what != "file_search_call.results" &&
                     what != "code_interpreter_call.outputs" && what != "computer_call_output.output.image_url" &&
                     what != "message.input_image.image_url")
                bad(p, p + ": \"" + what + "\" is not a value include takes");
        }
    }
    if (auto* v = field(body, "store"); v && !v->is_null()) r.store = need_bool(*v, "store");
    if (auto* v = field(body, "stream"); v && !v->is_null()) c.stream = need_bool(*v, "stream");
    if (auto* v = field(body, "stream_options"); v && !v->is_null()) need_object(*v, "stream_options");
    if (auto* v = field(body, "metadata")) {
        read_metadata(*v);
        r.echo["metadata"] = v->is_null() ? ojson::object() : *v;
    } else {
        r.echo["metadata"] = ojson::object();
    }
    for (const char* key : {"user", "safety_identifier", "prompt_cache_key", "service_tier", "prompt_cache_retention"}) {
        if (auto* v = field(body, key); v && !v->is_null()) r.echo[key] = need_string(*v, key, limits);
        else r.echo[key] = nullptr;
    }
    r.echo["truncation"] = "disabled";
    if (auto* v = field(body, "truncation"); v && !v->is_null()) {
        const std::string t = need_string(*v, "truncation", limits);
        if (t != "auto" && t != "disabled") bad("truncation", "truncation: \"" + t + "\" is not one of auto, disabled");
        r.echo["truncation"] = t;
    }
    return r;
}

// Text of a tool output (parts: their text, images noted).
std::string output_text_of(const ojson& output, bool& has_images) {
    if (output.is_string()) return output.get<std::string>();
    std::string text;
    for (const auto& part : output) {
        if (part.value("type", "") == "input_image") has_images = true;
        else if (part.contains("text")) text += part["text"].get<std::string>();
    }
    return text;
}

}  // namespace

ResponsesRequest parse_openai_responses(const ojson& body, const RequestLimits& limits) {
    return as_api_errors([&] { return read_responses(body, limits); });
}

static ojson read_messages(const std::optional<std::string>& instructions, const ojson& items, const ReasoningDecrypter& decrypt,
                           bool& has_images) {
    ojson messages = ojson::array();
    if (instructions && !instructions->empty()) messages.push_back(ojson{{"role", "system"}, {"content", *instructions}});
    std::string reasoning;  // of the next assistant message
    // The assistant message that calls in a row join (the last message, while it is one).
    auto open_assistant = [&]() -> ojson& {
        if (messages.empty() || messages.back()["role"] != "assistant" || !reasoning.empty()) {
            ojson m{{"role", "assistant"}, {"content", ""}};
            if (!reasoning.empty()) m["reasoning_content"] = std::exchange(reasoning, std::string());
            messages.push_back(std::move(m));
        }
        return messages.back();
    };
    auto add_call = [&](const std::string& id, const std::string& name, ojson arguments) {
        ojson& m = open_assistant();
        if (!m.contains("tool_calls")) m["tool_calls"] = ojson::array();
        m["tool_calls"].push_back(
            ojson{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", std::move(arguments)}}}});
    };
    for (size_t i = 0; i < items.size(); ++i) {
        const ojson& item = items[i];
        const std::string type = item.value("type", "");
        if (type == "message") {
            std::string role = item["role"].get<std::string>();
            if (role == "developer") role = "system";
            std::string text;
            for (const auto& part : item["content"]) {
                const std::string pt = part.value("type", "");
                if (pt == "input_image") has_images = true;
                else if (pt == "refusal") text += part["refusal"].get<std::string>();
                else text += part["text"].get<std::string>();
            }
            if (role == "assistant") {
                ojson m{{"role", "assistant"}, {"content", std::move(text)}};
                if (!reasoning.empty()) m["reasoning_content"] = std::exchange(reasoning, std::string());
                messages.push_back(std::move(m));
            } else {
                messages.push_back(ojson{{"role", role}, {"content", std::move(text)}});
            }
        } else if (type == "reasoning") {
            std::string text;
            auto join = [&](const char* key) {
                if (!item.contains(key)) return;
                for (const auto& part : item[key]) {
                    if (!text.empty()) text += "\n\n";
                    text += part["text"].get<std::string>();
                }
            };
            join("content");
            if (text.empty()) join("summary");
            if (text.empty() && item.contains("encrypted_content") && decrypt)
                if (auto t = decrypt(item["encrypted_content"].get<std::string>())) text = *t;
            if (!text.empty()) reasoning += (reasoning.empty() ? "" : "\n\n") + text;
        } else if (type == "function_call") {
            // Arguments that are not a JSON object (a call that broke off, sent back as it was) are
            // kept as text in an object: the XML-call templates iterate over them as a mapping.
            ojson args = call_arguments(item["arguments"], "input[" + std::to_string(i) + "].arguments");
            if (!args.is_object()) args = ojson{{"arguments", std::move(args)}};
            add_call(item["call_id"], item["name"], std::move(args));
        } else if (type == "custom_tool_call") {
            add_call(item["call_id"], item["name"], ojson{{"input", item["input"]}});
        } else if (type == "local_shell_call") {
            add_call(item["call_id"], "local_shell", item["action"]);
        } else if (type == "function_call_output" || type == "custom_tool_call_output" || type == "local_shell_call_output") {
            messages.push_back(ojson{
                {"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", output_text_of(item["output"], has_images)}});
        }
        // Hosted tools' records: not shown to the model.
    }
    bool any_turn = false;
    for (const auto& m : messages) any_turn = any_turn || m["role"] != "system";
    if (!any_turn) throw ApiError(400, "input: the conversation has no user, assistant or tool items", "input");
    return messages;
}

void set_responses_tool_choice(ResponsesRequest& r, const ojson& choice, const RequestLimits& limits) {
    as_api_errors([&] {
        read_tool_choice(choice, r, limits);
        return 0;
    });
}

ojson responses_messages(const std::optional<std::string>& instructions, const ojson& items, const ReasoningDecrypter& decrypt,
                         bool& has_images) {
    return as_api_errors([&] { return read_messages(instructions, items, decrypt, has_images); });
}

}  // namespace strata::serve
