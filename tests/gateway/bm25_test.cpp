// BM25 ranking against a plain reference scorer over term strings, on a small random corpus.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "gateway/context/bm25_index.h"
#include "gateway/context/terms.h"
#include "test_util.h"

namespace strata::gateway {
namespace {

// The textbook formula over strings: no hashing, no incremental state.
double reference_bm25(const std::vector<std::vector<std::string>>& docs, size_t d, const std::vector<std::string>& query) {
    const double k1 = 1.2, b = 0.75, n = static_cast<double>(docs.size());
    double avgdl = 0;
    for (const auto& doc : docs) avgdl += static_cast<double>(doc.size());
    avgdl /= n;
    double score = 0;
    for (const std::string& q : std::set<std::string>(query.begin(), query.end())) {
        double df = 0;
        for (const auto& doc : docs) df += std::count(doc.begin(), doc.end(), q) > 0 ? 1 : 0;
        const double tf = static_cast<double>(std::count(docs[d].begin(), docs[d].end(), q));
        if (tf == 0) continue;
        const double idf = std::log(1.0 + (n - df + 0.5) / (df + 0.5));
        score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * static_cast<double>(docs[d].size()) / avgdl));
    }
    return score;
}

TEST(GatewayBm25, MatchesReferenceScorer) {
    std::mt19937 rng(5);
    const std::vector<std::string> vocab = {"alpha", "beta", "gamma", "delta", "river", "stone", "lamp",
                                            "42",    "7",    "north", "south", "quiet", "ember", "zinc"};
    for (int64_t round = 0; round < test::scaled(20, 4); ++round) {
        std::vector<std::vector<std::string>> docs;
        std::vector<std::string> texts;
        Bm25Index index;
        const int n_docs = 5 + static_cast<int>(rng() % 40);
        for (int d = 0; d < n_docs; ++d) {
            std::vector<std::string> words;
            std::string text;
            const int len = 1 + static_cast<int>(rng() % 30);
            // Zipf-ish: early words are common.
            for (int i = 0; i < len; ++i) {
                const size_t w = std::min<size_t>(vocab.size() - 1,
                                                  static_cast<size_t>(std::abs(std::normal_distribution<double>(0, 4)(rng))));
                words.push_back(vocab[w]);
                text += vocab[w] + (rng() % 3 ? " " : ", ");
            }
            ASSERT_EQ(split_terms(text), words);
            docs.push_back(words);
            index.add(static_cast<uint32_t>(d), count_terms(text));
        }
        std::vector<std::string> query{vocab[rng() % vocab.size()], vocab[rng() % vocab.size()], vocab[rng() % vocab.size()]};
        std::vector<WeightedTerm> q;
        for (const auto& t : count_terms(query[0] + " " + query[1] + " " + query[2])) q.push_back({t.term, 1.0});
        std::vector<double> scores;
        index.score(q, {}, scores);
        ASSERT_EQ(scores.size(), docs.size());
        for (size_t d = 0; d < docs.size(); ++d) EXPECT_NEAR(scores[d], reference_bm25(docs, d, query), 1e-9) << "doc " << d;
    }
}

TEST(GatewayBm25, RareTermOutranksCommonOnes) {
    Bm25Index index;
    const std::vector<std::string> texts = {"the cat sat on the mat", "the dog sat on the log",
                                            "the zeppelin landed near the mat", "the cat and the dog", "a mat and a log"};
    for (size_t i = 0; i < texts.size(); ++i) index.add(static_cast<uint32_t>(i), count_terms(texts[i]));
    std::vector<WeightedTerm> q;
    for (const auto& t : count_terms("where did the zeppelin land on the mat")) q.push_back({t.term, 1.0});
    std::vector<double> s;
    index.score(q, {}, s);
    EXPECT_EQ(std::max_element(s.begin(), s.end()) - s.begin(), 2);
    EXPECT_GT(index.idf(term_hash("zeppelin")), index.idf(term_hash("the")));
    EXPECT_EQ(index.df(term_hash("mat")), 3u);
    EXPECT_THROW(index.add(9, count_terms("out of order")), std::exception);
}

}  // namespace
}  // namespace strata::gateway
