// Differential check of our hand-written pre-tokenizer (src/tokenizer/pretokenize.cpp) against
// Oniguruma, the regex engine Hugging Face tokenizers compiles tokenizer.json patterns with.
// A developer tool, not part of the build (needs libonig-dev):
//
//   g++ -std=c++20 -O2 -Isrc tools/ref/onig_pretok_diff.cpp build/libstrata_core.a -licuuc -lonig -o /tmp/onig_pretok_diff
//   /tmp/onig_pretok_diff [FILE...]   (each FILE's lines, then random strings; exit 1 on any difference)
//
// It also compares our character classes with Oniguruma's \p{L}, \p{N}, \p{M} and \s for every
// code point, which shows where the two Unicode versions disagree.
#include <oniguruma.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

using strata::tokenizer::PreTokenizer;

namespace {

const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

regex_t* compile(const char* pattern) {
    regex_t* re = nullptr;
    OnigErrorInfo einfo;
    const auto* p = reinterpret_cast<const OnigUChar*>(pattern);
    const int r = onig_new(&re, p, p + std::strlen(pattern), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
    if (r != ONIG_NORMAL) {
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, r, &einfo);
        std::fprintf(stderr, "onig_new: %s\n", msg);
        std::exit(2);
    }
    return re;
}

// Piece ends as Hugging Face's Split(Isolated) gets them: every match, plus the gaps between.
std::vector<size_t> onig_pieces(regex_t* re, const std::string& s) {
    std::vector<size_t> ends;
    OnigRegion* region = onig_region_new();
    const auto* base = reinterpret_cast<const OnigUChar*>(s.data());
    const auto* end = base + s.size();
    size_t pos = 0;
    while (pos < s.size()) {
        const int r = onig_search(re, base, end, base + pos, end, region, ONIG_OPTION_NONE);
        if (r < 0) {
            ends.push_back(s.size());
            break;
        }
        const auto b = static_cast<size_t>(region->beg[0]), e = static_cast<size_t>(region->end[0]);
        if (b > pos) ends.push_back(b);  // a gap (never happens for these patterns on valid UTF-8)
        if (e == b) {                    // empty match: step one character
            pos = b + 1;
            continue;
        }
        ends.push_back(e);
        pos = e;
    }
    onig_region_free(region, 1);
    return ends;
}

std::vector<size_t> our_pieces(PreTokenizer p, const std::string& s) {
    std::vector<size_t> ends;
    for (size_t pos = 0; pos < s.size();) ends.push_back(pos = strata::tokenizer::next_piece_end(p, s, pos));
    return ends;
}

std::string show(const std::string& s, const std::vector<size_t>& ends) {
    std::string out;
    size_t b = 0;
    for (const size_t e : ends) {
        out += "[";
        for (size_t i = b; i < e; ++i) {
            const auto c = static_cast<unsigned char>(s[i]);
            if (c < 0x20 || c == 0x7f) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\x%02x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
        out += "]";
        b = e;
    }
    return out;
}

bool onig_matches_whole(regex_t* re, const std::string& s) {
    const auto* base = reinterpret_cast<const OnigUChar*>(s.data());
    return onig_match(re, base, base + s.size(), base, nullptr, ONIG_OPTION_NONE) == static_cast<int>(s.size());
}

int compare_classes() {
    regex_t* L = compile(R"(\p{L})");
    regex_t* N = compile(R"(\p{N})");
    regex_t* M = compile(R"(\p{M})");
    regex_t* S = compile(R"(\s)");
    const auto& table = strata::tokenizer::CharClassTable::get();
    int differ = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        std::string s;
        strata::tokenizer::utf8::append_code_point(s, cp);
        const uint8_t ours = table.of(cp);
        const uint8_t theirs = (onig_matches_whole(L, s) ? strata::tokenizer::kLetter : 0) |
                               (onig_matches_whole(N, s) ? strata::tokenizer::kNumber : 0) |
                               (onig_matches_whole(M, s) ? strata::tokenizer::kMark : 0) |
                               (onig_matches_whole(S, s) ? strata::tokenizer::kSpace : 0);
        if (ours != theirs && ++differ <= 40) std::printf("class U+%04X: ours %d, oniguruma %d\n", cp, ours, theirs);
    }
    std::printf("character classes: %d code points differ\n", differ);
    return differ;
}

}  // namespace

int main(int argc, char** argv) {
    onig_initialize(std::vector<OnigEncoding>{ONIG_ENCODING_UTF8}.data(), 1);
    compare_classes();
    struct Kind {
        PreTokenizer p;
        regex_t* re;
        const char* name;
    } kinds[] = {{PreTokenizer::Qwen2, compile(kQwen2), "qwen2"}, {PreTokenizer::Qwen35, compile(kQwen35), "qwen35"}};

    std::vector<std::string> texts;
    for (int i = 1; i < argc; ++i) {
        std::ifstream in(argv[i], std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        const std::string all = ss.str();
        texts.push_back(all);
        for (size_t pos = 0; pos < all.size();) {
            size_t e = all.find('\n', pos);
            if (e == std::string::npos) e = all.size();
            texts.push_back(all.substr(pos, e - pos));
            pos = e + 1;
        }
    }
    // Random strings over the characters where the pattern's alternatives meet.
    const char* alphabet[] = {"a",
                              "Z",
                              "s",
                              "S",
                              "t",
                              "re",
                              "VE",
                              "ll",
                              "d",
                              "m",
                              "'",
                              "'",
                              "\xC5\xBF" /* ſ */,
                              " ",
                              " ",
                              "  ",
                              "\t",
                              "\n",
                              "\r",
                              "\r\n",
                              "\x0b",
                              "\x0c",
                              "\x1c",
                              "\x00",
                              "1",
                              "42",
                              "!",
                              "?.",
                              "-",
                              "_",
                              "\"",
                              "\xC2\xA0",
                              "\xE3\x80\x80",
                              "\xC2\x85",
                              "\xEF\xBB\xBF",
                              "\xE2\x80\xA8",
                              "\xE2\x80\x8B",
                              "\xE1\xA0\x8E",
                              "\xCC\x81" /* U+0301 */,
                              "\xE0\xA4\x95\xE0\xA5\x8D" /* Devanagari + virama */,
                              "\xE4\xB8\xAD",
                              "\xD8\xB9",
                              "\xD9\xA3",
                              "\xE2\x85\xAB",
                              "\xC2\xB2",
                              "\xC3\xA9",
                              "\xF0\x9F\x98\x80",
                              "\xE2\x80\x8D",
                              "\xEF\xB8\x8F",
                              "\xF0\x9F\x8F\xBD",
                              "\xEF\xBC\xA1",
                              "\xEF\xBC\x81"};
    std::mt19937 rng(7);
    for (int i = 0; i < 300000; ++i) {
        std::string s;
        const int n = 1 + static_cast<int>(rng() % 12);
        for (int k = 0; k < n; ++k) {
            const char* a = alphabet[rng() % (sizeof alphabet / sizeof alphabet[0])];
            s += (a[0] == 0) ? std::string(1, '\0') : std::string(a);
        }
        texts.push_back(s);
    }
    int failures = 0;
    for (const auto& k : kinds) {
        int differ = 0;
        for (const std::string& t : texts) {
            const auto a = onig_pieces(k.re, t), b = our_pieces(k.p, t);
            if (a != b && ++differ <= 10)
                std::printf("%s differs on %s\n  oniguruma: %s\n  ours:      %s\n", k.name, show(t, {t.size()}).c_str(),
                            show(t, a).c_str(), show(t, b).c_str());
        }
        std::printf("%s: %zu texts, %d differ\n", k.name, texts.size(), differ);
        failures += differ;
    }
    onig_end();
    return failures ? 1 : 0;
}
