// Prefill attention on tensor cores, FlashAttention-2 style: mma.sync m16n8k16 with f16 inputs
// and f32 accumulation. A block owns one KV head and a tile of query tokens that share a KV view;
// its 64 query rows are (token, query head of the group) pairs, so every key and value row it
// stages in shared memory serves the whole group. Four warps own 16 rows each. Scores stay in
// registers: the accumulator layout of Q K^T is, packed to f16 pairs, the A operand of P V.
//
// mma.sync m16n8k16 fragments (g = lane / 4, c = lane % 4):
//   A (16 x 16, row-major): a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..), a3 = (g+8, 2c+8..)
//   B (16 x 8, k x n):      b0 = (k 2c..2c+1, n g), b1 = (k 2c+8..2c+9, n g)
//   C (16 x 8, f32):        c0, c1 = (g, 2c..2c+1), c2, c3 = (g+8, 2c..2c+1)
#include <cuda_fp16.h>

#include "cuda/cuda_common.cuh"

namespace strata::cuda {

namespace {

constexpr int kFaWarps = 4;
constexpr int kFaRows = 16 * kFaWarps;  // query rows per block
constexpr int kPad = 8;                 // halves after each shared row: fragment loads hit 32 banks

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 f16 matrices, transposed: lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __half* row) {
    const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ uint32_t half_pair(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t shared_pair(const __half* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ void store_halves(__half* dst, float4 v) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(half_pair(v.x, v.y), half_pair(v.z, v.w));
}

// D: head dim (keys and values); BK: keys staged per step.
template <int D, int BK>
__global__ void __launch_bounds__(kFaWarps * 32) attention_mma_kernel(Attention a, const AttnTile* tiles, int64_t n_tiles) {
    grid_dependency_enter();
    constexpr int S = D + kPad;  // shared row stride, halves
    extern __shared__ __align__(16) unsigned char fa_smem[];
    __half* qs = reinterpret_cast<__half*>(fa_smem);  // [kFaRows][S]
    __half* ks = qs + kFaRows * S;                    // [BK][S]
    __half* vs = ks + BK * S;                         // [BK][S]

    const int hk = blockIdx.x;
    const AttnTile tile = tiles[n_tiles - 1 - blockIdx.y];  // later tiles (more keys) start first
    const int group = static_cast<int>(a.n_head / a.n_head_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const TokenKv kv = a.tokens[tile.t0];
    const int rows = tile.n * group;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    // Query rows r = token * group + head of the group: q and out row of batch token t0 + r / group,
    // head hk * group + r % group.
    const auto head_row = [&](int r) {
        return (static_cast<int64_t>(tile.t0 + r / group) * a.n_head + static_cast<int64_t>(hk) * group + r % group) * D;
    };
    for (int i = threadIdx.x; i < kFaRows * (D / 4); i += blockDim.x) {
        const int r = i / (D / 4), d = (i % (D / 4)) * 4;
        store_halves(qs + r * S + d, r < rows ? *reinterpret_cast<const float4*>(a.q + head_row(r) + d) : zero);
    }
    // The last position each of this thread's two rows sees (padding rows: the tile's, finite
    // and never written out).
    int row_pos[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + g + 8 * h;
        row_pos[h] = r < rows ? a.tokens[tile.t0 + r / group].pos : tile.max_pos;
    }

    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float scale = a.scale * 1.4426950408889634f;  // scores in log2 units, for exp2f
    const int64_t kv_row = a.n_head_kv * D;
    const int n_keys = tile.max_pos + 1;
    const __half* qw = qs + warp * 16 * S;

    for (int j0 = 0; j0 < n_keys; j0 += BK) {
        __syncthreads();  // the previous step's keys and values are read (the first time: q is stored)
        for (int i = threadIdx.x; i < BK * (D / 4); i += blockDim.x) {
            const int j = i / (D / 4), d = (i % (D / 4)) * 4, p = j0 + j;
            const int64_t row =
                p < n_keys ? static_cast<int64_t>(kv.blocks[p / kv.block_size]) * kv.block_size + p % kv.block_size : 0;
            const int64_t at = row * kv_row + static_cast<int64_t>(hk) * D + d;
            if (a.kv_half) {                     // f16 cache: four values copied as they are
                uint2 kx = {0, 0}, vx = {0, 0};  // past the last key: zeros, so no stale value meets p = 0
                if (p < n_keys) {
                    kx = *reinterpret_cast<const uint2*>(static_cast<const __half*>(a.k) + kv.k_off + at);
                    vx = *reinterpret_cast<const uint2*>(static_cast<const __half*>(a.v) + kv.v_off + at);
                }
                *reinterpret_cast<uint2*>(ks + j * S + d) = kx;
                *reinterpret_cast<uint2*>(vs + j * S + d) = vx;
            } else {
                float4 kx = zero, vx = zero;
                if (p < n_keys) {
                    kx = *reinterpret_cast<const float4*>(static_cast<const float*>(a.k) + kv.k_off + at);
                    vx = *reinterpret_cast<const float4*>(static_cast<const float*>(a.v) + kv.v_off + at);
                }
                store_halves(ks + j * S + d, kx);
                store_halves(vs + j * S + d, vx);
            }
        }
        __syncthreads();

        // s[n]: keys j0 + 8n + 2c (+1) of rows g and g + 8.
        float s[BK / 8][4];
#pragma unroll
        for (int n = 0; n < BK / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const uint32_t qa[4] = {shared_pair(qw + g * S + kk * 16 + 2 * c), shared_pair(qw + (g + 8) * S + kk * 16 + 2 * c),
                                    shared_pair(qw + g * S + kk * 16 + 8 + 2 * c),
                                    shared_pair(qw + (g + 8) * S + kk * 16 + 8 + 2 * c)};
#pragma unroll
            for (int n = 0; n < BK / 8; ++n) {
                const __half* kr = ks + (n * 8 + g) * S + kk * 16 + 2 * c;
                mma_f16(s[n], qa, shared_pair(kr), shared_pair(kr + 8));
            }
        }

        // Causal mask and online softmax; a row's values sit on the four lanes of one g.
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < BK / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = j0 + n * 8 + 2 * c + (e & 1);
                const float v = key <= row_pos[e >> 1] ? s[n][e] * scale : -INFINITY;
                s[n][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float base[2], corr[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            const float mn = fmaxf(m[h], mx[h]);
            base[h] = mn == -INFINITY ? 0.0f : mn;  // a row with nothing visible yet: all terms 0
            corr[h] = exp2f(m[h] - base[h]);
            m[h] = mn;
            l[h] *= corr[h];
        }
#pragma unroll
        for (int n = 0; n < BK / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float p = exp2f(s[n][e] - base[e >> 1]);
                s[n][e] = p;
                l[e >> 1] += p;
            }
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }

        // O += P V over 16 keys at a time; V's B fragments by transposed ldmatrix from [key][dim].
        const int mi = lane >> 3, mr = lane & 7;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const uint32_t pa[4] = {half_pair(s[2 * kk][0], s[2 * kk][1]), half_pair(s[2 * kk][2], s[2 * kk][3]),
                                    half_pair(s[2 * kk + 1][0], s[2 * kk + 1][1]), half_pair(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            const __half* vrow = vs + (kk * 16 + (mi & 1) * 8 + mr) * S + (mi >> 1) * 8;
#pragma unroll
            for (int dn = 0; dn < D / 16; ++dn) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, vrow + dn * 16);
                mma_f16(o[2 * dn], pa, b[0], b[1]);
                mma_f16(o[2 * dn + 1], pa, b[2], b[3]);
            }
        }
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const int r = warp * 16 + g + 8 * h;
        if (r >= rows) continue;
        float* dst = a.out + head_row(r);
        const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<float2*>(dst + n * 8 + 2 * c) = make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    }
}

template <int D, int BK>
void launch_mma(const Attention& a, const AttnTile* tiles, int64_t n_tiles, cudaStream_t s) {
    constexpr size_t shared = sizeof(__half) * static_cast<size_t>(kFaRows + 2 * BK) * (D + kPad);
    if (shared > 48 * 1024)
        STRATA_CUDA_CHECK(cudaFuncSetAttribute(attention_mma_kernel<D, BK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(shared)));
    const dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(n_tiles));
    launch_kernel(attention_mma_kernel<D, BK>, grid, kFaWarps * 32, shared, s, a, tiles, n_tiles);
    STRATA_CUDA_LAUNCHED();
}

}  // namespace

int attention_tile_tokens(const Attention& a) {
    const int64_t d = a.head_dim_k;
    if (a.head_dim_v != d || (d != 64 && d != 128 && d != 256)) return 0;
    if (a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0) return 0;
    const int64_t group = a.n_head / a.n_head_kv;
    if (group > kFaRows) return 0;
    // float4 reads of q, k and v (their pools and rows are multiples of 4 floats when d is).
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(a.q) || !aligned(a.k) || !aligned(a.v) || reinterpret_cast<uintptr_t>(a.out) % 8 != 0) return 0;
    return static_cast<int>(kFaRows / group);
}

void attention_tiled(const Attention& a, const AttnTile* tiles, int64_t n_tiles, cudaStream_t s) {
    if (n_tiles <= 0) return;
    switch (a.head_dim_k) {
        case 64: launch_mma<64, 64>(a, tiles, n_tiles, s); break;
        case 128: launch_mma<128, 64>(a, tiles, n_tiles, s); break;
        case 256: launch_mma<256, 32>(a, tiles, n_tiles, s); break;
        default: throw Error("CUDA attention: no tensor-core kernel for head_dim " + std::to_string(a.head_dim_k));
    }
}

}  // namespace strata::cuda
