// Quantisation mixes: which type each tensor of a model gets when a whole model is quantised
// (`strata quantize`, `strata make-model --type`). A mix names a base type plus rules:
//   - never quantised (kept f32): vectors (norm scales, biases, ssm_a, dt bias), the routers
//     (ffn_gate_inp, ffn_gate_inp_shexp) and the GDN conv filter (ssm_conv1d) — small, and their
//     precision decides which experts run;
//   - the output head (token_embd when tied) gets Q6_K in the k/i-quant mixes;
//   - *_M mixes give attn_v and the FFN down projections Q6_K in the first and last eighth of
//     the layers and every third layer between (where quantisation error hurts most);
//   - a row length that is not a whole number of the chosen type's blocks falls back to a
//     32-value type of at least the same size (Q4_K, IQ4_XS -> IQ4_NL; Q5_K, Q6_K -> Q8_0), or to
//     f16 when even that does not fit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "quant/types.h"

namespace strata::model_tools {

struct QuantMix {
    std::string name;    // "q4_k_m"
    quant::Type base;    // the type most weights get
    bool more_bits_mid;  // *_M: attn_v / ffn_down upgraded in some layers
    uint32_t file_type;  // general.file_type (the ecosystem's LLAMA_FTYPE numbering)
};

std::optional<QuantMix> quant_mix_from_name(const std::string& name);
std::vector<std::string> quant_mix_names();

// Type for one tensor under the mix. shape: ne0 first. src_type: its current type (returned
// unchanged for tensors that stay as they are).
quant::Type tensor_type_for(const QuantMix& mix, const std::string& name, const std::vector<int64_t>& shape, int64_t n_layer,
                            bool tied_output, quant::Type src_type);

}  // namespace strata::model_tools
