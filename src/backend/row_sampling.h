// Sampling where the logits are (Backend::sample_rows): instead of copying a 151,936-float row
// to the host for every sampled token, the backend reduces each row to what the sampler needs
// (its maximum, its softmax sums, its k most likely tokens, and for plain temperature sampling
// the drawn token) and only that crosses. runtime::Sampler turns it into the token
// (Sampler::sample_row) and asks for the whole row only when the summary cannot decide.
#pragma once

#include <cstdint>
#include <span>

namespace strata::backend {

// The most likely tokens a summary can carry per row (k of sample_rows).
constexpr int32_t kMaxRowSampleTop = 256;

// One token's logit edit, applied in this order (the sampler's steps 1-2):
//   l += bias;  if (repetition != 1) l = l > 0 ? l / repetition : l * repetition;  l -= subtract
struct LogitEdit {
    int32_t id = 0;
    float bias = 0.0f;
    float repetition = 1.0f;
    float subtract = 0.0f;
};

struct RowSampleRequest {
    int64_t row = 0;                   // which row of x
    std::span<const LogitEdit> edits;  // distinct ids inside the row
    float inv_temperature = 1.0f;      // 1/T for sum_t and the draw
    double u = -1.0;                   // in [0, 1): draw a token (below); < 0: no draw
    // What the draw keeps (the sampler's steps 8-9 without top-k): the smallest set of most
    // likely tokens whose weight reaches top_p * sum_t, then of those the tokens with weight
    // >= min_p (the weight of the most likely is 1).
    float top_p = 1.0f;
    float min_p = 0.0f;
    int32_t top = kMaxRowSampleTop;  // how many of the most likely tokens to return (at most k)
};

// x below is the row after its edits, with +inf replaced by the largest finite float.
struct RowSample {
    float max = 0.0f;    // largest logit (NaN counts as -inf); -inf when no token can be sampled
    double sum_t = 0.0;  // sum over the row of exp((x - max) * inv_temperature), terms below exp(-87) as 0
    double sum_1 = 0.0;  // sum over the row of exp(x - max), the same way (log-softmax at T = 1)
    int32_t drawn = -1;  // u >= 0: the first kept id, in id order, whose running weight passes u * (kept weight)
    float drawn_logit = 0.0f;
    int32_t n_top = 0;  // entries in top: min(k, request's top, tokens above -inf)
};

// One of a row's most likely tokens: higher logit first, ties to the lower id.
struct TokenLogit {
    float logit = 0.0f;
    int32_t id = 0;
};

// The reference on host memory, what Backend::sample_rows does by default and what the GPU
// kernels are tested against: applies req's edits to row [n] in place and fills out and
// top [k] (k <= kMaxRowSampleTop).
void sample_row_host(float* row, int64_t n, const RowSampleRequest& req, int32_t k, RowSample* out, TokenLogit* top);

}  // namespace strata::backend
