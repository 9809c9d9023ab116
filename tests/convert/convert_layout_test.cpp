// What `strata convert` writes: the same metadata keys (and types, and order), tensor names,
// types and layout as the ecosystem converter's output for the same kind of checkpoint (the
// hf-tiny fixtures), the tokenizer metadata, sharded and multimodal checkpoints, MTP tensors,
// and one-line errors that leave no output behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "backend/cpu_backend.h"
#include "convert/convert.h"
#include "convert/qwen_tensors.h"
#include "convert_test_util.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::convert {
namespace {

using namespace strata::convert::test;

// Per-block tensor suffixes are compared by kind of layer: (full attention?, suffix).
struct TensorKey {
    bool attention_layer;
    std::string suffix;
    bool operator<(const TensorKey& o) const { return std::tie(attention_layer, suffix) < std::tie(o.attention_layer, o.suffix); }
    bool operator==(const TensorKey&) const = default;
};

struct TensorDesc {
    quant::Type type;
    size_t n_dims;
    bool operator==(const TensorDesc&) const = default;
};

int64_t attention_interval(const gguf::File& f) {
    return static_cast<int64_t>(f.opt_u64(f.architecture() + ".full_attention_interval").value_or(1));
}

std::map<TensorKey, TensorDesc> block_tensors(const gguf::File& f) {
    std::map<TensorKey, TensorDesc> out;
    const int64_t interval = attention_interval(f);
    for (const auto& t : f.tensors()) {
        if (!t.name.starts_with("blk.")) continue;
        const size_t dot = t.name.find('.', 4);
        const int64_t layer = std::stoll(t.name.substr(4, dot - 4));
        out[{(layer + 1) % interval == 0, t.name.substr(dot + 1)}] = {t.type, t.shape.size()};
    }
    return out;
}

// Tensor suffixes of one block in file order.
std::vector<std::string> block_order(const gguf::File& f, int64_t layer) {
    std::vector<std::string> out;
    const std::string prefix = "blk." + std::to_string(layer) + ".";
    for (const auto& t : f.tensors())
        if (t.name.starts_with(prefix)) out.push_back(t.name.substr(prefix.size()));
    return out;
}

std::vector<std::string> keys(const gguf::File& f) {
    std::vector<std::string> out;
    for (const auto& [k, v] : f.metadata()) out.push_back(k);
    return out;
}

struct ParityCase {
    std::string checkpoint, fixture_arch;
};

class FixtureParity : public testing::TestWithParam<ParityCase> {};

TEST_P(FixtureParity, SameKeysNamesAndTypesAsTheEcosystemConverter) {
    const ParityCase c = GetParam();
    const fs::path fixture = strata::test::fixture("hf-tiny/" + c.fixture_arch + "/" + c.fixture_arch + "-bf16.gguf");
    STRATA_REQUIRE_FIXTURE(fixture);
    strata::test::TempDir tmp;
    ConvertOptions opts;
    opts.outtype = OutType::BF16;
    convert_checkpoint(hf_checkpoint(c.checkpoint), tmp / "out.gguf", opts);
    const auto ours = gguf::File::open(tmp / "out.gguf");
    const auto ref = gguf::File::open(fixture);
    EXPECT_EQ(ours->architecture(), ref->architecture());

    // Metadata: the same keys with the same value types, in the same order. The one key whose
    // place depends on config.json: rope.dimension_sections comes with the RoPE keys when the
    // checkpoint gives mrope_section (ours), at the end otherwise (the fixture's).
    const std::string sections = c.fixture_arch + ".rope.dimension_sections";
    auto ordered = [&](const gguf::File& f) {
        auto k = keys(f);
        k.erase(std::remove(k.begin(), k.end(), sections), k.end());
        return k;
    };
    EXPECT_EQ(ordered(*ours), ordered(*ref));
    EXPECT_EQ(ours->has(sections), ref->has(sections));
    for (const auto& [k, v] : ref->metadata()) {
        const gguf::Value* mine = ours->find(k);
        if (mine == nullptr) continue;  // reported above
        EXPECT_EQ(mine->type, v.type) << k;
        if (v.type == gguf::ValueType::ARRAY) {
            EXPECT_EQ(mine->elem_type, v.elem_type) << k;
        }
    }

    // Tensors: per kind of block the same suffixes, types and ranks; the same block order.
    EXPECT_EQ(block_tensors(*ours), block_tensors(*ref));
    EXPECT_EQ(block_order(*ours, 0), block_order(*ref, 0));
    EXPECT_EQ(block_order(*ours, attention_interval(*ours) - 1), block_order(*ref, attention_interval(*ref) - 1));
    auto globals = [](const gguf::File& f) {
        std::map<std::string, TensorDesc> g;
        for (const auto& t : f.tensors())
            if (!t.name.starts_with("blk.") && t.name != "output.weight") g[t.name] = {t.type, t.shape.size()};
        return g;
    };
    EXPECT_EQ(globals(*ours), globals(*ref));
    // output.weight is written when the checkpoint has lm_head.weight (even for a tied model, as
    // the ecosystem converter does), and then takes the output type.
    const auto ck = Checkpoint::open(hf_checkpoint(c.checkpoint));
    EXPECT_EQ(ours->find_tensor("output.weight") != nullptr, ck->find("lm_head.weight") != nullptr);
    if (ck->find("lm_head.weight") != nullptr) {
        EXPECT_EQ(ours->tensor("output.weight").type, quant::Type::BF16);
    }
}

INSTANTIATE_TEST_SUITE_P(HfTiny, FixtureParity,
                         testing::Values(ParityCase{"qwen3moe-a", "qwen3moe"}, ParityCase{"qwen3next-a", "qwen3next"},
                                         ParityCase{"qwen35moe-a", "qwen35moe"}),
                         [](const testing::TestParamInfo<ParityCase>& i) { return i.param.fixture_arch; });

TEST(ConvertMetadata, ArchitectureKeys) {
    strata::test::TempDir tmp;
    convert_checkpoint(hf_checkpoint("qwen35moe-a"), tmp / "a.gguf");
    convert_checkpoint(hf_checkpoint("qwen3moe-b"), tmp / "b.gguf");
    const auto a = gguf::File::open(tmp / "a.gguf");
    EXPECT_EQ(a->get_u32("qwen35moe.block_count"), 6u);
    // layer_types [lin, lin, full] * 2: every 3rd layer is attention (no explicit interval key).
    EXPECT_EQ(a->get_u32("qwen35moe.full_attention_interval"), 3u);
    EXPECT_EQ(a->get_ints("qwen35moe.rope.dimension_sections"), (std::vector<int64_t>{2, 1, 1, 0}));
    EXPECT_EQ(a->get_u32("qwen35moe.rope.dimension_count"), 8u);  // 32 * 0.25
    EXPECT_EQ(a->get_u32("qwen35moe.ssm.inner_size"), 72u);       // 3 value heads * 24
    EXPECT_FLOAT_EQ(a->get_f32("qwen35moe.rope.freq_base"), 1e7f);
    EXPECT_FALSE(a->has("qwen35moe.expert_weights_norm"));
    EXPECT_FALSE(a->has("qwen35moe.nextn_predict_layers"));
    const auto b = gguf::File::open(tmp / "b.gguf");
    // norm_topk_prob = false must survive (the ecosystem converter drops it).
    EXPECT_EQ(b->get_bool("qwen3moe.expert_weights_norm"), false);
    EXPECT_EQ(b->get_u32("general.file_type"), 1u);  // auto on an f32 checkpoint: f16
    EXPECT_EQ(b->tensor("token_embd.weight").type, quant::Type::F16);
    EXPECT_EQ(b->find_tensor("output.weight"), nullptr);  // tied
    EXPECT_EQ(b->get_string("general.name"), "Qwen3Moe B");
}

TEST(ConvertMetadata, Tokenizer) {
    strata::test::TempDir tmp;
    convert_checkpoint(hf_checkpoint("qwen3moe-a"), tmp / "a.gguf");
    const auto f = gguf::File::open(tmp / "a.gguf");
    const auto tokens = f->get_strings("tokenizer.ggml.tokens");
    const auto types = f->get_ints("tokenizer.ggml.token_type");
    ASSERT_EQ(tokens.size(), 2048u);  // config.json's vocab_size
    ASSERT_EQ(types.size(), 2048u);
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "qwen2");
    EXPECT_EQ(tokens[2016], "<|endoftext|>");
    EXPECT_EQ(types[2016], 3);  // control
    EXPECT_EQ(tokens[2040], "<think>");
    EXPECT_EQ(types[2040], 4);  // added, not special: user-defined
    EXPECT_EQ(tokens[2047], "[PAD2047]");
    EXPECT_EQ(types[2047], 5);  // unused
    EXPECT_EQ(types[100], 1);
    EXPECT_EQ(f->get_u32("tokenizer.ggml.eos_token_id"), 2018u);      // <|im_end|>
    EXPECT_EQ(f->get_u32("tokenizer.ggml.padding_token_id"), 2016u);  // <|endoftext|>
    EXPECT_FALSE(f->has("tokenizer.ggml.bos_token_id"));
    EXPECT_EQ(f->get_bool("tokenizer.ggml.add_bos_token"), false);
    const auto tcfg = read_json(hf_checkpoint("qwen3moe-a") / "tokenizer_config.json");
    EXPECT_EQ(f->get_string("tokenizer.chat_template"), tcfg["chat_template"].get<std::string>());
    const auto merges = f->get_strings("tokenizer.ggml.merges");
    ASSERT_FALSE(merges.empty());
    EXPECT_EQ(merges[0], "\xC4\xA0 \xC4\xA0");  // ["Ġ", "Ġ"] -> "Ġ Ġ"
    // The vocabulary works: our tokenizer reads it back and round-trips text.
    const auto tok = tokenizer::Tokenizer::from_gguf(*f);
    const std::string text = "<|im_start|>user\nthe cat sat on the mat<|im_end|>";
    const auto ids = tok->encode(text);
    EXPECT_EQ(ids.front(), 2017);
    EXPECT_EQ(tok->decode(ids), text);
}

TEST(ConvertLayout, ShardedCheckpointGivesTheSameFile) {
    strata::test::TempDir tmp;
    const fs::path single = tmp / "one" / "qwen3moe-a", sharded = tmp / "two" / "qwen3moe-a";
    copy_side_files(hf_checkpoint("qwen3moe-a"), single);
    copy_side_files(hf_checkpoint("qwen3moe-a"), sharded);
    auto entries = load_entries(hf_checkpoint("qwen3moe-a"));
    write_safetensors(single / "model.safetensors", entries);
    const size_t half = entries.size() / 2;
    write_safetensors(sharded / "model-00001-of-00002.safetensors", {entries.begin(), entries.begin() + static_cast<long>(half)});
    write_safetensors(sharded / "model-00002-of-00002.safetensors", {entries.begin() + static_cast<long>(half), entries.end()});
    nlohmann::ordered_json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::ordered_json::object()}};
    for (size_t i = 0; i < entries.size(); ++i)
        index["weight_map"][entries[i].name] = i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    write_json(sharded / "model.safetensors.index.json", index);
    convert_checkpoint(single, tmp / "one.gguf");
    convert_checkpoint(sharded, tmp / "two.gguf");
    const std::string a = read_bytes(tmp / "one.gguf"), b = read_bytes(tmp / "two.gguf");
    EXPECT_GT(a.size(), 100000u);
    EXPECT_TRUE(a == b) << "sharded and single-file conversions differ";

    // An index naming a tensor that no part holds is an error naming the part.
    index["weight_map"]["model.layers.9.mlp.gate.weight"] = "model-00002-of-00002.safetensors";
    write_json(sharded / "model.safetensors.index.json", index);
    try {
        convert_checkpoint(sharded, tmp / "three.gguf");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model-00002-of-00002.safetensors: tensor 'model.layers.9.mlp.gate.weight'"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(fs::exists(tmp / "three.gguf"));
}

// Qwen3_5MoeForConditionalGeneration: the text tower under model.language_model.*, a vision
// tower to leave out, the text hyper-parameters under text_config.
TEST(ConvertLayout, MultimodalWrapperConvertsTheTextTower) {
    strata::test::TempDir tmp;
    const fs::path dir = tmp / "qwen35moe-a";
    copy_side_files(hf_checkpoint("qwen35moe-a"), dir);
    auto entries = load_entries(hf_checkpoint("qwen35moe-a"));
    for (StEntry& e : entries)
        if (e.name.starts_with("model.")) e.name = "model.language_model." + e.name.substr(6);
    entries.push_back({"model.visual.blocks.0.attn.qkv.weight", "F32", {2, 2}, std::vector<uint8_t>(16, 0)});
    entries.push_back({"model.visual.patch_embed.proj.weight", "F32", {2}, std::vector<uint8_t>(8, 0)});
    write_safetensors(dir / "model.safetensors", entries);
    const auto text = read_json(hf_checkpoint("qwen35moe-a") / "config.json");
    nlohmann::ordered_json cfg = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
                                  {"model_type", "qwen3_5_moe"},
                                  {"tie_word_embeddings", true},
                                  {"text_config", text},
                                  {"vision_config", {{"depth", 1}}}};
    cfg["text_config"].erase("architectures");
    write_json(dir / "config.json", cfg);
    convert_checkpoint(dir, tmp / "mm.gguf");
    const fs::path plain = tmp / "plain" / "qwen35moe-a";
    fs::create_directories(plain.parent_path());
    fs::copy(hf_checkpoint("qwen35moe-a"), plain);
    convert_checkpoint(plain, tmp / "plain.gguf");
    const auto a = gguf::File::open(tmp / "mm.gguf"), b = gguf::File::open(tmp / "plain.gguf");
    EXPECT_EQ(keys(*a), keys(*b));
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    for (size_t i = 0; i < a->tensors().size(); ++i) {
        const auto &x = a->tensors()[i], &y = b->tensors()[i];
        EXPECT_EQ(x.name, y.name);
        EXPECT_EQ(x.shape, y.shape);
        EXPECT_EQ(x.n_bytes, y.n_bytes);
        EXPECT_EQ(std::memcmp(x.data, y.data, x.n_bytes), 0) << x.name;
    }
}

// MTP tensors (Qwen3-Next names them mtp.*) become an extra block with the nextn tensors.
TEST(ConvertLayout, MtpTensorsBecomeNextnBlocks) {
    strata::test::TempDir tmp;
    const fs::path dir = tmp / "qwen3next-a";
    copy_side_files(hf_checkpoint("qwen3next-a"), dir);
    auto entries = load_entries(hf_checkpoint("qwen3next-a"));
    // An MTP layer shaped like full-attention layer 3, plus the fc / norms.
    std::vector<StEntry> mtp;
    for (const StEntry& e : entries)
        if (e.name.starts_with("model.layers.3."))
            mtp.push_back({"mtp.layers.0." + e.name.substr(15), e.dtype, e.shape, e.bytes});
    const StEntry* norm = find_entry(entries, "model.norm.weight");
    mtp.push_back({"mtp.fc.weight", "BF16", {64, 128}, std::vector<uint8_t>(64 * 128 * 2, 0x3c)});
    for (const char* n : {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"})
        mtp.push_back({n, norm->dtype, norm->shape, norm->bytes});
    entries.insert(entries.end(), mtp.begin(), mtp.end());
    write_safetensors(dir / "model.safetensors", entries);
    convert_checkpoint(dir, tmp / "mtp.gguf");
    const auto f = gguf::File::open(tmp / "mtp.gguf");
    EXPECT_EQ(f->get_u32("qwen3next.block_count"), 9u);
    EXPECT_EQ(f->get_u32("qwen3next.nextn_predict_layers"), 1u);
    for (const char* n : {"blk.8.nextn.eh_proj.weight", "blk.8.nextn.enorm.weight", "blk.8.nextn.hnorm.weight",
                          "blk.8.nextn.shared_head_norm.weight", "blk.8.attn_q.weight", "blk.8.ffn_gate_exps.weight",
                          "blk.8.ffn_gate_inp_shexp.weight", "blk.8.post_attention_norm.weight"})
        EXPECT_NE(f->find_tensor(n), nullptr) << n;
    EXPECT_EQ(f->tensor("blk.8.nextn.eh_proj.weight").shape, (std::vector<uint64_t>{128, 64}));
    EXPECT_EQ(f->tensor("blk.8.nextn.enorm.weight").type, quant::Type::F32);
    // Zero-centred norms get the +1 like every other norm: equal to output_norm.
    const auto& en = f->tensor("blk.8.nextn.enorm.weight");
    const auto& on = f->tensor("output_norm.weight");
    EXPECT_EQ(std::memcmp(en.data, on.data, on.n_bytes), 0);

    ConvertOptions no_mtp;
    no_mtp.include_mtp = false;
    convert_checkpoint(dir, tmp / "plain.gguf", no_mtp);
    const auto p = gguf::File::open(tmp / "plain.gguf");
    EXPECT_EQ(p->get_u32("qwen3next.block_count"), 8u);
    EXPECT_FALSE(p->has("qwen3next.nextn_predict_layers"));
    EXPECT_EQ(p->find_tensor("blk.8.attn_q.weight"), nullptr);

    // The engine runs the 8 main layers of the MTP file and gives the same logits as without.
    backend::CpuBackend be(1);
    auto with = model::Model::load(tmp / "mtp.gguf", be);
    auto without = model::Model::load(tmp / "plain.gguf", be);
    EXPECT_EQ(with->config().n_layer, 8);
    EXPECT_EQ(with->config().n_mtp_layers, 1);
    std::vector<float> a(2048), b(2048);
    for (auto* m : {with.get(), without.get()}) {
        auto seq = m->new_sequence(8);
        model::SequenceState* s = seq.get();
        model::Batch batch;
        for (int i = 0; i < 5; ++i) batch.add(100 + 37 * i, i, 0, i == 4);
        m->forward(batch, {&s, 1}, m == with.get() ? a.data() : b.data());
    }
    EXPECT_EQ(a, b);
}

// ---- errors: one line naming the file, non-zero exit, nothing left behind ----

struct CliError {
    int exit_code;
    std::string err;
};

CliError convert_cli_fails(const fs::path& dir, const fs::path& out, const std::string& extra = "") {
    const auto r = strata::test::run_strata("convert '" + dir.string() + "' '" + out.string() + "' " + extra);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.err.starts_with("strata: error: ")) << r.err;
    EXPECT_FALSE(fs::exists(out)) << out;
    fs::path tmp_out = out;
    tmp_out += ".tmp";
    EXPECT_FALSE(fs::exists(tmp_out)) << tmp_out;
    return {r.exit_code, r.err};
}

TEST(ConvertErrors, MissingConfig) {
    strata::test::TempDir tmp;
    fs::create_directories(tmp / "ck");
    const auto e = convert_cli_fails(tmp / "ck", tmp / "out.gguf");
    EXPECT_NE(e.err.find((tmp / "ck" / "config.json").string() + ": not found"), std::string::npos) << e.err;
}

TEST(ConvertErrors, UnsupportedArchitecture) {
    strata::test::TempDir tmp;
    const fs::path dir = tmp / "ck";
    fs::copy(hf_checkpoint("qwen3moe-b"), dir);
    auto cfg = read_json(dir / "config.json");
    cfg["architectures"] = {"LlamaForCausalLM"};
    write_json(dir / "config.json", cfg);
    const auto e = convert_cli_fails(dir, tmp / "out.gguf");
    EXPECT_NE(e.err.find("config.json: architecture 'LlamaForCausalLM' is not supported"), std::string::npos) << e.err;
    EXPECT_NE(e.err.find("Qwen3NextForCausalLM"), std::string::npos) << e.err;
}

TEST(ConvertErrors, TruncatedSafetensors) {
    strata::test::TempDir tmp;
    const fs::path dir = tmp / "ck";
    fs::copy(hf_checkpoint("qwen3moe-b"), dir);
    fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") - 1000);
    const auto e = convert_cli_fails(dir, tmp / "out.gguf");
    EXPECT_NE(e.err.find((dir / "model.safetensors").string() + ": tensor '"), std::string::npos) << e.err;
    EXPECT_NE(e.err.find("truncated"), std::string::npos) << e.err;

    fs::resize_file(dir / "model.safetensors", 20);  // inside the header
    const auto e2 = convert_cli_fails(dir, tmp / "out.gguf");
    EXPECT_NE(e2.err.find((dir / "model.safetensors").string() + ": header of"), std::string::npos) << e2.err;
}

TEST(ConvertErrors, MissingTensor) {
    strata::test::TempDir tmp;
    const fs::path dir = tmp / "ck";
    copy_side_files(hf_checkpoint("qwen3next-a"), dir);
    auto entries = load_entries(hf_checkpoint("qwen3next-a"));
    entries.erase(std::remove_if(entries.begin(), entries.end(),
                                 [](const StEntry& e) { return e.name == "model.layers.3.self_attn.k_proj.weight"; }),
                  entries.end());
    write_safetensors(dir / "model.safetensors", entries);
    const auto e = convert_cli_fails(dir, tmp / "out.gguf");
    EXPECT_NE(e.err.find((dir / "model.safetensors").string() +
                         ": tensor 'model.layers.3.self_attn.k_proj.weight' is missing (needed for blk.3.attn_k.weight)"),
              std::string::npos)
        << e.err;

    // One expert short: named as well.
    entries = load_entries(hf_checkpoint("qwen3next-a"));
    entries.erase(std::remove_if(entries.begin(), entries.end(),
                                 [](const StEntry& e) { return e.name == "model.layers.5.mlp.experts.6.up_proj.weight"; }),
                  entries.end());
    write_safetensors(dir / "model.safetensors", entries);
    const auto e2 = convert_cli_fails(dir, tmp / "out.gguf");
    EXPECT_NE(e2.err.find("tensor 'model.layers.5.mlp.experts.6.up_proj.weight' is missing"), std::string::npos) << e2.err;
}

TEST(ConvertErrors, WrongShapeAndUnknownTensor) {
    strata::test::TempDir tmp;
    const fs::path dir = tmp / "ck";
    copy_side_files(hf_checkpoint("qwen3next-a"), dir);
    auto entries = load_entries(hf_checkpoint("qwen3next-a"));
    StEntry* qkvz = find_entry(entries, "model.layers.0.linear_attn.in_proj_qkvz.weight");
    qkvz->shape = {96, 128};  // same bytes, shape not what config.json implies
    write_safetensors(dir / "model.safetensors", entries);
    const auto e = convert_cli_fails(dir, tmp / "out.gguf");
    EXPECT_NE(e.err.find("in_proj_qkvz.weight' has shape [96, 128], expected [192, 64]"), std::string::npos) << e.err;

    entries = load_entries(hf_checkpoint("qwen3next-a"));
    entries.push_back({"model.layers.0.mlp.mystery.weight", "F32", {2}, std::vector<uint8_t>(8, 0)});
    write_safetensors(dir / "model.safetensors", entries);
    const auto e2 = convert_cli_fails(dir, tmp / "out.gguf");
    EXPECT_NE(e2.err.find("cannot map tensor 'model.layers.0.mlp.mystery.weight'"), std::string::npos) << e2.err;
}

TEST(ConvertErrors, BadOutType) {
    strata::test::TempDir tmp;
    const auto e = convert_cli_fails(hf_checkpoint("qwen3moe-b"), tmp / "out.gguf", "--outtype q4_k");
    EXPECT_NE(e.err.find("--outtype: 'q4_k'"), std::string::npos) << e.err;
}

TEST(ConvertCli, ConvertsWithProgress) {
    strata::test::TempDir tmp;
    const auto r = strata::test::run_strata("convert '" + hf_checkpoint("qwen3moe-b").string() + "' '" +
                                            (tmp / "b.gguf").string() + "' --outtype f32");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("convert: [26/26] "), std::string::npos) << r.err;  // tensors done / total, bytes
    EXPECT_NE(r.err.find(" / "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("wrote "), std::string::npos) << r.err;
    const auto f = gguf::File::open(tmp / "b.gguf");
    EXPECT_EQ(f->tensors().size(), 26u);
    EXPECT_EQ(f->get_u32("general.file_type"), 0u);
    const auto q =
        strata::test::run_strata("convert -q '" + hf_checkpoint("qwen3moe-b").string() + "' '" + (tmp / "c.gguf").string() + "'");
    EXPECT_EQ(q.exit_code, 0);
    EXPECT_EQ(q.err, "");
}

}  // namespace
}  // namespace strata::convert
