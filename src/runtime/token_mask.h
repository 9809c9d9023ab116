// The set of token ids a sampler may pick from at one decoding step, as a bitmap over the
// vocabulary. Constraints (json_constraint.h) fill it; the sampler (sampler.h) reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::runtime {

// Allowed-token set: bit i of words[i/64] set => token i allowed.
struct TokenMask {
    std::vector<uint64_t> words;
    void reset(int32_t n_vocab, bool allow_all);
    bool allows(int32_t id) const { return (words[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
    void allow(int32_t id) { words[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
};

}  // namespace strata::runtime
