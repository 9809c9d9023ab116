// Token sampling: turns the logits of one position into the next token id.
//
// sample() processes the logits in this order (docs/sampling.md has the details):
//   1. logit_bias        logit[id] += bias
//   2. penalties         repetition (CTRL-style, over prompt + generated tokens):
//                          logit > 0 ? logit / r : logit * r
//                        then presence/frequency (OpenAI, over generated tokens only):
//                          logit -= presence * (count > 0) + frequency * count
//   3. mask              tokens the constraint disallows get -inf
//   4. logprobs          log-softmax of these adjusted logits at temperature 1, over the whole
//                        vocabulary, no truncation: this is what is reported
//   5. greedy            temperature < 1e-5: argmax, ties to the lower id; stop here
//   6. temperature       p ∝ exp((logit - max) / T)
//   7. top-k             the k most likely tokens
//   8. top-p             the smallest set of most likely tokens whose mass is >= top_p of what
//                        top-k left (renormalised)
//   9. min-p             tokens with p >= min_p * p_max
//  10. draw              one uniform number per sampled token picks from what is left
//
// "Most likely" orders tokens by adjusted logit, ties to the lower id, so every truncation keeps
// a prefix of one fixed order and the result does not depend on how the steps are computed.
// Nothing here sorts the vocabulary: top-k selects with a heap, top-p finds its boundary through
// a histogram of the probabilities and a mass quickselect inside one histogram bucket.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/row_sampling.h"
#include "runtime/rng.h"
#include "runtime/sampling_params.h"
#include "runtime/token_mask.h"

namespace strata::runtime {

struct TokenLogprob {
    int32_t token;
    float logprob;
};

struct SampleResult {
    int32_t token = -1;
    float logprob = 0;              // of the chosen token (when params.logprobs or top_logprobs > 0)
    std::vector<TokenLogprob> top;  // top_logprobs alternatives, most likely first (disallowed tokens left out)
};

// One per sequence; not thread-safe; cheap to construct (the selection scratch is per thread).
class Sampler {
public:
    // Validates params (strata::Error). Without a seed, seeded from std::random_device.
    Sampler(SamplingParams params, int32_t n_vocab);

    // History for penalties: prompt tokens (generated=false) and each sampled token (generated=true).
    // Throws strata::Error for an id outside the vocabulary.
    void accept(int32_t token, bool generated);

    // Picks the next token from logits [n_vocab] (modified in place as scratch: afterwards they
    // hold the adjusted logits of steps 1-3). mask: null or the allowed set; disallowed tokens
    // can never be picked. If the mask allows nothing, or every allowed token has logit -inf,
    // throws strata::Error. NaN logits count as -inf. Draws one uniform number unless greedy.
    SampleResult sample(float* logits, const TokenMask* mask = nullptr);

    const SamplingParams& params() const { return params_; }
    // True when sample() without a mask is the argmax of the raw logits (ties to the lower id)
    // and draws nothing: greedy, no bias, no penalties, no logprobs. The engine then lets the
    // backend find that argmax where the logits are (Backend::argmax_rows).
    bool argmax_only() const {
        return params_.greedy() && !params_.wants_logprobs() && !params_.has_penalties() && params_.logit_bias.empty();
    }
    int32_t n_vocab() const { return n_vocab_; }

    // Sampling where the logits are (backend::sample_rows, docs/sampling.md), in three calls:
    // row_request() says what the backend must compute for this token: the edits of steps 1-2,
    // 1/T, and without top-k the draw itself (its uniform number, top-p, min-p). It draws this
    // token's uniform number now (unless greedy), for the call that finishes the token. nullopt
    // when only the whole row serves (top_k above kMaxRowSampleTop, or more than kMaxRowEdits
    // edits): then sample() as usual. The returned edits live until the next row_request().
    std::optional<backend::RowSampleRequest> row_request();
    // The token from the backend's summary of the row (top: its n_top most likely tokens, at
    // most kMaxRowSampleTop; with top-k the draw is made here from them). nullopt when the
    // summary cannot decide: then sample_adjusted() on the whole row. Throws strata::Error when
    // no token can be sampled.
    std::optional<SampleResult> sample_row(const backend::RowSample& row, std::span<const backend::TokenLogit> top);
    // Steps 4-10 on logits whose steps 1-2 the backend applied (a row after sample_rows), with
    // the uniform number row_request() drew.
    SampleResult sample_adjusted(float* logits);
    static constexpr size_t kMaxRowEdits = 16384;

    // Steps 1-3 alone, in place (what sample() starts with).
    void adjust_logits(float* logits, const TokenMask* mask) const;

    // For tests and diagnostics: runs steps 1-9 and returns the ids sample() would draw from,
    // ascending (greedy: the argmax alone). Tokens whose probability underflows to 0 are not
    // in it. Consumes no random number.
    std::vector<int32_t> candidates(float* logits, const TokenMask* mask = nullptr) const;

private:
    struct HistoryCount {
        int32_t id;
        int32_t generated;  // times sampled; a prompt token only counts as present (repetition penalty)
    };

    // Steps 4-10 on adjusted logits; u: the draw's uniform number, or none to draw one now.
    SampleResult sample_from_adjusted(float* logits, std::optional<double> u);

    Rng rng_;
    SamplingParams params_;
    std::vector<std::pair<int32_t, float>> bias_;     // logit_bias, one entry an id (repeats summed)
    std::unordered_map<int32_t, size_t> bias_index_;  // id -> its entry in bias_
    std::vector<backend::LogitEdit> row_edits_;       // row_request()'s edits
    std::optional<double> pending_u_;                 // drawn by row_request() for this token
    int32_t row_top_ = 0;                             // row_request()'s count of most likely tokens
    int32_t n_vocab_;
    std::vector<HistoryCount> history_;                   // one entry per distinct token seen
    std::unordered_map<int32_t, int32_t> history_index_;  // id -> index in history_
    // The selection scratch (up to a few MB at 151,936 tokens) is per thread, not per sampler:
    // see sampler.cpp.
};

namespace detail {
// For tests: the sampler's exp pass, w[i] = exp((logits[i] - max) * inv_t) (0 below -87) and
// each token's top-p histogram bucket, from the baseline build or (avx2 = true) the AVX2 one.
// Returns false, writing nothing, when AVX2 is asked for and this CPU or build lacks it.
bool run_exp_pass(const float* logits, int32_t n, float max, float inv_t, bool avx2, float* w, uint16_t* bucket);
}  // namespace detail

}  // namespace strata::runtime
