// The elementwise kernels' reference level: std::exp, sums in double, one value at a time.
#include <cmath>

#include "cpu/kernel_registry.h"

namespace strata::cpu::detail {

namespace {
void swiglu_reference(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void rms_norm_reference(const float* x, const float* w, int64_t n, float eps, float* out) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * (w != nullptr ? w[i] : 1.0f);
}
}  // namespace

const SwigluFn kScalarSwiglu = swiglu_reference;
const RmsNormFn kScalarRmsNorm = rms_norm_reference;

}  // namespace strata::cpu::detail
