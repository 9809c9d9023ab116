// Reference quantisers: dispatch and argument checks, the plain float types, the 32-value block
// types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) and IQ4_XS. The k-quants live in
// quantize_kquants.cpp; the shared search machinery and its rationale in quantize_internal.h.
#include "quant/quantize.h"

#include <cmath>
#include <cstring>
#include <string>

#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quantize_internal.h"
#include "util/error.h"
#include "util/fp16.h"

namespace strata::quant {

using namespace detail;

namespace {

// The 16 levels of the IQ4 formats (kIq4NlValues, iq_tables.h) with their nearest-level table.
const TableLevels16& iq4_levels() {
    static const TableLevels16 levels(kIq4NlValues);
    return levels;
}

void quantize_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); }

void quantize_f16(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(src[i]);
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
}

// Q8_0: x = d * q, q in [-127, 127] (the format's int8 would allow -128, but kernels elsewhere
// in the ecosystem assume a symmetric range, so we never emit it).
void quantize_q8_0(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    constexpr int kN = 32;
    const UniformLevels levels{-127, 127};
    auto* out = static_cast<BlockQ8_0*>(dst);
    double x[kN], w[kN];
    int codes[kN];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kN, kN, x);
        block_weights(importance ? importance + b * kN : nullptr, kN, w);
        // With 255 levels the rounding pattern barely changes with the scale; a short grid
        // around "largest value -> 127" plus the refit is all that helps.
        const double scale = fit_scale(x, w, kN, levels, ScaleGrid{0.5, 0.5, 0.25});
        const uint16_t h = encode_scale_f16(x, w, kN, levels, scale);
        assign_codes(x, kN, levels, f16_to_f32(h), codes);
        out[b].d = h;
        for (int i = 0; i < kN; ++i) out[b].qs[i] = static_cast<int8_t>(codes[i]);
    }
}

// Q4_0: x = d * (nibble - 8), levels -8..7.
void quantize_q4_0(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    constexpr int kN = 32;
    const UniformLevels levels{-8, 7};
    auto* out = static_cast<BlockQ4_0*>(dst);
    double x[kN], w[kN];
    int codes[kN];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kN, kN, x);
        block_weights(importance ? importance + b * kN : nullptr, kN, w);
        const double scale = fit_scale(x, w, kN, levels, ScaleGrid{1.5, 0.5, 0.2});
        const uint16_t h = encode_scale_f16(x, w, kN, levels, scale);
        assign_codes(x, kN, levels, f16_to_f32(h), codes);
        out[b].d = h;
        for (int i = 0; i < kN / 2; ++i) {
            out[b].qs[i] = static_cast<uint8_t>((codes[i] + 8) | ((codes[i + kN / 2] + 8) << 4));
        }
    }
}

// Packs 32 five-bit values u_i: low nibbles as in Q4_0 (byte i: value i, value i + 16), the
// fifth bits in a little-endian 32-bit mask with bit i for value i.
void pack_5bit_32(const int* u, uint8_t* qs, uint8_t* qh) {
    uint32_t high = 0;
    for (int i = 0; i < 16; ++i) {
        qs[i] = static_cast<uint8_t>((u[i] & 0xf) | ((u[i + 16] & 0xf) << 4));
        high |= static_cast<uint32_t>(u[i] >> 4) << i;
        high |= static_cast<uint32_t>(u[i + 16] >> 4) << (i + 16);
    }
    for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(high >> (8 * k));
}

// Q5_0: x = d * (u - 16), u 0..31.
void quantize_q5_0(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    constexpr int kN = 32;
    const UniformLevels levels{-16, 15};
    auto* out = static_cast<BlockQ5_0*>(dst);
    double x[kN], w[kN];
    int codes[kN];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kN, kN, x);
        block_weights(importance ? importance + b * kN : nullptr, kN, w);
        const double scale = fit_scale(x, w, kN, levels, ScaleGrid{1.5, 0.5, 0.2});
        const uint16_t h = encode_scale_f16(x, w, kN, levels, scale);
        assign_codes(x, kN, levels, f16_to_f32(h), codes);
        out[b].d = h;
        for (int i = 0; i < kN; ++i) codes[i] += 16;
        pack_5bit_32(codes, out[b].qs, out[b].qh);
    }
}

// Q4_1 / Q5_1: x = d * u + m with u in 0..nmax and a signed fp16 m. The real (scale, offset)
// fit is encoded as whichever pair of fp16 neighbours (d, m = -offset) reconstructs best.
template <class Block, int kNMax>
void quantize_scale_min_32(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    constexpr int kN = 32;
    auto* out = static_cast<Block*>(dst);
    double x[kN], w[kN];
    int u[kN];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kN, kN, x);
        block_weights(importance ? importance + b * kN : nullptr, kN, w);
        const ScaleOffset fit = fit_scale_offset(x, w, kN, kNMax, true);
        const F16Pair ds = f16_neighbours(fit.scale), ms = f16_neighbours(-fit.offset);
        double best_err = INFINITY;
        for (int i = 0; i < ds.count; ++i) {
            for (int j = 0; j < ms.count; ++j) {
                const double err = offset_error(x, w, kN, kNMax, f16_to_f32(ds.h[i]), -f16_to_f32(ms.h[j]));
                if (err < best_err) {
                    best_err = err;
                    out[b].d = ds.h[i];
                    out[b].m = ms.h[j];
                }
            }
        }
        const double scale = f16_to_f32(out[b].d), offset = -f16_to_f32(out[b].m);
        const double inv = scale != 0.0 ? 1.0 / scale : 0.0;
        for (int i = 0; i < kN; ++i) u[i] = nearest_level((x[i] + offset) * inv, 0, kNMax);
        if constexpr (kNMax == 15) {
            for (int i = 0; i < kN / 2; ++i) out[b].qs[i] = static_cast<uint8_t>(u[i] | (u[i + kN / 2] << 4));
        } else {
            pack_5bit_32(u, out[b].qs, out[b].qh);
        }
    }
}

// Packs 32 IQ4 codes: byte i holds value i (low nibble) and value i + 16 (high nibble).
void pack_iq4_32(const int* codes, uint8_t* qs) {
    for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>(codes[i] | (codes[i + 16] << 4));
}

// The IQ4 levels are spaced 10-24 apart, so the scale grid steps a whole level unit at a time,
// mapping the extreme value between 12 units inside and 4 units outside either end.
constexpr ScaleGrid kIq4Grid{12.0, 4.0, 2.0};

// IQ4_NL: x = d * kIq4NlValues[code], 32 values per block.
void quantize_iq4_nl(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    constexpr int kN = 32;
    const TableLevels16& levels = iq4_levels();
    auto* out = static_cast<BlockIQ4_NL*>(dst);
    double x[kN], w[kN];
    int codes[kN];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kN, kN, x);
        block_weights(importance ? importance + b * kN : nullptr, kN, w);
        const double scale = fit_scale(x, w, kN, levels, kIq4Grid);
        const uint16_t h = encode_scale_f16(x, w, kN, levels, scale);
        assign_codes(x, kN, levels, f16_to_f32(h), codes);
        out[b].d = h;
        pack_iq4_32(codes, out[b].qs);
    }
}

// IQ4_XS: 256-value super-blocks of eight 32-value blocks; x = d * (ls - 32) * kIq4NlValues[code]
// with a 6-bit block scale ls (low 4 bits in scales_l nibbles, high 2 bits in scales_h).
void quantize_iq4_xs(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    constexpr int kSub = 32, kNSub = kQK / kSub;
    const TableLevels16& levels = iq4_levels();
    auto* out = static_cast<BlockIQ4_XS*>(dst);
    double x[kQK], w[kQK], scales[kNSub];
    int sub_codes[kNSub], codes[kSub];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kQK, kQK, x);
        block_weights(importance ? importance + b * kQK : nullptr, kQK, w);
        for (int j = 0; j < kNSub; ++j) {
            scales[j] = fit_scale(x + j * kSub, w + j * kSub, kSub, levels, kIq4Grid);
        }
        const uint16_t h = quantize_sub_scales(x, w, kNSub, kSub, scales, levels, -32, 31, sub_codes);
        const float super = f16_to_f32(h);
        BlockIQ4_XS& blk = out[b];
        blk.d = h;
        blk.scales_h = 0;
        std::memset(blk.scales_l, 0, sizeof blk.scales_l);
        for (int j = 0; j < kNSub; ++j) {
            const int stored = sub_codes[j] + 32;  // 0..63
            blk.scales_l[j / 2] |= static_cast<uint8_t>((stored & 0xf) << (4 * (j % 2)));
            blk.scales_h |= static_cast<uint16_t>((stored >> 4) << (2 * j));
            const double scale = static_cast<double>(super * static_cast<float>(sub_codes[j]));
            assign_codes(x + j * kSub, kSub, levels, scale, codes);
            pack_iq4_32(codes, blk.qs + j * (kSub / 2));
        }
    }
}

using BlockQuantizer = void (*)(const float*, void*, int64_t, const float*);

BlockQuantizer block_quantizer(Type t) {
    switch (t) {
        case Type::Q8_0: return quantize_q8_0;
        case Type::Q4_0: return quantize_q4_0;
        case Type::Q4_1: return quantize_scale_min_32<BlockQ4_1, 15>;
        case Type::Q5_0: return quantize_q5_0;
        case Type::Q5_1: return quantize_scale_min_32<BlockQ5_1, 31>;
        case Type::IQ4_NL: return quantize_iq4_nl;
        case Type::IQ4_XS: return quantize_iq4_xs;
        case Type::Q2_K: return quantize_q2_k;
        case Type::Q3_K: return quantize_q3_k;
        case Type::Q4_K: return quantize_q4_k;
        case Type::Q5_K: return quantize_q5_k;
        case Type::Q6_K: return quantize_q6_k;
        default: return nullptr;
    }
}

}  // namespace

bool can_quantize(Type t) { return is_float_type(t) || block_quantizer(t) != nullptr; }

void quantize_row(Type t, const float* src, void* dst, int64_t n, const float* importance) {
    const TypeInfo* info = type_info(static_cast<uint32_t>(t));
    const std::string name = info ? info->name : "type id " + std::to_string(static_cast<uint32_t>(t));
    if (!info || !can_quantize(t)) throw Error("cannot quantize to type " + name + ": no quantizer for it");
    if (n < 0) throw Error("quantize to " + name + ": negative value count " + std::to_string(n));
    const int64_t block = type_info(t).block_elems;
    if (n % block != 0) {
        throw Error("quantize to " + name + ": " + std::to_string(n) + " values is not a whole number of " +
                    std::to_string(block) + "-value blocks");
    }
    if (n == 0) return;

    switch (t) {
        case Type::F32: return quantize_f32(src, dst, n);
        case Type::F16: return quantize_f16(src, dst, n);
        case Type::BF16: return quantize_bf16(src, dst, n);
        default: break;
    }
    // The searches assume finite inputs and non-negative weights; say which value is wrong.
    for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(src[i])) {
            throw Error("quantize to " + name + ": value " + std::to_string(i) + " is not finite");
        }
    }
    if (importance) {
        for (int64_t i = 0; i < n; ++i) {
            if (!(importance[i] >= 0.0f) || std::isinf(importance[i])) {
                throw Error("quantize to " + name + ": importance " + std::to_string(i) + " is negative or not finite");
            }
        }
    }
    block_quantizer(t)(src, dst, n / block, importance);
}

}  // namespace strata::quant
