#include "runtime/xml_call_constraint.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string_view>

#include "util/error.h"

namespace strata::runtime {

namespace {

using XPhase = XmlCallState::Phase;
using ParamKind = XmlCallGrammar::Param::Kind;

// The fixed pieces of the form, by XmlCallState::literal.
constexpr std::string_view kXmlLiterals[] = {
    "<parameter=",     // 0: then a parameter name
    "</function>",     // 1: then the end
    "</parameter>\n",  // 2: after a typed value's '\n'
};
constexpr uint8_t kXmlParamOpen = 0, kXmlFunctionClose = 1, kXmlParamClose = 2;
constexpr std::string_view kXmlValueEnd = "</parameter>";

uint32_t xml_length_bound(const nlohmann::ordered_json& schema, const char* key, uint32_t fallback) {
    const auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
        throw Error(std::string("'") + key + "' must be a non-negative integer");
    return static_cast<uint32_t>(std::min<uint64_t>(it->get<uint64_t>(), JsonGrammar::kUnlimited));
}

void xml_check_name(const std::string& name, const std::string& what) {
    if (name.empty() || name.find_first_of("<>\r\n") != std::string::npos)
        throw Error(what + " \"" + name + "\" cannot be written in the XML call form");
}

XmlCallGrammar::Param xml_compile_param(const std::string& name, const nlohmann::ordered_json& schema, bool required) {
    XmlCallGrammar::Param p;
    p.name = name;
    p.required = required;
    xml_check_name(name, "the parameter");
    switch (xml_value_reading(schema)) {
        case XmlValueReading::String: {
            for (const char* unsupported : {"pattern", "const"})
                if (schema.contains(unsupported)) throw Error(std::string("'") + unsupported + "' on a string parameter");
            if (const auto choices = schema.find("enum"); choices != schema.end()) {
                if (!choices->is_array() || choices->empty()) throw Error("'enum' must be a non-empty array");
                for (const auto& c : *choices) {
                    if (!c.is_string()) continue;  // a typed string enum keeps its strings
                    const std::string& v = c.get_ref<const std::string&>();
                    if (v.find('\n') != std::string::npos) throw Error("an enum choice with a line break");
                    if (v.find(kXmlValueEnd) != std::string::npos) continue;  // cannot be written
                    p.choices.push_back(v);
                }
                std::sort(p.choices.begin(), p.choices.end());
                p.choices.erase(std::unique(p.choices.begin(), p.choices.end()), p.choices.end());
                if (p.choices.empty()) throw Error("an enum with no choice that can be written");
                p.kind = ParamKind::Enum;
            } else {
                p.kind = ParamKind::Text;
                p.min_length = xml_length_bound(schema, "minLength", 0);
                p.max_length = xml_length_bound(schema, "maxLength", JsonGrammar::kUnlimited);
                if (p.min_length > p.max_length) throw Error("minLength above maxLength");
            }
            break;
        }
        case XmlValueReading::Json:
            p.kind = ParamKind::Json;
            p.json = JsonGrammar::from_ordered_schema(schema, JsonGrammarOptions{.max_depth = 16, .max_whitespace_run = 1});
            break;
        case XmlValueReading::Either: p.kind = ParamKind::Text; break;
    }
    return p;
}

// Continuation bytes a lead byte needs; -1: not a lead byte. [lo, hi]: the range of the first
// continuation byte (no overlong forms, no surrogates, nothing past U+10FFFF: RFC 3629).
int xml_utf8_needs(uint8_t c, uint8_t& lo, uint8_t& hi) {
    lo = 0x80;
    hi = 0xBF;
    if (c < 0x80) return 0;
    if (c >= 0xC2 && c <= 0xDF) return 1;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c >= 0xE0 && c <= 0xEF) return 2;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    if (c >= 0xF0 && c <= 0xF4) return 3;
    return -1;
}

// Whole characters a string value takes as they are (the same rules as step_text).
bool xml_plain_value_text(std::string_view bytes) {
    int left = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    for (const char ch : bytes) {
        const auto c = static_cast<uint8_t>(ch);
        if (left > 0) {
            if (c < lo || c > hi) return false;
            lo = 0x80;
            hi = 0xBF;
            --left;
            continue;
        }
        if (c == '<' || c == 0x7F || (c < 0x20 && c != '\t' && c != '\r' && c != '\n')) return false;
        left = xml_utf8_needs(c, lo, hi);
        if (left < 0) return false;
    }
    return left == 0;
}

}  // namespace

std::shared_ptr<const XmlTextIndex> XmlTextIndex::of(const std::shared_ptr<const TokenIndex>& index) {
    // One per vocabulary index, kept while some constraint uses it.
    static std::mutex mu;
    static std::map<const TokenIndex*, std::weak_ptr<const XmlTextIndex>> built;
    std::lock_guard lock(mu);
    if (auto it = built.find(index.get()); it != built.end())
        if (auto live = it->second.lock()) return live;
    auto t = std::make_shared<XmlTextIndex>();
    t->index = index;  // held: the pointer key cannot be reused while this lives
    t->plain = TokenMask::allowing_none(index->n_vocab());
    std::vector<std::pair<std::string_view, int32_t>> others;
    for (int32_t id = 0; id < index->n_vocab(); ++id) {
        if (!index->is_candidate(id)) continue;
        const std::string& bytes = index->bytes(id);
        if (!xml_plain_value_text(bytes)) {
            others.emplace_back(bytes, id);
            continue;
        }
        t->plain.allow(id);
        uint32_t chars = 0;
        for (const char ch : bytes) chars += (static_cast<uint8_t>(ch) & 0xC0) != 0x80;
        if (bytes.back() == '\n') --chars;
        t->plain_by_length.emplace_back(chars, id);
    }
    t->others.build(std::move(others));
    std::sort(t->plain_by_length.begin(), t->plain_by_length.end());
    for (auto it = built.begin(); it != built.end();) it = it->second.expired() ? built.erase(it) : std::next(it);
    built[index.get()] = t;
    return t;
}

std::shared_ptr<const XmlCallGrammar> XmlCallGrammar::from_tools(const nlohmann::ordered_json& tools, bool name_written) {
    if (!tools.is_array() || tools.empty()) throw Error("an XML call needs at least one tool");
    if (name_written && tools.size() != 1) throw Error("a call whose name is written has one tool");
    auto g = std::shared_ptr<XmlCallGrammar>(new XmlCallGrammar());
    g->name_written_ = name_written;
    for (const auto& t : tools) {
        if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) throw Error("each tool needs a name");
        Tool tool;
        tool.name = t["name"].get<std::string>();
        xml_check_name(tool.name, "the tool name");
        if (tool.name.front() == ' ' || tool.name.back() == ' ') throw Error("a tool name with surrounding spaces");
        const nlohmann::ordered_json schema = t.value("parameters", nlohmann::ordered_json::object());
        const auto props = schema.find("properties");
        if (!schema.is_object() || props == schema.end() || !props->is_object() || props->empty())
            throw Error("the tool \"" + tool.name + "\" lists no properties");
        if (props->size() > kMaxParams) throw Error("more than 64 properties");
        std::vector<std::string> required;
        if (const auto r = schema.find("required"); r != schema.end() && r->is_array())
            for (const auto& n : *r)
                if (n.is_string()) required.push_back(n.get<std::string>());
        for (const auto& name : required)
            if (!props->contains(name)) throw Error("the required property \"" + name + "\" is not listed");
        for (const auto& [name, sub] : props->items()) {
            const bool req = std::find(required.begin(), required.end(), name) != required.end();
            tool.params.push_back(xml_compile_param(name, sub, req));
        }
        tool.next_required.assign(tool.params.size() + 1, static_cast<uint32_t>(tool.params.size()));
        for (size_t i = tool.params.size(); i-- > 0;)
            tool.next_required[i] = tool.params[i].required ? static_cast<uint32_t>(i) : tool.next_required[i + 1];
        g->tools_.push_back(std::move(tool));
    }
    std::sort(g->tools_.begin(), g->tools_.end(), [](const Tool& a, const Tool& b) { return a.name < b.name; });
    for (size_t i = 1; i < g->tools_.size(); ++i)
        if (g->tools_[i].name == g->tools_[i - 1].name) throw Error("two tools named \"" + g->tools_[i].name + "\"");
    return g;
}

XmlCallConstraint::XmlCallConstraint(std::shared_ptr<const XmlCallGrammar> grammar, std::shared_ptr<const TokenIndex> index)
    : grammar_(std::move(grammar)), index_(std::move(index)) {
    if (!grammar_ || !index_) throw Error("xml call constraint: no grammar or token index");
    text_index_ = XmlTextIndex::of(index_);
    for (const auto& tool : grammar_->tools()) {
        auto& row = matchers_.emplace_back();
        for (const auto& p : tool.params)
            row.push_back(p.kind == ParamKind::Json ? std::make_unique<JsonMatcher>(p.json) : nullptr);
    }
    const size_t depth = index_->max_token_bytes() + 2;
    depth_states_.resize(depth);
    cursors_.resize(depth);
    key_marks_.resize(depth);
    state_.lo = 0;
    state_.hi = static_cast<uint32_t>(grammar_->tools().size());
    if (grammar_->name_written()) {
        state_.tool = 0;
        state_.next = 0;
        enter_between(state_);
    }
}

const XmlCallGrammar::Param& XmlCallConstraint::param_of(const XmlCallState& s) const {
    return grammar_->tools()[static_cast<size_t>(s.tool)].params[static_cast<size_t>(s.param)];
}

// After a value (or the function's name): "<parameter=" for a parameter that may come, or
// "</function>" once no required one is left.
void XmlCallConstraint::enter_between(XmlCallState& s) const {
    s.phase = XPhase::Between;
    s.pos = 0;
}

void XmlCallConstraint::start_value(XmlCallState& s) const {
    const auto& p = param_of(s);
    s.pos = 0;
    switch (p.kind) {
        case ParamKind::Text:
            s.phase = XPhase::Text;
            s.utf8_left = s.close = 0;
            s.newline = false;
            s.chars = 0;
            break;
        case ParamKind::Enum:
            s.phase = XPhase::Enum;
            s.lo = 0;
            s.hi = static_cast<uint32_t>(p.choices.size());
            break;
        case ParamKind::Json: {
            s.phase = XPhase::Json;
            JsonMatcher& m = *matchers_[static_cast<size_t>(s.tool)][static_cast<size_t>(s.param)];
            m.reset();
            s.json = m.state();
            break;
        }
    }
}

// A string value's next byte. Committed: `chars` code points; pending: a '\n' (newline) and the
// bytes of "</parameter>" matched after it (close) — either the value's end or content.
bool XmlCallConstraint::step_text(XmlCallState& s, const XmlCallGrammar::Param& p, uint8_t c) {
    // A partial "</parameter>" must lead somewhere: to the value's end (after its '\n', with
    // minLength met), or back to content that fits maxLength. Otherwise the byte is refused, so
    // the mask never leads into a dead end.
    auto live = [&p](const XmlCallState& t) {
        return (t.newline && t.chars >= p.min_length) ||
               static_cast<uint64_t>(t.chars) + t.close + (t.newline ? 1u : 0u) <= p.max_length;
    };
    if (s.utf8_left > 0) {
        if (c < s.utf8_lo || c > s.utf8_hi) return false;
        s.utf8_lo = 0x80;
        s.utf8_hi = 0xBF;
        if (--s.utf8_left == 0) ++s.chars;
        return true;
    }
    if (s.close > 0) {
        if (c == static_cast<uint8_t>(kXmlValueEnd[s.close])) {
            if (++s.close < kXmlValueEnd.size()) return live(s);
            // "</parameter>": the value's end only after its '\n'.
            if (!s.newline || s.chars < p.min_length) return false;
            s.phase = XPhase::Newline;
            s.after = XPhase::Between;
            return true;
        }
        // Not the end after all: the pending bytes are content.
        const uint32_t pending = s.close + (s.newline ? 1u : 0u);
        if (static_cast<uint64_t>(s.chars) + pending > p.max_length) return false;
        s.chars += pending;
        s.close = 0;
        s.newline = false;
    }
    if (c == '<') {
        s.close = 1;
        return live(s);
    }
    if (s.newline) {  // the pending '\n' was content
        if (s.chars + 1 > p.max_length) return false;
        ++s.chars;
        s.newline = false;
    }
    if (c == '\n') {
        s.newline = true;
        return true;
    }
    if (c < 0x20 && c != '\t' && c != '\r') return false;
    if (c == 0x7F) return false;
    uint8_t lo = 0x80, hi = 0xBF;
    const int left = xml_utf8_needs(c, lo, hi);
    if (left < 0) return false;
    if (s.chars + 1 > p.max_length) return false;
    if (left == 0) ++s.chars;
    s.utf8_left = static_cast<uint8_t>(left);
    s.utf8_lo = lo;
    s.utf8_hi = hi;
    return true;
}

bool XmlCallConstraint::step(XmlCallState& s, uint8_t c) {
    const auto& tools = grammar_->tools();
    switch (s.phase) {
        case XPhase::FnName: {
            if (c == '>') {
                if (s.lo >= s.hi || tools[s.lo].name.size() != s.pos) return false;  // sorted: the shortest first
                s.tool = static_cast<int32_t>(s.lo);
                s.next = 0;
                s.phase = XPhase::Newline;
                s.after = XPhase::Between;
                return true;
            }
            uint32_t lo = s.lo, hi = s.hi;
            while (lo < hi && (tools[lo].name.size() <= s.pos || static_cast<uint8_t>(tools[lo].name[s.pos]) < c)) ++lo;
            uint32_t end = lo;
            while (end < hi && tools[end].name.size() > s.pos && static_cast<uint8_t>(tools[end].name[s.pos]) == c) ++end;
            if (lo == end) return false;
            s.lo = lo;
            s.hi = end;
            ++s.pos;
            return true;
        }
        case XPhase::Newline:
            if (c != '\n') return false;
            if (s.after == XPhase::Between) enter_between(s);
            else start_value(s);
            return true;
        case XPhase::Between: {
            const auto& tool = tools[static_cast<size_t>(s.tool)];
            const uint32_t n = static_cast<uint32_t>(tool.params.size());
            const bool may_close = tool.next_required[s.next] == n;
            const bool may_param = s.next < n;
            if (s.pos == 0) {
                if (c != '<' || (!may_close && !may_param)) return false;
                s.pos = 1;
                return true;
            }
            uint8_t which;
            if (c == 'p' && may_param) which = kXmlParamOpen;
            else if (c == '/' && may_close) which = kXmlFunctionClose;
            else return false;
            s.phase = XPhase::Literal;
            s.literal = which;
            s.pos = 2;
            if (which == kXmlParamOpen) {
                s.after = XPhase::ParamName;
                // Any parameter from `next` up to and including the first required one.
                const uint32_t last = std::min(tool.next_required[s.next], n - 1);
                s.candidates = 0;
                for (uint32_t i = s.next; i <= last; ++i) s.candidates |= uint64_t{1} << i;
            } else {
                s.after = XPhase::Done;
            }
            return true;
        }
        case XPhase::Literal: {
            const std::string_view lit = kXmlLiterals[s.literal];
            if (c != static_cast<uint8_t>(lit[s.pos])) return false;
            if (++s.pos < lit.size()) return true;
            s.pos = 0;
            if (s.after == XPhase::ParamName) s.phase = XPhase::ParamName;
            else if (s.after == XPhase::Done) s.phase = XPhase::Done;
            else enter_between(s);
            return true;
        }
        case XPhase::ParamName: {
            const auto& params = tools[static_cast<size_t>(s.tool)].params;
            uint64_t left = 0;
            for (uint64_t m = s.candidates; m != 0; m &= m - 1) {
                const int i = __builtin_ctzll(m);
                const std::string& name = params[static_cast<size_t>(i)].name;
                if (c == '>' ? name.size() == s.pos : name.size() > s.pos && static_cast<uint8_t>(name[s.pos]) == c)
                    left |= uint64_t{1} << i;
            }
            if (left == 0) return false;
            if (c == '>') {
                s.param = __builtin_ctzll(left);
                s.next = static_cast<uint32_t>(s.param) + 1;
                s.phase = XPhase::Newline;
                s.after = XPhase::Text;  // a value follows
                return true;
            }
            s.candidates = left;
            ++s.pos;
            return true;
        }
        case XPhase::Text: return step_text(s, param_of(s), c);
        case XPhase::Enum: {
            const auto& choices = param_of(s).choices;
            if (c == '\n') {
                if (s.lo >= s.hi || choices[s.lo].size() != s.pos) return false;
                s.phase = XPhase::Literal;
                s.literal = kXmlParamClose;
                s.pos = 0;
                s.after = XPhase::Between;
                return true;
            }
            uint32_t lo = s.lo;
            while (lo < s.hi && (choices[lo].size() <= s.pos || static_cast<uint8_t>(choices[lo][s.pos]) < c)) ++lo;
            uint32_t end = lo;
            while (end < s.hi && choices[end].size() > s.pos && static_cast<uint8_t>(choices[end][s.pos]) == c) ++end;
            if (lo == end) return false;
            s.lo = lo;
            s.hi = end;
            ++s.pos;
            return true;
        }
        case XPhase::Json: {
            JsonMatcher& m = *matchers_[static_cast<size_t>(s.tool)][static_cast<size_t>(s.param)];
            if (c == '\n' && m.can_end(s.json)) {  // a complete value takes no whitespace after it
                s.phase = XPhase::Literal;
                s.literal = kXmlParamClose;
                s.pos = 0;
                s.after = XPhase::Between;
                return true;
            }
            if (!m.advance(s.json, c, json_scratch_)) return false;
            std::swap(s.json, json_scratch_);
            return true;
        }
        case XPhase::Done: return false;
    }
    return false;
}

bool XmlCallConstraint::advance(const XmlCallState& src, uint8_t byte, XmlCallState& dst) {
    dst = src;
    return step(dst, byte);
}

void XmlCallConstraint::allowed(TokenMask& mask) {
    mask.reset(index_->n_vocab(), false);
    if (ended_ || must_end()) {
        for (const int32_t id : index_->end_tokens()) mask.allow(id);
        return;
    }
    if (state_.phase == XPhase::Text && state_.utf8_left == 0 && state_.close == 0) {
        // Between characters: the plain tokens that fit (a pending '\n' becomes content first).
        const uint64_t used = static_cast<uint64_t>(state_.chars) + (state_.newline ? 1 : 0);
        const uint32_t max = param_of(state_).max_length;
        const auto& by_length = text_index_->plain_by_length;
        if (max == JsonGrammar::kUnlimited || (!by_length.empty() && used + by_length.back().first <= max)) {
            for (size_t w = 0; w < mask.words.size(); ++w) mask.words[w] |= text_index_->plain.words[w];
        } else {
            for (const auto& [chars, id] : by_length) {
                if (used + chars > max) break;
                mask.allow(id);
            }
        }
        walk(text_index_->others, mask);
    } else {
        walk(index_->all_tokens(), mask);
    }
}

void XmlCallConstraint::walk(const TokenTrie& trie, TokenMask& mask) {
    const TokenTrie::Node& root = trie.node(0);
    if (root.n_children == 0) return;
    // Keys of extra JSON properties the walk adds are forgotten between siblings (json_matcher.h).
    std::vector<ExtraKey>* keys = nullptr;
    if (state_.phase == XPhase::Json)
        keys = &matchers_[static_cast<size_t>(state_.tool)][static_cast<size_t>(state_.param)]->extra_keys();
    size_t depth = 0;
    cursors_[0] = {root.first_child, root.first_child + root.n_children};
    key_marks_[0] = keys ? keys->size() : 0;
    for (;;) {
        Cursor& cur = cursors_[depth];
        if (cur.next_child == cur.end_child) {
            if (depth == 0) break;
            --depth;
            continue;
        }
        const uint32_t child = cur.next_child++;
        if (keys) keys->resize(key_marks_[depth]);
        const XmlCallState& parent = depth == 0 ? state_ : depth_states_[depth];
        const TokenTrie::Node& n = trie.node(child);
        if (!advance(parent, n.byte, depth_states_[depth + 1])) continue;
        for (const int32_t* id = trie.tokens_begin(child); id != trie.tokens_end(child); ++id) mask.allow(*id);
        if (n.n_children > 0) {
            ++depth;
            cursors_[depth] = {n.first_child, n.first_child + n.n_children};
            key_marks_[depth] = keys ? keys->size() : 0;
        }
    }
    if (keys) keys->resize(key_marks_[0]);
}

bool XmlCallConstraint::would_accept(int32_t token) {
    if (ended_ || must_end()) return index_->is_end(token);
    if (!index_->is_candidate(token)) return false;
    XmlCallState s = state_;
    for (const char ch : index_->bytes(token))
        if (!step(s, static_cast<uint8_t>(ch))) return false;
    return true;
}

void XmlCallConstraint::accept(int32_t token) {
    if (ended_) throw Error("xml call constraint: token " + std::to_string(token) + " after the end of generation");
    if (index_->is_end(token)) {
        if (!must_end()) throw Error("xml call constraint: end token " + std::to_string(token) + " before the call is complete");
        ended_ = true;
        return;
    }
    if (!index_->is_candidate(token))
        throw Error("xml call constraint: token " + std::to_string(token) + " cannot be part of a tool call");
    XmlCallState s = state_;
    for (const char ch : index_->bytes(token))
        if (!step(s, static_cast<uint8_t>(ch)))
            throw Error("xml call constraint: token " + std::to_string(token) + " does not continue the call");
    state_ = std::move(s);
    text_ += index_->bytes(token);
}

}  // namespace strata::runtime
