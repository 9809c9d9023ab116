// Reference quantisers for the k-quants stored in files: Q4_K and Q5_K (unsigned levels with a
// per-sub-block scale and offset, both 6-bit codes of two fp16 super-scales) and Q6_K (signed
// levels, int8 sub-block scales of one fp16 super-scale). Machinery: quantize_internal.h.
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quantize_internal.h"
#include "util/fp16.h"

namespace strata::quant::detail {

namespace {

constexpr int kSub32 = 32;                // Q4_K/Q5_K sub-block length
constexpr int kNSub32 = kQK / kSub32;     // 8 sub-blocks
constexpr int kScaleCodeMax = 63;         // 6-bit scale and offset codes

// x ~ scale * level - offset with level in [0, nmax], scale >= 0, offset >= 0: the formats store
// the offset as an unsigned "min" that the dequantiser subtracts, so a block whose values are
// all positive is fitted with offset 0 rather than a negative one.
struct ScaleOffset {
    double scale = 0.0;
    double offset = 0.0;
};

// Best real (scale, offset) for one sub-block. For a fixed level assignment both follow from the
// 2x2 weighted least-squares normal equations
//     [sum w l^2  sum w l] [scale ]   [sum w x l]
//     [sum w l    sum w  ] [-offset] = [sum w x  ]
// (with offset pinned to 0 when the fit wants it negative), and the error follows from the same
// sums in O(1). Candidate assignments map the block's range [min(x,0), max(x)] onto
// [0, nmax + delta] for a grid of delta; the best is then polished with Lloyd steps.
ScaleOffset fit_scale_offset(const double* x, const double* w, int n, int nmax) {
    double lo = x[0], hi = x[0];
    double sum_w = 0.0, sum_wx = 0.0, sum_wxx = 0.0;
    for (int i = 0; i < n; ++i) {
        lo = std::fmin(lo, x[i]);
        hi = std::fmax(hi, x[i]);
        sum_w += w[i];
        sum_wx += w[i] * x[i];
        sum_wxx += w[i] * x[i] * x[i];
    }
    lo = std::fmin(lo, 0.0);
    if (hi <= lo) return {0.0, -lo};  // every value equals lo <= 0: level 0 minus the offset

    // Error of the best (scale, offset) for the levels level_of(i); +inf when degenerate.
    auto fit = [&](auto level_of, ScaleOffset* out) {
        double sum_l = 0.0, sum_ll = 0.0, sum_xl = 0.0;
        for (int i = 0; i < n; ++i) {
            const double l = level_of(i);
            sum_l += w[i] * l;
            sum_ll += w[i] * l * l;
            sum_xl += w[i] * x[i] * l;
        }
        const double det = sum_w * sum_ll - sum_l * sum_l;
        if (!(det > 0.0)) return HUGE_VAL;  // a single level used: no scale to fit
        double scale = (sum_w * sum_xl - sum_l * sum_wx) / det;
        double shift = (sum_ll * sum_wx - sum_l * sum_xl) / det;  // = -offset
        if (shift > 0.0) {
            shift = 0.0;
            scale = sum_xl / sum_ll;
        }
        if (!(scale > 0.0)) return HUGE_VAL;
        *out = {scale, -shift};
        return sum_wxx - 2.0 * scale * sum_xl - 2.0 * shift * sum_wx + scale * scale * sum_ll +
               2.0 * scale * shift * sum_l + shift * shift * sum_w;
    };

    ScaleOffset best{(hi - lo) / nmax, -lo};
    double best_err = INFINITY;
    for (int k = -10; k <= 10; ++k) {
        const double inv = (nmax + 0.1 * k) / (hi - lo);
        ScaleOffset cand;
        const double err = fit([&](int i) { return nearest_level((x[i] - lo) * inv, 0, nmax); }, &cand);
        if (err < best_err) {
            best_err = err;
            best = cand;
        }
    }
    for (int iter = 0; iter < 4 && best_err < INFINITY; ++iter) {
        const ScaleOffset cur = best;
        const double inv = 1.0 / cur.scale;
        ScaleOffset cand;
        const double err = fit([&](int i) { return nearest_level((x[i] + cur.offset) * inv, 0, nmax); }, &cand);
        if (!(err < best_err * (1.0 - 1e-12))) break;
        best_err = err;
        best = cand;
    }
    return best;
}

// Weighted error of one sub-block stored with scale S and offset M (levels re-chosen).
double offset_error(const double* x, const double* w, int n, int nmax, double scale, double offset) {
    double err = 0.0;
    if (scale == 0.0) {
        for (int i = 0; i < n; ++i) err += w[i] * (x[i] + offset) * (x[i] + offset);
        return err;
    }
    const double inv = 1.0 / scale;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_level((x[i] + offset) * inv, 0, nmax);
        const double diff = x[i] - (scale * l - offset);
        err += w[i] * diff * diff;
    }
    return err;
}

// The stored scales of a Q4_K/Q5_K super-block.
struct KScales {
    uint16_t d = 0, dmin = 0;
    int ls[kNSub32] = {};
    int lm[kNSub32] = {};
};

// Chooses the two fp16 super-scales and the 6-bit codes from the sub-blocks' real fits.
// Candidate super-scales map the largest real scale (offset) to near code 63; each is judged by
// the true error of the whole super-block with levels re-chosen. The scale super-scale is
// chosen first with the nominal offset super-scale, then the offset one; finally each
// sub-block tries its codes +-1 on both.
KScales quantize_k_scales(const double* x, const double* w, int nmax, const ScaleOffset* fits) {
    double max_scale = 0.0, max_offset = 0.0;
    for (int j = 0; j < kNSub32; ++j) {
        max_scale = std::fmax(max_scale, fits[j].scale);
        max_offset = std::fmax(max_offset, fits[j].offset);
    }
    auto value = [](uint16_t super, int code) {
        return static_cast<double>(f16_to_f32(super) * static_cast<float>(code));  // as dequantisers do
    };
    auto code_for = [](double real, uint16_t super) {
        const float s = f16_to_f32(super);
        return s > 0.0f ? nearest_level(real / s, 0, kScaleCodeMax) : 0;
    };
    auto total_error = [&](uint16_t d, uint16_t dmin, double bound) {
        double err = 0.0;
        for (int j = 0; j < kNSub32 && err < bound; ++j) {
            err += offset_error(x + j * kSub32, w + j * kSub32, kSub32, nmax, value(d, code_for(fits[j].scale, d)),
                                value(dmin, code_for(fits[j].offset, dmin)));
        }
        return err;
    };
    // Super-scale candidates: the largest real value gets code 63 down to 60, through both fp16
    // neighbours of the exact ratio (see quantize_sub_scales in quantize_internal.h for why).
    auto search = [&](double max_real, auto error_of) {
        uint16_t best = 0;
        double best_err = INFINITY;
        if (max_real == 0.0) return best;
        uint16_t previous = 0;
        for (int code = kScaleCodeMax; code > kScaleCodeMax - 4; --code) {
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
    const uint16_t nominal_dmin = f16_saturating(max_offset / kScaleCodeMax);
    ks.d = search(max_scale, [&](uint16_t h, double bound) { return total_error(h, nominal_dmin, bound); });
    ks.dmin = search(max_offset, [&](uint16_t h, double bound) { return total_error(ks.d, h, bound); });

    for (int j = 0; j < kNSub32; ++j) {
        const int ls0 = code_for(fits[j].scale, ks.d), lm0 = code_for(fits[j].offset, ks.dmin);
        double best_err = INFINITY;
        for (int ls = ls0 - 1; ls <= ls0 + 1; ++ls) {
            if (ls < 0 || ls > kScaleCodeMax) continue;
            for (int lm = lm0 - 1; lm <= lm0 + 1; ++lm) {
                if (lm < 0 || lm > kScaleCodeMax) continue;
                const double err =
                    offset_error(x + j * kSub32, w + j * kSub32, kSub32, nmax, value(ks.d, ls), value(ks.dmin, lm));
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
    for (int j = 0; j < kNSub32; ++j) {
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

// Shared body of Q4_K and Q5_K: fits, stored scales, and the final levels (0..nmax).
KScales quantize_k_super_block(const double* x, const double* w, int nmax, int* levels) {
    ScaleOffset fits[kNSub32];
    for (int j = 0; j < kNSub32; ++j) fits[j] = fit_scale_offset(x + j * kSub32, w + j * kSub32, kSub32, nmax);
    const KScales ks = quantize_k_scales(x, w, nmax, fits);
    const float d = f16_to_f32(ks.d), dmin = f16_to_f32(ks.dmin);
    for (int j = 0; j < kNSub32; ++j) {
        const double scale = static_cast<double>(d * static_cast<float>(ks.ls[j]));
        const double offset = static_cast<double>(dmin * static_cast<float>(ks.lm[j]));
        const double inv = scale != 0.0 ? 1.0 / scale : 0.0;
        for (int i = 0; i < kSub32; ++i) {
            const int idx = j * kSub32 + i;
            levels[idx] = nearest_level((x[idx] + offset) * inv, 0, nmax);
        }
    }
    return ks;
}

}  // namespace

// Q4_K: x = d * ls * level - dmin * lm, level 0..15. Each 64-value chunk c stores its first 32
// levels in the low nibbles and its second 32 in the high nibbles of qs[32c .. 32c + 31].
void quantize_q4_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
    auto* out = static_cast<BlockQ4_K*>(dst);
    double x[kQK], w[kQK];
    int levels[kQK];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kQK, kQK, x);
        block_weights(importance ? importance + b * kQK : nullptr, kQK, w);
        const KScales ks = quantize_k_super_block(x, w, 15, levels);
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
        const KScales ks = quantize_k_super_block(x, w, 31, levels);
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
    double x[kQK], w[kQK], scales[kNSub];
    int sub_codes[kNSub], q[kQK];
    for (int64_t b = 0; b < n_blocks; ++b) {
        to_double(src + b * kQK, kQK, x);
        block_weights(importance ? importance + b * kQK : nullptr, kQK, w);
        for (int j = 0; j < kNSub; ++j) {
            scales[j] = fit_scale(x + j * kSub, w + j * kSub, kSub, levels, ScaleGrid{1.5, 0.5, 0.5});
        }
        const uint16_t h = quantize_sub_scales(x, w, kNSub, kSub, scales, levels, -128, 127, sub_codes);
        const float super = f16_to_f32(h);
        BlockQ6_K& blk = out[b];
        blk.d = h;
        for (int j = 0; j < kNSub; ++j) {
            blk.scales[j] = static_cast<int8_t>(sub_codes[j]);
            const double scale = static_cast<double>(super * static_cast<float>(sub_codes[j]));
            assign_codes(x + j * kSub, kSub, levels, scale, q + j * kSub);
        }
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
