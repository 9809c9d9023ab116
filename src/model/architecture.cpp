// The central table of architectures, reading a file's configuration through it, the checks
// the architectures share, and the weight binder.
#include "model/architecture.h"

#include <algorithm>
#include <cmath>

#include "gguf/gguf.h"
#include "model/names.h"
#include "util/error.h"

namespace strata::model {

// Each architecture's file.
const ArchitectureInfo& qwen3moe_architecture();
const ArchitectureInfo& qwen3next_architecture();
const ArchitectureInfo& qwen35moe_architecture();
const ArchitectureInfo& qwen3_architecture();

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

}  // namespace

std::span<const ArchitectureInfo* const> architectures() {
    static const ArchitectureInfo* const kArchitectures[] = {
        &qwen3moe_architecture(),
        &qwen3next_architecture(),
        &qwen35moe_architecture(),
        &qwen3_architecture(),
    };
    return kArchitectures;
}

const ArchitectureInfo& architecture_info(const std::string& name) {
    for (const ArchitectureInfo* a : architectures())
        if (name == a->name) return *a;
    std::string list;
    for (const ArchitectureInfo* a : architectures()) list += (list.empty() ? "" : ", ") + std::string(a->name);
    throw Error("architecture '" + name + "' is not supported (supported: " + list + ")");
}

std::unique_ptr<Architecture> make_architecture(const std::string& name) { return architecture_info(name).make(); }

int64_t ModelConfig::n_attention_layers() const { return std::count(layers.begin(), layers.end(), LayerKind::Attention); }
int64_t ModelConfig::n_gdn_layers() const { return std::count(layers.begin(), layers.end(), LayerKind::GatedDeltaNet); }

ModelConfig read_config(const gguf::File& f) {
    const ArchitectureInfo& info = architecture_info(f.architecture());
    ModelConfig cfg;
    cfg.arch = info.arch;
    cfg.arch_name = info.name;
    read_config_keys(info.keys, f, cfg);
    // The vocabulary is the embedding's row count (the tokenizer may list fewer tokens).
    const gguf::TensorInfo& embd = f.tensor(names::kTokenEmbd);
    cfg.n_vocab = embd.shape.size() >= 2 ? static_cast<int64_t>(embd.shape[1]) : 0;
    info.check(cfg, f.path().string());
    info.complete(cfg);
    return cfg;
}

void check_common_config(const ModelConfig& cfg, const std::string& where, bool moe) {
    auto check = [&](bool ok, const std::string& what) {
        if (!ok) throw Error(where + ": " + what);
    };
    check(cfg.n_layer > 0 && cfg.n_layer <= 4096, "block_count " + std::to_string(cfg.n_layer) + " is out of range");
    check(cfg.n_embd > 0 && cfg.n_head > 0 && cfg.n_head_kv > 0, "embedding length and head counts must be positive");
    check(cfg.n_head % cfg.n_head_kv == 0,
          "head_count " + std::to_string(cfg.n_head) + " is not a multiple of head_count_kv " + std::to_string(cfg.n_head_kv));
    check(cfg.head_dim_k > 0 && cfg.head_dim_v > 0, "attention key/value lengths must be positive");
    check(cfg.n_rot > 0 && cfg.n_rot <= cfg.head_dim_k && cfg.n_rot % 2 == 0,
          "rope.dimension_count " + std::to_string(cfg.n_rot) + " must be even and at most the head size");
    if (moe) {
        check(cfg.n_expert > 0 && cfg.n_expert_used > 0 && cfg.n_expert_used <= cfg.n_expert,
              "expert_used_count " + std::to_string(cfg.n_expert_used) + " must be between 1 and expert_count " +
                  std::to_string(cfg.n_expert));
        check(cfg.n_ff_exp > 0, "expert_feed_forward_length must be positive");
    }
    check(cfg.rms_eps > 0 && std::isfinite(cfg.rms_eps), "layer_norm_rms_epsilon must be positive");
    // RoPE's frequencies are theta^(-2i/n_rot): a base of 0, 1, negative or not finite gives
    // NaN or constant rotations, and every request would fail or babble after the load.
    check(cfg.rope_theta > 1.0f && std::isfinite(cfg.rope_theta),
          "rope.freq_base " + std::to_string(cfg.rope_theta) + " must be a finite number above 1");
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
        throw Error(
            file.path().string() + ": tensor '" + name + "' has type " + quant::type_name(t->type) +
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
