// The text <-> token id interface: byte-level BPE vocabularies from GGUF files (vocab.h), with
// the ids Hugging Face transformers gives for encode(text, add_special_tokens=False).
//
// Encoding: added tokens (GGUF types control and user-defined) are found in the raw text first,
// longest match at the leftmost position; the text between them is normalized to NFC,
// pre-tokenized (pretokenize.h) and each piece BPE-encoded (bpe.h). With parse_special false,
// added tokens are plain text like any other (unlike transformers' split_special_tokens, which
// still matches the non-special added tokens such as <think>). Any bytes are accepted; bytes
// that are not UTF-8 are encoded through their byte tokens.
//
// Decoding: token bytes are concatenated and each ill-formed UTF-8 subpart becomes U+FFFD, as
// transformers' decode does (errors="replace"). Unused tokens decode to nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/vocab.h"

namespace strata::gguf {
class File;
}

namespace strata::tokenizer {

class Tokenizer {
public:
    static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
    explicit Tokenizer(Vocab vocab);

    // Thread-safe (const, no shared mutable state).
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
    void encode_append(std::string_view text, std::vector<int32_t>& out, bool parse_special = true) const;
    // The same ids as encode, with the text cut only where no piece, added token or NFC
    // composition can span (pretokenize.h, is_safe_cut: after '\n', before non-space) and the
    // parts encoded on n_threads threads. Texts under 32 KiB, or with no such cut, run serially.
    std::vector<int32_t> encode_parallel(std::string_view text, int n_threads, bool parse_special = true) const;

    // Valid UTF-8. Throws strata::Error for an id outside the vocabulary.
    std::string decode(std::span<const int32_t> ids) const;
    // What token `id` stands for, as raw bytes (may be part of a UTF-8 sequence). Throws when out of range.
    const std::string& token_bytes(int32_t id) const;

    int32_t n_vocab() const { return vocab_.size(); }
    int32_t bos() const { return vocab_.bos; }  // -1 when the vocabulary has none
    int32_t eos() const { return vocab_.eos; }
    int32_t eot() const { return vocab_.eot; }
    int32_t pad() const { return vocab_.pad; }
    bool add_bos() const { return vocab_.add_bos; }
    // Control tokens (<|im_start|>, <|endoftext|>, ...): what a "skip special tokens" view omits.
    bool is_special(int32_t id) const { return valid(id) && vocab_.types[id] == TokenType::Control; }
    TokenType token_type(int32_t id) const;
    PreTokenizer pre_tokenizer() const { return vocab_.pre; }
    bool valid(int32_t id) const { return id >= 0 && id < vocab_.size(); }

private:
    // Start of the longest added token at the leftmost position in text[from, ...), with its id;
    // {text.size(), -1} when there is none.
    std::pair<size_t, int32_t> find_added(std::string_view text, size_t from) const;
    void encode_plain(std::string_view text, std::vector<int32_t>& out, BpeScratch& scratch, std::string& nfc_storage) const;
    void check_id(int32_t id) const;

    Vocab vocab_;
    Bpe bpe_;
    // Added tokens by first byte, longest first, for the leftmost-longest scan.
    std::array<std::vector<int32_t>, 256> added_by_first_byte_;
    std::array<bool, 256> added_first_byte_{};
    bool added_contain_newline_ = false;  // then a cut after '\n' could split one: no parallel cuts
};

// Turns a stream of ids into text without ever emitting half a character: bytes of an incomplete
// UTF-8 sequence are held until the token that completes them arrives. Bytes that can never
// become valid are emitted as U+FFFD at once. push() outputs concatenated with flush() equal
// Tokenizer::decode of all the ids.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer) : tok_(tokenizer) {}
    std::string push(int32_t id);
    // Emits what is still held (an unfinished sequence becomes U+FFFD) and resets.
    std::string flush();
    size_t pending_bytes() const { return pending_.size(); }

private:
    const Tokenizer& tok_;
    std::string pending_;
};

}  // namespace strata::tokenizer
