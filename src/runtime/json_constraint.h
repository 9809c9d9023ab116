// JSON / JSON-schema constrained decoding for one sequence: at each step, which tokens keep the
// output a prefix of a document matching the grammar (docs/constrained_decoding.md).
//
//   auto grammar = JsonGrammar::from_schema(schema);              // once per schema
//   auto index = std::make_shared<TokenIndex>(tokenizer);         // once per vocabulary
//   JsonConstraint c(grammar, index);                             // per sequence
//   loop: c.allowed(mask); id = sample(logits, mask); c.accept(id); stop when index->is_end(id) or
//   c.must_end()
//
// The mask comes from a depth-first walk of the vocabulary's byte trie with the recogniser
// (json_matcher.h): one recogniser step per trie node, a subtree skipped at the first byte the
// recogniser refuses. Inside strings, plain text tokens are added as a ready bitmap and only
// the rest of the vocabulary is walked (in a string without length bounds, only what follows
// each token's plain-text prefix: TokenIndex::non_plain_rests). The last few masks are kept by recogniser
// state, so a state seen again (the middle of a long string) costs a copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/json_grammar.h"
#include "runtime/json_matcher.h"
#include "runtime/token_constraint.h"
#include "runtime/token_index.h"
#include "runtime/token_mask.h"

namespace strata::runtime {

class JsonConstraint final : public TokenConstraint {
public:
    JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenIndex> index);

    // Fills mask with the tokens that keep the output a valid prefix of a matching document.
    // End tokens are allowed exactly when the document is complete; after an end token was
    // accepted, only end tokens.
    void allowed(TokenMask& mask) override;
    // Advances by a token; throws strata::Error (and changes nothing) when it is not allowed.
    void accept(int32_t token) override;
    // A full document has been produced (the engine may end here).
    bool complete() const { return complete_; }
    // Complete, and nothing but an end token may follow (e.g. the top-level object closed).
    bool must_end() const override { return must_end_; }
    // An end token has been accepted.
    bool ended() const { return ended_; }
    // The slow reference for one token: feeds its bytes to the recogniser from the current state.
    // allowed() must agree with it on every token.
    bool would_accept(int32_t token);
    // Back to the empty document.
    void reset();
    // The document so far (bytes of the accepted tokens).
    const std::string& text() const { return text_; }

    // Masks kept by recogniser state (default 8; 0 turns the cache off).
    void set_mask_cache_size(size_t entries);

private:
    void walk(const TokenTrie& trie, const JsonParseState& start, TokenMask& mask);

    struct CachedMask {
        JsonParseState state;
        std::vector<uint64_t> words;
        uint64_t last_use = 0;
    };

    std::shared_ptr<const TokenIndex> index_;
    JsonMatcher matcher_;
    std::string text_;
    bool complete_ = false, must_end_ = false, ended_ = false;

    // Walk scratch: the recogniser state after each byte depth, the trie cursor per depth and
    // how many extra keys existed there.
    struct Cursor {
        uint32_t next_child, end_child;
    };
    std::vector<JsonParseState> depth_states_;
    std::vector<Cursor> cursors_;
    std::vector<size_t> key_marks_;
    JsonParseState thread_state_;

    std::vector<CachedMask> cache_;
    size_t cache_size_ = 8;
    uint64_t use_clock_ = 0;
};

}  // namespace strata::runtime
