// The tokenizer.* metadata of a converted model, built from a transformers checkpoint's
// tokenizer.json (+ tokenizer_config.json, config.json, chat_template.jinja) the way the
// ecosystem converter builds it for GPT-2-style byte-level BPE vocabularies (all Qwen models):
//
//   tokenizer.ggml.model       "gpt2"
//   tokenizer.ggml.pre         "qwen2" or "qwen35", from the pre-tokenizer's split regex
//   tokenizer.ggml.tokens      one string per id in [0, vocab_size); ids the tokenizer lacks
//                              are "[PAD<id>]"
//   tokenizer.ggml.token_type  i32 per id: 1 normal, 3 control (special added tokens and ones
//                              that look special, "<|...|>"), 4 user-defined (other added
//                              tokens), 5 unused (the padding ids)
//   tokenizer.ggml.merges      "left right" strings in rank order
//   tokenizer.ggml.<x>_token_id  bos, eos, unknown, seperator, padding, mask: from the
//                              tokenizer_config's *_token strings, then config.json's *_token_id
//   tokenizer.ggml.add_{bos,eos,sep}_token  from tokenizer_config.json
//   tokenizer.chat_template    tokenizer_config.json, else chat_template.jinja / .json
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"

namespace strata::convert {

using MetadataList = std::vector<std::pair<std::string, gguf::Value>>;

// Throws strata::Error naming the file: no tokenizer.json, not a BPE model, a token id beyond
// vocab_size, a pre-tokenizer that is not one of the Qwen ones.
MetadataList tokenizer_metadata(const std::filesystem::path& dir, int64_t vocab_size);

// "qwen2" / "qwen35" for the split regex of a tokenizer.json pre_tokenizer; "" when unknown.
std::string pre_tokenizer_name_for_regex(const std::string& regex);

}  // namespace strata::convert
