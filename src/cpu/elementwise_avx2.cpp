// The elementwise kernels (elementwise_impl.h) compiled for the avx2 level (flags from the file
// name, see CMakeLists.txt).
#include "cpu/elementwise_impl.h"
#include "cpu/kernel_registry.h"

namespace strata::cpu::detail {

const SwigluFn kAvx2Swiglu = swiglu_vectorised;
const RmsNormFn kAvx2RmsNorm = rms_norm_vectorised;

}  // namespace strata::cpu::detail
