// A byte-level BPE vocabulary as GGUF stores it (tokenizer.ggml.model = "gpt2"):
//   tokenizer.ggml.tokens       [string]  each token, in the byte-to-unicode alphabet of GPT-2
//                                         (byte 0x20 is "Ġ", 0x0A is "Ċ", ...); added tokens raw
//   tokenizer.ggml.token_type   [i32]     1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
//   tokenizer.ggml.merges       [string]  "LEFT RIGHT" in rank order (rank = index)
//   tokenizer.ggml.pre          string    the pre-tokenizer (pretokenize.h)
//   tokenizer.ggml.{bos,eos,padding,eot,unknown}_token_id, add_bos_token, add_eos_token
// Loading checks everything and throws strata::Error naming the file and the key at fault.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"

namespace strata::gguf {
class File;
}

namespace strata::tokenizer {

enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

// Ids are packed into 20 bits in the merge table (bpe.h); larger vocabularies are refused at load.
inline constexpr int32_t kMaxVocabSize = (1 << 20) - 1;

struct Merge {
    int32_t left, right, result;
};

struct Vocab {
    std::vector<std::string> bytes;  // what each token decodes to (raw bytes; empty for unused)
    std::vector<TokenType> types;
    std::vector<Merge> merges;              // rank order
    std::array<int32_t, 256> byte_token{};  // the token of each single byte, -1 when there is none
    PreTokenizer pre = PreTokenizer::Qwen2;
    int32_t bos = -1, eos = -1, pad = -1, eot = -1, unk = -1;  // -1: absent
    bool add_bos = false, add_eos = false;

    int32_t size() const { return static_cast<int32_t>(bytes.size()); }
    // Control and user-defined tokens: matched whole inside text when special tokens are parsed.
    bool is_added(int32_t id) const { return types[id] == TokenType::Control || types[id] == TokenType::UserDefined; }
};

Vocab load_vocab(const gguf::File& file);

// GPT-2's byte-to-unicode alphabet: the code point that stands for byte b in token strings.
uint32_t byte_to_code_point(uint8_t b);

}  // namespace strata::tokenizer
