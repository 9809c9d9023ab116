// Our ids against the reference ids (Hugging Face tokenizers, tests/tokenizer/ref) on the whole
// corpus: every line, every multi-line entry, the whole corpus as one text, and special tokens
// as plain text. Also round trips, and encode_parallel against encode on the same texts.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "tokenizer/normalize.h"
#include "tokenizer_test_util.h"

namespace strata::test {
namespace {

using tokenizer::Tokenizer;

std::vector<std::string> corpus_names() {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(tokenizer_test_dir() / "corpus"))
        if (e.path().extension() == ".txt") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<int32_t> ids_of(const nlohmann::json& entry) { return entry.at("ids").get<std::vector<int32_t>>(); }

// First index where two id lists differ, with a few ids of context, decoded.
std::string describe_difference(const Tokenizer& tok, const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    const size_t from = i > 4 ? i - 4 : 0;
    const auto slice = [&](const std::vector<int32_t>& v) {
        std::vector<int32_t> s(v.begin() + static_cast<std::ptrdiff_t>(std::min(from, v.size())),
                               v.begin() + static_cast<std::ptrdiff_t>(std::min(i + 8, v.size())));
        return ids_text(s) + " " + escaped(tok.decode(s));
    };
    return "first difference at id " + std::to_string(i) + " (of " + std::to_string(got.size()) + " / " +
           std::to_string(want.size()) + ")\n  ours:      " + slice(got) + "\n  reference: " + slice(want);
}

// Compares line by line; reports the first few differing lines with both id lists.
void check_lines(const std::string& name, const std::string& ref_file, bool parse_special, size_t& compared) {
    const Tokenizer& tok = qwen3_tokenizer();
    const std::string text = read_file(tokenizer_test_dir() / "corpus" / (name + ".txt"));
    const std::vector<std::string> lines = split_lines(text);
    const std::vector<nlohmann::json> ref = read_jsonl(tokenizer_test_dir() / "ref" / ref_file);
    size_t n_lines = 0, failures = 0;
    for (const auto& entry : ref) {
        const std::vector<int32_t> want = ids_of(entry);
        if (entry.at("kind") == "file") {
            const std::vector<int32_t> got = tok.encode(text, parse_special);
            EXPECT_EQ(got, want) << name << " as one text: " << describe_difference(tok, got, want);
            continue;
        }
        const auto n = entry.at("n").get<size_t>();
        ASSERT_LT(n, lines.size()) << ref_file << " does not match the corpus: regenerate it";
        ++n_lines;
        const std::vector<int32_t> got = tok.encode(lines[n], parse_special);
        if (got != want && ++failures <= 5) {
            ADD_FAILURE() << name << ".txt line " << n + 1 << ": " << escaped(lines[n]) << "\n  ours:      " << ids_text(got)
                          << "\n  reference: " << ids_text(want);
        }
    }
    EXPECT_EQ(n_lines, lines.size()) << ref_file << " does not cover every line: regenerate it";
    EXPECT_EQ(failures, 0u) << name << ": " << failures << " of " << n_lines << " lines differ";
    compared += n_lines;
}

TEST(TokenizerCorpus, EveryLineMatchesReference) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    size_t compared = 0;
    for (const std::string& name : corpus_names()) check_lines(name, name + ".jsonl", true, compared);
    EXPECT_GT(compared, 5000u);
    std::printf("[ compared ] %zu corpus lines\n", compared);
}

TEST(TokenizerCorpus, MultilineEntriesMatchReference) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const Tokenizer& tok = qwen3_tokenizer();
    const std::vector<nlohmann::json> texts = read_jsonl(tokenizer_test_dir() / "corpus" / "multiline.jsonl");
    const std::vector<nlohmann::json> ref = read_jsonl(tokenizer_test_dir() / "ref" / "multiline.jsonl");
    ASSERT_EQ(texts.size(), ref.size()) << "ref/multiline.jsonl does not match the corpus: regenerate it";
    size_t failures = 0;
    for (size_t n = 0; n < texts.size(); ++n) {
        const std::string text = texts[n].get<std::string>();
        const std::vector<int32_t> got = tok.encode(text), want = ids_of(ref[n]);
        if (got != want && ++failures <= 5)
            ADD_FAILURE() << "multiline entry " << n << ": " << escaped(text) << "\n  ours:      " << ids_text(got)
                          << "\n  reference: " << ids_text(want);
    }
    EXPECT_EQ(failures, 0u) << failures << " of " << texts.size() << " entries differ";
    std::printf("[ compared ] %zu multi-line entries\n", texts.size());
}

std::string whole_corpus() {
    std::string all;
    for (const std::string& name : corpus_names()) all += read_file(tokenizer_test_dir() / "corpus" / (name + ".txt"));
    return all;
}

TEST(TokenizerCorpus, WholeCorpusAsOneTextMatchesReference) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const Tokenizer& tok = qwen3_tokenizer();
    const std::vector<nlohmann::json> ref = read_jsonl(tokenizer_test_dir() / "ref" / "all.jsonl");
    ASSERT_EQ(ref.size(), 1u);
    ASSERT_EQ(ref[0].at("files").get<std::vector<std::string>>().size(), corpus_names().size());
    const std::vector<int32_t> want = ids_of(ref[0]);
    const std::string text = whole_corpus();
    const std::vector<int32_t> got = tok.encode(text);
    EXPECT_EQ(got, want) << describe_difference(tok, got, want);
    std::printf("[ compared ] whole corpus: %zu bytes, %zu ids\n", text.size(), want.size());
}

TEST(TokenizerCorpus, SpecialTokensAsPlainTextMatchReference) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    size_t compared = 0;
    check_lines("special_tokens", "special_tokens.plain.jsonl", false, compared);
    EXPECT_GT(compared, 300u);
}

TEST(TokenizerCorpus, ParallelEqualsSerial) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const Tokenizer& tok = qwen3_tokenizer();
    std::string text = whole_corpus();
    const std::vector<int32_t> serial = tok.encode(text);
    for (const int threads : {2, 3, 8}) {
        EXPECT_EQ(tok.encode_parallel(text, threads), serial) << threads << " threads";
        EXPECT_EQ(tok.encode_parallel(text, threads, false), tok.encode(text, false)) << threads << " threads, no special";
    }
    // Texts built to tempt bad cuts: newline runs followed by spaces, CR LF, combining marks
    // and added tokens right after newlines.
    std::string tricky;
    const char* bits[] = {"\n",         "\n\n", "\r\n", " \n",      "\n ",       "\n\t", "\n\u0301x", "\n<|im_start|>",
                          "<think>\n",  "word", "  ",   "\u3000\n", "\n\u00a0y", "'s",   "\n's",      "e\u0301",
                          "\n\n\n   z", "123",  "!!\n", "\xff\n"};
    uint32_t state = 12345;
    while (tricky.size() < 300000) {
        state = state * 1664525u + 1013904223u;
        tricky += bits[(state >> 16) % (sizeof bits / sizeof bits[0])];
    }
    for (const int threads : {2, 4, 7})
        EXPECT_EQ(tok.encode_parallel(tricky, threads), tok.encode(tricky)) << threads << " threads";
}

TEST(TokenizerCorpus, DecodeRoundTripsNormalizedText) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const Tokenizer& tok = qwen3_tokenizer();
    size_t lines = 0;
    for (const std::string& name : corpus_names()) {
        const std::string text = read_file(tokenizer_test_dir() / "corpus" / (name + ".txt"));
        std::string storage;
        const std::string nfc_text(tokenizer::nfc(text, storage));
        ASSERT_EQ(tok.decode(tok.encode(text)), nfc_text) << name;
        for (const std::string& line : split_lines(text)) {
            std::string s;
            ASSERT_EQ(tok.decode(tok.encode(line)), std::string(tokenizer::nfc(line, s))) << name << ": " << escaped(line);
            ++lines;
        }
        // Streaming gives the same text, one token at a time.
        tokenizer::StreamDecoder stream(tok);
        std::string streamed;
        for (const int32_t id : tok.encode(text)) streamed += stream.push(id);
        streamed += stream.flush();
        EXPECT_EQ(streamed, nfc_text) << name;
    }
    EXPECT_GT(lines, 5000u);
}

}  // namespace
}  // namespace strata::test
