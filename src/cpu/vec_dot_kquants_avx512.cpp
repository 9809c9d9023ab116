// The k-quant kernels (vec_dot_kquants_impl.h) compiled for the avx512 level (flags from the file
// name, see CMakeLists.txt).
#include "cpu/simd_avx512.h"
#include "cpu/vec_dot_kquants_impl.h"

namespace strata::cpu::detail {
const KernelTable kAvx512KquantKernels = kKquantTable<SimdAvx512>;
}  // namespace strata::cpu::detail
