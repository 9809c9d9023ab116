// The activation quantisers (act_quant_impl.h) compiled for the avx2 level (flags from the file
// name, see CMakeLists.txt).
#include <iterator>

// The level's SIMD layer first: the body after it is written against it.
#include "cpu/simd_avx2.h"

#include "cpu/act_quant_impl.h"

namespace strata::cpu {
namespace {

constexpr detail::ActKernelEntry kActs[] = {
    {ActFormat::BF16, quantize_bf16<detail::SimdAvx2>},
    {ActFormat::Q8_0, quantize_q8_0<detail::SimdAvx2>},
    {ActFormat::Q8_1, quantize_q8_1<detail::SimdAvx2>},
    {ActFormat::Q8_K, quantize_q8_k<detail::SimdAvx2>},
};

}  // namespace

namespace detail {
const KernelTable kAvx2ActKernels = {nullptr, 0, kActs, std::size(kActs)};
}  // namespace detail

}  // namespace strata::cpu
