// `strata generate` as a user runs it: greedy tokens and dumped logits against transformers'
// reference, the chat template, sampling with a seed, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace strata::test {
namespace {

std::filesystem::path fixture_model() { return fixture("hf-tiny/qwen3moe/qwen3moe-bf16.gguf"); }

TEST(GenerateCli, GreedyTokensAndLogitsMatchTheReference) {
    const auto model = fixture_model();
    STRATA_REQUIRE_FIXTURE(model);
    std::ifstream in(model.parent_path() / "reference.json");
    const auto ref = nlohmann::json::parse(in)["prompts"][0];
    std::string tokens;
    for (int t : ref["tokens"]) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
    TempDir dir;
    const auto r = run_strata("generate -m '" + model.string() + "' --tokens " + tokens + " -n 12 --json --dump-logits '" +
                              (dir / "l.f32").string() + "'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto out = nlohmann::json::parse(r.out);
    const auto greedy = ref["greedy"].get<std::vector<int>>();
    EXPECT_EQ(out["tokens"].get<std::vector<int>>(), std::vector<int>(greedy.begin(), greedy.begin() + 12));
    EXPECT_FALSE(out["text"].get<std::string>().empty());

    auto read = [](const std::filesystem::path& p) {
        std::ifstream f(p, std::ios::binary);
        std::vector<char> b((std::istreambuf_iterator<char>(f)), {});
        std::vector<float> v(b.size() / 4);
        std::memcpy(v.data(), b.data(), v.size() * 4);
        return v;
    };
    const auto got = read(dir / "l.f32"), want = read(model.parent_path() / "last_logits_0.f32");
    ASSERT_EQ(got.size(), want.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
        den += static_cast<double>(want[i]) * want[i];
    }
    // Exact RoPE here (the reference rounded its frequencies to bf16): 4 tokens keep that tiny.
    EXPECT_LT(std::sqrt(num / den), 1e-4);
}

TEST(GenerateCli, ChatTemplateAndSeededSampling) {
    const auto model = fixture_model();
    STRATA_REQUIRE_FIXTURE(model);
    const std::string base = "generate -m '" + model.string() + "' --prompt 'What is 2+2?' -n 6 --json ";
    const auto chat = run_strata(base + "--chat");
    ASSERT_EQ(chat.exit_code, 0) << chat.err;
    // "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    EXPECT_EQ(nlohmann::json::parse(chat.out)["prompt_tokens"], 19);
    const auto a = run_strata(base + "--temp 1.5 --seed 7"), b = run_strata(base + "--temp 1.5 --seed 7"),
               c = run_strata(base + "--temp 1.5 --seed 8");
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, c.out);
}

TEST(GenerateCli, BadInputIsAOneLineError) {
    const auto model = fixture_model();
    STRATA_REQUIRE_FIXTURE(model);
    const std::string m = "generate -m '" + model.string() + "' ";
    const std::pair<std::string, std::string> cases[] = {
        {m + "--prompt hi --tokens 1,2", "exactly one of --prompt and --tokens"},
        {m + "--tokens 1,x", "'x' is not a token id"},
        {m + "--tokens 999999999", "outside the vocabulary"},
        {"generate -m /nonexistent.gguf --tokens 1", "/nonexistent.gguf: cannot open"},
    };
    for (const auto& [args, expect] : cases) {
        const auto r = run_strata(args);
        EXPECT_EQ(r.exit_code, 1) << args;
        EXPECT_NE(r.err.find(expect), std::string::npos) << args << " -> " << r.err;
    }
}

// The expert store's flags: the same tokens with the store (and a RAM budget below the experts:
// the file tier) as without; bad values named.
TEST(GenerateCli, ExpertStoreFlags) {
    TempDir dir;
    const std::string model = (dir / "m.gguf").string();
    const auto made =
        run_strata("make-model '" + model + "' --arch qwen3moe --preset tiny --embd 256 --ff-exp 256 --experts 32 --layers 2");
    ASSERT_EQ(made.exit_code, 0) << made.err;
    const std::string m = "generate -m '" + model + "' --tokens 11,22,33,44 -n 12 --json ";
    const auto off = run_strata(m + "--experts off");
    ASSERT_EQ(off.exit_code, 0) << off.err;
    const std::vector<std::string> flag_sets = {"--experts on", "--ram-budget 4M",
                                                "--expert-stats '" + (dir / "s.stats").string() + "'"};
    for (const std::string& flags : flag_sets) {
        const auto r = run_strata(m + flags);
        ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.err;
        EXPECT_EQ(r.out, off.out) << flags;
        EXPECT_NE(r.err.find("experts: "), std::string::npos) << flags << ": " << r.err;  // the split and the counters
    }
    EXPECT_TRUE(std::filesystem::exists(dir / "s.stats"));
    std::ofstream(dir / "bad.stats") << "not statistics\n";
    const std::pair<std::string, std::string> cases[] = {
        {m + "--ram-budget 12Q", "--ram-budget"},
        {m + "--ram-budget 1K", "is below 16 experts"},
        {m + "--experts off --ram-budget 1G", "--experts off contradicts"},
        {m + "--expert-stats '" + (dir / "bad.stats").string() + "'", "--expert-stats"},
        {m + "--experts sometimes", "--experts"},
        {m + "--expert-far 2", "--expert-far"},
    };
    for (const auto& [args, expect] : cases) {
        const auto r = run_strata(args);
        EXPECT_NE(r.exit_code, 0) << args;
        EXPECT_NE(r.err.find(expect), std::string::npos) << args << " -> " << r.err;
    }
}

// Models that could not answer any request are refused when they load, not on every request: a
// RoPE base of 0 and an empty chat template.
TEST(GenerateCli, ModelsThatCannotAnswerAreRefusedAtLoad) {
    TempDir dir;
    const std::string model = (dir / "m.gguf").string();
    std::ofstream(dir / "empty.jinja") << "  \n";
    const auto made = run_strata("make-model '" + model + "' --arch qwen3moe --preset tiny --chat-template '" +
                                 (dir / "empty.jinja").string() + "'");
    ASSERT_EQ(made.exit_code, 0) << made.err;
    const auto chat = run_strata("generate -m '" + model + "' --prompt hi --chat -n 2");
    EXPECT_NE(chat.exit_code, 0);
    EXPECT_NE(chat.err.find("chat template (tokenizer.chat_template) is empty"), std::string::npos) << chat.err;
    // The f32 after the key "qwen3moe.rope.freq_base" and its type word set to 0.
    std::string bytes;
    {
        std::ifstream in(model, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::string key = "qwen3moe.rope.freq_base";
    const size_t at = bytes.find(key);
    ASSERT_NE(at, std::string::npos);
    const float zero = 0.0f;
    std::memcpy(&bytes[at + key.size() + 4], &zero, 4);
    std::ofstream(model, std::ios::binary | std::ios::trunc) << bytes;
    const auto r = run_strata("generate -m '" + model + "' --tokens 1,2 -n 2");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("rope.freq_base"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata::test
