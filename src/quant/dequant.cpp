// Reference dequantisers, one plain function per type. Each function is the definition of its
// format: the comments give the bit layout, and the float arithmetic is done in the same order,
// one rounding per operation, as the reference implementation that wrote the test vectors, so
// results are bit-exact (see tests/quant/dequant_test.cpp). Do not "simplify" an expression such
// as (d * scale) * q into d * (scale * q): the rounding would change. For the same reason this
// file must be compiled without floating-point contraction into FMA (it is: only *_avx2.cpp and
// *_avx512.cpp files get -mfma).
//
// Blocks are copied out of the byte stream with memcpy, so src needs no alignment.
// Notation: "value i" is the i-th float of the block's output; halves are IEEE binary16.
#include "quant/dequant.h"

#include <bit>
#include <cstring>
#include <string>

#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "util/error.h"
#include "util/fp16.h"

namespace strata::quant {
namespace {

static_assert(std::endian::native == std::endian::little, "block layouts are little-endian");

template <class Block>
Block load_block(const uint8_t* src, int64_t index) {
    Block b;
    std::memcpy(&b, src + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    return b;
}

uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Byte j (value j) of a grid entry.
int grid_value(uint64_t entry, int j) { return static_cast<int>((entry >> (8 * j)) & 0xff); }
int grid_value_signed(uint64_t entry, int j) { return static_cast<int8_t>((entry >> (8 * j)) & 0xff); }

// ---- plain types ---------------------------------------------------------------------------

void dequant_f32(const uint8_t* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); }

void dequant_f16(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
    }
}

void dequant_bf16(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
    }
}

// ---- legacy 32-value blocks ------------------------------------------------------------------
// qs[j] holds value j in its low nibble and value j + 16 in its high nibble.

// Q4_0: value = (q - 8) * d, q unsigned 4-bit.
void dequant_q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, dst += 32) {
        const auto blk = load_block<BlockQ4_0>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < 16; ++j) {
            dst[j] = static_cast<float>((blk.qs[j] & 0x0f) - 8) * d;
            dst[j + 16] = static_cast<float>((blk.qs[j] >> 4) - 8) * d;
        }
    }
}

// Q4_1: value = q * d + m, q unsigned 4-bit.
void dequant_q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, dst += 32) {
        const auto blk = load_block<BlockQ4_1>(src, b);
        const float d = f16_to_f32(blk.d);
        const float m = f16_to_f32(blk.m);
        for (int j = 0; j < 16; ++j) {
            dst[j] = static_cast<float>(blk.qs[j] & 0x0f) * d + m;
            dst[j + 16] = static_cast<float>(blk.qs[j] >> 4) * d + m;
        }
    }
}

// Q5_0/Q5_1: the nibbles of Q4 plus a fifth (high) bit per value: bit i of the little-endian
// u32 qh belongs to value i.
int q5_value(const uint8_t* qs, uint32_t qh, int i) {
    const int nibble = i < 16 ? (qs[i] & 0x0f) : (qs[i - 16] >> 4);
    return nibble | static_cast<int>(((qh >> i) & 1u) << 4);
}

// Q5_0: value = (q - 16) * d, q unsigned 5-bit.
void dequant_q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, dst += 32) {
        const auto blk = load_block<BlockQ5_0>(src, b);
        const float d = f16_to_f32(blk.d);
        const uint32_t qh = load_u32(blk.qh);
        for (int i = 0; i < 32; ++i) dst[i] = static_cast<float>(q5_value(blk.qs, qh, i) - 16) * d;
    }
}

// Q5_1: value = q * d + m, q unsigned 5-bit.
void dequant_q5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, dst += 32) {
        const auto blk = load_block<BlockQ5_1>(src, b);
        const float d = f16_to_f32(blk.d);
        const float m = f16_to_f32(blk.m);
        const uint32_t qh = load_u32(blk.qh);
        for (int i = 0; i < 32; ++i) dst[i] = static_cast<float>(q5_value(blk.qs, qh, i)) * d + m;
    }
}

// Q8_0: value i = qs[i] * d, qs signed 8-bit.
void dequant_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, dst += 32) {
        const auto blk = load_block<BlockQ8_0>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int i = 0; i < 32; ++i) dst[i] = static_cast<float>(blk.qs[i]) * d;
    }
}

// MXFP4 (OCP microscaling): 32 E2M1 codes, nibbles laid out as in Q4_0, sharing one E8M0 scale
// e (a bare exponent: 2^(e - 127)). The code table is doubled to integers, so the scale is
// halved: value = doubled(code) * 2^(e - 128). That power of two is built from its bits:
// e >= 2 gives the normal float with biased exponent e - 1; e = 1 and e = 0 give the
// subnormals 2^-127 and 2^-128. e = 255 (NaN in the OCP spec) is not special-cased: it scales
// by 2^127 like any other exponent, which is what the reference does. Every product is exact.
float e8m0_half_scale(uint8_t e) {
    const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
    return bits_to_f32(bits);
}

void dequant_mxfp4(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, dst += 32) {
        const auto blk = load_block<BlockMXFP4>(src, b);
        const float d = e8m0_half_scale(blk.e);
        for (int j = 0; j < 16; ++j) {
            dst[j] = static_cast<float>(kMxfp4DoubledValues[blk.qs[j] & 0x0f]) * d;
            dst[j + 16] = static_cast<float>(kMxfp4DoubledValues[blk.qs[j] >> 4]) * d;
        }
    }
}

// IQ4_NL: like Q4_0 but the nibble indexes the non-linear level table: value = d * level.
void dequant_iq4_nl(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, dst += 32) {
        const auto blk = load_block<BlockIQ4_NL>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < 16; ++j) {
            dst[j] = d * static_cast<float>(kIq4NlValues[blk.qs[j] & 0x0f]);
            dst[j + 16] = d * static_cast<float>(kIq4NlValues[blk.qs[j] >> 4]);
        }
    }
}

// ---- k-quants: 256-value super-blocks --------------------------------------------------------

// Q2_K: 16 sub-blocks of 16 values, each with a 4-bit scale (low nibble of scales[s]) and a 4-bit
// min (high nibble): value = (d * scale) * q - dmin * min, q unsigned 2-bit.
// The 2-bit codes: values 128h .. 128h+127 use qs[32h .. 32h+31]; within that half, the four
// bit pairs (shift 0, 2, 4, 6) each cover 32 values: 16 from qs[32h + l] then 16 from
// qs[32h + 16 + l]. Sub-block s = 8h + 2 * pair + (0 or 1) in that order.
void dequant_q2_k(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockQ2_K>(src, b);
        const float d = f16_to_f32(blk.d);
        const float dmin = f16_to_f32(blk.dmin);
        int s = 0;
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q = blk.qs + 32 * half;
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part, ++s) {
                    const float dl = d * static_cast<float>(blk.scales[s] & 0x0f);
                    const float ml = dmin * static_cast<float>(blk.scales[s] >> 4);
                    for (int l = 0; l < 16; ++l) {
                        const int code = (q[16 * part + l] >> shift) & 3;
                        *dst++ = dl * static_cast<float>(code) - ml;
                    }
                }
            }
        }
    }
}

// Q3_K: 16 sub-blocks of 16 values with signed 6-bit scales stored as scale + 32 in 12 bytes:
// the low 4 bits of scale s are the low nibble of byte s (s < 8) or the high nibble of byte
// s - 8 (s >= 8); the high 2 bits are bits 2*(s/4) .. 2*(s/4)+1 of byte 8 + s%4.
// Each value has a 3-bit code: 2 low bits in qs (arranged exactly as in Q2_K) and a high bit in
// hmask: value 128h + 32*pair + 16*part + l takes bit (4h + pair) of hmask[16 * part + l].
// The code is stored offset: value = (d * (scale - 32)) * (low2 - (high ? 0 : 4)).
int q3k_scale(const uint8_t* sc, int s) {
    const int low = s < 8 ? (sc[s] & 0x0f) : (sc[s - 8] >> 4);
    const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (low | (high << 4)) - 32;
}

void dequant_q3_k(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockQ3_K>(src, b);
        const float d = f16_to_f32(blk.d);
        int s = 0;
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q = blk.qs + 32 * half;
            for (int pair = 0; pair < 4; ++pair) {
                const int shift = 2 * pair;
                const uint8_t high_bit = static_cast<uint8_t>(1u << (4 * half + pair));
                for (int part = 0; part < 2; ++part, ++s) {
                    const float dl = d * static_cast<float>(q3k_scale(blk.scales, s));
                    for (int l = 0; l < 16; ++l) {
                        const int low2 = (q[16 * part + l] >> shift) & 3;
                        const int code = low2 - ((blk.hmask[16 * part + l] & high_bit) ? 0 : 4);
                        *dst++ = dl * static_cast<float>(code);
                    }
                }
            }
        }
    }
}

// Q4_K/Q5_K: 8 sub-blocks of 32 values, each with an unsigned 6-bit scale and 6-bit min packed
// in 12 bytes. Sub-blocks 0..3: scale = bytes[s] & 63, min = bytes[s + 4] & 63. Sub-blocks
// 4..7: the low 4 bits are the nibbles of bytes[s + 4] (scale low, min high) and the high 2
// bits are the top bits of bytes[s - 4] (scale) and bytes[s] (min).
struct ScaleMin {
    int scale, min;
};

ScaleMin k4_scale_min(const uint8_t* sc, int s) {
    if (s < 4) return {sc[s] & 63, sc[s + 4] & 63};
    return {(sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4), (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4)};
}

// Q4_K: value = (d * scale) * q - dmin * min, q unsigned 4-bit. Values 64c .. 64c+63 use
// qs[32c .. 32c+31]: low nibbles give the first 32 (sub-block 2c), high nibbles the next 32.
void dequant_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockQ4_K>(src, b);
        const float d = f16_to_f32(blk.d);
        const float dmin = f16_to_f32(blk.dmin);
        for (int c = 0; c < 4; ++c) {
            const uint8_t* q = blk.qs + 32 * c;
            for (int nib = 0; nib < 2; ++nib) {
                const ScaleMin sm = k4_scale_min(blk.scales, 2 * c + nib);
                const float dl = d * static_cast<float>(sm.scale);
                const float ml = dmin * static_cast<float>(sm.min);
                for (int l = 0; l < 32; ++l) {
                    const int code = (q[l] >> (4 * nib)) & 0x0f;
                    *dst++ = dl * static_cast<float>(code) - ml;
                }
            }
        }
    }
}

// Q5_K: Q4_K plus a fifth bit per value: value 32s + l (sub-block s) takes bit s of qh[l].
void dequant_q5_k(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockQ5_K>(src, b);
        const float d = f16_to_f32(blk.d);
        const float dmin = f16_to_f32(blk.dmin);
        for (int c = 0; c < 4; ++c) {
            const uint8_t* q = blk.qs + 32 * c;
            for (int nib = 0; nib < 2; ++nib) {
                const int s = 2 * c + nib;
                const ScaleMin sm = k4_scale_min(blk.scales, s);
                const float dl = d * static_cast<float>(sm.scale);
                const float ml = dmin * static_cast<float>(sm.min);
                for (int l = 0; l < 32; ++l) {
                    const int code = ((q[l] >> (4 * nib)) & 0x0f) | (((blk.qh[l] >> s) & 1) << 4);
                    *dst++ = dl * static_cast<float>(code) - ml;
                }
            }
        }
    }
}

// Q6_K: 16 sub-blocks of 16 values with signed 8-bit scales: value = (d * scale) * (q - 32),
// q unsigned 6-bit = 4 low bits from ql and 2 high bits from qh. In each half h (128 values,
// ql[64h ..], qh[32h ..]), for l in 0..31 the four values l, l+32, l+64, l+96 take
//   low nibble of ql[l], low nibble of ql[l+32], high nibble of ql[l], high nibble of ql[l+32]
// and bit pairs 0-1, 2-3, 4-5, 6-7 of qh[l] respectively. Sub-block = value index / 16.
void dequant_q6_k(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
        const auto blk = load_block<BlockQ6_K>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int half = 0; half < 2; ++half) {
            const uint8_t* ql = blk.ql + 64 * half;
            const uint8_t* qh = blk.qh + 32 * half;
            float* y = dst + 128 * half;
            for (int quarter = 0; quarter < 4; ++quarter) {
                const uint8_t* low_src = ql + 32 * (quarter & 1);
                const int low_shift = 4 * (quarter >> 1);
                for (int l = 0; l < 32; ++l) {
                    const int v = 32 * quarter + l;
                    const int code = ((low_src[l] >> low_shift) & 0x0f) | (((qh[l] >> (2 * quarter)) & 3) << 4);
                    const float dl = d * static_cast<float>(blk.scales[8 * half + v / 16]);
                    y[v] = dl * static_cast<float>(code - 32);
                }
            }
        }
    }
}

// ---- ternary ---------------------------------------------------------------------------------

// TQ1_0: 256 ternary values t in {-1, 0, 1} (value = t * d), 5 trits per byte (1.6 bits each).
// A byte stores its trits as a base-3 fraction rounded up to 8 bits, byte = ceil(x * 256 / 243)
// with x = sum t'_k 3^(4-k), t' = t + 1; trit k is read back by multiplying by 3^k (mod 256,
// dropping the leading trits) and taking the top "digit": (uint8(byte * 3^k) * 3) >> 8.
// Order: qs[0..31] give values 0..159 (trit k of byte m -> value 32k + m), qs[32..47] give
// values 160..239 (trit k of byte m -> 160 + 16k + m), and the 4 qh bytes give the last 16
// values (trit k of byte m -> 240 + 4k + m, only 4 trits used).
int tq1_trit(uint8_t byte, int k) {
    static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
    const uint8_t shifted = static_cast<uint8_t>(byte * kPow3[k]);
    return ((shifted * 3) >> 8) - 1;
}

void dequant_tq1_0(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockTQ1_0>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int k = 0; k < 5; ++k)
            for (int m = 0; m < 32; ++m) *dst++ = static_cast<float>(tq1_trit(blk.qs[m], k)) * d;
        for (int k = 0; k < 5; ++k)
            for (int m = 0; m < 16; ++m) *dst++ = static_cast<float>(tq1_trit(blk.qs[32 + m], k)) * d;
        for (int k = 0; k < 4; ++k)
            for (int m = 0; m < 4; ++m) *dst++ = static_cast<float>(tq1_trit(blk.qh[m], k)) * d;
    }
}

// TQ2_0: 2 bits per value, code c in {0, 1, 2}: value = (c - 1) * d. Values 128h + 32p + m
// are bit pair p (bits 2p, 2p+1) of qs[32h + m].
void dequant_tq2_0(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockTQ2_0>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int half = 0; half < 2; ++half)
            for (int p = 0; p < 4; ++p)
                for (int m = 0; m < 32; ++m) {
                    const int code = (blk.qs[32 * half + m] >> (2 * p)) & 3;
                    *dst++ = static_cast<float>(code - 1) * d;
                }
    }
}

// ---- i-quants: 256-value super-blocks of 8 groups of 32 ------------------------------------
// Groups of 8 (IQ2) or 4 (IQ3) magnitudes come from a grid entry; signs come from a mask where
// bit j set negates value j. value = (group_scale * magnitude) negated or not.

void put_signed_group8(float* y, float scale, uint64_t entry, uint8_t sign_mask) {
    for (int j = 0; j < 8; ++j) {
        const float v = scale * static_cast<float>(grid_value(entry, j));
        y[j] = (sign_mask & kIqSignBit[j]) ? -v : v;
    }
}

// IQ2_XXS: per group of 32, 8 bytes: bytes 0..3 are grid indices for the four groups of 8, and
// bytes 4..7 form a little-endian u32 w whose bits 7l..7l+6 index the sign mask of group l and
// whose top 4 bits are the scale: group scale = (d * (0.5 + w>>28)) * 0.25.
void dequant_iq2_xxs(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockIQ2_XXS>(src, b);
        const float d = f16_to_f32(blk.d);
        uint8_t qs[sizeof(blk.qs)];
        std::memcpy(qs, blk.qs, sizeof(qs));
        for (int g = 0; g < 8; ++g) {
            const uint8_t* idx = qs + 8 * g;
            const uint32_t w = load_u32(idx + 4);
            const float db = d * (0.5f + static_cast<float>(w >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l, dst += 8)
                put_signed_group8(dst, db, kIq2XxsGrid[idx[l]], kIqSignMasks[(w >> (7 * l)) & 127]);
        }
    }
}

// IQ2_XS: one u16 per group of 8: bits 0..8 grid index, bits 9..15 sign mask index. scales[g]
// holds two 4-bit scales for group of 32 g: low nibble for its first 16 values, high for the
// last 16; scale = (d * (0.5 + s)) * 0.25.
void dequant_iq2_xs(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockIQ2_XS>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int g = 0; g < 8; ++g) {
            const float db[2] = {d * (0.5f + static_cast<float>(blk.scales[g] & 0x0f)) * 0.25f,
                                 d * (0.5f + static_cast<float>(blk.scales[g] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l, dst += 8) {
                const uint16_t q = blk.qs[4 * g + l];
                put_signed_group8(dst, db[l / 2], kIq2XsGrid[q & 511], kIqSignMasks[q >> 9]);
            }
        }
    }
}

// IQ2_S: 10-bit grid indices: low 8 bits in qs[4g + l], high 2 bits are bits 2l..2l+1 of qh[g].
// Signs are stored whole (no parity trick): qs[32 + 4g + l] is the 8-bit mask of group l.
// Scales as in IQ2_XS.
void dequant_iq2_s(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockIQ2_S>(src, b);
        const float d = f16_to_f32(blk.d);
        const uint8_t* signs = blk.qs + kQK / 8;
        for (int g = 0; g < 8; ++g) {
            const float db[2] = {d * (0.5f + static_cast<float>(blk.scales[g] & 0x0f)) * 0.25f,
                                 d * (0.5f + static_cast<float>(blk.scales[g] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l, dst += 8) {
                const int index = blk.qs[4 * g + l] | (((blk.qh[g] >> (2 * l)) & 3) << 8);
                put_signed_group8(dst, db[l / 2], kIq2SGrid[index], signs[4 * g + l]);
            }
        }
    }
}

// Two IQ3 grid entries (4 magnitudes each) make a group of 8 sharing one sign mask.
void put_signed_group4x2(float* y, float scale, uint32_t first, uint32_t second, uint8_t sign_mask) {
    for (int j = 0; j < 4; ++j) {
        const float v0 = scale * static_cast<float>(grid_value(first, j));
        const float v1 = scale * static_cast<float>(grid_value(second, j));
        y[j] = (sign_mask & kIqSignBit[j]) ? -v0 : v0;
        y[j + 4] = (sign_mask & kIqSignBit[j + 4]) ? -v1 : v1;
    }
}

// IQ3_XXS: qs[0..63] are 8-bit grid indices, 8 per group of 32 (two per group of 8); qs[64..95]
// are one little-endian u32 w per group of 32: 4 x 7-bit sign mask indices (bits 7l..7l+6) and
// a 4-bit scale on top: group scale = (d * (0.5 + w>>28)) * 0.5.
void dequant_iq3_xxs(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockIQ3_XXS>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int g = 0; g < 8; ++g) {
            const uint8_t* idx = blk.qs + 8 * g;
            const uint32_t w = load_u32(blk.qs + kQK / 4 + 4 * g);
            const float db = d * (0.5f + static_cast<float>(w >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l, dst += 8) {
                put_signed_group4x2(dst, db, kIq3XxsGrid[idx[2 * l]], kIq3XxsGrid[idx[2 * l + 1]],
                                    kIqSignMasks[(w >> (7 * l)) & 127]);
            }
        }
    }
}

// IQ3_S: 9-bit grid indices: low 8 bits in qs[8g + i] (i = 0..7), the ninth bit is bit i of
// qh[g]. Signs whole: signs[4g + l] is the mask of group of 8 l. scales[g/2] holds a 4-bit
// scale per group of 32 (low nibble for even g): group scale = d * (1 + 2s).
void dequant_iq3_s(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockIQ3_S>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int g = 0; g < 8; ++g) {
            const int s = (blk.scales[g / 2] >> (4 * (g % 2))) & 0x0f;
            const float db = d * static_cast<float>(1 + 2 * s);
            const uint8_t* q = blk.qs + 8 * g;
            for (int l = 0; l < 4; ++l, dst += 8) {
                const int i0 = q[2 * l] | (((blk.qh[g] >> (2 * l)) & 1) << 8);
                const int i1 = q[2 * l + 1] | (((blk.qh[g] >> (2 * l + 1)) & 1) << 8);
                put_signed_group4x2(dst, db, kIq3SGrid[i0], kIq3SGrid[i1], blk.signs[4 * g + l]);
            }
        }
    }
}

// IQ1 groups of 8: grid values t in {-1, 0, 1} shifted by +-delta: value = scale * (t + delta).
void put_iq1_group8(float* y, float scale, uint64_t entry, float delta) {
    for (int j = 0; j < 8; ++j) y[j] = scale * (static_cast<float>(grid_value_signed(entry, j)) + delta);
}

// IQ1_S: 11-bit grid indices, low 8 bits in qs[4g + l]; the u16 qh[g] of group of 32 g holds the
// high 3 bits of group l at bits 3l..3l+2, a 3-bit scale at bits 12..14 (scale = d * (2s + 1))
// and the sign of delta in bit 15 (set = -delta).
void dequant_iq1_s(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockIQ1_S>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int g = 0; g < 8; ++g) {
            const unsigned qh = blk.qh[g];
            const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
            const float delta = (qh & 0x8000u) ? -kIq1SDelta : kIq1SDelta;
            for (int l = 0; l < 4; ++l, dst += 8) {
                const unsigned index = blk.qs[4 * g + l] | (((qh >> (3 * l)) & 7u) << 8);
                put_iq1_group8(dst, dl, kIq1SGrid[index], delta);
            }
        }
    }
}

// IQ1_M: no stored half for d: the 8 scale bytes are four u16 words w0..w3 whose top nibbles,
// w0's lowest, form the f16 bits of d. The remaining 12 bits of word g/2 hold two 3-bit
// scales per group of 32 g (bits 6*(g%2) ..): the first for its groups of 8 0-1, the second for
// 2-3, each meaning d * (2s + 1). Grid indices are 11-bit: low 8 in qs[4g + l], and qh[2g + l/2]
// gives, per nibble (low nibble for even l), the high 3 bits and in the nibble's bit 3 the sign
// of delta (set = -delta).
void dequant_iq1_m(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockIQ1_M>(src, b);
        uint16_t w[4];
        std::memcpy(w, blk.scales, sizeof(w));
        const uint16_t d_bits =
            static_cast<uint16_t>((w[0] >> 12) | ((w[1] >> 8) & 0x00f0) | ((w[2] >> 4) & 0x0f00) | (w[3] & 0xf000));
        const float d = f16_to_f32(d_bits);
        for (int g = 0; g < 8; ++g) {
            const int packed = w[g / 2] >> (6 * (g % 2));
            const float dl[2] = {d * static_cast<float>(2 * (packed & 7) + 1),
                                 d * static_cast<float>(2 * ((packed >> 3) & 7) + 1)};
            for (int l = 0; l < 4; ++l, dst += 8) {
                const int nibble = (blk.qh[2 * g + l / 2] >> (4 * (l % 2))) & 0x0f;
                const int index = blk.qs[4 * g + l] | ((nibble & 7) << 8);
                const float delta = (nibble & 8) ? -kIq1MDelta : kIq1MDelta;
                put_iq1_group8(dst, dl[l / 2], kIq1SGrid[index], delta);
            }
        }
    }
}

// IQ4_XS: IQ4_NL levels with a 6-bit signed scale (stored + 32) per group of 32: low 4 bits are
// nibble g%2 of scales_l[g/2], high 2 bits are bits 2g..2g+1 of scales_h. Within a group, qs
// bytes 16g..16g+15 hold values l (low nibble) and l + 16 (high nibble).
// value = (d * (scale - 32)) * level.
void dequant_iq4_xs(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const auto blk = load_block<BlockIQ4_XS>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int g = 0; g < 8; ++g, dst += 32) {
            const int low = (blk.scales_l[g / 2] >> (4 * (g % 2))) & 0x0f;
            const int high = (blk.scales_h >> (2 * g)) & 3;
            const float dl = d * static_cast<float>((low | (high << 4)) - 32);
            const uint8_t* q = blk.qs + 16 * g;
            for (int j = 0; j < 16; ++j) {
                dst[j] = dl * static_cast<float>(kIq4NlValues[q[j] & 0x0f]);
                dst[j + 16] = dl * static_cast<float>(kIq4NlValues[q[j] >> 4]);
            }
        }
    }
}

using DequantFn = void (*)(const uint8_t* src, float* dst, int64_t n_blocks);

DequantFn dequantizer(Type t) {
    switch (t) {
        case Type::F32: return dequant_f32;
        case Type::F16: return dequant_f16;
        case Type::BF16: return dequant_bf16;
        case Type::Q4_0: return dequant_q4_0;
        case Type::Q4_1: return dequant_q4_1;
        case Type::Q5_0: return dequant_q5_0;
        case Type::Q5_1: return dequant_q5_1;
        case Type::Q8_0: return dequant_q8_0;
        case Type::MXFP4: return dequant_mxfp4;
        case Type::IQ4_NL: return dequant_iq4_nl;
        case Type::Q2_K: return dequant_q2_k;
        case Type::Q3_K: return dequant_q3_k;
        case Type::Q4_K: return dequant_q4_k;
        case Type::Q5_K: return dequant_q5_k;
        case Type::Q6_K: return dequant_q6_k;
        case Type::TQ1_0: return dequant_tq1_0;
        case Type::TQ2_0: return dequant_tq2_0;
        case Type::IQ2_XXS: return dequant_iq2_xxs;
        case Type::IQ2_XS: return dequant_iq2_xs;
        case Type::IQ2_S: return dequant_iq2_s;
        case Type::IQ3_XXS: return dequant_iq3_xxs;
        case Type::IQ3_S: return dequant_iq3_s;
        case Type::IQ1_S: return dequant_iq1_s;
        case Type::IQ1_M: return dequant_iq1_m;
        case Type::IQ4_XS: return dequant_iq4_xs;
        default: return nullptr;
    }
}

}  // namespace

void dequantize_row(Type t, const void* src, float* dst, int64_t n) {
    const TypeInfo* info = type_info(static_cast<uint32_t>(t));
    const DequantFn fn = info ? dequantizer(t) : nullptr;
    if (!fn) {
        throw Error(std::string("cannot dequantize tensor type ") +
                    (info ? info->name : std::to_string(static_cast<uint32_t>(t))));
    }
    if (n < 0 || n % info->block_elems != 0) {
        throw Error("cannot dequantize " + std::to_string(n) + " values of type " + info->name + ": not a whole number of " +
                    std::to_string(info->block_elems) + "-value blocks");
    }
    if (n == 0) return;
    // Plain types are processed per value (their "block" is one value).
    fn(static_cast<const uint8_t*>(src), dst, n / info->block_elems);
}

}  // namespace strata::quant
