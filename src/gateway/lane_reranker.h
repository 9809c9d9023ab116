// A Reranker (context/retriever.h) served by a lane of this gateway: POST /v1/rerank with the
// query and the pool's passages (docs/api.md, "Embeddings and reranking"), the scores back in the
// passages' order. Configured by [long_context] rerank_lane (docs/gateway.md). A lane that is down,
// slow (rerank_timeout_ms to the first byte of its answer) or answers anything but the results
// makes score() throw: the retriever then keeps the BM25 order and says so ("bm25", and the
// gateway's rerank-failure counter). Passages are cut to kMaxPassageBytes each, the pool to
// kMaxPassages (a pool is 48-400 chunks of at most a few KiB).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "gateway/context/retriever.h"

namespace strata::gateway {

class Lane;

class LaneReranker final : public Reranker {
public:
    static constexpr size_t kMaxPassages = 400;
    static constexpr size_t kMaxPassageBytes = 4096;
    LaneReranker(Lane& lane, std::chrono::milliseconds timeout) : lane_(lane), timeout_(timeout) {}
    std::vector<double> score(std::string_view query, std::span<const std::string_view> passages) override;
    uint64_t failures() const { return failures_.load(); }
    uint64_t calls() const { return calls_.load(); }

private:
    Lane& lane_;
    std::chrono::milliseconds timeout_;
    std::atomic<uint64_t> failures_{0}, calls_{0};
};

}  // namespace strata::gateway
