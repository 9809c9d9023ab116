// Splits template source into text and tag tokens the way jinja2's lexer does with the settings
// transformers uses (trim_blocks and lstrip_blocks on, a single trailing newline dropped):
// whitespace control (`-`, `+`), comments and {% raw %} are resolved here, so the parser sees
// only text, `{{ }}` / `{% %}` delimiters and the expression tokens between them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tmpl {

enum class Tok : uint8_t { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
    Tok kind = Tok::Eof;
    std::string text;  // Text: the data; Name: the identifier; String: the decoded value; Op: the operator
    int64_t int_value = 0;
    double float_value = 0.0;
    int line = 1, column = 1;
};

struct LexOptions {
    bool trim_blocks = true;
    bool lstrip_blocks = true;
    bool keep_trailing_newline = false;
};

// Throws TemplateError (Syntax) naming `where`, the line and the column.
std::vector<Token> tokenize(std::string_view source, const std::string& where, const LexOptions& options = {});

const char* token_description(Tok kind);

}  // namespace strata::tmpl
