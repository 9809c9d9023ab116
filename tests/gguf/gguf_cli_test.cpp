// `strata gguf info` and `strata gguf dequant` as a user runs them.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "test_util.h"

namespace strata::test {
namespace {

std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

TEST(GgufCli, InfoJsonNamesArchitectureAndTensors) {
    const auto path = fixture("hf-tiny/qwen3next/qwen3next-bf16.gguf");
    STRATA_REQUIRE_FIXTURE(path);
    const auto r = run_strata("gguf info '" + path.string() + "' --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["architecture"], "qwen3next");
    EXPECT_EQ(j["metadata"]["general.architecture"], "qwen3next");
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["count"], 151936);  // long arrays summarised
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["head"].size(), 16u);
    bool found = false;
    for (const auto& t : j["tensors"]) {
        if (t["name"] == "token_embd.weight") {
            found = true;
            EXPECT_EQ(t["type"], "bf16");
            EXPECT_EQ(t["shape"], nlohmann::json::array({32, 151936}));
            EXPECT_EQ(t["bytes"], 32 * 151936 * 2);
        }
    }
    EXPECT_TRUE(found);
}

TEST(GgufCli, InfoTextListsTensorTable) {
    const auto path = fixture("hf-tiny/qwen3moe/qwen3moe-bf16.gguf");
    STRATA_REQUIRE_FIXTURE(path);
    const auto r = run_strata("gguf info '" + path.string() + "'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("architecture qwen3moe"), std::string::npos);
    EXPECT_NE(r.out.find("blk.0.ffn_gate_exps.weight"), std::string::npos);
    EXPECT_NE(r.out.find("(151936 string)"), std::string::npos);
}

// The acceptance check: dequant of every <t>.q equals <t>.deq bit for bit, via the CLI.
TEST(GgufCli, DequantMatchesReferenceForEveryFixtureType) {
    const auto path = fixture("quant/quant-test.gguf");
    STRATA_REQUIRE_FIXTURE(path);
    const auto f = gguf::File::open(path);
    TempDir dir;
    int checked = 0;
    for (const auto& t : f->tensors()) {
        const std::string& name = t.name;
        if (name.size() < 2 || name.substr(name.size() - 2) != ".q") continue;
        const std::string base = name.substr(0, name.size() - 2);
        const auto out = dir / (base + ".f32");
        const auto r = run_strata("gguf dequant '" + path.string() + "' '" + name + "' '" + out.string() + "'");
        ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
        const auto got = read_bytes(out);
        const auto& deq = f->tensor(base + ".deq");
        ASSERT_EQ(got.size(), deq.n_bytes) << name;
        EXPECT_EQ(std::memcmp(got.data(), deq.data, got.size()), 0) << name << " differs from " << base << ".deq";
        ++checked;
    }
    EXPECT_EQ(checked, 24);
}

TEST(GgufCli, BadFilesExitNonZeroWithOneLine) {
    TempDir dir;
    const auto src = fixture("hf-tiny/qwen3moe/qwen3moe-bf16.gguf");
    STRATA_REQUIRE_FIXTURE(src);
    const auto bytes = read_bytes(src);
    struct Case {
        std::string name;
        std::vector<uint8_t> data;
        std::string expect;
    };
    std::vector<Case> cases;
    cases.push_back({"truncated-header.gguf", {bytes.begin(), bytes.begin() + 1000}, "does not fit in the file"});
    cases.push_back({"truncated-data.gguf", {bytes.begin(), bytes.end() - 4096}, "extends past the end"});
    auto corrupt = bytes;
    corrupt[0] = 'X';
    cases.push_back({"bad-magic.gguf", corrupt, "not a GGUF file"});
    cases.push_back({"empty.gguf", {}, "not a GGUF file"});
    for (const auto& c : cases) {
        {
            std::ofstream out(dir / c.name, std::ios::binary);
            out.write(reinterpret_cast<const char*>(c.data.data()), static_cast<std::streamsize>(c.data.size()));
        }
        const auto r = run_strata("gguf info '" + (dir / c.name).string() + "'");
        EXPECT_EQ(r.exit_code, 1) << c.name;
        EXPECT_TRUE(r.out.empty()) << c.name;
        EXPECT_NE(r.err.find((dir / c.name).string()), std::string::npos) << c.name << ": " << r.err;
        EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.name << ": " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.name << ": " << r.err;
    }
    const auto r = run_strata("gguf dequant '" + src.string() + "' no.such.tensor '" + (dir / "x.f32").string() + "'");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("tensor 'no.such.tensor' is missing"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "x.f32"));
}

}  // namespace
}  // namespace strata::test
