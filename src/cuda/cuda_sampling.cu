// Sampling summaries of logits rows on the device (Backend::sample_rows, row_sampling.h): one
// block of 1024 threads per row. The host reference is backend::sample_row_host; the tests in
// tests/cuda/ compare the two on random rows.
//
// Layout: the row is read as float4 quads (the backend sends rows whose length is not a multiple
// of 4 to the host reference), several loads in flight per thread: one block reads the row ~10
// times, and a pass is only fast when the loads overlap. Passes whose order does not matter
// stride the quads over the block. Passes in id order (ranks among ties, the draw) give warp w
// the contiguous quads [w*qseg, (w+1)*qseg), 32 quads (128 ids) a step, lane l holding ids
// 4l .. 4l+3 of the step; the kept weight is summed per warp, so the draw finds its warp from
// 32 sums in id order and then walks only that warp's ids.
//
// Both selections are radix selects over order-preserving 32-bit keys of the logits, in digits
// of 12, 12 and 8 bits from the top (3 passes over the row at most):
// - the k most likely tokens: the k-th largest key by count; the tokens above it and enough of
//   those on it (lowest ids first) are gathered, then sorted by (key, id) in shared memory;
// - top-p: the boundary key by weight (fixed-point, so the sums do not depend on the order the
//   threads add in); the tokens above it are kept, and of those on it (all of the same weight)
//   as many as the remaining weight needs, lowest ids first.
// The draw then walks only the kept tokens (and those min-p keeps).
#include <cfloat>

#include "backend/row_sampling.h"
#include "cuda/cuda_common.cuh"

namespace strata::cuda {

namespace {

using backend::kMaxRowSampleTop;
using backend::LogitEdit;
using backend::RowSample;
using backend::TokenLogit;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
// order_key(-inf): every logit above -inf has a larger key; NaN maps here too.
constexpr uint32_t kNegInfKey = 0x007fffffu;

// A key whose unsigned order is the float order (NaN as -inf, -0 as +0).
__device__ __forceinline__ uint32_t order_key(float v) {
    if (v != v) v = -INFINITY;
    v += 0.0f;  // -0 becomes +0: equal logits get one key (ties to the lower id)
    const uint32_t b = __float_as_uint(v);
    return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

// The sampler's weight: exp(x) for x <= 0, exactly 0 below -87 and for NaN.
__device__ __forceinline__ float sample_weight(float x) { return x >= -87.0f ? expf(x) : 0.0f; }

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sorted first: larger key, then lower id. 0 pads (below every real entry: keys > kNegInfKey).
__device__ __forceinline__ unsigned long long sort_entry(uint32_t key, int64_t id) {
    return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

// A float back from its key.
__device__ __forceinline__ float key_value(uint32_t key) {
    return __uint_as_float((key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key);
}

// Weights as fixed-point integers (2^40 = 1) for the top-p mass: their sums are exact in any
// order, so the boundary does not depend on the order the threads add in. A weight below 2^-40
// counts as 0 there (at most 151,936 * 2^-40 = 1.4e-7 of the mass).
__device__ __forceinline__ unsigned long long fixed_weight(float w) {
    return static_cast<unsigned long long>(static_cast<double>(w) * 1099511627776.0);
}

__device__ __forceinline__ float4 load_quad(const float* row, int64_t q, int64_t n4) {
    return q < n4 ? reinterpret_cast<const float4*>(row)[q] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
}
__device__ __forceinline__ float component(const float4& f, int c) { return c == 0 ? f.x : c == 1 ? f.y : c == 2 ? f.z : f.w; }

template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v) {
    const int lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T up = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += up;
    }
    return v;
}

// The most likely tokens' first filter: a token's distance below the row's maximum in bins of
// 1/64 nat, kNear bins (64 nats); farther (and NaN, -inf) gives kNear.
constexpr int kNear = 4096;
constexpr int kMaxCandidates = 4096;  // tokens the nearest bins may hold (sorted in hist)
__device__ __forceinline__ int near_bin(float max, float v) {
    const float dist = max - v;
    return dist < 64.0f ? static_cast<int>(dist * 64.0f) : kNear;
}

// Sorts v[0, size) largest first (size a power of two), the whole block taking part.
__device__ void bitonic_sort_descending(unsigned long long* v, int size) {
    for (int run = 2; run <= size; run <<= 1) {
        for (int stride = run >> 1; stride > 0; stride >>= 1) {
            for (int e = static_cast<int>(threadIdx.x); e < size; e += kThreads) {
                const int partner = e ^ stride;
                if (partner > e) {
                    const unsigned long long a = v[e], b = v[partner];
                    const bool descending = (e & run) == 0;
                    if (descending ? a < b : a > b) v[e] = b, v[partner] = a;
                }
            }
            __syncthreads();
        }
    }
}

// The row's summary, and its n_top most likely tokens from sort entries, largest first.
__device__ void write_summary(const float* row, const unsigned long long* sorted, int n_top, float max, double sum_t,
                              double sum_1, TokenLogit* top, RowSample* o) {
    const int tid = static_cast<int>(threadIdx.x);
    if (tid < n_top) {
        const int32_t id = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(sorted[tid]));
        top[tid] = TokenLogit{row[id], id};
    }
    if (tid == 0) {
        o->max = max;
        o->sum_t = sum_t;
        o->sum_1 = sum_1;
        o->n_top = n_top;
    }
}

// Shared scalars of one row's block.
struct RowShared {
    float max;
    int warp;
    double before;
    uint32_t prefix, mask, remaining, equal, total;
    unsigned taken;
    unsigned long long fx_total, need;
    uint32_t tie_key;
    unsigned tie_keep;
    int near_bin;  // the most likely tokens lie in near bins 0..near_bin; -1: use the radix select
};

// The k-th largest key by a radix select over the tokens above -inf, from the top in digits of
// 12, 12 and 8 bits: hist counts tokens (kCount) or their fixed-point weights. need: how many
// tokens (or how much weight) from the top; on return sh.prefix is the boundary key (sh.mask all
// ones) and sh.remaining / sh.need what the tokens with exactly that key must supply, unless a
// pass found that the whole bin is needed (counting: sh.equal == sh.remaining, sh.mask partial).
// Counting with fewer tokens than need above -inf leaves sh.mask 0 and sh.total their number.
constexpr int kRadixBins = 4096;
template <bool kCount>
__device__ void radix_select(const float* row, int64_t n4, float max, float inv_t, unsigned long long* hist, RowShared& sh) {
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    constexpr int kShift[3] = {20, 8, 0};
    constexpr int kBits[3] = {12, 12, 8};
    for (int pass = 0; pass < 3; ++pass) {
        const int shift = kShift[pass];
        const int bins = 1 << kBits[pass];
        const uint32_t digit = static_cast<uint32_t>(bins - 1);
        for (int b = tid; b < bins; b += kThreads) hist[b] = 0;
        __syncthreads();
        const uint32_t prefix = sh.prefix, mask = sh.mask;
        // Most keys share their first bits, so most lanes hit the same bin, round after round:
        // the lanes in the bin of the warp's first active lane add up in the warp, and the warp
        // keeps that sum while the bin stays the same (one atomic when it changes); the other
        // lanes (few) make their own atomics.
        uint32_t hot = 0xffffffffu;  // warp-uniform: the bin being summed, and its sum
        unsigned long long hot_sum = 0;
        for (int64_t qb = static_cast<int64_t>(warp) * 32; qb < n4; qb += kThreads) {
            const float4 f = load_quad(row, qb + lane, n4);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const float v = component(f, c);
                const uint32_t key = order_key(v);
                const bool in = key > kNegInfKey && (key & mask) == prefix;
                const unsigned active = __ballot_sync(0xffffffffu, in);
                if (active == 0) continue;
                const uint32_t bin = (key >> shift) & digit;
                const int first = __ffs(active) - 1;
                const uint32_t first_bin = __shfl_sync(0xffffffffu, bin, first);
                const unsigned same = __ballot_sync(0xffffffffu, in && bin == first_bin);
                unsigned long long add = 1;
                if (!kCount && in) add = fixed_weight(sample_weight((v - max) * inv_t));
                unsigned long long group = 0;
                if (kCount) {
                    group = static_cast<unsigned long long>(__popc(same));
                } else if (in && bin == first_bin) {
                    // The 40-bit weight in two 20-bit halves: 32 of each still fit 32 bits.
                    const unsigned hi = __reduce_add_sync(same, static_cast<unsigned>(add >> 20));
                    const unsigned lo = __reduce_add_sync(same, static_cast<unsigned>(add & 0xfffffu));
                    group = (static_cast<unsigned long long>(hi) << 20) + lo;
                }
                if (!kCount) group = __shfl_sync(0xffffffffu, group, first);
                if (first_bin != hot) {
                    if (lane == 0 && hot_sum != 0) atomicAdd(&hist[hot], hot_sum);
                    hot = first_bin;
                    hot_sum = 0;
                }
                hot_sum += group;
                if (in && bin != first_bin) atomicAdd(&hist[bin], add);
            }
        }
        if (lane == 0 && hot_sum != 0) atomicAdd(&hist[hot], hot_sum);
        __syncthreads();
        if (warp == 0) {
            // Lane l holds the l-th 32nd of the bins from the top; the running sum from the top
            // finds the bin the boundary lies in.
            const int per = bins / 32;
            const int hi_bin = bins - 1 - per * lane;
            unsigned long long mine = 0;
            for (int b = 0; b < per; ++b) mine += hist[hi_bin - b];
            const unsigned long long before = warp_inclusive_scan(mine) - mine;
            const unsigned long long total = __shfl_sync(0xffffffffu, before + mine, 31);
            const unsigned long long need = kCount ? sh.remaining : sh.need;
            if (kCount && total < need) {  // fewer tokens than k (the first pass only): all of them
                if (lane == 0) sh.remaining = sh.equal = sh.total = static_cast<uint32_t>(total);
            } else {
                const unsigned who = __ballot_sync(0xffffffffu, before < need && need <= before + mine);
                if (who == 0) {  // rounding: the weight never reaches need; keep every token
                    if (lane == 0) sh.prefix = 0, sh.mask = 0, sh.need = 0;
                } else if (lane == __ffs(who) - 1) {
                    unsigned long long cum = before;
                    int bin = hi_bin;
                    while (cum + hist[bin] < need) cum += hist[bin--];
                    if (kCount) {
                        sh.remaining = static_cast<uint32_t>(need - cum);
                        sh.equal = static_cast<uint32_t>(hist[bin]);
                        if (pass == 0) sh.total = static_cast<uint32_t>(total);
                    } else {
                        sh.need = need - cum;
                    }
                    sh.prefix = prefix | (static_cast<uint32_t>(bin) << shift);
                    sh.mask = mask | (digit << shift);
                }
            }
        }
        __syncthreads();
        if (kCount ? sh.equal == sh.remaining : sh.mask == 0) break;
    }
}

// Whether a token is kept by the draw: above the nucleus boundary key, or on it among the first
// tie_keep such tokens in id order (rank: those before it); and min-p.
__device__ __forceinline__ bool kept_by_draw(uint32_t key, float w, unsigned rank, const RowShared& sh, float min_p) {
    const bool in = key > sh.tie_key || (key == sh.tie_key && key > kNegInfKey && rank < sh.tie_keep);
    return in && w > 0.0f && w >= min_p;
}

// The weights and draw flags of a lane's quad in a warp's id-order walk; rank: boundary-key
// ties before this step of the warp (advanced past it).
struct QuadDraw {
    float w[4];
    bool kept[4];
};
__device__ __forceinline__ QuadDraw quad_draw(const float4& f, float max, float inv_t, float min_p, const RowShared& sh,
                                              unsigned& rank) {
    QuadDraw d;
    uint32_t key[4];
    unsigned ties = 0;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const float v = component(f, c);
        key[c] = order_key(v);
        d.w[c] = sample_weight((v - max) * inv_t);
        ties += key[c] == sh.tie_key && key[c] > kNegInfKey ? 1u : 0u;
    }
    const unsigned incl = warp_inclusive_scan(ties);
    unsigned r = rank + incl - ties;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        d.kept[c] = kept_by_draw(key[c], d.w[c], r, sh, min_p);
        r += key[c] == sh.tie_key && key[c] > kNegInfKey ? 1u : 0u;
    }
    rank += __shfl_sync(0xffffffffu, incl, 31);
    return d;
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(float* x, int64_t n, const RowSampleJob* jobs,
                                                               const LogitEdit* edits, int k, RowSample* out, TokenLogit* top) {
    __shared__ double warp_t[kWarps], warp_1[kWarps], warp_k[kWarps];
    __shared__ float warp_m[kWarps];
    __shared__ unsigned long long hist[kRadixBins];
    __shared__ unsigned warp_ties[kWarps];
    __shared__ unsigned long long sel[kMaxRowSampleTop];
    __shared__ RowShared sh;

    grid_dependency_enter();
    const RowSampleJob job = jobs[blockIdx.x];
    TokenLogit* block_top = top + static_cast<int64_t>(blockIdx.x) * k;  // k: the stride, before k is capped below
    float* row = x + job.row * n;
    const int64_t n4 = n / 4;
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int64_t qseg = ((n4 + kWarps - 1) / kWarps + 31) / 32 * 32;
    const int64_t qbegin = warp * qseg, qend = qbegin + qseg < n4 ? qbegin + qseg : n4;

    for (int i = tid; i < job.n_edits; i += kThreads) {
        const LogitEdit e = edits[job.edit_begin + i];
        float v = row[e.id];
        if (e.bias != 0.0f) v += e.bias;  // as the host: no add (which would make -0 +0) without a bias
        // __fmul_rn: no fused multiply-subtract, so the edited logit has the host's bits.
        if (e.repetition != 1.0f) v = v > 0.0f ? v / e.repetition : __fmul_rn(v, e.repetition);
        row[e.id] = v - e.subtract;
    }
    __syncthreads();

    // The maximum; +inf becomes the largest finite float (in the row too), NaN never wins.
    float m = -INFINITY;
#pragma unroll 4
    for (int64_t q = tid; q < n4; q += kThreads) {
        float4 f = reinterpret_cast<const float4*>(row)[q];
        if (f.x == INFINITY || f.y == INFINITY || f.z == INFINITY || f.w == INFINITY) {
            f.x = f.x == INFINITY ? FLT_MAX : f.x;
            f.y = f.y == INFINITY ? FLT_MAX : f.y;
            f.z = f.z == INFINITY ? FLT_MAX : f.z;
            f.w = f.w == INFINITY ? FLT_MAX : f.w;
            reinterpret_cast<float4*>(row)[q] = f;
        }
        m = fmaxf(m, fmaxf(fmaxf(f.x, f.y), fmaxf(f.z, f.w)));
    }
    m = warp_max(m);
    if (lane == 0) warp_m[warp] = m;
    __syncthreads();
    if (tid == 0) {
        float all = -INFINITY;
        for (int w = 0; w < kWarps; ++w) all = fmaxf(all, warp_m[w]);
        sh.max = all;
        sh.fx_total = 0;
        sh.near_bin = -1;
    }
    __syncthreads();
    const float max = sh.max;
    RowSample* o = out + blockIdx.x;
    if (max == -INFINITY) {
        if (tid == 0) *o = RowSample{-INFINITY, 0.0, 0.0, -1, 0.0f, 0};
        return;
    }

    // The softmax sums, the fixed-point total for top-p, and for the most likely tokens a count
    // of the tokens by their distance below the maximum (kNearBins bins a nat, up to 64 nats).
    const float inv_t = job.inv_t;
    const bool nucleus = job.u >= 0.0 && job.top_p < 1.0f;
    const int want_top = job.top < k ? job.top : k;
    auto* near = reinterpret_cast<unsigned*>(hist);  // [kNearBins * 64] while it counts
    if (want_top > 1) {
        for (int b = tid; b < kNear; b += kThreads) near[b] = 0;
        __syncthreads();
    }
    double st = 0.0, s1 = 0.0;
    unsigned long long fx = 0;
#pragma unroll 4
    for (int64_t q = tid; q < n4; q += kThreads) {
        const float4 f = reinterpret_cast<const float4*>(row)[q];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const float v = component(f, c);
            const float w = sample_weight((v - max) * inv_t);
            st += static_cast<double>(w);
            s1 += static_cast<double>(sample_weight(v - max));
            if (nucleus) fx += fixed_weight(w);
            const int bin = near_bin(max, v);
            if (want_top > 1 && bin < kNear) atomicAdd(&near[bin], 1u);
        }
    }
    st = warp_sum_f64(st);
    s1 = warp_sum_f64(s1);
    if (lane == 0) warp_t[warp] = st, warp_1[warp] = s1;
    if (nucleus) {
#pragma unroll
        for (int o2 = 16; o2 > 0; o2 >>= 1) fx += __shfl_xor_sync(0xffffffffu, fx, o2);
        if (lane == 0) atomicAdd(&sh.fx_total, fx);
    }
    __syncthreads();
    double sum_t = 0.0, sum_1 = 0.0;
    for (int w = 0; w < kWarps; ++w) sum_t += warp_t[w], sum_1 += warp_1[w];
    // The nearest bin by which want_top tokens are counted: every token at least as likely as
    // the want_top-th lies in it or nearer, so those bins' tokens (few, when there are at most
    // kMaxCandidates) hold the answer. -1: the radix select instead.
    if (want_top > 1 && warp == 0) {
        constexpr int per = kNear / 32;
        unsigned mine = 0;
        for (int b = 0; b < per; ++b) mine += near[per * lane + b];
        const unsigned before = warp_inclusive_scan(mine) - mine;
        const unsigned who = __ballot_sync(
            0xffffffffu, before < static_cast<unsigned>(want_top) && static_cast<unsigned>(want_top) <= before + mine);
        if (who != 0 && lane == __ffs(who) - 1) {
            unsigned cum = before;
            int bin = per * lane;
            while (cum + near[bin] < static_cast<unsigned>(want_top)) cum += near[bin++];
            cum += near[bin];
            if (cum <= static_cast<unsigned>(kMaxCandidates)) sh.near_bin = bin;
        }
    }
    __syncthreads();

    if (job.u >= 0.0) {
        // What the draw keeps: the nucleus boundary (a key, and how many tokens on it), min-p.
        if (tid == 0) {
            sh.tie_key = kNegInfKey, sh.tie_keep = 0, sh.prefix = 0, sh.mask = 0;
            const double want = static_cast<double>(job.top_p) * static_cast<double>(sh.fx_total);
            sh.need = want < 1.0 ? 1ull : static_cast<unsigned long long>(want);
        }
        __syncthreads();
        if (nucleus) {
            radix_select<false>(row, n4, max, inv_t, hist, sh);
            if (tid == 0 && sh.mask == 0xffffffffu) {
                // The tokens on the boundary key all weigh the same: keep as many as the weight
                // still needed takes (the lowest ids; all of them at most).
                const unsigned long long each = fixed_weight(sample_weight((key_value(sh.prefix) - max) * inv_t));
                const unsigned long long count = hist[sh.prefix & 255u] / each;  // the last pass: 8-bit digit
                const unsigned long long keep = (sh.need + each - 1) / each;
                sh.tie_key = sh.prefix;
                sh.tie_keep = static_cast<unsigned>(keep < count ? keep : count);
            }
            __syncthreads();
        }
        // Boundary-key ties before each warp's ids, for their ranks.
        unsigned ties = 0;
        if (sh.tie_key != kNegInfKey) {
            for (int64_t qb = qbegin; qb < qend; qb += 32) {
                const float4 f = load_quad(row, qb + lane, qend);
#pragma unroll
                for (int c = 0; c < 4; ++c) ties += order_key(component(f, c)) == sh.tie_key ? 1u : 0u;
            }
        }
        ties = __reduce_add_sync(0xffffffffu, ties);
        if (lane == 0) warp_ties[warp] = ties;
        __syncthreads();
        unsigned rank0 = 0;
        for (int w = 0; w < warp; ++w) rank0 += warp_ties[w];
        // The kept weight per warp, then the warp the target falls in, then the token.
        double kept_sum = 0.0;
        unsigned rank = rank0;
#pragma unroll 2
        for (int64_t qb = qbegin; qb < qend; qb += 32) {
            const QuadDraw d = quad_draw(load_quad(row, qb + lane, qend), max, inv_t, job.min_p, sh, rank);
#pragma unroll
            for (int c = 0; c < 4; ++c) kept_sum += d.kept[c] ? static_cast<double>(d.w[c]) : 0.0;
        }
        kept_sum = warp_sum_f64(kept_sum);
        if (lane == 0) warp_k[warp] = kept_sum;
        __syncthreads();
        double kept_total = 0.0;
        for (int w = 0; w < kWarps; ++w) kept_total += warp_k[w];
        const double target = job.u * kept_total;
        if (tid == 0) {
            double cum = 0.0;
            int pick = -1, last = -1;
            for (int w = 0; w < kWarps && pick < 0; ++w) {
                if (!(warp_k[w] > 0.0)) continue;
                last = w;
                if (cum + warp_k[w] > target) pick = w;
                else cum += warp_k[w];
            }
            if (pick < 0) cum -= warp_k[last];  // rounding left the target at the end: the last warp's last token
            sh.warp = pick < 0 ? last : pick;
            sh.before = cum;
        }
        __syncthreads();
        if (warp == sh.warp) {
            double cum = sh.before;
            int64_t drawn = -1, last = -1;
            rank = rank0;
            for (int64_t qb = qbegin; qb < qend && drawn < 0; qb += 32) {
                const int64_t q = qb + lane;
                const QuadDraw d = quad_draw(load_quad(row, q, qend), max, inv_t, job.min_p, sh, rank);
                double mine = 0.0;
                int last_c = -1;
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    mine += d.kept[c] ? static_cast<double>(d.w[c]) : 0.0;
                    if (d.kept[c]) last_c = c;
                }
                const double incl = warp_inclusive_scan(mine);
                const unsigned passed = __ballot_sync(0xffffffffu, last_c >= 0 && cum + incl > target);
                const unsigned any = __ballot_sync(0xffffffffu, last_c >= 0);
                if (any != 0) {
                    const int l = 31 - __clz(any);
                    last = 4 * (qb + l) + __shfl_sync(0xffffffffu, last_c, l);
                }
                if (passed != 0) {
                    // In the first lane that passes, the first of its tokens that does.
                    const int l = __ffs(passed) - 1;
                    int pick = -1;
                    if (lane == l) {
                        double acc = cum + incl - mine;
                        for (int c = 0; c < 4 && pick < 0; ++c) {
                            if (!d.kept[c]) continue;
                            acc += static_cast<double>(d.w[c]);
                            if (acc > target) pick = c;
                        }
                        if (pick < 0) pick = last_c;  // rounding between the scan and this sum
                    }
                    drawn = 4 * (qb + l) + __shfl_sync(0xffffffffu, pick, l);
                }
                cum += __shfl_sync(0xffffffffu, incl, 31);
            }
            if (lane == 0) {
                if (drawn < 0) drawn = last;
                o->drawn = static_cast<int32_t>(drawn);
                o->drawn_logit = row[drawn];
            }
        }
    } else if (tid == 0) {
        o->drawn = -1;
        o->drawn_logit = 0.0f;
    }

    // The k most likely tokens (as many as the job wants): the k-th largest key, then the
    // tokens above it and enough of those on it (the lowest ids), sorted.
    k = job.top < k ? job.top : k;
    if (k == 1) {
        // The argmax alone: the lowest id holding the maximum.
        int64_t first = INT64_MAX;
        for (int64_t q = tid; q < n4; q += kThreads) {
            const float4 f = reinterpret_cast<const float4*>(row)[q];
#pragma unroll
            for (int c = 0; c < 4; ++c)
                if (component(f, c) == max && 4 * q + c < first) first = 4 * q + c;
        }
#pragma unroll
        for (int o2 = 16; o2 > 0; o2 >>= 1) {
            const int64_t other = __shfl_xor_sync(0xffffffffu, first, o2);
            first = other < first ? other : first;
        }
        if (lane == 0) sel[warp] = static_cast<unsigned long long>(first);
        __syncthreads();
        if (tid == 0) {
            int64_t best = INT64_MAX;
            for (int w = 0; w < kWarps; ++w) best = static_cast<int64_t>(sel[w]) < best ? static_cast<int64_t>(sel[w]) : best;
            sel[0] = sort_entry(order_key(max), best);
        }
        __syncthreads();
        write_summary(row, sel, 1, max, sum_t, sum_1, block_top, o);
        return;
    }
    if (sh.near_bin >= 0) {
        // The tokens of the nearest bins, sorted; the first k are the answer.
        const int last_bin = sh.near_bin;
        if (tid == 0) sh.taken = 0;
        __syncthreads();
        for (int64_t q = tid; q < n4; q += kThreads) {
            const float4 f = reinterpret_cast<const float4*>(row)[q];
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const float v = component(f, c);
                if (near_bin(max, v) <= last_bin) hist[atomicAdd(&sh.taken, 1u)] = sort_entry(order_key(v), 4 * q + c);
            }
        }
        __syncthreads();
        const int count = static_cast<int>(sh.taken);
        int size = 2;
        while (size < count) size <<= 1;
        for (int e = count + tid; e < size; e += kThreads) hist[e] = 0;
        __syncthreads();
        bitonic_sort_descending(hist, size);
        write_summary(row, hist, k, max, sum_t, sum_1, block_top, o);
        return;
    }
    if (tid == 0) sh.prefix = 0, sh.mask = 0, sh.remaining = static_cast<uint32_t>(k), sh.equal = 0, sh.total = 0, sh.taken = 0;
    if (tid < kMaxRowSampleTop) sel[tid] = 0;
    __syncthreads();
    if (k > 0) radix_select<true>(row, n4, max, inv_t, hist, sh);
    const bool take_all = k <= 0 || sh.equal == sh.remaining;
    const uint32_t prefix = sh.prefix, mask = sh.mask, remaining = sh.remaining;
    const int n_top = k <= 0 ? 0 : (take_all && mask == 0 ? static_cast<int>(sh.total) : k);
    if (k > 0) {
        for (int64_t q = tid; q < n4; q += kThreads) {
            const float4 f = reinterpret_cast<const float4*>(row)[q];
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const uint32_t key = order_key(component(f, c));
                const uint32_t head = key & mask;
                if (key > kNegInfKey && (head > prefix || (head == prefix && take_all)))
                    sel[atomicAdd(&sh.taken, 1u)] = sort_entry(key, 4 * q + c);
            }
        }
        if (!take_all) {
            // Ties on the full key: the lowest ids, ranked per warp in id order.
            __syncthreads();
            const unsigned above = sh.taken;
            unsigned count = 0;
            for (int64_t qb = qbegin; qb < qend; qb += 32) {
                const float4 f = load_quad(row, qb + lane, qend);
#pragma unroll
                for (int c = 0; c < 4; ++c) count += order_key(component(f, c)) == prefix ? 1u : 0u;
            }
            count = __reduce_add_sync(0xffffffffu, count);
            if (lane == 0) warp_ties[warp] = count;
            __syncthreads();
            unsigned rank = 0;
            for (int w = 0; w < warp; ++w) rank += warp_ties[w];
            for (int64_t qb = qbegin; qb < qend && rank < remaining; qb += 32) {
                const int64_t q = qb + lane;
                const float4 f = load_quad(row, q, qend);
                unsigned mine = 0;
#pragma unroll
                for (int c = 0; c < 4; ++c) mine += order_key(component(f, c)) == prefix ? 1u : 0u;
                const unsigned incl = warp_inclusive_scan(mine);
                unsigned r = rank + incl - mine;
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    if (order_key(component(f, c)) != prefix) continue;
                    if (r < remaining) sel[above + r] = sort_entry(prefix, 4 * q + c);
                    ++r;
                }
                rank += __shfl_sync(0xffffffffu, incl, 31);
            }
        }
    }
    __syncthreads();

    bitonic_sort_descending(sel, kMaxRowSampleTop);
    write_summary(row, sel, n_top, max, sum_t, sum_1, block_top, o);
}

}  // namespace

void sample_rows(float* x, int64_t n, const RowSampleJob* jobs, int64_t n_jobs, const LogitEdit* edits, int32_t k, RowSample* out,
                 TokenLogit* top, cudaStream_t s) {
    if (n_jobs <= 0) return;
    if (n % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) throw Error("sample_rows: rows must be float4-aligned");
    if (k > kMaxRowSampleTop)
        throw Error("sample_rows: k " + std::to_string(k) + " is above " + std::to_string(kMaxRowSampleTop));
    launch_kernel(sample_rows_kernel, static_cast<unsigned>(n_jobs), kThreads, 0, s, x, n, jobs, edits, static_cast<int>(k), out,
                  top);
    STRATA_CUDA_LAUNCHED();
}

}  // namespace strata::cuda
