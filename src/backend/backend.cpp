#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/fp16.h"

namespace strata::backend {

int32_t argmax_row(const float* x, int64_t n) {
    int32_t best = -1;
    float best_v = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i)
        if (x[i] > best_v) {  // NaN and -inf never win; ties keep the lower index
            best_v = x[i];
            best = static_cast<int32_t>(i);
        }
    return best;
}

void Backend::argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids) {
    std::vector<float> host(static_cast<size_t>(rows * n));
    copy_to_host(x, host.data(), host.size());
    // A replayed forward fills host only in forward_end: backends that record forwards override this.
    for (int64_t r = 0; r < rows; ++r) ids[r] = argmax_row(host.data() + r * n, n);
}

std::vector<float> rope_inv_freq(const RopeParams& p) {
    const int64_t half = p.n_rot / 2;
    std::vector<float> inv_freq(static_cast<size_t>(std::max<int64_t>(half, 0)));
    for (int64_t i = 0; i < half; ++i)
        inv_freq[static_cast<size_t>(i)] = std::pow(p.theta, -2.0f * static_cast<float>(i) / static_cast<float>(p.n_rot));
    if (p.freqs_bf16)
        for (float& f : inv_freq) f = bf16_to_f32(f32_to_bf16(f));
    return inv_freq;
}

}  // namespace strata::backend
