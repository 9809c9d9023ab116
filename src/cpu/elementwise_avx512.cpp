// The elementwise kernels (elementwise_impl.h) compiled for the avx512 level (flags from the file
// name, see CMakeLists.txt).
#include "cpu/elementwise_impl.h"
#include "cpu/kernel_registry.h"

namespace strata::cpu::detail {

const SwigluFn kAvx512Swiglu = swiglu_vectorised;
const RmsNormFn kAvx512RmsNorm = rms_norm_vectorised;

}  // namespace strata::cpu::detail
