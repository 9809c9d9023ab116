// Constrained decoding of a forced tool call in the Qwen3-Coder / Qwen3.5 XML format
// (docs/constrained_decoding.md, "XML tool calls"). The prompt ends with "<tool_call>\n<function=";
// the constraint makes the model write the rest of one call of an allowed tool:
//
//   NAME>\n                                          NAME: one of the allowed tools
//   <parameter=P>\nVALUE\n</parameter>\n  ...        P: the tool's schema properties, in schema order,
//                                                    each at most once, the required ones present
//   </function>                                      then nothing (the server closes </tool_call>)
//
// A VALUE is what the output parser (serve/output_parser.h) reads back as the property's JSON:
//   string schemas            any UTF-8 text without "</parameter>" (min/maxLength in code points)
//   string enums              one of the choices, as raw text
//   other typed schemas       JSON text matching the schema (a JsonMatcher for the property)
//   untyped or mixed schemas  any text, as strings (the parser may read JSON-looking text as JSON)
//
// XmlCallGrammar::from_tools throws strata::Error for what this form cannot carry (a tool without
// listed properties, a name with '<', '>' or a line break, an enum choice with a line break, a
// schema the JSON constraint refuses, more than 64 properties): callers then fall back to the JSON
// body of a call. The mask is a walk of the vocabulary's byte trie with the byte-level recogniser,
// as in JsonConstraint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/json_constraint.h"
#include "runtime/json_grammar.h"
#include "runtime/json_matcher.h"
#include "runtime/token_constraint.h"
#include "runtime/token_index.h"
#include "runtime/token_mask.h"

namespace strata::runtime {

// How an XML call's parameter value of this JSON schema is read back: as a string when "string"
// is its only type (or it is an enum of strings), as JSON when it has types and none is
// "string", else either. One rule for the constraint that writes values (xml_call_constraint.cpp)
// and the output parser that reads them (serve/output_parser.cpp). Json: nlohmann::json or
// nlohmann::ordered_json.
enum class XmlValueReading { String, Json, Either };

template <class Json>
XmlValueReading xml_value_reading(const Json& schema) {
    if (!schema.is_object()) return XmlValueReading::Either;
    const auto type = schema.find("type");
    if (type == schema.end()) {
        // {"enum": ["a", "b"]} without a type: strings when every choice is one.
        const auto choices = schema.find("enum");
        if (choices == schema.end() || !choices->is_array() || choices->empty()) return XmlValueReading::Either;
        for (const auto& c : *choices)
            if (!c.is_string()) return XmlValueReading::Either;
        return XmlValueReading::String;
    }
    bool string = false, other = false;
    auto note = [&](const Json& t) {
        if (!t.is_string()) return;
        const std::string& s = t.template get_ref<const std::string&>();
        if (s == "string") string = true;
        else if (s != "null") other = true;
    };
    if (type->is_array()) {
        for (const auto& t : *type) note(t);
    } else {
        note(*type);
        if (type->is_string() && type->template get_ref<const std::string&>() == "null") other = true;
    }
    if (string && !other) return XmlValueReading::String;
    if (other && !string) return XmlValueReading::Json;
    return XmlValueReading::Either;
}

class XmlCallGrammar {
public:
    struct Param {
        enum class Kind : uint8_t { Text, Enum, Json };
        std::string name;
        bool required = false;
        Kind kind = Kind::Text;
        uint32_t min_length = 0, max_length = JsonGrammar::kUnlimited;  // Text, in code points
        std::vector<std::string> choices;                               // Enum: sorted, unique
        std::shared_ptr<const JsonGrammar> json;                        // Json
    };
    struct Tool {
        std::string name;
        std::vector<Param> params;            // in schema order
        std::vector<uint32_t> next_required;  // [i]: the first required param at index >= i (size() when none)
    };
    static constexpr size_t kMaxParams = 64;

    // tools: [{"name", "parameters": JSON schema}], the allowed ones. name_written: the prompt
    // already ends with "<function=NAME>\n" of the one tool given (a named choice), so the
    // output starts at its parameters. Throws strata::Error.
    static std::shared_ptr<const XmlCallGrammar> from_tools(const nlohmann::ordered_json& tools, bool name_written = false);
    bool name_written() const { return name_written_; }

    const std::vector<Tool>& tools() const { return tools_; }  // sorted by name

private:
    std::vector<Tool> tools_;
    bool name_written_ = false;
};

// Where a parse stands (one thread: the form has no ambiguity a byte does not settle).
struct XmlCallState {
    enum Phase : uint8_t { FnName, Newline, Between, Literal, ParamName, Text, Enum, Json, Done };
    Phase phase = FnName;
    Phase after = Between;                   // Newline / Literal: the phase that follows
    uint8_t literal = 0;                     // Literal: kLiterals index
    uint8_t utf8_left = 0;                   // Text: continuation bytes the current character still needs
    uint8_t utf8_lo = 0x80, utf8_hi = 0xBF;  // Text: the range of the next continuation byte
    uint8_t close = 0;                       // Text: bytes of "</parameter>" matched so far
    bool newline = false;                    // Text: a '\n' is pending (content, or the one before </parameter>)
    uint32_t pos = 0;                        // bytes matched of the name / literal / choice
    uint32_t lo = 0, hi = 0;                 // FnName: candidate tools [lo, hi); Enum: candidate choices
    int32_t tool = -1;
    int32_t param = -1;       // the parameter being read
    uint32_t next = 0;        // the first parameter that may still come
    uint64_t candidates = 0;  // ParamName: the parameters this name may still be
    uint32_t chars = 0;       // Text: code points committed to the value
    JsonParseState json;      // Json: the value's parse

    bool operator==(const XmlCallState&) const = default;
};

// Per vocabulary (built once, shared): the tokens that are plain text inside a string value —
// complete UTF-8, no '<', no control byte but tab, CR, LF — and a trie of the other candidates.
// Between characters of a string value a plain token is allowed exactly when its characters fit
// the value's maxLength, and leaves the value unfinished, so only the others need the walk.
struct XmlTextIndex {
    std::shared_ptr<const TokenIndex> index;
    TokenMask plain;
    // (characters it adds to a value, id) of each plain token, ascending: a trailing '\n' is not
    // counted (it may be the one before </parameter>).
    std::vector<std::pair<uint32_t, int32_t>> plain_by_length;
    TokenTrie others;
    static std::shared_ptr<const XmlTextIndex> of(const std::shared_ptr<const TokenIndex>& index);
};

class XmlCallConstraint final : public TokenConstraint {
public:
    XmlCallConstraint(std::shared_ptr<const XmlCallGrammar> grammar, std::shared_ptr<const TokenIndex> index);

    void allowed(TokenMask& mask) override;
    void accept(int32_t token) override;  // throws strata::Error for a token outside the mask
    bool must_end() const override { return state_.phase == XmlCallState::Done; }
    bool complete() const { return must_end(); }
    bool would_accept(int32_t token);  // the slow reference: the token's bytes fed one by one
    const std::string& text() const { return text_; }

    // dst = src advanced by one byte; false when the byte cannot follow.
    bool advance(const XmlCallState& src, uint8_t byte, XmlCallState& dst);

private:
    bool step(XmlCallState& s, uint8_t c);
    bool step_text(XmlCallState& s, const XmlCallGrammar::Param& p, uint8_t c);
    void start_value(XmlCallState& s) const;
    void enter_between(XmlCallState& s) const;
    const XmlCallGrammar::Param& param_of(const XmlCallState& s) const;

    void walk(const TokenTrie& trie, TokenMask& mask);

    std::shared_ptr<const XmlCallGrammar> grammar_;
    std::shared_ptr<const TokenIndex> index_;
    std::shared_ptr<const XmlTextIndex> text_index_;
    // One recogniser per JSON-typed parameter ([tool][param], null for the others); their
    // states live in XmlCallState::json.
    std::vector<std::vector<std::unique_ptr<JsonMatcher>>> matchers_;
    XmlCallState state_;
    JsonParseState json_scratch_;
    std::string text_;
    bool ended_ = false;

    struct Cursor {
        uint32_t next_child, end_child;
    };
    std::vector<XmlCallState> depth_states_;
    std::vector<Cursor> cursors_;
    std::vector<size_t> key_marks_;
};

}  // namespace strata::runtime
