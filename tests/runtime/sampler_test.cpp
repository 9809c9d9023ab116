// Sampler: the distribution of draws against an exact reference (chi-squared, fixed seeds, so
// nothing can flake), greedy, seeds and the draw stream, penalties, logprobs, validation, and
// the candidate set on a 151,936-token vocabulary against a sort-based reference.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "util/error.h"

namespace strata::runtime {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int32_t kQwenVocab = 151936;

// ---- reference: plain double arithmetic, full sort ----

struct History {
    std::vector<int32_t> prompt;
    std::vector<int32_t> generated;
};

// Steps 1-3 of sampler.h, written from the definitions.
std::vector<double> reference_adjusted(const std::vector<float>& logits, const SamplingParams& p, const History& h,
                                       const TokenMask* mask) {
    const size_t n = logits.size();
    std::vector<double> x(logits.begin(), logits.end());
    for (const auto& [id, bias] : p.logit_bias) x[static_cast<size_t>(id)] += bias;
    std::map<int32_t, int> seen, gen_count;
    for (int32_t t : h.prompt) seen[t] = 1;
    for (int32_t t : h.generated) {
        seen[t] = 1;
        ++gen_count[t];
    }
    for (const auto& [id, _] : seen) {
        double& v = x[static_cast<size_t>(id)];
        v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    }
    for (const auto& [id, c] : gen_count)
        x[static_cast<size_t>(id)] -= p.presence_penalty * (c > 0 ? 1.0 : 0.0) + p.frequency_penalty * c;
    if (mask)
        for (size_t i = 0; i < n; ++i)
            if (!mask->allows(static_cast<int32_t>(i))) x[i] = -std::numeric_limits<double>::infinity();
    return x;
}

struct ReferenceSet {
    std::vector<double> probs;  // [n], 0 outside the set, sums to 1
    bool ambiguous = false;     // a boundary within rounding distance: the exact set is not well defined
};

// Steps 5-9 on adjusted logits: sort by (logit desc, id asc), then each truncation on that list.
ReferenceSet reference_distribution(const std::vector<double>& adjusted, const SamplingParams& p) {
    const size_t n = adjusted.size();
    std::vector<int32_t> order;
    for (size_t i = 0; i < n; ++i)
        if (std::isfinite(adjusted[i])) order.push_back(static_cast<int32_t>(i));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const double la = adjusted[static_cast<size_t>(a)], lb = adjusted[static_cast<size_t>(b)];
        return la > lb || (la == lb && a < b);
    });
    ReferenceSet ref;
    const double max_logit = adjusted[static_cast<size_t>(order[0])];
    std::vector<double> w(order.size());
    for (size_t j = 0; j < order.size(); ++j) {
        const double scaled = (adjusted[static_cast<size_t>(order[j])] - max_logit) / p.temperature;
        w[j] = scaled < -87 ? 0 : std::exp(scaled);  // the sampler's documented underflow rule
        if (std::fabs(scaled + 87) < 1e-3) ref.ambiguous = true;
    }
    size_t keep = order.size();
    if (p.top_k > 0) keep = std::min(keep, static_cast<size_t>(p.top_k));
    if (p.top_p < 1.0f) {
        const double total = std::accumulate(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
        const double need = static_cast<double>(p.top_p) * total;
        double cum = 0;
        size_t j = 0;
        for (; j < keep; ++j) {
            cum += w[j];
            if (cum >= need) break;
        }
        if (std::fabs(cum - need) < 1e-6 * total || std::fabs(cum - w[j] - need) < 1e-6 * total) ref.ambiguous = true;
        keep = std::min(keep, j + 1);
    }
    ref.probs.assign(n, 0.0);
    double total = 0;
    for (size_t j = 0; j < keep; ++j) {
        if (p.min_p > 0) {
            if (std::fabs(w[j] - p.min_p) < 1e-6) ref.ambiguous = true;
            if (w[j] < p.min_p) continue;
        }
        ref.probs[static_cast<size_t>(order[j])] = w[j];
        total += w[j];
    }
    for (double& q : ref.probs) q /= total;
    return ref;
}

// 0.999 quantile of chi-squared: exact table for small dof, Wilson-Hilferty beyond (within 0.2%).
double chi2_quantile_999(int dof) {
    static const double table[] = {0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588};
    if (dof <= 10) return table[dof];
    const double z = 3.090232, a = 2.0 / (9.0 * dof);
    return dof * std::pow(1 - a + z * std::sqrt(a), 3);
}

struct ChiSquared {
    double statistic = 0;
    int dof = 0;
};

// Pearson's statistic over tokens with expected probability > 0; bins expecting fewer than 5
// draws are pooled (and the pool joins the smallest bin if it still expects fewer than 5).
ChiSquared chi_squared(const std::vector<int64_t>& observed, const std::vector<double>& probs, int64_t draws) {
    std::vector<std::pair<double, double>> bins;  // expected, observed
    double pool_e = 0, pool_o = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (probs[i] <= 0) continue;
        const double e = probs[i] * static_cast<double>(draws);
        if (e >= 5) {
            bins.emplace_back(e, static_cast<double>(observed[i]));
        } else {
            pool_e += e;
            pool_o += static_cast<double>(observed[i]);
        }
    }
    if (pool_e >= 5 || bins.empty()) {
        bins.emplace_back(pool_e, pool_o);
    } else if (pool_e > 0) {
        auto smallest = std::min_element(bins.begin(), bins.end());
        smallest->first += pool_e;
        smallest->second += pool_o;
    }
    ChiSquared r;
    for (const auto& [e, o] : bins) r.statistic += (o - e) * (o - e) / e;
    r.dof = static_cast<int>(bins.size()) - 1;
    return r;
}

std::vector<float> normal_logits(size_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
}

std::vector<int64_t> draw_counts(const std::vector<float>& logits, const SamplingParams& p, const History& h,
                                 const TokenMask* mask, int64_t draws) {
    Sampler sampler(p, static_cast<int32_t>(logits.size()));
    for (int32_t t : h.prompt) sampler.accept(t, false);
    for (int32_t t : h.generated) sampler.accept(t, true);
    std::vector<int64_t> counts(logits.size(), 0);
    std::vector<float> scratch(logits.size());
    for (int64_t d = 0; d < draws; ++d) {
        scratch = logits;
        ++counts[static_cast<size_t>(sampler.sample(scratch.data(), mask).token)];
    }
    return counts;
}

// ---- distribution ----

struct DistributionCase {
    std::string name;
    size_t n_vocab;
    SamplingParams params;
    History history;
    int mask_every = 0;  // > 0: only ids divisible by it are allowed
};

SamplingParams with(float temperature, int32_t top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
}

std::vector<DistributionCase> distribution_cases() {
    std::vector<DistributionCase> cases;
    cases.push_back({"temperature 1", 24, with(1.0f), {}, 0});
    cases.push_back({"temperature 0.7", 32, with(0.7f), {}, 0});
    cases.push_back({"temperature 1.6", 12, with(1.6f), {}, 0});
    cases.push_back({"top_k 5", 40, with(1.0f, 5), {}, 0});
    cases.push_back({"top_p 0.8", 30, with(1.0f, 0, 0.8f), {}, 0});
    cases.push_back({"top_p 0.5 at temperature 1.3", 50, with(1.3f, 0, 0.5f), {}, 0});
    cases.push_back({"min_p 0.1", 36, with(1.0f, 0, 1.0f, 0.1f), {}, 0});
    cases.push_back({"min_p 0.05 at temperature 0.8", 20, with(0.8f, 0, 1.0f, 0.05f), {}, 0});
    cases.push_back({"top_k 10 + top_p 0.9 + min_p 0.05, T 0.9", 45, with(0.9f, 10, 0.9f, 0.05f), {}, 0});
    cases.push_back({"top_p 0.95 + min_p 0.02", 50, with(1.1f, 0, 0.95f, 0.02f), {}, 0});
    cases.push_back({"mask", 30, with(1.0f), {}, 3});
    cases.push_back({"mask + top_p 0.9", 48, with(1.0f, 0, 0.9f), {}, 2});
    cases.push_back({"mask + top_k 4", 40, with(0.8f, 4), {}, 3});
    {
        DistributionCase c{"logit_bias + top_k 12", 24, with(1.2f, 12), {}, 0};
        c.params.logit_bias = {{3, 2.5f}, {7, -100.0f}, {10, 1.0f}, {0, -0.75f}};
        cases.push_back(c);
    }
    {
        DistributionCase c{"penalties", 16, with(1.0f), {{1, 2, 2, 5}, {2, 5, 5, 9, 12}}, 0};
        c.params.repetition_penalty = 1.3f;
        c.params.presence_penalty = 0.4f;
        c.params.frequency_penalty = 0.25f;
        cases.push_back(c);
    }
    return cases;
}

TEST(SamplerDistribution, DrawsFollowTheExactDistribution) {
    const int64_t kDraws = strata::test::scaled(100000, 25000);
    uint32_t seed = 1000;
    for (DistributionCase& c : distribution_cases()) {
        SCOPED_TRACE(c.name);
        const std::vector<float> logits = normal_logits(c.n_vocab, seed, 1.5f);
        c.params.seed = seed++;
        TokenMask mask = TokenMask::allowing_none(static_cast<int32_t>(c.n_vocab));
        if (c.mask_every > 0)
            for (size_t i = 0; i < c.n_vocab; i += static_cast<size_t>(c.mask_every)) mask.allow(static_cast<int32_t>(i));
        const TokenMask* mask_ptr = c.mask_every > 0 ? &mask : nullptr;

        const ReferenceSet ref = reference_distribution(reference_adjusted(logits, c.params, c.history, mask_ptr), c.params);
        ASSERT_FALSE(ref.ambiguous);
        const std::vector<int64_t> counts = draw_counts(logits, c.params, c.history, mask_ptr, kDraws);
        for (size_t i = 0; i < c.n_vocab; ++i) {
            if (ref.probs[i] == 0) {
                EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the allowed set";
            }
            if (mask_ptr && !mask.allows(static_cast<int32_t>(i))) {
                EXPECT_EQ(counts[i], 0) << "masked token " << i;
            }
        }
        const ChiSquared chi = chi_squared(counts, ref.probs, kDraws);
        ASSERT_GE(chi.dof, 1);
        EXPECT_LT(chi.statistic, chi2_quantile_999(chi.dof)) << "dof " << chi.dof;
    }
}

// The check above has power: draws at one setting fail against the distribution of another.
TEST(SamplerDistribution, WrongExpectationFails) {
    constexpr int64_t kDraws = 100000;
    const std::vector<float> logits = normal_logits(32, 77, 1.5f);
    SamplingParams drawn = with(0.7f);
    drawn.seed = 5;
    const std::vector<int64_t> counts = draw_counts(logits, drawn, {}, nullptr, kDraws);
    const History none;

    const ReferenceSet right = reference_distribution(reference_adjusted(logits, drawn, none, nullptr), drawn);
    const ChiSquared ok = chi_squared(counts, right.probs, kDraws);
    EXPECT_LT(ok.statistic, chi2_quantile_999(ok.dof));

    for (float wrong_t : {1.0f, 0.75f}) {
        const SamplingParams wrong = with(wrong_t);
        const ReferenceSet ref = reference_distribution(reference_adjusted(logits, wrong, none, nullptr), wrong);
        const ChiSquared bad = chi_squared(counts, ref.probs, kDraws);
        EXPECT_GT(bad.statistic, chi2_quantile_999(bad.dof)) << "temperature " << wrong_t;
    }
    // top_p 0.8 against top_p 0.85: only the boundary tokens differ.
    SamplingParams p80 = with(1.0f, 0, 0.8f);
    p80.seed = 6;
    const std::vector<int64_t> counts80 = draw_counts(logits, p80, {}, nullptr, kDraws);
    const SamplingParams p85 = with(1.0f, 0, 0.85f);
    const ReferenceSet ref85 = reference_distribution(reference_adjusted(logits, p85, none, nullptr), p85);
    const ChiSquared bad = chi_squared(counts80, ref85.probs, kDraws);
    EXPECT_GT(bad.statistic, chi2_quantile_999(bad.dof));
}

// ---- greedy ----

TEST(SamplerGreedy, ArgmaxWithTiesToTheLowerId) {
    std::vector<float> logits = normal_logits(64, 3, 1.0f);
    logits[41] = 5.0f;
    logits[17] = 5.0f;
    logits[50] = 4.999f;
    for (float t : {0.0f, 1e-6f}) {
        for (std::optional<uint64_t> seed :
             {std::optional<uint64_t>{}, std::optional<uint64_t>{1}, std::optional<uint64_t>{99}}) {
            for (bool logprobs : {false, true}) {
                SamplingParams p = with(t, 5, 0.5f);
                p.seed = seed;
                p.logprobs = logprobs;
                Sampler s(p, 64);
                for (int rep = 0; rep < 3; ++rep) {
                    std::vector<float> x = logits;
                    EXPECT_EQ(s.sample(x.data()).token, 17);
                }
            }
        }
    }
    // With the tie masked away, the next one.
    TokenMask mask = TokenMask::allowing_all(64);
    mask.disallow(17);
    Sampler s(with(0.0f), 64);
    std::vector<float> x = logits;
    EXPECT_EQ(s.sample(x.data(), &mask).token, 41);
    mask.disallow(41);
    x = logits;
    EXPECT_EQ(s.sample(x.data(), &mask).token, 50);
}

TEST(SamplerGreedy, LargeVocabulary) {
    for (uint32_t seed : {1u, 2u, 3u}) {
        const std::vector<float> logits = test::random_floats(kQwenVocab, seed, 2.0f);
        const int32_t expected = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        Sampler s(with(0.0f), kQwenVocab);
        std::vector<float> x = logits;
        EXPECT_EQ(s.sample(x.data()).token, expected);
    }
}

// ---- the exp pass ----

// The exp pass is the sampler's own polynomial: close to exp, exactly 0 below -87, and the same
// bits from the baseline and the AVX2 build (else a seed would draw differently across machines).
TEST(SamplerExp, AccurateAndTheSameOnEveryInstructionSet) {
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> scaled(-95.0f, 0.0f);
    const int32_t n = 100003;
    std::vector<float> logits(static_cast<size_t>(n));
    const float max = 7.25f, inv_t = 1.0f / 0.8f;
    for (float& x : logits) x = max + scaled(rng) * 0.8f;
    logits[0] = max;
    logits[1] = -kInf;
    logits[2] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> w(static_cast<size_t>(n)), w_avx2(static_cast<size_t>(n));
    std::vector<uint16_t> bucket(static_cast<size_t>(n)), bucket_avx2(static_cast<size_t>(n));
    ASSERT_TRUE(detail::run_exp_pass(logits.data(), n, max, inv_t, false, w.data(), bucket.data()));
    EXPECT_EQ(w[0], 1.0f);
    EXPECT_EQ(w[1], 0.0f);
    EXPECT_EQ(w[2], 0.0f);
    for (int32_t i = 3; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        const float s = (logits[k] - max) * inv_t;
        if (s < -87.0f) {
            ASSERT_EQ(w[k], 0.0f);
            continue;
        }
        const double ref = std::exp(static_cast<double>(s));
        ASSERT_NEAR(w[k], ref, 2.5e-7 * ref) << s;
        ASSERT_EQ(bucket[k], std::min(2816, static_cast<int>(std::nearbyint(-s * 32.0f)))) << s;
    }
    if (!detail::run_exp_pass(logits.data(), n, max, inv_t, true, w_avx2.data(), bucket_avx2.data()))
        GTEST_SKIP() << "no AVX2 here: only the baseline build was checked";
    for (size_t k = 0; k < w.size(); ++k) {
        ASSERT_EQ(std::bit_cast<uint32_t>(w[k]), std::bit_cast<uint32_t>(w_avx2[k])) << "at " << k;
        ASSERT_EQ(bucket[k], bucket_avx2[k]) << "at " << k;
    }
}

// ---- seeds and the draw stream ----

std::vector<int32_t> sequence(const SamplingParams& p, const std::vector<float>& logits, int steps,
                              const TokenMask* mask = nullptr) {
    Sampler s(p, static_cast<int32_t>(logits.size()));
    std::vector<int32_t> out;
    std::vector<float> x;
    for (int i = 0; i < steps; ++i) {
        x = logits;
        out.push_back(s.sample(x.data(), mask).token);
    }
    return out;
}

TEST(SamplerSeed, SameSeedSameTokensDifferentSeedDifferent) {
    const std::vector<float> logits = normal_logits(100, 8, 1.0f);
    SamplingParams p = with(1.0f, 0, 0.9f);
    p.seed = 42;
    const auto a = sequence(p, logits, 300);
    EXPECT_EQ(a, sequence(p, logits, 300));
    p.seed = 43;
    EXPECT_NE(a, sequence(p, logits, 300));
    p.seed.reset();  // from std::random_device
    EXPECT_NE(sequence(p, logits, 300), sequence(p, logits, 300));
}

// The generator is fixed: seed 0 of splitmix64 gives its published first outputs, and the
// xoshiro256** values were computed by an independent implementation of the published algorithm
// (Python, arbitrary-precision integers masked to 64 bits). They must not change between
// machines or releases, or seeded requests would stop reproducing.
TEST(SamplerSeed, GeneratorIsPinned) {
    uint64_t state = 0;
    EXPECT_EQ(splitmix64_next(state), 0xe220a8397b1dcdafull);
    EXPECT_EQ(splitmix64_next(state), 0x6e789e6aa1b965f4ull);
    EXPECT_EQ(splitmix64_next(state), 0x06c45d188009454full);
    Rng zero(0);
    EXPECT_EQ(zero.next_u64(), 0x99ec5f36cb75f2b4ull);
    EXPECT_EQ(zero.next_u64(), 0xbf6e1f784956452aull);
    EXPECT_EQ(zero.next_u64(), 0x1a5f849d4933e6e0ull);
    Rng r(12345);
    EXPECT_EQ(r.next_u64(), 0xbe6a36374160d49bull);
    EXPECT_EQ(r.uniform(), static_cast<double>(0x214aaa0637a688c6ull >> 11) * 0x1.0p-53);
    for (int i = 0; i < 100000; ++i) {
        const double u = r.uniform();
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
    }
}

TEST(SamplerSeed, SettingsThatKeepTheSetKeepTheTokens) {
    const std::vector<float> logits = normal_logits(200, 9, 2.0f);
    auto same_set_same_tokens = [&](const std::vector<SamplingParams>& variants) {
        std::vector<int32_t> first_set;
        std::vector<int32_t> first_tokens;
        for (size_t v = 0; v < variants.size(); ++v) {
            SCOPED_TRACE("variant " + std::to_string(v));
            SamplingParams p = variants[v];
            p.seed = 2024;
            Sampler s(p, 200);
            std::vector<float> x = logits;
            const auto set = s.candidates(x.data());
            const auto tokens = sequence(p, logits, 500);
            if (v == 0) {
                first_set = set;
                first_tokens = tokens;
            } else {
                ASSERT_EQ(set, first_set);  // precondition: the variants do keep the same set
                EXPECT_EQ(tokens, first_tokens);
            }
        }
    };
    // Untruncated, however it is said.
    same_set_same_tokens({with(1.0f), with(1.0f, 200), with(1.0f, 1000), with(1.0f, 0, 1.0f, 0.0f)});
    // top_k alone, and with a top_p / min_p that cut nothing more.
    same_set_same_tokens({with(0.8f, 6), with(0.8f, 6, 0.99999994f), with(0.8f, 6, 1.0f, 1e-9f)});
    // top_p through the vocabulary histogram and through a top_k list larger than the nucleus.
    same_set_same_tokens({with(1.0f, 0, 0.5f), with(1.0f, 150, 0.5f) /* nucleus well under 150 */});
}

// One uniform number per token, whatever the candidate set: after steps whose masks leave 2 or
// 50 tokens, the unmasked draws that follow agree.
TEST(SamplerSeed, OneDrawPerTokenWhateverTheSetSize) {
    const std::vector<float> logits = normal_logits(120, 10, 1.0f);
    TokenMask two = TokenMask::allowing_none(120), fifty = TokenMask::allowing_none(120);
    two.allow(3);
    two.allow(4);
    for (int32_t i = 0; i < 50; ++i) fifty.allow(i * 2);
    SamplingParams p = with(1.0f);
    p.seed = 7;
    Sampler a(p, 120), b(p, 120);
    std::vector<float> x;
    for (int i = 0; i < 10; ++i) {
        x = logits;
        a.sample(x.data(), &two);
        x = logits;
        b.sample(x.data(), &fifty);
    }
    for (int i = 0; i < 100; ++i) {
        x = logits;
        const int32_t ta = a.sample(x.data()).token;
        x = logits;
        EXPECT_EQ(ta, b.sample(x.data()).token);
    }
}

// ---- penalties and bias ----

TEST(SamplerPenalties, ExactAdjustedLogits) {
    // Hand-picked non-zero logits; expected values worked out by hand below.
    const std::vector<float> logits = {0.8f,  -1.2f, 2.6f,   0.35f, -0.45f, -0.7f,  1.9f,  -2.2f,
                                       0.15f, 0.65f, -0.95f, 1.1f,  3.3f,   -0.05f, 0.55f, -1.65f};
    SamplingParams p;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.25f;
    p.logit_bias = {{5, 0.5f}, {11, -1.5f}};
    Sampler s(p, 16);
    for (int32_t t : {1, 2, 2, 5}) s.accept(t, false);  // prompt
    for (int32_t t : {2, 5, 5, 9}) s.accept(t, true);   // generated

    std::vector<float> x = logits;
    s.adjust_logits(x.data(), nullptr);
    std::vector<float> expected = logits;
    expected[1] = -1.56f;  // prompt only: -1.2 * 1.3, no presence/frequency
    expected[2] = 1.35f;   // 2.6 / 1.3 = 2.0, generated once: - 0.4 - 0.25
    expected[5] = -1.16f;  // -0.7 + 0.5 = -0.2, * 1.3 = -0.26, generated twice: - 0.4 - 0.5
    expected[9] = -0.15f;  // 0.65 / 1.3 = 0.5, generated once: - 0.65
    expected[11] = -0.4f;  // bias only: 1.1 - 1.5
    for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(x[i], expected[i], 1e-6) << "token " << i;

    // sample() leaves the same adjusted logits behind, then -inf where the mask says no.
    TokenMask mask = TokenMask::allowing_all(16);
    mask.disallow(12);
    x = logits;
    SamplingParams pg = p;
    pg.temperature = 0;
    Sampler g(pg, 16);
    for (int32_t t : {1, 2, 2, 5}) g.accept(t, false);
    for (int32_t t : {2, 5, 5, 9}) g.accept(t, true);
    EXPECT_EQ(g.sample(x.data(), &mask).token, 6);  // 12 (3.3) is masked; 6 (1.9) is next
    for (size_t i = 0; i < 16; ++i) {
        if (i == 12) {
            EXPECT_EQ(x[i], -kInf);
        } else {
            EXPECT_NEAR(x[i], expected[i], 1e-6) << "token " << i;
        }
    }
}

TEST(SamplerPenalties, OffMeansUntouched) {
    const std::vector<float> logits = normal_logits(50, 11, 1.0f);
    Sampler s(SamplingParams{}, 50);
    for (int32_t t : {1, 2, 3, 3, 3}) s.accept(t, true);
    std::vector<float> x = logits;
    s.adjust_logits(x.data(), nullptr);
    EXPECT_EQ(x, logits);
    EXPECT_THROW(s.accept(50, true), Error);
    EXPECT_THROW(s.accept(-1, false), Error);
}

// ---- logprobs ----

std::vector<double> log_softmax(const std::vector<double>& x) {
    double m = -std::numeric_limits<double>::infinity();
    for (double v : x) m = std::max(m, v);
    double sum = 0;
    for (double v : x)
        if (std::isfinite(v)) sum += std::exp(v - m);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - m - std::log(sum);
    return out;
}

void check_logprobs(const std::vector<float>& logits, const SamplingParams& p, const TokenMask* mask, int steps) {
    const History none;
    const std::vector<double> ref = log_softmax(reference_adjusted(logits, p, none, mask));
    std::vector<int32_t> by_likelihood(logits.size());
    std::iota(by_likelihood.begin(), by_likelihood.end(), 0);
    std::stable_sort(by_likelihood.begin(), by_likelihood.end(),
                     [&](int32_t a, int32_t b) { return ref[static_cast<size_t>(a)] > ref[static_cast<size_t>(b)]; });
    Sampler s(p, static_cast<int32_t>(logits.size()));
    for (int i = 0; i < steps; ++i) {
        std::vector<float> x = logits;
        const SampleResult r = s.sample(x.data(), mask);
        EXPECT_NEAR(r.logprob, ref[static_cast<size_t>(r.token)], 1e-5);
        size_t expect_n = 0;
        for (int32_t id : by_likelihood)
            if (std::isfinite(ref[static_cast<size_t>(id)]) && expect_n < static_cast<size_t>(p.top_logprobs)) ++expect_n;
        ASSERT_EQ(r.top.size(), expect_n);
        for (size_t j = 0; j < r.top.size(); ++j) {
            EXPECT_EQ(r.top[j].token, by_likelihood[j]) << "rank " << j;
            EXPECT_NEAR(r.top[j].logprob, ref[static_cast<size_t>(by_likelihood[j])], 1e-5);
            if (j > 0) {
                EXPECT_GE(r.top[j - 1].logprob, r.top[j].logprob);
            }
        }
    }
}

TEST(SamplerLogprobs, MatchPlainLogSoftmax) {
    const std::vector<float> logits = normal_logits(40, 12, 2.0f);
    SamplingParams p = with(0.7f, 5);  // temperature and truncation do not change what is reported
    p.logprobs = true;
    p.top_logprobs = 7;
    p.seed = 1;
    p.logit_bias = {{4, 1.5f}, {30, -2.0f}};
    check_logprobs(logits, p, nullptr, 20);

    TokenMask mask = TokenMask::allowing_all(40);
    for (int32_t i = 0; i < 40; i += 3) mask.disallow(i);
    check_logprobs(logits, p, &mask, 20);

    // Fewer allowed tokens than top_logprobs: only those are listed.
    TokenMask three = TokenMask::allowing_none(40);
    for (int32_t i : {2, 9, 33}) three.allow(i);
    check_logprobs(logits, p, &three, 5);

    p.temperature = 0;  // greedy reports the same
    p.top_logprobs = 20;
    check_logprobs(logits, p, nullptr, 3);
    p.top_logprobs = 0;  // chosen token only
    check_logprobs(logits, p, nullptr, 3);
}

TEST(SamplerLogprobs, LargeVocabulary) {
    const std::vector<float> logits = test::random_floats(kQwenVocab, 21, 3.0f);
    SamplingParams p = with(1.0f, 0, 0.9f);
    p.top_logprobs = 20;
    p.seed = 3;
    check_logprobs(logits, p, nullptr, 3);
}

// ---- validation and errors ----

void expect_error_naming(const SamplingParams& p, const std::string& field, int32_t n_vocab = 1000) {
    try {
        p.validate(n_vocab);
        ADD_FAILURE() << "no error for " << field;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
    EXPECT_THROW(Sampler(p, n_vocab), Error);
}

TEST(SamplerValidate, EachBadFieldIsNamed) {
    EXPECT_NO_THROW(SamplingParams{}.validate(1000));
    auto bad = [](auto mutate) {
        SamplingParams p;
        mutate(p);
        return p;
    };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    expect_error_naming(bad([](SamplingParams& p) { p.temperature = -0.5f; }), "temperature");
    expect_error_naming(bad([&](SamplingParams& p) { p.temperature = nan; }), "temperature");
    expect_error_naming(bad([](SamplingParams& p) { p.temperature = kInf; }), "temperature");
    expect_error_naming(bad([](SamplingParams& p) { p.top_k = -1; }), "top_k");
    expect_error_naming(bad([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p must be in (0, 1]");
    expect_error_naming(bad([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p must be in (0, 1]");
    expect_error_naming(bad([&](SamplingParams& p) { p.top_p = nan; }), "top_p");
    expect_error_naming(bad([](SamplingParams& p) { p.min_p = -0.1f; }), "min_p");
    expect_error_naming(bad([](SamplingParams& p) { p.min_p = 1.1f; }), "min_p");
    expect_error_naming(bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; }), "repetition_penalty");
    expect_error_naming(bad([](SamplingParams& p) { p.repetition_penalty = kInf; }), "repetition_penalty");
    expect_error_naming(bad([](SamplingParams& p) { p.presence_penalty = 2.5f; }), "presence_penalty");
    expect_error_naming(bad([&](SamplingParams& p) { p.presence_penalty = nan; }), "presence_penalty");
    expect_error_naming(bad([](SamplingParams& p) { p.frequency_penalty = -3.0f; }), "frequency_penalty");
    expect_error_naming(bad([](SamplingParams& p) {
                            p.logit_bias = {{999999, 1.0f}};
                        }),
                        "logit_bias token id 999999 is outside the vocabulary (151936)", kQwenVocab);
    expect_error_naming(bad([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }), "logit_bias token id -1");
    expect_error_naming(bad([](SamplingParams& p) { p.logit_bias = {{5, 101.0f}}; }), "logit_bias");
    expect_error_naming(bad([&](SamplingParams& p) { p.logit_bias = {{5, nan}}; }), "logit_bias");
    expect_error_naming(bad([](SamplingParams& p) { p.top_logprobs = 21; }), "top_logprobs");
    expect_error_naming(bad([](SamplingParams& p) { p.top_logprobs = -1; }), "top_logprobs");
}

TEST(SamplerErrors, NothingAllowed) {
    const std::vector<float> logits = normal_logits(70, 13, 1.0f);
    for (float t : {0.0f, 1.0f}) {
        Sampler s(with(t), 70);
        std::vector<float> x = logits;
        const TokenMask none = TokenMask::allowing_none(70);
        EXPECT_THROW(s.sample(x.data(), &none), Error);
        TokenMask short_mask;
        short_mask.words = {~uint64_t{0}};  // covers 64 of 70
        x = logits;
        EXPECT_THROW(s.sample(x.data(), &short_mask), Error);
        x.assign(70, -kInf);
        EXPECT_THROW(s.sample(x.data()), Error);
    }
    // Bits past the vocabulary do not count as allowed.
    TokenMask past = TokenMask::allowing_none(70);
    past.words[1] = ~uint64_t{0} << 6;  // ids 70..127 only
    EXPECT_EQ(past.count_allowed(70), 0);
    Sampler s(with(1.0f), 70);
    std::vector<float> x = logits;
    EXPECT_THROW(s.sample(x.data(), &past), Error);
}

TEST(SamplerErrors, NanLogitsAreNeverPicked) {
    std::vector<float> logits = normal_logits(30, 14, 1.0f);
    for (size_t i = 0; i < 30; i += 2) logits[i] = std::numeric_limits<float>::quiet_NaN();
    for (float t : {0.0f, 1.0f}) {
        SamplingParams p = with(t);
        p.seed = 1;
        p.logprobs = true;
        Sampler s(p, 30);
        for (int i = 0; i < 200; ++i) {
            std::vector<float> x = logits;
            const SampleResult r = s.sample(x.data());
            EXPECT_EQ(r.token % 2, 1);
            EXPECT_TRUE(std::isfinite(r.logprob));
        }
    }
}

TEST(SamplerErrors, InfiniteLogitsWin) {
    std::vector<float> logits = normal_logits(40, 15, 1.0f);
    logits[9] = kInf;
    logits[31] = kInf;
    SamplingParams greedy = with(0.0f);
    Sampler g(greedy, 40);
    std::vector<float> x = logits;
    EXPECT_EQ(g.sample(x.data()).token, 9);
    SamplingParams p = with(1.0f);
    p.seed = 4;
    p.logprobs = true;
    const std::vector<int64_t> counts = draw_counts(logits, p, {}, nullptr, 2000);
    EXPECT_EQ(counts[9] + counts[31], 2000);
    EXPECT_GT(counts[9], 800);  // the two share the draws evenly
    EXPECT_GT(counts[31], 800);
}

// ---- the candidate set on a real-size vocabulary ----

TEST(SamplerCandidates, LargeVocabularyMatchesSortedReference) {
    struct Config {
        float temperature;
        int32_t top_k;
        float top_p;
        float min_p;
    };
    const std::vector<Config> configs = {
        {1.0f, 0, 0.05f, 0.0f},   {1.0f, 0, 0.3f, 0.0f},  {0.6f, 0, 0.6f, 0.0f},  {1.4f, 0, 0.9f, 0.0f},
        {1.0f, 0, 0.95f, 0.0f},   {1.0f, 40, 1.0f, 0.0f}, {0.8f, 40, 0.9f, 0.0f}, {1.0f, 2000, 0.7f, 0.0f},
        {1.0f, 5000, 1.0f, 0.0f}, {1.0f, 0, 1.0f, 0.05f}, {0.7f, 0, 1.0f, 0.02f}, {1.0f, 0, 0.9f, 0.05f},
        {1.2f, 100, 0.8f, 0.01f},
    };
    int compared = 0, ambiguous = 0;
    uint32_t seed = 500;
    for (float scale : {1.0f, 3.0f, 6.0f}) {
        for (const Config& cfg : configs) {
            for (bool masked : {false, true}) {
                ++seed;
                SCOPED_TRACE("scale " + std::to_string(scale) + " T " + std::to_string(cfg.temperature) + " top_k " +
                             std::to_string(cfg.top_k) + " top_p " + std::to_string(cfg.top_p) + " min_p " +
                             std::to_string(cfg.min_p) + (masked ? " masked" : ""));
                const std::vector<float> logits = test::random_floats(kQwenVocab, seed, scale);
                TokenMask mask = TokenMask::allowing_all(kQwenVocab);
                std::mt19937 rng(seed);
                if (masked)
                    for (int32_t i = 0; i < kQwenVocab; ++i)
                        if (rng() % 4 == 0) mask.disallow(i);
                const TokenMask* mask_ptr = masked ? &mask : nullptr;
                const SamplingParams p = with(cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p);
                const ReferenceSet ref = reference_distribution(reference_adjusted(logits, p, {}, mask_ptr), p);
                if (ref.ambiguous) {
                    ++ambiguous;
                    continue;
                }
                std::vector<int32_t> expected;
                for (size_t i = 0; i < ref.probs.size(); ++i)
                    if (ref.probs[i] > 0) expected.push_back(static_cast<int32_t>(i));
                Sampler s(p, kQwenVocab);
                std::vector<float> x = logits;
                const std::vector<int32_t> got = s.candidates(x.data(), mask_ptr);
                ++compared;
                ASSERT_EQ(got.size(), expected.size());
                EXPECT_EQ(got, expected);
            }
        }
    }
    EXPECT_LE(ambiguous, compared / 10);
}

// Draws on the real-size vocabulary with a small nucleus stay inside it and follow it.
TEST(SamplerCandidates, LargeVocabularySmallNucleusDraws) {
    // Normal logits of deviation 6: the top ones are about a nat apart, so the nucleus of 0.6
    // holds a handful of tokens.
    const std::vector<float> logits = normal_logits(kQwenVocab, 31, 6.0f);
    SamplingParams p = with(1.0f, 0, 0.6f);
    p.seed = 11;
    const ReferenceSet ref = reference_distribution(reference_adjusted(logits, p, {}, nullptr), p);
    ASSERT_FALSE(ref.ambiguous);
    const auto nucleus = std::count_if(ref.probs.begin(), ref.probs.end(), [](double q) { return q > 0; });
    ASSERT_GE(nucleus, 3);
    ASSERT_LE(nucleus, 50);
    const int64_t kDraws = strata::test::scaled(6000, 1500);
    const std::vector<int64_t> counts = draw_counts(logits, p, {}, nullptr, kDraws);
    int64_t outside = 0;
    for (size_t i = 0; i < counts.size(); ++i)
        if (ref.probs[i] == 0) outside += counts[i];
    EXPECT_EQ(outside, 0);
    const ChiSquared chi = chi_squared(counts, ref.probs, kDraws);
    EXPECT_GE(chi.dof, 2);
    EXPECT_LT(chi.statistic, chi2_quantile_999(chi.dof)) << "dof " << chi.dof;
}

}  // namespace
}  // namespace strata::runtime
