#include "gateway/context/retriever.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "gateway/context/chunker.h"
#include "gateway/context/fact_coverage.h"
#include "gateway/context/session.h"

namespace strata::gateway {
namespace {

std::vector<WeightedTerm> query_terms(std::span<const QueryPart> parts) {
    std::unordered_map<uint64_t, double> w;
    for (const QueryPart& p : parts)
        for (const TermCount& t : count_terms(p.text)) w[t.term] = std::max(w[t.term], p.weight);
    std::vector<WeightedTerm> q;
    for (const auto& [term, weight] : w) q.push_back({term, weight});
    std::sort(q.begin(), q.end(), [](const WeightedTerm& a, const WeightedTerm& b) { return a.term < b.term; });
    return q;
}

// Chunk ids of the `n` highest positive scores among candidates, best first.
std::vector<uint32_t> top_n(const std::vector<double>& scores, std::span<const uint32_t> candidates, size_t n) {
    std::vector<uint32_t> hits;
    for (uint32_t c : candidates)
        if (scores[c] > 0) hits.push_back(c);
    auto better = [&](uint32_t a, uint32_t b) { return scores[a] != scores[b] ? scores[a] > scores[b] : a < b; };
    if (hits.size() > n) {
        std::nth_element(hits.begin(), hits.begin() + static_cast<ptrdiff_t>(n), hits.end(), better);
        hits.resize(n);
    }
    std::sort(hits.begin(), hits.end(), better);
    return hits;
}

// The rarer terms of the sentence of `chunk_text` that shares the most query weight, minus the
// question's own terms (those at full weight; words of the text before the question may well be
// the next hop): what a second hop should look for.
std::vector<WeightedTerm> expansion_for(std::string_view chunk_text, const std::unordered_map<uint64_t, double>& query,
                                        const Bm25Index& index, int n_terms) {
    std::string_view best;
    double best_overlap = 0;
    for (const auto& [b, e] : split_sentences(chunk_text)) {
        const std::string_view s = chunk_text.substr(b, e - b);
        double overlap = 0;
        for (const TermCount& t : count_terms(s))
            if (const auto it = query.find(t.term); it != query.end()) overlap += it->second * index.idf(t.term);
        if (overlap > best_overlap) {
            best_overlap = overlap;
            best = s;
        }
    }
    if (best.empty()) return {};
    // Words in more than a fifth of the chunks say nothing about the next hop.
    const uint32_t max_df = std::max<uint32_t>(2, index.n_chunks() / 5);
    std::vector<std::pair<double, uint64_t>> rare;
    for (const TermCount& t : count_terms(best)) {
        const uint32_t df = index.df(t.term);
        const auto it = query.find(t.term);
        const bool asked = it != query.end() && it->second >= 1.0;
        if (!asked && df >= 1 && df <= max_df) rare.emplace_back(index.idf(t.term), t.term);
    }
    std::sort(rare.begin(), rare.end(), std::greater<>());
    if (rare.size() > static_cast<size_t>(n_terms)) rare.resize(static_cast<size_t>(n_terms));
    std::vector<WeightedTerm> out;
    for (const auto& [idf, term] : rare) out.push_back({term, 1.0});
    return out;
}

// A second hop is a sentence naming the entity the first hop led to ("the black tin is kept
// in..."): chunk-level BM25 also rewards chunks where the entity's words sit in different
// sentences, so the best hits are reordered by their best single sentence's idf-weighted
// overlap with the expansion (BM25 breaking ties).
void rerank_by_sentence(std::vector<uint32_t>& hits, std::span<const WeightedTerm> q2, const std::vector<double>& s2,
                        const Bm25Index& index, const ChunkTextFn& text) {
    constexpr size_t kRescored = 64;
    const size_t n = std::min(hits.size(), kRescored);
    std::unordered_map<uint64_t, double> idf;
    for (const WeightedTerm& t : q2) idf[t.term] = index.idf(t.term);
    std::vector<double> best(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
        const std::string_view chunk = text(hits[i]);
        for (const auto& [b, e] : split_sentences(chunk)) {
            double overlap = 0;
            for (const TermCount& t : count_terms(chunk.substr(b, e - b)))
                if (const auto it = idf.find(t.term); it != idf.end()) overlap += it->second;
            best[i] = std::max(best[i], overlap);
        }
    }
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return best[a] != best[b] ? best[a] > best[b] : s2[hits[a]] > s2[hits[b]]; });
    std::vector<uint32_t> head(n);
    for (size_t i = 0; i < n; ++i) head[i] = hits[order[i]];
    std::copy(head.begin(), head.end(), hits.begin());
}

// A chunk's bag of words weighted by idf and L2-normalised, for MMR's similarity.
struct Profile {
    std::vector<std::pair<uint64_t, double>> terms;  // ascending term
};

Profile profile_of(const Session& session, uint32_t chunk, std::unordered_map<uint64_t, double>& idf_cache) {
    Profile p;
    double norm = 0;
    for (const TermCount& t : session.chunk_terms(chunk)) {
        auto [it, fresh] = idf_cache.try_emplace(t.term, 0.0);
        if (fresh) it->second = session.index().idf(t.term);
        const double w = it->second * (1.0 + std::log(static_cast<double>(t.count)));
        p.terms.emplace_back(t.term, w);
        norm += w * w;
    }
    norm = norm > 0 ? 1.0 / std::sqrt(norm) : 0.0;
    for (auto& [term, w] : p.terms) w *= norm;
    return p;
}

double cosine(const Profile& a, const Profile& b) {
    double s = 0;
    size_t i = 0, j = 0;
    while (i < a.terms.size() && j < b.terms.size()) {
        if (a.terms[i].first < b.terms[j].first) ++i;
        else if (a.terms[i].first > b.terms[j].first) ++j;
        else s += a.terms[i++].second * b.terms[j++].second;
    }
    return s;
}

// MMR: greedy, keeping each candidate's highest similarity to the picked ones.
void mmr_into(const Session& session, const std::vector<RankedChunk>& ranked, double lambda, std::vector<RankedChunk>& out) {
    std::unordered_map<uint64_t, double> idf_cache;
    std::vector<Profile> profiles;
    profiles.reserve(ranked.size());
    for (const RankedChunk& r : ranked) profiles.push_back(profile_of(session, r.chunk, idf_cache));
    std::vector<double> max_sim(ranked.size(), 0.0);
    std::vector<bool> taken(ranked.size(), false);
    out.reserve(ranked.size());
    for (size_t step = 0; step < ranked.size(); ++step) {
        size_t best = ranked.size();
        double best_score = -1e300;
        for (size_t i = 0; i < ranked.size(); ++i) {
            if (taken[i]) continue;
            const double s = lambda * ranked[i].relevance - (1.0 - lambda) * max_sim[i];
            if (s > best_score) {
                best_score = s;
                best = i;
            }
        }
        taken[best] = true;
        out.push_back(ranked[best]);
        for (size_t i = 0; i < ranked.size(); ++i)
            if (!taken[i]) max_sim[i] = std::max(max_sim[i], cosine(profiles[i], profiles[best]));
    }
}

// The `n` candidates nearest to the query's vector (stored vectors only), nearest first; empty
// when the query cannot be embedded (the embedder threw, or its vectors' size is not the stored
// ones').
std::vector<uint32_t> nearest(const Session& session, std::span<const uint32_t> candidates, std::span<const QueryPart> query,
                              size_t n, Embedder& embedder) {
    const DenseIndex& dense = session.dense;
    if (std::none_of(candidates.begin(), candidates.end(), [&](uint32_t c) { return dense.has(c); })) return {};
    std::string text;  // the question's own parts when there are any, else all
    for (const QueryPart& p : query)
        if (p.question) text.append(p.text).append("\n");
    if (text.empty())
        for (const QueryPart& p : query) text.append(p.text).append("\n");
    std::vector<float> q;
    try {
        q = embedder.embed_query(text);
    } catch (const std::exception&) {
        return {};
    }
    if (q.size() != dense.dims()) return {};
    std::vector<std::pair<double, uint32_t>> near;
    for (uint32_t c : candidates)
        if (dense.has(c)) near.emplace_back(dense.dot(c, q), c);
    n = std::min(n, near.size());
    std::partial_sort(near.begin(), near.begin() + static_cast<ptrdiff_t>(n), near.end(),
                      [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    std::vector<uint32_t> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = near[i].second;
    return out;
}

// BM25 rounds 1 and 2, dense ranks, the reranker, MMR: the general context.
RetrievalOutput rank_general(const Session& session, std::span<const uint32_t> candidates, std::span<const uint32_t> visible,
                             std::span<const QueryPart> query, size_t pool, const ChunkTextFn& text, const RetrievalOptions& o) {
    RetrievalOutput out;
    out.mode = "bm25";
    const Bm25Index& index = session.index();
    pool = std::clamp(pool, static_cast<size_t>(o.min_pool), static_cast<size_t>(std::max(o.min_pool, o.max_pool)));

    // Round 1.
    const std::vector<WeightedTerm> q1 = query_terms(query);
    std::vector<double> s1;
    index.score(q1, o.bm25, s1);
    const std::vector<uint32_t> hits1 = top_n(s1, candidates, pool);
    // Ranks become positions in one list: a round-1 hit at rank r sits at r; the hits of the
    // expansion from a first hop at rank r sit right after it, one per slot, interleaved with
    // the round-1 hits that follow. Relevance falls with position.
    const size_t n_expand = static_cast<size_t>(std::max(0, o.expansion_hits));
    std::vector<uint32_t> sources = top_n(s1, visible, 2 * n_expand);  // first hops may be in the prompt already
    for (size_t i = 0; i < hits1.size() && i < 2 * n_expand; ++i) sources.push_back(hits1[i]);
    std::sort(sources.begin(), sources.end(), [&](uint32_t a, uint32_t b) { return s1[a] != s1[b] ? s1[a] > s1[b] : a < b; });
    std::unordered_map<uint32_t, double> position;
    auto place = [&](uint32_t c, double p) {
        auto [it, fresh] = position.try_emplace(c, p);
        if (!fresh) it->second = std::min(it->second, p);
    };
    for (size_t r = 0; r < hits1.size(); ++r) place(hits1[r], static_cast<double>(r));

    // Round 2.
    std::unordered_map<uint64_t, double> qset;
    for (const WeightedTerm& t : q1) qset[t.term] = t.weight;
    std::vector<double> s2;
    size_t expanded = 0;
    for (size_t r = 0; r < sources.size() && expanded < n_expand; ++r) {
        const uint32_t hit = sources[r];
        const std::vector<WeightedTerm> q2 = expansion_for(text(hit), qset, index, o.expansion_terms);
        if (q2.empty()) continue;  // e.g. the question itself
        ++expanded;
        std::fill(s2.begin(), s2.end(), 0.0);
        index.score(q2, o.bm25, s2);
        std::vector<uint32_t> hits2 = top_n(s2, candidates, pool / 4 + 1);
        rerank_by_sentence(hits2, q2, s2, index, text);
        for (size_t j = 0; j < hits2.size(); ++j)
            place(hits2[j], static_cast<double>(r) + 0.5 + static_cast<double>(j) / o.expansion_weight);
    }
    // Dense ranks interleaved: the nearest chunk by vector at rank k sits at position k too, so
    // each list's best come first whatever the other says (a fact in other words than the
    // question's); a chunk both lists hold sits half a place before the better of its two.
    if (o.embedder && session.dense.count() > 0) {
        if (const std::vector<uint32_t> near = nearest(session, candidates, query, pool, *o.embedder); !near.empty()) {
            for (size_t k = 0; k < near.size(); ++k) {
                auto [it, fresh] = position.try_emplace(near[k], static_cast<double>(k));
                if (!fresh) it->second = std::max(0.0, std::min(it->second, static_cast<double>(k)) - 0.5);
            }
            out.mode = "bm25+dense";
        }
    }
    if (position.empty()) return out;

    std::vector<RankedChunk> ranked;
    ranked.reserve(position.size());
    for (const auto& [c, p] : position) ranked.push_back({c, 1.0 / (1.0 + p / 16.0)});  // relevance in (0, 1]
    auto better = [](const RankedChunk& a, const RankedChunk& b) {
        return a.relevance != b.relevance ? a.relevance > b.relevance : a.chunk < b.chunk;
    };
    std::sort(ranked.begin(), ranked.end(), better);
    if (ranked.size() > pool) ranked.resize(pool);

    if (o.reranker) {
        // Reciprocal-rank fusion (k = 60) of the BM25 order and the reranker's.
        std::vector<std::string_view> passages;
        for (const RankedChunk& r : ranked) passages.push_back(text(r.chunk));
        std::string joined;
        for (const QueryPart& p : query) joined.append(p.text).append("\n");
        // A reranker that fails (its lane down or slow) leaves the BM25 order: mode "bm25".
        std::vector<double> rr;
        try {
            rr = o.reranker->score(joined, passages);
        } catch (const std::exception&) {
            rr.clear();
        }
        if (rr.size() == ranked.size()) {
            std::vector<size_t> order(ranked.size());
            for (size_t i = 0; i < order.size(); ++i) order[i] = i;
            std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rr[a] > rr[b]; });
            std::vector<double> fused(ranked.size());
            for (size_t i = 0; i < ranked.size(); ++i) fused[i] += 1.0 / (60.0 + static_cast<double>(i + 1));
            for (size_t k = 0; k < order.size(); ++k) fused[order[k]] += 1.0 / (60.0 + static_cast<double>(k + 1));
            const double top = *std::max_element(fused.begin(), fused.end());
            for (size_t i = 0; i < ranked.size(); ++i) ranked[i].relevance = fused[i] / top;
            std::sort(ranked.begin(), ranked.end(), better);
            out.mode += "+rerank";
        }
    }

    mmr_into(session, ranked, o.mmr_lambda, out.ranked);
    return out;
}

}  // namespace

RetrievalOutput retrieve(const Session& session, std::span<const uint32_t> candidates, std::span<const uint32_t> visible,
                         std::span<const QueryPart> query, size_t pool, const ChunkTextFn& text, const RetrievalOptions& o) {
    RetrievalOutput general = rank_general(session, candidates, visible, query, pool, text, o);
    std::vector<QueryPart> question;
    for (const QueryPart& p : query)
        if (p.question) question.push_back(p);
    if (question.empty()) return general;
    std::vector<uint8_t> kind(session.n_chunks(), 0);
    for (uint32_t c : visible) kind[c] = 2;
    for (uint32_t c : candidates) kind[c] = 1;
    const CoveredFacts facts = cover_facts(session, kind, question, text, o.coverage);
    if (facts.picks.empty()) return general;
    RetrievalOutput out;
    out.mode = general.mode;
    out.facts = static_cast<int>(facts.picks.size());
    out.ranked = facts.picks;
    out.ranked.insert(out.ranked.end(), general.ranked.begin(), general.ranked.end());
    return out;
}

}  // namespace strata::gateway
