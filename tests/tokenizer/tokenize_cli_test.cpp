// `strata tokenize` and `strata detokenize` end to end, on the tiny vocabulary (always) and on
// the Qwen3 fixture (when shared/ is there).
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace strata::test {
namespace {

class TokenizeCli : public ::testing::Test {
protected:
    void SetUp() override { TinyVocab().write(dir_ / "tiny.gguf"); }
    std::string model() const { return "-m '" + (dir_ / "tiny.gguf").string() + "'"; }
    TempDir dir_;
};

TEST_F(TokenizeCli, TextToIdsAndBack) {
    auto r = run_strata("tokenize " + model(), "hello world<|end|>");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "[259,264,265]\n");
    r = run_strata("detokenize " + model(), "[259, 264, 265]");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "hello world<|end|>");
    r = run_strata("tokenize " + model(), "");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "[]\n");
}

TEST_F(TokenizeCli, NoSpecialTreatsAddedTokensAsText) {
    const auto r = run_strata("tokenize --no-special " + model(), "<think>");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "[60,116,104,105,110,107,62]\n");
}

TEST_F(TokenizeCli, JsonLinesInJsonLinesOut) {
    const auto r = run_strata("tokenize --jsonl " + model(), "\"hello\"\n\"hello world\\n\"\n\"<think>\"\n\"\"\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "[259]\n[259,264,10]\n[266]\n[]\n");
}

TEST_F(TokenizeCli, ThreadsGiveTheSameIds) {
    std::string text;
    for (int i = 0; i < 20000; ++i) text += i % 7 ? "hello world\n" : "  <|end|>\n\n";
    const auto serial = run_strata("tokenize " + model(), text);
    const auto parallel = run_strata("tokenize --threads 3 " + model(), text);
    ASSERT_EQ(serial.exit_code, 0) << serial.err;
    ASSERT_EQ(parallel.exit_code, 0) << parallel.err;
    EXPECT_EQ(parallel.out, serial.out);
}

TEST_F(TokenizeCli, InvalidUtf8IsEncodedAndDecodedWithReplacement) {
    auto r = run_strata("tokenize " + model(), std::string("a\xFF\xE4", 3));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "[97,255,228]\n");
    r = run_strata("detokenize " + model(), r.out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Bad input: exit 1 with one line on stderr, nothing on stdout.
void expect_user_error(const std::string& args, const std::string& input, const std::string& needle) {
    const auto r = run_strata(args, input);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(TokenizeCli, BadInputIsOneLineError) {
    expect_user_error("detokenize " + model(), "not json", "not JSON");
    expect_user_error("detokenize " + model(), "{\"a\": 1}", "expected a JSON array");
    expect_user_error("detokenize " + model(), "[1, 2, 9999]", "outside the vocabulary");
    expect_user_error("detokenize " + model(), "[-1]", "outside the vocabulary");
    expect_user_error("detokenize " + model(), "[1.5]", "not an integer");
    expect_user_error("tokenize --jsonl " + model(), "\"ok\"\n[1]\n", "line 2");
    expect_user_error("tokenize --jsonl " + model(), "\"unterminated\n", "line 1: not JSON");
    expect_user_error("tokenize -m /nonexistent/model.gguf", "x", "/nonexistent/model.gguf");
}

TEST(TokenizeCliQwen3, MatchesTransformersIds) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const std::string m = "-m '" + qwen3_gguf().string() + "'";
    // The ids of the fixture's reference prompts (tokenized by transformers).
    auto r = run_strata("tokenize " + m, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "[151644,872,198,3838,374,220,17,10,17,30,151645,198,151644,77091,198]\n");
    r = run_strata("tokenize --jsonl " + m, "\"Hello, world!\"\n\"<think>\\n\"\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "[9707,11,1879,0]\n[151667,198]\n");
    r = run_strata("detokenize " + m, "[151644,872,198,3838,374,220,17,10,17,30,151645]");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "<|im_start|>user\nWhat is 2+2?<|im_end|>");
}

}  // namespace
}  // namespace strata::test
