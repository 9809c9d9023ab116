// qwen35moe: Qwen3.5 MoE (text). The qwen3next stack (see qwen3next.cpp) with two GGUF layout
// differences in the Gated DeltaNet layers:
//  - b and alpha are separate projections, ssm_beta and ssm_alpha, one row per value head;
//  - the converter reorders every value-head-indexed tensor (v rows of attn_qkv and of the conv,
//    attn_gate, ssm_beta/alpha, ssm_a, ssm_dt.bias, the ssm_out columns) from the checkpoint's
//    grouped order to tiled order, so value head h reads key head h % n_k.
// RoPE: Qwen3.5 uses interleaved M-RoPE (rope.dimension_sections). For text the three position
// streams are equal, so every rotated pair turns by the same angle as plain NeoX RoPE over n_rot
// dims; the sections only matter once images bring distinct positions.
#include "model/architecture.h"
#include "model/gated_delta_net.h"

namespace strata::model {

std::unique_ptr<Architecture> make_hybrid_gdn_moe(const GdnLayout& layout);  // qwen3next.cpp

std::unique_ptr<Architecture> make_qwen35moe() {
    GdnLayout layout;
    layout.combined_ba = false;
    layout.key_heads = backend::KeyHeadMap::Tiled;
    return make_hybrid_gdn_moe(layout);
}

}  // namespace strata::model
