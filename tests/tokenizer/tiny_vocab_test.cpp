// Tokenizer behaviour on a tiny hand-built vocabulary (runs everywhere, no fixtures): merges,
// added tokens, decoding and streaming, invalid input, and clear errors for bad metadata.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/normalize.h"
#include "tokenizer_test_util.h"
#include "util/error.h"

namespace strata::test {
namespace {

using tokenizer::Tokenizer;
using V = std::vector<int32_t>;

int32_t byte_id(char c) { return static_cast<uint8_t>(c); }  // the tiny vocabulary's byte tokens

TEST(TinyVocab, MergesByRank) {
    TempDir dir;
    const auto tok = TinyVocab().load(dir);
    EXPECT_EQ(tok->n_vocab(), 269);
    EXPECT_EQ(tok->encode("hello world"), (V{TinyVocab::kHello, TinyVocab::kWorld}));
    EXPECT_EQ(tok->encode("hell"), (V{258}));
    EXPECT_EQ(tok->encode("helo"), (V{256, byte_id('l'), byte_id('o')}));
    EXPECT_EQ(tok->encode(""), V{});
    // "hellllo": he + ll + ll + o; "he ll" (rank 2) merges the leftmost pair first.
    EXPECT_EQ(tok->encode("hellllo"), (V{258, 257, byte_id('o')}));
    // A long piece goes through the heap path and must agree with the short-path result.
    std::string long_word;
    V want;
    for (int i = 0; i < 40; ++i) {
        long_word += "hello";
        want.push_back(TinyVocab::kHello);
    }
    EXPECT_EQ(tok->encode(long_word), want);
}

TEST(TinyVocab, AddedTokensLongestMatchAndPlainMode) {
    TempDir dir;
    const auto tok = TinyVocab().load(dir);
    EXPECT_EQ(tok->encode("hello<|end|>"), (V{TinyVocab::kHello, TinyVocab::kEnd}));
    EXPECT_EQ(tok->encode("<|end|><think>"), (V{TinyVocab::kEnd, TinyVocab::kThink}));
    EXPECT_EQ(tok->encode("<|ex"), (V{TinyVocab::kEndPrefix, byte_id('x')}));  // the longest that matches
    EXPECT_EQ(tok->encode("<|en"), (V{TinyVocab::kEndPrefix, byte_id('n')}));
    // Unused tokens are never matched in text.
    EXPECT_EQ(tok->encode("[PAD267]").size(), 8u);
    // parse_special = false: every byte is plain text.
    const V plain = tok->encode("<|end|>", false);
    ASSERT_EQ(plain.size(), 7u);
    EXPECT_EQ(plain[0], byte_id('<'));
    EXPECT_TRUE(tok->is_special(TinyVocab::kEnd));
    EXPECT_FALSE(tok->is_special(TinyVocab::kThink));
    EXPECT_EQ(tok->eos(), TinyVocab::kEnd);
    EXPECT_EQ(tok->bos(), -1);
    EXPECT_FALSE(tok->add_bos());
}

TEST(TinyVocab, DecodeAndTokenBytes) {
    TempDir dir;
    const auto tok = TinyVocab().load(dir);
    EXPECT_EQ(tok->decode(V{TinyVocab::kHello, TinyVocab::kWorld, TinyVocab::kEnd}), "hello world<|end|>");
    EXPECT_EQ(tok->token_bytes(byte_id(' ')), " ");
    EXPECT_EQ(tok->token_bytes(0xE4), "\xE4");
    EXPECT_EQ(tok->decode(V{TinyVocab::kPad}), "");         // unused tokens decode to nothing
    EXPECT_EQ(tok->decode(V{0xE4, 0xB8}), "\xEF\xBF\xBD");  // an unfinished sequence: one U+FFFD
    EXPECT_EQ(tok->decode(V{0xC0, 0x80}), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_THROW(tok->decode(V{269}), Error);
    EXPECT_THROW(tok->decode(V{-1}), Error);
    EXPECT_THROW(tok->token_bytes(100000), Error);
}

TEST(TinyVocab, StreamDecoderHoldsIncompleteCharacters) {
    TempDir dir;
    const auto tok = TinyVocab().load(dir);
    tokenizer::StreamDecoder s(*tok);
    // 中 = E4 B8 AD, one byte token each.
    EXPECT_EQ(s.push(0xE4), "");
    EXPECT_EQ(s.push(0xB8), "");
    EXPECT_EQ(s.pending_bytes(), 2u);
    EXPECT_EQ(s.push(0xAD), "中");
    EXPECT_EQ(s.push(TinyVocab::kHello), "hello");
    // A byte that can never start a character comes out as U+FFFD at once.
    EXPECT_EQ(s.push(0xFF), "\xEF\xBF\xBD");
    // A broken sequence: the lead is replaced as soon as the next byte shows it cannot finish.
    EXPECT_EQ(s.push(0xE4), "");
    EXPECT_EQ(s.push(byte_id('a')),
              "\xEF\xBF\xBD"
              "a");
    // 😀 = F0 9F 98 80 across four tokens, then flush with half a character pending.
    EXPECT_EQ(s.push(0xF0), "");
    EXPECT_EQ(s.push(0x9F), "");
    EXPECT_EQ(s.push(0x98), "");
    EXPECT_EQ(s.push(0x80), "😀");
    EXPECT_EQ(s.push(0xF0), "");
    EXPECT_EQ(s.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(s.flush(), "");
    EXPECT_THROW(s.push(5000), Error);
}

TEST(TinyVocab, StreamEqualsDecodeOnRandomIds) {
    TempDir dir;
    const auto tok = TinyVocab().load(dir);
    std::mt19937 rng(3);
    for (int round = 0; round < 2000; ++round) {
        V ids;
        const int n = static_cast<int>(rng() % 12);
        for (int i = 0; i < n; ++i) {
            // Mostly UTF-8-ish bytes so sequences complete sometimes.
            const uint32_t r = rng() % 10;
            ids.push_back(r < 3   ? static_cast<int32_t>(0x80 + rng() % 64)
                          : r < 5 ? static_cast<int32_t>(0xC2 + rng() % 51)
                                  : static_cast<int32_t>(rng() % 269));
        }
        tokenizer::StreamDecoder s(*tok);
        std::string streamed;
        for (const int32_t id : ids) streamed += s.push(id);
        streamed += s.flush();
        ASSERT_EQ(streamed, tok->decode(ids)) << "round " << round;
        ASSERT_TRUE(tokenizer::utf8::is_valid(streamed));
    }
}

TEST(TinyVocab, AnyBytesEncodeWithoutLoss) {
    TempDir dir;
    const auto tok = TinyVocab().load(dir);
    std::mt19937 rng(11);
    for (int round = 0; round < 3000; ++round) {
        std::string text;
        const int n = static_cast<int>(rng() % 40);
        for (int i = 0; i < n; ++i) {
            const uint32_t r = rng() % 6;
            text += r == 0   ? std::string("<|end|>")
                    : r == 1 ? std::string("e\xCC\x81")
                             : std::string(1, static_cast<char>(rng() % 256));
        }
        for (const bool special : {true, false}) {
            const V ids = tok->encode(text, special);
            std::string bytes;
            for (const int32_t id : ids) bytes += tok->token_bytes(id);
            std::string storage;
            // Byte-level BPE loses nothing: the token bytes are the (NFC-normalized) input.
            if (!special) {
                ASSERT_EQ(bytes, std::string(tokenizer::nfc(text, storage))) << escaped(text);
            }
            ASSERT_TRUE(tokenizer::utf8::is_valid(tok->decode(ids)));
            ASSERT_EQ(tok->encode_parallel(text, 3, special), ids);
        }
    }
}

// Loading a vocabulary with one key changed must fail with a message naming that key.
void expect_load_error(const std::vector<std::pair<std::string, gguf::Value>>& extra, const std::string& key, TinyVocab v = {}) {
    TempDir dir;
    v.write(dir / "bad.gguf", extra);
    const auto f = gguf::File::open(dir / "bad.gguf");
    try {
        Tokenizer::from_gguf(*f);
        ADD_FAILURE() << "loaded a vocabulary with a bad " << key;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    }
}

TEST(TinyVocab, BadMetadataIsReportedByKey) {
    expect_load_error({{"tokenizer.ggml.model", gguf::Value::of_string("llama")}}, "tokenizer.ggml.model");
    expect_load_error({{"tokenizer.ggml.pre", gguf::Value::of_string("gpt-4o")}}, "tokenizer.ggml.pre");
    expect_load_error({{"tokenizer.ggml.token_type", gguf::Value::of_i32s({1, 1})}}, "tokenizer.ggml.token_type");
    expect_load_error({{"tokenizer.ggml.token_type", gguf::Value::of_i32s(std::vector<int32_t>(269, 9))}},
                      "tokenizer.ggml.token_type");
    expect_load_error({{"tokenizer.ggml.merges", gguf::Value::of_strings({"h e", "nospace"})}}, "tokenizer.ggml.merges");
    expect_load_error({{"tokenizer.ggml.merges", gguf::Value::of_strings({"h zz"})}}, "tokenizer.ggml.merges");
    expect_load_error({{"tokenizer.ggml.merges", gguf::Value::of_strings({"x y"})}},
                      "tokenizer.ggml.merges");  // "xy" is no token
    expect_load_error({{"tokenizer.ggml.eos_token_id", gguf::Value::of_u32(269)}}, "tokenizer.ggml.eos_token_id");
    expect_load_error({{"tokenizer.ggml.add_bos_token", gguf::Value::of_bool(true)}}, "tokenizer.ggml.bos_token_id");
    expect_load_error({{"tokenizer.ggml.tokens", gguf::Value::of_strings({})}}, "tokenizer.ggml.tokens");
    expect_load_error({{"tokenizer.ggml.model", gguf::Value::of_u32(3)}}, "tokenizer.ggml.model");  // wrong type
}

TEST(TinyVocab, MissingKeysAreReported) {
    TempDir dir;
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::of_string("qwen3moe"));
    w.write_all(dir / "empty.gguf", {});
    const auto f = gguf::File::open(dir / "empty.gguf");
    try {
        Tokenizer::from_gguf(*f);
        ADD_FAILURE() << "loaded a file without a vocabulary";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace strata::test
