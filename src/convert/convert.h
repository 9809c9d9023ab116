// `strata convert`: a transformers checkpoint directory (config.json, safetensors, tokenizer
// files) of Qwen3-MoE, Qwen3-Next or Qwen3.5-MoE -> one GGUF file with the tensor names, shapes,
// types and metadata keys the ecosystem converter (llama.cpp's convert_hf_to_gguf.py) writes.
//
// Tensors are converted one at a time, a bounded chunk of rows at a time, from the mmap'd
// safetensors into gguf::Writer (which writes OUT.tmp and renames it when complete), so memory
// stays small whatever the model size. Output types follow the converter: 1-D tensors, norms,
// routers (ffn_gate_inp, ffn_gate_inp_shexp), ssm_conv1d, ssm_a and ssm_dt.bias stay F32;
// everything else takes the output type; q8_0 falls back to F16 for rows that are not a whole
// number of 32-value blocks. Q8_0 blocks are the reference rounding (scale = max|x| / 127,
// round half away from zero), byte-identical to the converter's.
//
// Beyond the converter: {arch}.expert_weights_norm = false is written when the checkpoint's
// norm_topk_prob is false (the converter drops it, and the routing weights then differ), and
// full_attention_interval is derived from layer_types when config.json only gives the latter.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "quant/types.h"

namespace strata::convert {

enum class OutType { Auto, F32, F16, BF16, Q8_0 };

// "f32", "f16", "bf16", "q8_0", "auto" (case-insensitive); nullopt otherwise.
std::optional<OutType> parse_outtype(std::string_view s);
const char* outtype_name(OutType t);

struct ConvertOptions {
    OutType outtype = OutType::Auto;  // auto: bf16 or f16 after the checkpoint's first matrix, else f16
    bool include_mtp = true;          // MTP tensors of qwen3next / qwen35moe into the same file
    // Progress and notes, one line each; null: none.
    std::function<void(const std::string&)> log;
};

struct ConvertResult {
    std::string gguf_arch;
    OutType outtype = OutType::F16;
    size_t n_tensors = 0;
    uint64_t data_bytes = 0;
    int64_t n_mtp_layers = 0;
};

// Throws strata::Error (one line, naming the offending file) for anything wrong with the input;
// OUT is then left untouched (the partial OUT.tmp is removed).
ConvertResult convert_checkpoint(const std::filesystem::path& hf_dir, const std::filesystem::path& out,
                                 const ConvertOptions& opts = {});

}  // namespace strata::convert
