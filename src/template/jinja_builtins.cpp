#include "template/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "template/jinja_eval.h"
#include "template/jinja_ops.h"
#include "template/jinja_text.h"

namespace strata::tmpl {

namespace {

int64_t int_arg(const Value& v, int64_t fallback, std::string_view what) {
    if (!given(v)) return fallback;
    if (v.is_float()) return static_cast<int64_t>(v.get_float());
    return to_index(v, what);
}

// jinja2's ignore_case: strings compare lower-cased unless case_sensitive is set.
Value fold_case(const Value& v, bool case_sensitive) {
    if (case_sensitive || !v.is_string()) return v;
    return Value(text::lower(v.str()));
}

// make_attrgetter: "a.b.0" looks up item by item (digit parts as integers).
Value attribute_path(const Value& item, const Value& attribute) {
    if (!given(attribute)) return item;
    if (!attribute.is_string()) return get_item(item, attribute);
    Value v = item;
    std::string_view path = attribute.str();
    while (true) {
        const size_t dot = path.find('.');
        const std::string_view part = path.substr(0, dot);
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits && part.size() < 18) v = get_item(v, Value(static_cast<int64_t>(std::atoll(std::string(part).c_str()))));
        else v = get_item(v, Value(std::string(part)));
        if (dot == std::string_view::npos) return v;
        path.remove_prefix(dot + 1);
    }
}

// Sort keys for sort/dictsort/unique/min/max: one value per comma-separated attribute.
std::vector<Value> sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
    std::vector<Value> key;
    if (attribute.is_string() && attribute.str().find(',') != std::string::npos) {
        std::string_view rest = attribute.str();
        while (true) {
            const size_t comma = rest.find(',');
            key.push_back(fold_case(attribute_path(item, Value(std::string(rest.substr(0, comma)))), case_sensitive));
            if (comma == std::string_view::npos) break;
            rest.remove_prefix(comma + 1);
        }
    } else {
        key.push_back(fold_case(attribute_path(item, attribute), case_sensitive));
    }
    return key;
}

bool key_less(const std::vector<Value>& a, const std::vector<Value>& b) {
    for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
        if (!equals(a[k], b[k])) return less_than(a[k], b[k]);
    }
    return a.size() < b.size();
}

ListData sorted_by(Interpreter& in, ListData items, const Value& attribute, bool case_sensitive, bool reverse) {
    in.charge(items.size());
    std::vector<std::pair<std::vector<Value>, size_t>> keyed;
    keyed.reserve(items.size());
    for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(sort_key(items[k], attribute, case_sensitive), k);
    // Python's sort is stable, also when reversed (equal items keep their order).
    std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
        return reverse ? key_less(b.first, a.first) : key_less(a.first, b.first);
    });
    ListData out;
    out.reserve(items.size());
    for (const auto& [key, index] : keyed) out.push_back(items[index]);
    return out;
}

// ---- filters --------------------------------------------------------------------------------

Value f_abs(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("abs", {});
    if (v.is_float()) return Value(std::fabs(v.get_float()));
    if (v.is_int() || v.is_bool()) {
        const int64_t i = v.int_value();
        if (i == INT64_MIN) return Value(-static_cast<double>(i));
        return Value(i < 0 ? -i : i);
    }
    if (v.is_undefined()) raise_undefined(v);
    type_error("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("attr", {"name"});
    if (v.is_undefined()) raise_undefined(v);
    const std::string name = to_str(a[0]);
    if (!name.empty() && name[0] == '_') return Value::undefined("'" + object_type_repr(v) + "' has no attribute '" + name + "'");
    if (v.is_namespace() || v.is_object()) {
        Value r = get_attr(v, name);
        return r;
    }
    Value m = find_method(v, name);
    if (!m.is_undefined()) return m;
    return Value::undefined("'" + object_type_repr(v) + "' has no attribute '" + name + "'");
}

Value f_batch(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("batch", {"linecount", "fill_with"});
    const int64_t count = int_arg(a[0], 0, "linecount");
    if (count <= 0) fail("ValueError", "batch size must be positive");
    const ListData items = iterate(v);
    in.charge(items.size());
    ListData out, row;
    for (const Value& item : items) {
        if (row.size() == static_cast<size_t>(count)) out.push_back(Value::list(std::move(row))), row.clear();
        row.push_back(item);
    }
    if (!row.empty()) {
        if (given(a[1]))
            while (row.size() < static_cast<size_t>(count)) row.push_back(a[1]);
        out.push_back(Value::list(std::move(row)));
    }
    return Value::list(std::move(out));
}

Value f_capitalize(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("capitalize", {});
    return Value(text::capitalize(to_str(v)));
}

Value f_center(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("center", {"width"});
    CallArgs inner;
    inner.positional.push_back(given(a[0]) ? a[0] : Value(int64_t{80}));
    return get_attr(Value(to_str(v)), "center").obj().call(in, inner);
}

Value f_default(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("default", {"default_value", "boolean"});
    if (v.is_undefined() || (a[1].truthy() && !v.truthy())) return a[0].is_undefined() ? Value(std::string()) : a[0];
    return v;
}

Value f_dictsort(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("dictsort", {"case_sensitive", "by", "reverse"});
    if (v.is_undefined()) raise_undefined(v);
    if (!v.is_dict()) type_error("'" + type_name(v) + "' object has no attribute 'items'");
    const std::string by = a[1].is_undefined() ? "key" : to_str(a[1]);
    if (by != "key" && by != "value") fail("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
    ListData pairs;
    for (const auto& [k, x] : v.dict_data().entries) pairs.push_back(Value::tuple({k, x}));
    return Value::list(
        sorted_by(in, std::move(pairs), Value(by == "key" ? int64_t{0} : int64_t{1}), a[0].truthy(), a[2].truthy()));
}

Value f_escape(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("escape", {});
    if (v.is_markup()) return v;
    return Value::markup(html_escape(to_str(v)));
}

Value f_forceescape(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("forceescape", {});
    return Value::markup(html_escape(to_str(v)));
}

Value f_first(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("first", {});
    if (v.is_sequence_data())
        return v.items().empty() ? Value::undefined("No first item, sequence was empty.") : v.items().front();
    const ListData items = iterate(v);
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("last", {});
    if (v.is_sequence_data()) return v.items().empty() ? Value::undefined("No last item, sequence was empty.") : v.items().back();
    if (!v.is_undefined() && !v.is_string() && !v.is_dict()) type_error("'" + type_name(v) + "' object is not reversible");
    const ListData items = iterate(v);
    return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

// Python's float(str): surrounding whitespace, underscores between digits, inf / nan.
bool parse_float(std::string_view s, double& out) {
    s = text::strip(s, true, true);
    std::string clean;
    for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '_') {
            if (k == 0 || k + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[k - 1])) ||
                !std::isdigit(static_cast<unsigned char>(s[k + 1])))
                return false;
            continue;
        }
        clean += s[k];
    }
    if (clean.empty()) return false;
    const std::string lower = text::lower(clean);
    std::string_view body = lower;
    const bool neg = !body.empty() && body[0] == '-';
    if (!body.empty() && (body[0] == '-' || body[0] == '+')) body.remove_prefix(1);
    if (body == "inf" || body == "infinity") {
        out = neg ? -HUGE_VAL : HUGE_VAL;
        return true;
    }
    if (body == "nan") {
        out = std::nan("");
        return true;
    }
    if (body.empty() || lower.find_first_not_of("0123456789.e+-") != std::string::npos) return false;
    char* end = nullptr;
    out = std::strtod(clean.c_str(), &end);
    return end == clean.c_str() + clean.size();
}

// Python's int(str, base).
bool parse_int(std::string_view s, int64_t base, int64_t& out) {
    s = text::strip(s, true, true);
    bool neg = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) neg = s[0] == '-', s.remove_prefix(1);
    if (s.size() > 2 && s[0] == '0') {
        const char p = static_cast<char>(s[1] | 0x20);
        const int64_t prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (prefixed && (base == prefixed || base == 0)) s.remove_prefix(2), base = prefixed;
    }
    if (base == 0) base = 10;
    if (base < 2 || base > 36 || s.empty()) return false;
    uint64_t v = 0;
    bool prev_digit = false;
    for (char c : s) {
        if (c == '_') {
            if (!prev_digit) return false;
            prev_digit = false;
            continue;
        }
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') d = (c | 0x20) - 'a' + 10;
        if (d < 0 || d >= base) return false;
        if (v > (static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) return false;
        v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
        prev_digit = true;
    }
    if (!prev_digit) return false;
    out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
    return true;
}

Value f_float(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("float", {"default"});
    const Value fallback = a[0].is_undefined() ? Value(0.0) : a[0];
    if (v.is_number()) return Value(v.float_value());
    double d = 0;
    if (v.is_string() && parse_float(v.str(), d)) return Value(d);
    return fallback;
}

Value f_int(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("int", {"default", "base"});
    const Value fallback = a[0].is_undefined() ? Value(int64_t{0}) : a[0];
    if (v.is_int() || v.is_bool()) return Value(v.int_value());
    if (v.is_float()) {
        const double f = v.get_float();
        if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
        return Value(static_cast<int64_t>(std::trunc(f)));
    }
    if (v.is_string()) {
        int64_t i = 0;
        if (parse_int(v.str(), int_arg(a[1], 10, "base"), i)) return Value(i);
        double d = 0;
        if (parse_float(v.str(), d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
            return Value(static_cast<int64_t>(std::trunc(d)));
    }
    return fallback;
}

Value f_format(Interpreter&, const Value& v, const CallArgs& args) {
    if (!args.positional.empty() && !args.named.empty())
        fail("FilterArgumentError", "can't handle positional and keyword arguments at the same time");
    if (!args.named.empty()) {
        DictData d;
        for (const auto& [k, x] : args.named) d.set(Value(k), x);
        return Value(percent_format(to_str(v), Value::dict(std::move(d))));
    }
    return Value(percent_format(to_str(v), Value::tuple(args.positional)));
}

Value f_groupby(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("groupby", {"attribute", "default", "case_sensitive"});
    const bool case_sensitive = a[2].truthy();
    auto key_of = [&](const Value& item, bool fold) {
        Value k = attribute_path(item, a[0]);
        if (k.is_undefined() && given(a[1])) k = a[1];
        return fold ? fold_case(k, case_sensitive) : k;
    };
    ListData items = iterate(v);
    in.charge(items.size());
    std::vector<std::pair<Value, size_t>> keyed;
    for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(key_of(items[k], true), k);
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) { return less_than(x.first, y.first); });
    ListData groups;
    for (size_t k = 0; k < keyed.size();) {
        ListData members;
        size_t j = k;
        while (j < keyed.size() && equals(keyed[j].first, keyed[k].first)) members.push_back(items[keyed[j++].second]);
        Value grouper = case_sensitive ? keyed[k].first : key_of(members.front(), false);
        groups.push_back(Value::tuple({grouper, Value::list(std::move(members))}));
        k = j;
    }
    return Value::list(std::move(groups));
}

// Python's str.splitlines() as the indent filter uses it.
std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> out;
    size_t start = 0, pos = 0;
    while (pos < s.size()) {
        const size_t at = pos;
        const char32_t c = text::decode(s, pos);
        if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 ||
            c == 0x2029) {
            if (c == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
            out.push_back(s.substr(start, at - start));
            start = pos;
        }
    }
    if (start < s.size()) out.push_back(s.substr(start));
    return out;
}

Value f_indent(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("indent", {"width", "first", "blank"});
    std::string indention;
    if (a[0].is_string()) indention = a[0].str();
    else indention.assign(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(int_arg(a[0], 4, "width"), 4096))), ' ');
    const std::vector<std::string> lines = split_lines(to_str(v) + "\n");
    std::string rv;
    if (indention.size() * lines.size() > kMaxBuiltSize) fail("MemoryError", "value too large");
    if (a[2].truthy()) {
        for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + indention : "") + lines[k];
    } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : indention) + lines[k];
    }
    if (a[1].truthy()) rv = indention + rv;
    return Value(std::move(rv));
}

Value f_items(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("items", {});
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
    ListData out;
    out.reserve(v.dict_data().size());
    for (const auto& [k, x] : v.dict_data().entries) out.push_back(Value::tuple({k, x}));
    return Value::list(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("join", {"d", "attribute"});
    const std::string sep = a[0].is_undefined() ? std::string() : to_str(a[0]);
    const ListData items = iterate(v);
    in.charge(items.size());
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += sep;
        append_str(out, given(a[1]) ? attribute_path(items[k], a[1]) : items[k]);
        if (out.size() > kMaxBuiltSize) fail("MemoryError", "value too large");
    }
    return Value(std::move(out));
}

Value f_length(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("length", {});
    return Value(static_cast<int64_t>(length(v)));
}

Value f_list(Interpreter& in, const Value& v, const CallArgs& args) {
    args.bind("list", {});
    ListData items = iterate(v);
    in.charge(items.size() / 16);
    return Value::list(std::move(items));
}

// Markup's own str methods return Markup: keep the flag through filters that call them.
Value same_flavour(const Value& original, std::string s) {
    return original.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

Value f_lower(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("lower", {});
    return same_flavour(v, text::lower(to_str(v)));
}

Value f_upper(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("upper", {});
    return same_flavour(v, text::upper(to_str(v)));
}

Value f_map(Interpreter& in, const Value& v, const CallArgs& args) {
    if (!v.truthy()) return Value::list({});
    const ListData items = iterate(v);
    in.charge(items.size());
    ListData out;
    out.reserve(items.size());
    const auto attr_it = std::find_if(args.named.begin(), args.named.end(), [](const auto& p) { return p.first == "attribute"; });
    if (args.positional.empty() && attr_it != args.named.end()) {
        Value fallback;
        for (const auto& [k, x] : args.named) {
            if (k == "default") fallback = x;
            else if (k != "attribute") fail("FilterArgumentError", "Unexpected keyword argument '" + k + "'");
        }
        for (const Value& item : items) {
            Value x = attribute_path(item, attr_it->second);
            if (x.is_undefined() && given(fallback)) x = fallback;
            out.push_back(std::move(x));
        }
        return Value::list(std::move(out));
    }
    if (args.positional.empty()) fail("FilterArgumentError", "map requires a filter argument");
    const std::string name = to_str(args.positional[0]);
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.named = args.named;
    for (const Value& item : items) out.push_back(in.apply_filter(name, item, rest));
    return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, const CallArgs& args, bool want_max) {
    const auto a = args.bind(want_max ? "max" : "min", {"case_sensitive", "attribute"});
    const ListData items = iterate(v);
    in.charge(items.size());
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    std::vector<Value> best_key = sort_key(items[0], a[1], a[0].truthy());
    for (size_t k = 1; k < items.size(); ++k) {
        std::vector<Value> key = sort_key(items[k], a[1], a[0].truthy());
        if (want_max ? key_less(best_key, key) : key_less(key, best_key)) best = k, best_key = std::move(key);
    }
    return items[best];
}
Value f_max(Interpreter& in, const Value& v, const CallArgs& args) { return min_max(in, v, args, true); }
Value f_min(Interpreter& in, const Value& v, const CallArgs& args) { return min_max(in, v, args, false); }

Value f_pprint(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("pprint", {});
    return Value(repr(v));
}

Value select_impl(Interpreter& in, const Value& v, const CallArgs& args, bool keep_if, bool by_attribute) {
    if (!v.truthy()) return Value::list({});
    size_t next = 0;
    Value attribute;
    if (by_attribute) {
        if (args.positional.empty()) fail("FilterArgumentError", "Missing parameter for attribute name");
        attribute = args.positional[next++];
    }
    std::string test_name;
    CallArgs test_args;
    const bool has_test = args.positional.size() > next;
    if (has_test) {
        test_name = to_str(args.positional[next]);
        test_args.positional.assign(args.positional.begin() + static_cast<long>(next) + 1, args.positional.end());
        test_args.named = args.named;
    }
    const ListData items = iterate(v);
    in.charge(items.size());
    ListData out;
    for (const Value& item : items) {
        const Value subject = by_attribute ? attribute_path(item, attribute) : item;
        const bool passed = has_test ? in.apply_test(test_name, subject, test_args) : subject.truthy();
        if (passed == keep_if) out.push_back(item);
    }
    return Value::list(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, true, false); }
Value f_reject(Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, false, true); }

Value f_replace(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("replace", {"old", "new", "count"});
    CallArgs inner;
    inner.positional = {Value(to_str(a[0])), Value(to_str(a[1]))};
    if (given(a[2])) inner.positional.push_back(a[2]);
    return find_method(Value(to_str(v)), "replace").obj().call(in, inner);
}

Value f_reverse(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("reverse", {});
    if (v.is_string()) return slice(v, Value(), Value(), Value(int64_t{-1}));
    if (!(v.is_sequence_data() || v.is_dict() || v.is_undefined())) fail("FilterArgumentError", "argument must be iterable");
    ListData items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
}

Value f_round(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("round", {"precision", "method"});
    const int64_t precision = int_arg(a[0], 0, "precision");
    const std::string method = a[1].is_undefined() ? "common" : to_str(a[1]);
    if (method != "common" && method != "ceil" && method != "floor")
        fail("FilterArgumentError", "method must be common, ceil or floor");
    if (v.is_undefined()) raise_undefined(v);
    if (!v.is_number()) type_error("type " + type_name(v) + " doesn't define __round__ method");
    if (method != "common") {
        const double scale = std::pow(10.0, static_cast<double>(precision));
        const double x = v.float_value() * scale;
        return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
    }
    if (!v.is_float()) {
        // round(int, n) stays an int; a negative n rounds to tens, hundreds, ... half to even.
        const int64_t i = v.int_value();
        if (precision >= 0 || precision < -18) return Value(precision < -18 ? int64_t{0} : i);
        int64_t scale = 1;
        for (int64_t k = 0; k < -precision; ++k) scale *= 10;
        int64_t q = i / scale, r = i % scale;
        if (r < 0) r += scale, --q;
        if (2 * r > scale || (2 * r == scale && (q % 2 != 0))) ++q;
        return Value(q * scale);
    }
    const double x = v.get_float();
    if (!std::isfinite(x)) return Value(x);
    if (precision >= 0) {
        // printf rounds the exact binary value, halves to even: what Python's round() does.
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
        return Value(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    double q = x / scale;
    const double r = std::nearbyint(q);  // the default rounding mode is half to even
    return Value(r * scale);
}

Value f_safe(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("safe", {});
    return v.is_markup() ? v : Value::markup(to_str(v));
}

Value f_slice(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("slice", {"slices", "fill_with"});
    const int64_t slices = int_arg(a[0], 0, "slices");
    if (slices <= 0 || slices > kMaxRange) fail("ValueError", "slices must be between 1 and " + std::to_string(kMaxRange));
    const ListData seq = iterate(v);
    in.charge(seq.size() + static_cast<size_t>(slices));
    const auto n = static_cast<int64_t>(seq.size());
    const int64_t per = n / slices, extra = n % slices;
    int64_t offset = 0;
    ListData out;
    for (int64_t s = 0; s < slices; ++s) {
        const int64_t start = offset + s * per;
        if (s < extra) ++offset;
        const int64_t end = offset + (s + 1) * per;
        ListData part(seq.begin() + start, seq.begin() + end);
        if (given(a[1]) && s >= extra) part.push_back(a[1]);
        out.push_back(Value::list(std::move(part)));
    }
    return Value::list(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("sort", {"reverse", "case_sensitive", "attribute"});
    return Value::list(sorted_by(in, iterate(v), a[2], a[1].truthy(), a[0].truthy()));
}

Value f_string(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("string", {});
    return v.is_string() ? v : Value(to_str(v));  // Markup stays Markup (soft_str)
}

Value f_sum(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("sum", {"attribute", "start"});
    Value total = a[1].is_undefined() ? Value(int64_t{0}) : a[1];
    const ListData items = iterate(v);
    in.charge(items.size());
    for (const Value& item : items) total = binary_op(BinOp::Add, total, given(a[0]) ? attribute_path(item, a[0]) : item);
    return total;
}

Value f_title(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("title", {});
    // Words start after '-', whitespace or an opening bracket; each is upper-cased at its first
    // character and lower-cased after it.
    const std::string s = to_str(v);
    std::string out;
    bool at_start = true;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t c = text::decode(s, pos);
        const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
        if (separator) {
            text::encode(out, c);
            at_start = true;
            continue;
        }
        text::encode(out, at_start ? text::to_upper(c) : text::to_lower(c));
        at_start = false;
    }
    return Value(std::move(out));
}

Value f_tojson(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions opt;
    opt.ensure_ascii = a[0].truthy();
    if (given(a[1])) {
        opt.has_indent = true;
        if (a[1].is_string()) opt.indent = a[1].str();
        else opt.indent.assign(static_cast<size_t>(std::clamp<int64_t>(int_arg(a[1], 0, "indent"), 0, 4096)), ' ');
    }
    if (given(a[2])) {
        const ListData seps = iterate(a[2]);
        if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
            fail("ValueError", "separators must be a pair of strings");
        opt.has_separators = true;
        opt.item_separator = seps[0].str();
        opt.key_separator = seps[1].str();
    }
    opt.sort_keys = a[3].truthy();
    return Value(to_json(v, opt));
}

Value f_trim(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("trim", {"chars"});
    const std::string s = to_str(v);
    if (!given(a[0])) return same_flavour(v, std::string(text::strip(s, true, true)));
    const std::string chars = to_str(a[0]);
    return same_flavour(v, std::string(text::strip(s, true, true, &chars)));
}

Value f_truncate(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("truncate", {"length", "killwords", "end", "leeway"});
    const int64_t length = int_arg(a[0], 255, "length");
    const std::string end = a[2].is_undefined() ? "..." : to_str(a[2]);
    const int64_t leeway = int_arg(a[3], 5, "leeway");
    if (!v.is_string()) tmpl::length(v);  // jinja2 measures the value itself: numbers have no len()
    const auto end_len = static_cast<int64_t>(text::length(end));
    if (length < end_len)
        fail("AssertionError", "expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
    if (leeway < 0) fail("AssertionError", "expected leeway >= 0, got " + std::to_string(leeway));
    const Value s(to_str(v));
    if (static_cast<int64_t>(text::length(s.str())) <= length + leeway) return s;
    const std::string head = slice(s, Value(), Value(length - end_len), Value()).str();
    if (a[1].truthy()) return Value(head + end);
    const size_t space = head.rfind(' ');
    return Value((space == std::string::npos ? head : head.substr(0, space)) + end);
}

Value f_unique(Interpreter& in, const Value& v, const CallArgs& args) {
    const auto a = args.bind("unique", {"case_sensitive", "attribute"});
    const ListData items = iterate(v);
    in.charge(items.size());
    ListData out;
    std::vector<Value> seen;
    for (const Value& item : items) {
        const Value key = fold_case(attribute_path(item, a[1]), a[0].truthy());
        in.charge(seen.size() / 64);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
            seen.push_back(key);
            out.push_back(item);
        }
    }
    return Value::list(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, const CallArgs& args) {
    args.bind("wordcount", {});
    const std::string s = to_str(v);
    int64_t words = 0;
    bool in_word = false;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t c = text::decode(s, pos);
        const bool word_char = c == '_' || text::is_digit(c) || text::is_alpha(c) ||
                               (c >= 0x80 && !text::is_space(c) && text::is_printable(c) && !(c >= 0x2000 && c <= 0x206F) &&
                                !(c >= 0x3000 && c <= 0x303F));
        if (word_char && !in_word) ++words;
        in_word = word_char;
    }
    return Value(words);
}

// ---- tests ----------------------------------------------------------------------------------

bool t_defined(Interpreter&, const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, const CallArgs&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool(); }
bool t_false(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool() && !v.get_bool(); }
bool t_true(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool() && v.get_bool(); }
bool t_integer(Interpreter&, const Value& v, const CallArgs&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, const CallArgs&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, const CallArgs&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, const CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, const CallArgs&) { return v.is_dict(); }
bool t_sequence(Interpreter&, const Value& v, const CallArgs&) {
    return v.is_string() || v.is_sequence_data() || v.is_dict() || v.is_undefined();
}
bool t_iterable(Interpreter&, const Value& v, const CallArgs&) {
    return v.is_string() || v.is_sequence_data() || v.is_dict() || v.is_undefined() ||
           (v.is_object() && v.obj().type_name() == "LoopContext");
}
bool t_callable(Interpreter&, const Value& v, const CallArgs&) { return v.is_object() && v.obj().callable(); }
bool t_escaped(Interpreter&, const Value& v, const CallArgs&) { return v.is_markup(); }
bool t_lower(Interpreter& in, const Value& v, const CallArgs&) {
    return find_method(Value(to_str(v)), "islower").obj().call(in, {}).truthy();
}
bool t_upper(Interpreter& in, const Value& v, const CallArgs&) {
    return find_method(Value(to_str(v)), "isupper").obj().call(in, {}).truthy();
}
bool t_odd(Interpreter&, const Value& v, const CallArgs&) {
    return equals(binary_op(BinOp::Mod, v, Value(int64_t{2})), Value(int64_t{1}));
}
bool t_even(Interpreter&, const Value& v, const CallArgs&) {
    return equals(binary_op(BinOp::Mod, v, Value(int64_t{2})), Value(int64_t{0}));
}
bool t_divisibleby(Interpreter&, const Value& v, const CallArgs& args) {
    const auto a = args.bind("divisibleby", {"num"});
    return equals(binary_op(BinOp::Mod, v, a[0]), Value(int64_t{0}));
}
bool t_in(Interpreter&, const Value& v, const CallArgs& args) { return contains(args.bind("in", {"seq"})[0], v); }
bool t_sameas(Interpreter&, const Value& v, const CallArgs& args) {
    const Value other = args.bind("sameas", {"other"})[0];
    if (v.kind() != other.kind()) return false;
    switch (v.kind()) {
        case Kind::Undefined:
        case Kind::None: return true;
        case Kind::Bool:
        case Kind::Int:
        case Kind::Float:
        case Kind::String: return equals(v, other);
        default: return v.identity() == other.identity();
    }
}
bool t_filter(Interpreter&, const Value& v, const CallArgs&) { return v.is_string() && find_filter(v.str()) != nullptr; }
bool t_test(Interpreter&, const Value& v, const CallArgs&) { return v.is_string() && find_test(v.str()) != nullptr; }

template <CmpOp Op>
bool t_compare(Interpreter&, const Value& v, const CallArgs& args) {
    const Value other = args.bind("compare", {"other"})[0];
    switch (Op) {
        case CmpOp::Eq: return equals(v, other);
        case CmpOp::Ne: return !equals(v, other);
        case CmpOp::Lt: return less_than(v, other);
        case CmpOp::Le: return !less_than(other, v);
        case CmpOp::Gt: return less_than(other, v);
        default: return !less_than(v, other);
    }
}

struct FilterEntry {
    std::string_view name;
    FilterFn fn;
};
struct TestEntry {
    std::string_view name;
    TestFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"groupby", f_groupby},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"pprint", f_pprint},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

constexpr TestEntry kTests[] = {
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_compare<CmpOp::Eq>},
    {"equalto", t_compare<CmpOp::Eq>},
    {"==", t_compare<CmpOp::Eq>},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_compare<CmpOp::Ge>},
    {">=", t_compare<CmpOp::Ge>},
    {"gt", t_compare<CmpOp::Gt>},
    {">", t_compare<CmpOp::Gt>},
    {"greaterthan", t_compare<CmpOp::Gt>},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_compare<CmpOp::Le>},
    {"<=", t_compare<CmpOp::Le>},
    {"lower", t_lower},
    {"lt", t_compare<CmpOp::Lt>},
    {"<", t_compare<CmpOp::Lt>},
    {"lessthan", t_compare<CmpOp::Lt>},
    {"mapping", t_mapping},
    {"ne", t_compare<CmpOp::Ne>},
    {"!=", t_compare<CmpOp::Ne>},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

// ---- globals --------------------------------------------------------------------------------

class Builtin : public Object {
public:
    using Fn = Value (*)(Interpreter&, const CallArgs&);
    Builtin(std::string_view name, Fn fn) : name_(name), fn_(fn) {}
    std::string type_name() const override { return "builtin_function_or_method"; }
    bool callable() const override { return true; }
    Value call(Interpreter& in, const CallArgs& args) const override { return fn_(in, args); }
    std::string to_str() const override { return "<built-in function " + name_ + ">"; }

private:
    std::string name_;
    Fn fn_;
};

Value g_range(Interpreter& in, const CallArgs& args) {
    if (!args.named.empty()) type_error("range() takes no keyword arguments");
    const auto& p = args.positional;
    if (p.empty() || p.size() > 3) type_error("range expected at most 3 arguments, got " + std::to_string(p.size()));
    auto as_int = [](const Value& v) {
        if (v.is_int() || v.is_bool()) return v.int_value();
        type_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
    };
    const int64_t start = p.size() == 1 ? 0 : as_int(p[0]);
    const int64_t stop = as_int(p.size() == 1 ? p[0] : p[1]);
    const int64_t step = p.size() == 3 ? as_int(p[2]) : 1;
    if (step == 0) fail("ValueError", "range() arg 3 must not be zero");
    // Count in floating point: the bounds may be anywhere in the 64-bit range.
    const double count = step > 0
                             ? std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step))
                             : std::ceil((static_cast<double>(start) - static_cast<double>(stop)) / -static_cast<double>(step));
    if (count > static_cast<double>(kMaxRange))
        fail("OverflowError",
             "Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
    ListData out;
    if (count > 0) {
        in.charge(static_cast<uint64_t>(count) / 16);
        out.reserve(static_cast<size_t>(count));
        for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) out.emplace_back(start + k * step);
    }
    return Value::list(std::move(out));
}

DictData dict_from_args(const CallArgs& args, const char* fn) {
    DictData d;
    if (args.positional.size() > 1)
        type_error(std::string(fn) + " expected at most 1 argument, got " + std::to_string(args.positional.size()));
    if (!args.positional.empty()) {
        const Value& src = args.positional[0];
        if (src.is_dict() || src.is_namespace()) {
            d = src.is_dict() ? src.dict_data() : src.namespace_data();
        } else {
            for (const Value& pair : iterate(src)) {
                const ListData kv = iterate(pair);
                if (kv.size() != 2)
                    fail("ValueError",
                         "dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
                d.set(kv[0], kv[1]);
            }
        }
    }
    for (const auto& [k, v] : args.named) d.set(Value(k), v);
    return d;
}

Value g_dict(Interpreter&, const CallArgs& args) { return Value::dict(dict_from_args(args, "dict")); }

Value g_namespace(Interpreter& in, const CallArgs& args) {
    Value ns = Value::make_namespace(dict_from_args(args, "namespace"));
    in.track_namespace(ns);
    return ns;
}

Value g_raise_exception(Interpreter&, const CallArgs& args) {
    const auto a = args.bind("raise_exception", {"message"});
    fail("TemplateError", to_str(a[0]));
}

Value g_strftime_now(Interpreter&, const CallArgs& args) {
    const auto a = args.bind("strftime_now", {"format"});
    if (!a[0].is_string()) type_error("strftime() argument 1 must be str, not " + type_name(a[0]));
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::string out(256 + a[0].str().size() * 8, '\0');
    const size_t n = std::strftime(out.data(), out.size(), a[0].str().c_str(), &local);
    out.resize(n);
    return Value(std::move(out));
}

class Joiner : public Object {
public:
    explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
    std::string type_name() const override { return "Joiner"; }
    bool callable() const override { return true; }
    Value call(Interpreter&, const CallArgs&) const override {
        if (!used_) {
            used_ = true;
            return Value(std::string());
        }
        return Value(sep_);
    }

private:
    std::string sep_;
    mutable bool used_ = false;
};

Value g_joiner(Interpreter&, const CallArgs& args) {
    const auto a = args.bind("joiner", {"sep"});
    return Value::object(std::make_shared<Joiner>(a[0].is_undefined() ? ", " : to_str(a[0])));
}

class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
public:
    explicit Cycler(ListData items) : items_(std::move(items)) {}
    std::string type_name() const override { return "Cycler"; }
    Value attribute(std::string_view name) const override {
        if (name == "current") return items_[pos_];
        if (name == "next" || name == "reset") return Value::object(std::make_shared<Method>(shared_from_this(), name == "next"));
        return Object::attribute(name);
    }

private:
    class Method : public Object {
    public:
        Method(std::shared_ptr<const Cycler> c, bool next) : c_(std::move(c)), next_(next) {}
        std::string type_name() const override { return "method"; }
        bool callable() const override { return true; }
        Value call(Interpreter&, const CallArgs&) const override {
            if (!next_) {
                c_->pos_ = 0;
                return Value::none();
            }
            Value v = c_->items_[c_->pos_];
            c_->pos_ = (c_->pos_ + 1) % c_->items_.size();
            return v;
        }

    private:
        std::shared_ptr<const Cycler> c_;
        bool next_;
    };

    ListData items_;
    mutable size_t pos_ = 0;
};

Value g_cycler(Interpreter&, const CallArgs& args) {
    if (args.positional.empty()) type_error("at least one item has to be provided");
    return Value::object(std::make_shared<Cycler>(args.positional));
}

struct GlobalEntry {
    std::string_view name;
    Value value;
};

const std::vector<GlobalEntry>& globals() {
    static const std::vector<GlobalEntry> table = [] {
        std::vector<GlobalEntry> t;
        auto add = [&](std::string_view name, Builtin::Fn fn) {
            t.push_back({name, Value::object(std::make_shared<Builtin>(name, fn))});
        };
        add("range", g_range);
        add("dict", g_dict);
        add("namespace", g_namespace);
        add("joiner", g_joiner);
        add("cycler", g_cycler);
        add("raise_exception", g_raise_exception);
        add("strftime_now", g_strftime_now);
        return t;
    }();
    return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
    for (const auto& e : kFilters)
        if (e.name == name) return e.fn;
    return nullptr;
}

TestFn find_test(std::string_view name) {
    for (const auto& e : kTests)
        if (e.name == name) return e.fn;
    return nullptr;
}

const Value* find_global(std::string_view name) {
    for (const auto& g : globals())
        if (g.name == name) return &g.value;
    return nullptr;
}

}  // namespace strata::tmpl
