// Which GGUF tensors a Qwen MoE checkpoint becomes, and how each is made from the safetensors
// tensors: renames, row selections (splits, reorders, expert stacking), column permutations and
// element-wise transforms. Planning reads no tensor data; the converter streams each planned
// tensor row-chunk by row-chunk (convert.cpp).
//
// The plan reproduces the ecosystem converter (convert_hf_to_gguf.py): the same names, shapes,
// order, transforms. Per architecture:
//
// all three   model.embed_tokens -> token_embd, model.norm -> output_norm, lm_head -> output
//             (absent when tied), per layer input_layernorm -> attn_norm, self_attn.{q,k,v,o}_proj
//             -> attn_{q,k,v,output}, self_attn.{q,k}_norm -> attn_{q,k}_norm, mlp.gate ->
//             ffn_gate_inp; experts.{e}.{gate,up,down}_proj stacked into 3-D ffn_*_exps
//             {cols, rows, n_expert} (also from fused experts.gate_up_proj [E, 2F, H] split in
//             halves, and experts.down_proj [E, H, F]).
// qwen3moe    post_attention_layernorm -> ffn_norm.
// qwen3next   post_attention_layernorm -> post_attention_norm; every RMSNorm weight except
//             linear_attn.norm is zero-centred in the checkpoint and stored as 1 + w;
//             mlp.shared_expert.* -> ffn_*_shexp, mlp.shared_expert_gate -> ffn_gate_inp_shexp;
//             linear_attn: A_log -> ssm_a = -exp(A_log), dt_bias -> ssm_dt.bias, conv1d
//             [C, 1, K] -> ssm_conv1d {K, C}, norm -> ssm_norm, out_proj -> ssm_out,
//             in_proj_ba -> ssm_ba (as is), in_proj_qkvz (rows grouped per key head as
//             [q k v z]) -> attn_qkv (all q, then all k, then all v rows) + attn_gate (all z).
// qwen35moe   as qwen3next, but in_proj_qkv -> attn_qkv, in_proj_z -> attn_gate, in_proj_a ->
//             ssm_alpha, in_proj_b -> ssm_beta; when value heads outnumber key heads every
//             value-head-indexed tensor is reordered from grouped (v heads of key head 0, then
//             of key head 1, ...) to tiled order (value head n = r * n_k + k holds grouped head
//             k * (n_v / n_k) + r): the v rows of in_proj_qkv and of conv1d, in_proj_z,
//             in_proj_a/b, A_log, dt_bias, and the columns of out_proj.
//             ForConditionalGeneration: model.language_model.* is the text tower, vision skipped.
// MTP         (qwen3next, qwen35moe) mtp.layers.{i}.* become layer n_layer + i; mtp.fc ->
//             blk.{n}.nextn.eh_proj, mtp.pre_fc_norm_embedding -> nextn.enorm,
//             mtp.pre_fc_norm_hidden -> nextn.hnorm, mtp.norm -> nextn.shared_head_norm; the
//             block count includes them and {arch}.nextn_predict_layers says how many.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "convert/hf_config.h"
#include "convert/safetensors.h"

namespace strata::convert {

enum class ElementOp : uint8_t {
    None,
    AddOne,  // zero-centred RMSNorm weight w -> 1 + w
    NegExp,  // A_log -> -exp(A_log)
};

struct RowRange {
    int64_t first = 0, count = 0;  // source rows (the source viewed as [rows][last dim])
};

// Some rows of one source tensor, in output order.
struct SourcePiece {
    const StTensor* tensor = nullptr;
    std::vector<RowRange> rows;  // empty: every row, in order
    int64_t n_rows() const;
};

struct PlannedTensor {
    std::string name;                 // GGUF name
    std::vector<uint64_t> shape;      // ne0 first; ne0 is the source row length
    std::vector<SourcePiece> pieces;  // output rows: the pieces' rows, concatenated
    std::vector<int64_t> col_perm;    // output column j takes source column col_perm[j]; empty: identity
    ElementOp op = ElementOp::None;
    bool keep_f32 = false;  // stays F32 whatever the output type (converter rule)
    std::string source;     // checkpoint tensor name(s), for progress and messages

    uint64_t n_rows() const;
};

struct TensorPlan {
    std::vector<PlannedTensor> tensors;  // in writing order
    int64_t n_mtp_layers = 0;            // MTP blocks appended after the n_layer trunk blocks
    std::vector<std::string> notes;      // things worth telling the user (printed on stderr)
};

struct PlanOptions {
    bool include_mtp = true;  // false: leave mtp.* tensors out (like the converter's --no-mtp)
};

// Throws strata::Error (one line, naming the checkpoint file) for a tensor that cannot be
// mapped, a tensor whose shape disagrees with config.json, a missing tensor, or a duplicate.
TensorPlan plan_tensors(const HfConfig& cfg, const Checkpoint& ck, const PlanOptions& opts = {});

// The tiled order of value heads: element n is the grouped head that tiled head n comes from.
std::vector<int64_t> tiled_value_heads(int64_t n_k_heads, int64_t n_v_heads);

}  // namespace strata::convert
