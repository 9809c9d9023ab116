// jinja2's builtin filters and tests, and the global functions a chat template can call
// (range, dict, namespace, joiner, cycler, plus transformers' raise_exception and strftime_now).
#pragma once

#include <string_view>

#include "template/jinja_ast.h"

namespace strata::tmpl {

// nullptr when there is no such filter / test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// A global function by name, or nullptr.
const Value* find_global(std::string_view name);

// range() refuses more items than this, as jinja2's sandbox does.
constexpr int64_t kMaxRange = 100000;

}  // namespace strata::tmpl
