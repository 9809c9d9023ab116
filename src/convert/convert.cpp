#include "convert/convert.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "convert/general_meta.h"
#include "convert/hf_config.h"
#include "convert/qwen_tensors.h"
#include "convert/safetensors.h"
#include "convert/tokenizer_meta.h"
#include "gguf/gguf_writer.h"
#include "model/names.h"
#include "quant/blocks.h"
#include "util/error.h"
#include "util/fp16.h"

namespace strata::convert {

namespace fs = std::filesystem;
namespace names = model::names;
using ojson = nlohmann::ordered_json;

std::optional<OutType> parse_outtype(std::string_view s) {
    std::string lower(s);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "auto") return OutType::Auto;
    if (lower == "f32") return OutType::F32;
    if (lower == "f16") return OutType::F16;
    if (lower == "bf16") return OutType::BF16;
    if (lower == "q8_0") return OutType::Q8_0;
    return std::nullopt;
}

const char* outtype_name(OutType t) {
    switch (t) {
        case OutType::Auto: return "auto";
        case OutType::F32: return "f32";
        case OutType::F16: return "f16";
        case OutType::BF16: return "bf16";
        case OutType::Q8_0: return "q8_0";
    }
    return "?";
}

namespace {

// Elements converted per chunk (whole rows, at least one): bounds memory at a few MiB.
constexpr int64_t kChunkElems = int64_t{1} << 20;

// general.file_type as the converter numbers it.
uint32_t file_type(OutType t) {
    switch (t) {
        case OutType::F32: return 0;
        case OutType::F16: return 1;
        case OutType::Q8_0: return 7;
        case OutType::BF16: return 32;
        case OutType::Auto: break;
    }
    return 1;
}

quant::Type quant_type(OutType t) {
    switch (t) {
        case OutType::F32: return quant::Type::F32;
        case OutType::BF16: return quant::Type::BF16;
        case OutType::Q8_0: return quant::Type::Q8_0;
        default: return quant::Type::F16;
    }
}

std::string human_bytes(uint64_t b) {
    char buf[32];
    if (b >= (uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
    else std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
    return buf;
}

std::string shape_text(const std::vector<uint64_t>& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) out += (i ? " x " : "") + std::to_string(s[i]);
    return out;
}

// Q8_0 exactly as the reference: d = max|x| / 127, q = round-half-away(x / d), d stored as f16.
void quantize_q8_0_reference(const float* x, int64_t n, quant::BlockQ8_0* out) {
    for (int64_t b = 0; b < n / 32; ++b) {
        const float* v = x + b * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = f32_to_f16(d);
        for (int i = 0; i < 32; ++i) out[b].qs[i] = static_cast<int8_t>(std::round(v[i] * id));
    }
}

// Encodes rows of f32 values as `type` and hands the bytes to the writer.
class Encoder {
public:
    Encoder(gguf::Writer& w, quant::Type type) : w_(w), type_(type) {}
    void put(const float* v, int64_t n) {
        switch (type_) {
            case quant::Type::F32: w_.write_data(v, static_cast<size_t>(n) * 4); return;
            case quant::Type::F16:
            case quant::Type::BF16: {
                half_.resize(static_cast<size_t>(n));
                const bool f16 = type_ == quant::Type::F16;
                for (int64_t i = 0; i < n; ++i) half_[static_cast<size_t>(i)] = f16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
                w_.write_data(half_.data(), half_.size() * 2);
                return;
            }
            case quant::Type::Q8_0: {
                blocks_.resize(static_cast<size_t>(n / 32));
                quantize_q8_0_reference(v, n, blocks_.data());
                w_.write_data(blocks_.data(), blocks_.size() * sizeof(quant::BlockQ8_0));
                return;
            }
            default: throw Error("convert: internal: unexpected output type");
        }
    }

private:
    gguf::Writer& w_;
    quant::Type type_;
    std::vector<uint16_t> half_;
    std::vector<quant::BlockQ8_0> blocks_;
};

void apply_op(ElementOp op, bool source_f16, float* v, int64_t n) {
    if (op == ElementOp::None) return;
    for (int64_t i = 0; i < n; ++i) {
        float r = op == ElementOp::AddOne ? v[i] + 1.0f : -std::exp(v[i]);
        // The converter computes on f16 checkpoints in f16: the result is rounded to f16.
        if (source_f16) r = f16_to_f32(f32_to_f16(r));
        v[i] = r;
    }
}

// Streams one planned tensor: rows in plan order, permuted / transformed, encoded.
void write_tensor(const PlannedTensor& t, quant::Type type, gguf::Writer& w) {
    const int64_t row_len = static_cast<int64_t>(t.shape[0]);
    const int64_t chunk_rows = std::max<int64_t>(1, kChunkElems / std::max<int64_t>(row_len, 1));
    std::vector<float> buf, permuted;
    Encoder enc(w, type);
    uint64_t rows_done = 0;
    for (const SourcePiece& piece : t.pieces) {
        const StTensor& src = *piece.tensor;
        if (src.row_len() != row_len)
            throw Error("convert: internal: '" + src.name + "' rows of " + std::to_string(src.row_len()) + " for '" + t.name +
                        "' rows of " + std::to_string(row_len));
        std::vector<RowRange> ranges = piece.rows;
        if (ranges.empty()) ranges.push_back({0, src.n_rows()});
        for (const RowRange& r : ranges) {
            if (r.first < 0 || r.count < 0 || r.first + r.count > src.n_rows())
                throw Error("convert: internal: row range outside '" + src.name + "'");
            for (int64_t row = r.first; row < r.first + r.count; row += chunk_rows) {
                const int64_t n_rows = std::min(chunk_rows, r.first + r.count - row);
                const int64_t n = n_rows * row_len;
                buf.resize(static_cast<size_t>(n));
                read_f32(src, row * row_len, n, buf.data());
                if (!t.col_perm.empty()) {
                    permuted.resize(buf.size());
                    for (int64_t k = 0; k < n_rows; ++k)
                        for (int64_t j = 0; j < row_len; ++j)
                            permuted[static_cast<size_t>(k * row_len + j)] =
                                buf[static_cast<size_t>(k * row_len + t.col_perm[static_cast<size_t>(j)])];
                    buf.swap(permuted);
                }
                apply_op(t.op, src.dtype == StDtype::F16, buf.data(), n);
                enc.put(buf.data(), n);
                rows_done += static_cast<uint64_t>(n_rows);
            }
        }
    }
    if (rows_done != t.n_rows())
        throw Error("convert: internal: '" + t.name + "' got " + std::to_string(rows_done) + " rows, expected " +
                    std::to_string(t.n_rows()));
}

// The {arch}.* keys in the converter's order, then general.file_type.
void add_arch_metadata(gguf::Writer& w, const HfConfig& cfg, const TensorPlan& plan, OutType outtype) {
    const std::string& a = cfg.gguf_arch;
    auto u32 = [&](const char* k, int64_t v) {
        if (v < 0 || v > static_cast<int64_t>(UINT32_MAX))
            throw Error(cfg.config_path.string() + ": value " + std::to_string(v) + " for " + k + " is out of range");
        w.set(names::key(a, k), gguf::Value::of_u32(static_cast<uint32_t>(v)));
    };
    auto f32 = [&](const char* k, double v) { w.set(names::key(a, k), gguf::Value::of_f32(static_cast<float>(v))); };
    auto opt_u32 = [&](const char* k, std::initializer_list<const char*> keys) {
        if (const auto v = cfg.find_int(keys)) u32(k, *v);
    };
    auto rope_number = [&](const ojson& params, const char* key) -> std::optional<double> {
        const auto it = params.find(key);
        if (it == params.end() || !it->is_number()) return std::nullopt;
        return it->get<double>();
    };

    u32(names::kBlockCount, cfg.n_layer + plan.n_mtp_layers);
    opt_u32(names::kContextLength,
            {"max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"});
    u32(names::kEmbeddingLength, cfg.n_embd);
    opt_u32(names::kFeedForwardLength,
            {"prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size", "n_inner", "hidden_dim"});
    u32(names::kHeadCount, cfg.n_head);
    opt_u32(names::kHeadCountKv, {"num_key_value_heads", "n_kv_heads"});

    const ojson& rope = cfg.rope;
    const ojson& rope_params =
        rope.contains("full_attention") && rope["full_attention"].is_object() ? rope["full_attention"] : rope;
    if (const auto it = rope_params.find("rope_type"); it != rope_params.end() && it->is_string()) {
        const std::string type = it->get<std::string>();
        const auto factor = rope_number(rope_params, "factor");
        if (type == "linear" && factor) {
            w.set(names::key(a, names::kRopeScalingType), gguf::Value::of_string("linear"));
            f32(names::kRopeScalingFactor, *factor);
        } else if (type == "yarn" && factor) {
            w.set(names::key(a, names::kRopeScalingType), gguf::Value::of_string("yarn"));
            f32(names::kRopeScalingFactor, *factor);
            const auto orig = rope_number(rope_params, "original_max_position_embeddings");
            if (!orig) throw Error(cfg.config_path.string() + ": yarn RoPE scaling without original_max_position_embeddings");
            u32(names::kRopeScalingOrigCtxLen, static_cast<int64_t>(*orig));
            if (const auto v = rope_number(rope_params, "extrapolation_factor")) f32(names::kRopeScalingYarnExtFactor, *v);
            auto attn = rope_number(rope_params, "attention_factor");
            if (!attn) attn = rope_number(rope_params, "attn_factor");
            if (attn) f32(names::kRopeScalingYarnAttnFactor, *attn);
            if (const auto v = rope_number(rope_params, "beta_fast")) f32(names::kRopeScalingYarnBetaFast, *v);
            if (const auto v = rope_number(rope_params, "beta_slow")) f32(names::kRopeScalingYarnBetaSlow, *v);
        } else if (type == "su" || type == "longrope") {
            w.set(names::key(a, names::kRopeScalingType), gguf::Value::of_string("longrope"));
        }
    }
    const bool has_mrope = rope.contains("mrope_section") && rope["mrope_section"].is_array();
    if (has_mrope) {
        std::vector<int32_t> sections;
        for (const auto& v : rope["mrope_section"]) {
            if (!v.is_number_integer()) throw Error(cfg.config_path.string() + ": mrope_section entries must be integers");
            sections.push_back(v.get<int32_t>());
        }
        while (sections.size() < 4) sections.push_back(0);
        sections.resize(4);
        w.set(names::key(a, names::kRopeSections), gguf::Value::of_i32s(sections));
    }
    if (const auto theta = rope_number(rope_params, "rope_theta")) f32(names::kRopeFreqBase, *theta);
    if (const auto eps = cfg.find_number({"rms_norm_eps", "norm_eps"})) f32(names::kRmsEps, *eps);
    if (const auto eps = cfg.find_number({"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"}))
        f32(names::kLayerNormEps, *eps);
    if (cfg.n_expert > 0) {
        u32(names::kExpertCount, cfg.n_expert);
        u32(names::kExpertUsedCount, cfg.n_expert_used);
    }
    if (cfg.find({"head_dim"}) != nullptr) {
        u32(names::kKeyLength, cfg.head_dim);
        u32(names::kValueLength, cfg.head_dim);
    }
    w.set(names::kGeneralFileType, gguf::Value::of_u32(file_type(outtype)));
    opt_u32(names::kExpertFfLength, {"moe_intermediate_size"});
    opt_u32(names::kExpertSharedFfLength, {"shared_expert_intermediate_size"});

    if (is_hybrid(cfg.arch)) {
        if (plan.n_mtp_layers > 0) u32(names::kNextnPredictLayers, plan.n_mtp_layers);
        u32(names::kSsmConvKernel, cfg.conv_kernel);
        u32(names::kSsmStateSize, cfg.lin_k_dim);
        u32(names::kSsmGroupCount, cfg.lin_k_heads);
        u32(names::kSsmTimeStepRank, cfg.lin_v_heads);
        u32(names::kSsmInnerSize, cfg.lin_v_dim * cfg.lin_v_heads);
        u32(names::kFullAttentionInterval, cfg.full_attention_interval);
        const double partial = rope_number(rope, "partial_rotary_factor").value_or(0.25);
        u32(names::kRopeDimCount, static_cast<int64_t>(static_cast<double>(cfg.head_dim) * partial));
        // Qwen3.5 always uses interleaved M-RoPE; loaders require the sections.
        if (cfg.arch == HfArch::Qwen35Moe && !has_mrope)
            w.set(names::key(a, names::kRopeSections), gguf::Value::of_i32s({11, 11, 10, 0}));
    }
    // Not written by the converter (loaders there always renormalise): without it the top-k
    // routing weights of a norm_topk_prob = false checkpoint would be renormalised.
    if (const ojson* norm = cfg.find({"norm_topk_prob"}); norm != nullptr && norm->is_boolean() && !norm->get<bool>())
        w.set(names::key(a, names::kExpertWeightsNorm), gguf::Value::of_bool(false));
}

// The output type "auto" picks: the checkpoint's first matrix in bf16 -> bf16, in f16 -> f16.
OutType resolve_auto(const TensorPlan& plan) {
    for (const PlannedTensor& t : plan.tensors)
        for (const SourcePiece& p : t.pieces)
            if (p.tensor->shape.size() >= 2) {
                if (p.tensor->dtype == StDtype::BF16) return OutType::BF16;
                return OutType::F16;
            }
    return OutType::F16;
}

}  // namespace

ConvertResult convert_checkpoint(const fs::path& hf_dir, const fs::path& out, const ConvertOptions& opts) {
    auto log = [&](const std::string& line) {
        if (opts.log) opts.log(line);
    };
    std::error_code ec;
    if (fs::is_directory(out, ec)) throw Error(out.string() + ": is a directory; give the output .gguf file name");
    const fs::path out_dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
    if (!fs::is_directory(out_dir, ec)) throw Error(out.string() + ": directory " + out_dir.string() + " does not exist");

    const HfConfig cfg = load_hf_config(hf_dir);
    const auto ck = Checkpoint::open(hf_dir);
    PlanOptions popts;
    popts.include_mtp = opts.include_mtp;
    const TensorPlan plan = plan_tensors(cfg, *ck, popts);
    for (const std::string& note : plan.notes) log("note: " + note);

    ConvertResult res;
    res.gguf_arch = cfg.gguf_arch;
    res.outtype = opts.outtype == OutType::Auto ? resolve_auto(plan) : opts.outtype;
    res.n_mtp_layers = plan.n_mtp_layers;
    for (const PlannedTensor& t : plan.tensors)
        for (const SourcePiece& p : t.pieces)
            if (!is_convertible(p.tensor->dtype))
                throw Error(p.tensor->file->string() + ": tensor '" + p.tensor->name + "' has dtype " +
                            dtype_name(p.tensor->dtype) + "; only F32, F16 and BF16 checkpoints can be converted");

    // Every tensor's type, then the header: metadata in the converter's order.
    std::vector<quant::Type> types;
    ParamCounts counts;
    size_t n_fallback = 0;
    for (const PlannedTensor& t : plan.tensors) {
        quant::Type type = t.keep_f32 ? quant::Type::F32 : quant_type(res.outtype);
        if (type == quant::Type::Q8_0 && t.shape[0] % 32 != 0) {
            type = quant::Type::F16;  // rows that are not whole blocks: the converter's fallback
            ++n_fallback;
        }
        types.push_back(type);
        counts.add(t.name, t.shape);
    }
    if (n_fallback > 0)
        log("note: " + std::to_string(n_fallback) +
            " tensor(s) with rows that are not a multiple of 32 stay f16 instead of q8_0");

    gguf::Writer w;
    w.set(names::kGeneralArchitecture, gguf::Value::of_string(cfg.gguf_arch));
    w.set(names::kGeneralType, gguf::Value::of_string("model"));
    for (auto& [k, v] : general_metadata(hf_dir, cfg.hparams, counts)) w.set(k, std::move(v));
    add_arch_metadata(w, cfg, plan, res.outtype);
    w.set(names::kGeneralQuantizationVersion, gguf::Value::of_u32(2));
    for (auto& [k, v] : tokenizer_metadata(hf_dir, cfg.n_vocab)) w.set(k, std::move(v));

    uint64_t total_bytes = 0;
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
        w.add_tensor(plan.tensors[i].name, types[i], plan.tensors[i].shape);
        total_bytes += w.tensor_bytes(i);
    }
    log("converting " + hf_dir.string() + " (" + cfg.hf_arch + ") -> " + out.string() + ": " + cfg.gguf_arch + ", " +
        std::to_string(plan.tensors.size()) + " tensors, " + human_bytes(total_bytes) + " as " + outtype_name(res.outtype) +
        (plan.n_mtp_layers > 0 ? ", " + std::to_string(plan.n_mtp_layers) + " MTP layer(s)" : ""));

    w.begin(out);
    uint64_t done = 0;
    const size_t n = plan.tensors.size();
    const int width = static_cast<int>(std::to_string(n).size());
    for (size_t i = 0; i < n; ++i) {
        const PlannedTensor& t = plan.tensors[i];
        write_tensor(t, types[i], w);
        done += w.tensor_bytes(i);
        char head[48];
        std::snprintf(head, sizeof head, "[%*zu/%zu] ", width, i + 1, n);
        log(std::string(head) + t.name + " " + quant::type_name(types[i]) + " {" + shape_text(t.shape) + "} " +
            human_bytes(done) + " / " + human_bytes(total_bytes));
    }
    w.finish();
    res.n_tensors = n;
    res.data_bytes = total_bytes;
    log("wrote " + out.string());
    return res;
}

}  // namespace strata::convert
