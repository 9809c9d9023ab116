// The elementwise kernels' reference level: std::exp, one value at a time.
#include <cmath>

#include "cpu/kernel_registry.h"

namespace strata::cpu::detail {

namespace {
void swiglu_reference(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}
}  // namespace

const SwigluFn kScalarSwiglu = swiglu_reference;

}  // namespace strata::cpu::detail
