// The gated delta rule of Gated DeltaNet layers on the GPU, in both forms the CPU backend has
// (src/backend/cpu_gdn.cpp): token by token for decode, and by chunks of kChunk tokens for
// prefill.
//
// The chunked form splits the CPU's chunk algebra into three kernels so that only one of them
// walks the chunks in order. With S0 the state entering a chunk of L tokens, G_i the cumulative
// log decay through token i, A the strictly lower L x L matrix A[i][j] = beta_i e^{G_i-G_j}
// (k_i . k_j) and T = (I + A)^{-1}, the corrections u_i the recurrence adds as k_i u_i^T are
//   U = T diag(beta) V - T diag(beta e^G) K S0 = U' - W S0.
// 1. solve (every chunk at once): U' and W by forward substitution through I + A; neither
//    depends on the state.
// 2. state (one block per value head and 32 value columns, chunk after chunk): U = U' - W S0,
//    the state's part of the output e^{G_i} S0^T q_i, and the state leaving the chunk
//    e^{G_{L-1}} S0 + sum_j e^{G_{L-1}-G_j} k_j u_j^T.
// 3. output (every chunk at once): adds the chunk's own part sum_{j<=i} e^{G_i-G_j} (q_i . k_j) u_j
//    and the scale.
// So the in-order part is 3 small products a chunk instead of a dependent step a token.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/cuda_common.cuh"

namespace strata::cuda {

namespace {

__device__ __forceinline__ int64_t key_head_of(const DeltaRule& a, int64_t h) {
    return a.tiled ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
}

// The gated delta rule, token by token. A block owns 32 value columns of one value head; warp
// w of its kDeltaWarps holds rows w*R .. w*R+R-1 of those columns of the state in registers
// (R = d_k / kDeltaWarps), so each product over d_k is a per-warp partial sum and one exchange
// through shared memory.
constexpr int kDeltaWarps = 4;
template <int R>
__global__ void __launch_bounds__(kDeltaWarps * 32) delta_rule_kernel(DeltaRule a) {
    grid_dependency_enter();
    const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t col = static_cast<int64_t>(blockIdx.y) * 32 + lane;
    const bool live = col < a.d_v;
    const int64_t hk = key_head_of(a, h);
    __shared__ float qs[R * kDeltaWarps], ks[R * kDeltaWarps];
    __shared__ float part[kDeltaWarps][32];
    float* state = a.state + static_cast<int64_t>(h) * a.d_k * a.d_v;
    float S[R];
#pragma unroll
    for (int i = 0; i < R; ++i) S[i] = live ? state[(warp * R + i) * a.d_v + col] : 0.0f;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
        const float* q = a.q + t * a.q_stride + hk * a.d_k;
        const float* k = a.k + t * a.k_stride + hk * a.d_k;
        __syncthreads();  // previous token's reads of qs/ks/part are done
        for (int64_t i = threadIdx.x; i < a.d_k; i += blockDim.x) qs[i] = q[i], ks[i] = k[i];
        __syncthreads();
        const float decay = expf(a.g[t * a.n_v_heads + h]);
        float sk = 0.0f;
#pragma unroll
        for (int i = 0; i < R; ++i) {
            S[i] *= decay;
            sk += S[i] * ks[warp * R + i];
        }
        part[warp][lane] = sk;
        __syncthreads();
        float kv = 0.0f;
#pragma unroll
        for (int w = 0; w < kDeltaWarps; ++w) kv += part[w][lane];
        const float vv = live ? a.v[t * a.v_stride + static_cast<int64_t>(h) * a.d_v + col] : 0.0f;
        const float u = a.beta[t * a.n_v_heads + h] * (vv - kv);
        float o = 0.0f;
#pragma unroll
        for (int i = 0; i < R; ++i) {
            S[i] += ks[warp * R + i] * u;
            o += S[i] * qs[warp * R + i];
        }
        __syncthreads();
        part[warp][lane] = o;
        __syncthreads();
        if (warp == 0 && live) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < kDeltaWarps; ++w) sum += part[w][lane];
            a.out[(t * a.n_v_heads + h) * a.d_v + col] = sum * a.scale;
        }
    }
#pragma unroll
    for (int i = 0; i < R; ++i)
        if (live) state[(warp * R + i) * a.d_v + col] = S[i];
}

// ---- the chunked form ----------------------------------------------------------------------
constexpr int kChunk = 64;
constexpr int kChunkThreads = 256;  // the solve kernel gives each thread one of d_v + d_k columns
constexpr int kChunkMaxDim = 128;
constexpr int kStateWarps = kChunkThreads / 32;
constexpr int kStateRows = kChunkMaxDim / kStateWarps;  // state rows a thread of the state kernel holds
constexpr int kAStride = kChunk + 1;                    // padded rows of the L x L matrices
// Rows of keys/queries in shared memory are d_k + 4 floats apart: 16-byte aligned for float4
// reads, and 8 lanes reading 8 rows hit 8 different groups of 4 banks (d_k % 16 == 0).
__host__ __device__ constexpr int padded(int dk) { return dk + 4; }

// k_i . k_j over rows of a padded shared array (four partial sums: short dependency chains).
__device__ __forceinline__ float row_dot(const float* x, const float* y, int dk) {
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int d = 0; d < dk; d += 4) {
        const float4 a = *reinterpret_cast<const float4*>(x + d), b = *reinterpret_cast<const float4*>(y + d);
        s0 += a.x * b.x;
        s1 += a.y * b.y;
        s2 += a.z * b.z;
        s3 += a.w * b.w;
    }
    return (s0 + s1) + (s2 + s3);
}

// The chunk's log decays g[c0 + lane] and g[c0 + lane + 32] of value head h (0 past L), which
// warp 0 loads for chunk_log_decay.
struct ChunkDecay {
    float x0, x1;
};
__device__ __forceinline__ ChunkDecay fetch_decay(const DeltaRule& a, int64_t c0, int L, int64_t h) {
    const int lane = threadIdx.x & 31;
    return {lane < L ? a.g[(c0 + lane) * a.n_v_heads + h] : 0.0f, lane + 32 < L ? a.g[(c0 + lane + 32) * a.n_v_heads + h] : 0.0f};
}

// G[i] = g[c0] + ... + g[c0 + i] for the chunk's tokens (rows past L repeat the total), by warp 0
// in a shuffle scan; with E and F also e^{G_i} and e^{G_{L-1} - G_i}. The caller's barrier
// publishes them.
__device__ void chunk_log_decay(ChunkDecay g, int L, float* G, float* E = nullptr, float* F = nullptr) {
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    float x0 = g.x0, x1 = g.x1;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y0 = __shfl_up_sync(0xffffffffu, x0, o), y1 = __shfl_up_sync(0xffffffffu, x1, o);
        if (lane >= o) x0 += y0, x1 += y1;
    }
    x1 += __shfl_sync(0xffffffffu, x0, 31);
    G[lane] = x0;
    G[lane + 32] = x1;
    if (E == nullptr) return;
    const float last = __shfl_sync(0xffffffffu, L - 1 < 32 ? x0 : x1, (L - 1) & 31);
    E[lane] = expf(x0);
    E[lane + 32] = expf(x1);
    F[lane] = expf(last - x0);
    F[lane + 32] = expf(last - x1);
}

// A chunk's rows of d_k floats (row i at src + i * stride, 16-byte aligned) on their way to
// shared memory: each thread's share as float4 registers, all its loads issued before any is
// used (one memory round trip a chunk, not one per row).
constexpr int kStageVecs = kChunk * kChunkMaxDim / 4 / kChunkThreads;
struct ChunkRows {
    float4 v[kStageVecs];
};
__device__ __forceinline__ void fetch_rows(ChunkRows& r, const float* src, int64_t stride, int L, int dk) {
    const int per_row = dk / 4;
#pragma unroll
    for (int k = 0; k < kStageVecs; ++k) {
        const int idx = static_cast<int>(threadIdx.x) + k * kChunkThreads, i = idx / per_row, c = idx % per_row;
        r.v[k] = i < L ? *reinterpret_cast<const float4*>(src + i * stride + 4 * c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}
// Into shared [kChunk][dst_stride]; rows past L get zeros.
__device__ __forceinline__ void store_rows(const ChunkRows& r, int dk, float* dst, int dst_stride) {
    const int per_row = dk / 4;
#pragma unroll
    for (int k = 0; k < kStageVecs; ++k) {
        const int idx = static_cast<int>(threadIdx.x) + k * kChunkThreads, i = idx / per_row, c = idx % per_row;
        if (i < kChunk) *reinterpret_cast<float4*>(dst + i * dst_stride + 4 * c) = r.v[k];
    }
}

// Grid (chunks, value heads). Writes U' = T diag(beta) V into u ([n_tokens][n_v][d_v]) and
// W = T diag(beta e^G) K into w ([n_tokens][n_v][d_k]): thread c solves I + A for column c of
// [beta V | beta e^G K], its column in registers.
__global__ void __launch_bounds__(kChunkThreads)
    delta_chunk_solve_kernel(DeltaRule a, float* __restrict__ w, float* __restrict__ u) {
    grid_dependency_enter();
    const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kChunk, h = blockIdx.y;
    const int L = static_cast<int>(min(static_cast<int64_t>(kChunk), a.n_tokens - c0));
    const int dk = static_cast<int>(a.d_k), dv = static_cast<int>(a.d_v), ks = padded(dk);
    extern __shared__ float smem[];
    float* K = smem;                   // [kChunk][padded(dk)]
    float* A = K + kChunk * ks;        // [kChunk][kAStride]
    float* G = A + kChunk * kAStride;  // [kChunk]
    float* B = G + kChunk;             // [kChunk] beta
    ChunkRows keys;
    fetch_rows(keys, a.k + c0 * a.k_stride + key_head_of(a, h) * dk, a.k_stride, L, dk);
    const ChunkDecay decay = fetch_decay(a, c0, L, h);
    if (threadIdx.x < kChunk)
        B[threadIdx.x] = static_cast<int>(threadIdx.x) < L ? a.beta[(c0 + threadIdx.x) * a.n_v_heads + h] : 0.0f;
    store_rows(keys, dk, K, ks);
    chunk_log_decay(decay, L, G);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += blockDim.x) {
        const int i = idx / kChunk, j = idx % kChunk;
        float s = 0.0f;
        if (j < i && i < L) {
            s = row_dot(K + i * ks, K + j * ks, dk) * B[i] * expf(G[i] - G[j]);
        }
        A[i * kAStride + j] = s;
    }
    __syncthreads();
    const int c = threadIdx.x;
    if (c >= dv + dk) return;
    float x[kChunk];  // the column, fully unrolled so that it stays in registers
    if (c < dv) {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) x[i] = i < L ? B[i] * a.v[(c0 + i) * a.v_stride + h * dv + c] : 0.0f;
    } else {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) x[i] = B[i] * expf(G[i]) * K[i * ks + c - dv];  // rows past L: K is 0
    }
#pragma unroll
    for (int i = 1; i < kChunk; ++i) {
        float s[4] = {x[i], 0.0f, 0.0f, 0.0f};  // four chains, not one of length i
#pragma unroll
        for (int j = 0; j < i; ++j) s[j % 4] -= A[i * kAStride + j] * x[j];
        x[i] = (s[0] + s[1]) + (s[2] + s[3]);
    }
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
        if (i >= L) break;
        if (c < dv) u[((c0 + i) * a.n_v_heads + h) * dv + c] = x[i];
        else w[((c0 + i) * a.n_v_heads + h) * dk + c - dv] = x[i];
    }
}

// Grid (value heads, d_v / 32): the only in-order walk. Thread (warp, lane) owns value column
// blockIdx.y*32 + lane and keeps state rows state_row(warp, m) of it in registers (four
// adjacent rows, then the next 32: float4 reads of a key row); a copy of the block's [d_k][32]
// slice in shared memory feeds the products. Turns u's U' into U in place
// and writes the state's part of the output, unscaled, into out.
__device__ __forceinline__ int state_row(int warp, int m) { return 32 * (m / 4) + 4 * warp + m % 4; }

__global__ void __launch_bounds__(kChunkThreads)
    delta_chunk_state_kernel(DeltaRule a, const float* __restrict__ w, float* __restrict__ u) {
    grid_dependency_enter();
    const int64_t h = blockIdx.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int dk = static_cast<int>(a.d_k), dv = static_cast<int>(a.d_v);
    const int col = static_cast<int>(blockIdx.y) * 32 + lane;
    const bool live = col < dv;
    const int64_t hk = key_head_of(a, h);
    extern __shared__ float smem[];
    float* X = smem;              // [kChunk][dk]: W's rows, then the keys
    float* Q = X + kChunk * dk;   // [kChunk][dk]
    float* Ss = Q + kChunk * dk;  // [dk][32]
    float* Us = Ss + dk * 32;     // [kChunk][32]
    float* G = Us + kChunk * 32;  // [kChunk]
    float* E = G + kChunk;        // [kChunk] e^{G_i}
    float* F = E + kChunk;        // [kChunk] e^{G_{L-1} - G_i}
    float* state = a.state + h * dk * dv;
    float S[kStateRows];
#pragma unroll
    for (int m = 0; m < kStateRows; ++m) {
        const int d = state_row(warp, m);
        S[m] = d < dk && live ? state[d * dv + col] : 0.0f;
        if (d < dk) Ss[d * 32 + lane] = S[m];
    }
    // Chunk c0's inputs are fetched into registers while chunk c0 - kChunk is computed.
    constexpr int kRowsPerWarp = kChunk / kStateWarps;
    ChunkRows wr, qr, kr;    // W's rows, queries, keys
    float ur[kRowsPerWarp];  // U' at rows warp + 8r of this thread's column
    ChunkDecay decay;
    auto fetch = [&](int64_t c0, bool keys) {
        const int L = static_cast<int>(min(static_cast<int64_t>(kChunk), a.n_tokens - c0));
        if (keys) {
            fetch_rows(kr, a.k + c0 * a.k_stride + hk * dk, a.k_stride, L, dk);
            return;
        }
        fetch_rows(wr, w + (c0 * a.n_v_heads + h) * dk, a.n_v_heads * dk, L, dk);
        fetch_rows(qr, a.q + c0 * a.q_stride + hk * dk, a.q_stride, L, dk);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const int i = warp + kStateWarps * r;
            ur[r] = i < L && live ? u[((c0 + i) * a.n_v_heads + h) * dv + col] : 0.0f;
        }
        decay = fetch_decay(a, c0, L, h);
    };
    fetch(0, false);
    fetch(0, true);
    for (int64_t c0 = 0; c0 < a.n_tokens; c0 += kChunk) {
        const int L = static_cast<int>(min(static_cast<int64_t>(kChunk), a.n_tokens - c0));
        const bool more = c0 + kChunk < a.n_tokens;
        store_rows(wr, dk, X, dk);
        store_rows(qr, dk, Q, dk);
        chunk_log_decay(decay, L, G, E, F);
        __syncthreads();
        // Rows warp + 8r: U = U' - W S0 and the state's output e^{G_i} S0^T q_i.
        float wu[kRowsPerWarp] = {}, qo[kRowsPerWarp] = {};
        for (int d = 0; d < dk; d += 4) {
            const float s0 = Ss[d * 32 + lane], s1 = Ss[(d + 1) * 32 + lane], s2 = Ss[(d + 2) * 32 + lane],
                        s3 = Ss[(d + 3) * 32 + lane];
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) {
                const int i = warp + kStateWarps * r;
                const float4 x = *reinterpret_cast<const float4*>(X + i * dk + d);
                const float4 y = *reinterpret_cast<const float4*>(Q + i * dk + d);
                wu[r] += x.x * s0 + x.y * s1 + x.z * s2 + x.w * s3;
                qo[r] += y.x * s0 + y.y * s1 + y.z * s2 + y.w * s3;
            }
        }
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const int i = warp + kStateWarps * r;
            if (i >= L) break;
            const float ui = ur[r] - wu[r];
            Us[i * 32 + lane] = ui;
            if (live) {
                const int64_t at = ((c0 + i) * a.n_v_heads + h) * dv + col;
                u[at] = ui;
                a.out[at] = E[i] * qo[r];
            }
        }
        if (more) fetch(c0 + kChunk, false);
        __syncthreads();  // W, Q and Ss read, Us complete
        store_rows(kr, dk, X, dk);
        __syncthreads();
        if (more) fetch(c0 + kChunk, true);
        // S = e^{G_{L-1}} S0 + sum_i e^{G_{L-1} - G_i} k_i u_i^T
        const float total = E[L - 1];
#pragma unroll
        for (int m = 0; m < kStateRows; ++m) S[m] *= total;
        for (int i = 0; i < L; ++i) {
            const float f = F[i] * Us[i * 32 + lane];
#pragma unroll
            for (int m = 0; m < kStateRows; m += 4) {
                const int d = state_row(warp, m);
                if (d >= dk) break;
                const float4 x = *reinterpret_cast<const float4*>(X + i * dk + d);
                S[m] += x.x * f;
                S[m + 1] += x.y * f;
                S[m + 2] += x.z * f;
                S[m + 3] += x.w * f;
            }
        }
#pragma unroll
        for (int m = 0; m < kStateRows; ++m) {
            const int d = state_row(warp, m);
            if (d < dk) Ss[d * 32 + lane] = S[m];
        }
        __syncthreads();  // the next chunk's product reads Ss; X, Q, Us, G, E and F are free again
    }
#pragma unroll
    for (int m = 0; m < kStateRows; ++m) {
        const int d = state_row(warp, m);
        if (d < dk && live) state[d * dv + col] = S[m];
    }
}

// Grid (chunks, value heads): out = scale * (out + sum_{j<=i} e^{G_i-G_j} (q_i . k_j) u_j).
__global__ void __launch_bounds__(kChunkThreads) delta_chunk_output_kernel(DeltaRule a, const float* __restrict__ u) {
    grid_dependency_enter();
    const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kChunk, h = blockIdx.y;
    const int L = static_cast<int>(min(static_cast<int64_t>(kChunk), a.n_tokens - c0));
    const int dk = static_cast<int>(a.d_k), dv = static_cast<int>(a.d_v), ks = padded(dk);
    const int64_t hk = key_head_of(a, h);
    extern __shared__ float smem[];
    const int rows_floats = max(2 * kChunk * ks, kChunk * dv);
    float* Qs = smem;               // [kChunk][padded(dk)]
    float* Ks = Qs + kChunk * ks;   // [kChunk][padded(dk)]
    float* Us = smem;               // [kChunk][dv], over Qs and Ks once M is made
    float* M = smem + rows_floats;  // [kChunk][kAStride]
    float* G = M + kChunk * kAStride;
    ChunkRows values;  // the corrections u_j, fetched with the queries and keys
    fetch_rows(values, u + (c0 * a.n_v_heads + h) * dv, a.n_v_heads * dv, L, dv);
    {
        ChunkRows queries, keys;
        fetch_rows(queries, a.q + c0 * a.q_stride + hk * dk, a.q_stride, L, dk);
        fetch_rows(keys, a.k + c0 * a.k_stride + hk * dk, a.k_stride, L, dk);
        const ChunkDecay decay = fetch_decay(a, c0, L, h);
        store_rows(queries, dk, Qs, ks);
        store_rows(keys, dk, Ks, ks);
        chunk_log_decay(decay, L, G);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += blockDim.x) {
        const int i = idx / kChunk, j = idx % kChunk;
        float s = 0.0f;
        if (j <= i && i < L) {
            s = row_dot(Qs + i * ks, Ks + j * ks, dk) * expf(G[i] - G[j]);
        }
        M[i * kAStride + j] = s;
    }
    __syncthreads();
    store_rows(values, dv, Us, dv);
    __syncthreads();
    for (int idx = threadIdx.x; idx < L * dv; idx += blockDim.x) {
        const int i = idx / dv, c = idx % dv;
        float s0 = 0.0f, s1 = 0.0f;
        int j = 0;
        for (; j + 1 <= i; j += 2) {
            s0 += M[i * kAStride + j] * Us[j * dv + c];
            s1 += M[i * kAStride + j + 1] * Us[(j + 1) * dv + c];
        }
        if (j == i) s0 += M[i * kAStride + j] * Us[j * dv + c];
        const float s = s0 + s1;
        const int64_t at = ((c0 + i) * a.n_v_heads + h) * dv + c;
        a.out[at] = a.scale * (a.out[at] + s);
    }
}

template <typename... Params>
void launch_with_shared(void (*kernel)(Params...), dim3 grid, size_t shared, cudaStream_t s,
                        std::type_identity_t<Params>... args) {
    if (shared > 48 * 1024)
        STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
    launch_kernel(kernel, grid, kChunkThreads, shared, s, args...);
    STRATA_CUDA_LAUNCHED();
}

}  // namespace

void delta_rule(const DeltaRule& a, cudaStream_t s) {
    if (a.n_tokens <= 0) return;
    const dim3 grid(static_cast<unsigned>(a.n_v_heads), blocks_for(a.d_v, 32));
    const int64_t rows = a.d_k / kDeltaWarps;
    if (a.d_k % kDeltaWarps != 0) throw Error("delta rule: d_k " + std::to_string(a.d_k) + " is not a multiple of 4");
    switch (rows) {
        case 1: launch_kernel(delta_rule_kernel<1>, grid, kDeltaWarps * 32, 0, s, a); break;
        case 2: launch_kernel(delta_rule_kernel<2>, grid, kDeltaWarps * 32, 0, s, a); break;
        case 4: launch_kernel(delta_rule_kernel<4>, grid, kDeltaWarps * 32, 0, s, a); break;
        case 8: launch_kernel(delta_rule_kernel<8>, grid, kDeltaWarps * 32, 0, s, a); break;
        case 16: launch_kernel(delta_rule_kernel<16>, grid, kDeltaWarps * 32, 0, s, a); break;
        case 32: launch_kernel(delta_rule_kernel<32>, grid, kDeltaWarps * 32, 0, s, a); break;
        case 64: launch_kernel(delta_rule_kernel<64>, grid, kDeltaWarps * 32, 0, s, a); break;
        default: throw Error("delta rule: no CUDA kernel for d_k " + std::to_string(a.d_k));
    }
    STRATA_CUDA_LAUNCHED();
}

bool delta_rule_chunkable(const DeltaRule& a) {
    // float4 reads of q and k rows (and of the scratch rows, whose sizes these keep aligned)
    const auto aligned = [](const float* p, int64_t stride) {
        return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride % 4 == 0;
    };
    return a.d_k >= 16 && a.d_k <= kChunkMaxDim && a.d_k % 16 == 0 && a.d_v >= 4 && a.d_v <= kChunkMaxDim && a.d_v % 4 == 0 &&
           aligned(a.q, a.q_stride) && aligned(a.k, a.k_stride);
}

size_t delta_rule_chunked_scratch_floats(const DeltaRule& a) {
    return static_cast<size_t>(a.n_tokens * a.n_v_heads * (a.d_k + a.d_v));
}

void delta_rule_chunked(const DeltaRule& a, float* scratch, cudaStream_t s) {
    if (a.n_tokens <= 0) return;
    if (!delta_rule_chunkable(a))
        throw Error("delta rule: the chunked CUDA form takes d_k a multiple of 16, d_v of 4, both up to " +
                    std::to_string(kChunkMaxDim) + " and 16-byte aligned q/k rows; not d_k " + std::to_string(a.d_k) + ", d_v " +
                    std::to_string(a.d_v));
    float* w = scratch;                                     // [n_tokens][n_v][d_k]
    float* u = scratch + a.n_tokens * a.n_v_heads * a.d_k;  // [n_tokens][n_v][d_v]
    const auto chunks = static_cast<unsigned>((a.n_tokens + kChunk - 1) / kChunk);
    const auto heads = static_cast<unsigned>(a.n_v_heads);
    const size_t f = sizeof(float);
    const size_t ks = static_cast<size_t>(padded(static_cast<int>(a.d_k))), dk = static_cast<size_t>(a.d_k),
                 dv = static_cast<size_t>(a.d_v);
    const size_t solve_shared = f * (kChunk * ks + kChunk * kAStride + 2 * kChunk);
    const size_t state_shared = f * (2 * kChunk * dk + dk * 32 + kChunk * 32 + 3 * kChunk);
    const size_t output_shared = f * (std::max(2 * kChunk * ks, kChunk * dv) + kChunk * kAStride + kChunk);
    launch_with_shared(delta_chunk_solve_kernel, dim3(chunks, heads), solve_shared, s, a, w, u);
    launch_with_shared(delta_chunk_state_kernel, dim3(heads, blocks_for(a.d_v, 32)), state_shared, s, a, w, u);
    launch_with_shared(delta_chunk_output_kernel, dim3(chunks, heads), output_shared, s, a, u);
}

}  // namespace strata::cuda
