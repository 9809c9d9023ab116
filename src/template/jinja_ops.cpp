#include "template/jinja_ops.h"

#include <cmath>
#include <cstdio>

#include "template/jinja_text.h"

namespace strata::tmpl {

namespace {

const char* op_symbol(BinOp op) {
    switch (op) {
        case BinOp::Add: return "+";
        case BinOp::Sub: return "-";
        case BinOp::Mul: return "*";
        case BinOp::Div: return "/";
        case BinOp::FloorDiv: return "//";
        case BinOp::Mod: return "%";
        case BinOp::Pow: return "** or pow()";
    }
    return "?";
}

[[noreturn]] void unsupported(BinOp op, const Value& a, const Value& b) {
    type_error(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": '" + type_name(a) + "' and '" + type_name(b) +
               "'");
}

void check_size(size_t n) {
    if (n > kMaxBuiltSize) fail("MemoryError", "value too large (over " + std::to_string(kMaxBuiltSize) + " bytes or items)");
}

// Python ints are unbounded; past 64 bits the result carries on as a float.
Value int_result(bool overflow, int64_t r, double approx) { return overflow ? Value(approx) : Value(r); }

Value float_floor_div(double a, double b) {
    if (b == 0.0) fail("ZeroDivisionError", "float floor division by zero");
    const double mod = std::fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0.0 && ((b < 0) != (mod < 0))) div -= 1.0;
    if (div == 0.0) return Value(std::copysign(0.0, a / b));
    double floored = std::floor(div);
    if (div - floored > 0.5) floored += 1.0;
    return Value(floored);
}

Value float_mod(double a, double b) {
    if (b == 0.0) fail("ZeroDivisionError", "float modulo");
    double mod = std::fmod(a, b);
    if (mod != 0.0) {
        if ((b < 0) != (mod < 0)) mod += b;
    } else {
        mod = std::copysign(0.0, b);
    }
    return Value(mod);
}

Value int_pow(int64_t base, int64_t exp) {
    if (exp < 0) {
        if (base == 0) fail("ZeroDivisionError", "0.0 cannot be raised to a negative power");
        return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
    }
    int64_t result = 1, b = base;
    bool overflow = false;
    for (int64_t e = exp; e > 0 && !overflow; e >>= 1) {
        if (e & 1) overflow |= __builtin_mul_overflow(result, b, &result);
        if (e > 1) overflow |= __builtin_mul_overflow(b, b, &b);
    }
    return int_result(overflow, result, std::pow(static_cast<double>(base), static_cast<double>(exp)));
}

Value repeat(const Value& seq, int64_t times) {
    if (times <= 0)
        return seq.is_string() ? Value(std::string()) : seq.kind() == Kind::Tuple ? Value::tuple({}) : Value::list({});
    const size_t unit = seq.is_string() ? seq.str().size() : seq.items().size();
    if (unit != 0 && static_cast<uint64_t>(times) > kMaxBuiltSize / unit) check_size(kMaxBuiltSize + 1);
    if (seq.is_string()) {
        std::string out;
        out.reserve(unit * static_cast<size_t>(times));
        for (int64_t k = 0; k < times; ++k) out += seq.str();
        return Value(std::move(out));
    }
    ListData out;
    out.reserve(unit * static_cast<size_t>(times));
    for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.items().begin(), seq.items().end());
    return seq.kind() == Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace

int64_t to_index(const Value& v, std::string_view what) {
    if (v.is_int() || v.is_bool()) return v.int_value();
    type_error(std::string(what) + " must be an integer, not " + type_name(v));
}

Value binary_op(BinOp op, const Value& a, const Value& b) {
    if (a.is_undefined()) raise_undefined(a);
    if (b.is_undefined()) raise_undefined(b);
    const bool numbers = a.is_number() && b.is_number();
    const bool any_float = a.is_float() || b.is_float();
    switch (op) {
        case BinOp::Add: {
            if (numbers) {
                if (any_float) return Value(a.float_value() + b.float_value());
                int64_t r;
                const bool o = __builtin_add_overflow(a.int_value(), b.int_value(), &r);
                return int_result(o, r, a.float_value() + b.float_value());
            }
            if (a.is_string() && b.is_string()) {
                if (a.is_markup() || b.is_markup()) {
                    // Markup.__add__ / __radd__: the plain side is escaped, the result is Markup.
                    std::string out = a.is_markup() ? a.str() : html_escape(a.str());
                    out += b.is_markup() ? b.str() : html_escape(b.str());
                    check_size(out.size());
                    return Value::markup(std::move(out));
                }
                check_size(a.str().size() + b.str().size());
                return Value(a.str() + b.str());
            }
            if (a.is_markup() || b.is_markup()) unsupported(op, a, b);
            if (a.is_sequence_data() && a.kind() == b.kind()) {
                check_size(a.items().size() + b.items().size());
                ListData out = a.items();
                out.insert(out.end(), b.items().begin(), b.items().end());
                return a.kind() == Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
            }
            if (a.is_string() || a.is_sequence_data())
                type_error("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
            unsupported(op, a, b);
        }
        case BinOp::Sub: {
            if (!numbers) unsupported(op, a, b);
            if (any_float) return Value(a.float_value() - b.float_value());
            int64_t r;
            const bool o = __builtin_sub_overflow(a.int_value(), b.int_value(), &r);
            return int_result(o, r, a.float_value() - b.float_value());
        }
        case BinOp::Mul: {
            if (numbers) {
                if (any_float) return Value(a.float_value() * b.float_value());
                int64_t r;
                const bool o = __builtin_mul_overflow(a.int_value(), b.int_value(), &r);
                return int_result(o, r, a.float_value() * b.float_value());
            }
            const bool a_seq = a.is_string() || a.is_sequence_data();
            const bool b_seq = b.is_string() || b.is_sequence_data();
            if (a_seq && (b.is_int() || b.is_bool())) {
                Value r = repeat(a, b.int_value());
                return a.is_markup() ? Value::markup(r.str()) : r;
            }
            if (b_seq && (a.is_int() || a.is_bool())) {
                Value r = repeat(b, a.int_value());
                return b.is_markup() ? Value::markup(r.str()) : r;
            }
            if (a_seq || b_seq) type_error("can't multiply sequence by non-int of type '" + type_name(a_seq ? b : a) + "'");
            unsupported(op, a, b);
        }
        case BinOp::Div: {
            if (!numbers) unsupported(op, a, b);
            if (b.float_value() == 0.0) fail("ZeroDivisionError", "division by zero");
            return Value(a.float_value() / b.float_value());
        }
        case BinOp::FloorDiv: {
            if (!numbers) unsupported(op, a, b);
            if (any_float) return float_floor_div(a.float_value(), b.float_value());
            const int64_t x = a.int_value(), y = b.int_value();
            if (y == 0) fail("ZeroDivisionError", "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return Value(-static_cast<double>(x));
            int64_t q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
            return Value(q);
        }
        case BinOp::Mod: {
            if (a.is_markup()) return Value::markup(percent_format(a.str(), b, true));
            if (a.is_string()) return Value(percent_format(a.str(), b));
            if (!numbers) unsupported(op, a, b);
            if (any_float) return float_mod(a.float_value(), b.float_value());
            const int64_t x = a.int_value(), y = b.int_value();
            if (y == 0) fail("ZeroDivisionError", "integer modulo by zero");
            if (y == -1) return Value(int64_t{0});
            int64_t r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            return Value(r);
        }
        case BinOp::Pow: {
            if (!numbers) unsupported(op, a, b);
            if (!any_float) return int_pow(a.int_value(), b.int_value());
            if (a.float_value() == 0.0 && b.float_value() < 0)
                fail("ZeroDivisionError", "0.0 cannot be raised to a negative power");
            return Value(std::pow(a.float_value(), b.float_value()));
        }
    }
    unsupported(op, a, b);
}

Value negate(const Value& v) {
    if (v.is_undefined()) raise_undefined(v);
    if (v.is_float()) return Value(-v.get_float());
    if (v.is_int() || v.is_bool()) {
        if (v.int_value() == INT64_MIN) return Value(-static_cast<double>(v.int_value()));
        return Value(-v.int_value());
    }
    type_error("bad operand type for unary -: '" + type_name(v) + "'");
}

Value unary_plus(const Value& v) {
    if (v.is_undefined()) raise_undefined(v);
    if (v.is_float()) return v;
    if (v.is_int() || v.is_bool()) return Value(v.int_value());
    type_error("bad operand type for unary +: '" + type_name(v) + "'");
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind()) {
        case Kind::String:
            if (!item.is_string()) {
                if (item.is_undefined()) raise_undefined(item);
                type_error("'in <string>' requires string as left operand, not " + type_name(item));
            }
            return container.str().find(item.str()) != std::string::npos;
        case Kind::List:
        case Kind::Tuple:
            for (const Value& v : container.items())
                if (equals(v, item)) return true;
            return false;
        case Kind::Dict: return container.dict_data().find(item) != nullptr;
        case Kind::Undefined: return false;  // jinja2's Undefined iterates as empty
        default: type_error("argument of type '" + type_name(container) + "' is not iterable");
    }
}

namespace {

bool is_mutating_method(const Value& obj, std::string_view name) {
    if (obj.is_dict()) {
        for (std::string_view m : {"clear", "pop", "popitem", "setdefault", "update"})
            if (name == m) return true;
    } else if (obj.kind() == Kind::List) {
        for (std::string_view m : {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"})
            if (name == m) return true;
    }
    return false;
}

Value unsafe_attribute(const Value& obj, std::string_view name) {
    return Value::undefined("access to attribute '" + std::string(name) + "' of '" + type_name(obj) + "' object is unsafe.",
                            true);
}

Value no_attribute(const Value& obj, std::string_view name) {
    return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + std::string(name) + "'");
}

Value no_element(const Value& obj, const Value& key) {
    return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
}

// Python attributes other than methods: the sandbox refuses names starting with an underscore.
Value attribute_of(const Value& obj, std::string_view name, bool& found) {
    found = true;
    if (!name.empty() && name[0] == '_') {
        found = false;
        return Value();
    }
    if (obj.is_object()) {
        Value v = obj.obj().attribute(name);
        found = !v.is_undefined();
        return v;
    }
    if (obj.is_namespace()) {
        if (const Value* v = obj.namespace_data().find(name)) return *v;
        found = false;
        return Value();
    }
    if (is_mutating_method(obj, name)) return unsafe_attribute(obj, name);
    Value m = find_method(obj, name);
    found = !m.is_undefined();
    return m;
}

}  // namespace

Value get_attr(const Value& obj, std::string_view name) {
    if (obj.is_undefined()) raise_undefined(obj);
    bool found = false;
    Value v = attribute_of(obj, name, found);
    if (found) return v;
    if (obj.is_dict()) {
        if (const Value* item = obj.dict_data().find(name)) return *item;
    }
    if (obj.is_namespace())
        return Value::undefined("'jinja2.utils.Namespace object' has no attribute '" + std::string(name) + "'");
    if (obj.is_object()) return obj.obj().attribute(name);
    return no_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) raise_undefined(obj);
    if (key.is_undefined() && !obj.is_dict()) raise_undefined(key);
    switch (obj.kind()) {
        case Kind::Dict:
            if (const Value* v = obj.dict_data().find(key)) return *v;
            break;
        case Kind::List:
        case Kind::Tuple:
        case Kind::String:
            if (key.is_int() || key.is_bool()) {
                int64_t i = key.int_value();
                if (obj.is_string()) {
                    const std::string& s = obj.str();
                    if (text::is_ascii(s)) {
                        const auto n = static_cast<int64_t>(s.size());
                        if (i < 0) i += n;
                        if (i < 0 || i >= n) return no_element(obj, key);
                        return Value(s.substr(static_cast<size_t>(i), 1));
                    }
                    const std::vector<size_t> at = text::offsets(s);
                    const auto n = static_cast<int64_t>(at.size() - 1);
                    if (i < 0) i += n;
                    if (i < 0 || i >= n) return no_element(obj, key);
                    const auto k = static_cast<size_t>(i);
                    return Value(s.substr(at[k], at[k + 1] - at[k]));
                }
                const auto& items = obj.items();
                const auto n = static_cast<int64_t>(items.size());
                if (i < 0) i += n;
                if (i < 0 || i >= n) return no_element(obj, key);
                return items[static_cast<size_t>(i)];
            }
            break;
        default: break;
    }
    if (key.is_string()) {
        bool found = false;
        Value v = attribute_of(obj, key.str(), found);
        if (found) return v;
        if (obj.is_object()) return obj.obj().attribute(key.str());
        return no_attribute(obj, key.str());
    }
    return no_element(obj, key);
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
    if (obj.is_undefined()) raise_undefined(obj);
    auto part = [](const Value& v, int64_t fallback) {
        if (v.is_undefined() || v.is_none()) return fallback;
        if (v.is_int() || v.is_bool()) return v.int_value();
        type_error("slice indices must be integers or None or have an __index__ method");
    };
    const int64_t step = part(step_v, 1);
    if (step == 0) fail("ValueError", "slice step cannot be zero");
    const bool is_str = obj.is_string();
    if (!is_str && !obj.is_sequence_data()) {
        return Value::undefined(object_type_repr(obj) + " has no element slice(" +
                                repr(start_v.is_undefined() ? Value::none() : start_v) + ", " +
                                repr(stop_v.is_undefined() ? Value::none() : stop_v) + ", " +
                                repr(step_v.is_undefined() ? Value::none() : step_v) + ")");
    }
    std::vector<size_t> at;
    int64_t n;
    if (is_str) {
        if (text::is_ascii(obj.str())) {
            n = static_cast<int64_t>(obj.str().size());
        } else {
            at = text::offsets(obj.str());
            n = static_cast<int64_t>(at.size() - 1);
        }
    } else {
        n = static_cast<int64_t>(obj.items().size());
    }
    auto adjust = [&](int64_t i, bool is_start) {
        if (i < 0) {
            i += n;
            if (i < 0) i = step < 0 ? -1 : 0;
        } else if (i >= n) {
            i = step < 0 ? n - 1 : n;
        }
        (void)is_start;
        return i;
    };
    const int64_t start = adjust(part(start_v, step < 0 ? n - 1 : 0), true);
    const int64_t stop = (stop_v.is_undefined() || stop_v.is_none()) ? (step < 0 ? -1 : n) : adjust(part(stop_v, 0), false);
    std::vector<int64_t> picks;
    if (step > 0) {
        for (int64_t i = start; i < stop; i += step) picks.push_back(i);
    } else {
        for (int64_t i = start; i > stop; i += step) picks.push_back(i);
    }
    if (is_str) {
        const std::string& s = obj.str();
        if (at.empty() && step == 1)
            return Value(picks.empty() ? std::string() : s.substr(static_cast<size_t>(start), picks.size()));
        std::string out;
        for (int64_t i : picks) {
            const auto k = static_cast<size_t>(i);
            if (at.empty()) out += s[k];
            else out.append(s, at[k], at[k + 1] - at[k]);
        }
        return Value(std::move(out));
    }
    ListData out;
    out.reserve(picks.size());
    for (int64_t i : picks) out.push_back(obj.items()[static_cast<size_t>(i)]);
    return obj.kind() == Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

size_t length(const Value& v) {
    switch (v.kind()) {
        case Kind::Undefined: return 0;
        case Kind::String: return text::length(v.str());
        case Kind::List:
        case Kind::Tuple: return v.items().size();
        case Kind::Dict: return v.dict_data().size();
        default: type_error("object of type '" + type_name(v) + "' has no len()");
    }
}

ListData iterate(const Value& v) {
    switch (v.kind()) {
        case Kind::Undefined: return {};
        case Kind::List:
        case Kind::Tuple: return v.items();
        case Kind::Dict: {
            ListData keys;
            keys.reserve(v.dict_data().size());
            for (const auto& [k, x] : v.dict_data().entries) keys.push_back(k);
            return keys;
        }
        case Kind::String: {
            ListData chars;
            const std::string& s = v.str();
            for (size_t pos = 0; pos < s.size();) {
                const size_t start = pos;
                text::decode(s, pos);
                chars.emplace_back(s.substr(start, pos - start));
            }
            return chars;
        }
        default: type_error("'" + type_name(v) + "' object is not iterable");
    }
}

// ---- printf-style formatting ----------------------------------------------------------------

namespace {

struct Spec {
    std::string flags;
    int width = -1;
    int precision = -1;
    char conv = 's';
};

std::string pad(std::string s, const Spec& spec) {
    const size_t len = text::length(s);
    if (spec.width < 0 || len >= static_cast<size_t>(spec.width)) return s;
    const size_t fill = static_cast<size_t>(spec.width) - len;
    if (spec.flags.find('-') != std::string::npos) return s + std::string(fill, ' ');
    return std::string(fill, ' ') + s;
}

std::string printf_number(const Spec& spec, const Value& arg, size_t index) {
    std::string fmt = "%" + spec.flags;
    if (spec.width >= 0) fmt += std::to_string(spec.width);
    if (spec.precision >= 0) fmt += "." + std::to_string(spec.precision);
    char buf[512];
    const char c = spec.conv;
    if (!arg.is_number()) {
        if (c == 'c') {
            if (arg.is_string() && text::length(arg.str()) == 1) return pad(arg.str(), spec);
            type_error("%c requires int or char");
        }
        const bool integral = c == 'x' || c == 'X' || c == 'o';
        type_error(std::string("%") + c + " format: " + (integral ? "an integer" : "a real number") + " is required, not " +
                   type_name(arg));
    }
    (void)index;
    switch (c) {
        case 'd':
        case 'i':
        case 'u': {
            const double f = arg.float_value();
            if (arg.is_float() && !std::isfinite(f)) type_error("cannot convert float to integer");
            const long long v = arg.is_float() ? static_cast<long long>(std::trunc(f)) : arg.int_value();
            std::snprintf(buf, sizeof buf, (fmt + "lld").c_str(), v);
            return buf;
        }
        case 'x':
        case 'X':
        case 'o': {
            if (arg.is_float()) type_error(std::string("%") + c + " format: an integer is required, not float");
            const long long v = arg.int_value();
            std::string f = fmt;
            const bool neg = v < 0;
            // C prints negatives as two's complement; Python prints a sign.
            std::snprintf(buf, sizeof buf, (f + "ll" + c).c_str(), static_cast<unsigned long long>(neg ? -v : v));
            std::string s = buf;
            if (neg) {
                const size_t first = s.find_first_not_of(' ');
                s.insert(first == std::string::npos ? 0 : first, "-");
                if (spec.width >= 0 && s.size() > static_cast<size_t>(spec.width) && s[0] == ' ') s.erase(0, 1);
            }
            return s;
        }
        case 'c': {
            std::string s;
            text::encode(s, static_cast<char32_t>(arg.int_value()));
            return pad(s, spec);
        }
        default: std::snprintf(buf, sizeof buf, (fmt + c).c_str(), arg.float_value()); return buf;
    }
}

}  // namespace

std::string percent_format(std::string_view format, const Value& args, bool escape_args) {
    std::vector<Value> positional;
    const bool is_mapping = args.is_dict();
    if (args.kind() == Kind::Tuple) positional = args.items();
    else positional.push_back(args);
    size_t next = 0;
    bool used_mapping = false;
    std::string out;
    for (size_t k = 0; k < format.size(); ++k) {
        const char ch = format[k];
        if (ch != '%') {
            out += ch;
            continue;
        }
        const size_t start = k;
        if (++k >= format.size()) fail("ValueError", "incomplete format");
        Value arg;
        bool have_arg = false;
        if (format[k] == '(') {
            const size_t close = format.find(')', k);
            if (close == std::string_view::npos) fail("ValueError", "incomplete format key");
            if (!is_mapping) type_error("format requires a mapping");
            const std::string key(format.substr(k + 1, close - k - 1));
            const Value* v = args.dict_data().find(std::string_view(key));
            if (!v) fail("KeyError", text::repr(key));
            arg = *v;
            have_arg = used_mapping = true;
            k = close + 1;
        }
        Spec spec;
        while (k < format.size() && std::string_view("-+ #0").find(format[k]) != std::string_view::npos)
            spec.flags += format[k++];
        auto number = [&]() {
            int v = -1;
            if (k < format.size() && format[k] == '*') {
                ++k;
                if (next >= positional.size()) type_error("not enough arguments for format string");
                v = static_cast<int>(to_index(positional[next++], "* wants int"));
                return v;
            }
            while (k < format.size() && format[k] >= '0' && format[k] <= '9') {
                v = (v < 0 ? 0 : v) * 10 + (format[k++] - '0');
                if (v > 10000) fail("ValueError", "width too big");
            }
            return v;
        };
        spec.width = number();
        if (k < format.size() && format[k] == '.') {
            ++k;
            spec.precision = std::max(0, number());
        }
        while (k < format.size() && (format[k] == 'h' || format[k] == 'l' || format[k] == 'L')) ++k;
        if (k >= format.size()) fail("ValueError", "incomplete format");
        spec.conv = format[k];
        if (spec.conv == '%') {
            out += '%';
            continue;
        }
        if (!have_arg) {
            if (next >= positional.size()) type_error("not enough arguments for format string");
            arg = positional[next++];
        }
        switch (spec.conv) {
            case 's':
            case 'r':
            case 'a': {
                std::string s = spec.conv == 's' ? to_str(arg) : repr(arg);
                if (escape_args && !(arg.is_markup() && spec.conv == 's')) s = html_escape(s);
                if (spec.precision >= 0) {
                    const std::vector<size_t> at = text::offsets(s);
                    if (static_cast<size_t>(spec.precision) + 1 < at.size()) s.resize(at[static_cast<size_t>(spec.precision)]);
                }
                out += pad(std::move(s), spec);
                break;
            }
            case 'd':
            case 'i':
            case 'u':
            case 'x':
            case 'X':
            case 'o':
            case 'c':
            case 'e':
            case 'E':
            case 'f':
            case 'F':
            case 'g':
            case 'G': out += printf_number(spec, arg, start); break;
            default: {
                char buf[96];
                std::snprintf(buf, sizeof buf, "unsupported format character '%c' (0x%x) at index %zu", spec.conv,
                              static_cast<unsigned>(static_cast<unsigned char>(spec.conv)), k);
                fail("ValueError", buf);
            }
        }
        check_size(out.size());
    }
    if (!used_mapping && !is_mapping && next < positional.size())
        type_error("not all arguments converted during string formatting");
    return out;
}

}  // namespace strata::tmpl
