#include "serve/served_model.h"

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "runtime/json_grammar.h"
#include "template/jinja_error.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace strata::serve {

namespace {

ojson tool_list(const std::vector<ToolDef>& tools) {
    ojson list = ojson::array();
    for (const auto& t : tools) {
        ojson fn{{"name", t.name}};
        if (!t.description.empty()) fn["description"] = t.description;
        fn["parameters"] = t.parameters;
        list.push_back(ojson{{"type", "function"}, {"function", std::move(fn)}});
    }
    return list;
}

// The JSON a forced Hermes-style call must be: {"name": <one of the tools>, "arguments": {...}}.
// A tool whose schema the constraint cannot express is constrained to any object instead.
ojson forced_call_schema(const ChatRequest& r) {
    ojson options = ojson::array();
    for (const auto& t : r.tools) {
        if (r.tool_choice == ToolChoice::Named && t.name != r.tool_name) continue;
        ojson args = t.parameters;
        try {
            runtime::JsonGrammar::from_ordered_schema(args);
        } catch (const Error&) {
            args = ojson{{"type", "object"}};
        }
        options.push_back(ojson{{"type", "object"},
                                {"properties", {{"name", {{"const", t.name}}}, {"arguments", std::move(args)}}},
                                {"required", {"name", "arguments"}},
                                {"additionalProperties", false}});
    }
    return options.size() == 1 ? options[0] : ojson{{"anyOf", std::move(options)}};
}

// Every system message of a conversation, in order, as one leading system message. Claude Code
// puts `role: "system"` entries after user turns (its agent list, deferred-tool notices); the
// Anthropic API and OpenAI's accept them anywhere. Qwen3.5's template raises on a system message
// that is not first, and templates that do render one in place put an instruction block between
// turns, where models trained on one leading block lose track of tool calling. Merged at the top
// they keep their authority, and a prompt whose mid-conversation entries do not change from turn
// to turn (Claude Code's do not) keeps its prefix from turn to turn.
ojson one_leading_system(const ojson& messages) {
    size_t systems = 0;
    bool first_is_system = false;
    for (size_t i = 0; i < messages.size(); ++i)
        if (messages[i].value("role", std::string()) == "system") {
            ++systems;
            if (i == 0) first_is_system = true;
        }
    if (systems == 0 || (systems == 1 && first_is_system)) return messages;
    std::string text;
    ojson rest = ojson::array();
    for (const auto& m : messages) {
        if (m.value("role", std::string()) != "system") {
            rest.push_back(m);
            continue;
        }
        const auto it = m.find("content");
        if (it == m.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) continue;
        if (!text.empty()) text += "\n\n";
        text += it->get_ref<const std::string&>();
    }
    ojson out = ojson::array();
    out.push_back(ojson{{"role", "system"}, {"content", std::move(text)}});
    for (auto& m : rest) out.push_back(std::move(m));
    return out;
}

}  // namespace

ApiError prompt_too_long(int64_t tokens, int64_t maximum) {
    return ApiError(400, "prompt is too long: " + std::to_string(tokens) + " tokens > " + std::to_string(maximum) + " maximum",
                    "messages");
}

std::string ServedModel::metadata_gguf() const {
    gguf::Writer w;
    for (const auto& [key, value] : file_->metadata())
        if (key.rfind("split.", 0) != 0) w.set(key, value);
    // Written in a private folder (mkdtemp: fresh, mode 0700), read back, removed.
    std::string dir = (std::filesystem::temp_directory_path() / "strata-meta-XXXXXX").string();
    if (!::mkdtemp(dir.data())) throw Error("cannot make a temporary folder for the model-info file");
    const auto path = std::filesystem::path(dir) / "model-info.gguf";
    std::string out;
    try {
        w.write_all(path, {});
        std::ifstream in(path, std::ios::binary);
        std::stringstream bytes;
        bytes << in.rdbuf();
        out = bytes.str();
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
        throw;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return out;
}

ServedModel::ServedModel(const std::string& path, std::string name) : name_(std::move(name)) {
    file_ = gguf::File::open(path);
    init();
}

ServedModel::ServedModel(Metadata gguf, std::string name) : name_(std::move(name)) {
    file_ =
        gguf::File::from_memory(reinterpret_cast<const uint8_t*>(gguf.bytes.data()), gguf.bytes.size(), "model info of " + name_);
    if (!file_->tensors().empty()) throw Error("model info of " + name_ + ": holds tensors (not a metadata-only GGUF)");
    init();
}

void ServedModel::init() {
    architecture_ = file_->has("general.architecture") ? file_->get_string("general.architecture") : "";
    tokenizer_ = tokenizer::Tokenizer::from_gguf(*file_);
    chat_ = std::make_unique<tmpl::ChatTemplate>(tmpl::ChatTemplate::from_gguf(*file_));
    format_ = detect_output_format(chat_->source());
    template_thinking_ = template_has_thinking(chat_->source());
    const std::string key = architecture_ + ".context_length";
    max_context_ = file_->has(key) ? static_cast<int64_t>(file_->get_u64(key)) : 4096;
}

ServedModel::~ServedModel() = default;

bool ServedModel::forces_tool(const ChatRequest& r) const {
    return (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) && !r.tools.empty();
}

std::string ServedModel::render(const ChatRequest& r, bool thinking_off) const {
    ojson vars{{"messages", one_leading_system(r.messages)}, {"add_generation_prompt", true}};
    if (!r.tools.empty() && r.tool_choice != ToolChoice::None) vars["tools"] = tool_list(r.tools);
    if (thinking_off) vars["enable_thinking"] = false;
    else if (r.thinking.has_value()) vars["enable_thinking"] = *r.thinking;
    try {
        return chat_->render(vars);
    } catch (const tmpl::TemplateError& e) {
        throw ApiError(400, std::string("the chat template rejected this conversation: ") + e.what(), "messages");
    } catch (const Error& e) {
        throw ApiError(400, e.what(), "messages");
    }
}

int64_t ServedModel::count_tokens(const ChatRequest& r) const {
    const bool thinking_off = forces_tool(r) || !r.response_format.is_null();
    return static_cast<int64_t>(tokenizer_->encode(render(r, thinking_off), true).size());
}

PreparedChat ServedModel::prepare(const ChatRequest& r) const {
    if (r.has_images) throw ApiError(400, "this model does not accept images", "messages");
    const bool forced = forces_tool(r);
    // A constrained output starts at the first token: no room for a reasoning block first.
    const bool thinking_off = forced || !r.response_format.is_null() || (r.thinking.has_value() && !*r.thinking);

    GenerationSpec spec;
    spec.prompt_text = render(r, thinking_off);
    spec.format = format_;
    if (forced && format_ == OutputFormat::Plain) spec.format = OutputFormat::Qwen3Hermes;
    spec.parser.parse_thinking = template_thinking_ && !thinking_off;
    spec.parser.parse_tools = (!r.tools.empty() && r.tool_choice != ToolChoice::None) || forced;
    spec.parser.starts_in_thinking = spec.parser.parse_thinking && prompt_opens_thinking(spec.prompt_text);
    for (const auto& t : r.tools) spec.parser.tools.push_back(ToolSpec{t.name, t.parameters});
    if (spec.parser.parse_thinking && r.thinking_budget) spec.thinking_budget = r.thinking_budget;

    if (forced) {
        if (spec.format == OutputFormat::Qwen3Hermes) {
            spec.forced_prefix = "<tool_call>\n";
            spec.forced_suffix = "\n</tool_call>";
            spec.response_format = ojson{{"type", "json_schema"}, {"schema", forced_call_schema(r)}};
        } else {
            // XML calls: the name is forced by the opening; the parameters are the model's own.
            spec.forced_prefix =
                r.tool_choice == ToolChoice::Named ? "<tool_call>\n<function=" + r.tool_name + ">\n" : "<tool_call>\n<function=";
        }
        spec.prompt_text += spec.forced_prefix;
    } else if (!r.response_format.is_null()) {
        if (r.response_format.value("type", "") == "json_schema") {
            try {
                runtime::JsonGrammar::from_ordered_schema(r.response_format["schema"]);
            } catch (const Error& e) {
                throw ApiError(400, std::string("response_format.json_schema.schema: ") + e.what(), "response_format");
            }
        }
        spec.response_format = r.response_format;
    }

    spec.prompt = tokenizer_->encode(spec.prompt_text, true);
    const auto n = static_cast<int64_t>(spec.prompt.size());
    if (n >= max_context_) throw prompt_too_long(n, max_context_ - 1);

    spec.sampling = r.sampling;
    if (r.logprobs) {
        spec.sampling.logprobs = true;
        spec.sampling.top_logprobs = r.top_logprobs;
    }
    spec.max_tokens = r.max_tokens;
    spec.stop = r.stop;

    return fan_out(std::move(spec), r.n);
}

PreparedChat ServedModel::prepare_completion(const CompletionRequest& c) const {
    GenerationSpec spec;
    if (c.prompt_is_tokens) {
        for (int32_t id : c.prompt_tokens)
            if (!tokenizer_->valid(id))
                throw ApiError(400, "prompt: token id " + std::to_string(id) + " is not in the vocabulary", "prompt");
        spec.prompt = c.prompt_tokens;
        spec.prompt_text = tokenizer_->decode(c.prompt_tokens);
    } else {
        spec.prompt_text = c.prompt_text;
        spec.prompt = tokenizer_->encode(c.prompt_text, true);
    }
    const auto n = static_cast<int64_t>(spec.prompt.size());
    if (n == 0) throw ApiError(400, "prompt: must not be empty", "prompt");
    if (n >= max_context_) throw prompt_too_long(n, max_context_ - 1);
    spec.format = OutputFormat::Plain;
    spec.parser.parse_thinking = false;
    spec.parser.parse_tools = false;
    spec.sampling = c.sampling;
    if (c.logprobs >= 0) {
        spec.sampling.logprobs = true;
        spec.sampling.top_logprobs = c.logprobs;
    }
    spec.max_tokens = c.max_tokens;
    spec.stop = c.stop;
    return fan_out(std::move(spec), c.n);
}

PreparedChat ServedModel::fan_out(GenerationSpec spec, int n) {
    PreparedChat out;
    out.prompt_tokens = static_cast<int64_t>(spec.prompt.size());
    for (int i = 0; i < n; ++i) {
        GenerationSpec s = spec;
        // Choice i samples with seed + i: repeatable, and different from its siblings.
        if (i > 0 && s.sampling.seed) *s.sampling.seed += static_cast<uint64_t>(i);
        out.choices.push_back(std::move(s));
    }
    return out;
}

}  // namespace strata::serve
