#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {

namespace {

constexpr uint32_t kNotAChar = 0xFFFFFFFFu;  // an ill-formed byte: matches no class and no literal

struct Char {
    uint32_t cp;
    uint32_t len;
    uint8_t cls;
};

inline Char char_at(const CharClassTable& table, const uint8_t* s, size_t n, size_t i) {
    const uint8_t b = s[i];
    if (b < 0x80) return {b, 1, table.of(b)};
    const utf8::Step st = utf8::step(s + i, s + n);
    if (st.status != utf8::Status::Ok) return {kNotAChar, 1, 0};
    return {st.cp, st.len, table.of(st.cp)};
}

inline bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Length in bytes of a contraction suffix starting at p (after the apostrophe), or 0.
// (?i:s|t|re|ve|m|ll|d): the only non-ASCII code point whose simple case folding is one of
// these letters is U+017F LATIN SMALL LETTER LONG S (folds to 's').
inline size_t contraction_len(const uint8_t* s, size_t n, size_t p) {
    if (p >= n) return 0;
    const uint8_t b = s[p];
    const uint8_t lower = static_cast<uint8_t>(b | 0x20);
    const bool ascii_letter = (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z');
    if (ascii_letter) {
        if (lower == 's' || lower == 't' || lower == 'm' || lower == 'd') return 1;
        if (p + 1 < n) {
            const uint8_t b2 = s[p + 1];
            const uint8_t lower2 = static_cast<uint8_t>(b2 | 0x20);
            const bool ascii2 = (b2 >= 'A' && b2 <= 'Z') || (b2 >= 'a' && b2 <= 'z');
            if (ascii2 && ((lower == 'r' && lower2 == 'e') || (lower == 'v' && lower2 == 'e') || (lower == 'l' && lower2 == 'l')))
                return 2;
        }
        return 0;
    }
    if (b == 0xC5 && p + 1 < n && s[p + 1] == 0xBF) return 2;  // U+017F
    return 0;
}

// kLetters: the class of \p{L}+ runs; kPunct excludes: what [^\s\p{L}\p{N}] (plus \p{M}) rules out.
template <uint8_t kLetters, uint8_t kNotPunct>
size_t piece_end(const CharClassTable& table, const uint8_t* s, size_t n, size_t i) {
    const auto letter_run_end = [&](size_t j) {
        while (j < n) {
            const Char d = char_at(table, s, n, j);
            if (!(d.cls & kLetters)) break;
            j += d.len;
        }
        return j;
    };
    const Char c = char_at(table, s, n, i);
    const size_t after_c = i + c.len;

    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c.cp == '\'') {
        if (const size_t k = contraction_len(s, n, after_c)) return after_c + k;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (c.cls & kLetters) return letter_run_end(after_c);
    Char d{kNotAChar, 0, 0};  // the character after c, when there is one
    if (after_c < n) d = char_at(table, s, n, after_c);
    if (!is_newline(c.cp) && !(c.cls & kNumber) && d.len && (d.cls & kLetters)) return letter_run_end(after_c + d.len);
    // \p{N}
    if (c.cls & kNumber) return after_c;
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    const bool c_punct = !(c.cls & kNotPunct);
    if (c_punct || (c.cp == ' ' && d.len && !(d.cls & kNotPunct))) {
        size_t j = c_punct ? after_c : after_c + d.len;
        while (j < n) {
            const Char e = char_at(table, s, n, j);
            if (e.cls & kNotPunct) break;
            j += e.len;
        }
        while (j < n && (s[j] == '\r' || s[j] == '\n')) ++j;
        return j;
    }
    // c is white space: \s*[\r\n]+ | \s+(?!\S) | \s+
    size_t j = i;
    size_t last_newline_end = 0;  // end of the last \r or \n in the run (0: none)
    size_t last_char = i;         // start of the run's last character
    while (j < n) {
        const Char e = char_at(table, s, n, j);
        if (!(e.cls & kSpace)) break;
        if (is_newline(e.cp)) last_newline_end = j + 1;
        last_char = j;
        j += e.len;
    }
    if (last_newline_end) return last_newline_end;  // \s* backs off to the last newline
    if (j == n) return j;                           // (?!\S) holds at the end of the text
    if (last_char > i) return last_char;            // give back one character so (?!\S) holds
    return j;                                       // a lone space before non-space: \s+
}

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
    // Names llama.cpp's converter writes for tokenizers with the Qwen2 pattern.
    if (name == "qwen2" || name == "deepseek-r1-qwen" || name == "megrez" || name == "kormo" || name == "f2llmv2")
        return PreTokenizer::Qwen2;
    if (name == "qwen35") return PreTokenizer::Qwen35;
    return std::nullopt;
}

const char* pre_tokenizer_name(PreTokenizer p) { return p == PreTokenizer::Qwen35 ? "qwen35" : "qwen2"; }

bool pre_tokenizer_uses_nfc(PreTokenizer) { return true; }

size_t next_piece_end(PreTokenizer p, std::string_view text, size_t pos) {
    const CharClassTable& table = CharClassTable::get();
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    if (p == PreTokenizer::Qwen35)
        return piece_end<kLetter | kMark, kSpace | kLetter | kMark | kNumber>(table, s, text.size(), pos);
    return piece_end<kLetter, kSpace | kLetter | kNumber>(table, s, text.size(), pos);
}

// Why a cut before pos is safe when text[pos-1] == '\n' and the character at pos is not space:
// no alternative can match across it. A letter run and its optional prefix exclude '\n'; a
// punctuation run excludes space, and its [\r\n]* tail stops at the non-newline at pos; a space
// run stops at pos. So some piece ends exactly at pos, and matching from pos sees only what follows.
// Matching before pos reads the character at pos only to end one of those runs (end of text ends
// them the same way) or in (?!\S), which is never tried: a space run holding '\n' is taken by
// \s*[\r\n]+ first. NFC: '\n' is a starter that composes with nothing, so nothing moves across it.
bool is_safe_cut(std::string_view text, size_t pos) {
    if (pos == 0 || pos >= text.size() || text[pos - 1] != '\n') return false;
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    const Char c = char_at(CharClassTable::get(), s, text.size(), pos);
    return !(c.cls & kSpace);
}

}  // namespace strata::tokenizer
