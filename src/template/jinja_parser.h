// Builds the statement and expression trees from tokens, following jinja2's grammar and operator
// precedence (lowest first): `x if c else y`, or, and, not, comparisons and `in`, + -, ~,
// * / // %, **, unary - +, then postfix `.attr` `[key]` `(args)` and `|filter` / `is test`.
#pragma once

#include <string>
#include <string_view>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"

namespace strata::tmpl {

// Nesting deeper than this (brackets, operators, blocks) is refused: the parser and the
// interpreter recurse once per level, and templates from model files are untrusted.
constexpr int kMaxParseDepth = 96;
// The deepest expression tree accepted (left-leaning chains like a + b + c count one per link).
constexpr int kMaxExprDepth = 256;

// Throws TemplateError (Syntax).
Program parse_template(std::string_view source, const std::string& where, const LexOptions& options = {});

}  // namespace strata::tmpl
