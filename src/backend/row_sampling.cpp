// The host reference of Backend::sample_rows (row_sampling.h): plain loops, sums in double in id
// order, a full sort of the row by likelihood. The CUDA kernel (src/cuda/cuda_sampling.cu) is
// tested against it.
#include "backend/row_sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/backend.h"

namespace strata::backend {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// exp(x) for x <= 0, exactly 0 below -87 (and for NaN): the sampler's cut-off.
float weight(float x) { return x >= -87.0f ? std::exp(x) : 0.0f; }

}  // namespace

void sample_row_host(float* row, int64_t n, const RowSampleRequest& req, int32_t k, RowSample* out, TokenLogit* top) {
    for (const LogitEdit& e : req.edits) {
        float& x = row[e.id];
        if (e.bias != 0.0f) x += e.bias;
        if (e.repetition != 1.0f) x = x > 0.0f ? x / e.repetition : x * e.repetition;
        x -= e.subtract;
    }
    float max = -kInf;
    for (int64_t i = 0; i < n; ++i) {
        if (row[i] == kInf) row[i] = std::numeric_limits<float>::max();
        if (row[i] > max) max = row[i];  // NaN never wins
    }
    *out = RowSample{};
    out->max = max;
    if (max == -kInf) return;

    const float inv_t = req.inv_temperature;
    for (int64_t i = 0; i < n; ++i) {
        out->sum_t += static_cast<double>(weight((row[i] - max) * inv_t));
        out->sum_1 += static_cast<double>(weight(row[i] - max));
    }
    std::vector<TokenLogit> all;  // the tokens above -inf, most likely first
    for (int64_t i = 0; i < n; ++i)
        if (row[i] > -kInf) all.push_back({row[i], static_cast<int32_t>(i)});
    std::sort(all.begin(), all.end(),
              [](const TokenLogit& a, const TokenLogit& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });

    if (req.u >= 0.0) {
        // Kept: the most likely prefix reaching top_p of the weight, then min-p; drawn in id order.
        std::vector<float> kept(static_cast<size_t>(n), 0.0f);
        const double need = static_cast<double>(req.top_p) * out->sum_t;
        double cum = 0.0;
        for (const TokenLogit& t : all) {
            const float w = weight((t.logit - max) * inv_t);
            if (req.top_p < 1.0f && cum >= need) break;
            cum += static_cast<double>(w);
            if (w > 0.0f && w >= req.min_p) kept[static_cast<size_t>(t.id)] = w;
        }
        double total = 0.0;
        for (float w : kept) total += static_cast<double>(w);
        const double target = req.u * total;
        double run = 0.0;
        int64_t last = -1;  // the last kept token, for a target that rounding left at the end
        for (int64_t i = 0; i < n && out->drawn < 0; ++i) {
            if (!(kept[static_cast<size_t>(i)] > 0.0f)) continue;
            last = i;
            run += static_cast<double>(kept[static_cast<size_t>(i)]);
            if (run > target) out->drawn = static_cast<int32_t>(i);
        }
        if (out->drawn < 0) out->drawn = static_cast<int32_t>(last);
        out->drawn_logit = row[out->drawn];
    }

    const size_t keep = std::min(all.size(), static_cast<size_t>(std::max(std::min(k, req.top), 0)));
    std::copy_n(all.begin(), keep, top);
    out->n_top = static_cast<int32_t>(keep);
}

void Backend::sample_rows(float* x, int64_t n, std::span<const RowSampleRequest> req, int32_t k, RowSample* out,
                          TokenLogit* top) {
    std::vector<float> row(static_cast<size_t>(n));
    for (size_t i = 0; i < req.size(); ++i) {
        float* src = x + req[i].row * n;
        copy_to_host(src, row.data(), row.size());
        sample_row_host(row.data(), n, req[i], k, out + i, top + i * static_cast<size_t>(k));
        copy_from_host(row.data(), src, row.size());  // the edited row, for a later copy of it
    }
}

}  // namespace strata::backend
