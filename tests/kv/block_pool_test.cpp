// Paged-KV bookkeeping: allocation, sharing, the prefix cache's chain lookup, LRU eviction.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "kv/block_pool.h"
#include "util/error.h"

namespace strata::kv {
namespace {

std::vector<int32_t> seq_tokens(size_t n, int32_t base) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = base + static_cast<int32_t>(i * 7 % 101);
    return t;
}

// Allocates and commits blocks for tokens (whole blocks only), as a sequence would.
std::vector<int32_t> fill(BlockPool& p, const std::vector<int32_t>& toks) {
    std::vector<int32_t> blocks;
    const size_t bs = static_cast<size_t>(p.block_size());
    for (size_t i = 0; i + bs <= toks.size(); i += bs) {
        const int32_t b = p.allocate();
        EXPECT_GE(b, 0);
        const int32_t c = p.commit(b, blocks.empty() ? -1 : blocks.back(), std::span<const int32_t>(toks.data() + i, bs));
        if (c != b) {
            p.retain(c);
            p.release(b);
        }
        blocks.push_back(c);
    }
    return blocks;
}

TEST(BlockPool, AllocatesEveryBlockOnceThenRefuses) {
    BlockPool p(5, 4);
    std::vector<int32_t> got;
    for (int i = 0; i < 5; ++i) got.push_back(p.allocate());
    EXPECT_EQ(p.allocate(), -1);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(p.n_in_use(), 5);
    p.release(3);
    EXPECT_EQ(p.allocate(), 3);
    EXPECT_THROW(p.release(p.n_blocks() + 1), std::exception);
}

TEST(BlockPool, MatchFindsTheLongestCachedPrefixAndVerifiesTokens) {
    BlockPool p(64, 4);
    const auto a = seq_tokens(20, 1);
    const auto blocks = fill(p, a);  // 5 full blocks
    ASSERT_EQ(blocks.size(), 5u);
    for (int32_t b : blocks) p.release(b);  // cached, unused
    EXPECT_EQ(p.n_cached(), 5);

    EXPECT_EQ(p.match(a, 100), blocks);
    EXPECT_EQ(p.match(a, 3), std::vector<int32_t>(blocks.begin(), blocks.begin() + 3));
    // Diverging in block 2: blocks 0 and 1 only.
    auto b = a;
    b[9] += 1000;
    EXPECT_EQ(p.match(b, 100), std::vector<int32_t>(blocks.begin(), blocks.begin() + 2));
    // The same block of tokens after a different prefix is a different block.
    auto c = a;
    c[0] += 1000;
    EXPECT_TRUE(p.match(c, 100).empty());
    // A partial block never matches.
    EXPECT_EQ(p.match(std::vector<int32_t>(a.begin(), a.begin() + 7), 100).size(), 1u);
}

TEST(BlockPool, EqualPrefixesShareBlocks) {
    BlockPool p(64, 4);
    const auto a = seq_tokens(16, 3);
    const auto first = fill(p, a);
    const auto second = fill(p, a);  // committing the same content hands back the first blocks
    EXPECT_EQ(first, second);
    for (int32_t b : first) EXPECT_EQ(p.ref_count(b), 2);
    EXPECT_EQ(p.n_in_use(), 4);
}

TEST(BlockPool, EvictsLeastRecentlyReleasedTailFirst) {
    BlockPool p(6, 2);
    const auto a = seq_tokens(6, 10), b = seq_tokens(6, 500);
    const auto ba = fill(p, a), bb = fill(p, b);
    // Release a's blocks last-first (as the scheduler does), then b's.
    for (auto it = ba.rbegin(); it != ba.rend(); ++it) p.release(*it);
    for (auto it = bb.rbegin(); it != bb.rend(); ++it) p.release(*it);
    EXPECT_EQ(p.n_available(), 6);
    // Two new blocks evict a's tail first: a keeps its first block cached.
    int evicted = 0;
    p.on_evict = [&](int32_t) { ++evicted; };
    ASSERT_GE(p.allocate(), 0);
    ASSERT_GE(p.allocate(), 0);
    EXPECT_EQ(evicted, 2);
    EXPECT_EQ(p.match(a, 10).size(), 1u);
    EXPECT_EQ(p.match(b, 10).size(), 3u);
}

TEST(BlockPool, RetainingACachedBlockTakesItOffTheFreeList) {
    BlockPool p(3, 2);
    const auto a = seq_tokens(4, 1);
    const auto blocks = fill(p, a);
    for (int32_t b : blocks) p.release(b);
    const auto hit = p.match(a, 10);
    ASSERT_EQ(hit.size(), 2u);
    for (int32_t b : hit) p.retain(b);
    EXPECT_EQ(p.n_available(), 1);
    EXPECT_GE(p.allocate(), 0);
    EXPECT_EQ(p.allocate(), -1);  // the retained cached blocks are not evicted
    EXPECT_EQ(p.match(a, 10), hit);
}

// Random operations against a plain model of the pool: counts always add up and a match
// always returns blocks whose committed tokens equal the query.
TEST(BlockPool, RandomOperationsKeepTheBooksStraight) {
    std::mt19937 rng(7);
    BlockPool p(40, 3);
    std::vector<std::vector<int32_t>> live;  // block lists of live sequences
    std::vector<std::vector<int32_t>> texts;
    for (int iter = 0; iter < 3000; ++iter) {
        const int op = static_cast<int>(rng() % 3);
        if (op == 0 && p.n_available() >= 4) {
            // A new sequence: a random prefix of a few shared texts.
            std::vector<int32_t> t;
            const int32_t base = static_cast<int32_t>(rng() % 4);
            const size_t len = 3 * (1 + rng() % 4);
            for (size_t i = 0; i < len; ++i) t.push_back(base * 100 + static_cast<int32_t>(i % 5));
            auto hit = p.match(t, 100);
            for (size_t i = 0; i < hit.size(); ++i)
                for (size_t j = 0; j < 3; ++j) ASSERT_EQ(t[i * 3 + j], base * 100 + static_cast<int32_t>((i * 3 + j) % 5));
            for (int32_t b : hit) p.retain(b);
            std::vector<int32_t> blocks = hit;
            for (size_t i = hit.size() * 3; i + 3 <= t.size(); i += 3) {
                const int32_t b = p.allocate();
                ASSERT_GE(b, 0);
                const int32_t c = p.commit(b, blocks.empty() ? -1 : blocks.back(), std::span<const int32_t>(t.data() + i, 3));
                if (c != b) {
                    p.retain(c);
                    p.release(b);
                }
                blocks.push_back(c);
            }
            live.push_back(blocks);
        } else if (!live.empty()) {
            const size_t k = rng() % live.size();
            for (auto it = live[k].rbegin(); it != live[k].rend(); ++it) p.release(*it);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        }
        int64_t refs = 0;
        for (const auto& l : live) refs += static_cast<int64_t>(l.size());
        int64_t counted = 0;
        for (int32_t b = 0; b < p.n_blocks(); ++b) counted += p.ref_count(b);
        ASSERT_EQ(refs, counted);
        ASSERT_EQ(p.n_in_use() + p.n_available(), p.n_blocks());
    }
}

}  // namespace
}  // namespace strata::kv
