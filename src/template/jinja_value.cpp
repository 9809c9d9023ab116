#include "template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "template/jinja_text.h"

namespace strata::tmpl {

namespace {

// Printing, comparing and serialising recurse into containers; a namespace can be made to hold
// itself, so the depth is bounded the way Python's recursion limit bounds it.
constexpr int kMaxValueDepth = 512;

void check_depth(int depth) {
    if (depth > kMaxValueDepth) fail("RecursionError", "maximum recursion depth exceeded");
}

}  // namespace

void fail(std::string type, std::string message) { throw RuntimeFailure(std::move(type), message); }
void type_error(std::string message) { fail("TypeError", std::move(message)); }

// ---- construction ---------------------------------------------------------------------------

Value::Value(std::string s) : kind_(Kind::String), ptr_(std::make_shared<std::string>(std::move(s))) {}

Value Value::undefined(std::string hint, bool security) {
    Value v;
    v.ptr_ = std::make_shared<UndefinedInfo>(UndefinedInfo{std::move(hint), security});
    return v;
}

Value Value::markup(std::string s) {
    Value v(std::move(s));
    v.scalar_.b = true;
    return v;
}

Value Value::none() {
    Value v;
    v.kind_ = Kind::None;
    return v;
}

Value Value::list(ListData items) {
    Value v;
    v.kind_ = Kind::List;
    v.ptr_ = std::make_shared<ListData>(std::move(items));
    return v;
}

Value Value::tuple(ListData items) {
    Value v = list(std::move(items));
    v.kind_ = Kind::Tuple;
    return v;
}

Value Value::dict(DictData items) {
    Value v;
    v.kind_ = Kind::Dict;
    v.ptr_ = std::make_shared<DictData>(std::move(items));
    return v;
}

Value Value::make_namespace(DictData items) {
    Value v = dict(std::move(items));
    v.kind_ = Kind::Namespace;
    return v;
}

Value Value::object(std::shared_ptr<Object> obj) {
    Value v;
    v.kind_ = Kind::Object;
    v.ptr_ = std::move(obj);
    return v;
}

bool Value::truthy() const {
    switch (kind_) {
        case Kind::Undefined:
        case Kind::None: return false;
        case Kind::Bool: return scalar_.b;
        case Kind::Int: return scalar_.i != 0;
        case Kind::Float: return scalar_.f != 0.0;
        case Kind::String: return !str().empty();
        case Kind::List:
        case Kind::Tuple: return !items().empty();
        case Kind::Dict: return dict_data().size() != 0;
        case Kind::Namespace:
        case Kind::Object: return true;
    }
    return false;
}

// ---- dict -----------------------------------------------------------------------------------

const Value* DictData::find(std::string_view key) const {
    for (const auto& [k, v] : entries)
        if (k.is_string() && k.str() == key) return &v;
    return nullptr;
}

const Value* DictData::find(const Value& key) const {
    if (key.is_string()) return find(std::string_view(key.str()));
    for (const auto& [k, v] : entries)
        if (equals(k, key)) return &v;
    return nullptr;
}

void DictData::set(Value key, Value value) {
    for (auto& [k, v] : entries) {
        if (equals(k, key)) {
            v = std::move(value);
            return;
        }
    }
    entries.emplace_back(std::move(key), std::move(value));
}

// ---- calls ----------------------------------------------------------------------------------

std::vector<Value> CallArgs::bind(std::string_view fn, std::initializer_list<std::string_view> params) const {
    std::vector<Value> out(params.size());
    std::vector<bool> set(params.size(), false);
    if (positional.size() > params.size()) {
        type_error(std::string(fn) + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
                   std::to_string(positional.size()) + " given)");
    }
    for (size_t k = 0; k < positional.size(); ++k) out[k] = positional[k], set[k] = true;
    for (const auto& [name, value] : named) {
        size_t k = 0;
        for (auto p = params.begin(); p != params.end(); ++p, ++k)
            if (*p == name) break;
        if (k == params.size()) type_error(std::string(fn) + "() got an unexpected keyword argument '" + name + "'");
        if (set[k]) type_error(std::string(fn) + "() got multiple values for argument '" + name + "'");
        out[k] = value, set[k] = true;
    }
    return out;
}

Value Object::attribute(std::string_view name) const {
    return Value::undefined("'" + type_name() + " object' has no attribute '" + std::string(name) + "'");
}

Value Object::call(Interpreter&, const CallArgs&) const { type_error("'" + type_name() + "' object is not callable"); }

// ---- names and printing ---------------------------------------------------------------------

std::string type_name(const Value& v) {
    switch (v.kind()) {
        case Kind::Undefined: return "Undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::String: return v.is_markup() ? "Markup" : "str";
        case Kind::List: return "list";
        case Kind::Tuple: return "tuple";
        case Kind::Dict: return "dict";
        case Kind::Namespace: return "Namespace";
        case Kind::Object: return v.obj().type_name();
    }
    return "object";
}

std::string object_type_repr(const Value& v) {
    if (v.is_none()) return "None";
    return type_name(v) + " object";
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    // Shortest round-trip digits, then Python's layout: positional notation for decimal
    // exponents in [-4, 16), scientific otherwise, and always a digit after the point.
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
    std::string out;
    if (sci.front() == '-') {
        out += '-';
        sci.remove_prefix(1);
    }
    const size_t e_pos = sci.find('e');
    std::string digits;
    for (char c : sci.substr(0, e_pos))
        if (c != '.') digits += c;
    int exp = 0;
    std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exp);
    if (exp < -4 || exp >= 16) {
        out += digits[0];
        if (digits.size() > 1) {
            out += '.';
            out.append(digits, 1);
        }
        char ebuf[16];
        std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        out += ebuf;
    } else if (exp < 0) {
        out += "0.";
        out.append(static_cast<size_t>(-exp - 1), '0');
        out += digits;
    } else {
        const size_t int_digits = static_cast<size_t>(exp) + 1;
        if (digits.size() <= int_digits) {
            out += digits;
            out.append(int_digits - digits.size(), '0');
            out += ".0";
        } else {
            out.append(digits, 0, int_digits);
            out += '.';
            out.append(digits, int_digits);
        }
    }
    return out;
}

namespace {

void append_repr(std::string& out, const Value& v, int depth);

void append_items(std::string& out, const ListData& items, int depth) {
    for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += ", ";
        append_repr(out, items[k], depth + 1);
    }
}

void append_dict(std::string& out, const DictData& d, int depth) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : d.entries) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, k, depth + 1);
        out += ": ";
        append_repr(out, v, depth + 1);
    }
    out += '}';
}

void append_printed(std::string& out, const Value& v, int depth, bool as_repr) {
    check_depth(depth);
    switch (v.kind()) {
        case Kind::Undefined:
            if (as_repr) out += "Undefined";
            break;
        case Kind::None: out += "None"; break;
        case Kind::Bool: out += v.get_bool() ? "True" : "False"; break;
        case Kind::Int: out += std::to_string(v.get_int()); break;
        case Kind::Float: out += float_repr(v.get_float()); break;
        case Kind::String:
            if (as_repr && v.is_markup()) out += "Markup(" + text::repr(v.str()) + ")";
            else if (as_repr) out += text::repr(v.str());
            else out += v.str();
            break;
        case Kind::List:
            out += '[';
            append_items(out, v.items(), depth);
            out += ']';
            break;
        case Kind::Tuple:
            out += '(';
            append_items(out, v.items(), depth);
            if (v.items().size() == 1) out += ',';
            out += ')';
            break;
        case Kind::Dict: append_dict(out, v.dict_data(), depth); break;
        case Kind::Namespace:
            out += "<Namespace ";
            append_dict(out, v.namespace_data(), depth);
            out += '>';
            break;
        case Kind::Object: out += v.obj().to_str(); break;
    }
}

void append_repr(std::string& out, const Value& v, int depth) { append_printed(out, v, depth, true); }

}  // namespace

void append_str(std::string& out, const Value& v) {
    if (v.is_string()) out += v.str();
    else append_printed(out, v, 0, false);
}

std::string to_str(const Value& v) {
    if (v.is_string()) return v.str();
    std::string out;
    append_printed(out, v, 0, false);
    return out;
}

std::string repr(const Value& v) {
    std::string out;
    append_printed(out, v, 0, true);
    return out;
}

std::string html_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

[[noreturn]] void raise_undefined(const Value& v) {
    const Value::UndefinedInfo* info = v.undefined_info();
    if (!info) fail("UndefinedError", "value is undefined");
    fail(info->security ? "SecurityError" : "UndefinedError", info->hint);
}

// ---- comparison -----------------------------------------------------------------------------

namespace {

bool equals_at(const Value& a, const Value& b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.float_value() == b.float_value();
        return a.int_value() == b.int_value();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Kind::Undefined:
        case Kind::None: return true;
        case Kind::String: return a.str() == b.str();
        case Kind::List:
        case Kind::Tuple: {
            const auto &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            for (size_t k = 0; k < x.size(); ++k)
                if (!equals_at(x[k], y[k], depth + 1)) return false;
            return true;
        }
        case Kind::Dict: {
            const auto &x = a.dict_data(), &y = b.dict_data();
            if (x.size() != y.size()) return false;
            for (const auto& [k, v] : x.entries) {
                const Value* other = y.find(k);
                if (!other || !equals_at(v, *other, depth + 1)) return false;
            }
            return true;
        }
        default: return a.identity() == b.identity();
    }
}

}  // namespace

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }

bool less_than(const Value& a, const Value& b) {
    if (a.is_undefined()) raise_undefined(a);
    if (b.is_undefined()) raise_undefined(b);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.float_value() < b.float_value();
        return a.int_value() < b.int_value();
    }
    if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order is code point order
    if (a.kind() == b.kind() && a.is_sequence_data()) {
        const auto &x = a.items(), &y = b.items();
        for (size_t k = 0; k < x.size() && k < y.size(); ++k)
            if (!equals(x[k], y[k])) return less_than(x[k], y[k]);
        return x.size() < y.size();
    }
    type_error("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// ---- JSON -----------------------------------------------------------------------------------

namespace {

struct JsonWriter {
    const JsonOptions& opt;
    std::string& out;

    void newline(int level) {
        // Indentation multiplies the size of deep values: bound it like every built string.
        if (out.size() > (size_t{64} << 20)) fail("MemoryError", "value too large");
        out += '\n';
        for (int k = 0; k < level; ++k) out += opt.indent;
    }

    void number(const Value& v) {
        if (v.is_bool()) {
            out += v.get_bool() ? "true" : "false";
        } else if (v.is_int()) {
            out += std::to_string(v.get_int());
        } else {
            const double d = v.get_float();
            if (std::isnan(d)) out += "NaN";
            else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
            else out += float_repr(d);
        }
    }

    std::string key_text(const Value& k) {
        if (k.is_string()) return k.str();
        if (k.is_none()) return "null";
        if (k.is_number()) {
            std::string s;
            std::swap(s, out);
            number(k);
            std::swap(s, out);
            return s;
        }
        type_error("keys must be str, int, float, bool or None, not " + type_name(k));
    }

    void write(const Value& v, int level) {
        check_depth(level);
        switch (v.kind()) {
            case Kind::None: out += "null"; return;
            case Kind::Bool:
            case Kind::Int:
            case Kind::Float: number(v); return;
            case Kind::String: text::append_json_string(out, v.str(), opt.ensure_ascii); return;
            case Kind::List:
            case Kind::Tuple: {
                const auto& items = v.items();
                if (items.empty()) {
                    out += "[]";
                    return;
                }
                out += '[';
                for (size_t k = 0; k < items.size(); ++k) {
                    if (k) out += opt.item_separator;
                    if (opt.has_indent) newline(level + 1);
                    write(items[k], level + 1);
                }
                if (opt.has_indent) newline(level);
                out += ']';
                return;
            }
            case Kind::Dict: {
                const auto& d = v.dict_data();
                if (d.size() == 0) {
                    out += "{}";
                    return;
                }
                std::vector<const std::pair<Value, Value>*> entries;
                entries.reserve(d.size());
                for (const auto& e : d.entries) entries.push_back(&e);
                if (opt.sort_keys) {
                    std::stable_sort(entries.begin(), entries.end(),
                                     [](const auto* a, const auto* b) { return less_than(a->first, b->first); });
                }
                out += '{';
                bool first = true;
                for (const auto* e : entries) {
                    if (!first) out += opt.item_separator;
                    first = false;
                    if (opt.has_indent) newline(level + 1);
                    text::append_json_string(out, key_text(e->first), opt.ensure_ascii);
                    out += opt.key_separator;
                    write(e->second, level + 1);
                }
                if (opt.has_indent) newline(level);
                out += '}';
                return;
            }
            default: type_error("Object of type " + type_name(v) + " is not JSON serializable");
        }
    }
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
    JsonOptions opt = options;
    if (!opt.has_separators && opt.has_indent) opt.item_separator = ",";  // json.dumps' default with indent
    std::string out;
    JsonWriter{opt, out}.write(v, 0);
    return out;
}

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
    if (depth > kMaxValueDepth) throw Error("JSON value nested more than " + std::to_string(kMaxValueDepth) + " deep");
    switch (j.type()) {
        case nlohmann::json::value_t::null: return Value::none();
        case nlohmann::json::value_t::boolean: return Value(j.get<bool>());
        case nlohmann::json::value_t::number_integer: return Value(j.get<int64_t>());
        case nlohmann::json::value_t::number_unsigned: {
            const auto u = j.get<uint64_t>();
            if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
            return Value(static_cast<double>(u));
        }
        case nlohmann::json::value_t::number_float: return Value(j.get<double>());
        case nlohmann::json::value_t::string: return Value(j.get_ref<const std::string&>());
        case nlohmann::json::value_t::array: {
            ListData items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
            return Value::list(std::move(items));
        }
        case nlohmann::json::value_t::object: {
            DictData d;
            d.entries.reserve(j.size());
            for (const auto& [k, e] : j.items()) d.entries.emplace_back(Value(k), from_json_at(e, depth + 1));
            return Value::dict(std::move(d));
        }
        default: return Value::none();  // binary and discarded values do not come from text
    }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

}  // namespace strata::tmpl
