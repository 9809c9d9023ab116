// Reference quantisers for the k-quants stored in files: Q2_K, Q4_K and Q5_K (unsigned levels
// with a per-sub-block scale and offset, both codes of two fp16 super-scales) and Q3_K and Q6_K
// (signed levels, signed sub-block scale codes of one fp16 super-scale). Machinery and the
// rationale of the searches: quantize_internal.h.
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quantize_internal.h"
#include "util/fp16.h"

namespace strata::quant::detail {

namespace {

// Geometry of a scale-and-offset k-quant super-block.
struct OffsetLayout {
    int sub_len;   // values per sub-block
    int n_sub;     // sub-blocks per super-block (sub_len * n_sub == kQK)
    int nmax;      // levels 0..nmax
    int code_max;  // scale and offset codes 0..code_max
};

constexpr OffsetLayout kQ2K{16, 16, 3, 15};
constexpr OffsetLayout kQ4K{32, 8, 15, 63};
constexpr OffsetLayout kQ5K{32, 8, 31, 63};
constexpr int kMaxSub = 16;

// The stored scales of a scale-and-offset super-block.
struct KScales {
    uint16_t d = 0, dmin = 0;
    int ls[kMaxSub] = {};
    int lm[kMaxSub] = {};
};

// Chooses the two fp16 super-scales and the per-sub-block codes from the sub-blocks' real fits.
// Candidate super-scales give the largest real scale (offset) one of the top few codes; each is
// judged by the true error of the whole super-block with levels re-chosen. The scale
// super-scale is chosen first with the nominal offset super-scale, then the offset one; finally
// each sub-block tries its codes +-1 on both.
KScales quantize_k_scales(const double* x, const double* w, const OffsetLayout& lay, const ScaleOffset* fits) {
    double max_scale = 0.0, max_offset = 0.0;
    for (int j = 0; j < lay.n_sub; ++j) {
        max_scale = std::fmax(max_scale, fits[j].scale);
        max_offset = std::fmax(max_offset, fits[j].offset);
    }
    auto value = [](uint16_t super, int code) {
        return static_cast<double>(f16_to_f32(super) * static_cast<float>(code));  // as dequantisers do
    };
    auto code_for = [&](double real, uint16_t super) {
        const float s = f16_to_f32(super);
        return s > 0.0f ? nearest_level(real / s, 0, lay.code_max) : 0;
    };
    auto sub_error = [&](int j, double scale, double offset) {
        return offset_error(x + j * lay.sub_len, w + j * lay.sub_len, lay.sub_len, lay.nmax, scale, offset);
    };
    auto total_error = [&](uint16_t d, uint16_t dmin, double bound) {
        double err = 0.0;
        for (int j = 0; j < lay.n_sub && err < bound; ++j) {
            err += sub_error(j, value(d, code_for(fits[j].scale, d)), value(dmin, code_for(fits[j].offset, dmin)));
        }
        return err;
    };
    // Super-scale candidates: the largest real value gets one of the top four codes, through both
    // fp16 neighbours of the exact ratio (see quantize_sub_scales in quantize_internal.h for why).
    auto search = [&](double max_real, auto error_of) {
        uint16_t best = 0;
        double best_err = INFINITY;
        if (max_real == 0.0) return best;
        uint16_t previous = 0;
        for (int code = lay.code_max; code > lay.code_max - 4; --code) {
            const F16Pair pair = f16_neighbours(max_real / code);
            for (int p = 0; p < pair.count; ++p) {
                const uint16_t h = pair.h[p];
                if (h == 0 || h == previous) continue;  // neighbours of adjacent codes often coincide
                previous = h;
                const double err = error_of(h, best_err);
                if (err < best_err) {
                    best_err = err;
                    best = h;
                }
            }
        }
        return best;
    };

    KScales ks;
    const uint16_t nominal_dmin = f16_saturating(max_offset / lay.code_max);
    ks.d = search(max_scale, [&](uint16_t h, double bound) { return total_error(h, nominal_dmin, bound); });
    ks.dmin = search(max_offset, [&](uint16_t h, double bound) { return total_error(ks.d, h, bound); });

    for (int j = 0; j < lay.n_sub; ++j) {
        const int ls0 = code_for(fits[j].scale, ks.d), lm0 = code_for(fits[j].offset, ks.dmin);
        double best_err = INFINITY;
        for (int ls = ls0 - 1; ls <= ls0 + 1; ++ls) {
            if (ls < 0 || ls > lay.code_max) continue;
            for (int lm = lm0 - 1; lm <= lm0 + 1; ++lm) {
                if (lm < 0 || lm > lay.code_max) continue;
                const double err = sub_error(j, value(ks.d, ls), value(ks.dmin, lm));
                if (err < best_err) {
                    best_err = err;
                    ks.ls[j] = ls;
                    ks.lm[j] = lm;
                }
            }
        }
    }
    return ks;
}

// Packs eight 6-bit scale codes and eight 6-bit offset codes into 12 bytes: sub-blocks 0-3 keep
// theirs in the low 6 bits of bytes 0-3 (scale) and 4-7 (offset); sub-blocks 4-7 put their low
// 4 bits in the nibbles of bytes 8-11 and their top 2 bits in the spare top bits of bytes 0-7.
void pack_k_scales(const KScales& ks, uint8_t* out) {
    std::memset(out, 0, kKScaleSize);
    for (int j = 0; j < 8; ++j) {
        const int ls = ks.ls[j], lm = ks.lm[j];
        if (j < 4) {
            out[j] = static_cast<uint8_t>(ls);
            out[j + 4] = static_cast<uint8_t>(lm);
        } else {
            out[j + 4] = static_cast<uint8_t>((ls & 0xf) | ((lm & 0xf) << 4));
            out[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
            out[j] |= static_cast<uint8_t>((lm >> 4) << 6);
        }
    }
}

// Shared body of the scale-and-offset k-quants: fits, stored scales, and the final levels.
KScales quantize_k_super_block(const double* x, const double* w, const OffsetLayout& lay, int* levels) {
    ScaleOffset fits[kMaxSub];
    for (int j = 0; j < lay.n_sub; ++j) {
        fits[j] = fit_scale_offset(x + j * lay.sub_len, w + j * lay.sub_len, lay.sub_len, lay.nmax, false);
    }
    const KScales ks = quantize_k_scales(x, w, lay, fits);
    const float d = f16_to_f32(ks.d), dmin = f16_to_f32(ks.dmin);
    for (int j = 0; j < lay.n_sub; ++j) {
        const double scale = static_cast<double>(d * static_cast<float>(ks.ls[j]));
        const double offset = static_cast<double>(dmin * static_cast<float>(ks.lm[j]));
        const double inv = scale != 0.0 ? 1.0 / scale : 0.0;
        for (int i = 0; i < lay.sub_len; ++i) {
            const int idx = j * lay.sub_len + i;
            levels[idx] = nearest_level((x[idx] + offset) * inv, 0, lay.nmax);
        }
    }
    return ks;
}

// Shared body of the signed k-quants (Q3_K, Q6_K): per-sub-block real scales, their codes in
// [code_lo, code_hi] under one fp16 super-scale, and the final signed levels. Returns the
// super-scale.
uint16_t quantize_signed_super_block(const double* x, const double* w, int sub_len, const UniformLevels& levels, int code_lo,
                                     int code_hi, int* sub_codes, int* q) {
    const int n_sub = kQK / sub_len;
    double scales[kMaxSub];
    for (int j = 0; j < n_sub; ++j) {
        scales[j] = fit_scale(x + j * sub_len, w + j * sub_len, sub_len, levels, ScaleGrid{1.5, 0.5, 0.5});
    }
    const uint16_t h = quantize_sub_scales(x, w, n_sub, sub_len, scales, levels, code_lo, code_hi, sub_codes);
    const float super = f16_to_f32(h);
    for (int j = 0; j < n_sub; ++j) {
        const double scale = static_cast<double>(super * static_cast<float>(sub_codes[j]));
        assign_codes(x + j * sub_len, sub_len, levels, scale, q + j * sub_len);
    }
    return h;
}

// Packs 2-bit fields: within each 128-value chunk c, value 128c + 32s + i goes to bits 2s..2s+1
// of byte 32c + i (Q2_K levels, the low bits of Q3_K levels).
void pack_2bit(const int* v, uint8_t* qs) {
    for (int c = 0; c < kQK / 128; ++c) {
        for (int i = 0; i < 32; ++i) {
            const int* p = v + 128 * c + i;
            qs[32 * c + i] = static_cast<uint8_t>((p[0] & 3) | ((p[32] & 3) << 2) | ((p[64] & 3) << 4) | ((p[96] & 3) << 6));
        }
    }
}

}  // namespace

// Q2_K: x = d * (sc & 15) * level - dmin * (sc >> 4), level 0..3, sixteen 16-value sub-blocks
// with one byte sc of 4-bit scale and offset codes each.
void quantize_q2_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    auto* out = static_cast<BlockQ2_K*>(dst);
    double x[kQK], w[kQK];
    int levels[kQK];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kQK, kQK, x);
        block_weights(importance ? importance + b * kQK : nullptr, kQK, w);
        const KScales ks = quantize_k_super_block(x, w, kQ2K, levels);
        BlockQ2_K& blk = out[b];
        blk.d = ks.d;
        blk.dmin = ks.dmin;
        for (int j = 0; j < kQ2K.n_sub; ++j) blk.scales[j] = static_cast<uint8_t>(ks.ls[j] | (ks.lm[j] << 4));
        pack_2bit(levels, blk.qs);
    }
}

// Q3_K: x = d * (s - 32) * level, level -4..3, sixteen 16-value sub-blocks with 6-bit scale
// codes s. Levels + 4 (0..7) keep their low 2 bits as in Q2_K and their third bit in hmask: value
// v at bit v / 32 of hmask[v % 32]. Scale code j keeps its low 4 bits in nibble j / 8 of byte
// j % 8 and its top 2 bits at bits 2 (j / 4) of byte 8 + j % 4.
void quantize_q3_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    constexpr int kSub = 16, kNSub = kQK / kSub;
    const UniformLevels levels{-4, 3};
    auto* out = static_cast<BlockQ3_K*>(dst);
    double x[kQK], w[kQK];
    int sub_codes[kNSub], q[kQK];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kQK, kQK, x);
        block_weights(importance ? importance + b * kQK : nullptr, kQK, w);
        BlockQ3_K& blk = out[b];
        blk.d = quantize_signed_super_block(x, w, kSub, levels, -32, 31, sub_codes, q);
        std::memset(blk.scales, 0, sizeof blk.scales);
        for (int j = 0; j < kNSub; ++j) {
            const int s = sub_codes[j] + 32;
            blk.scales[j % 8] |= static_cast<uint8_t>((s & 0xf) << (4 * (j / 8)));
            blk.scales[8 + j % 4] |= static_cast<uint8_t>((s >> 4) << (2 * (j / 4)));
        }
        std::memset(blk.hmask, 0, sizeof blk.hmask);
        for (int v = 0; v < kQK; ++v) {
            q[v] += 4;
            blk.hmask[v % 32] |= static_cast<uint8_t>((q[v] >> 2) << (v / 32));
        }
        pack_2bit(q, blk.qs);
    }
}

// Q4_K: x = d * ls * level - dmin * lm, level 0..15. Each 64-value chunk c stores its first 32
// levels in the low nibbles and its second 32 in the high nibbles of qs[32c .. 32c + 31].
void quantize_q4_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    auto* out = static_cast<BlockQ4_K*>(dst);
    double x[kQK], w[kQK];
    int levels[kQK];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kQK, kQK, x);
        block_weights(importance ? importance + b * kQK : nullptr, kQK, w);
        const KScales ks = quantize_k_super_block(x, w, kQ4K, levels);
        BlockQ4_K& blk = out[b];
        blk.d = ks.d;
        blk.dmin = ks.dmin;
        pack_k_scales(ks, blk.scales);
        for (int c = 0; c < kQK / 64; ++c) {
            for (int i = 0; i < 32; ++i) {
                blk.qs[32 * c + i] = static_cast<uint8_t>(levels[64 * c + i] | (levels[64 * c + 32 + i] << 4));
            }
        }
    }
}

// Q5_K: as Q4_K with levels 0..31; the low 4 bits are packed as in Q4_K and the fifth bit of
// value 64c + i (64c + 32 + i) is bit 2c (2c + 1) of qh[i].
void quantize_q5_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    auto* out = static_cast<BlockQ5_K*>(dst);
    double x[kQK], w[kQK];
    int levels[kQK];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kQK, kQK, x);
        block_weights(importance ? importance + b * kQK : nullptr, kQK, w);
        const KScales ks = quantize_k_super_block(x, w, kQ5K, levels);
        BlockQ5_K& blk = out[b];
        blk.d = ks.d;
        blk.dmin = ks.dmin;
        pack_k_scales(ks, blk.scales);
        std::memset(blk.qh, 0, sizeof blk.qh);
        for (int c = 0; c < kQK / 64; ++c) {
            for (int i = 0; i < 32; ++i) {
                const int lo = levels[64 * c + i], hi = levels[64 * c + 32 + i];
                blk.qs[32 * c + i] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
                blk.qh[i] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

// Q6_K: x = d * scale_j * (level - 32), level 0..63, sixteen 16-value sub-blocks with int8
// scales. Each 128-value half h stores the low 4 bits of its values v, v+32, v+64, v+96 as
// ql[64h + v] (v, v+64) and ql[64h + 32 + v] (v+32, v+96), and their top 2 bits in qh[32h + v].
void quantize_q6_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    constexpr int kSub = 16, kNSub = kQK / kSub;
    const UniformLevels levels{-32, 31};
    auto* out = static_cast<BlockQ6_K*>(dst);
    double x[kQK], w[kQK];
    int sub_codes[kNSub], q[kQK];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kQK, kQK, x);
        block_weights(importance ? importance + b * kQK : nullptr, kQK, w);
        BlockQ6_K& blk = out[b];
        blk.d = quantize_signed_super_block(x, w, kSub, levels, -128, 127, sub_codes, q);
        for (int j = 0; j < kNSub; ++j) blk.scales[j] = static_cast<int8_t>(sub_codes[j]);
        for (int half = 0; half < 2; ++half) {
            const int* l = q + 128 * half;
            uint8_t* ql = blk.ql + 64 * half;
            uint8_t* qh = blk.qh + 32 * half;
            for (int v = 0; v < 32; ++v) {
                const int a = l[v] + 32, b2 = l[v + 32] + 32, c = l[v + 64] + 32, e = l[v + 96] + 32;
                ql[v] = static_cast<uint8_t>((a & 0xf) | ((c & 0xf) << 4));
                ql[v + 32] = static_cast<uint8_t>((b2 & 0xf) | ((e & 0xf) << 4));
                qh[v] = static_cast<uint8_t>((a >> 4) | ((b2 >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
            }
        }
    }
}

}  // namespace strata::quant::detail
