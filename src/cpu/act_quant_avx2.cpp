// AVX2 activation quantisers; byte-identical to act_quant_scalar.cpp (same formulas, the scale
// computed in scalar f32, rounding by cvtps2dq in the default nearest-even mode).
#include <cstddef>

#include "cpu/kernel_registry.h"
#include "cpu/simd_avx2.h"
#include "quant/blocks.h"

namespace strata::cpu {
namespace {

using namespace quant;
using namespace detail;

static inline float abs_max(const float* x, int n) {  // n: multiple of 32
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        m0 = _mm256_max_ps(m0, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
        m1 = _mm256_max_ps(m1, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i + 8)));
    }
    __m256 m = _mm256_max_ps(m0, m1);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

// 32 floats * scale -> 32 int8 in order, clamped to [-127, 127].
static inline __m256i quantize32(const float* x, __m256 scale) {
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), scale));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), scale));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), scale));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), scale));
    // packs work per 128-bit lane: bytes come out as dwords 0 4 1 5 2 6 3 7; the permute fixes it.
    const __m256i p16a = _mm256_packs_epi32(i0, i1);
    const __m256i p16b = _mm256_packs_epi32(i2, i3);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    return _mm256_max_epi8(p8, _mm256_set1_epi8(-127));
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
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + offsetof(BlockQ8_0, qs)), quantize32(x, _mm256_set1_ps(id)));
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
        const __m256 scale = _mm256_set1_ps(iscale);
        int16_t sums[16];
        for (int i = 0; i < kQK / 32; ++i) {
            const __m256i q = quantize32(x + 32 * i, scale);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + offsetof(BlockQ8_K, qs) + 32 * i), q);
            // Sums of 16: bias to unsigned, sum groups of 8 with psadbw, remove the bias.
            const __m256i s8 = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(-128)), _mm256_setzero_si256());
            alignas(32) int64_t s[4];
            _mm256_store_si256(reinterpret_cast<__m256i*>(s), s8);
            sums[2 * i] = static_cast<int16_t>(s[0] + s[1] - 16 * 128);
            sums[2 * i + 1] = static_cast<int16_t>(s[2] + s[3] - 16 * 128);
        }
        std::memcpy(blk + offsetof(BlockQ8_K, bsums), sums, sizeof sums);
    }
}

// f32 -> bf16, nearest-even, NaNs kept quiet: as f32_to_bf16 in util/fp16.h, 8 at a time.
static inline __m128i bf16x8(const float* x) {
    const __m256i v = _mm256_castps_si256(_mm256_loadu_ps(x));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(v, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(64));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

void quantize_bf16(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), bf16x8(x + i));
    if (i < n) {
        float tail[8] = {};
        std::memcpy(tail, x + i, static_cast<size_t>(n - i) * 4);
        alignas(16) uint16_t h[8];
        _mm_store_si128(reinterpret_cast<__m128i*>(h), bf16x8(tail));
        std::memcpy(out + 2 * i, h, static_cast<size_t>(n - i) * 2);
    }
}

constexpr ActKernelEntry kActs[] = {
    {ActFormat::BF16, quantize_bf16},
    {ActFormat::Q8_0, quantize_q8_0},
    {ActFormat::Q8_K, quantize_q8_k},
};

}  // namespace

namespace detail {
const KernelTable kAvx2ActKernels = {nullptr, 0, kActs, sizeof(kActs) / sizeof(kActs[0])};
}  // namespace detail

}  // namespace strata::cpu
