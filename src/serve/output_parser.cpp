#include "serve/output_parser.h"

#include <algorithm>
#include <array>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "runtime/xml_call_constraint.h"
#include "serve/json_scanner.h"

namespace strata::serve {

namespace {

using Kind = OutputEvent::Kind;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

// What each text mode holds back: any proper prefix of one of these at the end of the text. The
// forms with newlines keep the formatting newlines that are stripped before the tag.
constexpr std::array<std::string_view, 2> kReasoningHolds = {"</think>", "\n</think>"};
constexpr std::array<std::string_view, 3> kContentHolds = {"<tool_call>", "\n<tool_call>", "\n\n<tool_call>"};
constexpr std::array<std::string_view, 2> kValueHolds = {"</parameter>", "\n</parameter>"};

// Longer function or parameter names in the XML format make the call malformed.
constexpr size_t kMaxNameBytes = 1024;

std::string_view trim_ws(std::string_view s) {
    while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
    return s;
}

std::string_view strip_trailing_newlines(std::string_view s, int at_most) {
    for (int i = 0; i < at_most && !s.empty() && s.back() == '\n'; ++i) s.remove_suffix(1);
    return s;
}

enum class Match { Yes, Partial, No };

// Whether text starts with lit, is a proper prefix of it (more input could make it match), or neither.
Match match_literal(std::string_view text, std::string_view lit) {
    if (text.starts_with(lit)) return Match::Yes;
    if (lit.starts_with(text)) return Match::Partial;
    return Match::No;
}

// Length of the longest suffix of text that is a proper prefix of one of holds.
template <size_t N>
size_t held_suffix(std::string_view text, const std::array<std::string_view, N>& holds) {
    size_t best = 0;
    for (std::string_view h : holds) {
        for (size_t len = std::min(text.size(), h.size() - 1); len > best; --len) {
            if (text.substr(text.size() - len) == h.substr(0, len)) {
                best = len;
                break;
            }
        }
    }
    return best;
}

// JSON string escaping without the quotes. Bytes from 0x80 up pass through unchecked, so the
// result does not depend on where a multi-byte character was split.
void append_escaped(std::string& out, std::string_view s) {
    static constexpr char kHex[] = "0123456789abcdef";
    for (char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    out += "\\u00";
                    out += kHex[(c >> 4) & 0xf];
                    out += kHex[c & 0xf];
                } else {
                    out += c;
                }
        }
    }
}

// The value of a JSON string literal (already checked by a JsonScanner); nullopt when nlohmann
// rejects it (invalid UTF-8, a lone surrogate).
std::optional<std::string> decode_json_string(std::string_view literal) {
    const nlohmann::json j = nlohmann::json::parse(literal.begin(), literal.end(), nullptr, false);
    if (!j.is_string()) return std::nullopt;
    return j.get<std::string>();
}

// How an XML parameter value becomes JSON.
enum class ValueKind : uint8_t {
    Auto,    // no usable schema: JSON if it is a number, true/false/null, an object or an array
    String,  // always a string
    Json,    // parsed as any JSON value; a string when it does not parse
};

// The rule the XML call constraint writes values by (runtime/xml_call_constraint.h).
ValueKind value_kind(const nlohmann::json& schema) {
    switch (runtime::xml_value_reading(schema)) {
        case runtime::XmlValueReading::String: return ValueKind::String;
        case runtime::XmlValueReading::Json: return ValueKind::Json;
        case runtime::XmlValueReading::Either: break;
    }
    return ValueKind::Auto;
}

class QwenOutputParser final : public OutputParser {
public:
    QwenOutputParser(OutputFormat format, ParserOptions options);
    std::vector<OutputEvent> push(std::string_view piece) override;
    std::vector<OutputEvent> finish() override;

private:
    enum class Mode : uint8_t {
        Start,      // before the first byte that rules out an opening <think>
        Reasoning,  // inside <think>
        Content,    // answer text
        CallStart,  // after <tool_call>: which body?
        Hermes,     // in a JSON body
        Xml,        // in a <function=...> body
        AfterCall,  // a call's body ended: whitespace and </tool_call> are swallowed
    };
    // Hermes body: the outer {"name": ..., "arguments": ...} object.
    enum class HState : uint8_t { Open, KeyOrEnd, Key, Colon, ValueStart, Value, Comma };
    enum class Role : uint8_t { Key, Name, ArgsStream, ArgsBuffer, Skip };  // of the value being read
    // XML body.
    enum class XState : uint8_t { Function, FunctionName, Params, ParamName, ValueStart, Value };

    void run();
    bool step();  // one decision; false when more input is needed (or nothing is left)
    bool step_start();
    bool step_text(Kind kind);
    bool step_call_start();
    bool step_hermes();
    bool step_xml();
    bool step_after_call();

    // Hermes helpers.
    Role role_for_key(char first);
    bool end_hermes_value();  // false: the call failed
    bool close_hermes();
    std::optional<std::string> arguments_text(std::string_view value) const;
    // XML helpers.
    void start_param(const std::string& name);
    void release_value(std::string_view text);
    void close_value();

    void emit_text(Kind kind, std::string_view text);
    void begin_call(const std::string& name);
    void end_call();  // the body parsed: ToolCallEnd
    void fail_call();
    void cut_call();  // the output ended inside the call
    void reset_call();
    void take(size_t n);  // consume n bytes into the current call's raw text
    std::string_view rest() const { return std::string_view(buf_).substr(pos_); }

    const bool parse_thinking_, starts_in_thinking_, parse_tools_;
    std::unordered_map<std::string, std::unordered_map<std::string, ValueKind>> param_kinds_;

    std::string buf_;  // input not yet consumed starts at pos_
    size_t pos_ = 0;
    bool at_end_ = false;
    bool finished_ = false;
    std::vector<OutputEvent> out_;

    Mode mode_;
    size_t start_ws_ = 0;    // Start: whitespace already seen after pos_
    int skip_newlines_ = 0;  // formatting newlines still to drop at the start of the text

    // The call being read.
    std::string raw_;  // its text from <tool_call> on (with the newlines dropped before it)
    int index_ = -1;   // once begun
    int next_index_ = 0;
    bool begun_ = false;                       // ToolCallBegin is out
    bool args_seen_ = false;                   // Hermes: an arguments key was read
    bool args_done_ = false;                   // Hermes: the arguments were emitted whole
    std::optional<std::string> pending_args_;  // Hermes: arguments read before the name
    HState h_ = HState::Open;
    Role role_ = Role::Skip;
    std::string key_;
    XState x_ = XState::Function;
    std::string function_;
    int params_ = 0;
    ValueKind vkind_ = ValueKind::Auto;
    std::string name_;   // XML: the name being read
    std::string value_;  // the value being read, when it is kept
    JsonScanner scanner_;
};

QwenOutputParser::QwenOutputParser(OutputFormat format, ParserOptions options)
    : parse_thinking_(options.parse_thinking),
      starts_in_thinking_(options.parse_thinking && options.starts_in_thinking),
      parse_tools_(options.parse_tools && format != OutputFormat::Plain) {
    for (const ToolSpec& tool : options.tools) {
        auto& kinds = param_kinds_[tool.name];
        if (!tool.parameters.is_object()) continue;
        const auto props = tool.parameters.find("properties");
        if (props == tool.parameters.end() || !props->is_object()) continue;
        for (const auto& [name, schema] : props->items()) kinds.emplace(name, value_kind(schema));
    }
    mode_ = parse_thinking_ ? Mode::Start : Mode::Content;
}

std::vector<OutputEvent> QwenOutputParser::push(std::string_view piece) {
    if (finished_) throw std::logic_error("OutputParser::push after finish");
    buf_.append(piece);
    run();
    buf_.erase(0, pos_);
    pos_ = 0;
    return std::exchange(out_, {});
}

std::vector<OutputEvent> QwenOutputParser::finish() {
    if (finished_) return {};
    at_end_ = true;
    run();
    finished_ = true;
    buf_.clear();
    pos_ = 0;
    return std::exchange(out_, {});
}

void QwenOutputParser::run() {
    while (step()) {
    }
}

bool QwenOutputParser::step() {
    switch (mode_) {
        case Mode::Start: return step_start();
        case Mode::Reasoning: return step_text(Kind::Reasoning);
        case Mode::Content: return step_text(Kind::Content);
        case Mode::CallStart: return step_call_start();
        case Mode::Hermes: return step_hermes();
        case Mode::Xml: return step_xml();
        case Mode::AfterCall: return step_after_call();
    }
    return false;
}

bool QwenOutputParser::step_start() {
    size_t i = pos_ + start_ws_;
    while (i < buf_.size() && is_ws(buf_[i])) ++i;
    start_ws_ = i - pos_;
    const Match m = match_literal(std::string_view(buf_).substr(i), kThinkOpen);
    if (m == Match::Yes) {
        pos_ = i + kThinkOpen.size();
        mode_ = Mode::Reasoning;
        skip_newlines_ = 1;
        return true;
    }
    if (m == Match::Partial && !at_end_) return false;
    mode_ = starts_in_thinking_ ? Mode::Reasoning : Mode::Content;
    return true;
}

// Reasoning or content: text up to the closing tag (</think>, or <tool_call> when tools are parsed).
bool QwenOutputParser::step_text(Kind kind) {
    while (skip_newlines_ > 0 && pos_ < buf_.size() && buf_[pos_] == '\n') {
        ++pos_;
        --skip_newlines_;
    }
    if (pos_ == buf_.size()) return false;
    skip_newlines_ = 0;
    const std::string_view text = rest();
    const bool reasoning = kind == Kind::Reasoning;
    if (!reasoning && !parse_tools_) {
        emit_text(kind, text);
        pos_ = buf_.size();
        return false;
    }
    const std::string_view tag = reasoning ? kThinkClose : kCallOpen;
    const size_t at = text.find(tag);
    if (at != std::string_view::npos) {
        const std::string_view before = strip_trailing_newlines(text.substr(0, at), reasoning ? 1 : 2);
        emit_text(kind, before);
        if (reasoning) {
            mode_ = Mode::Content;
            skip_newlines_ = 2;
        } else {
            // The call's raw text keeps the newlines stripped before it, in case it fails.
            raw_.assign(text.substr(before.size(), at - before.size())).append(kCallOpen);
            mode_ = Mode::CallStart;
        }
        pos_ += at + tag.size();
        return true;
    }
    const size_t keep = at_end_ ? 0 : reasoning ? held_suffix(text, kReasoningHolds) : held_suffix(text, kContentHolds);
    emit_text(kind, text.substr(0, text.size() - keep));
    pos_ += text.size() - keep;
    return false;
}

bool QwenOutputParser::step_call_start() {
    size_t n = 0;
    while (pos_ + n < buf_.size() && is_ws(buf_[pos_ + n])) ++n;
    take(n);
    if (pos_ == buf_.size()) {
        if (!at_end_) return false;
        cut_call();
        return true;
    }
    // Either body is accepted whatever the format: models trained on one sometimes write the other.
    if (buf_[pos_] == '{') {
        mode_ = Mode::Hermes;
        h_ = HState::Open;
    } else if (buf_[pos_] == '<') {
        mode_ = Mode::Xml;
        x_ = XState::Function;
    } else {
        fail_call();
    }
    return true;
}

// ---- Hermes: <tool_call>\n{"name": "fn", "arguments": {...}}\n</tool_call> ----

QwenOutputParser::Role QwenOutputParser::role_for_key(char first) {
    if (key_ == "name" && !begun_) return Role::Name;
    if ((key_ == "arguments" || key_ == "parameters") && !args_seen_) {
        args_seen_ = true;
        // Streamed when it is an object and the name is known; otherwise kept until it ends.
        return first == '{' && begun_ ? Role::ArgsStream : Role::ArgsBuffer;
    }
    return Role::Skip;
}

// The JSON text of the arguments from the value of "arguments": an object as it is; a string
// holding an object (some models encode it) decoded; null as {}. Anything else is malformed.
std::optional<std::string> QwenOutputParser::arguments_text(std::string_view value) const {
    value = trim_ws(value);
    if (value.starts_with('{')) return std::string(value);
    if (value == "null") return std::string("{}");
    if (!value.starts_with('"')) return std::nullopt;
    std::optional<std::string> decoded = decode_json_string(value);
    if (!decoded) return std::nullopt;
    const std::string_view inner = trim_ws(*decoded);
    JsonScanner check;
    if (!inner.starts_with('{') || !check.feed(inner) || !check.complete()) return std::nullopt;
    return std::string(inner);
}

bool QwenOutputParser::end_hermes_value() {
    switch (role_) {
        case Role::Key: {
            std::optional<std::string> key = decode_json_string(value_);
            if (!key) break;
            key_ = std::move(*key);
            return true;
        }
        case Role::Name: {
            std::optional<std::string> name = decode_json_string(value_);
            if (!name || name->empty()) break;
            begin_call(*name);
            if (pending_args_) {
                emit_text(Kind::ToolCallArguments, *pending_args_);
                pending_args_.reset();
                args_done_ = true;
            }
            return true;
        }
        case Role::ArgsStream: args_done_ = true; return true;
        case Role::ArgsBuffer: {
            std::optional<std::string> args = arguments_text(value_);
            if (!args) break;
            if (begun_) {
                emit_text(Kind::ToolCallArguments, *args);
                args_done_ = true;
            } else {
                pending_args_ = std::move(args);
            }
            return true;
        }
        case Role::Skip: return true;
    }
    fail_call();
    return false;
}

bool QwenOutputParser::close_hermes() {
    if (!begun_) {  // no usable name
        fail_call();
        return true;
    }
    if (!args_done_) emit_text(Kind::ToolCallArguments, "{}");
    end_call();
    return true;
}

bool QwenOutputParser::step_hermes() {
    while (pos_ < buf_.size()) {
        const char c = buf_[pos_];
        switch (h_) {
            case HState::Open:
                if (is_ws(c)) {
                    take(1);
                } else if (c == '{') {
                    take(1);
                    h_ = HState::KeyOrEnd;
                } else {
                    fail_call();
                    return true;
                }
                break;
            case HState::KeyOrEnd:
            case HState::Key:
                if (is_ws(c)) {
                    take(1);
                } else if (c == '}' && h_ == HState::KeyOrEnd) {
                    take(1);
                    return close_hermes();
                } else if (c == '"') {
                    scanner_ = JsonScanner();
                    value_.clear();
                    role_ = Role::Key;
                    h_ = HState::Value;
                } else {
                    fail_call();
                    return true;
                }
                break;
            case HState::Colon:
                if (is_ws(c)) {
                    take(1);
                } else if (c == ':') {
                    take(1);
                    h_ = HState::ValueStart;
                } else {
                    fail_call();
                    return true;
                }
                break;
            case HState::ValueStart:
                if (is_ws(c)) {
                    take(1);
                } else {
                    scanner_ = JsonScanner();
                    value_.clear();
                    role_ = role_for_key(c);
                    h_ = HState::Value;
                }
                break;
            case HState::Value:
                if (!scanner_.feed(c)) {
                    // A number ends at the byte after it; anything else cannot continue the value.
                    if (role_ == Role::Key || !scanner_.complete()) {
                        fail_call();
                        return true;
                    }
                    if (!end_hermes_value()) return true;
                    h_ = HState::Comma;
                    break;
                }
                take(1);
                if (role_ == Role::ArgsStream) {
                    emit_text(Kind::ToolCallArguments, std::string_view(&c, 1));
                } else if (role_ != Role::Skip) {
                    value_ += c;
                }
                if (scanner_.closed()) {
                    const bool key = role_ == Role::Key;
                    if (!end_hermes_value()) return true;
                    h_ = key ? HState::Colon : HState::Comma;
                }
                break;
            case HState::Comma:
                if (is_ws(c)) {
                    take(1);
                } else if (c == ',') {
                    take(1);
                    h_ = HState::Key;
                } else if (c == '}') {
                    take(1);
                    return close_hermes();
                } else {
                    fail_call();
                    return true;
                }
                break;
        }
    }
    if (!at_end_) return false;
    cut_call();  // the output ended inside the object
    return true;
}

// ---- XML: <tool_call>\n<function=fn>\n<parameter=p>\nvalue\n</parameter>\n</function>\n</tool_call> ----

void QwenOutputParser::start_param(const std::string& name) {
    vkind_ = ValueKind::Auto;
    if (const auto tool = param_kinds_.find(function_); tool != param_kinds_.end())
        if (const auto kind = tool->second.find(name); kind != tool->second.end()) vkind_ = kind->second;
    std::string s;
    if (params_++ > 0) s += ", ";
    s += '"';
    append_escaped(s, name);
    s += "\": ";
    if (vkind_ == ValueKind::String) s += '"';
    emit_text(Kind::ToolCallArguments, s);
    scanner_ = JsonScanner();
    value_.clear();
}

// The next bytes of a parameter value: streamed as string contents, or kept while they may
// still be JSON. The first byte that cannot be makes it a string for good.
void QwenOutputParser::release_value(std::string_view text) {
    std::string s;
    for (size_t i = 0; i < text.size() && vkind_ != ValueKind::String; ++i) {
        const char c = text[i];
        // Without a schema a quoted value stays a string, quotes included.
        const bool json = !(vkind_ == ValueKind::Auto && !scanner_.started() && c == '"') && scanner_.feed(c);
        if (json) {
            value_ += c;
            continue;
        }
        vkind_ = ValueKind::String;
        s += '"';
        append_escaped(s, value_);
        value_.clear();
        text.remove_prefix(i);
    }
    if (vkind_ == ValueKind::String) append_escaped(s, text);
    emit_text(Kind::ToolCallArguments, s);
}

void QwenOutputParser::close_value() {
    std::string s;
    if (vkind_ != ValueKind::String && scanner_.complete()) {
        s = trim_ws(value_);
    } else {
        if (vkind_ != ValueKind::String) {
            s += '"';
            append_escaped(s, value_);
        }
        s += '"';
    }
    value_.clear();
    emit_text(Kind::ToolCallArguments, s);
}

bool QwenOutputParser::step_xml() {
    for (;;) {
        const std::string_view r = rest();
        switch (x_) {
            case XState::Function: {
                const Match m = match_literal(r, kFunctionOpen);
                if (m == Match::Yes) {
                    take(kFunctionOpen.size());
                    name_.clear();
                    x_ = XState::FunctionName;
                    break;
                }
                if (m == Match::Partial) {
                    if (!at_end_) return false;
                    take(r.size());
                    cut_call();
                    return true;
                }
                fail_call();
                return true;
            }
            case XState::FunctionName:
            case XState::ParamName: {
                size_t i = 0;
                for (; i < r.size() && r[i] != '>'; ++i) {
                    if (r[i] == '\n' || r[i] == '<' || name_.size() >= kMaxNameBytes) {
                        take(i);
                        fail_call();
                        return true;
                    }
                    name_ += r[i];
                }
                take(i);
                if (i == r.size()) {
                    if (!at_end_) return false;
                    cut_call();
                    return true;
                }
                take(1);  // '>'
                const std::string name(trim_ws(name_));
                if (name.empty()) {
                    fail_call();
                    return true;
                }
                if (x_ == XState::FunctionName) {
                    function_ = name;
                    begin_call(name);
                    emit_text(Kind::ToolCallArguments, "{");
                    x_ = XState::Params;
                } else {
                    start_param(name);
                    x_ = XState::ValueStart;
                }
                break;
            }
            case XState::Params: {
                size_t n = 0;
                while (n < r.size() && is_ws(r[n])) ++n;
                take(n);
                const std::string_view t = rest();
                const Match param = match_literal(t, kParamOpen);
                const Match function = match_literal(t, kFunctionClose);
                const Match call = match_literal(t, kCallClose);  // </function> left out
                if (param == Match::Yes) {
                    take(kParamOpen.size());
                    name_.clear();
                    x_ = XState::ParamName;
                    break;
                }
                if (function == Match::Yes || call == Match::Yes) {
                    take(function == Match::Yes ? kFunctionClose.size() : kCallClose.size());
                    emit_text(Kind::ToolCallArguments, "}");
                    end_call();
                    if (call == Match::Yes) {
                        mode_ = Mode::Content;
                        skip_newlines_ = 2;
                    }
                    return true;
                }
                if (param == Match::Partial || function == Match::Partial || call == Match::Partial) {
                    if (!at_end_) return false;
                    take(t.size());
                    cut_call();
                    return true;
                }
                fail_call();
                return true;
            }
            case XState::ValueStart:
                if (r.empty()) {
                    if (!at_end_) return false;
                    cut_call();
                    return true;
                }
                if (r.front() == '\n') take(1);
                x_ = XState::Value;
                break;
            case XState::Value: {
                const size_t at = r.find(kParamClose);
                if (at != std::string_view::npos) {
                    release_value(strip_trailing_newlines(r.substr(0, at), 1));
                    close_value();
                    take(at + kParamClose.size());
                    x_ = XState::Params;
                    break;
                }
                const size_t keep = held_suffix(r, kValueHolds);
                if (at_end_) {
                    // Cut inside the value: what could still be its closing tag is markup.
                    release_value(r.substr(0, r.size() - keep));
                    take(r.size());
                    cut_call();
                    return true;
                }
                release_value(r.substr(0, r.size() - keep));
                take(r.size() - keep);
                return false;
            }
        }
    }
}

// After a call's body: whitespace and an optional </tool_call> are formatting.
bool QwenOutputParser::step_after_call() {
    while (pos_ < buf_.size() && is_ws(buf_[pos_])) ++pos_;
    const Match m = match_literal(rest(), kCallClose);
    if (m == Match::Partial && !at_end_) return false;
    if (m == Match::Yes) pos_ += kCallClose.size();
    if (m == Match::Partial && !rest().empty()) pos_ = buf_.size();  // a cut </tool_call> is markup
    mode_ = Mode::Content;
    skip_newlines_ = m == Match::Yes ? 2 : 0;
    return true;
}

// ---- events and call bookkeeping ----

void QwenOutputParser::emit_text(Kind kind, std::string_view text) {
    if (text.empty()) return;
    const int index = kind == Kind::ToolCallArguments ? index_ : -1;
    if (!out_.empty() && out_.back().kind == kind && out_.back().index == index) {
        out_.back().text.append(text);
        return;
    }
    OutputEvent e;
    e.kind = kind;
    e.text = text;
    e.index = index;
    out_.push_back(std::move(e));
}

void QwenOutputParser::begin_call(const std::string& name) {
    index_ = next_index_++;
    begun_ = true;
    OutputEvent e;
    e.kind = Kind::ToolCallBegin;
    e.index = index_;
    e.name = name;
    out_.push_back(std::move(e));
}

void QwenOutputParser::take(size_t n) {
    raw_.append(buf_, pos_, n);
    pos_ += n;
}

void QwenOutputParser::reset_call() {
    raw_.clear();
    begun_ = args_seen_ = args_done_ = false;
    pending_args_.reset();
    function_.clear();
    params_ = 0;
    value_.clear();
}

void QwenOutputParser::end_call() {
    OutputEvent e;
    e.kind = Kind::ToolCallEnd;
    e.index = index_;
    out_.push_back(std::move(e));
    reset_call();
    mode_ = Mode::AfterCall;
}

// The call is malformed or cut off: its raw text so far becomes content, or, when its Begin is
// already out, the text of a failed ToolCallEnd. Parsing goes on as content at pos_.
void QwenOutputParser::fail_call() {
    if (begun_) {
        OutputEvent e;
        e.kind = Kind::ToolCallEnd;
        e.index = index_;
        e.complete = false;
        e.text = std::move(raw_);
        out_.push_back(std::move(e));
    } else {
        emit_text(Kind::Content, raw_);
    }
    reset_call();
    mode_ = Mode::Content;
    skip_newlines_ = 0;
}

// The output ended inside the call (max_tokens, most often). Before its name is complete there is
// no call to keep: the markup read so far is dropped. After, the call stands with the arguments
// so far and ends with ToolCallEnd{complete = false, truncated = true}; an XML call's arguments
// are closed into one object (the parameter being read, as far as it got, as a string or the
// JSON it is, and the closing brace), a Hermes call's are the model's JSON text as it was cut.
void QwenOutputParser::cut_call() {
    if (!begun_) {
        reset_call();
        mode_ = Mode::Content;
        skip_newlines_ = 0;
        return;
    }
    if (mode_ == Mode::Xml) {
        if (x_ == XState::ValueStart || x_ == XState::Value) close_value();
        emit_text(Kind::ToolCallArguments, "}");
    }
    OutputEvent e;
    e.kind = Kind::ToolCallEnd;
    e.index = index_;
    e.complete = false;
    e.truncated = true;
    out_.push_back(std::move(e));
    reset_call();
    mode_ = Mode::Content;
    skip_newlines_ = 0;
}

}  // namespace

const char* to_string(OutputFormat format) {
    switch (format) {
        case OutputFormat::Plain: return "plain";
        case OutputFormat::Qwen3Hermes: return "qwen3-hermes";
        case OutputFormat::Qwen3CoderXml: return "qwen3-coder-xml";
    }
    return "?";
}

OutputFormat detect_output_format(std::string_view chat_template_source) {
    if (chat_template_source.find(kFunctionOpen) != std::string_view::npos) return OutputFormat::Qwen3CoderXml;
    if (chat_template_source.find(kCallOpen) != std::string_view::npos) return OutputFormat::Qwen3Hermes;
    return OutputFormat::Plain;
}

bool template_has_thinking(std::string_view chat_template_source) {
    return chat_template_source.find(kThinkOpen) != std::string_view::npos;
}

bool prompt_opens_thinking(std::string_view rendered_prompt) { return trim_ws(rendered_prompt).ends_with(kThinkOpen); }

std::unique_ptr<OutputParser> make_output_parser(OutputFormat format, ParserOptions options) {
    return std::make_unique<QwenOutputParser>(format, std::move(options));
}

void ParsedOutput::add(const OutputEvent& event) {
    switch (event.kind) {
        case Kind::Reasoning: reasoning += event.text; break;
        case Kind::Content: content += event.text; break;
        case Kind::ToolCallBegin: tool_calls.push_back({event.name, ""}); break;
        case Kind::ToolCallArguments:
            if (!tool_calls.empty()) tool_calls.back().arguments_json += event.text;
            break;
        case Kind::ToolCallEnd:
            if (event.truncated) {
                if (!tool_calls.empty()) tool_calls.back().truncated = true;
            } else if (!event.complete) {
                if (!tool_calls.empty()) tool_calls.pop_back();
                content += event.text;
            }
            break;
    }
}

ParsedOutput parse_whole(OutputParser& parser, std::string_view text) {
    ParsedOutput out;
    for (const OutputEvent& e : parser.push(text)) out.add(e);
    for (const OutputEvent& e : parser.finish()) out.add(e);
    return out;
}

}  // namespace strata::serve
