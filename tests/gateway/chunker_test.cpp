// Chunker structure (fences, lists, headings, sentences, CJK), coverage and sizes; term splitting.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "../../bench/gateway_needles.h"
#include "gateway/context/chunker.h"
#include "gateway/context/terms.h"
#include "test_util.h"

namespace strata::gateway {
namespace {

std::vector<std::string> chunk_strings(std::string_view text, ChunkOptions o = {}) {
    std::vector<std::string> out;
    for (const ChunkSpan& c : chunk_text(text, o)) out.emplace_back(text.substr(c.offset, c.length));
    return out;
}

// Chunks are contiguous, in order, and cover the text.
void expect_cover(std::string_view text, const std::vector<ChunkSpan>& chunks) {
    uint32_t at = 0;
    for (const ChunkSpan& c : chunks) {
        ASSERT_EQ(c.offset, at);
        ASSERT_GT(c.length, 0u);
        at += c.length;
    }
    ASSERT_EQ(at, text.size());
}

TEST(GatewayChunker, SmallCodeFenceStaysWhole) {
    const std::string fence = "```python\ndef f(x):\n\n    return x + 1\n```\n";
    std::string text = "Here is some code. It adds one.\n\n" + fence + "\nAnd a closing remark after the block.\n";
    // Pad with prose so packing has to break somewhere.
    bench::needles::Gen g(1);
    for (int i = 0; i < 6; ++i) text = bench::needles::prose_sentence(g) + " " + text;
    const auto chunks = chunk_strings(text, {.target_tokens = 32, .max_tokens = 64});
    int holding = 0;
    for (const std::string& c : chunks) {
        if (c.find("def f(x)") != std::string::npos) {
            ++holding;
            EXPECT_NE(c.find(fence), std::string::npos) << "the fence was split: [" << c << "]";
        }
    }
    EXPECT_EQ(holding, 1);
}

TEST(GatewayChunker, BigCodeFenceSplitsAtLines) {
    std::string text = "```c\n";
    for (int i = 0; i < 200; ++i) text += "int value_" + std::to_string(i) + " = compute(" + std::to_string(i * 7) + ");\n";
    text += "```\n";
    const auto spans = chunk_text(text, {.target_tokens = 48, .max_tokens = 96});
    expect_cover(text, spans);
    EXPECT_GT(spans.size(), 10u);
    for (const ChunkSpan& c : spans) {
        const char last = text[c.offset + c.length - 1];
        EXPECT_EQ(last, '\n') << "a chunk of a code block ends inside a line";
        EXPECT_LE(estimate_tokens(std::string_view(text).substr(c.offset, c.length)), 96);
    }
}

TEST(GatewayChunker, ListItemsAndHeadingsAreBlocks) {
    const std::string text =
        "# Shopping\n- apples from the market on Tuesday\n- bread, the dark kind\n- 3 jars of honey\n\n"
        "## Notes\n1. call the plumber about the leaking tap in the kitchen\n2) pay the electricity bill\n";
    const auto spans = chunk_text(text, {.target_tokens = 8, .max_tokens = 24});
    expect_cover(text, spans);
    // With a tiny target every item is its own chunk (a heading may join the item after it).
    for (const ChunkSpan& c : spans) {
        const std::string s = text.substr(c.offset, c.length);
        const int items = (s.find("- apples") != std::string::npos) + (s.find("- bread") != std::string::npos) +
                          (s.find("- 3 jars") != std::string::npos) + (s.find("1. call") != std::string::npos) +
                          (s.find("2) pay") != std::string::npos);
        EXPECT_LE(items, 1) << "[" << s << "]";
    }
}

TEST(GatewayChunker, LongProseSplitsAtSentences) {
    bench::needles::Gen g(7);
    std::string para;
    std::vector<std::string> sentences;
    for (int i = 0; i < 60; ++i) {
        sentences.push_back(bench::needles::prose_sentence(g));
        para += (i ? " " : "") + sentences.back();
    }
    const auto chunks = chunk_strings(para, {.target_tokens = 64, .max_tokens = 128});
    EXPECT_GT(chunks.size(), 5u);
    // Every sentence lies whole inside one chunk.
    for (const std::string& s : sentences) {
        bool whole = false;
        for (const std::string& c : chunks) whole = whole || c.find(s) != std::string::npos;
        EXPECT_TRUE(whole) << s;
    }
}

TEST(GatewayChunker, CjkSentences) {
    bench::needles::Gen g(3);
    std::string text;
    std::vector<std::string> sentences;
    for (int i = 0; i < 80; ++i) {
        sentences.push_back(bench::needles::cjk_sentence(g));
        text += sentences.back();
    }
    const auto spans = chunk_text(text, {.target_tokens = 48, .max_tokens = 96});
    expect_cover(text, spans);
    EXPECT_GT(spans.size(), 5u);
    for (const ChunkSpan& c : spans) {
        const std::string s = text.substr(c.offset, c.length);
        EXPECT_EQ(s.substr(s.size() - 3), "。") << "a CJK chunk ends inside a sentence";
    }
}

TEST(GatewayChunker, RandomTextsAreCoveredAndBounded) {
    std::mt19937 rng(11);
    const std::string alphabet[] = {"a", "b", " ", "\n", "\n\n", ". ", "```\n", "- ", "# ", "長", "。", "\t", "xyzzy", "é"};
    for (int64_t t = 0; t < test::scaled(300, 20); ++t) {
        std::string text;
        const int n = static_cast<int>(rng() % 3000);
        for (int i = 0; i < n; ++i) text += alphabet[rng() % std::size(alphabet)];
        const ChunkOptions o{.target_tokens = 16 + static_cast<int>(rng() % 64), .max_tokens = 200};
        const auto spans = chunk_text(text, o);
        expect_cover(text, spans);
        for (const ChunkSpan& c : spans) {
            // A piece never exceeds max_tokens by more than a packing step.
            EXPECT_LE(estimate_tokens(std::string_view(text).substr(c.offset, c.length)), o.max_tokens + o.target_tokens + 8);
        }
    }
}

TEST(GatewayChunker, HugeRunWithoutSpacesIsCut) {
    std::string blob(50000, 'Q');
    for (size_t i = 0; i < blob.size(); i += 7) blob[i] = static_cast<char>('a' + i % 26);
    const auto spans = chunk_text(blob, {});
    expect_cover(blob, spans);
    EXPECT_GT(spans.size(), 20u);
}

TEST(GatewayTerms, WordsNumbersIdentifiers) {
    EXPECT_EQ(split_terms("The Quick brown-fox, 4829-1735!"),
              (std::vector<std::string>{"the", "quick", "brown", "fox", "4829", "1735"}));
    EXPECT_EQ(split_terms("parseHTTPHeader2"), (std::vector<std::string>{"parsehttpheader2", "parse", "http", "header", "2"}));
    EXPECT_EQ(split_terms("read_config_file"), (std::vector<std::string>{"read_config_file", "read", "config", "file"}));
    EXPECT_EQ(split_terms("__init__"), (std::vector<std::string>{"init"}));
    EXPECT_EQ(split_terms("MAX_TIMEOUT_MS = 300"), (std::vector<std::string>{"max_timeout_ms", "max", "timeout", "ms", "300"}));
    EXPECT_EQ(split_terms("Ärger über Öl"), (std::vector<std::string>{"ärger", "über", "öl"}));
}

TEST(GatewayTerms, CjkUnigramsAndBigrams) {
    EXPECT_EQ(split_terms("長城很長"), (std::vector<std::string>{"長", "城", "長城", "很", "城很", "長", "很長"}));
    // Kana and Hangul too; a non-CJK character ends the run (no bigram across it).
    EXPECT_EQ(split_terms("カタ、한국"), (std::vector<std::string>{"カ", "タ", "カタ", "한", "국", "한국"}));
    EXPECT_EQ(split_terms("王伟abc"), (std::vector<std::string>{"王", "伟", "王伟", "abc"}));
}

TEST(GatewayTerms, CountTermsIsSortedBag) {
    const auto bag = count_terms("the cat and the hat and the bat");
    ASSERT_EQ(bag.size(), 5u);
    for (size_t i = 1; i < bag.size(); ++i) EXPECT_LT(bag[i - 1].term, bag[i].term);
    uint32_t the = 0;
    for (const auto& t : bag)
        if (t.term == term_hash("the")) the = t.count;
    EXPECT_EQ(the, 3u);
    EXPECT_TRUE(count_terms("  ,.;  ").empty());
    // Ill-formed UTF-8 is skipped, not fatal.
    EXPECT_EQ(split_terms(std::string("ok\xff\xfe"
                                      "fine")),
              (std::vector<std::string>{"ok", "fine"}));
}

}  // namespace
}  // namespace strata::gateway
