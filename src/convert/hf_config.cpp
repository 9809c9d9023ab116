#include "convert/hf_config.h"

#include <cmath>
#include <fstream>

#include "model/architecture.h"
#include "model/names.h"
#include "util/error.h"

namespace strata::convert {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const std::vector<SupportedArch>& supported_hf_architectures() {
    static const std::vector<SupportedArch> list = {
        {"Qwen3ForCausalLM", HfArch::Qwen3, model::names::kArchQwen3},
        {"Qwen3MoeForCausalLM", HfArch::Qwen3Moe, model::names::kArchQwen3Moe},
        {"Qwen3NextForCausalLM", HfArch::Qwen3Next, model::names::kArchQwen3Next},
        {"Qwen3_5MoeForCausalLM", HfArch::Qwen35Moe, model::names::kArchQwen35Moe},
        {"Qwen3_5MoeForConditionalGeneration", HfArch::Qwen35Moe, model::names::kArchQwen35Moe},
    };
    return list;
}

const ojson* HfConfig::find(std::initializer_list<const char*> keys) const {
    for (const char* k : keys) {
        const auto it = hparams.find(k);
        if (it != hparams.end() && !it->is_null()) return &*it;
    }
    return nullptr;
}

std::optional<double> HfConfig::find_number(std::initializer_list<const char*> keys) const {
    const ojson* v = find(keys);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) throw Error(config_path.string() + ": '" + std::string(*keys.begin()) + "' is not a number");
    return v->get<double>();
}

std::optional<int64_t> HfConfig::find_int(std::initializer_list<const char*> keys) const {
    const ojson* v = find(keys);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) {
        const double d = v->get<double>();
        if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9e15) return static_cast<int64_t>(d);
    }
    throw Error(config_path.string() + ": '" + std::string(*keys.begin()) + "' is not an integer");
}

namespace {

std::string supported_list() {
    std::string s;
    for (const auto& a : supported_hf_architectures()) s += (s.empty() ? "" : ", ") + std::string(a.hf_name);
    return s;
}

// The RoPE parameters as the converter sees them: rope_parameters (transformers 5) or
// rope_scaling (4.x), with the top-level theta / partial factor mirrored in when absent.
ojson rope_parameters(const HfConfig& c) {
    ojson rope = ojson::object();
    if (const ojson* p = c.find({"rope_parameters"}); p != nullptr && p->is_object()) rope = *p;
    else if (const ojson* s = c.find({"rope_scaling"}); s != nullptr && s->is_object()) rope = *s;
    if (rope.contains("full_attention") || rope.contains("sliding_attention")) return rope;
    auto mirror = [&](const char* key, const ojson* v) {
        if (v != nullptr && !rope.contains(key)) rope[key] = *v;
    };
    mirror("rope_theta",
           c.find({"global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"}));
    if (!rope.contains("rope_type") && rope.contains("type")) rope["rope_type"] = rope["type"];
    mirror("partial_rotary_factor", c.find({"partial_rotary_factor", "rope_pct", "rope_percent"}));
    mirror("original_max_position_embeddings", c.find({"original_max_position_embeddings"}));
    return rope;
}

}  // namespace

HfConfig load_hf_config(const fs::path& dir) {
    HfConfig c;
    c.dir = dir;
    c.config_path = dir / "config.json";
    const std::string where = c.config_path.string();
    auto fail = [&where](const std::string& what) { return Error(where + ": " + what); };
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error(dir.string() + ": not a directory (expected a transformers checkpoint)");
    if (!fs::is_regular_file(c.config_path, ec)) throw fail("not found (is this a transformers checkpoint directory?)");
    ojson top;
    {
        std::ifstream in(c.config_path);
        try {
            top = ojson::parse(in);
        } catch (const nlohmann::json::exception& e) {
            throw fail(std::string("not valid JSON: ") + e.what());
        }
    }
    if (!top.is_object()) throw fail("not a JSON object");

    // Architecture: the text_config's own list wins (as for the converter's text models).
    auto first_arch = [](const ojson& j) -> std::string {
        const auto it = j.find("architectures");
        if (it == j.end() || !it->is_array() || it->empty() || !(*it)[0].is_string()) return "";
        return (*it)[0].get<std::string>();
    };
    c.hf_arch = first_arch(top);
    const auto tc = top.find("text_config");
    const bool has_text_config = tc != top.end() && tc->is_object();
    if (has_text_config && !first_arch(*tc).empty()) c.hf_arch = first_arch(*tc);
    if (c.hf_arch.empty()) throw fail("no 'architectures' entry: cannot tell the model architecture");
    bool known = false;
    for (const auto& a : supported_hf_architectures()) {
        if (c.hf_arch == a.hf_name) {
            c.arch = a.arch;
            c.gguf_arch = a.gguf_name;
            known = true;
        }
    }
    if (!known) throw fail("architecture '" + c.hf_arch + "' is not supported (supported: " + supported_list() + ")");
    c.multimodal = c.hf_arch.ends_with("ForConditionalGeneration");

    // text_config merged over the top level: existing keys keep their place, new ones follow.
    c.hparams = top;
    if (has_text_config)
        for (auto it = tc->begin(); it != tc->end(); ++it) c.hparams[it.key()] = it.value();
    c.rope = rope_parameters(c);
    if (const ojson* q = c.find({"quantization_config"}); q != nullptr && q->is_object()) {
        const auto m = q->find("quant_method");
        const std::string method = m != q->end() && m->is_string() ? m->get<std::string>() : "?";
        throw fail("quantized checkpoints (quantization_config: " + method +
                   ") are not supported; convert the checkpoint's bf16/f16/f32 release");
    }

    auto need = [&](std::initializer_list<const char*> keys) {
        const auto v = c.find_int(keys);
        if (!v) throw fail("missing '" + std::string(*keys.begin()) + "'");
        if (*v <= 0 || *v > (int64_t{1} << 32))
            throw fail("'" + std::string(*keys.begin()) + "' is " + std::to_string(*v) + ", expected a positive size");
        return *v;
    };
    c.n_layer = need({"num_hidden_layers", "n_layers", "n_layer", "num_layers"});
    c.n_embd = need({"hidden_size", "n_embd", "dim"});
    c.n_head = need({"num_attention_heads", "n_head", "n_heads"});
    c.n_head_kv = c.find_int({"num_key_value_heads", "n_kv_heads"}).value_or(c.n_head);
    c.head_dim = c.find_int({"head_dim"}).value_or(c.n_embd / c.n_head);
    if (c.n_head_kv <= 0 || c.head_dim <= 0) throw fail("key/value head count and head_dim must be positive");
    c.n_vocab = need({"vocab_size"});
    if (c.arch != HfArch::Qwen3) {
        c.n_expert = need({"num_local_experts", "num_experts", "n_routed_experts"});
        c.n_expert_used = need({"num_experts_per_tok", "num_experts_per_token", "top_k_experts"});
    } else {
        need({"intermediate_size"});
    }
    if (c.n_expert_used > c.n_expert)
        throw fail("num_experts_per_tok " + std::to_string(c.n_expert_used) + " exceeds the expert count " +
                   std::to_string(c.n_expert));
    if (const ojson* t = c.find({"tie_word_embeddings"}); t != nullptr && t->is_boolean()) c.tie_word_embeddings = t->get<bool>();
    c.mtp_layers_in_config = c.find_int({"mtp_num_hidden_layers"}).value_or(0);

    // Which layers are full attention, by the architecture's own rule (ArchitectureInfo::complete)
    // for an interval: the only thing GGUF records.
    const model::ArchitectureInfo& info = model::architecture_info(c.gguf_arch);
    auto full_attention_for = [&](int64_t interval) {
        model::ModelConfig m;
        m.n_layer = c.n_layer;
        m.full_attention_interval = interval;
        info.complete(m);
        std::vector<bool> full;
        for (const model::LayerKind k : m.layers) full.push_back(k == model::LayerKind::Attention);
        return full;
    };
    if (!is_hybrid(c.arch)) {
        c.full_attention = full_attention_for(0);
        return c;
    }

    c.lin_k_heads = need({"linear_num_key_heads"});
    c.lin_v_heads = need({"linear_num_value_heads"});
    c.lin_k_dim = need({"linear_key_head_dim"});
    c.lin_v_dim = need({"linear_value_head_dim"});
    c.conv_kernel = need({"linear_conv_kernel_dim"});
    if (c.lin_v_heads % c.lin_k_heads != 0)
        throw fail("linear_num_value_heads " + std::to_string(c.lin_v_heads) + " is not a multiple of linear_num_key_heads " +
                   std::to_string(c.lin_k_heads));

    // layer_types must follow the rule for some interval.
    int64_t interval = c.find_int({"full_attention_interval"}).value_or(4);
    if (interval <= 0) throw fail("full_attention_interval must be positive");
    const ojson* types = c.find({"layer_types"});
    if (types != nullptr) {
        if (!types->is_array() || static_cast<int64_t>(types->size()) != c.n_layer)
            throw fail("layer_types must list one entry per layer (" + std::to_string(c.n_layer) + ")");
        std::vector<bool> full;
        for (const auto& t : *types) {
            if (!t.is_string()) throw fail("layer_types entries must be strings");
            const std::string s = t.get<std::string>();
            if (s != "full_attention" && s != "linear_attention")
                throw fail("layer_types entry '" + s + "' is neither full_attention nor linear_attention");
            full.push_back(s == "full_attention");
        }
        auto matches = [&](int64_t k) { return full == full_attention_for(k); };
        if (!matches(interval)) {
            // Else the interval that the first full-attention layer ends the first period of.
            int64_t first_full = -1;
            for (int64_t i = 0; i < c.n_layer && first_full < 0; ++i)
                if (full[static_cast<size_t>(i)]) first_full = i;
            if (first_full < 0 || !matches(first_full + 1))
                throw fail("layer_types is not a regular pattern (every Nth layer full attention), which GGUF cannot record");
            interval = first_full + 1;
        }
    }
    c.full_attention_interval = interval;
    c.full_attention = full_attention_for(interval);
    return c;
}

}  // namespace strata::convert
