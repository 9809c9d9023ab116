// Ranks a session's chunks for a query:
//   facts    first, the chunks holding facts about the entities the question names and those
//            they lead to (fact_coverage.h), when the query has question parts;
//   round 1  BM25 of the query's terms;
//   round 2  multi-hop expansion: for each of the best round-1 hits, the sentence in it that
//            matched the query best lends its rarer terms to a new query ("the key to the red
//            door is in the blue box" -> blue, box), whose hits ("the blue box is in the attic")
//            inherit the hit's confidence;
//   dense    with an Embedder: the query's vector against the candidates' stored vectors
//            (Session::dense, embedded by the assembler); the nearest `pool` interleaved with
//            rounds 1-2 (the k-th nearest at position k, as a round-1 hit; half a place earlier
//            when both hold a chunk), so a chunk that says the same in other words comes in
//            ("bm25+dense"). Not reciprocal-rank fusion: with k = 60 it ranks any chunk both lists
//            hold in their top 60 above the nearest chunk that BM25 misses, the very case dense
//            retrieval is for;
//   rerank   with a Reranker: the pool's order fused with the reranker's by reciprocal rank
//            ("+rerank");
//   MMR      over a pool larger than what fits, λ·rel − (1−λ)·max sim to those already picked
//            (idf-weighted cosine of bags of words), so near-duplicates don't crowd out facts.
// An embedder or reranker that throws (its lane down or slow) is left out of this retrieval and
// the mode says so: "bm25" alone at worst. The gateway's are lanes' /v1/embeddings and
// /v1/rerank (lane_pooling.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/context/bm25_index.h"

namespace strata::gateway {

class Session;

// Dense vectors (Qwen3-Embedding through a lane's /v1/embeddings), unit length; throw when they
// cannot be had.
class Embedder {
public:
    virtual ~Embedder() = default;
    // One per text, in order (documents: no instruction).
    virtual std::vector<std::vector<float>> embed_passages(std::span<const std::string_view> texts) = 0;
    // The query's (in the model's query form: the instruction first).
    virtual std::vector<float> embed_query(std::string_view query) = 0;
};

// Cross-encoder relevance (Qwen3-Reranker through a lane's /v1/rerank); higher is better; throws
// when it cannot score.
class Reranker {
public:
    virtual ~Reranker() = default;
    virtual std::vector<double> score(std::string_view query, std::span<const std::string_view> passages) = 0;
};

// Limits and weights of fact coverage (fact_coverage.h).
struct CoverageOptions {
    int hops = 2;                      // entity hops after the question's own
    int max_entities = 24;             // per hop
    int max_sources = 48;              // facts per hop whose words lead on
    double max_df_share = 0.02;        // an entity is in at most this share of the chunks …
    double max_df_share_names = 0.08;  // … a capitalised one (a name) in at most this share …
    uint32_t min_max_df = 12;          // … or this many, whichever is more
    double decay = 0.6;                // a hop's entities weigh this much of their fact's score
    double tier_share = 0.1;           // facts below this share of the best are left to BM25
    double mmr_lambda = 0.8;           // over facts
    size_t max_facts = 4000;           // facts scored in all
    size_t max_mmr = 400;              // facts ordered by MMR; the rest by score
};

struct RetrievalOptions {
    Bm25Params bm25;
    int expansion_hits = 8;         // round-1 hits that each expand the query (0: one round)
    int expansion_terms = 8;        // rare terms taken from each hit's best sentence
    double expansion_weight = 1.0;  // an expansion's j-th hit sits j / weight places after its source
    double mmr_lambda = 0.7;
    int min_pool = 48;  // MMR candidates: at least this many, or 2x what fits
    int max_pool = 400;
    std::shared_ptr<Embedder> embedder;  // fuses dense ranks into the pool when set
    int dense_budget_ms = 15000;         // embedding a request's new chunks fits in this (the rest: later turns)
    std::shared_ptr<Reranker> reranker;  // reranks the pool when set
    CoverageOptions coverage;
};

struct RankedChunk {
    uint32_t chunk;
    double relevance;             // in (0, 1]
    uint32_t begin = 0, end = 0;  // a fact's sentence around the chunk: bytes of its message's text; 0, 0: the whole chunk
};

// Text of a chunk, read from the request (sessions keep no text).
using ChunkTextFn = std::function<std::string_view(uint32_t chunk)>;

struct RetrievalOutput {
    std::vector<RankedChunk> ranked;  // the facts' sentences first (fact_coverage.h), then chunks in MMR order: chunks that
                                      // share a term with the query, and with dense ranks the nearest by vector
    std::string mode;                 // "bm25", "bm25+dense", "bm25+rerank" or "bm25+dense+rerank"
    int facts = 0;                    // entries at the head of `ranked` that are facts about the question's entities
};

// Parts of the query with their weights (the question's paragraph counts more than the text
// before it); a term's weight is the largest of the parts holding it.
struct QueryPart {
    std::string_view text;
    double weight = 1.0;
    bool question = false;  // the question itself (find_question): its entities are covered first (fact_coverage.h)
};

// candidates: chunk ids that may be excerpted; visible: chunks the prompt keeps verbatim anyway
// (recent turns, a split message's head and tail), which are not excerpted but may be the first
// hop of a two-hop question; pool: how many to rank at least.
RetrievalOutput retrieve(const Session& session, std::span<const uint32_t> candidates, std::span<const uint32_t> visible,
                         std::span<const QueryPart> query, size_t pool, const ChunkTextFn& text, const RetrievalOptions& options);

}  // namespace strata::gateway
