#include "model_tools/make_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "convert/tokenizer_meta.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/architecture.h"
#include "model/config_io.h"
#include "model/names.h"
#include "model_tools/quant_mix.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "tokenizer/vocab.h"
#include "util/error.h"
#include "util/fp16.h"
#include "util/thread_pool.h"

namespace strata::model_tools {

using model::ModelConfig;
using model::WeightBinder;
using model::write_config;

namespace {

// ---- the builtin tokenizer: bytes plus the chat and tool special tokens ----

const char* const kBuiltinChatTemplate =
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// The largest id in a tokenizer.json (its vocabulary and added tokens).
int64_t max_token_id(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) throw Error(path.string() + ": cannot open");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw Error(path.string() + ": not valid JSON: " + e.what());
    }
    int64_t max_id = -1;
    if (j.contains("model") && j["model"].contains("vocab") && j["model"]["vocab"].is_object())
        for (const auto& [text, id] : j["model"]["vocab"].items())
            if (id.is_number_integer()) max_id = std::max<int64_t>(max_id, id.get<int64_t>());
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
        for (const auto& t : j["added_tokens"])
            if (t.contains("id") && t["id"].is_number_integer()) max_id = std::max<int64_t>(max_id, t["id"].get<int64_t>());
    if (max_id < 0) throw Error(path.string() + ": no token ids (model.vocab / added_tokens)");
    return max_id;
}

struct VocabInfo {
    int64_t n_vocab = 0;
    int64_t eos = -1;
};

// Writes tokenizer.* keys; returns the vocabulary size and end-of-sequence id.
VocabInfo write_tokenizer(const std::string& source, gguf::Writer& w) {
    using gguf::Value;
    if (source == "builtin") {
        std::vector<std::string> tokens;
        std::vector<int32_t> types;
        for (int b = 0; b < 256; ++b) {
            std::string t;
            append_utf8(t, tokenizer::byte_to_code_point(static_cast<uint8_t>(b)));
            tokens.push_back(t);
            types.push_back(1);
        }
        const std::pair<const char*, int32_t> specials[] = {{"<|endoftext|>", 3}, {"<|im_start|>", 3}, {"<|im_end|>", 3},
                                                            {"<think>", 4},       {"</think>", 4},     {"<tool_call>", 4},
                                                            {"</tool_call>", 4}};
        for (const auto& [text, type] : specials) {
            tokens.push_back(text);
            types.push_back(type);
        }
        const int64_t n = static_cast<int64_t>(tokens.size());
        w.set("tokenizer.ggml.model", Value::of_string("gpt2"));
        w.set("tokenizer.ggml.pre", Value::of_string("qwen2"));
        w.set("tokenizer.ggml.tokens", Value::of_strings(std::move(tokens)));
        w.set("tokenizer.ggml.token_type", Value::of_i32s(types));
        w.set("tokenizer.ggml.merges", Value::of_strings({}));
        w.set("tokenizer.ggml.eos_token_id", Value::of_u32(258));
        w.set("tokenizer.ggml.padding_token_id", Value::of_u32(256));
        w.set("tokenizer.ggml.add_bos_token", Value::of_bool(false));
        w.set("tokenizer.chat_template", Value::of_string(kBuiltinChatTemplate));
        return {n, 258};
    }
    if (std::filesystem::is_directory(source)) {
        // A transformers tokenizer folder (tokenizer.json, tokenizer_config.json with the chat
        // template): converted as `strata convert` does, the vocabulary padded to a multiple of 64.
        const int64_t n = (max_token_id(std::filesystem::path(source) / "tokenizer.json") + 1 + 63) / 64 * 64;
        VocabInfo info{n, -1};
        for (auto& [key, v] : convert::tokenizer_metadata(source, n)) {
            if (key == "tokenizer.ggml.eos_token_id") info.eos = static_cast<int64_t>(v.u);
            w.set(key, std::move(v));
        }
        return info;
    }
    const auto f = gguf::File::open(source);
    if (!f->has("tokenizer.ggml.tokens")) throw Error(source + ": has no tokenizer (tokenizer.ggml.tokens) to copy");
    for (const auto& [key, v] : f->metadata())
        if (key.rfind("tokenizer.", 0) == 0) w.set(key, v);
    const auto eos = f->opt_u32("tokenizer.ggml.eos_token_id");
    return {static_cast<int64_t>(f->get_strings("tokenizer.ggml.tokens").size()), eos ? static_cast<int64_t>(*eos) : -1};
}

// ---- random weights ----

uint64_t splitmix(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float uniform01(uint64_t& s) { return static_cast<float>((splitmix(s) >> 40) + 1) / 16777217.0f; }

float normal(uint64_t& s) {
    const float u1 = uniform01(s), u2 = uniform01(s);
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
}

// How the values of one tensor are drawn.
struct Init {
    enum Kind { Normal, Ones, NegExp, Uniform } kind = Normal;
    float scale = 1.0f;
};

Init init_for(const std::string& name, const std::vector<int64_t>& shape) {
    if (name.find("_norm") != std::string::npos) return {Init::Ones, 1.0f};
    if (name.ends_with(std::string(".") + model::names::kSsmA)) return {Init::NegExp, 1.0f};
    if (name.ends_with(std::string(".") + model::names::kSsmDtBias)) return {Init::Normal, 0.5f};
    const float fan_in = static_cast<float>(std::max<int64_t>(shape[0], 1));
    // Half the unit-variance scale: each layer adds a modest update to the residual stream, as in
    // trained models, instead of a random net that amplifies every rounding difference.
    return {Init::Normal, 0.5f / std::sqrt(fan_in)};
}

void fill_row(float* x, int64_t n, const Init& init, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; ++i) {
        switch (init.kind) {
            case Init::Ones: x[i] = 1.0f + 0.1f * normal(s); break;
            case Init::NegExp: x[i] = -std::exp(2.0f * uniform01(s) - 1.0f); break;
            case Init::Uniform: x[i] = init.scale * (2.0f * uniform01(s) - 1.0f); break;
            case Init::Normal: x[i] = init.scale * normal(s); break;
        }
    }
}

// Random but valid blocks: random bits everywhere, then every half-precision scale set to a
// value giving weights of roughly the intended spread. Offsets are those of blocks.h.
void fill_random_blocks(quant::Type t, uint8_t* dst, size_t bytes, float scale, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < bytes; i += 8) {
        const uint64_t r = splitmix(s);
        std::memcpy(dst + i, &r, std::min<size_t>(8, bytes - i));
    }
    const auto& info = quant::type_info(t);
    const size_t bb = static_cast<size_t>(info.block_bytes);
    std::vector<size_t> half_offsets;  // f16 fields per block
    float d = scale;
    switch (t) {
        case quant::Type::Q8_0:
            half_offsets = {0};
            d = scale / 64.0f;
            break;
        case quant::Type::Q4_0:
        case quant::Type::Q5_0:
        case quant::Type::IQ4_NL:
            half_offsets = {0};
            d = scale / 8.0f;
            break;
        case quant::Type::Q4_1:
        case quant::Type::Q5_1:
            half_offsets = {0, 2};
            d = scale / 8.0f;
            break;
        case quant::Type::Q4_K:
        case quant::Type::Q5_K:
            half_offsets = {0, 2};
            d = scale / 64.0f;
            break;
        case quant::Type::Q6_K:
            half_offsets = {offsetof(quant::BlockQ6_K, d)};
            d = scale / 1024.0f;
            break;
        case quant::Type::Q2_K:
            half_offsets = {offsetof(quant::BlockQ2_K, d), offsetof(quant::BlockQ2_K, dmin)};
            d = scale / 16.0f;
            break;
        case quant::Type::Q3_K:
            half_offsets = {offsetof(quant::BlockQ3_K, d)};
            d = scale / 64.0f;
            break;
        default:
            half_offsets = {0};
            d = scale / 8.0f;
            break;  // i-quants: d first
    }
    const uint16_t h = f32_to_f16(d);
    for (size_t b = 0; b + bb <= bytes; b += bb)
        for (size_t off : half_offsets) std::memcpy(dst + b + off, &h, 2);
}

}  // namespace

std::vector<PresetListing> model_presets() {
    std::vector<PresetListing> out;
    for (const model::ArchitectureInfo* a : model::architectures())
        if (!a->presets.empty()) out.push_back({a->name, &a->presets[0]});
    for (const model::ArchitectureInfo* a : model::architectures())
        for (size_t i = 1; i < a->presets.size(); ++i) out.push_back({a->name, &a->presets[i]});
    return out;
}

ModelConfig make_model_config(const MakeModelOptions& o, int64_t n_vocab) {
    const model::ArchitectureInfo* arch = nullptr;
    const model::ModelPreset* p = nullptr;
    for (const model::ArchitectureInfo* a : model::architectures())
        for (const model::ModelPreset& x : a->presets)
            if (o.arch == a->name && o.preset == x.name) arch = a, p = &x;
    if (p == nullptr) {
        std::string list;
        for (const PresetListing& x : model_presets())
            list += std::string(list.empty() ? "" : ", ") + x.arch + "/" + x.preset->name;
        throw Error("no preset '" + o.preset + "' for architecture '" + o.arch + "' (presets: " + list + ")");
    }
    ModelConfig c = p->cfg;
    c.arch = arch->arch;
    c.arch_name = arch->name;
    auto set = [](int64_t& field, const std::optional<int64_t>& v) {
        if (v) field = *v;
    };
    set(c.n_layer, o.layers);
    set(c.n_embd, o.embd);
    set(c.n_head, o.heads);
    set(c.n_head_kv, o.kv_heads);
    if (o.head_dim) {
        const int64_t old = c.head_dim_k;
        c.head_dim_k = c.head_dim_v = *o.head_dim;
        c.n_rot = c.n_rot == old ? *o.head_dim : std::max<int64_t>(2, c.n_rot * *o.head_dim / old / 2 * 2);
    }
    set(c.n_expert, o.experts);
    set(c.n_expert_used, o.experts_used);
    set(c.n_ff_exp, o.ff_exp);
    set(c.n_ff_shexp, o.ff_shexp);
    set(c.n_ctx_train, o.ctx);
    c.n_vocab = n_vocab;
    auto check = [](bool ok, const std::string& what) {
        if (!ok) throw Error("make-model: " + what);
    };
    check(c.n_layer > 0 && c.n_embd > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.head_dim_k > 0, "sizes must be positive");
    check(c.n_head % c.n_head_kv == 0, "heads must be a multiple of kv-heads");
    const bool moe = p->cfg.n_expert > 0;  // the expert flags mean nothing to a dense architecture
    check(!moe || (c.n_expert > 0 && c.n_expert_used > 0 && c.n_expert_used <= c.n_expert), "experts-used must be in 1..experts");
    check((!moe || c.n_ff_exp > 0) && c.n_ctx_train > 0, "ff-exp and ctx must be positive");
    arch->complete(c);  // the layer kinds, by the architecture's own rule
    return c;
}

uint64_t make_model(const MakeModelOptions& o, const std::filesystem::path& out) {
    const auto mix = quant_mix_from_name(o.type);
    if (!mix) throw Error("make-model: unknown --type '" + o.type + "'");
    gguf::Writer w;
    w.set(model::names::kGeneralArchitecture, gguf::Value::of_string(o.arch));
    w.set(model::names::kGeneralName, gguf::Value::of_string("strata random " + o.arch + " " + o.preset));
    const VocabInfo vocab = write_tokenizer(o.tokenizer, w);
    const int64_t n_vocab = vocab.n_vocab;
    if (!o.chat_template_file.empty()) {
        std::ifstream in(o.chat_template_file, std::ios::binary);
        if (!in) throw Error(o.chat_template_file + ": cannot open");
        const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        w.set("tokenizer.chat_template", gguf::Value::of_string(text));
    }
    const ModelConfig cfg = make_model_config(o, n_vocab);
    write_config(cfg, w);
    w.set(model::names::kGeneralFileType, gguf::Value::of_u32(mix->file_type));
    w.set(model::names::kGeneralQuantizationVersion, gguf::Value::of_u32(2));

    // --eos-bias: a constant feature in residual dimension 0 (every embedding has it, no layer
    // writes to it: row 0 of each output projection is zero) read by the eos row of an untied
    // head, so eos gets about the same logit boost at every position and replies end by
    // themselves. Only for qwen3moe (its only residual writers are attn_output and ffn_down_exps).
    const bool eos_bias = o.eos_bias != 0.0f;
    const std::string residual_writers[] = {std::string(".") + model::names::kAttnOut,
                                            std::string(".") + model::names::kFfnDownExps};
    const bool untied = o.untied || eos_bias;
    if (eos_bias && (o.arch != "qwen3moe" || vocab.eos < 0))
        throw Error("make-model: --eos-bias needs --arch qwen3moe and a tokenizer with an eos token");

    // The tensors the loader will ask for, in its order.
    auto arch = model::make_architecture(o.arch);
    WeightBinder recorder;
    arch->bind(cfg, recorder);
    struct Planned {
        std::string name;
        std::vector<int64_t> shape;
        quant::Type type;
    };
    std::vector<Planned> plan;
    uint64_t params = 0;
    for (const auto& spec : recorder.recorded()) {
        if (!spec.required && !(untied && spec.name == model::names::kOutput)) continue;
        const quant::Type t = tensor_type_for(*mix, spec.name, spec.shape, cfg.n_layer, !untied, quant::Type::F32);
        std::vector<uint64_t> shape(spec.shape.begin(), spec.shape.end());
        w.add_tensor(spec.name, t, shape);
        uint64_t n = 1;
        for (int64_t d : spec.shape) n *= static_cast<uint64_t>(d);
        params += n;
        plan.push_back({spec.name, spec.shape, t});
    }
    const bool blocks = o.init == "blocks" || (o.init == "auto" && params > 1000000000ull);
    if (blocks && eos_bias) throw Error("make-model: --eos-bias needs --init quantize");
    if (o.init != "auto" && o.init != "blocks" && o.init != "quantize")
        throw Error("make-model: --init must be auto, blocks or quantize");

    w.begin(out);
    util::ThreadPool pool(o.threads);
    uint64_t done = 0, total = 0;
    for (size_t i = 0; i < plan.size(); ++i) total += w.tensor_bytes(i);
    std::vector<uint8_t> chunk;
    std::vector<float> rows;
    for (size_t ti = 0; ti < plan.size(); ++ti) {
        const Planned& p = plan[ti];
        const int64_t ne0 = p.shape[0];
        int64_t n_rows = 1;
        for (size_t d = 1; d < p.shape.size(); ++d) n_rows *= p.shape[d];
        const size_t row_bytes = static_cast<size_t>(*quant::row_bytes(p.type, static_cast<uint64_t>(ne0)));
        const Init init = init_for(p.name, p.shape);
        const uint64_t tensor_seed = o.seed * 0x100000001b3ull + ti * 0x9e3779b97f4a7c15ull;
        const int64_t rows_per_chunk = std::max<int64_t>(1, static_cast<int64_t>((8u << 20) / std::max<size_t>(row_bytes, 1)));
        for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_chunk) {
            const int64_t nr = std::min(rows_per_chunk, n_rows - r0);
            chunk.resize(static_cast<size_t>(nr) * row_bytes);
            const bool random_blocks = blocks && quant::type_info(p.type).quantized;
            if (!random_blocks) rows.resize(static_cast<size_t>(o.threads) * static_cast<size_t>(ne0));
            pool.parallel_for(nr, [&](int64_t r, int thread) {
                const uint64_t row_seed = tensor_seed ^ (static_cast<uint64_t>(r0 + r) * 0xd1b54a32d192ed03ull);
                uint8_t* dst = chunk.data() + static_cast<size_t>(r) * row_bytes;
                if (random_blocks) {
                    fill_random_blocks(p.type, dst, row_bytes, init.scale, row_seed);
                } else {
                    float* x = rows.data() + static_cast<size_t>(thread) * static_cast<size_t>(ne0);
                    fill_row(x, ne0, init, row_seed);
                    if (eos_bias) {
                        const int64_t row = r0 + r;
                        if (p.name == model::names::kTokenEmbd) x[0] = 1.0f;
                        else if (p.name == model::names::kOutput) x[0] = row == vocab.eos ? o.eos_bias : 0.0f;
                        else if ((p.name.ends_with(residual_writers[0]) || p.name.ends_with(residual_writers[1])) &&
                                 row % cfg.n_embd == 0)
                            std::fill_n(x, ne0, 0.0f);
                    }
                    quant::quantize_row(p.type, x, dst, ne0);
                }
            });
            w.write_data(chunk.data(), chunk.size());
            done += chunk.size();
            if (o.progress) o.progress(done, total, p.name);
        }
    }
    w.finish();
    return params;
}

}  // namespace strata::model_tools
