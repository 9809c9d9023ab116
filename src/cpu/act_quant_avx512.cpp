// AVX-512 activation quantisers (placeholder while being written).
#include "cpu/kernel_registry.h"

namespace strata::cpu::detail {
const KernelTable kAvx512ActKernels = {nullptr, 0, nullptr, 0};
}  // namespace strata::cpu::detail
