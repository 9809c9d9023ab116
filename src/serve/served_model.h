// The model as the HTTP side sees it: its name, tokenizer, chat template and output format, and
// how a ChatRequest becomes the prompt and engine requests of its choices (docs/api.md,
// "From request to prompt"). The weights stay in the engine process; this side maps the GGUF
// only for its tokenizer and template.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "serve/chat_request.h"
#include "serve/generation.h"
#include "template/chat_template.h"

namespace strata::gguf {
class File;
}
namespace strata::tokenizer {
class Tokenizer;
}

namespace strata::serve {

struct PreparedChat {
    std::vector<GenerationSpec> choices;  // one per `n`
    int64_t prompt_tokens = 0;
};

class ServedModel {
public:
    // Throws strata::Error naming the file when it has no usable tokenizer or chat template.
    ServedModel(const std::string& path, std::string name);
    // The same from a GGUF image in memory without tensors (what metadata_gguf() makes): how a
    // gateway loads a lane's tokenizer and template without writing a file.
    struct Metadata {
        const std::string& bytes;
    };
    ServedModel(Metadata gguf, std::string name);
    ~ServedModel();

    const std::string& name() const { return name_; }
    const std::string& architecture() const { return architecture_; }
    const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
    OutputFormat output_format() const { return format_; }
    int64_t max_context() const { return max_context_; }
    void set_max_context(int64_t n) { max_context_ = n; }

    // The rendered prompt of a request (no forced-call opening). Throws ApiError.
    std::string render(const ChatRequest& request, bool thinking_off) const;
    // The model's metadata (tokenizer, chat template, architecture keys) as a GGUF file without
    // tensors: what a gateway loads to count tokens exactly as this lane does.
    std::string metadata_gguf() const;
    // The prompt a generation of this request starts from: the rendered conversation plus the
    // opening of a forced call (what /apply-template shows).
    std::string prompt_text(const ChatRequest& request) const;
    // Prompt tokens of a request, as a generation would count them (count_tokens, input_tokens).
    int64_t count_tokens(const ChatRequest& request) const;
    // Everything the engine needs for each choice. Throws ApiError: images (no vision tower), a
    // template that rejects the conversation, a prompt too long for the context, a schema the
    // JSON constraint does not support.
    PreparedChat prepare(const ChatRequest& request) const;
    // A legacy completion: the prompt as it is (no template), plain output. Throws ApiError
    // (ids outside the vocabulary, an empty prompt, one too long for the context).
    PreparedChat prepare_completion(const CompletionRequest& request) const;

private:
    bool forces_tool(const ChatRequest& r) const;
    bool thinking_off(const ChatRequest& r) const;
    OutputFormat format_for(const ChatRequest& r) const;
    std::string forced_prefix(const ChatRequest& r) const;
    bool forced_xml(const ChatRequest& r) const;  // a forced call in the XML form
    // Throws ApiError 400 for a tool name the template's call format cannot carry.
    void check_tool_names(const ChatRequest& r) const;
    // `n` choices of one spec (seeds seed, seed + 1, ...).
    static PreparedChat fan_out(GenerationSpec spec, int n);
    std::string name_, architecture_;
    void init();  // everything but file_, from file_
    std::unique_ptr<gguf::File> file_;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
    std::unique_ptr<tmpl::ChatTemplate> chat_;
    OutputFormat format_ = OutputFormat::Plain;
    bool template_thinking_ = false;
    int64_t max_context_ = 0;
};

// "prompt is too long: N tokens > M maximum" (the wording clients act on), status 400.
ApiError prompt_too_long(int64_t tokens, int64_t maximum);

}  // namespace strata::serve
