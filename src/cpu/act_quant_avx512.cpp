// AVX-512 activation quantisers for Q8_0 and Q8_K; byte-identical to act_quant_scalar.cpp (same
// formulas, scale computed in scalar f32, cvtps2dq rounding to nearest even, saturating
// narrowing then a clamp to -127). BF16 and F32 use the AVX2 / scalar converters.
#include <cstddef>

#include "cpu/kernel_registry.h"
#include "cpu/simd_avx512.h"
#include "quant/blocks.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

static inline float abs_max(const float* x, int n) {  // n: multiple of 32
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    __m512 m0 = _mm512_setzero_ps(), m1 = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 32) {
        m0 = _mm512_max_ps(m0, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), abs_mask)));
        m1 = _mm512_max_ps(m1, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i + 16)), abs_mask)));
    }
    const __m512 m = _mm512_max_ps(m0, m1);
    const __m256 h8 = _mm256_max_ps(lo256_ps(m), hi256_ps(m));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

// 16 floats * scale -> 16 int8 in [-127, 127]; also returns their sum.
static inline __m128i quantize16(const float* x, __m512 scale, int* sum) {
    const __m512i i32 = ps_to_i32(_mm512_mul_ps(_mm512_loadu_ps(x), scale));
    const __m128i q = _mm_max_epi8(_mm512_cvtsepi32_epi8(i32), _mm_set1_epi8(-127));
    if (sum != nullptr) {
        const __m128i s8 = _mm_sad_epu8(_mm_xor_si128(q, _mm_set1_epi8(-128)), _mm_setzero_si128());
        *sum = _mm_cvtsi128_si32(s8) + _mm_extract_epi32(s8, 2) - 16 * 128;
    }
    return q;
}

void quantize_q8_0(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        uint8_t* blk = out + b * sizeof(BlockQ8_0);
        const float amax = abs_max(x, 32);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const uint16_t dh = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        std::memcpy(blk + offsetof(BlockQ8_0, d), &dh, 2);
        const __m512 scale = _mm512_set1_ps(id);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + offsetof(BlockQ8_0, qs)), quantize16(x, scale, nullptr));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + offsetof(BlockQ8_0, qs) + 16), quantize16(x + 16, scale, nullptr));
    }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
        uint8_t* blk = out + b * sizeof(BlockQ8_K);
        const float amax = abs_max(x, kQK);
        if (amax == 0.0f) {
            std::memset(blk, 0, sizeof(BlockQ8_K));
            continue;
        }
        const float iscale = 127.0f / amax;
        const float d = 1.0f / iscale;
        std::memcpy(blk + offsetof(BlockQ8_K, d), &d, 4);
        const __m512 scale = _mm512_set1_ps(iscale);
        int16_t sums[16];
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + offsetof(BlockQ8_K, qs) + 16 * g), quantize16(x + 16 * g, scale, &s));
            sums[g] = static_cast<int16_t>(s);
        }
        std::memcpy(blk + offsetof(BlockQ8_K, bsums), sums, sizeof sums);
    }
}

constexpr ActKernelEntry kActs[] = {
    {ActFormat::Q8_0, quantize_q8_0},
    {ActFormat::Q8_K, quantize_q8_k},
};

}  // namespace

namespace detail {
const KernelTable kAvx512ActKernels = {nullptr, 0, kActs, sizeof(kActs) / sizeof(kActs[0])};
}  // namespace detail

}  // namespace strata::cpu
