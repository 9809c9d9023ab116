// Retrieval's models served by lanes of this gateway (context/retriever.h's Reranker and Embedder),
// over the lanes' prompt-only routes (docs/api.md, "Embeddings and reranking"):
// - LaneReranker: POST /v1/rerank with the query and the pool's passages, the scores back in the
//   passages' order ([long_context] rerank_lane). Passages are cut to kMaxPassageBytes each, the
//   pool to kMaxPassages (a pool is 48-400 chunks of at most a few KiB).
// - LaneEmbedder: POST /v1/embeddings, passages in calls of kMaxBatch (as they are: documents
//   take no instruction in Qwen3-Embedding's usage), the query with the configured instruction
//   ([long_context] embed_lane, embed_instruction, embed_dimensions).
// A lane that is down, slow (the timeout to the first byte of each answer) or answers anything
// but what was asked makes the call throw: the retriever then goes on without it and says so
// (the mode it reports, and the gateway's failure counters).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

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

class LaneEmbedder final : public Embedder {
public:
    static constexpr size_t kMaxBatch = 64;
    static constexpr size_t kMaxPassageBytes = 4096;
    static constexpr size_t kMaxQueryBytes = 16384;
    // dimensions: the leading ones of each vector (0: all the model has).
    LaneEmbedder(Lane& lane, std::chrono::milliseconds timeout, std::string instruction, int dimensions)
        : lane_(lane), timeout_(timeout), instruction_(std::move(instruction)), dimensions_(dimensions) {}
    std::vector<std::vector<float>> embed_passages(std::span<const std::string_view> texts) override;
    std::vector<float> embed_query(std::string_view query) override;
    uint64_t failures() const { return failures_.load(); }
    uint64_t calls() const { return calls_.load(); }
    uint64_t passages() const { return passages_.load(); }  // embedded so far

private:
    std::vector<std::vector<float>> call(const nlohmann::json& input, bool query);

    Lane& lane_;
    std::chrono::milliseconds timeout_;
    std::string instruction_;
    int dimensions_;
    std::atomic<uint64_t> failures_{0}, calls_{0}, passages_{0};
};

}  // namespace strata::gateway
