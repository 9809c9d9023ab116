// Pieces of the converter with exact expected answers: the value-head order, general.* naming
// heuristics and size labels, config.json edge cases.
#include <gtest/gtest.h>

#include "convert/general_meta.h"
#include "convert/hf_config.h"
#include "convert/qwen_tensors.h"
#include "convert/tokenizer_meta.h"
#include "convert_test_util.h"
#include "util/error.h"

namespace strata::convert {
namespace {

using namespace strata::convert::test;

TEST(ValueHeads, TiledOrder) {
    // 2 key heads, 2 value heads each: grouped [k0v0 k0v1 k1v0 k1v1] -> tiled [k0v0 k1v0 k0v1 k1v1].
    EXPECT_EQ(tiled_value_heads(2, 4), (std::vector<int64_t>{0, 2, 1, 3}));
    EXPECT_EQ(tiled_value_heads(3, 6), (std::vector<int64_t>{0, 2, 4, 1, 3, 5}));
    EXPECT_EQ(tiled_value_heads(2, 6), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
    EXPECT_EQ(tiled_value_heads(4, 4), (std::vector<int64_t>{0, 1, 2, 3}));
    // Tiled head n reads key head n % n_k (what the loader's broadcast assumes).
    const auto order = tiled_value_heads(16, 64);
    for (int64_t n = 0; n < 64; ++n) EXPECT_EQ(order[static_cast<size_t>(n)] / 4, n % 16);
}

TEST(GeneralMeta, Titles) {
    EXPECT_EQ(id_to_title("qwen3moe"), "Qwen3Moe");
    EXPECT_EQ(id_to_title("qwen35moe"), "Qwen35Moe");
    EXPECT_EQ(id_to_title("qwen3moe-a"), "Qwen3Moe A");
    EXPECT_EQ(id_to_title("Qwen3-Next-80B-A3B-Instruct"), "Qwen3 Next 80B A3B Instruct");
    EXPECT_EQ(id_to_title("my-model-v2.1"), "My Model v2.1");
}

TEST(GeneralMeta, ModelIdParts) {
    const auto p = model_id_parts("Qwen/Qwen3-30B-A3B-Instruct-2507", 30'500'000'000);
    EXPECT_EQ(p.organization, "Qwen");
    EXPECT_EQ(p.full_name, "Qwen3-30B-A3B-Instruct-2507");
    EXPECT_EQ(p.basename, "Qwen3");
    EXPECT_EQ(p.size_label, "30B-A3B");
    EXPECT_EQ(p.finetune, "Instruct");
    EXPECT_EQ(p.version, "2507");
    const auto n = model_id_parts("Qwen3-Next-80B-A3B-Thinking", 80'000'000'000);
    EXPECT_EQ(n.basename, "Qwen3-Next");
    EXPECT_EQ(n.size_label, "80B-A3B");
    EXPECT_EQ(n.finetune, "Thinking");
    EXPECT_FALSE(n.organization);
    // A "size" far from the parameter count is a context length: part of the finetune.
    const auto c = model_id_parts("llama-7b-32k", 7'000'000'000);
    EXPECT_EQ(c.size_label, "7B");
    EXPECT_EQ(c.finetune, "32k");
    // Plain words only: too ambiguous for a basename.
    const auto w = model_id_parts("qwen3moe-a", 1000);
    EXPECT_FALSE(w.basename);
    EXPECT_FALSE(w.size_label);
}

TEST(GeneralMeta, SizeLabels) {
    EXPECT_EQ(rounded_count(4'900'000), "4.9M");
    EXPECT_EQ(rounded_count(30'532'122'624), "31B");
    EXPECT_EQ(rounded_count(357'000), "357K");
    EXPECT_EQ(rounded_count(1'500'000'000'000), "1.5T");
    ParamCounts c;
    c.add("token_embd.weight", {32, 151936});
    c.add("blk.0.ffn_gate_exps.weight", {32, 32, 8});
    c.add("blk.0.ffn_up_exps.weight", {32, 32, 8});
    EXPECT_EQ(c.expert_count(), 8);
    EXPECT_EQ(c.expert, 2 * 32 * 32);
    EXPECT_EQ(size_label(c), "8x4.9M");
}

TEST(GeneralMeta, ModelCardAndGenerationConfig) {
    strata::test::TempDir tmp;
    const fs::path dir = tmp / "Qwen3-Next-80B-A3B-Instruct";
    fs::create_directories(dir);
    {
        std::ofstream out(dir / "README.md");
        out << "---\nlibrary_name: transformers\nlicense: apache-2.0\nlicense_link: https://example.com/LICENSE\n"
               "pipeline_tag: text-generation\nbase_model:\n  - Qwen/Qwen3-Next-80B-A3B-Base\n---\n# Title\n";
    }
    write_json(dir / "generation_config.json", {{"do_sample", true}, {"temperature", 0.7}, {"top_k", 20}, {"top_p", 0.8}});
    ParamCounts counts;
    counts.add("blk.0.ffn_up_exps.weight", {2048, 512, 512});
    counts.add("token_embd.weight", {100000, 800000});  // ~80B: "80B" in the name is a size
    const auto md = general_metadata(dir, nlohmann::ordered_json::object(), counts);
    std::vector<std::string> keys;
    std::map<std::string, gguf::Value> by_key;
    for (const auto& [k, v] : md) {
        keys.push_back(k);
        by_key[k] = v;
    }
    const std::vector<std::string> want = {"general.sampling.top_k",
                                           "general.sampling.top_p",
                                           "general.sampling.temp",
                                           "general.name",
                                           "general.finetune",
                                           "general.basename",
                                           "general.size_label",
                                           "general.license",
                                           "general.license.link",
                                           "general.base_model.count",
                                           "general.base_model.0.name",
                                           "general.base_model.0.organization",
                                           "general.base_model.0.repo_url",
                                           "general.tags"};
    EXPECT_EQ(keys, want);
    EXPECT_EQ(by_key["general.sampling.top_k"].i, 20);
    EXPECT_EQ(by_key["general.sampling.top_k"].type, gguf::ValueType::I32);
    EXPECT_NEAR(by_key["general.sampling.temp"].f, 0.7, 1e-6);
    EXPECT_EQ(by_key["general.name"].s, "Qwen3 Next 80B A3B Instruct");
    EXPECT_EQ(by_key["general.basename"].s, "Qwen3-Next");
    EXPECT_EQ(by_key["general.size_label"].s, "80B-A3B");
    EXPECT_EQ(by_key["general.license"].s, "apache-2.0");
    EXPECT_EQ(by_key["general.base_model.0.name"].s, "Qwen3 Next 80B A3B Base");
    EXPECT_EQ(by_key["general.base_model.0.repo_url"].s, "https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Base");
    EXPECT_EQ(by_key["general.tags"].arr_s, (std::vector<std::string>{"text-generation"}));
}

TEST(HfConfigTest, LayerTypesAndErrors) {
    strata::test::TempDir tmp;
    const fs::path dir = tmp / "ck";
    fs::create_directories(dir);
    auto cfg = read_json(hf_checkpoint("qwen3next-a") / "config.json");
    write_json(dir / "config.json", cfg);
    const HfConfig c = load_hf_config(dir);
    EXPECT_EQ(c.gguf_arch, "qwen3next");
    EXPECT_EQ(c.full_attention_interval, 4);
    EXPECT_EQ(c.full_attention, (std::vector<bool>{false, false, false, true, false, false, false, true}));

    cfg["layer_types"][0] = "full_attention";  // not every-Nth
    write_json(dir / "config.json", cfg);
    try {
        load_hf_config(dir);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("config.json: layer_types is not a regular pattern"), std::string::npos) << e.what();
    }
    cfg = read_json(hf_checkpoint("qwen3next-a") / "config.json");
    cfg.erase("hidden_size");
    write_json(dir / "config.json", cfg);
    try {
        load_hf_config(dir);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("config.json: missing 'hidden_size'"), std::string::npos) << e.what();
    }
    {
        std::ofstream out(dir / "config.json");
        out << "{ not json";
    }
    EXPECT_THROW(load_hf_config(dir), Error);
}

TEST(TokenizerMeta, PreTokenizerByRegex) {
    const auto tok = read_json(hf_checkpoint("qwen3moe-a") / "tokenizer.json");
    const std::string qwen2 = tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"];
    EXPECT_EQ(pre_tokenizer_name_for_regex(qwen2), "qwen2");
    std::string qwen35 = qwen2;
    qwen35.replace(qwen35.find("]?\\p{L}+"), 8, "]?[\\p{L}\\p{M}]+");
    qwen35.replace(qwen35.find("[^\\s\\p{L}\\p{N}]"), 15, "[^\\s\\p{L}\\p{M}\\p{N}]");
    EXPECT_EQ(pre_tokenizer_name_for_regex(qwen35), "qwen35");
    EXPECT_EQ(pre_tokenizer_name_for_regex("\\s+"), "");
}

}  // namespace
}  // namespace strata::convert
