// Prompt lookup drafts (runtime/prompt_lookup.h) against a plain search over the same tokens:
// for random token streams with repeats, draft(k) must equal what a scan for the latest earlier
// occurrence of the longest matching suffix (max_ngram down to min_ngram) gives.
#include "runtime/prompt_lookup.h"

#include <gtest/gtest.h>

#include <random>

#include "util/error.h"

namespace strata::runtime {
namespace {

// The reference: a scan, longest n first, latest occurrence first.
std::vector<int32_t> scan_draft(const std::vector<int32_t>& t, int k, int min_n, int max_n) {
    const size_t len = t.size();
    for (int n = max_n; n >= min_n; --n) {
        if (static_cast<size_t>(n) > len) continue;
        for (size_t follow = len - 1; follow >= static_cast<size_t>(n); --follow) {
            // tokens [follow - n, follow) equal the last n, and follow < len
            if (std::equal(t.begin() + static_cast<std::ptrdiff_t>(follow - n), t.begin() + static_cast<std::ptrdiff_t>(follow),
                           t.end() - n))
                return {t.begin() + static_cast<std::ptrdiff_t>(follow),
                        t.begin() + static_cast<std::ptrdiff_t>(std::min(len, follow + static_cast<size_t>(k)))};
            if (follow == static_cast<size_t>(n)) break;
        }
    }
    return {};
}

TEST(PromptLookup, DraftsEqualAPlainScanOnRandomStreamsWithRepeats) {
    for (int seed = 0; seed < 20; ++seed) {
        std::mt19937 rng(static_cast<unsigned>(seed));
        const int vocab = 3 + seed % 40;  // small vocabularies repeat n-grams often
        const int min_n = 1 + seed % 2, max_n = min_n + seed % 4;
        PromptLookup pl({.min_ngram = min_n, .max_ngram = max_n});
        std::vector<int32_t> t;
        for (int i = 0; i < 3000; ++i) {
            // Now and then copy a stretch from earlier (what quoting and code edits do).
            if (!t.empty() && rng() % 50 == 0) {
                const size_t from = rng() % t.size(), n = 1 + rng() % 30;
                for (size_t j = 0; j < n && from + j < t.size(); ++j) {
                    const int32_t x = t[from + j];
                    t.push_back(x);
                    pl.push(x);
                }
            } else {
                const auto x = static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
                t.push_back(x);
                pl.push(x);
            }
            if (i % 7 == 0) {
                const int k = 1 + static_cast<int>(rng() % 8);
                ASSERT_EQ(pl.draft(k), scan_draft(t, k, min_n, max_n)) << "seed " << seed << " at " << t.size();
            }
        }
        EXPECT_EQ(pl.size(), t.size());
    }
}

TEST(PromptLookup, ContinuesAQuotedPassage) {
    // "the quick brown fox jumps over the lazy dog" as ids, quoted again: after "the quick" the
    // draft is the rest of the sentence.
    const std::vector<int32_t> s = {10, 11, 12, 13, 14, 15, 10, 16, 17};
    PromptLookup pl;
    pl.push(s);
    pl.push(std::vector<int32_t>{99, 98, 10, 11});
    EXPECT_EQ(pl.draft(4), (std::vector<int32_t>{12, 13, 14, 15}));
    EXPECT_EQ(pl.draft(100), (std::vector<int32_t>{12, 13, 14, 15, 10, 16, 17, 99, 98, 10, 11}));
    // The latest occurrence wins: "10 16" now follows "15 10" later too.
    PromptLookup q;
    q.push(std::vector<int32_t>{1, 2, 3, 1, 2, 4, 1, 2});
    EXPECT_EQ(q.draft(1), (std::vector<int32_t>{4}));
    // Nothing repeated: no draft.
    PromptLookup none;
    none.push(std::vector<int32_t>{1, 2, 3, 4, 5});
    EXPECT_TRUE(none.draft(4).empty());
    EXPECT_TRUE(PromptLookup().draft(4).empty());
}

TEST(PromptLookup, BadSizesAreErrors) {
    EXPECT_THROW(PromptLookup({.min_ngram = 0, .max_ngram = 2}), Error);
    EXPECT_THROW(PromptLookup({.min_ngram = 3, .max_ngram = 2}), Error);
    EXPECT_THROW(PromptLookup({.min_ngram = 1, .max_ngram = 17}), Error);
}

}  // namespace
}  // namespace strata::runtime
