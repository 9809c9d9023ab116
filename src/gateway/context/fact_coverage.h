// Coverage of what a question depends on: the facts (sentences) about the entities the question
// names, and about the entities those facts lead to, found before any general context is ranked.
//   entities  the question's words that name something: not function or request words (a fixed
//             English list: "where", "the", "answer", "text" …), held by at most max_df_share of
//             the chunks (max_df_share_names for a capitalised word: names recur in real text),
//             weighted by idf, capitalised words (names) half as much again;
//   hop 0     every sentence holding a question entity is a fact, scored by the share of the
//             question's entity weight it holds ("Mary gave the football to John" holds more of
//             "What did Mary give to John?" than "Mary went to the kitchen" does); an occurrence
//             written otherwise than asked counts less ("the apple" asked, "Apple Inc." or an
//             identifier's part found); a long line-broken "sentence" (manuals, code) is split
//             into lines;
//   hop 1, 2  the best facts lend their own rare whole words (in at most max_df_share of the
//             chunks) — names at full weight, other words at half, a fact's weight shared among
//             its words — as the next hop's entities, at `decay` of the fact's score: "Where is
//             the football?" → "Daniel picked up the football" → Daniel → "Daniel went to the
//             kitchen"; facts already in the prompt lead on too but are not listed;
//   order     facts scoring at least `tier_share` of the best, by MMR (λ·score − (1−λ)·word
//             overlap with the facts already taken: repeated statements do not crowd out others),
//             later facts first among equals (the latest state of an entity matters most).
// The result is those facts, best first, each its sentence (completed across a chunk boundary)
// as bytes of its message: the assembler excerpts them before the BM25 ranking (whole chunks)
// and renders everything in original order, so a fact costs its own few tokens, not a chunk's.
// Work is bounded by the df caps and the entity / source / sentence limits (strongest entities
// visited first), whatever the conversation's size.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "gateway/context/retriever.h"

namespace strata::gateway {

// CoverageOptions: in retriever.h (RetrievalOptions::coverage).

struct CoveredFacts {
    std::vector<RankedChunk>
        picks;         // excerptable facts, best first: each its sentence, as bytes [begin, end) of the chunk's message
    int entities = 0;  // question entities found (0: nothing to cover)
    int facts = 0;     // facts in the tier (excerptable or already in the prompt)
};

// kind[c]: 1 = chunk c may be excerpted, 2 = already in the prompt (a source of hops only),
// 0 = neither. question: the parts of the query that are the question (weights as given).
CoveredFacts cover_facts(const Session& session, std::span<const uint8_t> kind, std::span<const QueryPart> question,
                         const ChunkTextFn& text, const CoverageOptions& options = {});

// The words cover_facts never takes as entities (tests, docs).
bool is_function_word(std::string_view lowercase_word);

}  // namespace strata::gateway
