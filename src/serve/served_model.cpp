#include "serve/served_model.h"

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "runtime/json_grammar.h"
#include "runtime/xml_call_constraint.h"
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

// The allowed tools of a forced call, as the engine's xml_tool_call constraint takes them; null
// when one cannot be written in the XML call form (XmlCallGrammar::from_tools says why): the call
// then takes the JSON body instead.
ojson forced_xml_tools(const ChatRequest& r) {
    ojson tools = ojson::array();
    for (const auto& t : r.tools) {
        if (r.tool_choice == ToolChoice::Named && t.name != r.tool_name) continue;
        tools.push_back(ojson{{"name", t.name}, {"parameters", t.parameters}});
    }
    try {
        runtime::XmlCallGrammar::from_tools(tools);
    } catch (const Error&) {
        return nullptr;
    }
    return tools;
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

// The XML call format writes a name as <function=NAME> (and parameters as <parameter=NAME>): a
// name with '<', '>', a line break or whitespace at its ends cannot be written there and read back.
void ServedModel::check_tool_names(const ChatRequest& r) const {
    if (format_ != OutputFormat::Qwen3CoderXml) return;
    for (size_t i = 0; i < r.tools.size(); ++i) {
        const std::string& name = r.tools[i].name;
        const bool bad_char = name.find_first_of("<>\r\n") != std::string::npos;
        const bool bad_edge = name.front() == ' ' || name.front() == '\t' || name.back() == ' ' || name.back() == '\t';
        if (bad_char || bad_edge) {
            const std::string param = r.api == ApiKind::Anthropic ? "tools." + std::to_string(i) + ".name"
                                                                  : "tools[" + std::to_string(i) + "].function.name";
            throw ApiError(400,
                           param +
                               ": this model writes tool calls as <function=NAME>, where a name with '<', '>', a line "
                               "break or surrounding whitespace cannot be written; rename the tool",
                           param);
        }
    }
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
    return static_cast<int64_t>(tokenizer_->encode(prompt_text(r), true).size());
}

bool ServedModel::thinking_off(const ChatRequest& r) const {
    // A constrained output starts at the first token: no room for a reasoning block first.
    return forces_tool(r) || !r.response_format.is_null() || (r.thinking.has_value() && !*r.thinking);
}

OutputFormat ServedModel::format_for(const ChatRequest& r) const {
    return forces_tool(r) && format_ == OutputFormat::Plain ? OutputFormat::Qwen3Hermes : format_;
}

// The opening of a forced call, which the prompt ends with: in the template's XML form the model
// writes the rest of <function=NAME>... under the engine's XML call constraint; in Qwen3's form,
// or where a tool cannot be written in the XML form, its JSON body under the JSON constraint.
std::string ServedModel::forced_prefix(const ChatRequest& r) const {
    if (!forces_tool(r)) return "";
    if (!forced_xml(r)) return "<tool_call>\n";
    // A named choice's name is known: written in the prompt, not spent from max_tokens.
    return r.tool_choice == ToolChoice::Named ? "<tool_call>\n<function=" + r.tool_name + ">\n" : "<tool_call>\n<function=";
}

bool ServedModel::forced_xml(const ChatRequest& r) const {
    return forces_tool(r) && format_ == OutputFormat::Qwen3CoderXml && !forced_xml_tools(r).is_null();
}

std::string ServedModel::prompt_text(const ChatRequest& r) const { return render(r, thinking_off(r)) + forced_prefix(r); }

PreparedChat ServedModel::prepare(const ChatRequest& r) const {
    if (r.has_images) throw ApiError(400, "this model does not accept images", "messages");
    check_tool_names(r);
    const bool forced = forces_tool(r);
    const bool no_thinking = thinking_off(r);

    GenerationSpec spec;
    spec.prompt_text = prompt_text(r);
    spec.format = format_for(r);
    spec.parser.parse_thinking = template_thinking_ && !no_thinking;
    spec.parser.parse_tools = (!r.tools.empty() && r.tool_choice != ToolChoice::None) || forced;
    spec.parser.starts_in_thinking = spec.parser.parse_thinking && prompt_opens_thinking(spec.prompt_text);
    for (const auto& t : r.tools) spec.parser.tools.push_back(ToolSpec{t.name, t.parameters});
    if (spec.parser.parse_thinking && r.thinking_budget) spec.thinking_budget = r.thinking_budget;

    if (forced) {
        // The body under the engine's constraint (the parser reads either body whatever the
        // template's format), closed by the server when the call is complete: the XML form, or the
        // JSON object {"name": <an allowed tool>, "arguments": <its schema>}.
        spec.forced_prefix = forced_prefix(r);
        spec.forced_suffix = "\n</tool_call>";
        if (forced_xml(r))
            spec.response_format = ojson{
                {"type", "xml_tool_call"}, {"tools", forced_xml_tools(r)}, {"name_written", r.tool_choice == ToolChoice::Named}};
        else spec.response_format = ojson{{"type", "json_schema"}, {"schema", forced_call_schema(r)}};
    } else if (!r.response_format.is_null()) {
        if (r.response_format.value("type", "") == "json_schema") {
            try {
                runtime::JsonGrammar::from_ordered_schema(r.response_format["schema"]);
            } catch (const Error& e) {
                const std::string field = r.response_format_param == "response_format" ? "response_format.json_schema.schema"
                                                                                       : r.response_format_param + ".schema";
                throw ApiError(400, field + ": " + e.what(), r.response_format_param);
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
