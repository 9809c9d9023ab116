#include "convert/qwen_tensors.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "model/names.h"
#include "util/error.h"

namespace strata::convert {

namespace names = model::names;

int64_t SourcePiece::n_rows() const {
    if (rows.empty()) return tensor->n_rows();
    int64_t n = 0;
    for (const RowRange& r : rows) n += r.count;
    return n;
}

uint64_t PlannedTensor::n_rows() const {
    uint64_t n = 1;
    for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
}

std::vector<int64_t> tiled_value_heads(int64_t n_k_heads, int64_t n_v_heads) {
    const int64_t per_k = n_v_heads / n_k_heads;
    std::vector<int64_t> order(static_cast<size_t>(n_v_heads));
    for (int64_t r = 0; r < per_k; ++r)
        for (int64_t k = 0; k < n_k_heads; ++k) order[static_cast<size_t>(r * n_k_heads + k)] = k * per_k + r;
    return order;
}

namespace {

constexpr const char* kProjNames[3] = {"down", "gate", "up"};  // the converter's stacking order
constexpr const char* kExpsNames[3] = {names::kFfnDownExps, names::kFfnGateExps, names::kFfnUpExps};  // the same order

// Row ranges of `order.size()` heads of head_dim rows starting at row `base`, in `order`;
// adjacent ranges merged.
void add_head_rows(std::vector<RowRange>& out, int64_t base, int64_t head_dim, const std::vector<int64_t>& order) {
    for (int64_t h : order) {
        const int64_t first = base + h * head_dim;
        if (!out.empty() && out.back().first + out.back().count == first) out.back().count += head_dim;
        else out.push_back({first, head_dim});
    }
}

std::vector<int64_t> identity_order(int64_t n) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
    return v;
}

std::vector<uint64_t> reversed_shape(const std::vector<int64_t>& torch_shape) {
    std::vector<uint64_t> s;
    for (auto it = torch_shape.rbegin(); it != torch_shape.rend(); ++it) s.push_back(static_cast<uint64_t>(*it));
    if (s.empty()) s.push_back(1);  // a scalar is one element
    return s;
}

std::string shape_text(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

bool ends_with(const std::string& s, const std::string& suffix) { return s.ends_with(suffix); }

// A per-layer tensor name "blk.{il}.{suffix}" of any layer.
bool is_layer_tensor(const std::string& name, const char* suffix) { return name.ends_with(std::string(".") + suffix); }

// Experts of one layer waiting to be stacked: [proj][expert].
struct ExpertSlots {
    std::vector<const StTensor*> by_proj[3];
    int64_t filled = 0;
};

class Planner {
public:
    Planner(const HfConfig& cfg, const Checkpoint& ck, const PlanOptions& opts) : cfg_(cfg), ck_(ck), opts_(opts) {
        where_ = ck.n_files() == 1 ? ck.tensors().empty() ? ck.dir().string() : ck.tensors().front()->file->string()
                                   : (ck.dir() / "model.safetensors.index.json").string();
        hybrid_ = is_hybrid(cfg.arch);
        dense_ = cfg.arch == HfArch::Qwen3;
        zero_centred_ = hybrid_;
        if (hybrid_) {
            v_per_k_ = cfg.lin_v_heads / cfg.lin_k_heads;
            reorder_v_ = cfg.arch == HfArch::Qwen35Moe && cfg.lin_k_heads != cfg.lin_v_heads;
            v_order_ = reorder_v_ ? tiled_value_heads(cfg.lin_k_heads, cfg.lin_v_heads) : identity_order(cfg.lin_v_heads);
        }
    }

    TensorPlan run() {
        count_mtp_layers();
        for (const StTensor* t : ck_.tensors()) {
            const std::optional<std::string> name = filtered_name(t->name);
            if (!name) continue;
            if (ends_with(*name, ".attention.masked_bias") || ends_with(*name, ".attention.bias") ||
                ends_with(*name, ".rotary_emb.inv_freq"))
                continue;
            map_tensor(*t, *name);
        }
        for (const auto& [layer, slots] : experts_) {
            for (int p = 0; p < 3; ++p)
                for (size_t e = 0; e < slots.by_proj[p].size(); ++e)
                    if (slots.by_proj[p][e] == nullptr)
                        fail("tensor 'model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(e) + "." +
                             kProjNames[p] + "_proj.weight' is missing");
        }
        check_complete();
        return std::move(plan_);
    }

private:
    [[noreturn]] void fail(const std::string& what) const { throw Error(where_ + ": " + what); }

    int64_t n_blocks() const { return cfg_.n_layer + plan_.n_mtp_layers; }

    // ---- names: the converter's filters and MTP renames ----

    static bool is_mtp(const std::string& n) { return n.starts_with("mtp.") || n.starts_with("model.mtp."); }

    void count_mtp_layers() {
        if (!hybrid_) return;
        int64_t n = 0;
        bool any = false;
        for (const StTensor* t : ck_.tensors()) {
            std::string name = strip_language_model(t->name);
            if (!is_mtp(name)) continue;
            any = true;
            if (name.starts_with("model.")) name = name.substr(6);
            const auto parts = split_dots(name, 4);
            if (parts.size() == 4 && parts[1] == "layers" && is_decimal(parts[2]))
                n = std::max<int64_t>(n, std::stoll(parts[2]) + 1);
        }
        if (any && n == 0) n = 1;  // only the fc/norm tensors: they still belong to one block
        if (!opts_.include_mtp) {
            if (any) plan_.notes.push_back("leaving out the checkpoint's MTP tensors (--no-mtp)");
            return;
        }
        if (cfg_.mtp_layers_in_config > 0 && n > 0 && n != cfg_.mtp_layers_in_config)
            fail("the checkpoint has " + std::to_string(n) + " MTP layers but config.json's mtp_num_hidden_layers says " +
                 std::to_string(cfg_.mtp_layers_in_config));
        if (cfg_.mtp_layers_in_config > 0 && n == 0)
            plan_.notes.push_back("config.json lists " + std::to_string(cfg_.mtp_layers_in_config) +
                                  " MTP layer(s) but the checkpoint has no mtp.* tensors; writing none");
        plan_.n_mtp_layers = n;
    }

    static std::vector<std::string> split_dots(const std::string& s, size_t max_parts) {
        std::vector<std::string> out;
        size_t pos = 0;
        while (out.size() + 1 < max_parts) {
            const size_t dot = s.find('.', pos);
            if (dot == std::string::npos) break;
            out.push_back(s.substr(pos, dot - pos));
            pos = dot + 1;
        }
        out.push_back(s.substr(pos));
        return out;
    }

    static bool is_decimal(const std::string& s) {
        return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    }

    static std::string strip_language_model(std::string name) {
        for (size_t pos; (pos = name.find("language_model.")) != std::string::npos;) name.erase(pos, 15);
        return name;
    }

    // nullopt: a tensor the converter leaves out (other modalities, MTP when excluded).
    std::optional<std::string> filtered_name(const std::string& raw) const {
        static const char* const kSkipPrefixes[] = {
            "mlp",     "vit.",       "vpm.",           "siglip2.",          "conformer.",
            "merger.", "resampler.", "sound_encoder.", "sound_projection.", "speech_embeddings."};
        static const char* const kSkipInfixes[] = {
            "visual.",          "vision.",         "audio.",      "talker.",         "vision_",
            "audio_",           "token2wav.",      "code2wav.",   "projector.",      "pre_mm_projector_norm",
            "image_newline",    "view_seperator",  "patch_embed", "patch_embedding", "patch_merger.",
            "patch_merge_mlp.", "model.connector."};
        for (const char* p : kSkipPrefixes)
            if (raw.starts_with(p)) return std::nullopt;
        for (const char* p : kSkipInfixes)
            if (raw.find(p) != std::string::npos) return std::nullopt;
        std::string name = strip_language_model(raw);
        if (!hybrid_ || !is_mtp(name)) return name;
        if (!opts_.include_mtp) return std::nullopt;
        if (name.starts_with("model.")) name = name.substr(6);
        const auto parts = split_dots(name, 4);
        if (parts.size() == 4 && parts[1] == "layers" && is_decimal(parts[2]))
            return "model.layers." + std::to_string(cfg_.n_layer + std::stoll(parts[2])) + "." + parts[3];
        static const std::map<std::string, std::string> kRemap = {
            {"fc", "eh_proj"}, {"pre_fc_norm_embedding", "enorm"}, {"pre_fc_norm_hidden", "hnorm"}, {"norm", "shared_head.norm"}};
        if (parts.size() == 3 && kRemap.count(parts[1]))
            return "model.layers." + std::to_string(cfg_.n_layer) + "." + kRemap.at(parts[1]) + "." + parts[2];
        return name;  // fails to map below
    }

    // ---- emitting ----

    void emit(PlannedTensor t, const std::string& source) {
        t.source = source;
        if (!names_.insert(t.name).second) fail("two checkpoint tensors map to '" + t.name + "' (second: '" + source + "')");
        // The converter's always-F32 tensors: vectors, norms, routers, the conv kernel, and
        // anything not named *.weight (ssm_a, ssm_dt.bias).
        const std::string& n = t.name;
        t.keep_f32 = t.shape.size() <= 1 || ends_with(n, "_norm.weight") || is_layer_tensor(n, names::kFfnGateInp) ||
                     is_layer_tensor(n, names::kFfnGateInpShexp) || is_layer_tensor(n, names::kSsmConv1d) ||
                     !ends_with(n, ".weight");
        if (!t.col_perm.empty() && static_cast<uint64_t>(t.col_perm.size()) != t.shape[0])
            fail("internal: column permutation of '" + t.name + "' does not match its rows");
        plan_.tensors.push_back(std::move(t));
    }

    void emit_plain(const StTensor& src, const std::string& gguf_name, ElementOp op = ElementOp::None) {
        PlannedTensor t;
        t.name = gguf_name;
        t.shape = reversed_shape(src.shape);
        t.pieces.push_back({&src, {}});
        t.op = op;
        emit(std::move(t), src.name);
    }

    void expect_shape(const StTensor& t, const std::vector<int64_t>& want) const {
        if (t.shape != want)
            fail("tensor '" + t.name + "' has shape " + t.shape_text() + ", expected " + shape_text(want) + " from config.json");
    }

    // ---- mapping ----

    void map_tensor(const StTensor& t, const std::string& name) {
        if (name == "lm_head.weight") return emit_plain(t, names::kOutput);
        if (name == "model.embed_tokens.weight") return emit_plain(t, names::kTokenEmbd);
        if (name == "model.norm.weight") return emit_plain(t, names::kOutputNorm, norm_op(name));
        static const std::string kLayers = "model.layers.";
        if (!name.starts_with(kLayers)) fail("cannot map tensor '" + t.name + "' to a GGUF tensor");
        const size_t dot = name.find('.', kLayers.size());
        const std::string idx = name.substr(kLayers.size(), dot == std::string::npos ? std::string::npos : dot - kLayers.size());
        if (dot == std::string::npos || !is_decimal(idx)) fail("cannot map tensor '" + t.name + "' to a GGUF tensor");
        const int64_t layer = std::stoll(idx);
        if (layer >= n_blocks())
            fail("tensor '" + t.name + "' is in layer " + idx + ", but config.json has " + std::to_string(cfg_.n_layer) +
                 " layers" + (plan_.n_mtp_layers > 0 ? " and " + std::to_string(plan_.n_mtp_layers) + " MTP layer(s)" : ""));
        map_layer_tensor(t, name, layer, name.substr(dot + 1));
    }

    ElementOp norm_op(const std::string& name) const {
        return zero_centred_ && ends_with(name, "norm.weight") && !ends_with(name, "linear_attn.norm.weight") ? ElementOp::AddOne
                                                                                                              : ElementOp::None;
    }

    bool is_full_attention(int64_t layer) const {
        return layer >= cfg_.n_layer || cfg_.full_attention[static_cast<size_t>(layer)];
    }

    void map_layer_tensor(const StTensor& t, const std::string& name, int64_t layer, const std::string& s) {
        const bool mtp = layer >= cfg_.n_layer;
        static const std::map<std::string, const char*> kCommon = {
            {"input_layernorm.weight", names::kAttnNorm},   {"self_attn.q_proj.weight", names::kAttnQ},
            {"self_attn.k_proj.weight", names::kAttnK},     {"self_attn.v_proj.weight", names::kAttnV},
            {"self_attn.o_proj.weight", names::kAttnOut},   {"self_attn.q_norm.weight", names::kAttnQNorm},
            {"self_attn.k_norm.weight", names::kAttnKNorm}, {"mlp.gate.weight", names::kFfnGateInp},
        };
        static const std::map<std::string, const char*> kHybrid = {
            {"mlp.shared_expert.gate_proj.weight", names::kFfnGateShexp},
            {"mlp.shared_expert.up_proj.weight", names::kFfnUpShexp},
            {"mlp.shared_expert.down_proj.weight", names::kFfnDownShexp},
            {"mlp.shared_expert_gate.weight", names::kFfnGateInpShexp},
        };
        static const std::map<std::string, const char*> kNextn = {
            {"eh_proj.weight", names::kNextnEhProj},
            {"enorm.weight", names::kNextnEnorm},
            {"hnorm.weight", names::kNextnHnorm},
            {"shared_head.norm.weight", names::kNextnSharedHeadNorm},
            {"shared_head.head.weight", names::kNextnSharedHeadHead},
            {"embed_tokens.weight", names::kNextnEmbedTokens},
        };
        if (s.starts_with("self_attn.") && !is_full_attention(layer))
            fail("tensor '" + t.name + "' is an attention tensor, but config.json makes layer " + std::to_string(layer) +
                 " a linear-attention layer");
        if (s.starts_with("linear_attn.") && (!hybrid_ || is_full_attention(layer)))
            fail("tensor '" + t.name + "' is a linear-attention tensor, but config.json makes layer " + std::to_string(layer) +
                 " a full-attention layer");
        if (const auto it = kCommon.find(s); it != kCommon.end())
            return emit_plain(t, names::layer(layer, it->second), norm_op(name));
        if (s == "post_attention_layernorm.weight")
            return emit_plain(t, names::layer(layer, hybrid_ ? names::kPostAttnNorm : names::kFfnNorm), norm_op(name));
        if (dense_) {
            static const std::map<std::string, const char*> kDense = {
                {"mlp.gate_proj.weight", names::kFfnGate},
                {"mlp.up_proj.weight", names::kFfnUp},
                {"mlp.down_proj.weight", names::kFfnDown},
            };
            if (const auto it = kDense.find(s); it != kDense.end()) return emit_plain(t, names::layer(layer, it->second));
            fail("cannot map tensor '" + t.name + "' to a GGUF tensor (a dense qwen3 layer has attention and mlp.*_proj)");
        }
        if (s.starts_with("mlp.experts.")) return map_experts(t, layer, s.substr(12));
        if (hybrid_) {
            if (const auto it = kHybrid.find(s); it != kHybrid.end()) return emit_plain(t, names::layer(layer, it->second));
            if (s.starts_with("linear_attn.")) return map_linear_attention(t, layer, s.substr(12));
            if (mtp)
                if (const auto it = kNextn.find(s); it != kNextn.end())
                    return emit_plain(t, names::layer(layer, it->second), norm_op(name));
        }
        fail("cannot map tensor '" + t.name + "' to a GGUF tensor");
    }

    // experts.{e}.{gate,up,down}_proj.weight (one per expert), or the fused experts.gate_up_proj
    // [E, 2F, H] / experts.down_proj [E, H, F].
    void map_experts(const StTensor& t, int64_t layer, const std::string& s) {
        const int64_t n_exp = cfg_.n_expert;
        if (s == "gate_up_proj" || s == "gate_up_proj.weight") {
            if (t.shape.size() != 3 || t.shape[0] != n_exp || t.shape[1] % 2 != 0)
                fail("tensor '" + t.name + "' has shape " + t.shape_text() + ", expected [" + std::to_string(n_exp) +
                     ", 2 * expert size, hidden]");
            const int64_t ff = t.shape[1] / 2;
            for (int half = 0; half < 2; ++half) {  // gate rows first, then up
                PlannedTensor p;
                p.name = names::layer(layer, half == 0 ? names::kFfnGateExps : names::kFfnUpExps);
                p.shape = {static_cast<uint64_t>(t.shape[2]), static_cast<uint64_t>(ff), static_cast<uint64_t>(n_exp)};
                SourcePiece piece{&t, {}};
                for (int64_t e = 0; e < n_exp; ++e) piece.rows.push_back({e * 2 * ff + half * ff, ff});
                p.pieces.push_back(std::move(piece));
                emit(std::move(p), t.name);
            }
            return;
        }
        if (s == "down_proj" || s == "down_proj.weight") {
            if (t.shape.size() != 3 || t.shape[0] != n_exp)
                fail("tensor '" + t.name + "' has shape " + t.shape_text() + ", expected [" + std::to_string(n_exp) +
                     ", hidden, expert size]");
            return emit_plain(t, names::layer(layer, names::kFfnDownExps));
        }
        // "{e}.{proj}_proj.weight"
        const auto parts = split_dots(s, 3);
        int proj = -1;
        if (parts.size() == 3 && parts[2] == "weight")
            for (int p = 0; p < 3; ++p)
                if (parts[1] == std::string(kProjNames[p]) + "_proj") proj = p;
        if (proj < 0 || !is_decimal(parts[0])) fail("cannot map tensor '" + t.name + "' to a GGUF tensor");
        const int64_t e = std::stoll(parts[0]);
        if (e >= n_exp)
            fail("tensor '" + t.name + "' names expert " + parts[0] + ", but config.json has " + std::to_string(n_exp));
        if (t.shape.size() != 2) fail("tensor '" + t.name + "' has shape " + t.shape_text() + ", expected a matrix");
        ExpertSlots& slots = experts_[layer];
        for (auto& v : slots.by_proj)
            if (v.empty()) v.assign(static_cast<size_t>(n_exp), nullptr);
        const StTensor*& slot = slots.by_proj[proj][static_cast<size_t>(e)];
        if (slot != nullptr) fail("tensor '" + t.name + "' appears twice");
        for (const StTensor* other : slots.by_proj[proj])
            if (other != nullptr && other->shape != t.shape)
                fail("tensor '" + t.name + "' has shape " + t.shape_text() + ", but '" + other->name + "' has " +
                     other->shape_text());
        slot = &t;
        if (++slots.filled < 3 * n_exp) return;
        // All experts of the layer are in: stack each projection into {cols, rows, n_expert}.
        for (int p = 0; p < 3; ++p) {
            const StTensor* first = slots.by_proj[p][0];
            PlannedTensor out;
            out.name = names::layer(layer, kExpsNames[p]);
            out.shape = {static_cast<uint64_t>(first->shape[1]), static_cast<uint64_t>(first->shape[0]),
                         static_cast<uint64_t>(n_exp)};
            for (const StTensor* x : slots.by_proj[p]) out.pieces.push_back({x, {}});
            emit(std::move(out), "model.layers." + std::to_string(layer) + ".mlp.experts.*." + kProjNames[p] + "_proj.weight");
        }
        experts_.erase(layer);
    }

    void map_linear_attention(const StTensor& t, int64_t layer, const std::string& s) {
        const int64_t nk = cfg_.lin_k_heads, nv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
        const int64_t hidden = cfg_.n_embd, key_dim = nk * dk, value_dim = nv * dv;
        const int64_t conv_dim = 2 * key_dim + value_dim;
        const bool next = cfg_.arch == HfArch::Qwen3Next;
        if (s == "A_log" || s == "dt_bias") {
            expect_shape(t, {nv});
            PlannedTensor p;
            p.name = names::layer(layer, s == "A_log" ? names::kSsmA : names::kSsmDtBias);
            p.shape = {static_cast<uint64_t>(nv)};
            p.pieces.push_back({&t, {}});
            if (reorder_v_) p.col_perm = v_order_;
            p.op = s == "A_log" ? ElementOp::NegExp : ElementOp::None;
            return emit(std::move(p), t.name);
        }
        if (s == "conv1d.weight") {
            expect_shape(t, {conv_dim, 1, cfg_.conv_kernel});
            PlannedTensor p;  // [C, 1, K] squeezed to [C, K]: rows are channels
            p.name = names::layer(layer, names::kSsmConv1d);
            p.shape = {static_cast<uint64_t>(cfg_.conv_kernel), static_cast<uint64_t>(conv_dim)};
            SourcePiece piece{&t, {}};
            if (reorder_v_) {
                piece.rows.push_back({0, 2 * key_dim});
                add_head_rows(piece.rows, 2 * key_dim, dv, v_order_);
            }
            p.pieces.push_back(std::move(piece));
            return emit(std::move(p), t.name);
        }
        if (s == "norm.weight") {
            expect_shape(t, {dv});
            return emit_plain(t, names::layer(layer, names::kSsmNorm));
        }
        if (s == "out_proj.weight") {
            expect_shape(t, {hidden, value_dim});
            PlannedTensor p;
            p.name = names::layer(layer, names::kSsmOut);
            p.shape = {static_cast<uint64_t>(value_dim), static_cast<uint64_t>(hidden)};
            p.pieces.push_back({&t, {}});
            if (reorder_v_) {
                p.col_perm.resize(static_cast<size_t>(value_dim));
                for (int64_t n = 0; n < nv; ++n)
                    for (int64_t d = 0; d < dv; ++d)
                        p.col_perm[static_cast<size_t>(n * dv + d)] = v_order_[static_cast<size_t>(n)] * dv + d;
            }
            return emit(std::move(p), t.name);
        }
        if (next && s == "in_proj_qkvz.weight") {
            // Rows grouped per key head: [q (dk) | k (dk) | v (v_per_k * dv) | z (v_per_k * dv)].
            const int64_t vz = v_per_k_ * dv, group = 2 * dk + 2 * vz;
            expect_shape(t, {nk * group, hidden});
            const int64_t offset[4] = {0, dk, 2 * dk, 2 * dk + vz}, length[4] = {dk, dk, vz, vz};
            PlannedTensor qkv, z;
            qkv.name = names::layer(layer, names::kSsmInQkv);
            qkv.shape = {static_cast<uint64_t>(hidden), static_cast<uint64_t>(nk * (2 * dk + vz))};
            z.name = names::layer(layer, names::kSsmInGate);
            z.shape = {static_cast<uint64_t>(hidden), static_cast<uint64_t>(nk * vz)};
            SourcePiece qkv_rows{&t, {}}, z_rows{&t, {}};
            for (int part = 0; part < 3; ++part)
                for (int64_t h = 0; h < nk; ++h) qkv_rows.rows.push_back({h * group + offset[part], length[part]});
            for (int64_t h = 0; h < nk; ++h) z_rows.rows.push_back({h * group + offset[3], length[3]});
            qkv.pieces.push_back(std::move(qkv_rows));
            z.pieces.push_back(std::move(z_rows));
            emit(std::move(qkv), t.name);
            return emit(std::move(z), t.name);
        }
        if (next && s == "in_proj_ba.weight") {
            expect_shape(t, {2 * nv, hidden});
            return emit_plain(t, names::layer(layer, names::kSsmBa));
        }
        if (!next) {
            struct Rows {
                const char* hf;
                const char* gguf;
                int64_t prefix;    // leading rows kept in place (q and k of in_proj_qkv)
                int64_t head_dim;  // rows per value head
            };
            static const Rows kRows[] = {
                {"in_proj_qkv.weight", names::kSsmInQkv, -1, -1},
                {"in_proj_z.weight", names::kSsmInGate, 0, -1},
                {"in_proj_a.weight", names::kSsmAlpha, 0, 1},
                {"in_proj_b.weight", names::kSsmBeta, 0, 1},
            };
            for (const Rows& r : kRows) {
                if (s != r.hf) continue;
                const int64_t prefix = r.prefix < 0 ? 2 * key_dim : r.prefix;
                const int64_t head_dim = r.head_dim < 0 ? dv : r.head_dim;
                expect_shape(t, {prefix + nv * head_dim, hidden});
                PlannedTensor p;
                p.name = names::layer(layer, r.gguf);
                p.shape = {static_cast<uint64_t>(hidden), static_cast<uint64_t>(prefix + nv * head_dim)};
                SourcePiece piece{&t, {}};
                if (reorder_v_) {
                    if (prefix > 0) piece.rows.push_back({0, prefix});
                    add_head_rows(piece.rows, prefix, head_dim, v_order_);
                }
                p.pieces.push_back(std::move(piece));
                return emit(std::move(p), t.name);
            }
        }
        fail("cannot map tensor '" + t.name + "' to a GGUF tensor");
    }

    // ---- completeness ----

    // Every tensor the loaders need, named by the checkpoint tensor that makes it.
    void check_complete() const {
        std::vector<std::pair<std::string, std::string>> want;  // GGUF name, checkpoint name
        want.emplace_back(names::kTokenEmbd, "model.embed_tokens.weight");
        want.emplace_back(names::kOutputNorm, "model.norm.weight");
        if (!cfg_.tie_word_embeddings) want.emplace_back(names::kOutput, "lm_head.weight");
        const bool shared_expert = hybrid_ && cfg_.find_int({"shared_expert_intermediate_size"}).value_or(0) > 0;
        for (int64_t il = 0; il < n_blocks(); ++il) {
            const std::string hf = "model.layers." + std::to_string(il) + ".";
            auto need = [&](const char* gguf, const std::string& hf_suffix) {
                want.emplace_back(names::layer(il, gguf), hf + hf_suffix);
            };
            need(names::kAttnNorm, "input_layernorm.weight");
            need(hybrid_ ? names::kPostAttnNorm : names::kFfnNorm, "post_attention_layernorm.weight");
            if (is_full_attention(il)) {
                need(names::kAttnQ, "self_attn.q_proj.weight");
                need(names::kAttnK, "self_attn.k_proj.weight");
                need(names::kAttnV, "self_attn.v_proj.weight");
                need(names::kAttnOut, "self_attn.o_proj.weight");
                need(names::kAttnQNorm, "self_attn.q_norm.weight");
                need(names::kAttnKNorm, "self_attn.k_norm.weight");
            } else {
                const bool next = cfg_.arch == HfArch::Qwen3Next;
                need(names::kSsmA, "linear_attn.A_log");
                need(names::kSsmConv1d, "linear_attn.conv1d.weight");
                need(names::kSsmDtBias, "linear_attn.dt_bias");
                need(names::kSsmInQkv, next ? "linear_attn.in_proj_qkvz.weight" : "linear_attn.in_proj_qkv.weight");
                need(names::kSsmInGate, next ? "linear_attn.in_proj_qkvz.weight" : "linear_attn.in_proj_z.weight");
                if (next) {
                    need(names::kSsmBa, "linear_attn.in_proj_ba.weight");
                } else {
                    need(names::kSsmAlpha, "linear_attn.in_proj_a.weight");
                    need(names::kSsmBeta, "linear_attn.in_proj_b.weight");
                }
                need(names::kSsmNorm, "linear_attn.norm.weight");
                need(names::kSsmOut, "linear_attn.out_proj.weight");
            }
            if (dense_) {
                need(names::kFfnGate, "mlp.gate_proj.weight");
                need(names::kFfnUp, "mlp.up_proj.weight");
                need(names::kFfnDown, "mlp.down_proj.weight");
                continue;
            }
            need(names::kFfnGateInp, "mlp.gate.weight");
            need(names::kFfnGateExps, "mlp.experts.0.gate_proj.weight");
            need(names::kFfnUpExps, "mlp.experts.0.up_proj.weight");
            need(names::kFfnDownExps, "mlp.experts.0.down_proj.weight");
            if (shared_expert) {
                need(names::kFfnGateShexp, "mlp.shared_expert.gate_proj.weight");
                need(names::kFfnUpShexp, "mlp.shared_expert.up_proj.weight");
                need(names::kFfnDownShexp, "mlp.shared_expert.down_proj.weight");
                need(names::kFfnGateInpShexp, "mlp.shared_expert_gate.weight");
            }
            if (il >= cfg_.n_layer) {
                const std::string mtp = "mtp.";
                want.emplace_back(names::layer(il, names::kNextnEhProj), mtp + "fc.weight");
                want.emplace_back(names::layer(il, names::kNextnEnorm), mtp + "pre_fc_norm_embedding.weight");
                want.emplace_back(names::layer(il, names::kNextnHnorm), mtp + "pre_fc_norm_hidden.weight");
            }
        }
        for (const auto& [gguf, hf] : want)
            if (!names_.count(gguf)) fail("tensor '" + hf + "' is missing (needed for " + gguf + ")");
    }

    const HfConfig& cfg_;
    const Checkpoint& ck_;
    const PlanOptions& opts_;
    std::string where_;
    bool hybrid_ = false;        // qwen3next / qwen35moe
    bool dense_ = false;         // qwen3: one mlp a layer, no experts
    bool zero_centred_ = false;  // RMSNorm weights stored as w, used as 1 + w
    bool reorder_v_ = false;     // qwen35moe with more value heads than key heads
    int64_t v_per_k_ = 1;
    std::vector<int64_t> v_order_;
    TensorPlan plan_;
    std::set<std::string> names_;
    std::map<int64_t, ExpertSlots> experts_;
};

}  // namespace

TensorPlan plan_tensors(const HfConfig& cfg, const Checkpoint& ck, const PlanOptions& opts) {
    return Planner(cfg, ck, opts).run();
}

}  // namespace strata::convert
