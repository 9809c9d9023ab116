// Shared machinery of the reference quantisers (quantize.cpp, quantize_kquants.cpp); internal to
// src/quant.
//
// Every format here approximates a block of values x_i by scale * level_i, with level_i taken
// from a small set, optionally minus an offset. The quantisers minimise the weighted squared
// error  E = sum_i w_i (x_i - scale * level_i)^2  where w_i is the importance of value i (an
// importance-matrix row: the mean squared activation that multiplies the weight, so E is the
// expected squared error of the dot product) or 1 without one.
//
// For a fixed assignment of levels the best scale is the least-squares fit
//     scale = sum(w x l) / sum(w l^2),   giving   E = sum(w x^2) - sum(w x l)^2 / sum(w l^2),
// so comparing candidates only needs the score sum(w x l)^2 / sum(w l^2) (higher is better).
// The assignment depends on the scale, so we try a grid of scales, keep the best assignment,
// and polish it with Lloyd steps (re-assign the nearest levels for the fitted scale, refit),
// each of which can only lower E. All search arithmetic is in double, so values anywhere in
// the float range neither overflow nor underflow when squared.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "util/fp16.h"

namespace strata::quant::detail {

constexpr float kF16Max = 65504.0f;

// Rounds to the nearest integer, ties to even, for |v| < 2^31. Adding 1.5 * 2^52 moves v into the
// binade where a double's ulp is exactly 1, so the FPU's own rounding does the work and the
// integer sits in the low mantissa bits (two's complement for negative v). No libm call, no UB.
inline int round_to_int(double v) {
    const double shifted = v + 6755399441055744.0;
    uint64_t bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    return static_cast<int32_t>(static_cast<uint32_t>(bits));
}

// Nearest integer level in [lo, hi]; clamps first (branch-free min/max), so infinities land on
// a bound and NaN on lo.
inline int nearest_level(double v, int lo, int hi) {
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    return round_to_int(v);
}

// Integer levels lo..hi; a level's code is the level itself.
struct UniformLevels {
    int lo;
    int hi;
    int code(double v) const { return nearest_level(v, lo, hi); }
    double value(int c) const { return c; }
    double lowest() const { return lo; }
    double highest() const { return hi; }
};

// 16 sorted non-uniform integer levels in [-128, 127] (the IQ4 grid); a level's code is its
// index. The midpoints between neighbouring integer levels are multiples of 1/2, so the nearest
// level is constant on every half-unit interval [k/2, (k+1)/2): a 512-entry table indexed by
// floor(2v) answers without a search (at an exact midpoint either neighbour is equally near).
struct TableLevels16 {
    double values[16];
    uint8_t nearest[512];  // code for v in [k/2, (k+1)/2), k = -256..255

    explicit TableLevels16(const int8_t* table) {
        for (int i = 0; i < 16; ++i) values[i] = table[i];
        int c = 0;
        for (int k = -256; k < 256; ++k) {
            const double v = 0.5 * k + 0.25;  // the interval's centre
            while (c < 15 && std::fabs(values[c + 1] - v) < std::fabs(values[c] - v)) ++c;
            nearest[k + 256] = static_cast<uint8_t>(c);
        }
    }
    int code(double v) const {
        v = v > -128.0 ? v : -128.0;
        v = v < 127.75 ? v : 127.75;
        return nearest[round_to_int(2.0 * v - 0.5) + 256];  // floor(2v), up to a tie at integers
    }
    double value(int c) const { return values[c]; }
    double lowest() const { return values[0]; }
    double highest() const { return values[15]; }
};

// Candidate scales for fit_scale: the value of largest magnitude is mapped to t times the sign
// of an end level, for t from |end| - below to |end| + above in `step`s, at both ends.
struct ScaleGrid {
    double below;
    double above;
    double step;
};

// Weights for one block of n values: the importance normalised to mean 1 (the optimum does not
// depend on the weights' overall size, and this keeps the sums well scaled), plus a small floor
// so that values with zero importance still get sensible levels rather than arbitrary ones.
// Without importance, or when the block's importance is all zero, every weight is 1.
inline void block_weights(const float* importance, int n, double* w) {
    double sum = 0.0;
    if (importance) {
        for (int i = 0; i < n; ++i) sum += importance[i];
    }
    if (!(sum > 0.0)) {
        for (int i = 0; i < n; ++i) w[i] = 1.0;
        return;
    }
    constexpr double kFloor = 1e-5;
    const double inv_mean = n / sum;
    for (int i = 0; i < n; ++i) w[i] = importance[i] * inv_mean + kFloor;
}

// The block's values as doubles.
inline void to_double(const float* src, int n, double* x) {
    for (int i = 0; i < n; ++i) x[i] = src[i];
}

// Weighted error of representing x by scale * level with the nearest levels for that scale.
template <class Levels>
double scaled_error(const double* x, const double* w, int n, const Levels& levels, double scale) {
    double err = 0.0;
    if (scale == 0.0) {
        for (int i = 0; i < n; ++i) err += w[i] * x[i] * x[i];
        return err;
    }
    const double inv = 1.0 / scale;
    for (int i = 0; i < n; ++i) {
        const double diff = x[i] - scale * levels.value(levels.code(x[i] * inv));
        err += w[i] * diff * diff;
    }
    return err;
}

// Best real scale for x ~ scale * level (see the top of the file). Returns 0 for an all-zero
// block. The scale may be negative: with an asymmetric level set (e.g. -8..7) the extreme value
// can then use whichever end of the range is longer.
template <class Levels>
double fit_scale(const double* x, const double* w, int n, const Levels& levels, const ScaleGrid& grid) {
    double extreme = 0.0;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
    }
    if (extreme == 0.0) return 0.0;

    // Score of the assignment made with inverse scale `inv`; also returns the fitted scale.
    auto score_of = [&](double inv, double* fitted) {
        double sum_xl = 0.0, sum_ll = 0.0;
        for (int i = 0; i < n; ++i) {
            const double l = levels.value(levels.code(x[i] * inv));
            sum_xl += w[i] * x[i] * l;
            sum_ll += w[i] * l * l;
        }
        if (!(sum_ll > 0.0)) return -1.0;
        *fitted = sum_xl / sum_ll;
        return sum_xl * sum_xl / sum_ll;
    };

    double best_score = -1.0, best_scale = 0.0;
    const bool mirrored = levels.lowest() == -levels.highest();  // both ends give the same fits
    const int steps = static_cast<int>(std::lround((grid.below + grid.above) / grid.step));
    for (const double end : {levels.lowest(), levels.highest()}) {
        if (end == 0.0 || (mirrored && end == levels.highest())) continue;
        for (int k = 0; k <= steps; ++k) {
            const double t = std::fabs(end) - grid.below + k * grid.step;
            double fitted = 0.0;
            const double score = score_of(std::copysign(t, end) / extreme, &fitted);
            if (score > best_score) {
                best_score = score;
                best_scale = fitted;
            }
        }
    }
    // Lloyd polishing: nearest levels for the fitted scale, then refit; stops when E stops falling.
    for (int iter = 0; iter < 4 && best_scale != 0.0; ++iter) {
        double fitted = 0.0;
        const double score = score_of(1.0 / best_scale, &fitted);
        if (!(score > best_score * (1.0 + 1e-12))) break;
        best_score = score;
        best_scale = fitted;
    }
    return best_scale;
}

// A real scale rounded to fp16 (saturating at the largest finite half).
inline uint16_t f16_saturating(double v) {
    if (v > kF16Max) v = kF16Max;
    if (v < -kF16Max) v = -kF16Max;
    return f32_to_f16(static_cast<float>(v));
}

// The fp16 encodings either side of `scale` (nearest first), as candidates: rounding to the
// nearest half is not always best once the levels are re-chosen, e.g. when rounding down would
// push the extreme value past the last level.
struct F16Pair {
    uint16_t h[2];
    int count;
};

inline F16Pair f16_neighbours(double scale) {
    F16Pair p{{f16_saturating(scale), 0}, 1};
    const uint16_t h = p.h[0];
    const uint16_t magnitude = h & 0x7fffu;
    const double rounded = std::fabs(static_cast<double>(f16_to_f32(h)));
    if (rounded < std::fabs(scale) && magnitude < 0x7bffu) {
        p.h[p.count++] = static_cast<uint16_t>(h + 1);  // one step away from zero
    } else if (rounded > std::fabs(scale) && magnitude > 0) {
        p.h[p.count++] = static_cast<uint16_t>(h - 1);  // one step towards zero
    }
    return p;
}

// fp16 scale for a block whose best real scale is `scale`: the neighbour with the lower error.
template <class Levels>
uint16_t encode_scale_f16(const double* x, const double* w, int n, const Levels& levels, double scale) {
    const F16Pair p = f16_neighbours(scale);
    uint16_t best = p.h[0];
    double best_err = scaled_error(x, w, n, levels, f16_to_f32(p.h[0]));
    for (int i = 1; i < p.count; ++i) {
        const double err = scaled_error(x, w, n, levels, f16_to_f32(p.h[i]));
        if (err < best_err) {
            best_err = err;
            best = p.h[i];
        }
    }
    return best;
}

// Codes of the nearest levels for a stored scale (all code-of-zero when the scale is 0).
template <class Levels>
void assign_codes(const double* x, int n, const Levels& levels, double scale, int* codes) {
    const double inv = scale != 0.0 ? 1.0 / scale : 0.0;
    for (int i = 0; i < n; ++i) codes[i] = levels.code(x[i] * inv);
}

// Quantises per-sub-block real scales to integer codes in [lo, hi] times one fp16 super-scale
// (Q6_K: int8 codes; IQ4_XS: 6-bit signed codes). Candidate super-scales give the largest
// sub-scale one of the last few codes at either end of the range, each through both fp16
// neighbours of the exact ratio: for small data the super-scale is an fp16 subnormal with only
// a few significant bits, and then only some (code, super-scale) pairs land near the real scale.
// Each candidate is judged by the true error of the whole super-block (sub-blocks re-quantised
// with their stored scale), and the winner's codes are then nudged by +-1 where that lowers a
// sub-block's error. Returns the fp16 super-scale.
template <class Levels>
uint16_t quantize_sub_scales(const double* x, const double* w, int n_sub, int sub_len, const double* scales, const Levels& levels,
                             int lo, int hi, int* sub_codes) {
    double extreme = 0.0;
    for (int j = 0; j < n_sub; ++j) {
        if (std::fabs(scales[j]) > std::fabs(extreme)) extreme = scales[j];
    }
    if (extreme == 0.0) {
        for (int j = 0; j < n_sub; ++j) sub_codes[j] = 0;
        return 0;
    }
    auto sub_error = [&](int j, float super, int code) {
        const double scale = static_cast<double>(super * static_cast<float>(code));  // as dequantisers do
        return scaled_error(x + j * sub_len, w + j * sub_len, sub_len, levels, scale);
    };

    uint16_t best_h = 0;
    double best_err = INFINITY;
    // Four codes per end normally; eight when the super-scale is subnormal and coarse.
    constexpr int kMaxCodesTried = 8;
    const bool subnormal = (f16_saturating(extreme / hi) & 0x7c00u) == 0;
    const int codes_tried = subnormal ? kMaxCodesTried : kMaxCodesTried / 2;
    uint16_t tried[2 * 2 * kMaxCodesTried];
    int n_tried = 0;
    for (const int end : {lo, hi}) {
        for (int k = 0; k < codes_tried; ++k) {
            const F16Pair pair = f16_neighbours(extreme / (end > 0 ? end - k : end + k));
            for (int p = 0; p < pair.count; ++p) {
                const uint16_t h = pair.h[p];
                const float super = f16_to_f32(h);
                bool seen = super == 0.0f;
                for (int i = 0; i < n_tried && !seen; ++i) seen = tried[i] == h;
                if (seen) continue;
                tried[n_tried++] = h;
                double err = 0.0;
                for (int j = 0; j < n_sub && err < best_err; ++j) {
                    err += sub_error(j, super, nearest_level(scales[j] / super, lo, hi));
                }
                if (err < best_err) {
                    best_err = err;
                    best_h = h;
                }
            }
        }
    }
    const float super = f16_to_f32(best_h);
    for (int j = 0; j < n_sub; ++j) {
        if (super == 0.0f) {
            sub_codes[j] = 0;
            continue;
        }
        const int centre = nearest_level(scales[j] / super, lo, hi);
        int best_code = centre;
        double best_sub = sub_error(j, super, centre);
        for (const int code : {centre - 1, centre + 1}) {
            if (code < lo || code > hi) continue;
            const double err = sub_error(j, super, code);
            if (err < best_sub) {
                best_sub = err;
                best_code = code;
            }
        }
        sub_codes[j] = best_code;
    }
    return best_h;
}

// x ~ scale * level - offset with level in [0, nmax] and scale >= 0. The k-quants store the
// offset as an unsigned "min" that the dequantiser subtracts, so there offset >= 0 (a block
// whose values are all positive is fitted with offset 0); Q4_1/Q5_1 store a signed fp16 min and
// allow any offset.
struct ScaleOffset {
    double scale = 0.0;
    double offset = 0.0;
};

// Best real (scale, offset) for one (sub-)block. For a fixed level assignment both follow from
// the 2x2 weighted least-squares normal equations
//     [sum w l^2  sum w l] [scale ]   [sum w x l]
//     [sum w l    sum w  ] [-offset] = [sum w x  ]
// (with offset pinned to 0 when it must not be negative and the fit wants it so), and the error
// follows from the same sums in O(1). Candidate assignments map the block's range [lo, max(x)]
// (lo = min(x), or min(x, 0) for a non-negative offset) onto [0, nmax + delta] for a grid of
// delta; the best is then polished with Lloyd steps.
inline ScaleOffset fit_scale_offset(const double* x, const double* w, int n, int nmax, bool signed_offset) {
    double lo = x[0], hi = x[0];
    double sum_w = 0.0, sum_wx = 0.0, sum_wxx = 0.0;
    for (int i = 0; i < n; ++i) {
        lo = std::fmin(lo, x[i]);
        hi = std::fmax(hi, x[i]);
        sum_w += w[i];
        sum_wx += w[i] * x[i];
        sum_wxx += w[i] * x[i] * x[i];
    }
    if (!signed_offset) lo = std::fmin(lo, 0.0);
    if (hi <= lo) return {0.0, -lo};  // every value equals lo: level 0 minus the offset

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
        if (shift > 0.0 && !signed_offset) {
            shift = 0.0;
            scale = sum_xl / sum_ll;
        }
        if (!(scale > 0.0)) return HUGE_VAL;
        *out = {scale, -shift};
        return sum_wxx - 2.0 * scale * sum_xl - 2.0 * shift * sum_wx + scale * scale * sum_ll + 2.0 * scale * shift * sum_l +
               shift * shift * sum_w;
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

// Weighted error of a (sub-)block stored with `scale` and `offset` (levels re-chosen).
inline double offset_error(const double* x, const double* w, int n, int nmax, double scale, double offset) {
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

// Per-type block quantisers (n_blocks whole blocks; importance may be null).
void quantize_q2_k(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q3_k(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q4_k(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q5_k(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q6_k(const float* src, void* dst, int64_t n_blocks, const float* importance);

}  // namespace strata::quant::detail
