// The model maker: a random-weight GGUF of any supported architecture and geometry, written
// tensor by tensor (a 20 GB model needs a few MB of RAM). It makes the embedded default model
// of `make demo` and the models benchmarks use.
//
// The tensors written are exactly those the architecture's loader binds (recorded through
// WeightBinder), so a made model always loads. With router_skew, the model is first made narrow
// (beside OUT, removed after) and run over a few tokens on the CPU to calibrate the routers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/config.h"

namespace strata::model_tools {

struct MakeModelOptions {
    std::string arch = "qwen3moe";
    std::string preset = "tiny";  // see model_presets()
    // Geometry overrides (unset: the preset's value).
    std::optional<int64_t> layers, embd, heads, kv_heads, head_dim, experts, experts_used, ff_exp, ff_shexp, ctx;
    std::string type = "q8_0";          // a quantisation mix (quant_mix.h)
    std::string tokenizer = "builtin";  // "builtin" (a byte-level vocabulary of our own), a GGUF to copy it
                                        // from, or a transformers tokenizer folder (tokenizer.json, ...)
    std::string chat_template_file;     // replaces the tokenizer's chat template when set
    bool untied = false;                // separate output.weight
    float eos_bias = 0;                 // qwen3moe: make eos likely everywhere (replies end by themselves; see make_model.cpp)
    // MoE: a Zipf exponent for expert popularity (0: off). Every router gets a bias, read from a
    // constant residual feature, that makes the expert of popularity rank r (a per-layer random
    // order) be picked about in proportion to r^-S (see make_model.cpp).
    float router_skew = 0;
    uint64_t seed = 1;
    // How quantised weights are made: "quantize" (normal values through the real quantiser,
    // slow for huge models) or "blocks" (random valid blocks: random codes, sane scales). "auto"
    // picks blocks above a billion parameters.
    std::string init = "auto";
    int threads = 2;
    std::function<void(uint64_t done, uint64_t total, const std::string& tensor)> progress;
};

// The presets live with their architectures (ArchitectureInfo::presets, in each architecture's
// file). This lists them all as `make-model --help` does: every architecture's tiny test model
// first, then the real geometries, in architecture-table order.
struct PresetListing {
    const char* arch;
    const model::ModelPreset* preset;
};
std::vector<PresetListing> model_presets();

// Builds the configuration from arch + preset + overrides, checked.
model::ModelConfig make_model_config(const MakeModelOptions& o, int64_t n_vocab);

// Writes the model; returns the number of parameters.
uint64_t make_model(const MakeModelOptions& o, const std::filesystem::path& out);

}  // namespace strata::model_tools
