// CPU attention through paged KV (random block tables) at every instruction-set level against
// a plain double-precision reference on random data: a tile of queries at consecutive positions,
// a query alone equal bit for bit to the same query in a tile, and the backend's whole attention
// op (GQA groups, two sequences, causal positions per token).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu_attention.h"
#include "backend/cpu_backend.h"
#include "test_util.h"
#include "util/error.h"

namespace strata::backend {
namespace {

struct Case {
    int64_t n_head, n_head_kv, dk, dv, n_ctx, block_size;
};

// Softmax(q k^T * scale) v for one head against rows 0..n_ctx-1 of a contiguous cache.
std::vector<double> reference(const float* q, const std::vector<float>& k, const std::vector<float>& v, int64_t k_row,
                              int64_t v_row, int64_t k_off, int64_t v_off, int64_t dk, int64_t dv, int64_t n_ctx, float scale) {
    std::vector<double> s(static_cast<size_t>(n_ctx));
    double mx = -1e300;
    for (int64_t j = 0; j < n_ctx; ++j) {
        double d = 0;
        for (int64_t i = 0; i < dk; ++i) d += static_cast<double>(q[i]) * k[static_cast<size_t>(j * k_row + k_off + i)];
        s[static_cast<size_t>(j)] = d * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
    }
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - mx));
    std::vector<double> o(static_cast<size_t>(dv), 0.0);
    for (int64_t j = 0; j < n_ctx; ++j)
        for (int64_t i = 0; i < dv; ++i)
            o[static_cast<size_t>(i)] += s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(j * v_row + v_off + i)];
    return o;
}

class AttentionKernels : public testing::TestWithParam<Case> {};

TEST_P(AttentionKernels, PagedTileMatchesReferenceAtEveryLevel) {
    const Case c = GetParam();
    const int64_t group = c.n_head / c.n_head_kv, k_row = c.n_head_kv * c.dk, v_row = c.n_head_kv * c.dv;
    const int64_t n_blocks = (c.n_ctx + c.block_size - 1) / c.block_size;
    // Logical rows (contiguous, for the reference) and a shuffled physical placement.
    const auto k = test::random_floats(static_cast<size_t>(n_blocks * c.block_size * k_row), 1);
    const auto v = test::random_floats(static_cast<size_t>(n_blocks * c.block_size * v_row), 2);
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(4));
    const int64_t pool_blocks = n_blocks + 3;
    std::vector<float> kp(static_cast<size_t>(pool_blocks * c.block_size * k_row), 7.0f),
        vp(static_cast<size_t>(pool_blocks * c.block_size * v_row), 7.0f);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t phys = table[static_cast<size_t>(b)] + 2;
        table[static_cast<size_t>(b)] = static_cast<int32_t>(phys);
        std::copy_n(k.begin() + b * c.block_size * k_row, c.block_size * k_row, kp.begin() + phys * c.block_size * k_row);
        std::copy_n(v.begin() + b * c.block_size * v_row, c.block_size * v_row, vp.begin() + phys * c.block_size * v_row);
    }
    KvCacheView view{kp.data(), vp.data(), table.data(), n_blocks, c.block_size};
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.dk));
    // A tile of queries at the last positions (up to kAttentionTile), each attending causally.
    const int64_t n_q = std::min<int64_t>(c.n_ctx, 5);
    std::vector<int32_t> pos(static_cast<size_t>(n_q));
    for (int64_t i = 0; i < n_q; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(c.n_ctx - n_q + i);
    const auto qs = test::random_floats(static_cast<size_t>(n_q * c.n_head * c.dk), 3);
    for (util::Isa isa : {util::Isa::Scalar, util::Isa::Avx2, util::Isa::Avx512}) {
        if (!util::isa_supported(isa)) {
            std::printf("  (%s not supported here: skipped)\n", util::isa_name(isa));
            continue;
        }
        for (int64_t hk = 0; hk < c.n_head_kv; ++hk) {
            std::vector<float> out(static_cast<size_t>(n_q * c.n_head * c.dv), -1.0f);
            AttentionTileTask t;
            t.q = qs.data() + hk * group * c.dk;
            t.q_token_stride = c.n_head * c.dk;
            t.out = out.data() + hk * group * c.dv;
            t.out_token_stride = c.n_head * c.dv;
            t.pos = pos.data();
            t.n_queries = n_q;
            t.group = group;
            t.head_dim_k = c.dk;
            t.head_dim_v = c.dv;
            t.kv = &view;
            t.k_offset = hk * c.dk;
            t.v_offset = hk * c.dv;
            t.k_row = k_row;
            t.v_row = v_row;
            t.scale = scale;
            attention_tile_kernel(isa)(t);
            for (int64_t i = 0; i < n_q; ++i)
                for (int64_t h = 0; h < group; ++h) {
                    const float* qh = t.q + i * t.q_token_stride + h * c.dk;
                    const auto ref = reference(qh, k, v, k_row, v_row, hk * c.dk, hk * c.dv, c.dk, c.dv,
                                               pos[static_cast<size_t>(i)] + 1, scale);
                    const float* o = t.out + i * t.out_token_stride + h * c.dv;
                    double num = 0, den = 0;
                    for (int64_t d = 0; d < c.dv; ++d) {
                        const double e = o[d] - ref[static_cast<size_t>(d)];
                        num += e * e;
                        den += ref[static_cast<size_t>(d)] * ref[static_cast<size_t>(d)];
                    }
                    EXPECT_LT(std::sqrt(num / den), 1e-5)
                        << util::isa_name(isa) << " kv head " << hk << " query " << i << " head " << h;
                }
            // A query alone gives bit-identical output to the same query inside the tile.
            const int64_t pick = n_q > 1 ? 1 : 0;
            std::vector<float> alone(static_cast<size_t>(c.n_head * c.dv), -1.0f);
            AttentionTileTask one = t;
            one.q = t.q + pick * t.q_token_stride;
            one.pos = pos.data() + pick;
            one.out = alone.data() + hk * group * c.dv;
            one.n_queries = 1;
            attention_tile_kernel(isa)(one);
            const float* in_tile = out.data() + pick * c.n_head * c.dv + hk * group * c.dv;
            for (int64_t d = 0; d < group * c.dv; ++d) ASSERT_EQ(one.out[d], in_tile[d]) << "batch invariance";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernels,
                         testing::Values(Case{8, 2, 64, 64, 1, 16}, Case{8, 2, 64, 64, 37, 16}, Case{4, 4, 128, 128, 300, 16},
                                         Case{16, 2, 80, 48, 129, 7}, Case{32, 4, 128, 128, 513, 64}, Case{6, 3, 17, 9, 50, 50}));

TEST(CpuBackendAttention, CausalPerTokenWithMixedSequences) {
    // Two sequences in one call; every token attends to its own sequence up to its position.
    CpuBackend be(2);
    const int64_t n_head = 8, n_kv = 2, d = 32, bs = 4, cap = 40;
    std::vector<float> k0 = test::random_floats(static_cast<size_t>(cap * n_kv * d), 11), v0 = test::random_floats(k0.size(), 12);
    std::vector<float> k1 = test::random_floats(k0.size(), 13), v1 = test::random_floats(k0.size(), 14);
    std::vector<int32_t> table(static_cast<size_t>(cap / bs));
    std::iota(table.begin(), table.end(), 0);
    KvCacheView a{k0.data(), v0.data(), table.data(), cap / bs, bs}, b{k1.data(), v1.data(), table.data(), cap / bs, bs};
    const std::vector<int32_t> pos = {0, 5, 6, 39, 17};
    const std::vector<const KvCacheView*> kv = {&a, &a, &a, &b, &b};
    const auto q = test::random_floats(static_cast<size_t>(5 * n_head * d), 15);
    std::vector<float> out(static_cast<size_t>(5 * n_head * d));
    AttentionArgs args;
    args.q = q.data();
    args.out = out.data();
    args.n_tokens = 5;
    args.n_head = n_head;
    args.n_head_kv = n_kv;
    args.head_dim_k = args.head_dim_v = d;
    args.scale = 0.2f;
    args.pos = pos.data();
    args.kv = kv.data();
    be.attention(args);
    for (int64_t t = 0; t < 5; ++t)
        for (int64_t h = 0; h < n_head; ++h) {
            const auto& kk = kv[static_cast<size_t>(t)] == &a ? k0 : k1;
            const auto& vv = kv[static_cast<size_t>(t)] == &a ? v0 : v1;
            const auto ref = reference(q.data() + (t * n_head + h) * d, kk, vv, n_kv * d, n_kv * d, h / 4 * d, h / 4 * d, d, d,
                                       pos[static_cast<size_t>(t)] + 1, 0.2f);
            for (int64_t i = 0; i < d; ++i)
                EXPECT_NEAR(out[static_cast<size_t>((t * n_head + h) * d + i)], ref[static_cast<size_t>(i)], 2e-5);
        }
    // f16 caches are a GPU backend's: the CPU backend names the problem instead of misreading them.
    EXPECT_EQ(be.kv_type(true), KvType::F32);
    KvCacheView half{k0.data(), v0.data(), table.data(), cap / bs, bs, KvType::F16};
    const std::vector<const KvCacheView*> hk(5, &half);
    args.kv = hk.data();
    EXPECT_THROW(be.attention(args), Error);
    EXPECT_THROW(be.kv_store(hk.data(), pos.data(), 1, k0.data(), n_kv * d, v0.data(), n_kv * d), Error);
}

}  // namespace
}  // namespace strata::backend
