#include "backend/backend.h"

#include <algorithm>
#include <cmath>

#include "util/fp16.h"

namespace strata::backend {

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
