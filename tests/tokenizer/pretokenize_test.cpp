// The Qwen pre-tokenizers piece by piece on hand-picked cases where the regex alternatives meet,
// UTF-8 repair, NFC, and the cut points of the parallel mode. (tools/ref/onig_pretok_diff.cpp
// checks the scanner against Oniguruma itself on the corpus and 300,000 random strings.)
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/normalize.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {
namespace {

std::vector<std::string> pieces(std::string_view text, PreTokenizer p = PreTokenizer::Qwen2) {
    std::vector<std::string> out;
    PieceScanner s(p, text);
    for (std::string_view piece; s.next(piece);) out.emplace_back(piece);
    return out;
}

using P = std::vector<std::string>;

TEST(Qwen2PreTokenizer, Contractions) {
    EXPECT_EQ(pieces("I'm"), (P{"I", "'m"}));
    EXPECT_EQ(pieces("WE'RE they'Ve"), (P{"WE", "'RE", " they", "'Ve"}));
    EXPECT_EQ(pieces("'stuff"), (P{"'s", "tuff"}));  // the contraction wins over 'stuff
    EXPECT_EQ(pieces("'x"), (P{"'x"}));
    EXPECT_EQ(pieces("'ſa"), (P{"'ſ", "a"}));  // U+017F folds to s under (?i)
    EXPECT_EQ(pieces("''s"), (P{"''", "s"}));  // leftmost match: the punctuation run takes both quotes
    EXPECT_EQ(pieces("'"), (P{"'"}));
}

TEST(Qwen2PreTokenizer, LettersNumbersPunctuation) {
    EXPECT_EQ(pieces("Hello, world!"), (P{"Hello", ",", " world", "!"}));
    EXPECT_EQ(pieces("abc123"), (P{"abc", "1", "2", "3"}));
    EXPECT_EQ(pieces("x²½Ⅻ٣"), (P{"x", "²", "½", "Ⅻ", "٣"}));  // \p{N} is Nd, Nl and No, one at a time
    EXPECT_EQ(pieces("$foo"), (P{"$foo"}));                    // one non-letter may lead a word
    EXPECT_EQ(pieces("$$foo"), (P{"$$", "foo"}));              // but a run of them is punctuation
    EXPECT_EQ(pieces(" ...!?"), (P{" ...!?"}));
    EXPECT_EQ(pieces("!!\n\nx"), (P{"!!\n\n", "x"}));
    EXPECT_EQ(pieces("中文。English"), (P{"中文", "。English"}));
    EXPECT_EQ(pieces("e\xCC\x81t\xCC\x81"), (P{"e", "\xCC\x81t", "\xCC\x81"}));  // marks are not letters in qwen2
    EXPECT_EQ(pieces("\tx\xC2\xA0y"), (P{"\tx", "\xC2\xA0y"}));                  // any non-newline space may lead a word
}

TEST(Qwen2PreTokenizer, Whitespace) {
    EXPECT_EQ(pieces("a  b"), (P{"a", " ", " b"}));
    EXPECT_EQ(pieces("a   "), (P{"a", "   "}));                    // at the end, the whole run
    EXPECT_EQ(pieces("  \n  hello"), (P{"  \n", " ", " hello"}));  // up to the last newline
    EXPECT_EQ(pieces("x\r\n\r\ny"), (P{"x", "\r\n\r\n", "y"}));
    EXPECT_EQ(pieces("x \n \n  1"), (P{"x", " \n \n", " ", " ", "1"}));
    EXPECT_EQ(pieces("\t\t!"), (P{"\t", "\t", "!"}));
    EXPECT_EQ(pieces("  !"), (P{" ", " !"}));
    EXPECT_EQ(pieces("\xE3\x80\x80\xE3\x80\x80x"), (P{"\xE3\x80\x80", "\xE3\x80\x80x"}));  // U+3000 is 3 bytes
    EXPECT_EQ(pieces("a\xC2\x85\xC2\x85"), (P{"a", "\xC2\x85\xC2\x85"}));                  // NEL is white space
    EXPECT_EQ(pieces("a\xE2\x80\x8B\xE2\x80\x8B"), (P{"a", "\xE2\x80\x8B\xE2\x80\x8B"}));  // ZWSP is not
}

TEST(Qwen35PreTokenizer, MarksJoinLetters) {
    const auto q35 = PreTokenizer::Qwen35;
    EXPECT_EQ(pieces("e\xCC\x81t\xCC\x81", q35), (P{"e\xCC\x81t\xCC\x81"}));
    EXPECT_EQ(pieces("क्षत्रिय", q35), (P{"क्षत्रिय"}));
    EXPECT_EQ(pieces("!\xCC\x81", q35), (P{"!\xCC\x81"}));  // a mark after a non-letter still starts a word
    EXPECT_EQ(pieces("Hello, world!", q35), (P{"Hello", ",", " world", "!"}));
    EXPECT_EQ(pre_tokenizer_from_name("qwen35"), q35);
    EXPECT_EQ(pre_tokenizer_from_name("qwen2"), PreTokenizer::Qwen2);
    EXPECT_EQ(pre_tokenizer_from_name("llama3"), std::nullopt);
}

TEST(Qwen2PreTokenizer, AnyBytesArePartitioned) {
    std::mt19937 rng(5);
    for (int round = 0; round < 20000; ++round) {
        std::string text;
        const int n = static_cast<int>(rng() % 24);
        for (int i = 0; i < n; ++i) text += static_cast<char>(rng() % 4 == 0 ? "\n '\xC3\xE4\x80"[rng() % 7] : rng() % 256);
        for (const auto p : {PreTokenizer::Qwen2, PreTokenizer::Qwen35}) {
            std::string joined;
            for (const auto& piece : pieces(text, p)) {
                ASSERT_FALSE(piece.empty());
                joined += piece;
            }
            ASSERT_EQ(joined, text);
        }
    }
}

TEST(Qwen2PreTokenizer, SafeCutsSplitNothing) {
    const char* bits[] = {"\n", "\r\n", " ",        "  ",           "\t",       "x",  "Word", "1",
                          "!",  "'s",   "\xC2\xA0", "\xE3\x80\x80", "\xCC\x81", "中", "\xFF"};
    std::mt19937 rng(9);
    size_t cuts = 0;
    for (int round = 0; round < 3000; ++round) {
        std::string text;
        const int n = static_cast<int>(rng() % 16);
        for (int i = 0; i < n; ++i) text += bits[rng() % (sizeof bits / sizeof bits[0])];
        const P whole = pieces(text);
        for (size_t pos = 1; pos < text.size(); ++pos) {
            if (!is_safe_cut(text, pos)) continue;
            ++cuts;
            P parts = pieces(std::string_view(text).substr(0, pos));
            for (auto& p : pieces(std::string_view(text).substr(pos))) parts.push_back(p);
            ASSERT_EQ(parts, whole) << "cut at " << pos;
        }
    }
    EXPECT_GT(cuts, 1000u);
    EXPECT_FALSE(is_safe_cut("a\n b", 2));
    EXPECT_TRUE(is_safe_cut("a\nb", 2));
    EXPECT_FALSE(is_safe_cut("ab", 1));
}

TEST(Utf8, LossyRepairFollowsMaximalSubparts) {
    const auto lossy = [](std::string_view s) {
        std::string out;
        utf8::append_lossy(out, s);
        return out;
    };
    const std::string r = "\xEF\xBF\xBD";
    EXPECT_EQ(lossy("abc"), "abc");
    EXPECT_EQ(lossy("\xE4\xB8\xAD"), "中");
    EXPECT_EQ(lossy("\xE4\xB8"), r);  // truncated: one replacement
    EXPECT_EQ(lossy("\xE4\xB8x"), r + "x");
    EXPECT_EQ(lossy("\xC0\x80"), r + r);                  // C0 never starts a sequence
    EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);          // a surrogate
    EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
    EXPECT_EQ(lossy("\xF0\x9F\x98"), r);
    EXPECT_EQ(lossy("\x80\xBF"), r + r);
    std::string held;
    EXPECT_EQ(utf8::append_lossy(held, "ab\xF0\x9F", true), 2u);
    EXPECT_EQ(held, "ab");
}

TEST(Nfc, ComposesAndKeepsBadBytes) {
    std::string storage;
    const std::string ascii = "plain ascii";
    EXPECT_EQ(nfc(ascii, storage).data(), ascii.data());  // no copy when nothing changes
    const std::string composed = "é中文";
    EXPECT_EQ(nfc(composed, storage).data(), composed.data());
    EXPECT_EQ(nfc("e\xCC\x81", storage), "é");
    EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", storage), "각");  // conjoining jamo
    EXPECT_EQ(nfc("\xE2\x84\xAB", storage), "Å");                           // Angstrom sign
    EXPECT_EQ(nfc("\xFF"
                  "e\xCC\x81\xFE",
                  storage),
              "\xFF"
              "é\xFE");
    EXPECT_EQ(nfc("ﬁ①", storage), "ﬁ①");  // compatibility forms are left alone by NFC
}

}  // namespace
}  // namespace strata::tokenizer
