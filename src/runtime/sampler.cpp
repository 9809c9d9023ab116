// Sampler: the processing order is in sampler.h; what each parameter means in docs/sampling.md.
//
// Cost on 151,936 logits, one core: every path reads the logits a few times and none sorts
// them. Greedy is one argmax pass. Untruncated sampling is one exp pass (a polynomial exp the
// compiler vectorises, built for baseline x86-64 and for AVX2) and block sums for the draw. top-k keeps a heap of k while
// scanning once and touches only those k afterwards; min-p alone is a threshold on the logit. top-p without top-k needs the total
// mass, so it takes the exp pass and a histogram of the probabilities by log value; the bucket the boundary falls in (a few
// thousand tokens at most) is the only part that goes through a mass quickselect.
#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "util/cpu_features.h"
#include "util/error.h"

namespace strata::runtime {

namespace {

constexpr float kPosInf = std::numeric_limits<float>::infinity();
constexpr float kNegInf = -kPosInf;
constexpr float kMaxFinite = std::numeric_limits<float>::max();

// exp(x) for x <= 0 (logits minus their maximum, over T), within 1.5 ulp of exp. Written out so
// the exp passes vectorise (no libm call in the loop): Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2/2, and the degree-6 minimax polynomial for exp(r) from Cephes' expf. Only +, -, *
// and bit moves (the compiler will not vectorise a float-to-int conversion next to a select
// under -ftrapping-math), so scalar and vector forms give the same bits. Below -87 (and for
// -inf and NaN) the result is exactly 0, so a disallowed token's weight is exactly 0.
inline float exp_nonpositive(float x) {
    const float shifted = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23 + round(x / ln2)
    const float n = shifted - 12582912.0f;
    const uint32_t n_bits = std::bit_cast<uint32_t>(shifted) - 0x4b400000u;  // round(x / ln2), two's complement
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const float y = p * std::bit_cast<float>((n_bits + 127u) << 23);  // p * 2^n
    const uint32_t keep = x >= -87.0f ? ~0u : 0u;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(y) & keep);
}

// Candidates of the truncating steps. "More likely" is a strict total order: higher adjusted
// logit, then lower id; every truncation keeps a prefix of it.
struct Candidate {
    float logit;
    int32_t id;
    float weight;  // exp((logit - max) / T)
};

inline bool more_likely(const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}
// c at least as likely as the key.
inline bool at_least_as_likely(const Candidate& c, const Candidate& key) { return !more_likely(key, c); }

// Reorders c[0, n) so that c[0, r) are the r most likely, r the smallest count whose weights
// add up to >= need (all n when rounding keeps them short of it). Returns r. Average O(n): each
// round splits the range at its middle with nth_element and keeps the half with the boundary.
size_t take_most_likely_mass(Candidate* c, size_t n, double need) {
    size_t lo = 0, hi = n;  // the boundary lies in [lo, hi); c[0, lo) are taken and subtracted from need
    while (hi - lo > 64) {
        const size_t mid = lo + (hi - lo) / 2;
        std::nth_element(c + lo, c + mid, c + hi, more_likely);
        double upper = 0;  // c[lo, mid): more likely than c[mid]
        for (size_t i = lo; i < mid; ++i) upper += c[i].weight;
        if (upper >= need) {
            hi = mid;
        } else if (upper + c[mid].weight >= need) {
            return mid + 1;
        } else {
            need -= upper + c[mid].weight;
            lo = mid + 1;
        }
    }
    std::sort(c + lo, c + hi, more_likely);
    double cum = 0;
    for (size_t i = lo; i < hi; ++i) {
        cum += c[i].weight;
        if (cum >= need) return i + 1;
    }
    return hi;
}

// The least likely of c[0, n), n > 0.
Candidate least_likely(const Candidate* c, size_t n) {
    Candidate key = c[0];
    for (size_t i = 1; i < n; ++i)
        if (more_likely(key, c[i])) key = c[i];
    return key;
}

// ---- passes over the vocabulary, written so that the compiler vectorises them ----

// Largest logit; NaN never wins a comparison, so it is ignored. SSE2 is part of x86-64 (the
// compiler does not vectorise a float max reduction by itself: NaN and signed zeros).
float max_logit(const float* x, size_t n) {
    float lanes[8];
    size_t i = 0;
#if defined(__SSE2__)
    __m128 m0 = _mm_set1_ps(kNegInf), m1 = m0;
    for (; i + 8 <= n; i += 8) {
        m0 = _mm_max_ps(_mm_loadu_ps(x + i), m0);  // maxps(a, b) is a > b ? a : b: a NaN in x keeps the lane
        m1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), m1);
    }
    _mm_storeu_ps(lanes, m0);
    _mm_storeu_ps(lanes + 4, m1);
#else
    for (float& l : lanes) l = kNegInf;
    for (; i + 8 <= n; i += 8)
        for (size_t j = 0; j < 8; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
#endif
    float m = kNegInf;
    for (float l : lanes) m = l > m ? l : m;
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

// Index of the first largest logit, -1 when nothing beats -inf (NaN never does). One pass;
// each lane keeps its first maximum and the lowest index among equal maxima wins.
int32_t argmax(const float* x, int32_t n) {
    float lane_max[4];
    int32_t lane_at[4];
    int32_t i = 0;
#if defined(__SSE2__)
    __m128 best = _mm_set1_ps(kNegInf);
    __m128i at = _mm_set1_epi32(-1);
    __m128i index = _mm_setr_epi32(0, 1, 2, 3);
    const __m128i four = _mm_set1_epi32(4);
    for (; i + 4 <= n; i += 4) {
        const __m128 v = _mm_loadu_ps(x + i);
        const __m128 better = _mm_cmpgt_ps(v, best);  // false for NaN
        best = _mm_or_ps(_mm_and_ps(better, v), _mm_andnot_ps(better, best));
        const __m128i better_i = _mm_castps_si128(better);
        at = _mm_or_si128(_mm_and_si128(better_i, index), _mm_andnot_si128(better_i, at));
        index = _mm_add_epi32(index, four);
    }
    _mm_storeu_ps(lane_max, best);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lane_at), at);
#else
    for (int32_t j = 0; j < 4; ++j) {
        lane_max[j] = kNegInf;
        lane_at[j] = -1;
    }
    for (; i + 4 <= n; i += 4)
        for (int32_t j = 0; j < 4; ++j)
            if (x[i + j] > lane_max[j]) {
                lane_max[j] = x[i + j];
                lane_at[j] = i + j;
            }
#endif
    float best_logit = kNegInf;
    int32_t best_at = -1;
    for (int32_t j = 0; j < 4; ++j)
        if (lane_at[j] >= 0 && (lane_max[j] > best_logit || (lane_max[j] == best_logit && lane_at[j] < best_at))) {
            best_logit = lane_max[j];
            best_at = lane_at[j];
        }
    for (; i < n; ++i)
        if (x[i] > best_logit) {
            best_logit = x[i];
            best_at = i;
        }
    return best_at;
}

// How many of x[0, n) are > t (vectorised: lets the scans below skip blocks with none).
inline int32_t count_above(const float* __restrict x, size_t n, float t) {
    int32_t count = 0;
    for (size_t i = 0; i < n; ++i) count += x[i] > t ? 1 : 0;
    return count;
}

// Calls fn(i, x[i]) for each i with x[i] > floor, in ascending order; fn may raise floor. Blocks
// with nothing above floor cost one vectorised count (for top-k and the like, nearly all of them
// once the floor has risen).
template <class Fn>
void for_each_above(const float* x, int32_t n, const float& floor, Fn&& fn) {
    constexpr int32_t kBlock = 128;
    for (int32_t b = 0; b < n; b += kBlock) {
        const int32_t end = std::min(b + kBlock, n);
        if (count_above(x + b, static_cast<size_t>(end - b), floor) == 0) continue;
        for (int32_t i = b; i < end; ++i)
            if (x[i] > floor) fn(i, x[i]);
    }
}

// Calls fn(i) for each i with v[i] == value, in ascending order. Eight at a time: the branch is
// per group, not per element (the matches are scattered, a per-element branch mispredicts).
template <class Fn>
void for_each_equal(const uint16_t* v, int32_t n, uint16_t value, Fn&& fn) {
    int32_t i = 0;
#if defined(__SSE2__)
    const __m128i needle = _mm_set1_epi16(static_cast<short>(value));
    for (; i + 8 <= n; i += 8) {
        const __m128i eq = _mm_cmpeq_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)), needle);
        // movemask gives two bits per 16-bit element; keep the even one.
        for (unsigned bits = static_cast<unsigned>(_mm_movemask_epi8(eq)) & 0x5555u; bits != 0; bits &= bits - 1)
            fn(i + std::countr_zero(bits) / 2);
    }
#endif
    for (; i < n; ++i)
        if (v[i] == value) fn(i);
}

// The exp passes, written once as inline loops and compiled twice: for baseline x86-64 (SSE2)
// and, through the target attribute, for AVX2, picked at run time (util::best_isa, so
// STRATA_ISA=scalar selects the baseline). The AVX2 target does not include FMA, so the
// compiler cannot fuse a multiply-add and both give the same bits: a seed draws the same tokens
// on every machine (tests/runtime checks the two against each other).

// w[i] = exp((logits[i] - max) * inv_t).
inline __attribute__((always_inline)) void scaled_exp_loop(const float* __restrict logits, float* __restrict w, int32_t n,
                                                           float max, float inv_t) {
    for (int32_t i = 0; i < n; ++i) w[i] = exp_nonpositive((logits[i] - max) * inv_t);
}

// Histogram of the probabilities for top-p over the whole vocabulary: bucket by (max - logit)/T
// in steps of 1/32 nat, up to 88 nats (past that exp() is 0 anyway). Monotone in the logit, so
// buckets never reorder tokens; NaN goes to the last bucket.
constexpr float kBucketsPerNat = 32.0f;
constexpr float kBucketNats = 88.0f;
constexpr size_t kBuckets = static_cast<size_t>(kBucketNats * kBucketsPerNat) + 1;

// For top-p: w[i] as in scaled_exp_loop, and each token's histogram bucket.
inline __attribute__((always_inline)) void scaled_exp_and_buckets_loop(const float* __restrict logits, float* __restrict w,
                                                                       uint16_t* __restrict bucket, int32_t n, float max,
                                                                       float inv_t) {
    for (int32_t i = 0; i < n; ++i) {
        const float scaled = (logits[i] - max) * inv_t;  // <= 0, or NaN
        w[i] = exp_nonpositive(scaled);
        // round(-scaled * 32) through the float's mantissa (2^23 + v has ulp 1 for v < 2^23);
        // past that, and for inf and NaN, the bits still grow with -scaled, and the cap takes over.
        const uint32_t at = std::bit_cast<uint32_t>(scaled * -kBucketsPerNat + 8388608.0f) - 0x4b000000u;
        bucket[i] = static_cast<uint16_t>(at < kBuckets - 1 ? at : kBuckets - 1);
    }
}

struct ExpKernels {
    void (*scaled_exp)(const float*, float*, int32_t, float, float);
    void (*scaled_exp_and_buckets)(const float*, float*, uint16_t*, int32_t, float, float);
};

void scaled_exp_baseline(const float* logits, float* w, int32_t n, float max, float inv_t) {
    scaled_exp_loop(logits, w, n, max, inv_t);
}
void scaled_exp_and_buckets_baseline(const float* logits, float* w, uint16_t* bucket, int32_t n, float max, float inv_t) {
    scaled_exp_and_buckets_loop(logits, w, bucket, n, max, inv_t);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STRATA_SAMPLER_AVX2 1
__attribute__((target("avx2"))) void scaled_exp_avx2(const float* logits, float* w, int32_t n, float max, float inv_t) {
    scaled_exp_loop(logits, w, n, max, inv_t);
}
__attribute__((target("avx2"))) void scaled_exp_and_buckets_avx2(const float* logits, float* w, uint16_t* bucket, int32_t n,
                                                                 float max, float inv_t) {
    scaled_exp_and_buckets_loop(logits, w, bucket, n, max, inv_t);
}
#endif

ExpKernels exp_kernels_for(bool avx2) {
#ifdef STRATA_SAMPLER_AVX2
    if (avx2) return {scaled_exp_avx2, scaled_exp_and_buckets_avx2};
#endif
    (void)avx2;
    return {scaled_exp_baseline, scaled_exp_and_buckets_baseline};
}

const ExpKernels& exp_kernels() {
    static const ExpKernels kernels = exp_kernels_for(util::best_isa() >= util::Isa::Avx2);
    return kernels;
}

void scaled_exp(const float* logits, float* w, int32_t n, float max, float inv_t) {
    exp_kernels().scaled_exp(logits, w, n, max, inv_t);
}

// The draw: weights are summed in blocks (4 double lanes each, so the sum vectorises and
// rounding does not grow with the vocabulary); the uniform number picks a block, then a token
// inside it, in id order.
constexpr size_t kDrawBlock = 256;

double block_sum(const float* __restrict w, size_t n) {
    double lane[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        lane[0] += static_cast<double>(w[i]);
        lane[1] += static_cast<double>(w[i + 1]);
        lane[2] += static_cast<double>(w[i + 2]);
        lane[3] += static_cast<double>(w[i + 3]);
    }
    for (; i < n; ++i) lane[0] += static_cast<double>(w[i]);
    return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

double fill_block_sums(const float* w, size_t n, std::vector<double>& sums) {
    sums.clear();
    double total = 0;
    for (size_t b = 0; b < n; b += kDrawBlock) {
        sums.push_back(block_sum(w + b, std::min(kDrawBlock, n - b)));
        total += sums.back();
    }
    return total;
}

// Index of the drawn weight (> 0) for u in [0, 1).
size_t pick(const float* w, size_t n, const std::vector<double>& sums, double total, double u) {
    const double target = u * total;
    double cum = 0;
    size_t b = 0;
    while (b < sums.size() && cum + sums[b] <= target) cum += sums[b++];
    // cum <= target here, so the first index that takes cum past it has a positive weight.
    for (size_t i = b * kDrawBlock; i < n; ++i) {
        cum += static_cast<double>(w[i]);
        if (cum > target) return i;
    }
    // Rounding left the target at the very end: the last token that can be drawn.
    size_t i = n;
    while (i > 1 && !(w[i - 1] > 0)) --i;
    return i - 1;
}

// log(sum(exp(logits))) over the vocabulary, given the maximum.
double log_sum_exp(const float* logits, int32_t n, float max) {
    float buf[kDrawBlock];
    double total = 0;
    for (int32_t b = 0; b < n; b += static_cast<int32_t>(kDrawBlock)) {
        const int32_t len = std::min(static_cast<int32_t>(kDrawBlock), n - b);
        scaled_exp(logits + b, buf, len, max, 1.0f);
        total += block_sum(buf, static_cast<size_t>(len));
    }
    return static_cast<double>(max) + std::log(total);
}

// The n most likely tokens with a finite logit, most likely first (one pass; n <= 20).
void top_tokens(const float* logits, int32_t n_vocab, int32_t n, std::vector<Candidate>& out) {
    out.clear();
    if (n <= 0) return;
    float floor = kNegInf;  // a token must beat this to enter
    for_each_above(logits, n_vocab, floor, [&](int32_t i, float x) {
        // After all entries with logit >= x (equal logits came earlier: lower id, more likely).
        auto at = std::find_if(out.begin(), out.end(), [x](const Candidate& c) { return c.logit < x; });
        out.insert(at, Candidate{x, i, 0.0f});
        if (static_cast<int32_t>(out.size()) > n) out.pop_back();
        if (static_cast<int32_t>(out.size()) == n) floor = out.back().logit;
    });
}

// Selection scratch, per thread: samplers are one per sequence and the engine samples many
// sequences on a few threads, so this costs memory per thread, not per sequence.
struct Scratch {
    std::vector<float> weights;     // [n_vocab]: the draw over the whole vocabulary
    std::vector<uint16_t> buckets;  // [n_vocab]: top-p histogram bucket of each token
    std::vector<double> block_sums;
    std::vector<double> histogram;
    std::vector<Candidate> candidates;  // ascending id
    std::vector<Candidate> selection;   // copies reordered by the selections
    std::vector<int32_t> final_ids;     // the set to draw from, ascending id (list draws)
    std::vector<float> final_weights;
    bool over_vocabulary = false;  // draw from weights[0, n_vocab) instead of final_*
    double total = 0;              // over_vocabulary: sum of weights
};

Scratch& thread_scratch() {
    thread_local Scratch scratch;
    return scratch;
}

// The largest logit, finite: +inf logits become the largest finite float first (in place), so
// that the arithmetic after it stays finite. Throws when no token can be sampled.
float finite_max(float* logits, int32_t n) {
    float m = max_logit(logits, static_cast<size_t>(n));
    if (m == kPosInf) {
        std::replace(logits, logits + n, kPosInf, kMaxFinite);
        m = kMaxFinite;
    }
    if (m == kNegInf) throw Error("no token can be sampled: every allowed token has logit -inf");
    return m;
}

constexpr int32_t kHeapTopK = 1024;  // above this, top-k uses nth_element on a candidate list

// Steps 6-9 of sampler.h on adjusted logits whose maximum is finite; then the draw.
class Selection {
public:
    Selection(const SamplingParams& params, int32_t n_vocab, Scratch& s)
        : p_(params), n_(n_vocab), s_(s), inv_t_(1.0f / params.temperature) {}

    void run(const float* logits, float max) {
        s_.final_ids.clear();
        s_.final_weights.clear();
        s_.over_vocabulary = false;
        if (p_.top_k > 0 && p_.top_k < n_) {
            top_k(logits, max);
            truncate_candidates();
        } else if (p_.top_p < 1.0f) {
            nucleus_over_vocabulary(logits, max);
        } else if (p_.min_p > 0.0f) {
            min_p_only(logits, max);
        } else {
            untruncated(logits, max);
        }
    }

    // Steps 7-9 with top-k from a row's most likely tokens (most likely first; complete: they
    // are all the tokens above -inf). False when they do not hold the top_k.
    bool run_on_top(std::span<const backend::TokenLogit> top, bool complete, float max) {
        s_.final_ids.clear();
        s_.final_weights.clear();
        s_.over_vocabulary = false;
        std::vector<Candidate>& c = s_.candidates;
        c.clear();
        const size_t keep = std::min(top.size(), static_cast<size_t>(p_.top_k));
        if (keep < static_cast<size_t>(p_.top_k) && !complete) return false;
        for (size_t i = 0; i < keep; ++i) c.push_back(Candidate{top[i].logit, top[i].id, weight(top[i].logit, max)});
        std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
        truncate_candidates();
        return true;
    }

    // Token id for u in [0, 1).
    int32_t draw(double u) const {
        if (s_.over_vocabulary)
            return static_cast<int32_t>(pick(s_.weights.data(), static_cast<size_t>(n_), s_.block_sums, s_.total, u));
        const double total = fill_block_sums(s_.final_weights.data(), s_.final_weights.size(), s_.block_sums);
        return s_.final_ids[pick(s_.final_weights.data(), s_.final_weights.size(), s_.block_sums, total, u)];
    }

    std::vector<int32_t> ids() const {
        if (!s_.over_vocabulary) return s_.final_ids;
        std::vector<int32_t> out;
        for (int32_t i = 0; i < n_; ++i)
            if (s_.weights[static_cast<size_t>(i)] > 0) out.push_back(i);
        return out;
    }

private:
    float weight(float logit, float max) const { return exp_nonpositive((logit - max) * inv_t_); }

    void sum_vocabulary_weights() {
        s_.total = fill_block_sums(s_.weights.data(), static_cast<size_t>(n_), s_.block_sums);
        s_.over_vocabulary = true;
    }

    void untruncated(const float* logits, float max) {
        s_.weights.resize(static_cast<size_t>(n_));
        scaled_exp(logits, s_.weights.data(), n_, max, inv_t_);
        sum_vocabulary_weights();
    }

    // The k most likely into s_.candidates (ascending id), with weights.
    void top_k(const float* logits, float max) {
        std::vector<Candidate>& c = s_.candidates;
        c.clear();
        const size_t k = static_cast<size_t>(p_.top_k);
        if (p_.top_k <= kHeapTopK) {
            // Heap with the least likely kept candidate on top; scanning ids upwards, an equal
            // logit is never more likely than what is kept, hence the strict comparison.
            float floor = kNegInf;
            for_each_above(logits, n_, floor, [&](int32_t i, float x) {
                if (c.size() == k) {
                    std::pop_heap(c.begin(), c.end(), more_likely);
                    c.back() = Candidate{x, i, 0.0f};
                } else {
                    c.push_back(Candidate{x, i, 0.0f});
                }
                std::push_heap(c.begin(), c.end(), more_likely);
                if (c.size() == k) floor = c.front().logit;
            });
            std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
        } else {
            // Large k: the k-th most likely from nth_element on a copy, then a filter that keeps id order.
            for (int32_t i = 0; i < n_; ++i)
                if (logits[i] > kNegInf) c.push_back(Candidate{logits[i], i, 0.0f});
            if (c.size() > k) {
                std::vector<Candidate>& sel = s_.selection;
                sel.assign(c.begin(), c.end());
                std::nth_element(sel.begin(), sel.begin() + static_cast<std::ptrdiff_t>(k - 1), sel.end(), more_likely);
                const Candidate key = sel[k - 1];
                std::erase_if(c, [&](const Candidate& x) { return !at_least_as_likely(x, key); });
            }
        }
        for (Candidate& x : c) x.weight = weight(x.logit, max);
    }

    // top-p on s_.candidates (ascending id), then min-p into the final list.
    void truncate_candidates() {
        std::vector<Candidate>& c = s_.candidates;
        if (p_.top_p < 1.0f && !c.empty()) {
            double mass = 0;
            for (const Candidate& x : c) mass += x.weight;
            std::vector<Candidate>& sel = s_.selection;
            sel.assign(c.begin(), c.end());
            const size_t r = take_most_likely_mass(sel.data(), sel.size(), static_cast<double>(p_.top_p) * mass);
            if (r > 0) {
                const Candidate key = least_likely(sel.data(), r);
                std::erase_if(c, [&](const Candidate& x) { return !at_least_as_likely(x, key); });
            }
        }
        finish_list();
    }

    // min-p alone: p >= min_p * p_max is weight >= min_p. A logit threshold with some slack
    // finds the few tokens worth an exp(); the exact test is on the weight.
    void min_p_only(const float* logits, float max) {
        std::vector<Candidate>& c = s_.candidates;
        c.clear();
        // Slack: 1e-3 on the scaled logit, and some ulps of max for the rounding of this sum.
        const float threshold =
            static_cast<float>(static_cast<double>(max) + (std::log(static_cast<double>(p_.min_p)) - 1e-3) * p_.temperature -
                               1e-6 * (1.0 + std::fabs(static_cast<double>(max))));
        for_each_above(logits, n_, threshold, [&](int32_t i, float x) { c.push_back(Candidate{x, i, weight(x, max)}); });
        finish_list();
    }

    // min-p and zero weights out of s_.candidates into the final list (ascending id).
    void finish_list() {
        const float min_weight = p_.min_p;  // p_max has weight 1
        for (const Candidate& x : s_.candidates) {
            if (x.weight > 0 && x.weight >= min_weight) {
                s_.final_ids.push_back(x.id);
                s_.final_weights.push_back(x.weight);
            }
        }
    }

    // top-p over the whole vocabulary (no top-k). One exp pass also gives each token a
    // histogram bucket; the bucket the boundary falls in follows from the bucket masses. The
    // buckets above it are in, those below out; a mass quickselect over the boundary bucket
    // alone finds the boundary token. The draw then runs over the vocabulary with the weights
    // of excluded tokens set to 0.
    void nucleus_over_vocabulary(const float* logits, float max) {
        const size_t n = static_cast<size_t>(n_);
        s_.weights.resize(n);
        s_.buckets.resize(n);
        s_.histogram.assign(2 * kBuckets, 0.0);
        float* w = s_.weights.data();
        uint16_t* bucket = s_.buckets.data();
        double* hist = s_.histogram.data();
        double* hist2 = hist + kBuckets;
        for (int32_t b = 0; b < n_; b += static_cast<int32_t>(kDrawBlock)) {  // blocks stay in L1 between the loops
            const int32_t len = std::min(static_cast<int32_t>(kDrawBlock), n_ - b);
            exp_kernels().scaled_exp_and_buckets(logits + b, w + b, bucket + b, len, max, inv_t_);
            // Two histograms for alternate tokens: neighbours in the same bucket do not wait on
            // each other's store.
            int32_t i = b;
            for (; i + 2 <= b + len; i += 2) {
                hist[bucket[i]] += static_cast<double>(w[i]);
                hist2[bucket[i + 1]] += static_cast<double>(w[i + 1]);
            }
            for (; i < b + len; ++i) hist[bucket[i]] += static_cast<double>(w[i]);
        }
        double total = 0;
        for (size_t b = 0; b < kBuckets; ++b) {
            hist[b] += hist2[b];
            total += hist[b];
        }
        const double need = static_cast<double>(p_.top_p) * total;
        size_t boundary = 0;
        double above = 0;  // mass of the buckets before `boundary`
        size_t last_nonempty = 0;
        for (; boundary < kBuckets; ++boundary) {
            if (hist[boundary] > 0) last_nonempty = boundary;
            if (above + hist[boundary] >= need) break;
            above += hist[boundary];
        }
        if (boundary == kBuckets) {  // rounding: the mass never reached top_p * total; take all
            boundary = last_nonempty;
            above = 0;
            for (size_t b = 0; b < boundary; ++b) above += hist[b];
        }

        std::vector<Candidate>& sel = s_.selection;
        sel.clear();
        const uint16_t boundary_bucket = static_cast<uint16_t>(boundary);
        for_each_equal(bucket, n_, boundary_bucket, [&](int32_t i) {
            if (w[i] > 0) sel.push_back(Candidate{logits[i], i, w[i]});
        });
        const size_t r = take_most_likely_mass(sel.data(), sel.size(), need - above);
        for (size_t j = r; j < sel.size(); ++j) w[sel[j].id] = 0.0f;  // the boundary bucket's excluded tail

        // Zero what is out (buckets past the boundary, min-p) and sum the blocks while they are in L1.
        const float min_weight = p_.min_p;
        s_.block_sums.clear();
        s_.total = 0;
        for (size_t b = 0; b < n; b += kDrawBlock) {
            const size_t end = std::min(b + kDrawBlock, n);
            for (size_t i = b; i < end; ++i) {
                const bool keep = bucket[i] <= boundary_bucket && w[i] >= min_weight;
                w[i] = keep ? w[i] : 0.0f;
            }
            s_.block_sums.push_back(block_sum(w + b, end - b));
            s_.total += s_.block_sums.back();
        }
        s_.over_vocabulary = true;
    }

    const SamplingParams& p_;
    int32_t n_;
    Scratch& s_;
    float inv_t_;
};

}  // namespace

bool detail::run_exp_pass(const float* logits, int32_t n, float max, float inv_t, bool avx2, float* w, uint16_t* bucket) {
#ifdef STRATA_SAMPLER_AVX2
    if (avx2 && !util::isa_supported(util::Isa::Avx2)) return false;
#else
    if (avx2) return false;
#endif
    exp_kernels_for(avx2).scaled_exp_and_buckets(logits, w, bucket, n, max, inv_t);
    return true;
}

int32_t TokenMask::count_allowed(int32_t n_vocab) const {
    int32_t count = 0;
    const size_t full = std::min(words.size(), static_cast<size_t>(n_vocab) / 64);
    for (size_t w = 0; w < full; ++w) count += std::popcount(words[w]);
    const int32_t tail = n_vocab % 64;
    if (tail != 0 && full < words.size()) count += std::popcount(words[full] & ((uint64_t{1} << tail) - 1));
    return count;
}

Sampler::Sampler(SamplingParams params, int32_t n_vocab) : params_(std::move(params)), n_vocab_(n_vocab) {
    params_.validate(n_vocab_);
    // Repeated ids add up: their biases are summed first (in the order given), so the logit
    // gets one addition whether the host or the backend applies it.
    for (const auto& [id, bias] : params_.logit_bias) {
        const auto [it, inserted] = bias_index_.try_emplace(id, bias_.size());
        if (inserted) bias_.emplace_back(id, 0.0f);
        bias_[it->second].second += bias;
    }
    if (params_.seed) {
        rng_.reseed(*params_.seed);
    } else {
        std::random_device device;
        rng_.reseed((static_cast<uint64_t>(device()) << 32) ^ device());
    }
}

void Sampler::accept(int32_t token, bool generated) {
    if (token < 0 || token >= n_vocab_)
        throw Error("token id " + std::to_string(token) + " is outside the vocabulary (" + std::to_string(n_vocab_) + ")");
    if (!params_.has_penalties()) return;
    auto [it, inserted] = history_index_.try_emplace(token, static_cast<int32_t>(history_.size()));
    if (inserted) history_.push_back(HistoryCount{token, 0});
    if (generated) ++history_[static_cast<size_t>(it->second)].generated;
}

void Sampler::adjust_logits(float* logits, const TokenMask* mask) const {
    for (const auto& [id, bias] : bias_) logits[id] += bias;

    const float rep = params_.repetition_penalty;
    for (const HistoryCount& h : history_) {
        float& x = logits[h.id];
        if (rep != 1.0f) x = x > 0.0f ? x / rep : x * rep;
        if (h.generated > 0) x -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(h.generated);
    }

    if (mask == nullptr) return;
    const size_t n_words = TokenMask::word_count(n_vocab_);
    if (mask->words.size() < n_words)
        throw Error("token mask covers " + std::to_string(mask->words.size() * 64) + " tokens; the vocabulary has " +
                    std::to_string(n_vocab_));
    bool any_allowed = false;
    for (size_t w = 0; w < n_words; ++w) {
        const int32_t base = static_cast<int32_t>(w * 64);
        const int32_t valid = std::min(64, n_vocab_ - base);
        const uint64_t in_vocab = valid == 64 ? ~uint64_t{0} : (uint64_t{1} << valid) - 1;
        const uint64_t allowed = mask->words[w] & in_vocab;
        any_allowed = any_allowed || allowed != 0;
        if (allowed == 0 && valid == 64) {
            std::fill_n(logits + base, 64, kNegInf);
            continue;
        }
        for (uint64_t off = ~allowed & in_vocab; off != 0; off &= off - 1) logits[base + std::countr_zero(off)] = kNegInf;
    }
    if (!any_allowed) throw Error("the output constraint allows no token here");
}

SampleResult Sampler::sample(float* logits, const TokenMask* mask) {
    adjust_logits(logits, mask);
    return sample_from_adjusted(logits, std::nullopt);
}

std::optional<backend::RowSampleRequest> Sampler::row_request() {
    pending_u_.reset();
    if (!params_.greedy() && params_.top_k > backend::kMaxRowSampleTop && params_.top_k < n_vocab_) return std::nullopt;
    // One edit an id: the biases first (row_edits_[i] is bias_[i]), then the penalised tokens,
    // joining a biased token's edit.
    row_edits_.clear();
    for (const auto& [id, bias] : bias_) row_edits_.push_back(backend::LogitEdit{id, bias, 1.0f, 0.0f});
    for (const HistoryCount& h : history_) {
        if (params_.repetition_penalty == 1.0f && h.generated == 0) continue;
        const auto biased = bias_index_.find(h.id);
        if (biased == bias_index_.end()) row_edits_.push_back(backend::LogitEdit{h.id, 0.0f, 1.0f, 0.0f});
        backend::LogitEdit& e = biased == bias_index_.end() ? row_edits_.back() : row_edits_[biased->second];
        e.repetition = params_.repetition_penalty;
        if (h.generated > 0) e.subtract = params_.presence_penalty + params_.frequency_penalty * static_cast<float>(h.generated);
    }
    if (row_edits_.size() > kMaxRowEdits) return std::nullopt;
    backend::RowSampleRequest r;
    r.edits = row_edits_;
    // The most likely tokens the answer needs: the argmax, the top-k to draw from, the
    // alternatives to report.
    const bool top_k = !params_.greedy() && params_.top_k > 0 && params_.top_k < n_vocab_;
    r.top = std::max(params_.greedy() ? 1 : 0, std::max(top_k ? params_.top_k : 0, params_.top_logprobs));
    row_top_ = r.top;
    if (!params_.greedy()) {
        r.inv_temperature = 1.0f / params_.temperature;
        pending_u_ = rng_.uniform();
        // Without top-k the backend draws, top-p and min-p included; with it, sample_row draws
        // from the row's most likely tokens.
        if (!top_k) {
            r.u = *pending_u_;
            r.top_p = params_.top_p;
            r.min_p = params_.min_p;
        }
    }
    return r;
}

std::optional<SampleResult> Sampler::sample_row(const backend::RowSample& row, std::span<const backend::TokenLogit> top) {
    if (!(row.max > kNegInf)) throw Error("no token can be sampled: every allowed token has logit -inf");
    const bool complete = row.n_top < row_top_;
    SampleResult result;
    if (params_.greedy()) {
        if (top.empty()) return std::nullopt;
        result.token = top[0].id;
    } else if (row.drawn >= 0) {
        result.token = row.drawn;
    } else {
        if (!pending_u_) throw Error("sample_row without row_request");
        Selection selection(params_, n_vocab_, thread_scratch());
        if (!selection.run_on_top(top, complete, row.max)) return std::nullopt;
        result.token = selection.draw(*pending_u_);
    }
    pending_u_.reset();
    if (params_.wants_logprobs()) {
        const double lse = static_cast<double>(row.max) + std::log(row.sum_1);
        float logit = row.drawn == result.token ? row.drawn_logit : kNegInf;
        for (const auto& t : top)
            if (t.id == result.token) logit = t.logit;
        result.logprob = static_cast<float>(static_cast<double>(logit) - lse);
        const size_t n = std::min(top.size(), static_cast<size_t>(params_.top_logprobs));
        for (size_t i = 0; i < n; ++i)
            result.top.push_back(TokenLogprob{top[i].id, static_cast<float>(static_cast<double>(top[i].logit) - lse)});
    }
    return result;
}

SampleResult Sampler::sample_adjusted(float* logits) {
    const std::optional<double> u = pending_u_;
    pending_u_.reset();
    return sample_from_adjusted(logits, u);
}

SampleResult Sampler::sample_from_adjusted(float* logits, std::optional<double> u) {
    SampleResult result;
    if (params_.greedy() && !params_.wants_logprobs()) {
        result.token = argmax(logits, n_vocab_);
        if (result.token < 0) throw Error("no token can be sampled: every allowed token has logit -inf");
        return result;
    }

    const float max_logit = finite_max(logits, n_vocab_);
    Scratch& scratch = thread_scratch();
    if (params_.greedy()) {
        result.token = static_cast<int32_t>(std::find(logits, logits + n_vocab_, max_logit) - logits);
    } else {
        Selection selection(params_, n_vocab_, scratch);
        selection.run(logits, max_logit);
        result.token = selection.draw(u ? *u : rng_.uniform());
    }

    if (params_.wants_logprobs()) {
        const double lse = log_sum_exp(logits, n_vocab_, max_logit);
        result.logprob = static_cast<float>(static_cast<double>(logits[result.token]) - lse);
        top_tokens(logits, n_vocab_, params_.top_logprobs, scratch.selection);
        for (const Candidate& c : scratch.selection)
            result.top.push_back(TokenLogprob{c.id, static_cast<float>(static_cast<double>(c.logit) - lse)});
    }
    return result;
}

std::vector<int32_t> Sampler::candidates(float* logits, const TokenMask* mask) const {
    adjust_logits(logits, mask);
    const float max_logit = finite_max(logits, n_vocab_);
    if (params_.greedy()) return {static_cast<int32_t>(std::find(logits, logits + n_vocab_, max_logit) - logits)};
    Selection selection(params_, n_vocab_, thread_scratch());
    selection.run(logits, max_logit);
    return selection.ids();
}

}  // namespace strata::runtime
