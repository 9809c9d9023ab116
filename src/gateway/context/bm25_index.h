// An incremental BM25 index over chunks (Lucene's formula and defaults, k1 = 1.2, b = 0.75):
//   idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
//   score(d) = sum over query terms t of w_t * idf(t) * tf (k1 + 1) / (tf + k1 (1 - b + b |d| / avgdl))
// Chunks are added in id order and never removed (a conversation only grows), so postings stay
// sorted by chunk id with no rebuild. A fork's index shares its parent's: it is built on a frozen
// base index (never changed again) of which it sees chunks [0, base_chunks), and holds only the
// chunks added after; a base is itself flat (no base of its own).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "gateway/context/terms.h"

namespace strata::gateway {

struct Bm25Params {
    double k1 = 1.2;
    double b = 0.75;
};

struct WeightedTerm {
    uint64_t term;
    double weight = 1.0;
};

class Bm25Index {
public:
    struct Posting {
        uint32_t chunk;
        uint32_t count;
    };

    Bm25Index() = default;
    // Chunks [0, base_chunks) of `base` (flat: no base of its own), then chunks added here.
    Bm25Index(std::shared_ptr<const Bm25Index> base, uint32_t base_chunks);

    // Chunk ids must be n_chunks(), n_chunks() + 1, ... in order.
    void add(uint32_t chunk, std::span<const TermCount> terms);

    uint32_t n_chunks() const { return base_chunks_ + static_cast<uint32_t>(length_.size()); }
    uint32_t df(uint64_t term) const;
    std::span<const Posting> postings(uint64_t term) const;  // ascending chunk ids; empty if absent
    double idf(uint64_t term) const;
    double average_length() const {
        return n_chunks() == 0 ? 1.0 : static_cast<double>(base_length_ + total_length_) / n_chunks();
    }
    uint32_t length(uint32_t chunk) const { return chunk < base_chunks_ ? base_->length_[chunk] : length_[chunk - base_chunks_]; }

    // scores[c] += BM25 of every chunk c that holds a query term (scores is resized to n_chunks).
    void score(std::span<const WeightedTerm> query, const Bm25Params& p, std::vector<double>& scores) const;

    // This index's own heap (a base's is its own owner's).
    size_t memory_bytes() const;

private:
    // The base's postings of `term` below base_chunks_ (an empty span when none).
    std::span<const Posting> base_postings(uint64_t term) const;

    std::shared_ptr<const Bm25Index> base_;
    uint32_t base_chunks_ = 0;
    uint64_t base_length_ = 0;  // terms in the base's chunks [0, base_chunks_)
    std::unordered_map<uint64_t, std::vector<Posting>> postings_;
    std::vector<uint32_t> length_;  // terms per chunk (own chunks)
    uint64_t total_length_ = 0;
    size_t n_postings_ = 0;
    size_t postings_heap_ = 0;  // bytes the posting lists' buffers hold (their capacity)
};

}  // namespace strata::gateway
