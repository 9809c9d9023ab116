// Streaming parsers of model output for the Qwen3 / Qwen3-Coder / Qwen3.5 families: generated text
// arrives in pieces, split anywhere, and comes out as API events: reasoning text, answer text, and
// tool calls (name first, then fragments of the JSON arguments). docs/output_parsing.md has the
// formats, with examples.
//
// What the models write (from their chat templates, tests/template/templates):
//   thinking   <think>\nREASONING\n</think>\n\nANSWER      (Qwen3.5 and Qwen3 thinking variants put
//              "<think>\n" in the prompt, so the output starts inside: ParserOptions::starts_in_thinking)
//   Hermes     <tool_call>\n{"name": "fn", "arguments": {...}}\n</tool_call>            (Qwen3)
//   XML        <tool_call>\n<function=fn>\n<parameter=p>\nVALUE\n</parameter>\n</function>\n</tool_call>
//                                                                     (Qwen3-Coder, Qwen3.5)
// Calls may follow answer text and each other ("\n" between them).
//
// Formatting newlines are not text: one "\n" after <think>, one before </think>, up to two after
// </think> and after each call, up to two before <tool_call>, one after <parameter=p> and one
// before </parameter>. Leading whitespace before an opening <think> is dropped too.
//
// Held back: only what could still be the start of a tag (with the newlines that would be stripped
// before it); it is released as soon as it cannot be. The events, merged, do not depend on how the
// text was split into pieces. Bytes pass through unchanged (pieces are expected to be valid UTF-8,
// and then every event's text is).
//
// Malformed output never throws and never loses text: a <tool_call> whose body does not parse is
// given back as answer text (the raw text, tags included). A call whose ToolCallBegin has already
// gone out cannot be taken back: it ends with a ToolCallEnd with complete = false carrying the raw
// text, and parse_whole turns it into content.
//
// A call cut off by the end of generation (max_tokens) is not text. Cut before its name is
// complete, it is dropped: no call, and its markup is not content (the text before it stays). Cut
// after, it stays a call with the arguments so far and ends with ToolCallEnd{truncated = true}
// (docs/output_parsing.md, "Calls cut off"). Only a cut inside the opening "<tool_call>" itself
// leaves those bytes as text: they cannot be told from text (and the tag is one token in the Qwen
// vocabularies, so a real cut never lands there).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace strata::serve {

enum class OutputFormat {
    Plain,          // no tool calls (thinking only, when enabled)
    Qwen3Hermes,    // <tool_call> holding a JSON object {"name", "arguments"}
    Qwen3CoderXml,  // <tool_call> holding <function=...><parameter=...>
};

const char* to_string(OutputFormat format);

// From the chat template's source: "<function=" means the XML format, else "<tool_call>" means
// Hermes, else Plain.
OutputFormat detect_output_format(std::string_view chat_template_source);
// Whether the template knows thinking blocks (it mentions "<think>").
bool template_has_thinking(std::string_view chat_template_source);
// Whether a rendered prompt leaves a <think> block open (ends with "<think>" and whitespace), so
// the output starts inside the reasoning: the value for ParserOptions::starts_in_thinking.
bool prompt_opens_thinking(std::string_view rendered_prompt);

struct ToolSpec {
    std::string name;
    nlohmann::json parameters;  // JSON schema of the arguments object (for XML parameter types)
};

struct ParserOptions {
    bool starts_in_thinking = false;  // the prompt opened <think>: the output begins in reasoning
    bool parse_thinking = true;       // false: <think> and </think> are plain answer text
    bool parse_tools = true;          // false: <tool_call> is plain answer text
    std::vector<ToolSpec> tools;      // the request's tools (XML: how to type parameter values)
};

struct OutputEvent {
    enum class Kind { Reasoning, Content, ToolCallBegin, ToolCallArguments, ToolCallEnd };
    Kind kind = Kind::Content;
    // Reasoning / Content: the next piece of text. ToolCallArguments: the next fragment of the
    // arguments' JSON text. ToolCallEnd with complete == false: the raw text of the failed call.
    std::string text;
    int index = -1;    // ToolCall*: the call's number in this output, 0, 1, ...
    std::string name;  // ToolCallBegin: the function's name (not checked against the tools list)
    // ToolCallEnd: true when the call parsed; the arguments fragments then concatenate to one JSON
    // object. False when it broke off after its Begin: malformed (the fragments need not be valid
    // JSON, and `text` holds the call's raw text), or truncated.
    bool complete = true;
    // ToolCallEnd: the output ended inside the call, after its name (complete is false, text is
    // empty). The call stands with the fragments sent: an XML call's close into one JSON object
    // (the parameters so far, the one being read as far as it got); a Hermes call's are the
    // model's JSON text as it was cut (JsonCloser makes an object of them).
    bool truncated = false;

    bool operator==(const OutputEvent&) const = default;
};

// One per generated output; not thread-safe.
class OutputParser {
public:
    virtual ~OutputParser() = default;
    // The events this piece makes certain (possibly none: the piece may be held back).
    virtual std::vector<OutputEvent> push(std::string_view piece) = 0;
    // End of generation: everything still held back; an unfinished call is dropped (cut before its
    // name) or ends truncated. Further pushes throw std::logic_error.
    virtual std::vector<OutputEvent> finish() = 0;
};

std::unique_ptr<OutputParser> make_output_parser(OutputFormat format, ParserOptions options);

// Events merged into a whole response (non-streaming requests, and tests).
struct ParsedOutput {
    struct Call {
        std::string name;
        std::string arguments_json;
        bool truncated = false;  // cut by the end of the output: arguments_json as far as it got
        bool operator==(const Call&) const = default;
    };
    std::string reasoning, content;
    std::vector<Call> tool_calls;

    // Applies one event; a malformed call's ToolCallEnd (complete == false, not truncated) moves the
    // call into content.
    void add(const OutputEvent& event);
    bool operator==(const ParsedOutput&) const = default;
};

// Pushes all of text as one piece, finishes and merges: parser must be fresh.
ParsedOutput parse_whole(OutputParser& parser, std::string_view text);

}  // namespace strata::serve
