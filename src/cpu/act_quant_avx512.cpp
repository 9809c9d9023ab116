// The activation quantisers (act_quant_impl.h) compiled for the avx512 level (flags from the file
// name, see CMakeLists.txt). BF16 and F32 use the AVX2 / scalar converters.
#include <iterator>

// The level's SIMD layer first: the body after it is written against it.
#include "cpu/simd_avx512.h"

#include "cpu/act_quant_impl.h"

namespace strata::cpu {
namespace {

constexpr detail::ActKernelEntry kActs[] = {
    {ActFormat::Q8_0, quantize_q8_0<detail::SimdAvx512>},
    {ActFormat::Q8_1, quantize_q8_1<detail::SimdAvx512>},
    {ActFormat::Q8_K, quantize_q8_k<detail::SimdAvx512>},
};

}  // namespace

namespace detail {
const KernelTable kAvx512ActKernels = {nullptr, 0, kActs, std::size(kActs)};
}  // namespace detail

}  // namespace strata::cpu
