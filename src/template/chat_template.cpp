#include "template/chat_template.h"

#include "gguf/gguf.h"
#include "template/jinja_text.h"
#include "util/error.h"

namespace strata::tmpl {

ChatTemplate::ChatTemplate(const std::string& source, std::string where) : source_(source), template_(source, std::move(where)) {}

ChatTemplate ChatTemplate::from_source(const std::string& source, std::string where) {
    return ChatTemplate(source, std::move(where));
}

ChatTemplate ChatTemplate::from_gguf(const gguf::File& file) {
    const std::optional<std::string> source = file.opt_string("tokenizer.chat_template");
    if (!source) throw Error(file.path().string() + ": the model has no chat template (tokenizer.chat_template)");
    // An empty template renders every conversation as an empty prompt: refused here, at load,
    // rather than on every request.
    if (source->find_first_not_of(" \t\r\n") == std::string::npos)
        throw Error(file.path().string() + ": the model's chat template (tokenizer.chat_template) is empty");
    ChatTemplate t(*source, file.path().filename().string() + ": tokenizer.chat_template");
    t.set_special_tokens_from(file);
    return t;
}

void ChatTemplate::set_special_token(const std::string& name, std::string text) {
    for (auto& [k, v] : special_tokens_) {
        if (k == name) {
            v = Value(std::move(text));
            return;
        }
    }
    special_tokens_.emplace_back(name, Value(std::move(text)));
}

void ChatTemplate::set_special_tokens_from(const gguf::File& file) {
    const gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
    if (!tokens || tokens->type != gguf::ValueType::ARRAY || tokens->elem_type != gguf::ValueType::STRING) return;
    const std::pair<const char*, const char*> keys[] = {{"tokenizer.ggml.bos_token_id", "bos_token"},
                                                        {"tokenizer.ggml.eos_token_id", "eos_token"},
                                                        {"tokenizer.ggml.padding_token_id", "pad_token"},
                                                        {"tokenizer.ggml.unknown_token_id", "unk_token"}};
    for (const auto& [key, name] : keys) {
        const std::optional<uint64_t> id = file.opt_u64(key);
        if (id && *id < tokens->arr_s.size()) set_special_token(name, tokens->arr_s[*id]);
    }
}

namespace {

// The text of the final message that continue_final_message continues: its string content,
// or the last text block of a list content.
std::string final_message_text(const nlohmann::ordered_json& messages) {
    if (messages.empty()) throw Error("continue_final_message is set but there are no messages");
    const auto& last = messages.back();
    if (!last.is_object() || !last.contains("content"))
        throw Error("continue_final_message is set but the final message has no content");
    const auto& content = last["content"];
    if (content.is_string()) return content.get<std::string>();
    if (content.is_array()) {
        for (auto it = content.rbegin(); it != content.rend(); ++it) {
            if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) return (*it)["text"].get<std::string>();
        }
        throw Error("continue_final_message is set but we could not find any text to continue in the final message!");
    }
    throw Error("continue_final_message is set but the final message's content is not text");
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::ordered_json& request, const RenderLimits& limits) const {
    if (!request.is_object()) throw Error("chat request: expected a JSON object");
    const auto messages = request.find("messages");
    if (messages == request.end() || !messages->is_array()) throw Error("chat request: 'messages' must be an array");
    auto flag = [&](const char* key) {
        const auto it = request.find(key);
        if (it == request.end() || it->is_null()) return false;
        if (!it->is_boolean()) throw Error(std::string("chat request: '") + key + "' must be true or false");
        return it->get<bool>();
    };
    const bool add_generation_prompt = flag("add_generation_prompt");
    const bool continue_final = flag("continue_final_message");
    if (add_generation_prompt && continue_final)
        throw Error(
            "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you "
            "want the model to continue the final message, and add_generation_prompt when you want to add a header "
            "that will prompt it to start a new assistant message instead.");

    // transformers: render(messages=..., tools=..., documents=..., add_generation_prompt=...,
    // **{**special_tokens_map, **kwargs}); absent tools and documents are None, not undefined.
    Variables vars = special_tokens_;
    auto set = [&](const std::string& name, Value v) {
        for (auto& [k, x] : vars) {
            if (k == name) {
                x = std::move(v);
                return;
            }
        }
        vars.emplace_back(name, std::move(v));
    };
    for (const auto& [key, value] : request.items()) {
        if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt" ||
            key == "continue_final_message")
            continue;
        set(key, from_json(value));
    }
    set("messages", from_json(*messages));
    const auto tools = request.find("tools");
    set("tools", tools == request.end() ? Value::none() : from_json(*tools));
    const auto documents = request.find("documents");
    set("documents", documents == request.end() ? Value::none() : from_json(*documents));
    set("add_generation_prompt", Value(add_generation_prompt));

    std::string rendered = template_.render(vars, limits);
    if (!continue_final) return rendered;

    // Cut the prompt right after the final message's text (transformers' rule: find the last
    // occurrence of the stripped text; keep trailing whitespace only if the template kept it).
    const std::string final_text = final_message_text(*messages);
    const std::string_view stripped = text::strip(final_text, true, true);
    const std::string_view lstripped = text::strip(final_text, true, false);
    const size_t loc = rendered.rfind(stripped);
    if (loc == std::string::npos)
        throw Error(
            "continue_final_message is set but the final message does not appear in the chat after applying the "
            "chat template! This can happen if the chat template deletes portions of the final message. Please "
            "verify the chat template and final message in your chat to ensure they are compatible.");
    if (rendered.compare(loc, lstripped.size(), final_text) == 0 && lstripped.size() == final_text.size())
        rendered.resize(loc + lstripped.size());
    else rendered.resize(loc + stripped.size());
    return rendered;
}

}  // namespace strata::tmpl
