// What constrained decoding needs to know about a vocabulary, built once and shared by every
// sequence: which tokens end generation, which may appear inside a document at all, a byte
// trie over the latter, and precomputed classes that spare walking most of the trie:
//
//   plain string text  tokens that are complete UTF-8 with no '"', '\' or control byte. Inside
//                      a JSON string (between characters) every one of them is allowed, as far
//                      as a maxLength leaves room: they are OR-ed in as ready bitmaps by code
//                      point count, and only the other tokens (non_plain_tokens) are walked.
//   rest trie          the other tokens keyed by what follows their longest plain-text prefix
//                      ("abc\"," by "\","). In a string without length bounds plain text leaves
//                      the recogniser state as it was, so walking the rests gives the same
//                      answer as walking the tokens, and tokens that share a rest share the walk.
//
// Special (control) tokens such as <|im_start|> are never part of a document; tokens that
// decode to no bytes are refused too (they would let a model loop without progress).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/token_mask.h"

namespace strata::tokenizer {
class Tokenizer;
}

namespace strata::runtime {

// A byte trie over token byte strings. Node 0 is the root (the empty prefix); the children of
// a node are contiguous and sorted by byte, nodes are in breadth-first order.
class TokenTrie {
public:
    struct Node {
        uint32_t first_child;
        uint32_t first_token;  // tokens ending here: token_ids()[first_token, next node's first_token)
        uint16_t n_children;
        uint8_t byte;  // the byte that leads here from the parent
        uint8_t unused = 0;
    };

    void build(std::vector<std::pair<std::string_view, int32_t>> tokens);
    const Node& node(uint32_t i) const { return nodes_[i]; }
    uint32_t size() const { return static_cast<uint32_t>(nodes_.size() - 1); }  // without the sentinel
    // The tokens whose bytes end at node i.
    const int32_t* tokens_begin(uint32_t i) const { return token_ids_.data() + nodes_[i].first_token; }
    const int32_t* tokens_end(uint32_t i) const { return token_ids_.data() + nodes_[i + 1].first_token; }
    size_t n_tokens() const { return token_ids_.size(); }

private:
    std::vector<Node> nodes_;  // plus a sentinel, so tokens_end works for the last node
    std::vector<int32_t> token_ids_;
};

class TokenIndex {
public:
    // End tokens: the tokenizer's eos and eot; excluded: its control tokens.
    explicit TokenIndex(const tokenizer::Tokenizer& tok);
    // The same with the end tokens given (e.g. <|im_end|> and <|endoftext|>).
    TokenIndex(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& end_tokens);
    // From raw token bytes; end_tokens end generation, excluded never appear in a document.
    TokenIndex(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens, const std::vector<int32_t>& excluded = {});

    int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
    const std::vector<int32_t>& end_tokens() const { return end_tokens_; }
    bool is_end(int32_t id) const { return valid(id) && (flags_[static_cast<size_t>(id)] & kEnd); }
    // May be part of a document: not an end token, not excluded, not empty.
    bool is_candidate(int32_t id) const { return valid(id) && (flags_[static_cast<size_t>(id)] & kCandidate); }
    bool valid(int32_t id) const { return id >= 0 && id < n_vocab(); }
    const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
    size_t max_token_bytes() const { return max_token_bytes_; }

    // The candidates; those that are not plain string text; the same by what follows their
    // plain-text prefix.
    const TokenTrie& all_tokens() const { return all_; }
    const TokenTrie& non_plain_tokens() const { return non_plain_; }
    const TokenTrie& non_plain_rests() const { return rests_; }
    // Code points of a plain-string-text token; -1 for other tokens.
    int32_t plain_chars(int32_t id) const { return plain_chars_[static_cast<size_t>(id)]; }
    // ORs into mask the plain-string-text tokens of at most max_chars code points.
    void add_plain(TokenMask& mask, int64_t max_chars) const;

private:
    void set_end_and_excluded(const std::vector<int32_t>& end_tokens, const std::vector<int32_t>& excluded);
    void build();

    static constexpr uint8_t kEnd = 1, kCandidate = 2, kExcluded = 4;
    static constexpr int32_t kPlainTable = 33;  // ready masks for 0..32 code points

    std::vector<std::string> bytes_;
    std::vector<uint8_t> flags_;
    std::vector<int32_t> end_tokens_;
    std::vector<int32_t> plain_chars_;
    size_t max_token_bytes_ = 0;
    int32_t max_plain_chars_ = 0;
    TokenTrie all_, non_plain_, rests_;
    std::vector<TokenMask> plain_up_to_;  // [k]: plain tokens of at most k code points
    TokenMask plain_all_;
    std::vector<std::pair<int32_t, int32_t>> long_plain_;  // (code points, id) of longer plain tokens, ascending
};

}  // namespace strata::runtime
