#include "gateway/context/bm25_index.h"

#include <cmath>

#include "util/error.h"

namespace strata::gateway {

void Bm25Index::add(uint32_t chunk, std::span<const TermCount> terms) {
    if (chunk != length_.size()) throw Error("bm25: chunk " + std::to_string(chunk) + " added out of order");
    uint32_t len = 0;
    for (const TermCount& t : terms) {
        postings_[t.term].push_back({chunk, t.count});
        len += t.count;
    }
    length_.push_back(len);
    total_length_ += len;
    n_postings_ += terms.size();
}

uint32_t Bm25Index::df(uint64_t term) const {
    const auto it = postings_.find(term);
    return it == postings_.end() ? 0 : static_cast<uint32_t>(it->second.size());
}

std::span<const Bm25Index::Posting> Bm25Index::postings(uint64_t term) const {
    const auto it = postings_.find(term);
    return it == postings_.end() ? std::span<const Posting>{} : std::span<const Posting>(it->second);
}

double Bm25Index::idf(uint64_t term) const {
    const double n = static_cast<double>(length_.size()), d = df(term);
    return std::log(1.0 + (n - d + 0.5) / (d + 0.5));
}

void Bm25Index::score(std::span<const WeightedTerm> query, const Bm25Params& p, std::vector<double>& scores) const {
    scores.resize(length_.size(), 0.0);
    const double avgdl = average_length();
    for (const WeightedTerm& q : query) {
        const auto it = postings_.find(q.term);
        if (it == postings_.end()) continue;
        const double w = q.weight * idf(q.term);
        for (const Posting& post : it->second) {
            const double tf = post.count;
            const double norm = p.k1 * (1.0 - p.b + p.b * length_[post.chunk] / avgdl);
            scores[post.chunk] += w * tf * (p.k1 + 1.0) / (tf + norm);
        }
    }
}

size_t Bm25Index::memory_bytes() const {
    return n_postings_ * sizeof(Posting) + postings_.size() * 64 + length_.size() * sizeof(uint32_t);
}

}  // namespace strata::gateway
