// The float-weight and 32-value block kernels (vec_dot_legacy_impl.h) compiled for the avx2 level
// (flags from the file name, see CMakeLists.txt).
#include "cpu/simd_avx2.h"
#include "cpu/vec_dot_legacy_impl.h"

namespace strata::cpu::detail {
const KernelTable kAvx2LegacyKernels = kLegacyTable<SimdAvx2>;
}  // namespace strata::cpu::detail
