// Python's operators and protocols on template values, with the sandbox's rules for attribute
// and item access: arithmetic, `in`, subscripts and slices, len(), iteration, `%` formatting,
// and the str / dict / list methods templates may call.
#pragma once

#include <string>
#include <string_view>

#include "template/jinja_ast.h"
#include "template/jinja_value.h"

namespace strata::tmpl {

// Strings and lists built by an operator (`*`, `+`, `%`) may not exceed this many bytes/items.
constexpr size_t kMaxBuiltSize = size_t{64} << 20;

Value binary_op(BinOp op, const Value& a, const Value& b);
Value negate(const Value& v);
Value unary_plus(const Value& v);
// `item in container`.
bool contains(const Value& container, const Value& item);
// `obj.name`: a method or attribute first, then an item; undefined when neither exists.
Value get_attr(const Value& obj, std::string_view name);
// `obj[key]`: an item first, then (for string keys) an attribute; undefined when neither exists.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` (absent parts are undefined values).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// len(v); undefined counts as empty.
size_t length(const Value& v);
// What a for loop visits: list items, dict keys, characters; undefined is empty.
ListData iterate(const Value& v);
// str % args (printf-style, as Python formats); `escape_args` for Markup % args, which
// HTML-escapes what %s / %r insert.
std::string percent_format(std::string_view format, const Value& args, bool escape_args = false);
// The named str / dict / list method bound to `obj`; undefined when there is none.
Value find_method(const Value& obj, std::string_view name);
// An optional argument that was passed: neither undefined nor None.
inline bool given(const Value& v) { return !v.is_undefined() && !v.is_none(); }
// Integer conversion for indices and counts: accepts int and bool, else TypeError naming `what`.
int64_t to_index(const Value& v, std::string_view what);

}  // namespace strata::tmpl
