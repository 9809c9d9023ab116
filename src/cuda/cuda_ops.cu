// Element-wise and per-row ops of the CUDA backend, and the Gated DeltaNet pieces other than the
// delta rule (cuda_delta_rule.cu). Each mirrors the CPU backend's op of the same name
// (src/backend/cpu_backend.cpp, cpu_gdn.cpp).
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda/cuda_common.cuh"

namespace strata::cuda {

namespace {

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Sum over a block of up to 1024 threads; every thread gets the result.
__device__ float block_sum(float v, float* shared32) {
    v = warp_sum(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_warps = (blockDim.x + 31) / 32;
    __syncthreads();
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    float t = lane < n_warps ? shared32[lane] : 0.0f;
    return warp_sum(t);
}

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t dim, float eps,
                                float* __restrict__ out) {
    grid_dependency_enter();
    __shared__ float partial[32];
    const float* xr = x + blockIdx.x * dim;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, partial);
    const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
    float* o = out + blockIdx.x * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xr[i] * inv * (w != nullptr ? w[i] : 1.0f);
}

// One warp per row for short rows (heads): rows of dim values.
__global__ void rms_norm_warp_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t rows, int64_t dim,
                                     float eps, float* __restrict__ out) {
    grid_dependency_enter();
    const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float* xr = x + r * dim;
    float ss = 0.0f;
    for (int64_t i = lane; i < dim; i += 32) ss += xr[i] * xr[i];
    ss = warp_sum(ss);
    const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
    float* o = out + r * dim;
    for (int64_t i = lane; i < dim; i += 32) o[i] = xr[i] * inv * (w != nullptr ? w[i] : 1.0f);
}

// Values 4 quad .. 4 quad + 3 of an ActQ8 (rows contiguous), from the thread holding them: the 8
// threads of one 32-value block are 8 consecutive lanes, which share their maximum and sums by
// shuffles (as quantize_act_q8 rounds). Every lane of the warp must take part.
__device__ __forceinline__ void store_q8_quad(float4 r, int64_t quad, const ActQ8& q8) {
    float m = fmaxf(fmaxf(fabsf(r.x), fabsf(r.y)), fmaxf(fabsf(r.z), fabsf(r.w)));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float k = m > 0.0f ? 127.0f / m : 0.0f;
    const char4 c =
        make_char4(static_cast<signed char>(__float2int_rn(r.x * k)), static_cast<signed char>(__float2int_rn(r.y * k)),
                   static_cast<signed char>(__float2int_rn(r.z * k)), static_cast<signed char>(__float2int_rn(r.w * k)));
    reinterpret_cast<char4*>(q8.q)[quad] = c;
    float s = r.x + r.y + r.z + r.w;
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if ((quad & 3) == 0) q8.s[quad / 4] = s;
    if ((quad & 7) == 0) q8.d[quad / 8] = m / 127.0f;
}

// The experts' outputs of a token to add (add_rms_norm_kernel with kPairs): x of token t is
// sum_j weights[t*k + j] * pairs[t*k + j].
struct PairSum {
    const float* pairs;
    const float* weights;
    int k;
};

// One row per block, dim / 4 <= 4 * blockDim.x: the row stays in registers between the sum of
// squares and the scaling (kAdd: y += x first, written back; kPairs: x is the PairSum). Rows of
// 2,048 values take 512 threads holding one float4 each. kQ8: the output is also written rounded
// to 8 bits (dim a multiple of 128, so whole warps run out of values together).
template <bool kAdd, bool kQ8, bool kPairs = false>
__global__ void add_rms_norm_kernel(float* y, const float* __restrict__ x, const float* __restrict__ w, int64_t dim, float eps,
                                    float* out, ActQ8 q8, PairSum ps) {
    grid_dependency_enter();  // out may be y (in place)
    constexpr int kPerThread = 4;
    __shared__ float partial[32];
    const int64_t n4 = dim / 4;
    float4* yr = reinterpret_cast<float4*>(y + blockIdx.x * dim);
    const float4* xr = reinterpret_cast<const float4*>(x + blockIdx.x * dim);
    float4 v[kPerThread];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (i >= n4) break;
        v[k] = yr[i];
        if constexpr (kAdd) {
            float4 a;
            if constexpr (kPairs) {
                a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                for (int j = 0; j < ps.k; ++j) {
                    const int64_t slot = static_cast<int64_t>(blockIdx.x) * ps.k + j;
                    const float wj = ps.weights[slot];
                    const float4 p = reinterpret_cast<const float4*>(ps.pairs + slot * dim)[i];
                    a.x += wj * p.x;
                    a.y += wj * p.y;
                    a.z += wj * p.z;
                    a.w += wj * p.w;
                }
            } else {
                a = xr[i];
            }
            v[k].x += a.x;
            v[k].y += a.y;
            v[k].z += a.z;
            v[k].w += a.w;
            yr[i] = v[k];
        }
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    ss = block_sum(ss, partial);
    const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
    float4* o = reinterpret_cast<float4*>(out + blockIdx.x * dim);
    const float4* w4 = reinterpret_cast<const float4*>(w);
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (i >= n4) break;
        const float4 s = w4 != nullptr ? w4[i] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        const float4 r = make_float4(v[k].x * inv * s.x, v[k].y * inv * s.y, v[k].z * inv * s.z, v[k].w * inv * s.w);
        o[i] = r;
        if constexpr (kQ8) store_q8_quad(r, static_cast<int64_t>(blockIdx.x) * n4 + i, q8);
    }
}

// Attention's q and k heads: RMSNorm of each head, then NeoX RoPE of its first n_rot dims, one
// warp per head of kJ * 32 values (lane holds dims lane + 32 j; the rotation pairs j with
// j + half / 32, so both halves of a pair sit in one lane). Heads [0, n_tokens * n_head) are q's,
// the next n_tokens * n_head_kv k's; with a cache store, the last n_tokens * n_head_kv warps copy
// v's heads.
template <int kJ>
__global__ void head_norm_rope_kernel(HeadNormRope a) {
    grid_dependency_enter();
    int64_t head = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    const int64_t q_heads = a.n_tokens * a.n_head, kv_heads = a.n_tokens * a.n_head_kv;
    if (head >= q_heads + kv_heads * (a.k_base != nullptr ? 2 : 1)) return;
    if (head >= q_heads + kv_heads) {  // v head: copy into the cache
        const int64_t vh = head - q_heads - kv_heads, t = vh / a.n_head_kv, at = (vh % a.n_head_kv) * (kJ * 32);
        const float* src = a.v + t * a.n_head_kv * (kJ * 32) + at;
        const int64_t dst = a.v_off[t] + at;
#pragma unroll
        for (int j = 0; j < kJ; ++j) kv_put(a.v_base, a.kv_half, dst + lane + 32 * j, src[lane + 32 * j]);
        return;
    }
    const bool is_q = head < q_heads;
    if (!is_q) head -= q_heads;
    float* h = (is_q ? a.q : a.k) + head * (kJ * 32);
    const float* w = is_q ? a.q_norm : a.k_norm;
    const int64_t token = head / (is_q ? a.n_head : a.n_head_kv);
    float v[kJ];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
        v[j] = h[lane + 32 * j];
        ss += v[j] * v[j];
    }
    ss = warp_sum(ss);
    const float inv = rsqrtf(ss / static_cast<float>(kJ * 32) + a.eps);
#pragma unroll
    for (int j = 0; j < kJ; ++j) v[j] = v[j] * inv * w[lane + 32 * j];
    const float p = static_cast<float>(a.pos[token]);
    const int pairs = static_cast<int>(a.n_rot / 2) / 32;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
        if (j < pairs) {
            float sn, cs;
            sincosf(p * a.inv_freq[lane + 32 * j], &sn, &cs);
            const float x0 = v[j], x1 = v[j + pairs];
            v[j] = x0 * cs - x1 * sn;
            v[j + pairs] = x1 * cs + x0 * sn;
        }
    }
#pragma unroll
    for (int j = 0; j < kJ; ++j) h[lane + 32 * j] = v[j];
    if (!is_q && a.k_base != nullptr) {
        const int64_t dst = a.k_off[token] + (head % a.n_head_kv) * (kJ * 32);
#pragma unroll
        for (int j = 0; j < kJ; ++j) kv_put(a.k_base, a.kv_half, dst + lane + 32 * j, v[j]);
    }
}

__global__ void add_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
    grid_dependency_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t rows, int64_t dim, int64_t in_stride, float* out) {
    grid_dependency_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * dim) return;
    const int64_t r = i / dim, c = i % dim;
    out[i] = silu(gate[r * in_stride + c]) * up[r * in_stride + c];
}

__global__ void mul_sigmoid_kernel(float* x, const float* g, int64_t rows, int64_t dim, int64_t g_stride) {
    grid_dependency_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * dim) return;
    const int64_t r = i / dim, c = i % dim;
    x[i] *= sigmoid(g_stride == 0 ? g[r] : g[r * g_stride + c]);
}

// NeoX pairs (i, i + n_rot/2) of every head rotated by pos * inv_freq[i].
__global__ void rope_kernel(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                            const float* inv_freq, int64_t half) {
    grid_dependency_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_tokens * n_heads * half) return;
    const int64_t j = i % half, th = i / half, t = th / n_heads;
    float* v = x + th * head_dim;
    const float angle = static_cast<float>(pos[t]) * inv_freq[j];
    float s, c;
    sincosf(angle, &s, &c);
    const float a = v[j], b = v[j + half];
    v[j] = a * c - b * s;
    v[j + half] = b * c + a * s;
}

__global__ void kv_store_kernel(void* k_base, void* v_base, bool half, const int64_t* k_off, const int64_t* v_off, const float* k,
                                int64_t k_row, const float* v, int64_t v_row) {
    grid_dependency_enter();
    const int64_t t = blockIdx.y;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < k_row + v_row;
         i += gridDim.x * blockDim.x) {
        if (i < k_row) kv_put(k_base, half, k_off[t] + i, k[t * k_row + i]);
        else kv_put(v_base, half, v_off[t] + i - k_row, v[t * v_row + i - k_row]);
    }
}

// One block per token: softmax over the router logits, then k rounds of a block-wide argmax
// (ties to the lower id), optional renormalisation of the chosen weights.
__global__ void route_kernel(const float* logits, int64_t n_expert, int64_t k, bool renorm, int32_t* ids, float* weights) {
    grid_dependency_enter();
    extern __shared__ float p[];  // [n_expert]
    __shared__ float red_v[32];
    __shared__ int red_i[32];
    __shared__ float partial[32];
    const float* l = logits + blockIdx.x * n_expert;
    float mx = -INFINITY;
    for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    if ((threadIdx.x & 31) == 0) red_v[threadIdx.x / 32] = mx;
    __syncthreads();
    if (threadIdx.x < 32) {
        float m = threadIdx.x < (blockDim.x + 31) / 32 ? red_v[threadIdx.x] : -INFINITY;
        m = warp_max(m);
        if (threadIdx.x == 0) red_v[0] = m;
    }
    __syncthreads();
    mx = red_v[0];
    float sum = 0.0f;
    for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x) sum += (p[e] = expf(l[e] - mx));
    sum = block_sum(sum, partial);
    for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x) p[e] /= sum;
    __syncthreads();
    float chosen = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
        float best = -1.0f;
        int best_i = 0x7fffffff;
        for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x)
            if (p[e] > best) best = p[e], best_i = static_cast<int>(e);
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, best, o);
            const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
            if (ov > best || (ov == best && oi < best_i)) best = ov, best_i = oi;
        }
        __syncthreads();
        if ((threadIdx.x & 31) == 0) red_v[threadIdx.x / 32] = best, red_i[threadIdx.x / 32] = best_i;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < static_cast<int>((blockDim.x + 31) / 32); ++w)
                if (red_v[w] > red_v[0] || (red_v[w] == red_v[0] && red_i[w] < red_i[0]))
                    red_v[0] = red_v[w], red_i[0] = red_i[w];
            ids[blockIdx.x * k + j] = red_i[0];
            weights[blockIdx.x * k + j] = red_v[0];
            chosen += red_v[0];
            p[red_i[0]] = -2.0f;  // taken
        }
        __syncthreads();
    }
    if (threadIdx.x == 0 && renorm)
        for (int64_t j = 0; j < k; ++j) weights[blockIdx.x * k + j] /= chosen;
}

constexpr int kRouteWarps = 4;

// A float's bits mapped so that unsigned order is the floats' order (negatives below positives,
// -0 just below +0), and back.
__device__ __forceinline__ unsigned orderable_bits(float f) {
    const unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
}
__device__ __forceinline__ float from_orderable_bits(unsigned key) {
    return __uint_as_float((key & 0x80000000u) != 0 ? key & 0x7fffffffu : ~key);
}

// One warp per token with the probabilities in registers (kPer per lane: expert lane + 32 i),
// for up to 512 experts and k <= 32: the same result as route_kernel (ties to the lower id).
// Lane j keeps the j-th choice and writes it at the end.
template <int kPer>
__global__ void route_reg_kernel(const float* __restrict__ logits, int64_t n_tokens, int n_expert, int k, bool renorm,
                                 int32_t* __restrict__ ids, float* __restrict__ weights) {
    grid_dependency_enter();
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (t >= n_tokens) return;
    const float* l = logits + t * n_expert;
    float p[kPer];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int e = lane + 32 * i;
        p[i] = e < n_expert ? l[e] : -INFINITY;
        mx = fmaxf(mx, p[i]);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        p[i] = lane + 32 * i < n_expert ? expf(p[i] - mx) : 0.0f;
        sum += p[i];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int i = 0; i < kPer; ++i) p[i] = lane + 32 * i < n_expert ? p[i] / sum : -1.0f;
    float chosen = 0.0f, my_w = 0.0f;
    int my_id = 0;
    for (int j = 0; j < k; ++j) {
        float best = -1.0f;
        int best_i = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < kPer; ++i)
            if (p[i] > best) best = p[i], best_i = lane + 32 * i;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        // The warp's largest value, then the lowest id holding it: two one-instruction warp
        // reductions instead of five rounds of two shuffles and a compare.
        const unsigned key = orderable_bits(best), top = __reduce_max_sync(0xffffffffu, key);
        best_i = static_cast<int>(__reduce_min_sync(0xffffffffu, key == top ? static_cast<unsigned>(best_i) : 0xffffffffu));
        best = from_orderable_bits(top);
#else
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, best, o);
            const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
            if (ov > best || (ov == best && oi < best_i)) best = ov, best_i = oi;
        }
#endif
        chosen += best;
#pragma unroll
        for (int i = 0; i < kPer; ++i)
            if (lane + 32 * i == best_i) p[i] = -2.0f;  // taken
        if (lane == j) my_id = best_i, my_w = best;
    }
    if (lane < k) {
        ids[t * k + lane] = my_id;
        weights[t * k + lane] = renorm ? my_w / chosen : my_w;
    }
}

// One warp per token (experts in shared memory): the same result as route_kernel with
// shuffles only, for the usual expert counts.
__global__ void route_warp_kernel(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                                  float* weights) {
    grid_dependency_enter();
    extern __shared__ float smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
    if (t >= n_tokens) return;
    float* p = smem + warp * n_expert;
    const float* l = logits + t * n_expert;
    float mx = -INFINITY;
    for (int64_t e = lane; e < n_expert; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int64_t e = lane; e < n_expert; e += 32) sum += (p[e] = expf(l[e] - mx));
    sum = warp_sum(sum);
    for (int64_t e = lane; e < n_expert; e += 32) p[e] /= sum;
    __syncwarp();
    float chosen = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
        float best = -1.0f;
        int best_i = 0x7fffffff;
        for (int64_t e = lane; e < n_expert; e += 32)
            if (p[e] > best) best = p[e], best_i = static_cast<int>(e);
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, best, o);
            const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
            if (ov > best || (ov == best && oi < best_i)) best = ov, best_i = oi;
        }
        chosen += best;
        if (lane == 0) {
            ids[t * k + j] = best_i;
            weights[t * k + j] = best;
            p[best_i] = -2.0f;  // taken
        }
        __syncwarp();
    }
    if (renorm)
        for (int64_t j = lane; j < k; j += 32) weights[t * k + j] /= chosen;
}

__global__ void l2_norm_kernel(float* x, int64_t n_tokens, int64_t rows, int64_t dim, int64_t token_stride, float eps) {
    grid_dependency_enter();
    const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= n_tokens * rows) return;
    float* v = x + (r / rows) * token_stride + (r % rows) * dim;
    float ss = 0.0f;
    for (int64_t i = lane; i < dim; i += 32) ss += v[i] * v[i];
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss + eps);
    for (int64_t i = lane; i < dim; i += 32) v[i] *= inv;
}

__global__ void gdn_gates_kernel(const float* alpha, const float* b, int64_t row_stride, int64_t group, int64_t group_stride,
                                 const float* a, const float* dt_bias, float* g, float* beta, int64_t n_tokens, int64_t n_heads) {
    grid_dependency_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_tokens * n_heads) return;
    const int64_t t = i / n_heads, h = i % n_heads;
    const int64_t off = t * row_stride + (h / group) * group_stride + h % group;
    const float z = alpha[off] + dt_bias[h];
    const float softplus = z > 20.0f ? z : log1pf(expf(z));
    g[i] = a[h] * softplus;
    beta[i] = sigmoid(b[off]);
}

// One thread per channel walks the tokens; the window is the carried inputs then the new ones.
__global__ void conv_kernel(const float* x, int64_t n_tokens, int64_t channels, const float* w, int64_t kernel, float* state,
                            float* out) {
    grid_dependency_enter();
    const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const int64_t keep = kernel - 1;
    const float* wc = w + c * kernel;
    auto input = [&](int64_t i) {  // i indexes [state rows | tokens]
        return i < keep ? state[i * channels + c] : x[(i - keep) * channels + c];
    };
    for (int64_t t = 0; t < n_tokens; ++t) {
        float s = 0.0f;
        for (int64_t j = 0; j < kernel; ++j) s += wc[j] * input(t + j);
        out[t * channels + c] = silu(s);
    }
    // The last keep inputs become the state (read before writing: rows may overlap).
    float last[64];
    for (int64_t j = 0; j < keep; ++j) last[j] = input(n_tokens + j);
    for (int64_t j = 0; j < keep; ++j) state[j * channels + c] = last[j];
}

__global__ void to_bf16_kernel(const float* x, int64_t rows, int64_t cols, int64_t x_stride, __nv_bfloat16* out) {
    grid_dependency_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    out[i] = __float2bfloat16(x[(i / cols) * x_stride + i % cols]);
}

__global__ void gather_rows_kernel(const float* x, int64_t cols, const int32_t* rows, int64_t n, float* out) {
    grid_dependency_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * cols) return;
    out[i] = x[static_cast<int64_t>(rows[i / cols]) * cols + i % cols];
}

__global__ void swiglu_bf16_kernel(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n, __nv_bfloat16* out) {
    grid_dependency_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16(silu(__bfloat162float(gate[i])) * __bfloat162float(up[i]));
}

__device__ __forceinline__ float as_float(float v) { return v; }
__device__ __forceinline__ float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class Pair>
__global__ void moe_combine_kernel(const Pair* pairs, const int32_t* slot_row, const float* weights, int64_t n_tokens, int64_t k,
                                   int64_t dim, float* out) {
    grid_dependency_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_tokens * dim) return;
    const int64_t t = i / dim, c = i % dim;
    float s = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
        const int64_t slot = t * k + j;
        const int64_t row = slot_row != nullptr ? slot_row[slot] : slot;
        s += weights[slot] * as_float(pairs[row * dim + c]);
    }
    out[i] = s;
}

// The better of two (value, index) candidates: larger value, then lower index (-1: none).
__device__ __forceinline__ void better(float& v, int& i, float ov, int oi) {
    if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) {
        v = ov;
        i = oi;
    }
}

// One block per row: each thread its strided share, then warp shuffles and one pass over the
// warps' winners.
__global__ void argmax_kernel(const float* __restrict__ x, int64_t n, int32_t* ids) {
    grid_dependency_enter();
    __shared__ float wv[32];
    __shared__ int wi[32];
    const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
    float v = -INFINITY;
    int i = -1;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
        if (row[c] > v) {  // NaN and -inf never win; a thread's indices rise, so ties keep the first
            v = row[c];
            i = static_cast<int>(c);
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        better(v, i, ov, oi);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (lane == 0) wv[warp] = v, wi[warp] = i;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) better(v, i, wv[w], wi[w]);
        ids[blockIdx.x] = i;
    }
}

}  // namespace

void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids, cudaStream_t s) {
    if (rows <= 0) return;
    launch_kernel(argmax_kernel, static_cast<unsigned>(rows), 1024, 0, s, x, n, ids);
    STRATA_CUDA_LAUNCHED();
}

namespace {
// Threads for add_rms_norm_kernel: four float4 per thread at most, whole warps; 0 when the row
// does not fit that shape.
int norm_threads(int64_t dim) {
    if (dim % 4 != 0 || dim / 4 > 4 * 1024) return 0;
    const int64_t n4 = dim / 4;
    const int64_t t = std::max<int64_t>(std::min<int64_t>(n4, 512), (n4 + 3) / 4);
    return static_cast<int>((t + 31) / 32 * 32);
}
}  // namespace

void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out, cudaStream_t s, const ActQ8* q8) {
    if (rows <= 0) return;
    const int threads = norm_threads(dim);
    const bool fused = threads > 0 && dim > 512 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
    if (fused && q8 != nullptr && dim % 128 == 0) {
        launch_kernel(add_rms_norm_kernel<false, true>, static_cast<unsigned>(rows), threads, 0, s, const_cast<float*>(x),
                      nullptr, w, dim, eps, out, *q8, PairSum{});
        STRATA_CUDA_LAUNCHED();
        return;
    }
    if (dim <= 512) launch_kernel(rms_norm_warp_kernel, blocks_for(rows, 8), 256, 0, s, x, w, rows, dim, eps, out);
    else if (fused)
        launch_kernel(add_rms_norm_kernel<false, false>, static_cast<unsigned>(rows), threads, 0, s, const_cast<float*>(x),
                      nullptr, w, dim, eps, out, ActQ8{}, PairSum{});
    else launch_kernel(rms_norm_kernel, static_cast<unsigned>(rows), 256, 0, s, x, w, dim, eps, out);
    STRATA_CUDA_LAUNCHED();
    if (q8 != nullptr) quantize_act_q8(out, rows, dim, dim, *q8, s);
}

void add_rms_norm(float* y, const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out, cudaStream_t s,
                  const ActQ8* q8) {
    if (rows <= 0) return;
    const int threads = norm_threads(dim);
    const bool aligned =
        (reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
    if (dim <= 512 || threads == 0 || !aligned) {
        add(y, x, rows * dim, s);
        rms_norm(y, w, rows, dim, eps, out, s, q8);
        return;
    }
    if (q8 != nullptr && dim % 128 == 0) {
        launch_kernel(add_rms_norm_kernel<true, true>, static_cast<unsigned>(rows), threads, 0, s, y, x, w, dim, eps, out, *q8,
                      PairSum{});
    } else {
        launch_kernel(add_rms_norm_kernel<true, false>, static_cast<unsigned>(rows), threads, 0, s, y, x, w, dim, eps, out,
                      ActQ8{}, PairSum{});
        if (q8 != nullptr) {
            STRATA_CUDA_LAUNCHED();
            quantize_act_q8(out, rows, dim, dim, *q8, s);
        }
    }
    STRATA_CUDA_LAUNCHED();
}

bool moe_combine_add_rms_norm_fits(const float* pairs, const float* y, const float* out, int64_t dim) {
    const bool aligned =
        (reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(pairs) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
    return dim > 512 && dim % 128 == 0 && norm_threads(dim) > 0 && aligned;
}

void moe_combine_add_rms_norm(const float* pairs, const float* weights, int64_t k, float* y, const float* w, int64_t rows,
                              int64_t dim, float eps, float* out, cudaStream_t s, const ActQ8* q8) {
    if (!moe_combine_add_rms_norm_fits(pairs, y, out, dim)) throw Error("moe_combine_add_rms_norm: unsupported shape");
    if (rows <= 0) return;
    const int threads = norm_threads(dim);
    const PairSum ps{pairs, weights, static_cast<int>(k)};
    if (q8 != nullptr)
        launch_kernel(add_rms_norm_kernel<true, true, true>, static_cast<unsigned>(rows), threads, 0, s, y, nullptr, w, dim, eps,
                      out, *q8, ps);
    else
        launch_kernel(add_rms_norm_kernel<true, false, true>, static_cast<unsigned>(rows), threads, 0, s, y, nullptr, w, dim, eps,
                      out, ActQ8{}, ps);
    STRATA_CUDA_LAUNCHED();
}

bool head_norm_rope_fits(int64_t head_dim, int64_t n_rot) {
    const int64_t half = n_rot / 2;
    return (head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512) && half > 0 && half % 32 == 0 &&
           n_rot <= head_dim;
}

void head_norm_rope(const HeadNormRope& a, cudaStream_t s) {
    if (!head_norm_rope_fits(a.head_dim, a.n_rot))
        throw Error("head_norm_rope: head of " + std::to_string(a.head_dim) + " dims, " + std::to_string(a.n_rot) + " rotated");
    const int64_t heads = a.n_tokens * (a.n_head + a.n_head_kv * (a.k_base != nullptr ? 2 : 1));
    if (heads <= 0) return;
    const unsigned grid = blocks_for(heads, 8);
    switch (a.head_dim) {
        case 64: launch_kernel(head_norm_rope_kernel<2>, grid, 256, 0, s, a); break;
        case 128: launch_kernel(head_norm_rope_kernel<4>, grid, 256, 0, s, a); break;
        case 256: launch_kernel(head_norm_rope_kernel<8>, grid, 256, 0, s, a); break;
        default: launch_kernel(head_norm_rope_kernel<16>, grid, 256, 0, s, a); break;
    }
    STRATA_CUDA_LAUNCHED();
}

int kernel_code_version() {
    cudaFuncAttributes fa{};
    STRATA_CUDA_CHECK(cudaFuncGetAttributes(&fa, add_kernel));
    // Code JIT-compiled from older PTX reports the device's binary version but was compiled
    // with the older __CUDA_ARCH__ (no wait in it): the lower of the two decides.
    return std::min(fa.binaryVersion, fa.ptxVersion);
}

void add(float* y, const float* x, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    launch_kernel(add_kernel, blocks_for(n, 256), 256, 0, s, y, x, n);
    STRATA_CUDA_LAUNCHED();
}

void swiglu(const float* gate, const float* up, int64_t rows, int64_t dim, int64_t in_stride, float* out, cudaStream_t s) {
    if (rows * dim <= 0) return;
    launch_kernel(swiglu_kernel, blocks_for(rows * dim, 256), 256, 0, s, gate, up, rows, dim, in_stride, out);
    STRATA_CUDA_LAUNCHED();
}

void mul_sigmoid(float* x, const float* g, int64_t rows, int64_t dim, int64_t g_stride, cudaStream_t s) {
    if (rows * dim <= 0) return;
    launch_kernel(mul_sigmoid_kernel, blocks_for(rows * dim, 256), 256, 0, s, x, g, rows, dim, g_stride);
    STRATA_CUDA_LAUNCHED();
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const float* inv_freq, int64_t n_rot,
          cudaStream_t s) {
    const int64_t n = n_tokens * n_heads * (n_rot / 2);
    if (n <= 0) return;
    launch_kernel(rope_kernel, blocks_for(n, 256), 256, 0, s, x, n_tokens, n_heads, head_dim, pos, inv_freq, n_rot / 2);
    STRATA_CUDA_LAUNCHED();
}

void kv_store(void* k_base, void* v_base, bool half, const int64_t* k_off, const int64_t* v_off, int64_t n_tokens, const float* k,
              int64_t k_row, const float* v, int64_t v_row, cudaStream_t s) {
    if (n_tokens <= 0) return;
    const dim3 grid(blocks_for(k_row + v_row, 256), static_cast<unsigned>(n_tokens));
    launch_kernel(kv_store_kernel, grid, 256, 0, s, k_base, v_base, half, k_off, v_off, k, k_row, v, v_row);
    STRATA_CUDA_LAUNCHED();
}

void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                        float* weights, cudaStream_t s) {
    if (n_tokens <= 0) return;
    if (n_expert > 8192 || k > n_expert)
        throw Error("routing: " + std::to_string(n_expert) + " experts, top " + std::to_string(k));
    if (n_expert <= 512 && k <= 32) {
        const unsigned grid = blocks_for(n_tokens, kRouteWarps);
        const int ne = static_cast<int>(n_expert), kk = static_cast<int>(k);
        const auto run = [&](auto kernel) {
            launch_kernel(kernel, grid, kRouteWarps * 32, 0, s, logits, n_tokens, ne, kk, renorm, ids, weights);
        };
        if (n_expert <= 128) run(route_reg_kernel<4>);
        else if (n_expert <= 256) run(route_reg_kernel<8>);
        else run(route_reg_kernel<16>);
        STRATA_CUDA_LAUNCHED();
        return;
    }
    if (n_expert <= 1024) {
        launch_kernel(route_warp_kernel, blocks_for(n_tokens, kRouteWarps), kRouteWarps * 32,
                      kRouteWarps * static_cast<size_t>(n_expert) * sizeof(float), s, logits, n_tokens, n_expert, k, renorm, ids,
                      weights);
        STRATA_CUDA_LAUNCHED();
        return;
    }
    launch_kernel(route_kernel, static_cast<unsigned>(n_tokens), 128, static_cast<size_t>(n_expert) * sizeof(float), s, logits,
                  n_expert, k, renorm, ids, weights);
    STRATA_CUDA_LAUNCHED();
}

void l2_norm(float* x, int64_t n_tokens, int64_t rows, int64_t dim, int64_t token_stride, float eps, cudaStream_t s) {
    if (n_tokens * rows <= 0) return;
    launch_kernel(l2_norm_kernel, blocks_for(n_tokens * rows, 8), 256, 0, s, x, n_tokens, rows, dim, token_stride, eps);
    STRATA_CUDA_LAUNCHED();
}

void gdn_gates(const float* alpha, const float* b, int64_t row_stride, int64_t group, int64_t group_stride, const float* a,
               const float* dt_bias, float* g, float* beta, int64_t n_tokens, int64_t n_heads, cudaStream_t s) {
    if (n_tokens * n_heads <= 0) return;
    launch_kernel(gdn_gates_kernel, blocks_for(n_tokens * n_heads, 256), 256, 0, s, alpha, b, row_stride, group, group_stride, a,
                  dt_bias, g, beta, n_tokens, n_heads);
    STRATA_CUDA_LAUNCHED();
}

void ssm_conv_silu(const float* x, int64_t n_tokens, int64_t channels, const float* w, int64_t kernel, float* conv_state,
                   float* out, cudaStream_t s) {
    if (kernel < 1 || kernel > 65) throw Error("conv kernel of " + std::to_string(kernel) + " taps");
    launch_kernel(conv_kernel, blocks_for(channels, 128), 128, 0, s, x, n_tokens, channels, w, kernel, conv_state, out);
    STRATA_CUDA_LAUNCHED();
}

void to_bf16(const float* x, int64_t rows, int64_t cols, int64_t x_stride, void* out, cudaStream_t s) {
    if (rows * cols <= 0) return;
    launch_kernel(to_bf16_kernel, blocks_for(rows * cols, 256), 256, 0, s, x, rows, cols, x_stride,
                  static_cast<__nv_bfloat16*>(out));
    STRATA_CUDA_LAUNCHED();
}

void gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t n, float* out, cudaStream_t s) {
    if (n * cols <= 0) return;
    launch_kernel(gather_rows_kernel, blocks_for(n * cols, 256), 256, 0, s, x, cols, rows, n, out);
    STRATA_CUDA_LAUNCHED();
}

void moe_combine(const float* pairs, const int32_t* slot_row, const float* weights, int64_t n_tokens, int64_t k, int64_t dim,
                 float* out, cudaStream_t s) {
    if (n_tokens * dim <= 0) return;
    launch_kernel(moe_combine_kernel<float>, blocks_for(n_tokens * dim, 256), 256, 0, s, pairs, slot_row, weights, n_tokens, k,
                  dim, out);
    STRATA_CUDA_LAUNCHED();
}

void moe_combine_bf16(const void* pairs, const int32_t* slot_row, const float* weights, int64_t n_tokens, int64_t k, int64_t dim,
                      float* out, cudaStream_t s) {
    if (n_tokens * dim <= 0) return;
    launch_kernel(moe_combine_kernel<__nv_bfloat16>, blocks_for(n_tokens * dim, 256), 256, 0, s,
                  static_cast<const __nv_bfloat16*>(pairs), slot_row, weights, n_tokens, k, dim, out);
    STRATA_CUDA_LAUNCHED();
}

void swiglu_bf16(const void* gate, const void* up, int64_t n, void* out, cudaStream_t s) {
    if (n <= 0) return;
    launch_kernel(swiglu_bf16_kernel, blocks_for(n, 256), 256, 0, s, static_cast<const __nv_bfloat16*>(gate),
                  static_cast<const __nv_bfloat16*>(up), n, static_cast<__nv_bfloat16*>(out));
    STRATA_CUDA_LAUNCHED();
}

namespace {
__global__ void expert_slot_lookup_kernel(const int32_t* ids, const float* weights, const int32_t* table, int n, int32_t* pack) {
    grid_dependency_enter();
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    const int32_t e = ids[i];
    pack[i] = e;
    pack[n + i] = table[e];
    pack[2 * n + i] = __float_as_int(weights[i]);
}
}  // namespace

void expert_slot_lookup(const int32_t* ids, const float* weights, const int32_t* table, int64_t n, int32_t* pack,
                        cudaStream_t s) {
    if (n <= 0) return;
    launch_kernel(expert_slot_lookup_kernel, blocks_for(n, 256), 256, 0, s, ids, weights, table, static_cast<int>(n), pack);
    STRATA_CUDA_LAUNCHED();
}

}  // namespace strata::cuda
