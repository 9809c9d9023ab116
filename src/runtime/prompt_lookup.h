// Prompt lookup drafts (n-gram speculation, issue #30): the tokens that followed the latest
// earlier occurrence of a sequence's last n tokens, in its prompt or its output so far — what
// continues a quoted document, an edited file, a repeated identifier. Proposals only: the target
// model verifies every drafted token, so a wrong draft costs time, never output.
//
// Contract:
// - push(t) appends a token (the prompt's, then each accepted one); it records, for each n in
//   [min_ngram, max_ngram], that the n tokens before t were followed by t (the latest such
//   position wins). O(max_ngram) hash updates a token.
// - draft(k) tries n = max_ngram down to min_ngram: the last n tokens, if they occurred earlier
//   (checked token by token, not only by hash), give the up-to-k tokens that followed that
//   occurrence, stopping at the end of what is known. Empty when nothing matches. O(max_ngram).
// - Memory: up to (max_ngram - min_ngram + 1) entries a token in an open-addressing table kept at
//   most half full (16 bytes a slot, 2-4 slots an entry), plus the tokens: 17 MiB at 128K tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace strata::runtime {

class PromptLookup {
public:
    struct Options {
        int min_ngram = 2;  // one token matches too often to be worth a verify slot
        int max_ngram = 4;
    };
    PromptLookup() : PromptLookup(Options{}) {}
    explicit PromptLookup(Options o);

    void push(int32_t t);
    void push(std::span<const int32_t> ts) {
        for (int32_t t : ts) push(t);
    }
    std::vector<int32_t> draft(int k) const;
    size_t size() const { return tokens_.size(); }
    size_t memory_bytes() const { return tokens_.capacity() * sizeof(int32_t) + table_.capacity() * sizeof(Entry); }

private:
    struct Entry {
        uint64_t key = 0;     // hash of (n, the n tokens); 0: empty
        uint32_t follow = 0;  // position of the token that followed them (latest)
        uint32_t n = 0;
    };
    uint64_t key_of(size_t end, int n) const;  // the n tokens ending before position `end`
    Entry* find(uint64_t key, size_t end, int n);
    const Entry* find(uint64_t key, size_t end, int n) const;
    void grow();

    Options o_;
    std::vector<int32_t> tokens_;
    std::vector<Entry> table_;  // open addressing, linear probing, power-of-two size
    size_t used_ = 0;
};

}  // namespace strata::runtime
