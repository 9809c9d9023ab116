// Internal: how the per-level kernel files hand their kernels to kernels.cpp. Each file exports a
// KernelTable of constant data (constant-initialised, so no code compiled for AVX2/AVX-512 runs
// before the CPU has been checked).
#pragma once

#include <cstddef>

#include "cpu/kernels.h"

namespace strata::cpu::detail {

struct DotKernelEntry {
    quant::Type type;
    DotFn fn;
    bool needs_bf16;  // uses AVX-512 BF16 instructions beyond the Avx512 level
};

struct ActKernelEntry {
    ActFormat fmt;
    QuantizeActFn fn;
};

struct KernelTable {
    const DotKernelEntry* dots;
    size_t n_dots;
    const ActKernelEntry* acts;
    size_t n_acts;
};

// Scalar reference (vec_dot_scalar.cpp, vec_dot_iquants_scalar.cpp, act_quant_scalar.cpp).
extern const KernelTable kScalarKernels;
extern const KernelTable kScalarIquantKernels;
extern const KernelTable kScalarActKernels;
// AVX2 (vec_dot_*_avx2.cpp, act_quant_avx2.cpp).
extern const KernelTable kAvx2LegacyKernels;
extern const KernelTable kAvx2KquantKernels;
extern const KernelTable kAvx2IquantKernels;
extern const KernelTable kAvx2ActKernels;
// AVX-512 (vec_dot_*_avx512.cpp, act_quant_avx512.cpp).
extern const KernelTable kAvx512LegacyKernels;
extern const KernelTable kAvx512KquantKernels;
extern const KernelTable kAvx512IquantKernels;
extern const KernelTable kAvx512ActKernels;
// AVX-512 + VBMI (vec_dot_*_avx512vbmi.cpp): taken over the AVX-512 kernels of the same types
// when the CPU has VBMI.
extern const KernelTable kAvx512VbmiKernels;
// The elementwise kernels of each level (elementwise_*.cpp).
extern const SwigluFn kScalarSwiglu;
extern const SwigluFn kAvx2Swiglu;
extern const SwigluFn kAvx512Swiglu;
extern const RmsNormFn kScalarRmsNorm;
extern const RmsNormFn kAvx2RmsNorm;
extern const RmsNormFn kAvx512RmsNorm;

}  // namespace strata::cpu::detail
