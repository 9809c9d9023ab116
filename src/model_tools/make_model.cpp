#include "model_tools/make_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu_backend.h"
#include "convert/tokenizer_meta.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/architecture.h"
#include "model/config_io.h"
#include "model/model.h"
#include "model/names.h"
#include "model_tools/quant_mix.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
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

// ---- --router-skew ----

// The skew's residual feature, its value in every embedding: about half the rms a layer's
// output reaches (width-independent with init_for's scales), so it neither dominates the
// residual nor drowns in it.
constexpr float kSkewFeature = 0.25f;

// Sets value i of a quantised row to v: only the block holding it goes through the quantiser
// (its other values are requantised as they decode), the rest of the row stays as it was.
void set_row_value(quant::Type t, uint8_t* row, int64_t i, float v) {
    const auto& info = quant::type_info(t);
    uint8_t* block = row + static_cast<size_t>(i / info.block_elems) * static_cast<size_t>(info.block_bytes);
    std::vector<float> x(static_cast<size_t>(info.block_elems));
    quant::dequantize_row(t, block, x.data(), info.block_elems);
    x[static_cast<size_t>(i % info.block_elems)] = v;
    quant::quantize_row(t, x.data(), block, info.block_elems);
}

// The layer of "blk.{il}.*", or -1.
int64_t layer_of_name(const std::string& name) {
    if (!name.starts_with("blk.")) return -1;
    return std::strtoll(name.c_str() + 4, nullptr, 10);
}

// The experts a Zipf share counts as "the most popular tenth": n/10, at least one.
int64_t top_tenth(int64_t n_expert) { return std::max<int64_t>(1, n_expert / 10); }

// The CPU backend, recording per MoE layer what a router sees: the mean of its input's value in
// one dimension (the skew feature after the norm) and the mean over tokens of the spread (sd over
// experts) of its logits.
class RouterProbe final : public backend::Backend {
public:
    RouterProbe(int threads, int64_t n_layer, int64_t dim) : cpu_(threads), sum_(static_cast<size_t>(n_layer)), dim_(dim) {}
    struct Sums {
        double feature = 0, spread = 0;
        int64_t n = 0;
    };
    const std::vector<Sums>& sums() const { return sum_; }

    const char* name() const override { return "cpu-router-probe"; }
    bool supports(quant::Type t) const override { return cpu_.supports(t); }
    float* alloc_floats(size_t n) override { return cpu_.alloc_floats(n); }
    void free_floats(float* p) override { cpu_.free_floats(p); }
    void copy_to_host(const float* src, float* host, size_t n) override { cpu_.copy_to_host(src, host, n); }
    void copy_from_host(const float* host, float* dst, size_t n) override { cpu_.copy_from_host(host, dst, n); }
    void copy(const float* src, float* dst, size_t n) override { cpu_.copy(src, dst, n); }
    void copy_rows(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols) override {
        cpu_.copy_rows(src, ss, dst, ds, rows, cols);
    }
    void get_rows(const backend::Weight& t, const int32_t* ids, int64_t n, float* out) override { cpu_.get_rows(t, ids, n, out); }
    void matmul(std::span<const backend::MatmulArgs> products) override { cpu_.matmul(products); }
    void rms_norm(const float* x, const backend::Weight* w, int64_t rows, int64_t dim, float eps, float* out) override {
        cpu_.rms_norm(x, w, rows, dim, eps, out);
    }
    void add(float* y, const float* x, int64_t n) override { cpu_.add(y, x, n); }
    void add_rms_norm(float* y, const float* x, const backend::Weight* w, int64_t rows, int64_t dim, float eps,
                      float* out) override {
        cpu_.add_rms_norm(y, x, w, rows, dim, eps, out);
    }
    void swiglu(const float* g, const float* u, int64_t rows, int64_t dim, int64_t stride, float* out) override {
        cpu_.swiglu(g, u, rows, dim, stride, out);
    }
    void mul_sigmoid(float* x, const float* g, int64_t rows, int64_t dim, int64_t g_stride) override {
        cpu_.mul_sigmoid(x, g, rows, dim, g_stride);
    }
    void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* pos, const backend::RopeParams& p) override {
        cpu_.rope(x, n, heads, head_dim, pos, p);
    }
    void kv_store(const backend::KvCacheView* const* kv, const int32_t* pos, int64_t n, const float* k, int64_t k_row,
                  const float* v, int64_t v_row) override {
        cpu_.kv_store(kv, pos, n, k, k_row, v, v_row);
    }
    void attention(const backend::AttentionArgs& a) override { cpu_.attention(a); }
    void route_softmax_topk(const float* logits, int64_t n, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                            float* weights) override {
        spread_ = 0;  // the layer's moe call follows and says which layer this was
        for (int64_t t = 0; t < n; ++t) {
            double m = 0, q = 0;
            for (int64_t e = 0; e < n_expert; ++e) m += logits[t * n_expert + e];
            m /= static_cast<double>(n_expert);
            for (int64_t e = 0; e < n_expert; ++e) q += (logits[t * n_expert + e] - m) * (logits[t * n_expert + e] - m);
            spread_ += std::sqrt(q / static_cast<double>(n_expert));
        }
        cpu_.route_softmax_topk(logits, n, n_expert, k, renorm, ids, weights);
    }
    void moe(const backend::MoeArgs& a) override {
        Sums& s = sum_[static_cast<size_t>(a.layer)];
        for (int64_t t = 0; t < a.n_tokens; ++t) s.feature += a.x[t * a.gate->ne[0] + dim_];
        s.spread += spread_;
        s.n += a.n_tokens;
        cpu_.moe(a);
    }
    void ssm_conv_silu(const float* x, int64_t n, int64_t ch, const backend::Weight& w, int64_t kernel, float* state,
                       float* out) override {
        cpu_.ssm_conv_silu(x, n, ch, w, kernel, state, out);
    }
    void gdn_gates(const backend::GdnGateArgs& a) override { cpu_.gdn_gates(a); }
    void delta_rule(const backend::DeltaRuleArgs& a) override { cpu_.delta_rule(a); }
    void l2_norm(float* x, int64_t n, int64_t rows, int64_t dim, int64_t stride, float eps) override {
        cpu_.l2_norm(x, n, rows, dim, stride, eps);
    }

private:
    backend::CpuBackend cpu_;
    std::vector<Sums> sum_;
    double spread_ = 0;
    int64_t dim_;
};

// Share of all top-k picks that go to the experts of rank 1..top_tenth when the expert of rank r
// has router logit -a*ln(r) + noise, the noise unit normal (a is in units of the random
// router's own logit spread).
double simulated_top_share(double a, int64_t n_expert, int64_t k, int samples) {
    uint64_t s = 0x5eed;
    std::vector<std::pair<float, int64_t>> l(static_cast<size_t>(n_expert));
    int64_t top = 0;
    for (int t = 0; t < samples; ++t) {
        for (int64_t e = 0; e < n_expert; ++e)
            l[static_cast<size_t>(e)] = {static_cast<float>(-a * std::log(static_cast<double>(e + 1))) + normal(s), e};
        std::partial_sort(l.begin(), l.begin() + k, l.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
        for (int64_t j = 0; j < k; ++j) top += l[static_cast<size_t>(j)].second < top_tenth(n_expert) ? 1 : 0;
    }
    return static_cast<double>(top) / (static_cast<double>(samples) * static_cast<double>(k));
}

double calibrate_skew(double S, int64_t n_expert, int64_t k) {
    double num = 0, den = 0;
    for (int64_t r = 1; r <= n_expert; ++r) {
        const double z = std::pow(static_cast<double>(r), -S);
        den += z;
        if (r <= top_tenth(n_expert)) num += z;
    }
    const double want = num / den;
    const int samples = static_cast<int>(std::clamp<int64_t>(2000000 / n_expert, 500, 20000));
    double lo = 0, hi = 64;
    for (int it = 0; it < 24; ++it) {
        const double mid = 0.5 * (lo + hi);
        (simulated_top_share(mid, n_expert, k, samples) < want ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
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

namespace {

// What a router of one layer sees in a made model without the skew's biases (measured by
// probe_routers): the skew feature after the router's input norm, the sd of its logits.
struct RouterInput {
    double feature = 1, spread = 1;
};

// Writes the model. With --router-skew and no routers (the probe), the router biases are zero.
uint64_t write_model(const MakeModelOptions& o, const std::filesystem::path& out, const std::vector<RouterInput>* routers) {
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
    // themselves. Only for qwen3moe.
    //
    // --router-skew S: the same kind of constant feature, value kSkewFeature in dimension
    // skew_dim (0, or 1 beside --eos-bias), read by every router. Nothing writes that dimension
    // (the output rows of attn_output, ssm_out, ffn_down_exps, ffn_down_shexp and ffn_down are
    // zero), the routers' input norms (ffn_norm, post_attention_norm) have weight 1 there, and an
    // untied head ignores it. Column skew_dim of layer il's ffn_gate_inp holds, for the expert of
    // rank r in that layer's random order, the bias -a*ln(r)*spread/x_d: after the norm the
    // feature is x_d (the norm divides by the residual's rms, which grows with depth, so x_d
    // falls layer by layer and varies a little by token), and spread is the sd of the random
    // router's logits; both are measured per layer on a narrow copy of the model (probe_routers).
    // a, in units of that spread, is calibrated (calibrate_skew) so that the most popular tenth of
    // the experts gets Zipf(S)'s share of the top-k picks. With --init blocks, only the exact
    // values go through the quantiser (the one block of each embedding row holding the feature);
    // the zero rows are zero bytes, everything else stays random blocks.
    const bool eos_bias = o.eos_bias != 0.0f;
    const bool skew = o.router_skew != 0.0f;
    if (!(o.router_skew >= 0.0f) || !std::isfinite(o.router_skew))
        throw Error("make-model: --router-skew must be a Zipf exponent >= 0 (got " + std::to_string(o.router_skew) + ")");
    if (skew && cfg.n_expert == 0) throw Error("make-model: --router-skew needs an MoE architecture");
    const int64_t skew_dim = eos_bias ? 1 : 0;
    const std::string residual_writers[] = {std::string(".") + model::names::kAttnOut, std::string(".") + model::names::kSsmOut,
                                            std::string(".") + model::names::kFfnDownExps,
                                            std::string(".") + model::names::kFfnDownShexp,
                                            std::string(".") + model::names::kFfnDown};
    const std::string router_norms[] = {std::string(".") + model::names::kFfnNorm,
                                        std::string(".") + model::names::kPostAttnNorm};
    const std::string router_suffix = std::string(".") + model::names::kFfnGateInp;
    auto is_any = [](const std::string& name, const auto& suffixes) {
        for (const std::string& x : suffixes)
            if (name.ends_with(x)) return true;
        return false;
    };
    // Per layer and expert, the router bias (column skew_dim of ffn_gate_inp).
    std::vector<std::vector<float>> router_bias;
    if (skew) {
        const double a = routers ? calibrate_skew(o.router_skew, cfg.n_expert, cfg.n_expert_used) : 0.0;
        router_bias.resize(static_cast<size_t>(cfg.n_layer + cfg.n_mtp_layers));
        for (size_t il = 0; il < router_bias.size(); ++il) {
            // Layers the probe did not see (MTP blocks) get the last one's calibration.
            const RouterInput in = routers ? (*routers)[std::min(il, routers->size() - 1)] : RouterInput{};
            std::vector<int64_t> order(static_cast<size_t>(cfg.n_expert));  // order[rank-1] = expert
            for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int64_t>(e);
            uint64_t s = o.seed * 0x2545f4914f6cdd1dull + il;
            for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[splitmix(s) % (i + 1)]);
            router_bias[il].resize(order.size());
            for (size_t r = 0; r < order.size(); ++r)
                router_bias[il][static_cast<size_t>(order[r])] =
                    static_cast<float>(-a * in.spread * std::log(static_cast<double>(r + 1)) / in.feature);
        }
    }
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
        quant::Type t = tensor_type_for(*mix, spec.name, spec.shape, cfg.n_layer, !untied, quant::Type::F32);
        // --router-skew sets one value per embedding (and head) row through the quantiser.
        if (skew && (spec.name == model::names::kTokenEmbd || spec.name == model::names::kOutput) && !quant::can_quantize(t))
            t = spec.shape[0] % quant::type_info(quant::Type::Q8_0).block_elems == 0 ? quant::Type::Q8_0 : quant::Type::F16;
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
            rows.resize(static_cast<size_t>(o.threads) * static_cast<size_t>(ne0));
            const bool embd = p.name == model::names::kTokenEmbd, head = p.name == model::names::kOutput;
            const bool writer = is_any(p.name, residual_writers);
            const bool router = skew && p.name.ends_with(router_suffix), router_norm = skew && is_any(p.name, router_norms);
            pool.parallel_for(nr, [&](int64_t r, int thread) {
                const int64_t row = r0 + r;
                const uint64_t row_seed = tensor_seed ^ (static_cast<uint64_t>(row) * 0xd1b54a32d192ed03ull);
                uint8_t* dst = chunk.data() + static_cast<size_t>(r) * row_bytes;
                float* x = rows.data() + static_cast<size_t>(thread) * static_cast<size_t>(ne0);
                // Output rows of the features' dimensions: nothing writes them.
                const bool zero_row = writer && ((eos_bias && row % cfg.n_embd == 0) || (skew && row % cfg.n_embd == skew_dim));
                if (random_blocks) {
                    if (zero_row) {  // zero scales: every block type decodes all-zero bytes to zeros
                        std::memset(dst, 0, row_bytes);
                        return;
                    }
                    fill_random_blocks(p.type, dst, row_bytes, init.scale, row_seed);
                    if (skew && embd) set_row_value(p.type, dst, skew_dim, kSkewFeature);
                    if (skew && head) set_row_value(p.type, dst, skew_dim, 0.0f);
                    return;
                }
                fill_row(x, ne0, init, row_seed);
                if (zero_row) std::fill_n(x, ne0, 0.0f);
                if (eos_bias) {
                    if (embd) x[0] = 1.0f;
                    else if (head) x[0] = row == vocab.eos ? o.eos_bias : 0.0f;
                }
                if (skew) {
                    if (embd) x[skew_dim] = kSkewFeature;
                    else if (head) x[skew_dim] = 0.0f;  // an untied head ignores the feature
                    else if (router_norm) x[skew_dim] = 1.0f;
                    else if (router)
                        x[skew_dim] = router_bias[static_cast<size_t>(layer_of_name(p.name))][static_cast<size_t>(row)];
                }
                quant::quantize_row(p.type, x, dst, ne0);
            });
            w.write_data(chunk.data(), chunk.size());
            done += chunk.size();
            if (o.progress) o.progress(done, total, p.name);
        }
    }
    w.finish();
    return params;
}

// --router-skew's calibration: a narrow copy of the model (same architecture, layers, layer
// kinds, attention and Gated DeltaNet geometry, experts per token, type mix and init; widths cut
// to 256-511 and at most 64 experts; the builtin vocabulary) with the feature but zero router
// biases, run over 64 random tokens; per layer, the mean feature after the router's norm and the
// mean logit spread. What they depend on, the residual's rms, comes from the layers' outputs,
// which init_for's fan-in scaling keeps independent of the widths, and from the weights' encoding:
// random blocks of some types spread far wider than the intended normal values (after the norm
// the feature is 0.001-0.005 in an iq3_xxs seed-125b made with blocks, 1-2 in the tiny models
// made with normal values), so the copy uses the same types and init.
std::vector<RouterInput> probe_routers(const MakeModelOptions& o, const std::filesystem::path& out) {
    gguf::Writer scratch;
    const ModelConfig full = make_model_config(o, write_tokenizer(o.tokenizer, scratch).n_vocab);
    MakeModelOptions p = o;
    if (p.init == "auto") {  // resolved as write_model would for the full model
        WeightBinder recorder;
        model::make_architecture(o.arch)->bind(full, recorder);
        uint64_t params = 0;
        for (const auto& spec : recorder.recorded()) {
            uint64_t n = 1;
            for (int64_t d : spec.shape) n *= static_cast<uint64_t>(d);
            params += n;
        }
        p.init = params > 1000000000ull ? "blocks" : "quantize";
    }
    p.tokenizer = "builtin";
    p.chat_template_file.clear();
    // Narrower, but with the same residue modulo 256, so that every tensor gets the same type as
    // in the full model (the mixes fall back where a row is not whole blocks).
    auto narrow = [](int64_t w) { return w <= 256 ? w : 256 + w % 256; };
    p.embd = narrow(full.n_embd);
    p.ff_exp = narrow(full.n_ff_exp);
    if (full.n_ff_shexp > 0) p.ff_shexp = narrow(full.n_ff_shexp);
    p.experts = std::min<int64_t>(full.n_expert, 64);
    p.experts_used = std::min(full.n_expert_used, *p.experts);
    p.progress = nullptr;
    const std::filesystem::path path = out.string() + ".router-probe.gguf";
    struct Remove {
        std::filesystem::path p;
        ~Remove() {
            std::error_code ec;
            std::filesystem::remove(p, ec);
        }
    } remove{path};
    write_model(p, path, nullptr);
    constexpr int kTokens = 64;
    RouterProbe be(o.threads, full.n_layer, o.eos_bias != 0.0f ? 1 : 0);
    auto m = model::Model::load(path, be);
    auto seq = m->new_sequence(kTokens);
    model::Batch b;
    uint64_t s = o.seed ^ 0x7072006265ull;
    for (int i = 0; i < kTokens; ++i)
        b.add(static_cast<int32_t>(splitmix(s) % static_cast<uint64_t>(m->config().n_vocab)), i, 0, i + 1 == kTokens);
    std::vector<float> logits(static_cast<size_t>(m->config().n_vocab));
    model::SequenceState* sp = seq.get();
    m->forward(b, {&sp, 1}, logits.data());
    std::vector<RouterInput> in;
    for (const RouterProbe::Sums& x : be.sums()) {
        if (x.n == 0) throw Error("make-model: --router-skew: the probe saw no routing");
        in.push_back({x.feature / static_cast<double>(x.n), x.spread / static_cast<double>(x.n)});
        if (!(in.back().feature > 1e-7) || !(in.back().spread > 1e-7))
            throw Error("make-model: --router-skew: the router feature did not survive the norm");
    }
    return in;
}

}  // namespace

uint64_t make_model(const MakeModelOptions& o, const std::filesystem::path& out) {
    if (o.router_skew == 0.0f) return write_model(o, out, nullptr);
    if (!(o.router_skew > 0.0f) || !std::isfinite(o.router_skew))
        throw Error("make-model: --router-skew must be a Zipf exponent >= 0 (got " + std::to_string(o.router_skew) + ")");
    const std::vector<RouterInput> routers = probe_routers(o, out);
    return write_model(o, out, &routers);
}

}  // namespace strata::model_tools
