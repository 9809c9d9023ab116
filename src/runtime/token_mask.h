// The set of token ids a sampler may pick from at one decoding step, as a bitmap over the
// vocabulary. Constraints (json_constraint.h) fill it; the sampler (sampler.h) reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::runtime {

// Allowed-token set: bit i of words[i/64] set => token i allowed. Bits at or past n_vocab are
// ignored by the sampler and kept clear by reset().
struct TokenMask {
    std::vector<uint64_t> words;

    static size_t word_count(int32_t n_vocab) { return (static_cast<size_t>(n_vocab) + 63) / 64; }
    static TokenMask allowing_none(int32_t n_vocab) { return {std::vector<uint64_t>(word_count(n_vocab), 0)}; }
    static TokenMask allowing_all(int32_t n_vocab) {
        TokenMask m;
        m.reset(n_vocab, true);
        return m;
    }
    void reset(int32_t n_vocab, bool allow_all);
    bool allows(int32_t id) const {
        const size_t w = static_cast<size_t>(id) >> 6;
        return id >= 0 && w < words.size() && ((words[w] >> (id & 63)) & 1) != 0;
    }
    void allow(int32_t id) { words[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
    void disallow(int32_t id) { words[static_cast<size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63)); }
    // Allowed tokens among ids [0, n_vocab).
    int32_t count_allowed(int32_t n_vocab) const;
};

}  // namespace strata::runtime
