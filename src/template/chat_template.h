// Chat templates: a model's `tokenizer.chat_template` (or a template file) rendered for a chat
// request the way transformers' `tokenizer.apply_chat_template(..., tokenize=False)` renders
// it: messages, tools, documents and add_generation_prompt as template variables, every other
// request key (enable_thinking, ...) as an extra variable, the tokenizer's special tokens
// (bos_token, eos_token, ...) beneath those, and continue_final_message handled as transformers
// does (the prompt ends right after the final message's text).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_eval.h"

namespace strata::gguf {
class File;
}

namespace strata::tmpl {

class ChatTemplate {
public:
    // The GGUF's tokenizer.chat_template, with its bos/eos/pad/unk tokens as variables. Throws
    // strata::Error when the file has no chat template, TemplateError when it does not parse.
    static ChatTemplate from_gguf(const gguf::File& file);
    // A template from text; `where` names it in error messages.
    static ChatTemplate from_source(const std::string& source, std::string where = "chat template");

    // Adds or replaces a special token variable (e.g. "eos_token").
    void set_special_token(const std::string& name, std::string text);
    // Special tokens of `file` (bos_token, eos_token, pad_token, unk_token), where it names them.
    void set_special_tokens_from(const gguf::File& file);

    // `request`: {"messages": [...], "tools": [...], "add_generation_prompt": bool,
    // "continue_final_message": bool, "documents": [...], anything else: template variables}.
    // Throws strata::Error for a malformed request and TemplateError when the template fails;
    // a template's raise_exception("...") surfaces as exactly its message.
    std::string render(const nlohmann::ordered_json& request, const RenderLimits& limits = {}) const;

    const std::string& source() const { return source_; }

private:
    ChatTemplate(const std::string& source, std::string where);

    std::string source_;
    Template template_;
    Variables special_tokens_;
};

}  // namespace strata::tmpl
