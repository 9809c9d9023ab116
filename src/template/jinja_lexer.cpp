#include "template/jinja_lexer.h"

#include <algorithm>
#include <charconv>

#include "template/jinja_error.h"
#include "template/jinja_text.h"

namespace strata::tmpl {

const char* token_description(Tok kind) {
    switch (kind) {
        case Tok::Text: return "template data";
        case Tok::VarBegin: return "begin of print statement";
        case Tok::VarEnd: return "end of print statement";
        case Tok::BlockBegin: return "begin of statement block";
        case Tok::BlockEnd: return "end of statement block";
        case Tok::Name: return "name";
        case Tok::String: return "string";
        case Tok::Int: return "integer";
        case Tok::Float: return "float";
        case Tok::Op: return "operator";
        case Tok::Eof: return "end of template";
    }
    return "token";
}

namespace {

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Newlines become "\n" (jinja2 splits on \r\n, \r and \n and joins with \n) and one trailing
// newline goes unless asked to keep it.
std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
    std::string out;
    out.reserve(source.size());
    for (size_t k = 0; k < source.size(); ++k) {
        if (source[k] == '\r') {
            out += '\n';
            if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
        } else {
            out += source[k];
        }
    }
    if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

class Lexer {
public:
    Lexer(std::string_view source, const std::string& where, const LexOptions& options)
        : src_(normalize_newlines(source, options.keep_trailing_newline)), where_(where), opt_(options) {
        line_starts_.push_back(0);
        for (size_t k = 0; k < src_.size(); ++k)
            if (src_[k] == '\n') line_starts_.push_back(k + 1);
    }

    std::vector<Token> run() {
        size_t pos = 0;
        bool line_starting = true;  // the previous token ended a line (or nothing came before)
        while (pos < src_.size()) {
            const size_t tag = find_tag(pos);
            if (tag == std::string_view::npos) {
                emit_text(pos, src_.size(), src_.substr(pos));
                break;
            }
            const char type = src_[tag + 1];
            const char sign = (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')) ? src_[tag + 2] : 0;
            std::string_view text = std::string_view(src_).substr(pos, tag - pos);
            if (sign == '-') {
                text = text::strip(text, false, true);
            } else if (sign != '+' && opt_.lstrip_blocks && type != '{') {
                text = lstrip_line(text, line_starting);
            }
            emit_text(pos, tag, text);

            size_t after_sign = tag + 2 + (sign ? 1 : 0);
            if (type == '#') {
                pos = skip_comment(tag, after_sign);
            } else if (size_t raw_end = match_raw_begin(tag); raw_end != std::string_view::npos) {
                pos = lex_raw(raw_end);
            } else {
                pos = lex_tag(tag, after_sign, type == '%');
            }
            line_starting = pos > 0 && src_[pos - 1] == '\n';
        }
        Token eof;
        eof.kind = Tok::Eof;
        set_position(eof, src_.size());
        tokens_.push_back(std::move(eof));
        return std::move(tokens_);
    }

private:
    [[noreturn]] void syntax_error(size_t offset, const std::string& message) const {
        const auto [line, column] = position(offset);
        throw TemplateError(TemplateError::Kind::Syntax, "TemplateSyntaxError", message, where_, line, column);
    }

    std::pair<int, int> position(size_t offset) const {
        const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
        const size_t line = static_cast<size_t>(it - line_starts_.begin());
        return {static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
    }

    void set_position(Token& t, size_t offset) const {
        const auto [line, column] = position(offset);
        t.line = line;
        t.column = column;
    }

    size_t find_tag(size_t pos) const {
        for (size_t k = src_.find('{', pos); k != std::string::npos; k = src_.find('{', k + 1)) {
            if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
        }
        return std::string_view::npos;
    }

    // lstrip_blocks: spaces and tabs between the start of a line and a block tag go.
    static std::string_view lstrip_line(std::string_view text, bool line_starting) {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos == 0 && !line_starting) return text;
        const std::string_view tail = text.substr(l_pos);
        if (tail.empty() || !text::strip(tail, true, false).empty()) return text;
        return text.substr(0, l_pos);
    }

    void emit_text(size_t begin, size_t, std::string_view text) {
        if (text.empty()) return;
        Token t;
        t.kind = Tok::Text;
        t.text = std::string(text);
        set_position(t, begin);
        tokens_.push_back(std::move(t));
    }

    // After a tag's end: `-` eats all whitespace, trim_blocks one newline after a block or comment.
    size_t after_end(size_t pos, char sign, bool block_like) const {
        if (sign == '-') return skip_whitespace(pos);
        if (sign != '+' && block_like && opt_.trim_blocks && pos < src_.size() && src_[pos] == '\n') return pos + 1;
        return pos;
    }

    size_t skip_whitespace(size_t pos) const {
        while (pos < src_.size()) {
            size_t next = pos;
            if (!text::is_space(text::decode(src_, next))) break;
            pos = next;
        }
        return pos;
    }

    size_t skip_comment(size_t tag, size_t content) {
        const size_t end = src_.find("#}", content);
        if (end == std::string::npos) syntax_error(tag, "Missing end of comment tag");
        char sign = 0;
        if (end > content && (src_[end - 1] == '-' || src_[end - 1] == '+')) sign = src_[end - 1];
        return after_end(end + 2, sign, true);
    }

    // `{% raw %}` (with optional signs): the offset just past its end, or npos.
    size_t match_raw_begin(size_t tag) const {
        if (src_[tag + 1] != '%') return std::string_view::npos;
        size_t p = tag + 2;
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
        p = skip_whitespace(p);
        if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_ident_char(src_[p + 3]))) return std::string_view::npos;
        p = skip_whitespace(p + 3);
        if (src_.compare(p, 3, "-%}") == 0) return skip_whitespace(p + 3);
        if (src_.compare(p, 2, "%}") == 0) return p + 2;  // jinja2 applies no trim_blocks here
        return std::string_view::npos;
    }

    size_t lex_raw(size_t content) {
        for (size_t k = src_.find("{%", content); k != std::string::npos; k = src_.find("{%", k + 2)) {
            size_t p = k + 2;
            char sign = 0;
            if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
            p = skip_whitespace(p);
            if (src_.compare(p, 6, "endraw") != 0) continue;
            p = skip_whitespace(p + 6);
            char end_sign = 0;
            if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_sign = src_[p++];
            if (src_.compare(p, 2, "%}") != 0) continue;
            std::string_view text = std::string_view(src_).substr(content, k - content);
            if (sign == '-') text = text::strip(text, false, true);
            else if (sign != '+' && opt_.lstrip_blocks) text = lstrip_line(text, content > 0 && src_[content - 1] == '\n');
            emit_text(content, k, text);
            return after_end(p + 2, end_sign, true);
        }
        syntax_error(content, "Missing end of raw directive");
    }

    size_t lex_tag(size_t tag, size_t pos, bool block) {
        Token begin;
        begin.kind = block ? Tok::BlockBegin : Tok::VarBegin;
        set_position(begin, tag);
        tokens_.push_back(std::move(begin));
        std::vector<char> brackets;
        while (true) {
            if (brackets.empty()) {
                // End of tag first, as jinja2 does, so `-%}` is never read as a minus.
                const char* close = block ? "%}" : "}}";
                char sign = 0;
                size_t p = pos;
                if (p < src_.size() && src_[p] == '-' && src_.compare(p + 1, 2, close) == 0) sign = '-', ++p;
                else if (block && p < src_.size() && src_[p] == '+' && src_.compare(p + 1, 2, close) == 0) sign = '+', ++p;
                if (src_.compare(p, 2, close) == 0) {
                    Token end;
                    end.kind = block ? Tok::BlockEnd : Tok::VarEnd;
                    set_position(end, pos);
                    tokens_.push_back(std::move(end));
                    return after_end(p + 2, sign, block);
                }
            }
            if (pos >= src_.size())
                syntax_error(tag, std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") + "'");
            const char c = src_[pos];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
                ++pos;
                continue;
            }
            Token t;
            set_position(t, pos);
            if (is_digit(c)) {
                pos = lex_number(pos, t);
            } else if (is_ident_start(c)) {
                size_t end = pos;
                while (end < src_.size() && is_ident_char(src_[end])) ++end;
                t.kind = Tok::Name;
                t.text = src_.substr(pos, end - pos);
                pos = end;
            } else if (c == '\'' || c == '"') {
                pos = lex_string(pos, t);
            } else {
                pos = lex_operator(pos, t, brackets);
            }
            tokens_.push_back(std::move(t));
        }
    }

    size_t lex_number(size_t pos, Token& t) {
        auto digits = [&](size_t p, auto is_ok) {
            // digit (_? digit)*
            if (p >= src_.size() || !is_ok(src_[p])) return p;
            ++p;
            while (p < src_.size()) {
                if (is_ok(src_[p])) ++p;
                else if (src_[p] == '_' && p + 1 < src_.size() && is_ok(src_[p + 1])) p += 2;
                else break;
            }
            return p;
        };
        auto dec = [](char ch) { return is_digit(ch); };
        auto clean = [&](size_t b, size_t e) {
            std::string s;
            for (size_t k = b; k < e; ++k)
                if (src_[k] != '_') s += src_[k];
            return s;
        };
        const bool after_dot = pos > 0 && src_[pos - 1] == '.';
        const size_t int_end = digits(pos, dec);
        // A float: digits then a fraction and/or an exponent (not directly after a dot: `x.0.1`).
        if (!after_dot) {
            size_t p = int_end;
            bool is_float = false;
            if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
                p = digits(p + 1, dec);
                is_float = true;
            }
            if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
                size_t q = p + 1;
                if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
                const size_t e = digits(q, dec);
                if (e > q) {
                    p = e;
                    is_float = true;
                }
            }
            if (is_float) {
                const std::string s = clean(pos, p);
                t.kind = Tok::Float;
                std::from_chars(s.data(), s.data() + s.size(), t.float_value);
                return p;
            }
        }
        int base = 10;
        size_t start = pos, end = int_end;
        if (src_[pos] == '0' && pos + 1 < src_.size()) {
            const char x = static_cast<char>(src_[pos + 1] | 0x20);
            auto bin = [](char ch) { return ch == '0' || ch == '1'; };
            auto oct = [](char ch) { return ch >= '0' && ch <= '7'; };
            auto hex = [](char ch) { return is_digit(ch) || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f'); };
            size_t q = pos + 2;
            if (q < src_.size() && src_[q] == '_') ++q;
            if (x == 'b') base = 2, start = q, end = digits(q, bin);
            else if (x == 'o') base = 8, start = q, end = digits(q, oct);
            else if (x == 'x') base = 16, start = q, end = digits(q, hex);
            if (base != 10 && end == start) base = 10, start = pos, end = int_end;
        }
        const std::string s = clean(start, end);
        t.kind = Tok::Int;
        const auto res = std::from_chars(s.data(), s.data() + s.size(), t.int_value, base);
        if (res.ec != std::errc()) syntax_error(pos, "integer literal too large: " + s);
        return end;
    }

    static int hex_value(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        c = static_cast<char>(c | 0x20);
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    }

    // Python's unicode-escape decoding of a quoted literal.
    size_t lex_string(size_t pos, Token& t) {
        const char quote = src_[pos];
        std::string out;
        size_t p = pos + 1;
        while (true) {
            if (p >= src_.size()) syntax_error(pos, "unexpected end of string");
            const char c = src_[p];
            if (c == quote) break;
            if (c != '\\') {
                out += c;
                ++p;
                continue;
            }
            if (p + 1 >= src_.size()) syntax_error(pos, "unexpected end of string");
            const char e = src_[p + 1];
            p += 2;
            switch (e) {
                case '\n': break;  // line continuation
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case 'a': out += '\a'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'v': out += '\v'; break;
                case 'x':
                case 'u':
                case 'U': {
                    const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    char32_t cp = 0;
                    for (int k = 0; k < n; ++k) {
                        const int h = p + static_cast<size_t>(k) < src_.size() ? hex_value(src_[p + static_cast<size_t>(k)]) : -1;
                        if (h < 0) syntax_error(pos, std::string("truncated \\") + e + " escape");
                        cp = cp * 16 + static_cast<char32_t>(h);
                    }
                    if (cp > 0x10FFFF) syntax_error(pos, "illegal Unicode character");
                    p += static_cast<size_t>(n);
                    text::encode(out, cp);
                    break;
                }
                default:
                    if (e >= '0' && e <= '7') {
                        char32_t cp = static_cast<char32_t>(e - '0');
                        for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k, ++p)
                            cp = cp * 8 + static_cast<char32_t>(src_[p] - '0');
                        text::encode(out, cp);
                    } else {
                        out += '\\';  // unknown escapes stay as written
                        out += e;
                    }
            }
        }
        t.kind = Tok::String;
        t.text = std::move(out);
        return p + 1;
    }

    size_t lex_operator(size_t pos, Token& t, std::vector<char>& brackets) {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        t.kind = Tok::Op;
        for (std::string_view op : kTwo) {
            if (src_.compare(pos, 2, op) == 0) {
                t.text = std::string(op);
                return pos + 2;
            }
        }
        const char c = src_[pos];
        if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
            size_t next = pos;
            const char32_t cp = text::decode(src_, next);
            std::string shown;
            text::encode(shown, cp);
            syntax_error(pos, "unexpected char " + text::repr(shown));
        }
        if (c == '(' || c == '[' || c == '{') {
            brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (c == ')' || c == ']' || c == '}') {
            if (brackets.empty()) syntax_error(pos, std::string("unexpected '") + c + "'");
            const char expected = brackets.back();
            brackets.pop_back();
            if (expected != c) syntax_error(pos, std::string("unexpected '") + c + "', expected '" + expected + "'");
        }
        t.text = std::string(1, c);
        return pos + 1;
    }

    std::string src_;
    const std::string& where_;
    LexOptions opt_;
    std::vector<size_t> line_starts_;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& where, const LexOptions& options) {
    return Lexer(source, where, options).run();
}

}  // namespace strata::tmpl
