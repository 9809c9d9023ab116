// The i-quant kernels (vec_dot_iquants_impl.h) compiled for the avx512 level (flags from the file
// name, see CMakeLists.txt).
#include "cpu/simd_avx512.h"
#include "cpu/vec_dot_iquants_impl.h"

namespace strata::cpu::detail {
const KernelTable kAvx512IquantKernels = kIquantTable<SimdAvx512>;
}  // namespace strata::cpu::detail
