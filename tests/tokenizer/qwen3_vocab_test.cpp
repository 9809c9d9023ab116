// The real Qwen3 vocabulary (GGUF fixture): metadata, streaming over multi-byte characters split
// across tokens, invalid UTF-8 input, long pieces, and the special-token flag.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/normalize.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace strata::test {
namespace {

using V = std::vector<int32_t>;

TEST(Qwen3Vocab, Metadata) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto& tok = qwen3_tokenizer();
    EXPECT_EQ(tok.n_vocab(), 151936);
    EXPECT_EQ(tok.eos(), 151645);
    EXPECT_EQ(tok.pad(), 151643);
    EXPECT_EQ(tok.bos(), -1);
    EXPECT_FALSE(tok.add_bos());
    EXPECT_TRUE(tok.is_special(151644));   // <|im_start|>: control
    EXPECT_FALSE(tok.is_special(151667));  // <think>: user-defined
    EXPECT_EQ(tok.token_type(151700), tokenizer::TokenType::Unused);
    EXPECT_EQ(tok.token_bytes(151644), "<|im_start|>");
    EXPECT_EQ(tok.token_bytes(220), " ");
    EXPECT_EQ(tok.token_bytes(198), "\n");
    EXPECT_EQ(tok.pre_tokenizer(), tokenizer::PreTokenizer::Qwen2);
}

TEST(Qwen3Vocab, SpecialFlag) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto& tok = qwen3_tokenizer();
    EXPECT_EQ(tok.encode("<|im_start|><think>"), (V{151644, 151667}));
    const V plain = tok.encode("<|im_start|><think>", false);
    EXPECT_EQ(std::count_if(plain.begin(), plain.end(), [](int32_t id) { return id >= 151643; }), 0);
    EXPECT_EQ(tok.decode(plain), "<|im_start|><think>");
}

TEST(Qwen3Vocab, StreamingSplitsNoCharacter) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto& tok = qwen3_tokenizer();
    const std::string text =
        "👨‍👩‍👧‍👦 𠮷野家 ภาษาไทย 🏴󠁧󠁢󠁥󠁮󠁧󠁿 Ω≈ç√∫ 中文 "
        "emoji🎉🎉";
    const V ids = tok.encode(text);
    // Some tokens of this text end inside a character: that is what the decoder must hold back.
    size_t partial_tokens = 0;
    for (const int32_t id : ids) partial_tokens += !tokenizer::utf8::is_valid(tok.token_bytes(id));
    EXPECT_GT(partial_tokens, 3u);
    tokenizer::StreamDecoder stream(tok);
    std::string out;
    for (const int32_t id : ids) {
        const std::string piece = stream.push(id);
        EXPECT_TRUE(tokenizer::utf8::is_valid(piece));
        EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
        out += piece;
    }
    out += stream.flush();
    EXPECT_EQ(out, text);
}

TEST(Qwen3Vocab, InvalidUtf8NeverCrashes) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto& tok = qwen3_tokenizer();
    std::mt19937 rng(17);
    for (int round = 0; round < 2000; ++round) {
        std::string text;
        const int n = static_cast<int>(rng() % 64);
        for (int i = 0; i < n; ++i) text += static_cast<char>(rng() % 3 ? rng() % 256 : "a \n'<|\xC3\xE4\xF0\x80"[rng() % 10]);
        const V ids = tok.encode(text, false);
        std::string bytes;
        for (const int32_t id : ids) bytes += tok.token_bytes(id);
        std::string storage;
        ASSERT_EQ(bytes, std::string(tokenizer::nfc(text, storage))) << escaped(text);  // byte-level: nothing lost
        ASSERT_TRUE(tokenizer::utf8::is_valid(tok.decode(ids)));
        ASSERT_TRUE(tokenizer::utf8::is_valid(tok.decode(tok.encode(text))));
    }
    EXPECT_EQ(tok.encode("\xFF"), (V{tok.encode("\xFF").at(0)}));
    EXPECT_EQ(tok.decode(tok.encode("ok\xFFok")), "ok\xEF\xBF\xBDok");
}

TEST(Qwen3Vocab, LongPiecesStayFast) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto& tok = qwen3_tokenizer();
    // One 200 KB piece (the pathological case for naive BPE): must finish quickly and round-trip.
    std::string blob;
    std::mt19937 rng(1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for (int i = 0; i < 200000; ++i) blob += alphabet[rng() % 52];
    const V ids = tok.encode(blob);
    EXPECT_EQ(tok.decode(ids), blob);
    EXPECT_EQ(tok.decode(tok.encode(std::string(100000, 'a'))), std::string(100000, 'a'));
}

}  // namespace
}  // namespace strata::test
