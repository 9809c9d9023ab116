// The i-quant kernels (vec_dot_iquants_impl.h) compiled for the avx2 level (flags from the file
// name, see CMakeLists.txt).
#include "cpu/simd_avx2.h"
#include "cpu/vec_dot_iquants_impl.h"

namespace strata::cpu::detail {
const KernelTable kAvx2IquantKernels = kIquantTable<SimdAvx2>;
}  // namespace strata::cpu::detail
