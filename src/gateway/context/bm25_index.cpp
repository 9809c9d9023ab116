#include "gateway/context/bm25_index.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace strata::gateway {

Bm25Index::Bm25Index(std::shared_ptr<const Bm25Index> base, uint32_t base_chunks) : base_(std::move(base)) {
    if (!base_ || base_chunks == 0) {
        base_.reset();
        return;
    }
    if (base_->base_ || base_chunks > base_->n_chunks()) throw Error("bm25: a base index must be flat and hold the chunks seen");
    base_chunks_ = base_chunks;
    base_length_ = std::accumulate(base_->length_.begin(), base_->length_.begin() + base_chunks, uint64_t{0});
}

void Bm25Index::add(uint32_t chunk, std::span<const TermCount> terms) {
    if (chunk != n_chunks()) throw Error("bm25: chunk " + std::to_string(chunk) + " added out of order");
    uint32_t len = 0;
    for (const TermCount& t : terms) {
        std::vector<Posting>& list = postings_[t.term];
        const size_t before = list.capacity();
        list.push_back({chunk, t.count});
        postings_heap_ += (list.capacity() - before) * sizeof(Posting);
        len += t.count;
    }
    length_.push_back(len);
    total_length_ += len;
    n_postings_ += terms.size();
}

std::span<const Bm25Index::Posting> Bm25Index::base_postings(uint64_t term) const {
    if (!base_) return {};
    const auto it = base_->postings_.find(term);
    if (it == base_->postings_.end()) return {};
    const std::vector<Posting>& list = it->second;
    const auto end = std::lower_bound(list.begin(), list.end(), base_chunks_,
                                      [](const Posting& p, uint32_t chunk) { return p.chunk < chunk; });
    return {list.data(), static_cast<size_t>(end - list.begin())};
}

uint32_t Bm25Index::df(uint64_t term) const {
    const auto it = postings_.find(term);
    const size_t own = it == postings_.end() ? 0 : it->second.size();
    return static_cast<uint32_t>(own + base_postings(term).size());
}

std::span<const Bm25Index::Posting> Bm25Index::postings(uint64_t term) const {
    const auto it = postings_.find(term);
    return it == postings_.end() ? std::span<const Posting>{} : std::span<const Posting>(it->second);
}

double Bm25Index::idf(uint64_t term) const {
    const double n = static_cast<double>(n_chunks()), d = df(term);
    return std::log(1.0 + (n - d + 0.5) / (d + 0.5));
}

void Bm25Index::score(std::span<const WeightedTerm> query, const Bm25Params& p, std::vector<double>& scores) const {
    scores.resize(n_chunks(), 0.0);
    const double avgdl = average_length();
    auto add = [&](std::span<const Posting> list, double w) {
        for (const Posting& post : list) {
            const double tf = post.count;
            const double norm = p.k1 * (1.0 - p.b + p.b * length(post.chunk) / avgdl);
            scores[post.chunk] += w * tf * (p.k1 + 1.0) / (tf + norm);
        }
    };
    for (const WeightedTerm& q : query) {
        const auto it = postings_.find(q.term);
        const std::span<const Posting> inherited = base_postings(q.term);
        if (it == postings_.end() && inherited.empty()) continue;
        const double w = q.weight * idf(q.term);
        add(inherited, w);
        if (it != postings_.end()) add(it->second, w);
    }
}

// What the heap holds for it: per term a map node (~48 B, 64 with malloc's header and rounding),
// its bucket and its list's buffer (16 B of malloc header besides its capacity).
size_t Bm25Index::memory_bytes() const {
    return postings_heap_ + postings_.size() * (64 + 16) + postings_.bucket_count() * sizeof(void*) +
           length_.capacity() * sizeof(uint32_t);
}

}  // namespace strata::gateway
