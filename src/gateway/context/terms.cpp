#include "gateway/context/terms.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>

#include "gateway/context/hash.h"

namespace strata::gateway {
namespace {

bool is_cjk(UChar32 c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2FA1F) ||
           (c >= 0xF900 && c <= 0xFAFF) ||                                                                // Han
           (c >= 0x3040 && c <= 0x30FF) || (c >= 0x31F0 && c <= 0x31FF) ||                                // kana
           (c >= 0xAC00 && c <= 0xD7AF) || (c >= 0x1100 && c <= 0x11FF) || (c >= 0x3130 && c <= 0x318F);  // Hangul
}

enum class CharKind { Other, Word, Cjk };

CharKind kind_of(UChar32 c) {
    if (c < 0x80) {
        const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        return alnum ? CharKind::Word : CharKind::Other;
    }
    if (c < 0) return CharKind::Other;  // ill-formed UTF-8
    if (is_cjk(c)) return CharKind::Cjk;
    return u_isalnum(c) ? CharKind::Word : CharKind::Other;
}

void append_utf8(std::string& out, UChar32 c) {
    char buf[4];
    int32_t n = 0;
    UBool error = false;
    U8_APPEND(reinterpret_cast<uint8_t*>(buf), n, 4, c, error);
    if (!error) out.append(buf, static_cast<size_t>(n));
}

// Where a part of an identifier begins: after '_', lower->Upper, letter<->digit, and inside an
// upper run before its last capital when a lower follows ("HTTPHeader": HTTP|Header).
struct WordChar {
    UChar32 c;
    size_t lower_begin;  // its position in the lowercased word
};

constexpr size_t kMaxWordBytes = 64;  // longer runs (base64, hashes) are kept whole only

void emit_word(std::string_view raw, std::string& lower, std::vector<WordChar>& chars,
               const std::function<void(std::string_view)>& emit) {
    lower.clear();
    chars.clear();
    size_t i = 0;
    while (i < raw.size()) {
        UChar32 c;
        U8_NEXT(reinterpret_cast<const uint8_t*>(raw.data()), i, raw.size(), c);
        chars.push_back({c, lower.size()});
        if (c < 0x80) lower.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
        else append_utf8(lower, u_tolower(c));
    }
    // The whole word without its leading/trailing underscores.
    const size_t a = lower.find_first_not_of('_');
    if (a == std::string::npos) return;
    const size_t b = lower.find_last_not_of('_');
    emit(std::string_view(lower).substr(a, b - a + 1));
    if (raw.size() > kMaxWordBytes) return;

    auto cls = [](UChar32 c) { return c == '_' ? 0 : u_isdigit(c) ? 1 : u_isupper(c) ? 2 : 3; };
    std::vector<std::pair<size_t, size_t>> parts;  // [begin, end) in lower
    size_t start = 0;
    bool open = false;
    for (size_t k = 0; k < chars.size(); ++k) {
        const int c = cls(chars[k].c);
        if (c == 0) {
            if (open) parts.emplace_back(chars[start].lower_begin, chars[k].lower_begin);
            open = false;
            continue;
        }
        if (open) {
            const int p = cls(chars[k - 1].c);
            const bool next_lower = k + 1 < chars.size() && cls(chars[k + 1].c) == 3;
            const bool cut = (p == 1) != (c == 1) || (p == 3 && c == 2) || (p == 2 && c == 2 && next_lower);
            if (cut) {
                parts.emplace_back(chars[start].lower_begin, chars[k].lower_begin);
                start = k;
            }
        } else {
            start = k;
            open = true;
        }
    }
    if (open) parts.emplace_back(chars[start].lower_begin, lower.size());
    if (parts.size() < 2) return;
    for (const auto& [pb, pe] : parts) emit(std::string_view(lower).substr(pb, pe - pb));
}

}  // namespace

void for_each_term(std::string_view text, const std::function<void(std::string_view)>& emit) {
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    std::string lower, pair;
    std::vector<WordChar> chars;
    size_t i = 0;
    size_t word_begin = 0;
    bool in_word = false;
    size_t prev_cjk_begin = 0, prev_cjk_end = 0;  // the previous CJK character, for bigrams
    bool prev_cjk = false;
    while (i < n) {
        const size_t at = i;
        UChar32 c;
        U8_NEXT(s, i, n, c);
        const CharKind k = kind_of(c);
        if (k != CharKind::Word && in_word) {
            emit_word(text.substr(word_begin, at - word_begin), lower, chars, emit);
            in_word = false;
        }
        if (k == CharKind::Word && !in_word) {
            word_begin = at;
            in_word = true;
        }
        if (k == CharKind::Cjk) {
            const std::string_view ch = text.substr(at, i - at);
            emit(ch);
            if (prev_cjk) {
                pair.assign(text.substr(prev_cjk_begin, prev_cjk_end - prev_cjk_begin));
                pair.append(ch);
                emit(pair);
            }
            prev_cjk_begin = at;
            prev_cjk_end = i;
        }
        prev_cjk = k == CharKind::Cjk;
    }
    if (in_word) emit_word(text.substr(word_begin), lower, chars, emit);
}

std::vector<std::string> split_terms(std::string_view text) {
    std::vector<std::string> out;
    for_each_term(text, [&](std::string_view t) { out.emplace_back(t); });
    return out;
}

uint64_t term_hash(std::string_view term) { return hash_bytes(term, 0x7465726d73ull); }

std::vector<TermCount> count_terms(std::string_view text) {
    std::vector<uint64_t> hashes;
    hashes.reserve(text.size() / 4 + 4);
    for_each_term(text, [&](std::string_view t) { hashes.push_back(term_hash(t)); });
    std::sort(hashes.begin(), hashes.end());
    std::vector<TermCount> out;
    for (size_t i = 0; i < hashes.size();) {
        size_t j = i;
        while (j < hashes.size() && hashes[j] == hashes[i]) ++j;
        out.push_back({hashes[i], static_cast<uint32_t>(j - i)});
        i = j;
    }
    return out;
}

}  // namespace strata::gateway
