// IQ3_XXS and IQ2_XXS x Q8_K for CPUs with AVX-512 VBMI (Ice Lake and later Xeons, Zen 4): the
// grids decoded with byte and word permutes across the register instead of a scalar load and
// insert per grid entry. The generic AVX-512 kernels (vec_dot_iquants_impl.h) build each
// 64-value step from 16 (IQ3) or 8 (IQ2) grid loads inserted one by one, all on one shuffle
// port: IQ3_XXS read 1.65 GB/s on one Zen 4 core, so 16 cores reached ~26 GB/s on the seed's
// experts where the host reads 99 GB/s.
//
// Both formats: a block of 256 values has a f16 scale d and, per sub-block s of 32 values, a
// word aux_s with four 7-bit sign fields (bits 0..27; the eighth sign of a group is the parity)
// and a 4-bit scale ls (bits 28..31, scale 2 ls + 1). Grid magnitudes are unsigned, so each
// column's activations take the signs (a masked negate) and maddubs + vpdpwssd do the rest.
//   IQ3_XXS: 64 grid indices (4 values each), then the 8 aux words; dot = d/4 sum ...
//   IQ2_XXS: per sub-block 4 grid indices (8 values each) then its aux word; dot = d/8 sum ...
//
// IQ3_XXS decode: P_j[k] = byte j of grid[idx_k] from four 256-byte planes (two vpermi2b each,
//   entries 0..127 and 128..255, joined by the index's bit 7); unpacks put an index's four
//   values together lane by lane (O_m lane L = values 64 L + 16 m ..); a 4 x 4 transpose of
//   128-bit lanes gives W_c = values 64 c .. 64 c + 63.
// IQ2_XXS decode: the grid's values are {8, 25, 43}, so an entry is a 16-bit code of eight 2-bit
//   levels; the 32 codes come from a 256-word table (four vpermi2w joined by index bits 6, 7);
//   W_c = the codes of indices 8 c .. 8 c + 7 spread one per qword (vpermw), their eight 2-bit
//   fields cut into bytes (vpmultishiftqb) and mapped to levels (vpshufb).
// Signs of both: the 32 fields cut out of the aux words with one vpmultishiftqb, looked up in
//   the 128-entry parity table with one vpermi2b; qword c of the result is W_c's sign mask.
#include <iterator>

#include "cpu/kernel_registry.h"
#include "cpu/simd_avx512.h"
#include "cpu/simd_tile.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"

namespace strata::cpu::detail {
namespace {

using quant::BlockIQ2_XXS;
using quant::BlockIQ3_XXS;
using quant::BlockQ8_K;
using quant::kQK;

constexpr size_t kA = sizeof(BlockQ8_K);
constexpr size_t kAqs = offsetof(BlockQ8_K, qs);

// Tables built on the first call (this file runs only after the CPU check, so nothing of it
// may run at static initialisation).
struct Tables {
    alignas(64) uint8_t iq3_plane[4][256];  // byte j of kIq3XxsGrid[i]
    alignas(64) uint16_t iq2_code[256];     // kIq2XxsGrid[i] as eight 2-bit levels (8, 25, 43 -> 0, 1, 2)
    alignas(64) uint8_t sign[128];          // 7 sign bits -> the 8-bit mask with the parity bit 7
};

const Tables& tables() {
    static const Tables t = [] {
        Tables r{};
        for (int i = 0; i < 256; ++i) {
            for (int j = 0; j < 4; ++j) r.iq3_plane[j][i] = static_cast<uint8_t>(quant::kIq3XxsGrid[i] >> (8 * j));
            uint16_t code = 0;
            for (int m = 0; m < 8; ++m) {
                const auto v = static_cast<uint8_t>(quant::kIq2XxsGrid[i] >> (8 * m));
                code = static_cast<uint16_t>(code | (v == 0x08 ? 0 : v == 0x19 ? 1 : 2) << (2 * m));
            }
            r.iq2_code[i] = code;
        }
        for (int i = 0; i < 128; ++i) r.sign[i] = static_cast<uint8_t>(i | ((__builtin_popcount(i) & 1) << 7));
        return r;
    }();
    return t;
}

// One block decoded: magnitudes w[c] of values 64 c .. 64 c + 63, their sign masks and the
// int16 scales of their two sub-blocks (16 lanes each, as maddubs lays out its pair sums).
struct Decoded {
    __m512i w[4];
    __mmask64 neg[4];
    __m512i scale[4];
};

// fields: byte 4 s + g = sign field g of sub-block s (low 32 bytes).
static inline void sign_masks(const Tables& t, __m512i fields, Decoded& d) {
    const __m512i signs = _mm512_permutex2var_epi8(loadu512(t.sign), fields, loadu512(t.sign + 64));
    const __m256i s = _mm512_castsi512_si256(signs);
    const __m128i s01 = _mm256_castsi256_si128(s), s23 = _mm256_extracti128_si256(s, 1);
    d.neg[0] = static_cast<__mmask64>(_mm_cvtsi128_si64(s01));
    d.neg[1] = static_cast<__mmask64>(_mm_extract_epi64(s01, 1));
    d.neg[2] = static_cast<__mmask64>(_mm_cvtsi128_si64(s23));
    d.neg[3] = static_cast<__mmask64>(_mm_extract_epi64(s23, 1));
}

// scales: the scale of sub-block s as word `stride` * s; W_c takes sub-blocks 2c and 2c + 1.
static inline void spread_scales(__m512i scales, int stride, Decoded& d) {
    for (int c = 0; c < 4; ++c) {
        const __m512i pick = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(static_cast<int16_t>(2 * stride * c)),
                                                     _mm512_set1_epi16(static_cast<int16_t>(2 * stride * c + stride)));
        d.scale[c] = _mm512_permutexvar_epi16(pick, scales);
    }
}

struct Iq3Xxs {
    using Blk = BlockIQ3_XXS;
    static constexpr float kFactor = 0.25f;

    static inline __m512i plane(const uint8_t* p, __m512i idx, __mmask64 high) {
        const __m512i lo = _mm512_permutex2var_epi8(loadu512(p), idx, loadu512(p + 64));
        const __m512i hi = _mm512_permutex2var_epi8(loadu512(p + 128), idx, loadu512(p + 192));
        return _mm512_mask_blend_epi8(high, lo, hi);
    }

    static inline __attribute__((always_inline)) Decoded decode(const Tables& t, const uint8_t* x) {
        Decoded d;
        const uint8_t* qs = x + offsetof(Blk, qs);
        const __m512i idx = loadu512(qs);
        const __mmask64 high = _mm512_movepi8_mask(idx);
        const __m512i p0 = plane(t.iq3_plane[0], idx, high), p1 = plane(t.iq3_plane[1], idx, high);
        const __m512i p2 = plane(t.iq3_plane[2], idx, high), p3 = plane(t.iq3_plane[3], idx, high);
        const __m512i a01l = _mm512_unpacklo_epi8(p0, p1), a01h = _mm512_unpackhi_epi8(p0, p1);
        const __m512i a23l = _mm512_unpacklo_epi8(p2, p3), a23h = _mm512_unpackhi_epi8(p2, p3);
        const __m512i o0 = _mm512_unpacklo_epi16(a01l, a23l), o1 = _mm512_unpackhi_epi16(a01l, a23l);
        const __m512i o2 = _mm512_unpacklo_epi16(a01h, a23h), o3 = _mm512_unpackhi_epi16(a01h, a23h);
        const __m512i t0 = _mm512_shuffle_i64x2(o0, o1, 0x44), t1 = _mm512_shuffle_i64x2(o0, o1, 0xEE);
        const __m512i t2 = _mm512_shuffle_i64x2(o2, o3, 0x44), t3 = _mm512_shuffle_i64x2(o2, o3, 0xEE);
        d.w[0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
        d.w[1] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
        d.w[2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
        d.w[3] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
        // aux qword q = sub-blocks 2q, 2q + 1: fields at bits 0, 7, 14, 21 of each word.
        const __m256i aux = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64));
        const __m256i fields =
            _mm256_and_si256(_mm256_multishift_epi64_epi8(_mm256_set1_epi64x(0x352E2720150E0700LL), aux), _mm256_set1_epi8(0x7F));
        sign_masks(t, _mm512_castsi256_si512(fields), d);
        // Scales 2 ls + 1 as dwords: sub-block s is word 2 s.
        const __m256i ls = _mm256_srli_epi32(aux, 28);
        spread_scales(_mm512_castsi256_si512(_mm256_add_epi32(_mm256_slli_epi32(ls, 1), _mm256_set1_epi32(1))), 2, d);
        return d;
    }
};

struct Iq2Xxs {
    using Blk = BlockIQ2_XXS;
    static constexpr float kFactor = 0.125f;

    static inline __attribute__((always_inline)) Decoded decode(const Tables& t, const uint8_t* x) {
        Decoded d;
        // qword s = sub-block s: 4 grid index bytes, then its aux word.
        const __m512i raw = loadu512(x + offsetof(Blk, qs));
        // Bytes 8 s + i (i < 4) to 4 s + i: the indices, and below the sign fields, in order.
        const __m512i compact =
            _mm512_set_epi64(0, 0, 0, 0, 0x3B3A393833323130LL, 0x2B2A292823222120LL, 0x1B1A191813121110LL, 0x0B0A090803020100LL);
        const __m512i idx = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(_mm512_permutexvar_epi8(compact, raw)));
        const uint16_t* code = t.iq2_code;
        const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(64));
        const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(128));
        const __m512i c0 = _mm512_permutex2var_epi16(loadu512(code), idx, loadu512(code + 32));
        const __m512i c1 = _mm512_permutex2var_epi16(loadu512(code + 64), idx, loadu512(code + 96));
        const __m512i c2 = _mm512_permutex2var_epi16(loadu512(code + 128), idx, loadu512(code + 160));
        const __m512i c3 = _mm512_permutex2var_epi16(loadu512(code + 192), idx, loadu512(code + 224));
        const __m512i codes =
            _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, c0, c1), _mm512_mask_blend_epi16(b6, c2, c3));
        // Byte m of a qword: bits 2m .. 2m + 1 of its code.
        const __m512i shifts = _mm512_set1_epi64(0x0E0C0A0806040200LL);
        const __m512i levels = _mm512_broadcast_i32x4(_mm_setr_epi8(8, 25, 43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
        for (int c = 0; c < 4; ++c) {
            // word 4 i = the code of index 8 c + i.
            const __m512i spread = _mm512_permutexvar_epi16(
                _mm512_set_epi64(8 * c + 7, 8 * c + 6, 8 * c + 5, 8 * c + 4, 8 * c + 3, 8 * c + 2, 8 * c + 1, 8 * c), codes);
            d.w[c] =
                _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_multishift_epi64_epi8(shifts, spread), _mm512_set1_epi8(3)));
        }
        // Sign fields at bits 32, 39, 46, 53 of each qword.
        const __m512i fields =
            _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x352E27203F3F3F3FLL), raw), _mm512_set1_epi8(0x7F));
        sign_masks(t, _mm512_permutexvar_epi8(compact, _mm512_srli_epi64(fields, 32)), d);
        // Scales 2 ls + 1 as qwords: sub-block s is word 4 s.
        const __m512i ls = _mm512_srli_epi64(raw, 60);
        spread_scales(_mm512_add_epi64(_mm512_slli_epi64(ls, 1), _mm512_set1_epi64(1)), 4, d);
        return d;
    }
};

template <class D>
struct VbmiDot {
    int64_t n_blocks;
    const Tables* t;

    template <int NC>
    void operator()(const uint8_t* w, const uint8_t* const* a, float* out) const {
        __m512 acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* x = w + b * sizeof(typename D::Blk);
            const Decoded d = D::decode(*t, x);
            const float dw = load_f16(x + offsetof(typename D::Blk, d));
            for (int c = 0; c < NC; ++c) {
                const uint8_t* q = a[c] + b * kA + kAqs;
                __m512i sumi = _mm512_setzero_si512();
                for (int st = 0; st < 4; ++st) {
                    const __m512i q8 = apply_sign(loadu512(q + 64 * st), d.neg[st]);
                    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(d.w[st], q8), d.scale[st]);
                }
                acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * load_f32(a[c] + b * kA)), _mm512_cvtepi32_ps(sumi), acc[c]);
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = D::kFactor * hsum512_ps(acc[c]);
    }
};

template <class D>
void dot_vbmi(const DotTile& t) {
    run_tile<SimdAvx512::kMaxCols>(t, VbmiDot<D>{t.n / kQK, &tables()});
}

constexpr DotKernelEntry kVbmiDots[] = {
    {quant::Type::IQ3_XXS, dot_vbmi<Iq3Xxs>, false},
    {quant::Type::IQ2_XXS, dot_vbmi<Iq2Xxs>, false},
};

}  // namespace

const KernelTable kAvx512VbmiKernels = {kVbmiDots, std::size(kVbmiDots), nullptr, 0};

}  // namespace strata::cpu::detail
