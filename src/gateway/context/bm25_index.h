// An incremental BM25 index over chunks (Lucene's formula and defaults, k1 = 1.2, b = 0.75):
//   idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
//   score(d) = sum over query terms t of w_t * idf(t) * tf (k1 + 1) / (tf + k1 (1 - b + b |d| / avgdl))
// Chunks are added in id order and never removed (a conversation only grows; a fork builds a new
// index from the stored bags of words), so postings stay sorted by chunk id with no rebuild.
#pragma once

#include <cstdint>
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

    // Chunk ids must be 0, 1, 2, ... in order.
    void add(uint32_t chunk, std::span<const TermCount> terms);

    uint32_t n_chunks() const { return static_cast<uint32_t>(length_.size()); }
    uint32_t df(uint64_t term) const;
    std::span<const Posting> postings(uint64_t term) const;  // ascending chunk ids; empty if absent
    double idf(uint64_t term) const;
    double average_length() const { return length_.empty() ? 1.0 : static_cast<double>(total_length_) / length_.size(); }
    uint32_t length(uint32_t chunk) const { return length_[chunk]; }

    // scores[c] += BM25 of every chunk c that holds a query term (scores is resized to n_chunks).
    void score(std::span<const WeightedTerm> query, const Bm25Params& p, std::vector<double>& scores) const;

    size_t memory_bytes() const;

private:
    std::unordered_map<uint64_t, std::vector<Posting>> postings_;
    std::vector<uint32_t> length_;  // terms per chunk
    uint64_t total_length_ = 0;
    size_t n_postings_ = 0;
};

}  // namespace strata::gateway
