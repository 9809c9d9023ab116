// The central table of architectures, the weight binder, and the configuration keys the
// architectures share.
#include "model/architecture.h"

#include <algorithm>

#include "gguf/gguf.h"
#include "model/names.h"
#include "util/error.h"

namespace strata::model {

std::unique_ptr<Architecture> make_qwen3moe();
std::unique_ptr<Architecture> make_qwen3next();
std::unique_ptr<Architecture> make_qwen35moe();

namespace {

struct ArchEntry {
    const char* name;
    Arch arch;
    std::unique_ptr<Architecture> (*make)();
};

const ArchEntry kArchitectures[] = {
    {"qwen3moe", Arch::Qwen3Moe, make_qwen3moe},
    {"qwen3next", Arch::Qwen3Next, make_qwen3next},
    {"qwen35moe", Arch::Qwen35Moe, make_qwen35moe},
};

std::string shape_text(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

}  // namespace

const char* arch_name(Arch a) {
    for (const auto& e : kArchitectures)
        if (e.arch == a) return e.name;
    return "?";
}

std::unique_ptr<Architecture> make_architecture(const std::string& name) {
    for (const auto& e : kArchitectures)
        if (name == e.name) return e.make();
    std::string list;
    for (const auto& e : kArchitectures) list += (list.empty() ? "" : ", ") + std::string(e.name);
    throw Error("architecture '" + name + "' is not supported (supported: " + list + ")");
}

std::vector<std::string> supported_architectures() {
    std::vector<std::string> out;
    for (const auto& e : kArchitectures) out.push_back(e.name);
    return out;
}

int64_t ModelConfig::n_attention_layers() const {
    return std::count(layers.begin(), layers.end(), LayerKind::Attention);
}
int64_t ModelConfig::n_gdn_layers() const { return std::count(layers.begin(), layers.end(), LayerKind::GatedDeltaNet); }

void load_common_config(const gguf::File& f, ModelConfig& cfg) {
    cfg.arch_name = f.architecture();
    for (const auto& e : kArchitectures)
        if (cfg.arch_name == e.name) cfg.arch = e.arch;
    const std::string& a = cfg.arch_name;
    auto u = [&](const char* k) { return static_cast<int64_t>(f.get_u64(names::key(a, k))); };
    auto opt_u = [&](const char* k, int64_t def) {
        const auto v = f.opt_u64(names::key(a, k));
        return v ? static_cast<int64_t>(*v) : def;
    };
    // MTP (next-token-prediction) blocks are stored as the last blocks; the forward stops before
    // them (speculative decoding will use them).
    cfg.n_mtp_layers = opt_u(names::kNextnPredictLayers, 0);
    cfg.n_layer = u(names::kBlockCount) - cfg.n_mtp_layers;
    cfg.n_embd = u(names::kEmbeddingLength);
    cfg.n_ctx_train = u(names::kContextLength);
    cfg.n_head = u(names::kHeadCount);
    cfg.n_head_kv = opt_u(names::kHeadCountKv, cfg.n_head);
    cfg.head_dim_k = opt_u(names::kKeyLength, cfg.n_head > 0 ? cfg.n_embd / cfg.n_head : 0);
    cfg.head_dim_v = opt_u(names::kValueLength, cfg.head_dim_k);
    cfg.rms_eps = f.get_f32(names::key(a, names::kRmsEps));
    cfg.rope_theta = f.opt_f32(names::key(a, names::kRopeFreqBase)).value_or(10000.0f);
    cfg.n_rot = opt_u(names::kRopeDimCount, cfg.head_dim_k);
    if (f.has(names::key(a, names::kRopeSections))) {
        const auto s = f.get_ints(names::key(a, names::kRopeSections));
        for (size_t i = 0; i < s.size() && i < cfg.rope_sections.size(); ++i) cfg.rope_sections[i] = static_cast<int32_t>(s[i]);
    }
    cfg.n_expert = u(names::kExpertCount);
    cfg.n_expert_used = u(names::kExpertUsedCount);
    cfg.n_ff_exp = u(names::kExpertFfLength);
    cfg.n_ff_shexp = opt_u(names::kExpertSharedFfLength, 0);
    // The vocabulary is the embedding's row count (the tokenizer may list fewer tokens).
    const gguf::TensorInfo& embd = f.tensor(names::kTokenEmbd);
    cfg.n_vocab = embd.shape.size() >= 2 ? static_cast<int64_t>(embd.shape[1]) : 0;

    const std::string file = f.path().string();
    auto check = [&](bool ok, const std::string& what) {
        if (!ok) throw Error(file + ": " + what);
    };
    check(cfg.n_layer > 0 && cfg.n_layer <= 4096, "block_count " + std::to_string(cfg.n_layer) + " is out of range");
    check(cfg.n_embd > 0 && cfg.n_head > 0 && cfg.n_head_kv > 0, "embedding length and head counts must be positive");
    check(cfg.n_head % cfg.n_head_kv == 0, "head_count " + std::to_string(cfg.n_head) + " is not a multiple of head_count_kv " +
                                               std::to_string(cfg.n_head_kv));
    check(cfg.head_dim_k > 0 && cfg.head_dim_v > 0, "attention key/value lengths must be positive");
    check(cfg.n_rot > 0 && cfg.n_rot <= cfg.head_dim_k && cfg.n_rot % 2 == 0,
          "rope.dimension_count " + std::to_string(cfg.n_rot) + " must be even and at most the head size");
    check(cfg.n_expert > 0 && cfg.n_expert_used > 0 && cfg.n_expert_used <= cfg.n_expert,
          "expert_used_count " + std::to_string(cfg.n_expert_used) + " must be between 1 and expert_count " +
              std::to_string(cfg.n_expert));
    check(cfg.n_ff_exp > 0, "expert_feed_forward_length must be positive");
    check(cfg.rms_eps > 0, "layer_norm_rms_epsilon must be positive");
}

Weight WeightBinder::require(const std::string& name, std::vector<int64_t> shape) { return bind(name, shape, true); }
Weight WeightBinder::optional(const std::string& name, std::vector<int64_t> shape) { return bind(name, shape, false); }

Weight WeightBinder::bind(const std::string& name, const std::vector<int64_t>& shape, bool required) {
    if (file_ == nullptr) {
        for (const Spec& s : specs_)
            if (s.name == name) return {};  // asked twice (tied output): recorded once
        specs_.push_back({name, shape, required});
        Weight w;
        for (size_t i = 0; i < shape.size() && i < 4; ++i) w.ne[i] = shape[i];
        return w;
    }
    const gguf::File& file = *file_;
    const gguf::TensorInfo* t = file.find_tensor(name);
    if (t == nullptr) {
        if (required) throw Error(file.path().string() + ": tensor '" + name + "' is missing");
        return {};
    }
    // Compare shapes ignoring trailing 1s ([32, 1] is a [32] vector).
    std::vector<int64_t> got(t->shape.begin(), t->shape.end());
    std::vector<int64_t> want = shape;
    while (got.size() > 1 && got.back() == 1) got.pop_back();
    while (want.size() > 1 && want.back() == 1) want.pop_back();
    if (got != want)
        throw Error(file.path().string() + ": tensor '" + name + "' has shape " + shape_text(got) + ", expected " +
                    shape_text(want));
    const bool is_vector = want.size() == 1;
    if (is_vector ? t->type != quant::Type::F32 : !backend_->supports(t->type))
        throw Error(file.path().string() + ": tensor '" + name + "' has type " + quant::type_name(t->type) +
                    (is_vector ? ", expected f32" : std::string(", which the ") + backend_->name() + " backend has no kernel for"));
    Weight w;
    w.info = t;
    w.type = t->type;
    w.data = t->data;
    for (size_t i = 0; i < t->shape.size() && i < 4; ++i) w.ne[i] = static_cast<int64_t>(t->shape[i]);
    w.row_bytes = static_cast<size_t>(*quant::row_bytes(t->type, t->shape[0]));
    bool seen = false;
    for (const Weight& b : bound_) seen = seen || b.data == w.data;
    if (!seen) {
        bytes_ += t->n_bytes;
        bound_.push_back(w);
    }
    return w;
}

}  // namespace strata::model
