// `strata convert` end to end on the committed random-weight transformers checkpoints: convert,
// load with strata::model::Model, and compare the logits with transformers' own
// (tests/model/hf/<name>/reference.json, last_logits_<k>.f32).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "convert/convert.h"
#include "convert_test_util.h"
#include "devices/backend_factory.h"
#include "util/fp16.h"

namespace strata::convert {
namespace {

using namespace strata::convert::test;

class ConvertLogits : public testing::TestWithParam<std::string> {};

TEST_P(ConvertLogits, F32MatchesTransformers) {
    const std::string name = GetParam();
    const fs::path dir = hf_checkpoint(name);
    strata::test::TempDir tmp;
    ConvertOptions opts;
    opts.outtype = OutType::F32;
    const auto res = convert_checkpoint(dir, tmp / "model.gguf", opts);
    EXPECT_EQ(res.outtype, OutType::F32);
    backend::CpuBackend be(2);
    auto m = model::Model::load(tmp / "model.gguf", be);
    for (size_t k = 0; k < 3; ++k) {
        const Agreement a = compare_with_reference(*m, dir, k);
        std::printf("%s prompt %zu: last-row rel L2 %.3g, max |top5 delta| %.3g, greedy %d/%d steps agree\n", name.c_str(), k,
                    a.last_rel_l2, a.max_top5_err, a.greedy_checked - a.greedy_mismatch, a.greedy_checked);
        EXPECT_LE(a.last_rel_l2, 1e-4) << name << " prompt " << k;
        EXPECT_LE(a.max_top5_err, 1e-3) << name << " prompt " << k;
        EXPECT_EQ(a.greedy_mismatch, 0) << name << " prompt " << k;
    }
}

INSTANTIATE_TEST_SUITE_P(HfCheckpoints, ConvertLogits,
                         testing::Values("qwen3-a", "qwen3moe-a", "qwen3moe-b", "qwen3next-a", "qwen35moe-a"),
                         [](const testing::TestParamInfo<std::string>& i) {
                             std::string s = i.param;
                             for (char& c : s)
                                 if (c == '-') c = '_';
                             return s;
                         });

// Last-token pooling of a dense qwen3 (the Qwen3-Embedding family) against transformers: the
// final-normed hidden row of each prompt's last token (Model::copy_hidden_row, what the engine's
// pooling requests and /v1/embeddings return), L2-normalised, equals the reference's
// `model.model(ids).last_hidden_state[0, -1]` normalised, within float32 bounds on
// the CPU; on CUDA (bf16 products) within bf16 bounds.
class ConvertEmbedding : public testing::TestWithParam<std::string> {};

TEST_P(ConvertEmbedding, DenseQwen3LastTokenPoolingMatchesTransformers) {
    const std::string device = GetParam();
    std::string why;
    if (device == "cuda" && !devices::cuda_usable(&why)) GTEST_SKIP() << why;
    const bool cpu = device == "cpu";
    const fs::path dir = hf_checkpoint("qwen3-a");
    strata::test::TempDir tmp;
    ConvertOptions opts;
    opts.outtype = OutType::F32;
    convert_checkpoint(dir, tmp / "model.gguf", opts);
    devices::BackendOptions bo;
    bo.device = device;
    const auto be = devices::make_backend(bo);
    auto m = model::Model::load(tmp / "model.gguf", *be);
    EXPECT_EQ(m->file().get_string("general.architecture"), "qwen3");
    const auto ref = read_json(dir / "reference.json");
    const int64_t n_embd = m->config().n_embd;
    for (size_t k = 0; k < ref["prompts"].size(); ++k) {
        const auto& p = ref["prompts"][k];
        const auto tokens = p["tokens"].get<std::vector<int32_t>>();
        const auto want = p["embedding"].get<std::vector<double>>();
        ASSERT_EQ(static_cast<int64_t>(want.size()), n_embd);
        prompt_logits(*m, tokens, static_cast<int64_t>(tokens.size()));
        std::vector<float> h(static_cast<size_t>(n_embd));
        m->copy_hidden_row(static_cast<int64_t>(tokens.size()) - 1, h.data());
        double norm = 0;
        for (float v : h) norm += static_cast<double>(v) * v;
        norm = std::sqrt(norm);
        double dot = 0, max_err = 0;
        for (int64_t i = 0; i < n_embd; ++i) {
            const double ours = h[static_cast<size_t>(i)] / norm;
            dot += ours * want[static_cast<size_t>(i)];
            max_err = std::max(max_err, std::abs(ours - want[static_cast<size_t>(i)]));
        }
        std::printf("qwen3-a on %s, prompt %zu (%zu tokens): cosine %.9f, max |delta| %.3g\n", device.c_str(), k, tokens.size(),
                    dot, max_err);
        EXPECT_GT(dot, cpu ? 1.0 - 1e-8 : 1.0 - 1e-4) << "prompt " << k;
        EXPECT_LT(max_err, cpu ? 1e-4 : 2e-2) << "prompt " << k;
    }
}

INSTANTIATE_TEST_SUITE_P(Devices, ConvertEmbedding, testing::Values("cpu", "cuda"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// The checkpoint is bf16, so the bf16 GGUF holds exactly the values of the f32 one. Its logits
// differ from the reference only by the engine's bf16 arithmetic, hence the looser bounds.
TEST(ConvertOutType, Bf16OfBf16Checkpoint) {
    const fs::path dir = hf_checkpoint("qwen3moe-a");
    strata::test::TempDir tmp;
    ConvertOptions bf16, f32;
    bf16.outtype = OutType::BF16;
    f32.outtype = OutType::F32;
    convert_checkpoint(dir, tmp / "bf16.gguf", bf16);
    convert_checkpoint(dir, tmp / "f32.gguf", f32);
    backend::CpuBackend be(2);
    auto m = model::Model::load(tmp / "bf16.gguf", be);
    const auto ref32 = gguf::File::open(tmp / "f32.gguf");
    EXPECT_EQ(m->file().get_u32("general.file_type"), 32u);
    for (const auto& t : m->file().tensors()) {
        const auto& w = ref32->tensor(t.name);
        ASSERT_EQ(t.shape, w.shape) << t.name;
        if (t.type == quant::Type::F32) {
            EXPECT_EQ(std::memcmp(t.data, w.data, t.n_bytes), 0) << t.name;
            continue;
        }
        ASSERT_EQ(t.type, quant::Type::BF16) << t.name;
        size_t differ = 0;
        for (uint64_t i = 0; i < t.n_elements(); ++i) {
            uint16_t h;
            float x;
            std::memcpy(&h, t.data + 2 * i, 2);
            std::memcpy(&x, w.data + 4 * i, 4);
            differ += bf16_to_f32(h) != x;
        }
        EXPECT_EQ(differ, 0u) << t.name;
    }
    for (size_t k = 0; k < 3; ++k) {
        const Agreement a = compare_with_reference(*m, dir, k);
        std::printf("bf16 prompt %zu: last-row rel L2 %.3g, max |top5 delta| %.3g\n", k, a.last_rel_l2, a.max_top5_err);
        EXPECT_LE(a.last_rel_l2, 2e-2);
        EXPECT_LE(a.max_top5_err, 0.2);
    }
}

TEST(ConvertOutType, AutoPicksTheCheckpointType) {
    strata::test::TempDir tmp;
    EXPECT_EQ(convert_checkpoint(hf_checkpoint("qwen3moe-a"), tmp / "a.gguf").outtype, OutType::BF16);
    EXPECT_EQ(convert_checkpoint(hf_checkpoint("qwen3moe-b"), tmp / "b.gguf").outtype, OutType::F16);  // f32 checkpoint
}

// q8_0: every Q8_0 block is the reference rounding of the f32 values (scale max|x| / 127 as
// f16, round half away from zero), rows that are not whole blocks stay f16, and the logits stay
// close to the f32 conversion's. The engine quantises activations to Q8_0 too for these
// weights, and qwen3moe-a (everything Q8_0, 4 of 16 experts) flips some routing choices: its
// bound is looser than qwen3moe-b's (where only attn_output is Q8_0).
struct Q8Case {
    std::string name;
    double max_rel_l2;
};

class ConvertQ8 : public testing::TestWithParam<Q8Case> {};

TEST_P(ConvertQ8, ReferenceBlocksAndLogitsCloseToF32) {
    const std::string name = GetParam().name;
    const fs::path dir = hf_checkpoint(name);
    strata::test::TempDir tmp;
    ConvertOptions f32, q8;
    f32.outtype = OutType::F32;
    q8.outtype = OutType::Q8_0;
    convert_checkpoint(dir, tmp / "f32.gguf", f32);
    convert_checkpoint(dir, tmp / "q8.gguf", q8);
    backend::CpuBackend be(2);
    auto mf = model::Model::load(tmp / "f32.gguf", be);
    auto mq = model::Model::load(tmp / "q8.gguf", be);
    EXPECT_EQ(mq->file().get_u32("general.file_type"), 7u);
    size_t n_q8 = 0;
    for (const auto& t : mq->file().tensors()) {
        const auto& w = mf->file().tensor(t.name);
        if (t.type == quant::Type::F16) {
            EXPECT_NE(t.shape[0] % 32, 0u) << t.name << " could have been q8_0";
            continue;
        }
        if (t.type != quant::Type::Q8_0) continue;
        ++n_q8;
        ASSERT_EQ(t.shape[0] % 32, 0u) << t.name;
        const float* x = reinterpret_cast<const float*>(w.data);  // mmap'd GGUF data is aligned
        size_t bad = 0;
        double num = 0, den = 0;
        for (uint64_t b = 0; b < t.n_elements() / 32; ++b) {
            uint16_t d_bits;
            std::memcpy(&d_bits, t.data + 34 * b, 2);
            const auto* q = reinterpret_cast<const int8_t*>(t.data + 34 * b + 2);
            float amax = 0;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
            const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
            bad += d_bits != f32_to_f16(d);
            for (int i = 0; i < 32; ++i) {
                const float v = x[32 * b + i];
                bad += q[i] != static_cast<int8_t>(std::round(v * id));
                const double back = static_cast<double>(f16_to_f32(d_bits)) * q[i];
                num += (back - v) * (back - v);
                den += static_cast<double>(v) * v;
            }
        }
        EXPECT_EQ(bad, 0u) << t.name;
        EXPECT_LE(std::sqrt(num / den), 1e-2) << t.name;
    }
    EXPECT_GT(n_q8, 0u);
    const auto ref = read_json(dir / "reference.json");
    for (size_t k = 0; k < 3; ++k) {
        const auto tokens = ref["prompts"][k]["tokens"].get<std::vector<int32_t>>();
        const auto lf = prompt_logits(*mf, tokens), lq = prompt_logits(*mq, tokens);
        const double err = rel_l2(lq.data(), lf.data(), lf.size());
        std::printf("%s q8_0 prompt %zu: rel L2 vs f32 %.3g\n", name.c_str(), k, err);
        EXPECT_LE(err, GetParam().max_rel_l2) << name << " prompt " << k;
    }
}

INSTANTIATE_TEST_SUITE_P(HfCheckpoints, ConvertQ8, testing::Values(Q8Case{"qwen3moe-a", 5e-2}, Q8Case{"qwen3moe-b", 2e-2}),
                         [](const testing::TestParamInfo<Q8Case>& i) {
                             std::string s = i.param.name;
                             for (char& c : s)
                                 if (c == '-') c = '_';
                             return s;
                         });

// qwen3next-a rewritten in the Qwen3.5 layout is the same network (Qwen3-Next's in_proj_qkvz /
// in_proj_ba hold per key head [q k v z] / [b a]; Qwen3.5 keeps q, k, v, z, b, a apart, value
// heads in the same grouped order; for text M-RoPE turns every pair like plain RoPE). With 2 key
// heads and 4 value heads this runs the converter's value-head reordering against transformers.
TEST(ConvertLogitsQwen35, MoreValueHeadsThanKeyHeads) {
    const fs::path next = hf_checkpoint("qwen3next-a");
    strata::test::TempDir tmp;
    const fs::path dir = tmp / "qwen35-from-next";
    copy_side_files(next, dir);
    auto cfg = read_json(next / "config.json");
    const int64_t hidden = cfg["hidden_size"], nk = cfg["linear_num_key_heads"], nv = cfg["linear_num_value_heads"];
    const int64_t dk = cfg["linear_key_head_dim"], dv = cfg["linear_value_head_dim"], per_k = nv / nk;
    cfg["architectures"] = {"Qwen3_5MoeForCausalLM"};
    cfg["model_type"] = "qwen3_5_moe_text";
    for (const char* k : {"intermediate_size", "decoder_sparse_step", "mlp_only_layers"}) cfg.erase(k);
    cfg["rope_parameters"]["mrope_section"] = {2, 1, 1};
    cfg["rope_parameters"]["mrope_interleaved"] = true;
    write_json(dir / "config.json", cfg);

    std::vector<StEntry> out;
    for (const StEntry& e : load_entries(next)) {
        const size_t row = static_cast<size_t>(hidden) * 2;  // bf16 bytes per row
        auto rows = [&](std::vector<std::pair<int64_t, int64_t>> ranges, const std::string& name) {
            StEntry r{name, e.dtype, {0, hidden}, {}};
            for (const auto& [first, count] : ranges) {
                r.bytes.insert(r.bytes.end(), e.bytes.begin() + static_cast<long>(first * row),
                               e.bytes.begin() + static_cast<long>((first + count) * row));
                r.shape[0] += count;
            }
            return r;
        };
        ASSERT_EQ(e.dtype, "BF16");
        const std::string base = e.name.substr(0, e.name.rfind("in_proj_"));
        if (e.name.ends_with("in_proj_qkvz.weight")) {
            const int64_t group = 2 * dk + 2 * per_k * dv;
            std::vector<std::pair<int64_t, int64_t>> qkv, z;
            for (int64_t part = 0; part < 3; ++part)
                for (int64_t h = 0; h < nk; ++h)
                    qkv.push_back({h * group + (part == 2 ? 2 * dk : part * dk), part == 2 ? per_k * dv : dk});
            for (int64_t h = 0; h < nk; ++h) z.push_back({h * group + 2 * dk + per_k * dv, per_k * dv});
            out.push_back(rows(qkv, base + "in_proj_qkv.weight"));
            out.push_back(rows(z, base + "in_proj_z.weight"));
        } else if (e.name.ends_with("in_proj_ba.weight")) {
            std::vector<std::pair<int64_t, int64_t>> b, a;
            for (int64_t h = 0; h < nk; ++h) {
                b.push_back({h * 2 * per_k, per_k});
                a.push_back({h * 2 * per_k + per_k, per_k});
            }
            out.push_back(rows(b, base + "in_proj_b.weight"));
            out.push_back(rows(a, base + "in_proj_a.weight"));
        } else {
            out.push_back(e);
        }
    }
    write_safetensors(dir / "model.safetensors", out);
    ConvertOptions opts;
    opts.outtype = OutType::F32;
    convert_checkpoint(dir, tmp / "model.gguf", opts);
    backend::CpuBackend be(2);
    auto m = model::Model::load(tmp / "model.gguf", be);
    EXPECT_EQ(m->file().architecture(), "qwen35moe");
    for (size_t k = 0; k < 3; ++k) {
        const Agreement a = compare_with_reference(*m, next, k);
        std::printf(
            "qwen3next-a as qwen35moe prompt %zu: last-row rel L2 %.3g, max |top5 delta| %.3g, greedy %d/%d steps agree\n", k,
            a.last_rel_l2, a.max_top5_err, a.greedy_checked - a.greedy_mismatch, a.greedy_checked);
        EXPECT_LE(a.last_rel_l2, 1e-4) << "prompt " << k;
        EXPECT_LE(a.max_top5_err, 1e-3) << "prompt " << k;
        EXPECT_EQ(a.greedy_mismatch, 0) << "prompt " << k;
    }
}

}  // namespace
}  // namespace strata::convert
