// The k-quant kernels (vec_dot_kquants_impl.h) compiled for the avx2 level (flags from the file
// name, see CMakeLists.txt).
#include "cpu/simd_avx2.h"
#include "cpu/vec_dot_kquants_impl.h"

namespace strata::cpu::detail {
const KernelTable kAvx2KquantKernels = kKquantTable<SimdAvx2>;
}  // namespace strata::cpu::detail
