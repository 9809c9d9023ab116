// Text helpers with Python's str semantics over UTF-8 bytes: templates index, slice, measure and
// strip strings by code point, print them with repr() and json.dumps() escaping.
//
// Bytes that are not valid UTF-8 cannot occur in a Python str; here each such byte decodes as
// U+FFFD so that nothing reads out of bounds.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tmpl::text {

// Decodes the code point at s[pos] and advances pos past it.
char32_t decode(std::string_view s, size_t& pos);
void encode(std::string& out, char32_t cp);
bool is_ascii(std::string_view s);
size_t length(std::string_view s);  // in code points
// Byte offset of every code point, plus s.size() at the end.
std::vector<size_t> offsets(std::string_view s);

bool is_space(char32_t c);      // str.isspace
bool is_printable(char32_t c);  // str.isprintable (an approximation outside the common blocks)
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
char32_t to_lower(char32_t c);  // ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic
char32_t to_upper(char32_t c);
bool is_lower_cased(char32_t c);
bool is_upper_cased(char32_t c);
std::string lower(std::string_view s);
std::string upper(std::string_view s);
std::string title(std::string_view s);       // str.title
std::string capitalize(std::string_view s);  // str.capitalize

// str.strip / lstrip / rstrip; `chars` null means whitespace.
std::string_view strip(std::string_view s, bool left, bool right, const std::string* chars = nullptr);

// repr(s): single quotes unless the text has ' and no ", Python's escapes.
std::string repr(std::string_view s);
// The body of a JSON string literal as Python's json.dumps writes it, quotes included.
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace strata::tmpl::text
