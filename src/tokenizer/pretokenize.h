// Pre-tokenizers: split text into the pieces that BPE then encodes one at a time.
//
// Qwen2 (tokenizer.ggml.pre "qwen2" and the names that share its regex) is the tokenizer.json
// Split pre-tokenizer with behavior "Isolated" and the pattern
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// as Oniguruma (what Hugging Face tokenizers compile it with) matches it: leftmost match, first
// alternative that matches, \s = White_Space, case-insensitive contractions with Unicode simple
// case folding (so 'ſ, U+017F, counts as 's). Qwen35 ("qwen35") is the same with \p{M} joined to
// the letters: [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ and ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*.
//
// The scanner is hand-written (no regex engine, no backtracking): every alternative reduces to a
// run of one character class plus at most one character of look-ahead. Every byte of the text
// lands in exactly one piece; bytes that are not well-formed UTF-8 count as one "other"
// character each (neither letter, number, mark nor space), like punctuation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata::tokenizer {

enum class PreTokenizer : uint8_t { Qwen2, Qwen35 };

// The pre-tokenizer a GGUF names in tokenizer.ggml.pre, or nullopt when we do not implement it.
std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name);
const char* pre_tokenizer_name(PreTokenizer p);

// Whether the tokenizer.json that goes with this pre-tokenizer normalizes text to NFC first.
bool pre_tokenizer_uses_nfc(PreTokenizer p);

// Byte offset where the piece starting at `pos` ends (pos < text.size()).
size_t next_piece_end(PreTokenizer p, std::string_view text, size_t pos);

// Iterates the pieces of a text: for (PieceScanner s(p, text); s.next(piece);) ...
class PieceScanner {
public:
    PieceScanner(PreTokenizer p, std::string_view text) : p_(p), text_(text) {}
    bool next(std::string_view& piece) {
        if (pos_ >= text_.size()) return false;
        const size_t end = next_piece_end(p_, text_, pos_);
        piece = text_.substr(pos_, end - pos_);
        pos_ = end;
        return true;
    }

private:
    PreTokenizer p_;
    std::string_view text_;
    size_t pos_ = 0;
};

// True when no piece can span the boundary just before `pos`, so the text can be cut there and
// each side pre-tokenized alone with the same result: the previous byte is '\n' and the character
// at pos is not white space (proof in pretokenize.cpp). NFC never combines across such a cut either.
bool is_safe_cut(std::string_view text, size_t pos);

}  // namespace strata::tokenizer
