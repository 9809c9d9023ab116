// A transformers checkpoint's config.json, read the way the ecosystem converter reads it: the
// architecture from "architectures", a multimodal model's text_config merged over the top level,
// the RoPE parameters from rope_parameters (or the older rope_scaling + rope_theta).
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strata::convert {

enum class HfArch { Qwen3, Qwen3Moe, Qwen3Next, Qwen35Moe };

// qwen3next / qwen35moe: Gated DeltaNet layers, a shared expert, MTP layers.
inline bool is_hybrid(HfArch a) { return a == HfArch::Qwen3Next || a == HfArch::Qwen35Moe; }

struct HfConfig {
    std::filesystem::path dir;
    std::filesystem::path config_path;  // dir / config.json, for messages
    std::string hf_arch;                // architectures[0], e.g. "Qwen3NextForCausalLM"
    HfArch arch = HfArch::Qwen3Moe;
    std::string gguf_arch;           // "qwen3", "qwen3moe", "qwen3next", "qwen35moe"
    bool multimodal = false;         // a ...ForConditionalGeneration: text tower only
    nlohmann::ordered_json hparams;  // top level with text_config merged over it
    nlohmann::ordered_json rope;     // rope_parameters with rope_theta etc. mirrored in

    // Typed fields the tensor mapping needs (checked positive where required).
    int64_t n_layer = 0;        // num_hidden_layers (MTP layers not included)
    int64_t n_embd = 0;         // hidden_size
    int64_t n_head = 0;         // num_attention_heads
    int64_t n_head_kv = 0;      // num_key_value_heads
    int64_t head_dim = 0;       // head_dim, else hidden_size / num_attention_heads
    int64_t n_vocab = 0;        // vocab_size
    int64_t n_expert = 0;       // num_local_experts / num_experts (0: dense qwen3)
    int64_t n_expert_used = 0;  // num_experts_per_tok
    bool tie_word_embeddings = false;
    // Gated DeltaNet (qwen3next, qwen35moe).
    int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 0;
    // Per layer: true for full (softmax) attention, false for Gated DeltaNet. All true for qwen3(moe).
    std::vector<bool> full_attention;
    int64_t full_attention_interval = 0;  // every Nth layer is full attention (hybrids)
    int64_t mtp_layers_in_config = 0;     // mtp_num_hidden_layers, 0 when absent

    // The first of keys present (and not null) in hparams; nullptr when none.
    const nlohmann::ordered_json* find(std::initializer_list<const char*> keys) const;
    std::optional<int64_t> find_int(std::initializer_list<const char*> keys) const;
    std::optional<double> find_number(std::initializer_list<const char*> keys) const;
};

// Architectures we convert: HF class names -> GGUF names.
struct SupportedArch {
    const char* hf_name;
    HfArch arch;
    const char* gguf_name;
};
const std::vector<SupportedArch>& supported_hf_architectures();

// Reads DIR/config.json. Throws strata::Error with one line naming config.json: missing file,
// bad JSON, no architectures, an unsupported architecture (named, with the supported list), a
// missing or non-positive size, a layer_types list that is not a regular hybrid pattern.
HfConfig load_hf_config(const std::filesystem::path& dir);

}  // namespace strata::convert
