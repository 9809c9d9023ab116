// The str, dict, list and tuple methods that jinja2's immutable sandbox lets templates call,
// with Python's semantics (indices count code points; whitespace is Unicode whitespace).
#include <algorithm>

#include "template/jinja_eval.h"
#include "template/jinja_ops.h"
#include "template/jinja_text.h"

namespace strata::tmpl {

namespace {

using MethodFn = Value (*)(const Value& self, const CallArgs& args);

class BoundMethod : public Object {
public:
    BoundMethod(Value self, MethodFn fn, std::string_view name) : self_(std::move(self)), fn_(fn), name_(name) {}
    std::string type_name() const override { return "builtin_function_or_method"; }
    bool callable() const override { return true; }
    Value call(Interpreter&, const CallArgs& args) const override { return fn_(self_, args); }
    std::string to_str() const override { return "<built-in method " + name_ + " of " + tmpl::type_name(self_) + " object>"; }

private:
    Value self_;
    MethodFn fn_;
    std::string name_;
};

const std::string& want_str(const Value& v, std::string_view what) {
    if (v.is_undefined()) raise_undefined(v);
    if (!v.is_string()) type_error(std::string(what) + " must be str, not " + type_name(v));
    return v.str();
}

// The code point index of byte offset `byte` in s.
int64_t code_index(const std::string& s, size_t byte) {
    return static_cast<int64_t>(text::length(std::string_view(s).substr(0, byte)));
}

// s[start:end] for the optional start/end arguments of find, count, startswith, ...
std::string window(const Value& self, const Value& start, const Value& end, int64_t& offset) {
    offset = 0;
    if (!given(start) && !given(end)) return self.str();
    Value part = slice(self, start, end, Value());
    if (given(start)) {
        int64_t s = to_index(start, "slice index");
        const auto n = static_cast<int64_t>(text::length(self.str()));
        if (s < 0) s = std::max<int64_t>(0, s + n);
        offset = std::min(s, n);
    }
    return part.str();
}

// ---- str ------------------------------------------------------------------------------------

std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit, bool from_right) {
    std::vector<std::pair<size_t, size_t>> words;  // byte ranges
    size_t pos = 0, word_start = 0;
    bool in_word = false;
    while (pos < s.size()) {
        const size_t at = pos;
        const bool space = text::is_space(text::decode(s, pos));
        if (space && in_word) words.emplace_back(word_start, at), in_word = false;
        else if (!space && !in_word) word_start = at, in_word = true;
    }
    if (in_word) words.emplace_back(word_start, s.size());
    std::vector<std::string> out;
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
        for (auto [b, e] : words) out.push_back(s.substr(b, e - b));
        return out;
    }
    // Python keeps the rest of the string after the last split as it is (from the next word on).
    const auto keep = static_cast<size_t>(maxsplit);
    if (!from_right) {
        for (size_t k = 0; k < keep; ++k) out.push_back(s.substr(words[k].first, words[k].second - words[k].first));
        out.push_back(s.substr(words[keep].first));
    } else {
        const size_t first_kept = words.size() - keep;
        out.push_back(s.substr(0, words[first_kept - 1].second));
        for (size_t k = first_kept; k < words.size(); ++k)
            out.push_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
    return out;
}

Value string_list(std::vector<std::string> parts) {
    ListData out;
    out.reserve(parts.size());
    for (auto& p : parts) out.emplace_back(std::move(p));
    return Value::list(std::move(out));
}

Value split_impl(const Value& self, const CallArgs& args, bool from_right) {
    const auto a = args.bind(from_right ? "rsplit" : "split", {"sep", "maxsplit"});
    const int64_t maxsplit = given(a[1]) ? to_index(a[1], "maxsplit") : -1;
    const std::string& s = self.str();
    if (!given(a[0])) return string_list(split_whitespace(s, maxsplit, from_right));
    const std::string& sep = want_str(a[0], "sep");
    if (sep.empty()) fail("ValueError", "empty separator");
    std::vector<std::string> parts;
    if (!from_right) {
        size_t start = 0;
        for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
            const size_t at = s.find(sep, start);
            if (at == std::string::npos) break;
            parts.push_back(s.substr(start, at - start));
            start = at + sep.size();
        }
        parts.push_back(s.substr(start));
    } else {
        size_t end = s.size();
        for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
            if (end < sep.size()) break;
            const size_t at = s.rfind(sep, end - sep.size());
            if (at == std::string::npos) break;
            parts.push_back(s.substr(at + sep.size(), end - at - sep.size()));
            end = at;
        }
        parts.push_back(s.substr(0, end));
        std::reverse(parts.begin(), parts.end());
    }
    return string_list(std::move(parts));
}

Value m_split(const Value& self, const CallArgs& args) { return split_impl(self, args, false); }
Value m_rsplit(const Value& self, const CallArgs& args) { return split_impl(self, args, true); }

Value m_splitlines(const Value& self, const CallArgs& args) {
    const auto a = args.bind("splitlines", {"keepends"});
    const bool keep = a[0].truthy();
    const std::string& s = self.str();
    std::vector<std::string> parts;
    size_t line_start = 0, pos = 0;
    while (pos < s.size()) {
        const size_t at = pos;
        const char32_t c = text::decode(s, pos);
        const bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                              c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!is_break) continue;
        if (c == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
        parts.push_back(s.substr(line_start, (keep ? pos : at) - line_start));
        line_start = pos;
    }
    if (line_start < s.size()) parts.push_back(s.substr(line_start));
    return string_list(std::move(parts));
}

Value strip_impl(const Value& self, const CallArgs& args, const char* name, bool left, bool right) {
    const auto a = args.bind(name, {"chars"});
    if (!given(a[0])) return Value(text::strip(self.str(), left, right));
    return Value(text::strip(self.str(), left, right, &want_str(a[0], "chars")));
}
Value m_strip(const Value& self, const CallArgs& args) { return strip_impl(self, args, "strip", true, true); }
Value m_lstrip(const Value& self, const CallArgs& args) { return strip_impl(self, args, "lstrip", true, false); }
Value m_rstrip(const Value& self, const CallArgs& args) { return strip_impl(self, args, "rstrip", false, true); }

Value affix_impl(const Value& self, const CallArgs& args, const char* name, bool prefix) {
    const auto a = args.bind(name, {"affix", "start", "end"});
    int64_t offset = 0;
    const std::string s = window(self, a[1], a[2], offset);
    auto matches = [&](const Value& v) {
        const std::string& x = want_str(v, std::string(name) + " first arg");
        if (x.size() > s.size()) return false;
        return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (a[0].kind() == Kind::Tuple) {
        for (const Value& v : a[0].items())
            if (matches(v)) return Value(true);
        return Value(false);
    }
    if (!a[0].is_string()) type_error(std::string(name) + " first arg must be str or a tuple of str, not " + type_name(a[0]));
    return Value(matches(a[0]));
}
Value m_startswith(const Value& self, const CallArgs& args) { return affix_impl(self, args, "startswith", true); }
Value m_endswith(const Value& self, const CallArgs& args) { return affix_impl(self, args, "endswith", false); }

Value m_replace(const Value& self, const CallArgs& args) {
    const auto a = args.bind("replace", {"old", "new", "count"});
    const std::string& old = want_str(a[0], "replace() argument 1");
    const std::string& repl = want_str(a[1], "replace() argument 2");
    int64_t count = given(a[2]) ? to_index(a[2], "count") : -1;
    const std::string& s = self.str();
    std::string out;
    if (old.empty()) {
        // Python inserts the replacement before every code point and at the end.
        size_t pos = 0;
        while (count != 0) {
            out += repl;
            if (count > 0) --count;
            if (pos >= s.size()) return Value(std::move(out));
            const size_t start = pos;
            text::decode(s, pos);
            out.append(s, start, pos - start);
            if (out.size() > kMaxBuiltSize) fail("MemoryError", "value too large");
        }
        out.append(s, pos);
        return Value(std::move(out));
    }
    size_t start = 0;
    while (count != 0) {
        const size_t at = s.find(old, start);
        if (at == std::string::npos) break;
        out.append(s, start, at - start);
        out += repl;
        start = at + old.size();
        if (count > 0) --count;
        if (out.size() > kMaxBuiltSize) fail("MemoryError", "value too large");
    }
    out.append(s, start);
    return Value(std::move(out));
}

Value find_impl(const Value& self, const CallArgs& args, const char* name, bool from_right, bool raise) {
    const auto a = args.bind(name, {"sub", "start", "end"});
    const std::string& sub = want_str(a[0], "must be str");
    int64_t offset = 0;
    const std::string s = window(self, a[1], a[2], offset);
    const size_t at = from_right ? s.rfind(sub) : s.find(sub);
    if (at == std::string::npos) {
        if (raise) fail("ValueError", "substring not found");
        return Value(int64_t{-1});
    }
    return Value(offset + code_index(s, at));
}
Value m_find(const Value& self, const CallArgs& args) { return find_impl(self, args, "find", false, false); }
Value m_rfind(const Value& self, const CallArgs& args) { return find_impl(self, args, "rfind", true, false); }
Value m_index(const Value& self, const CallArgs& args) { return find_impl(self, args, "index", false, true); }
Value m_rindex(const Value& self, const CallArgs& args) { return find_impl(self, args, "rindex", true, true); }

Value m_count(const Value& self, const CallArgs& args) {
    const auto a = args.bind("count", {"sub", "start", "end"});
    const std::string& sub = want_str(a[0], "must be str");
    int64_t offset = 0;
    const std::string s = window(self, a[1], a[2], offset);
    if (sub.empty()) return Value(static_cast<int64_t>(text::length(s)) + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
}

Value m_join(const Value& self, const CallArgs& args) {
    const auto a = args.bind("join", {"iterable"});
    const ListData items = iterate(a[0]);
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
        if (!items[k].is_string())
            type_error("sequence item " + std::to_string(k) + ": expected str instance, " + type_name(items[k]) + " found");
        if (k) out += self.str();
        out += items[k].str();
        if (out.size() > kMaxBuiltSize) fail("MemoryError", "value too large");
    }
    return Value(std::move(out));
}

Value m_upper(const Value& self, const CallArgs& args) {
    args.bind("upper", {});
    return Value(text::upper(self.str()));
}
Value m_lower(const Value& self, const CallArgs& args) {
    args.bind("lower", {});
    return Value(text::lower(self.str()));
}
Value m_title(const Value& self, const CallArgs& args) {
    args.bind("title", {});
    return Value(text::title(self.str()));
}
Value m_capitalize(const Value& self, const CallArgs& args) {
    args.bind("capitalize", {});
    return Value(text::capitalize(self.str()));
}
Value m_swapcase(const Value& self, const CallArgs& args) {
    args.bind("swapcase", {});
    std::string out;
    const std::string& s = self.str();
    for (size_t pos = 0; pos < s.size();) {
        const char32_t c = text::decode(s, pos);
        text::encode(out, text::is_upper_cased(c) ? text::to_lower(c) : text::to_upper(c));
    }
    return Value(std::move(out));
}

template <bool (*Pred)(char32_t)>
Value char_class(const Value& self, const CallArgs& args) {
    args.bind("is...", {});
    const std::string& s = self.str();
    if (s.empty()) return Value(false);
    for (size_t pos = 0; pos < s.size();)
        if (!Pred(text::decode(s, pos))) return Value(false);
    return Value(true);
}
bool alnum(char32_t c) { return text::is_alpha(c) || text::is_digit(c); }

Value case_check(const Value& self, bool want_lower) {
    bool any_cased = false;
    const std::string& s = self.str();
    for (size_t pos = 0; pos < s.size();) {
        const char32_t c = text::decode(s, pos);
        if (want_lower ? text::is_upper_cased(c) : text::is_lower_cased(c)) return Value(false);
        if (text::is_upper_cased(c) || text::is_lower_cased(c)) any_cased = true;
    }
    return Value(any_cased);
}
Value m_islower(const Value& self, const CallArgs& args) {
    args.bind("islower", {});
    return case_check(self, true);
}
Value m_isupper(const Value& self, const CallArgs& args) {
    args.bind("isupper", {});
    return case_check(self, false);
}

Value justify(const Value& self, const CallArgs& args, const char* name, int where) {
    const auto a = args.bind(name, {"width", "fillchar"});
    const int64_t width = to_index(a[0], "width");
    std::string fill = " ";
    if (given(a[1])) {
        fill = want_str(a[1], "fillchar");
        if (text::length(fill) != 1) type_error("The fill character must be exactly one character long");
    }
    const std::string& s = self.str();
    const auto len = static_cast<int64_t>(text::length(s));
    if (width <= len) return self;
    if (width > static_cast<int64_t>(kMaxBuiltSize)) fail("MemoryError", "value too large");
    const int64_t total = width - len;
    // Python's center puts an odd extra fill character on the left when the width is odd.
    int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
    std::string out;
    for (int64_t k = 0; k < left; ++k) out += fill;
    out += s;
    for (int64_t k = 0; k < total - left; ++k) out += fill;
    return Value(std::move(out));
}
Value m_center(const Value& self, const CallArgs& args) { return justify(self, args, "center", 0); }
Value m_ljust(const Value& self, const CallArgs& args) { return justify(self, args, "ljust", -1); }
Value m_rjust(const Value& self, const CallArgs& args) { return justify(self, args, "rjust", 1); }

Value m_zfill(const Value& self, const CallArgs& args) {
    const auto a = args.bind("zfill", {"width"});
    const int64_t width = to_index(a[0], "width");
    std::string s = self.str();
    const auto len = static_cast<int64_t>(text::length(s));
    if (width <= len) return self;
    if (width > static_cast<int64_t>(kMaxBuiltSize)) fail("MemoryError", "value too large");
    const size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    s.insert(sign, static_cast<size_t>(width - len), '0');
    return Value(std::move(s));
}

Value partition_impl(const Value& self, const CallArgs& args, bool from_right) {
    const auto a = args.bind(from_right ? "rpartition" : "partition", {"sep"});
    const std::string& sep = want_str(a[0], "sep");
    if (sep.empty()) fail("ValueError", "empty separator");
    const std::string& s = self.str();
    const size_t at = from_right ? s.rfind(sep) : s.find(sep);
    if (at == std::string::npos) {
        if (from_right) return Value::tuple({Value(std::string()), Value(std::string()), self});
        return Value::tuple({self, Value(std::string()), Value(std::string())});
    }
    return Value::tuple({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))});
}
Value m_partition(const Value& self, const CallArgs& args) { return partition_impl(self, args, false); }
Value m_rpartition(const Value& self, const CallArgs& args) { return partition_impl(self, args, true); }

Value m_removeprefix(const Value& self, const CallArgs& args) {
    const std::string& p = want_str(args.bind("removeprefix", {"prefix"})[0], "removeprefix() argument");
    const std::string& s = self.str();
    return s.compare(0, p.size(), p) == 0 && p.size() <= s.size() ? Value(s.substr(p.size())) : self;
}
Value m_removesuffix(const Value& self, const CallArgs& args) {
    const std::string& p = want_str(args.bind("removesuffix", {"suffix"})[0], "removesuffix() argument");
    const std::string& s = self.str();
    if (p.empty() || p.size() > s.size() || s.compare(s.size() - p.size(), p.size(), p) != 0) return self;
    return Value(s.substr(0, s.size() - p.size()));
}

// str.format with automatic, positional and keyword fields, !s / !r conversions and a format
// spec of [[fill]align][width][.precision][type].
std::string apply_format_spec(const Value& v, std::string_view spec) {
    if (spec.empty()) return to_str(v);
    size_t k = 0;
    std::string fill = " ";
    char align = 0;
    {
        size_t p = 0;
        text::decode(spec, p);
        if (p < spec.size() && std::string_view("<>^=").find(spec[p]) != std::string_view::npos) {
            fill = std::string(spec.substr(0, p));
            align = spec[p];
            k = p + 1;
        } else if (std::string_view("<>^=").find(spec[0]) != std::string_view::npos) {
            align = spec[0];
            k = 1;
        }
    }
    std::string flags;
    if (k < spec.size() && (spec[k] == '+' || spec[k] == '-' || spec[k] == ' ')) flags += spec[k++];
    if (k < spec.size() && spec[k] == '0') {
        if (!align) fill = "0", align = '=';
        ++k;
    }
    int width = 0, precision = -1;
    while (k < spec.size() && spec[k] >= '0' && spec[k] <= '9') width = std::min(10000, width * 10 + (spec[k++] - '0'));
    if (k < spec.size() && spec[k] == '.') {
        precision = 0;
        ++k;
        while (k < spec.size() && spec[k] >= '0' && spec[k] <= '9')
            precision = std::min(1000, precision * 10 + (spec[k++] - '0'));
    }
    const char type = k < spec.size() ? spec[k++] : 0;
    if (k != spec.size()) fail("ValueError", "Invalid format specifier");
    std::string body;
    if (type == 0 || type == 's') {
        if (v.is_string() || type == 's') {
            body = to_str(v);
            if (precision >= 0) {
                const auto at = text::offsets(body);
                if (static_cast<size_t>(precision) + 1 < at.size()) body.resize(at[static_cast<size_t>(precision)]);
            }
        } else if (v.is_float() && precision >= 0) {
            body = percent_format("%" + flags + "." + std::to_string(precision) + "g", v);
        } else {
            body = percent_format("%" + flags + "s", v);
        }
    } else {
        std::string f = "%" + flags;
        if (precision >= 0) f += "." + std::to_string(precision);
        f += type == 'n' ? 'd' : type;
        body = percent_format(f, v);
    }
    const auto len = static_cast<int>(text::length(body));
    if (len >= width) return body;
    const int total = width - len;
    if (!align) align = (v.is_number() && !v.is_string()) ? '>' : '<';
    std::string out;
    auto repeat = [&](int n) {
        for (int i = 0; i < n; ++i) out += fill;
    };
    if (align == '<') out = body, repeat(total);
    else if (align == '>') repeat(total), out += body;
    else if (align == '^') repeat(total / 2), out += body, repeat(total - total / 2);
    else {  // '=': padding after the sign
        const size_t sign = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
        out = body.substr(0, sign);
        repeat(total);
        out += body.substr(sign);
    }
    return out;
}

Value m_format(const Value& self, const CallArgs& args) {
    const std::string& f = self.str();
    std::string out;
    size_t auto_index = 0;
    for (size_t k = 0; k < f.size(); ++k) {
        const char c = f[k];
        if (c == '}') {
            if (k + 1 < f.size() && f[k + 1] == '}') ++k;
            else fail("ValueError", "Single '}' encountered in format string");
            out += '}';
            continue;
        }
        if (c != '{') {
            out += c;
            continue;
        }
        if (k + 1 < f.size() && f[k + 1] == '{') {
            out += '{';
            ++k;
            continue;
        }
        const size_t close = f.find('}', k);
        if (close == std::string::npos) fail("ValueError", "Single '{' encountered in format string");
        std::string_view field(f.data() + k + 1, close - k - 1);
        k = close;
        std::string_view spec;
        char conversion = 0;
        if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
            spec = field.substr(colon + 1);
            field = field.substr(0, colon);
        }
        if (const size_t bang = field.find('!'); bang != std::string_view::npos) {
            if (bang + 2 != field.size()) fail("ValueError", "expected ':' after conversion specifier");
            conversion = field[bang + 1];
            field = field.substr(0, bang);
        }
        Value v;
        if (field.empty()) {
            if (auto_index >= args.positional.size())
                fail("IndexError", "Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
            v = args.positional[auto_index++];
        } else if (field[0] >= '0' && field[0] <= '9') {
            size_t index = 0;
            for (char d : field) {
                if (d < '0' || d > '9') fail("ValueError", "unsupported format field");
                index = index * 10 + static_cast<size_t>(d - '0');
                if (index > 1000000) break;
            }
            if (index >= args.positional.size())
                fail("IndexError", "Replacement index " + std::to_string(index) + " out of range for positional args tuple");
            v = args.positional[index];
        } else {
            const auto it = std::find_if(args.named.begin(), args.named.end(), [&](const auto& p) { return p.first == field; });
            if (it == args.named.end()) fail("KeyError", text::repr(field));
            v = it->second;
        }
        if (conversion == 'r' || conversion == 'a') v = Value(repr(v));
        else if (conversion == 's') v = Value(to_str(v));
        else if (conversion) fail("ValueError", std::string("Unknown conversion specifier ") + conversion);
        out += apply_format_spec(v, spec);
        if (out.size() > kMaxBuiltSize) fail("MemoryError", "value too large");
    }
    return Value(std::move(out));
}

// ---- dict, list, tuple ----------------------------------------------------------------------

Value m_items(const Value& self, const CallArgs& args) {
    args.bind("items", {});
    ListData out;
    out.reserve(self.dict_data().size());
    for (const auto& [k, v] : self.dict_data().entries) out.push_back(Value::tuple({k, v}));
    return Value::list(std::move(out));
}
Value m_keys(const Value& self, const CallArgs& args) {
    args.bind("keys", {});
    return Value::list(iterate(self));
}
Value m_values(const Value& self, const CallArgs& args) {
    args.bind("values", {});
    ListData out;
    for (const auto& [k, v] : self.dict_data().entries) out.push_back(v);
    return Value::list(std::move(out));
}
Value m_get(const Value& self, const CallArgs& args) {
    if (args.positional.empty() || args.positional.size() > 2 || !args.named.empty())
        type_error("get expected 1 or 2 arguments, got " + std::to_string(args.positional.size()));
    if (const Value* v = self.dict_data().find(args.positional[0])) return *v;
    return args.positional.size() == 2 ? args.positional[1] : Value::none();
}
Value m_copy(const Value& self, const CallArgs& args) {
    args.bind("copy", {});
    return self.is_dict() ? Value::dict(self.dict_data()) : Value::list(self.items());
}
Value m_list_index(const Value& self, const CallArgs& args) {
    const auto a = args.bind("index", {"value"});
    const auto& items = self.items();
    for (size_t k = 0; k < items.size(); ++k)
        if (equals(items[k], a[0])) return Value(static_cast<int64_t>(k));
    fail("ValueError", repr(a[0]) + " is not in " + type_name(self));
}
Value m_list_count(const Value& self, const CallArgs& args) {
    const auto a = args.bind("count", {"value"});
    int64_t n = 0;
    for (const Value& v : self.items()) n += equals(v, a[0]) ? 1 : 0;
    return Value(n);
}

struct MethodEntry {
    std::string_view name;
    MethodFn fn;
};

constexpr MethodEntry kStrMethods[] = {
    {"startswith", m_startswith},
    {"endswith", m_endswith},
    {"split", m_split},
    {"rsplit", m_rsplit},
    {"splitlines", m_splitlines},
    {"strip", m_strip},
    {"lstrip", m_lstrip},
    {"rstrip", m_rstrip},
    {"replace", m_replace},
    {"find", m_find},
    {"rfind", m_rfind},
    {"index", m_index},
    {"rindex", m_rindex},
    {"count", m_count},
    {"join", m_join},
    {"upper", m_upper},
    {"lower", m_lower},
    {"casefold", m_lower},
    {"title", m_title},
    {"capitalize", m_capitalize},
    {"swapcase", m_swapcase},
    {"isdigit", char_class<text::is_digit>},
    {"isdecimal", char_class<text::is_digit>},
    {"isnumeric", char_class<text::is_digit>},
    {"isalpha", char_class<text::is_alpha>},
    {"isalnum", char_class<alnum>},
    {"isspace", char_class<text::is_space>},
    {"islower", m_islower},
    {"isupper", m_isupper},
    {"center", m_center},
    {"ljust", m_ljust},
    {"rjust", m_rjust},
    {"zfill", m_zfill},
    {"partition", m_partition},
    {"rpartition", m_rpartition},
    {"removeprefix", m_removeprefix},
    {"removesuffix", m_removesuffix},
    {"format", m_format},
};
constexpr MethodEntry kDictMethods[] = {
    {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"get", m_get}, {"copy", m_copy},
};
constexpr MethodEntry kListMethods[] = {{"index", m_list_index}, {"count", m_list_count}, {"copy", m_copy}};
constexpr MethodEntry kTupleMethods[] = {{"index", m_list_index}, {"count", m_list_count}};

template <size_t N>
MethodFn lookup(const MethodEntry (&table)[N], std::string_view name) {
    for (const auto& e : table)
        if (e.name == name) return e.fn;
    return nullptr;
}

}  // namespace

Value find_method(const Value& obj, std::string_view name) {
    MethodFn fn = nullptr;
    switch (obj.kind()) {
        case Kind::String: fn = lookup(kStrMethods, name); break;
        case Kind::Dict: fn = lookup(kDictMethods, name); break;
        case Kind::List: fn = lookup(kListMethods, name); break;
        case Kind::Tuple: fn = lookup(kTupleMethods, name); break;
        default: break;
    }
    if (!fn) return Value();
    return Value::object(std::make_shared<BoundMethod>(obj, fn, name));
}

}  // namespace strata::tmpl
