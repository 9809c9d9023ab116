// Attention over the paged KV cache (f32 or f16 values), flash-decoding style: a block owns one
// query token and one KV head (all the query heads of that group read each key and value row
// once), its kWarps warps take positions in turn with an online softmax each (a position at a
// time, or 8 for long splits), and long caches are split over several blocks whose partial
// results a second kernel combines.
#include <bit>

#include "cuda/cuda_common.cuh"

namespace strata::cuda {

namespace {

// Warps per block: at depth 4,096 (30B-A3B, H200) 4 warps gave 232 t/s, 8 gave 274 and 16 gave
// 260; at depth 512 307 / 335 / 341 (each warp walks its positions one after the other; docs/
// BENCHMARKS.md, sitting 7). 4 where 8 warps' merge area would not fit a block's shared memory
// (16 query heads per KV head at head_dim 256 on sm_86/sm_89: 132 KB against 99 KB).
constexpr int kWarps = 8, kFallbackWarps = 4;
constexpr int kMaxGroup = 16;      // query heads per KV head
constexpr int kMaxDimPerLane = 8;  // head_dim <= 256

// partial layout per (token, head, split): m, l, then head_dim_v accumulators.
// DPL: head dims per lane (head_dim <= 32*DPL); G: query heads per KV head at most.
// KvT: the pools' value type (float, or __half for f16 caches); W: warps in the block.
// Two forms of the split's walk, chosen by the positions a split covers (attention's octet_min).

// The end of both kernels: each warp's (m, l, acc) per head into shared memory (smem, free by
// now), then warp w merges heads w, w + W, ... and writes the output (one split) or the split's
// partial result.
template <int DPL, int G, int W>
__device__ __forceinline__ void merge_warps(const Attention& a, int64_t splits, float* smem, const float (&m)[G],
                                            const float (&l)[G], const float (&acc)[G][DPL]) {
    const int hk = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int group = static_cast<int>(a.n_head / a.n_head_kv);
    const int dv = static_cast<int>(a.head_dim_v);
    __syncthreads();
    float* wm = smem;              // [W][group]
    float* wl = wm + W * group;    // [W][group]
    float* wacc = wl + W * group;  // [W][group][dv]
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (g >= group) break;
        if (lane == 0) wm[warp * group + g] = m[g], wl[warp * group + g] = l[g];
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
            const int d = lane + 32 * i;
            if (d < dv) wacc[(warp * group + g) * dv + d] = acc[g][i];
        }
    }
    __syncthreads();
    for (int g = warp; g < group; g += W) {
        float mm = -INFINITY;
        for (int w = 0; w < W; ++w) mm = fmaxf(mm, wm[w * group + g]);
        float ll = 0.0f;
        float sc[W];
        for (int w = 0; w < W; ++w) {
            sc[w] = wm[w * group + g] == -INFINITY ? 0.0f : expf(wm[w * group + g] - mm);
            ll += wl[w * group + g] * sc[w];
        }
        const int64_t h = static_cast<int64_t>(hk) * group + g;
        for (int d = lane; d < dv; d += 32) {
            float o = 0.0f;
            for (int w = 0; w < W; ++w) o += wacc[(w * group + g) * dv + d] * sc[w];
            if (splits == 1) {
                const int64_t at = (static_cast<int64_t>(t) * a.n_head + h) * dv + d;
                const float r = ll > 0.0f ? o / ll : 0.0f;
                a.out[at] = r;
                if (a.q8.q != nullptr) store_q8_lane(r, at, a.q8);
            } else {
                float* part = a.partial + ((static_cast<int64_t>(t) * a.n_head + h) * splits + split) * (2 + dv);
                if (d == lane && lane == 0) part[0] = mm, part[1] = ll;
                part[2 + d] = o;
            }
        }
    }
}

// Short splits: a warp takes a position at a time, lanes over dimensions, and reduces each head's
// score over the warp (8 chains of 5 shuffles a position for 8 heads a group: the bound at depth,
// but with few positions a split the other form leaves most warps idle).
template <int DPL, int G, typename KvT, int W>
__global__ void __launch_bounds__(W * 32) attention_kernel(Attention a, int64_t splits) {
    grid_dependency_enter();
    const int hk = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int group = static_cast<int>(a.n_head / a.n_head_kv);
    const int dk = static_cast<int>(a.head_dim_k), dv = static_cast<int>(a.head_dim_v);
    const TokenKv kv = a.tokens[t];
    extern __shared__ float smem[];
    float* qs = smem;  // [group][dk]
    for (int i = threadIdx.x; i < group * dk; i += blockDim.x)
        qs[i] = a.q[(static_cast<int64_t>(t) * a.n_head + static_cast<int64_t>(hk) * group) * dk + i];
    __syncthreads();

    float m[G], l[G], acc[G][DPL];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[g][i] = 0.0f;
    }
    const int64_t k_row = a.n_head_kv * dk, v_row = a.n_head_kv * dv;
    // Each token splits its own 0..pos range (no host-side length: a captured graph stays valid
    // as positions advance).
    const int64_t split_len = (static_cast<int64_t>(kv.pos) + splits) / splits;
    const int64_t begin = split * split_len, end = min(static_cast<int64_t>(kv.pos) + 1, begin + split_len);
    for (int64_t p = begin + warp; p < end; p += W) {
        const int64_t row = static_cast<int64_t>(kv.blocks[p / kv.block_size]) * kv.block_size + p % kv.block_size;
        const KvT* kr = static_cast<const KvT*>(a.k) + kv.k_off + row * k_row + static_cast<int64_t>(hk) * dk;
        const KvT* vr = static_cast<const KvT*>(a.v) + kv.v_off + row * v_row + static_cast<int64_t>(hk) * dv;
        float kreg[DPL], vreg[DPL];
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
            const int d = lane + 32 * i;
            kreg[i] = d < dk ? kv_value(kr[d]) : 0.0f;
            vreg[i] = d < dv ? kv_value(vr[d]) : 0.0f;
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g >= group) break;
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                const int d = lane + 32 * i;
                if (d < dk) s += qs[g * dk + d] * kreg[i];
            }
            s = warp_sum(s) * a.scale;
            const float m_new = fmaxf(m[g], s);
            const float corr = expf(m[g] - m_new), e = expf(s - m_new);
            l[g] = l[g] * corr + e;
#pragma unroll
            for (int i = 0; i < DPL; ++i) acc[g][i] = acc[g][i] * corr + e * vreg[i];
            m[g] = m_new;
        }
    }
    merge_warps<DPL, G, W>(a, splits, smem, m, l, acc);
}

// Eight values of a key row from d (8-value aligned) into f32: one 16-byte load where the row
// allows it (f16: eight halves; f32: two float4), else one value at a time. Plain loads, not the
// read-only path: under programmatic dependent launch the cache is written by the kernel before
// until this one's wait.
__device__ __forceinline__ void load8(const __half* r, int d, float* out) {
    if ((reinterpret_cast<uintptr_t>(r + d) & 15) == 0) {
        const uint4 u = *reinterpret_cast<const uint4*>(r + d);
        const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __half22float2(h[j]);
            out[2 * j] = f.x;
            out[2 * j + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) out[j] = __half2float(r[d + j]);
    }
}
__device__ __forceinline__ void load8(const float* r, int d, float* out) {
    if ((reinterpret_cast<uintptr_t>(r + d) & 15) == 0) {
        const float4 x = *reinterpret_cast<const float4*>(r + d), y = *reinterpret_cast<const float4*>(r + d + 4);
        out[0] = x.x, out[1] = x.y, out[2] = x.z, out[3] = x.w, out[4] = y.x, out[5] = y.y, out[6] = y.z, out[7] = y.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) out[j] = r[d + j];
    }
}

// Long splits: a warp takes 8 positions at a time, 4 lanes each. A lane dots every 4th 8-value
// step of its position's key row with each query head of the group (q from shared memory,
// broadcast), two shuffles join the 4 parts, and each head's maximum and sum over the 8
// positions take three more; the values are then summed with lanes over dimensions. On the H200
// (30B-A3B, every split in this form): depth 4,096 280 -> 305 t/s, but depth 512 344 -> 326 and
// 0 365 -> 336, where splits of ~16 positions leave most of a block's warps idle. (A lane per
// position, 32 a warp, was slower still at every depth: one warp of a block busy, its loads and
// reductions one after the other; ncu at depth ~600: 14 -> 33 us a launch.)
template <int DPL, int G, typename KvT, int W>
__global__ void __launch_bounds__(W * 32) attention_octet_kernel(Attention a, int64_t splits) {
    grid_dependency_enter();
    const int hk = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int group = static_cast<int>(a.n_head / a.n_head_kv);
    const int dk = static_cast<int>(a.head_dim_k), dv = static_cast<int>(a.head_dim_v);
    const int dq = (dk + 7) & ~7;  // q rows padded to whole 8-value steps
    const TokenKv kv = a.tokens[t];
    extern __shared__ float smem[];
    float* qs = smem;               // [group][dq], scaled
    float* ps = smem + group * dq;  // [W][8][G]: each warp's weights of its 8 positions
    for (int i = threadIdx.x; i < group * dq; i += blockDim.x) {
        const int g = i / dq, d = i % dq;
        qs[i] =
            d < dk ? a.q[(static_cast<int64_t>(t) * a.n_head + static_cast<int64_t>(hk) * group + g) * dk + d] * a.scale : 0.0f;
    }
    __syncthreads();

    float m[G], l[G], acc[G][DPL];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[g][i] = 0.0f;
    }
    const int64_t k_row = a.n_head_kv * dk, v_row = a.n_head_kv * dv;
    // Each token splits its own 0..pos range (no host-side length: a captured graph stays valid
    // as positions advance).
    const int64_t split_len = (static_cast<int64_t>(kv.pos) + splits) / splits;
    const int64_t begin = split * split_len, end = min(static_cast<int64_t>(kv.pos) + 1, begin + split_len);
    const KvT* kbase = static_cast<const KvT*>(a.k) + kv.k_off + static_cast<int64_t>(hk) * dk;
    const KvT* vbase = static_cast<const KvT*>(a.v) + kv.v_off + static_cast<int64_t>(hk) * dv;
    const int slot = lane >> 2, part = lane & 3;
    float* pw = ps + warp * 8 * G;
    for (int64_t p0 = begin + warp * 8; p0 < end; p0 += W * 8) {
        const int64_t p = p0 + slot;
        const bool valid = p < end;  // slot 0 always is
        const int64_t row = valid ? static_cast<int64_t>(kv.blocks[p / kv.block_size]) * kv.block_size + p % kv.block_size : 0;
        float s[G];
#pragma unroll
        for (int g = 0; g < G; ++g) s[g] = 0.0f;
        if (valid) {
            const KvT* kr = kbase + row * k_row;
            float k8[DPL][8];  // steps part, part + 4, ... of the row, all loads in flight together
#pragma unroll
            for (int r = 0; r < DPL; ++r) {
                const int d = 8 * (part + 4 * r);
                if (d + 8 <= dk) {
                    load8(kr, d, k8[r]);
                } else {  // past the row, or a head_dim that is not a multiple of 8
#pragma unroll
                    for (int j = 0; j < 8; ++j) k8[r][j] = d + j < dk ? kv_value(kr[d + j]) : 0.0f;
                }
            }
#pragma unroll
            for (int r = 0; r < DPL; ++r) {
                const int d = 8 * (part + 4 * r);
                if (d >= dq) break;
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    if (g >= group) break;
                    const float4 qa = *reinterpret_cast<const float4*>(qs + g * dq + d);
                    const float4 qb = *reinterpret_cast<const float4*>(qs + g * dq + d + 4);
                    s[g] += qa.x * k8[r][0] + qa.y * k8[r][1] + qa.z * k8[r][2] + qa.w * k8[r][3] + qb.x * k8[r][4] +
                            qb.y * k8[r][5] + qb.z * k8[r][6] + qb.w * k8[r][7];
                }
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g >= group) break;
            float sg = s[g];
            sg += __shfl_xor_sync(0xffffffffu, sg, 1);
            sg += __shfl_xor_sync(0xffffffffu, sg, 2);
            if (!valid) sg = -INFINITY;
            float mx = sg;  // over the 8 positions (each held by 4 lanes)
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float m_new = fmaxf(m[g], mx);  // finite: slot 0's position is valid
            const float corr = expf(m[g] - m_new), e = valid ? expf(sg - m_new) : 0.0f;
            float es = e;
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) es += __shfl_xor_sync(0xffffffffu, es, o);
            l[g] = l[g] * corr + es;
#pragma unroll
            for (int i = 0; i < DPL; ++i) acc[g][i] *= corr;
            m[g] = m_new;
            if (part == 0) pw[slot * G + g] = e;
        }
        __syncwarp();
        const int n = static_cast<int>(min(static_cast<int64_t>(8), end - p0));
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (j >= n) break;  // warp-uniform
            const int64_t rj = __shfl_sync(0xffffffffu, row, 4 * j);
            const KvT* vr = vbase + rj * v_row;
            float vreg[DPL];
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                const int d = lane + 32 * i;
                vreg[i] = d < dv ? kv_value(vr[d]) : 0.0f;
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (g >= group) break;
                const float e = pw[j * G + g];
#pragma unroll
                for (int i = 0; i < DPL; ++i) acc[g][i] += e * vreg[i];
            }
        }
        __syncwarp();  // the weights are read before the next round writes them
    }
    merge_warps<DPL, G, W>(a, splits, smem, m, l, acc);
}

// One block per (token, head): the splits' maxima and weights reduced by all threads at once
// (each split's weight e^{m_s - m} computed once, into shared memory), then each output
// dimension summed over the splits. (Each thread walking all splits for the maximum, the sum
// and its dimensions took 10.8 us a layer at depth 4,096; decode there 203 -> 228 t/s.)
constexpr int kCombineThreads = 128;
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(Attention a, int64_t splits) {
    grid_dependency_enter();
    const int64_t th = blockIdx.x;  // token * n_head + head
    const int dv = static_cast<int>(a.head_dim_v);
    const int64_t stride = 2 + dv;
    const float* part = a.partial + th * splits * stride;
    extern __shared__ float weight[];  // [splits], then [kCombineThreads / 32] for the reductions
    float* red = weight + splits;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    float m = -INFINITY;
    for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) m = fmaxf(m, part[s * stride]);
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    float mm = red[0];
    for (int w = 1; w < kCombineThreads / 32; ++w) mm = fmaxf(mm, red[w]);
    float l = 0.0f;
    for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) {
        const float ms = part[s * stride];
        const float e = ms == -INFINITY ? 0.0f : expf(ms - mm);
        weight[s] = e;
        l += part[s * stride + 1] * e;
    }
    l = warp_sum(l);
    __syncthreads();  // every thread has read red's maxima
    if (lane == 0) red[warp] = l;
    __syncthreads();
    float ll = 0.0f;
    for (int w = 0; w < kCombineThreads / 32; ++w) ll += red[w];
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        float o = 0.0f;
        for (int64_t s = 0; s < splits; ++s) o += part[s * stride + 2 + d] * weight[s];
        const float r = ll > 0.0f ? o / ll : 0.0f;
        a.out[th * dv + d] = r;
        if (a.q8.q != nullptr) store_q8_lane(r, th * dv + d, a.q8);  // dv % 32 == 0: whole warps
    }
}

}  // namespace

int64_t attention_splits(const Attention& a, int n_sm, int64_t split_min) {
    // Enough blocks to fill the GPU twice over, but each split at least split_min positions: a
    // decode step has a block per KV head (4 for Qwen3-30B-A3B) and each warp walks its positions
    // one after the other (splits of at least 64 left 36 blocks for 132 SMs at 512 positions, and
    // decode there ran 18 % slower than at 16 positions). More splits than twice the SMs cost
    // more in combine_kernel than they save (4x at 4,096 positions: 158 against 174 t/s).
    // split_min is for one token; a batch's splits are longer, up to 16 positions from 4 tokens
    // on (30B-A3B: splits of 4 positions took batch-1 decode from 370 to 382 t/s, but batch 16
    // from 1,480 to 1,440).
    const int64_t blocks = a.n_tokens * a.n_head_kv;
    const int64_t want = (2 * static_cast<int64_t>(n_sm) + blocks - 1) / blocks;
    const int64_t min_len = std::min(split_min * a.n_tokens, std::max<int64_t>(split_min, 16));
    // A power of two: the count is part of a recorded decode graph's signature, and a count
    // that moved every 16 positions would re-record the graph that often.
    const auto most = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>((a.max_pos + min_len) / min_len)));
    return std::max<int64_t>(1, std::min(want, most));
}

size_t attention_partial_floats(const Attention& a, int64_t splits) {
    return splits <= 1 ? 0 : static_cast<size_t>(a.n_tokens * a.n_head * splits * (2 + a.head_dim_v));
}

bool attention_octets(const Attention& a, int64_t splits, int64_t octet_min) {
    return (static_cast<int64_t>(a.max_pos) + 1) / splits >= octet_min;
}

void attention(const Attention& a, int64_t splits, int max_shared, int64_t octet_min, cudaStream_t s) {
    if (a.n_tokens <= 0) return;
    const int64_t group = a.n_head / a.n_head_kv;
    const int64_t dmax = std::max(a.head_dim_k, a.head_dim_v);
    if (a.n_head % a.n_head_kv != 0 || group > kMaxGroup)
        throw Error("CUDA attention: " + std::to_string(a.n_head) + " query heads over " + std::to_string(a.n_head_kv) +
                    " KV heads (at most " + std::to_string(kMaxGroup) + " per KV head)");
    if (dmax > 32 * kMaxDimPerLane) throw Error("CUDA attention: head_dim " + std::to_string(dmax) + " is over 256");
    if (a.q8.q != nullptr && a.head_dim_v % 32 != 0)
        throw Error("CUDA attention: 8-bit output needs head_dim_v a multiple of 32");
    const bool octets = attention_octets(a, splits, octet_min);
    // Shared memory: q of the group (the octet form: rows padded to 8 values, and each warp's
    // weights for its 8 positions, G a position: the group rounded up to a power of two), then
    // each warp's (m, l, accumulators) per head to merge.
    const auto g_pow2 = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(group)));
    const auto shared_for = [&](int warps) {
        const int64_t walk = octets ? group * ((a.head_dim_k + 7) / 8 * 8) + warps * 8 * g_pow2 : group * a.head_dim_k;
        return sizeof(float) * static_cast<size_t>(std::max(walk, 2 * warps * group + warps * group * a.head_dim_v));
    };
    const int warps = shared_for(kWarps) <= static_cast<size_t>(max_shared) ? kWarps : kFallbackWarps;
    const size_t shared = shared_for(warps);
    const dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(splits));
    const int dpl = static_cast<int>((dmax + 31) / 32);
    auto launch_typed = [&]<int DPL, int G, typename KvT, int W>() {
        const auto kernel = octets ? attention_octet_kernel<DPL, G, KvT, W> : attention_kernel<DPL, G, KvT, W>;
        if (shared > 48 * 1024)
            STRATA_CUDA_CHECK(
                cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
        launch_kernel(kernel, grid, W * 32, shared, s, a, splits);
    };
    auto launch = [&]<int DPL, int G>() {
        if (warps == kWarps) {
            if (a.kv_half) launch_typed.template operator()<DPL, G, __half, kWarps>();
            else launch_typed.template operator()<DPL, G, float, kWarps>();
        } else {
            if (a.kv_half) launch_typed.template operator()<DPL, G, __half, kFallbackWarps>();
            else launch_typed.template operator()<DPL, G, float, kFallbackWarps>();
        }
    };
    auto with_group = [&]<int DPL>() {
        if (group <= 1) launch.template operator()<DPL, 1>();
        else if (group <= 2) launch.template operator()<DPL, 2>();
        else if (group <= 4) launch.template operator()<DPL, 4>();
        else if (group <= 8) launch.template operator()<DPL, 8>();
        else launch.template operator()<DPL, 16>();
    };
    if (dpl <= 1) with_group.template operator()<1>();
    else if (dpl <= 2) with_group.template operator()<2>();
    else if (dpl <= 4) with_group.template operator()<4>();
    else with_group.template operator()<8>();
    STRATA_CUDA_LAUNCHED();
    if (splits > 1) {
        launch_kernel(combine_kernel, static_cast<unsigned>(a.n_tokens * a.n_head), kCombineThreads,
                      sizeof(float) * static_cast<size_t>(splits + kCombineThreads / 32), s, a, splits);
        STRATA_CUDA_LAUNCHED();
    }
}

}  // namespace strata::cuda
