#include "template/jinja_text.h"

#include <cstdio>

namespace strata::tmpl::text {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

bool in(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

}  // namespace

char32_t decode(std::string_view s, size_t& pos) {
    const auto b0 = static_cast<unsigned char>(s[pos]);
    if (b0 < 0x80) {
        ++pos;
        return b0;
    }
    size_t need = 0;
    char32_t cp = 0;
    char32_t min = 0;
    if ((b0 & 0xE0) == 0xC0) {
        need = 1, cp = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
        need = 2, cp = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
        need = 3, cp = b0 & 0x07, min = 0x10000;
    } else {
        ++pos;
        return kReplacement;
    }
    if (pos + need >= s.size()) {
        ++pos;
        return kReplacement;
    }
    for (size_t k = 1; k <= need; ++k) {
        const auto b = static_cast<unsigned char>(s[pos + k]);
        if ((b & 0xC0) != 0x80) {
            ++pos;
            return kReplacement;
        }
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || in(cp, 0xD800, 0xDFFF)) {
        ++pos;
        return kReplacement;
    }
    pos += need + 1;
    return cp;
}

void encode(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

bool is_ascii(std::string_view s) {
    for (char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    return true;
}

size_t length(std::string_view s) {
    if (is_ascii(s)) return s.size();
    size_t n = 0;
    for (size_t pos = 0; pos < s.size(); ++n) decode(s, pos);
    return n;
}

std::vector<size_t> offsets(std::string_view s) {
    std::vector<size_t> out;
    out.reserve(s.size() + 1);
    for (size_t pos = 0; pos < s.size();) {
        out.push_back(pos);
        decode(s, pos);
    }
    out.push_back(s.size());
    return out;
}

bool is_space(char32_t c) {
    return in(c, 0x09, 0x0D) || in(c, 0x1C, 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 || in(c, 0x2000, 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_printable(char32_t c) {
    if (c < 0x20 || in(c, 0x7F, 0xA0) || c == 0xAD) return false;
    if (c < 0x300) return true;
    // Format characters (Cf), separators other than the space (Zs, Zl, Zp), private use (Co),
    // surrogates and non-characters: the ones Python's repr escapes.
    if (in(c, 0x600, 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E || c == 0x1680) return false;
    if (in(c, 0x2000, 0x200F) || in(c, 0x2028, 0x202F) || in(c, 0x205F, 0x206F)) return false;
    if (c == 0x3000 || in(c, 0xD800, 0xF8FF) || c == 0xFEFF || in(c, 0xFFF0, 0xFFFB) || in(c, 0xFFFE, 0xFFFF)) return false;
    if (c == 0x110BD || in(c, 0x1D173, 0x1D17A) || in(c, 0xE0000, 0xE007F) || c >= 0xF0000) return false;
    return true;
}

bool is_alpha(char32_t c) {
    if (c < 0x80) return in(c, 'a', 'z') || in(c, 'A', 'Z');
    // Letters of the blocks that case mapping covers, CJK and the other large scripts.
    if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
    if (in(c, 0xC0, 0x24F) && c != 0xD7 && c != 0xF7) return true;
    if (in(c, 0x370, 0x3FF) || in(c, 0x400, 0x52F) || in(c, 0x5D0, 0x5EA) || in(c, 0x620, 0x64A)) return true;
    if (in(c, 0x3040, 0x30FF) || in(c, 0x3400, 0x4DBF) || in(c, 0x4E00, 0x9FFF) || in(c, 0xAC00, 0xD7A3)) return true;
    return false;
}

bool is_digit(char32_t c) { return in(c, '0', '9'); }

char32_t to_lower(char32_t c) {
    if (c < 0x80) return in(c, 'A', 'Z') ? c + 32 : c;
    if (in(c, 0xC0, 0xDE) && c != 0xD7) return c + 32;
    if (in(c, 0x100, 0x137) || in(c, 0x14A, 0x177)) return (c % 2 == 0) ? c + 1 : c;
    if (in(c, 0x139, 0x148) || in(c, 0x179, 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x178) return 0xFF;
    if (in(c, 0x391, 0x3A9) && c != 0x3A2) return c + 32;
    if (in(c, 0x410, 0x42F)) return c + 32;
    if (in(c, 0x400, 0x40F)) return c + 80;
    return c;
}

char32_t to_upper(char32_t c) {
    if (c < 0x80) return in(c, 'a', 'z') ? c - 32 : c;
    if (in(c, 0xE0, 0xFE) && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (in(c, 0x100, 0x137) || in(c, 0x14A, 0x177)) return (c % 2 == 1) ? c - 1 : c;
    if (in(c, 0x139, 0x148) || in(c, 0x179, 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (in(c, 0x3B1, 0x3C9) && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (in(c, 0x430, 0x44F)) return c - 32;
    if (in(c, 0x450, 0x45F)) return c - 80;
    return c;
}

bool is_lower_cased(char32_t c) { return to_upper(c) != c || c == 0xDF; }
bool is_upper_cased(char32_t c) { return to_lower(c) != c; }

namespace {

template <class F>
std::string map_code_points(std::string_view s, F&& f) {
    std::string out;
    out.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t c = decode(s, pos);
        const char32_t m = f(c);
        if (m == c) out.append(s.substr(start, pos - start));
        else encode(out, m);
    }
    return out;
}

}  // namespace

std::string lower(std::string_view s) { return map_code_points(s, to_lower); }

std::string upper(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t c = decode(s, pos);
        if (c == 0xDF) {
            out += "SS";  // Python upper-cases the sharp s to two letters
            continue;
        }
        const char32_t m = to_upper(c);
        if (m == c) out.append(s.substr(start, pos - start));
        else encode(out, m);
    }
    return out;
}

std::string title(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool previous_cased = false;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t c = decode(s, pos);
        const bool cased = is_lower_cased(c) || is_upper_cased(c);
        encode(out, cased ? (previous_cased ? to_lower(c) : to_upper(c)) : c);
        previous_cased = cased;
    }
    return out;
}

std::string capitalize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool first = true;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t c = decode(s, pos);
        encode(out, first ? to_upper(c) : to_lower(c));
        first = false;
    }
    return out;
}

std::string_view strip(std::string_view s, bool left, bool right, const std::string* chars) {
    std::vector<char32_t> set;
    if (chars) {
        for (size_t pos = 0; pos < chars->size();) set.push_back(decode(*chars, pos));
    }
    auto stripped = [&](char32_t c) {
        if (!chars) return is_space(c);
        for (char32_t x : set)
            if (x == c) return true;
        return false;
    };
    size_t begin = 0, end = s.size();
    if (left) {
        while (begin < end) {
            size_t pos = begin;
            if (!stripped(decode(s, pos))) break;
            begin = pos;
        }
    }
    if (right) {
        while (end > begin) {
            // Back up over at most three continuation bytes to the start of the last code point.
            size_t start = end - 1;
            for (int k = 0; k < 3 && start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80; ++k) --start;
            size_t pos = start;
            char32_t c = decode(s, pos);
            if (pos != end) {
                c = kReplacement;  // the last byte is not the end of a well-formed sequence
                start = end - 1;
            }
            if (!stripped(c)) break;
            end = start;
        }
    }
    return s.substr(begin, end - begin);
}

std::string repr(std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const bool has_double = s.find('"') != std::string_view::npos;
    const char quote = (has_single && !has_double) ? '"' : '\'';
    std::string out;
    out.reserve(s.size() + 2);
    out += quote;
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t c = decode(s, pos);
        if (c == static_cast<char32_t>(quote) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (!is_printable(c)) {
            char buf[16];
            if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
            else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
            out += buf;
        } else {
            out.append(s.substr(start, pos - start));
        }
    }
    out += quote;
    return out;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
    out += '"';
    for (size_t pos = 0; pos < s.size();) {
        const auto b = static_cast<unsigned char>(s[pos]);
        if (b >= 0x20 && b < 0x80 && b != '"' && b != '\\') {
            // Copy a run of plain ASCII at once.
            size_t end = pos + 1;
            while (end < s.size()) {
                const auto e = static_cast<unsigned char>(s[end]);
                if (e < 0x20 || e >= 0x80 || e == '"' || e == '\\') break;
                ++end;
            }
            out.append(s.substr(pos, end - pos));
            pos = end;
            continue;
        }
        const size_t start = pos;
        const char32_t c = decode(s, pos);
        char buf[16];
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
                    out += buf;
                } else if (ensure_ascii && c >= 0x80) {
                    if (c >= 0x10000) {
                        const char32_t v = c - 0x10000;
                        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
                    } else {
                        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
                    }
                    out += buf;
                } else if (c == kReplacement && pos - start == 1) {
                    encode(out, c);  // an invalid byte: write the replacement character
                } else {
                    out.append(s.substr(start, pos - start));
                }
        }
    }
    out += '"';
}

}  // namespace strata::tmpl::text
