// Attention over the paged f32 KV cache, flash-decoding style: a block owns one query token and
// one KV head (all the query heads of that group read each key and value row once), its
// kWarps warps take positions in turn with an online softmax each, and long caches are split over
// several blocks whose partial results a second kernel combines.
#include <bit>

#include "cuda/cuda_common.cuh"

namespace strata::cuda {

namespace {

// Warps per block: at depth 4,096 (30B-A3B, H200) 4 warps gave 232 t/s, 8 gave 274 and 16 gave
// 260; at depth 512 307 / 335 / 341 (each warp walks its positions one after the other; docs/
// BENCHMARKS.md, sitting 7). 4 where 8 warps' merge area would not fit a block's shared memory
// (16 query heads per KV head at head_dim 256 on sm_86/sm_89: 132 KB against 99 KB).
constexpr int kWarps = 8, kFallbackWarps = 4;
constexpr int kMaxGroup = 16;     // query heads per KV head
constexpr int kMaxDimPerLane = 8;  // head_dim <= 256
constexpr int64_t kSplitMin = 16;  // positions a split covers at least

// partial layout per (token, head, split): m, l, then head_dim_v accumulators.
// DPL: head dims per lane (head_dim <= 32*DPL); G: query heads per KV head at most.
// KvT: the pools' value type (float, or __half for f16 caches); W: warps in the block.
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

    // Merge the warps: each writes its (m, l, acc) per head to shared memory, then warp w merges
    // heads w, w + W, ...
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

int64_t attention_splits(const Attention& a, int n_sm) {
    // Enough blocks to fill the GPU twice over, but each split at least kSplitMin positions: a
    // decode step has a block per KV head (4 for Qwen3-30B-A3B) and each warp walks its positions
    // one after the other (splits of at least 64 left 36 blocks for 132 SMs at 512 positions, and
    // decode there ran 18 % slower than at 16 positions). More splits than twice the SMs cost
    // more in combine_kernel than they save (4x at 4,096 positions: 158 against 174 t/s).
    const int64_t blocks = a.n_tokens * a.n_head_kv;
    const int64_t want = (2 * static_cast<int64_t>(n_sm) + blocks - 1) / blocks;
    // A power of two: the count is part of a recorded decode graph's signature, and a count
    // that moved every 16 positions would re-record the graph that often.
    const auto most = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>((a.max_pos + kSplitMin) / kSplitMin)));
    return std::max<int64_t>(1, std::min(want, most));
}

size_t attention_partial_floats(const Attention& a, int64_t splits) {
    return splits <= 1 ? 0 : static_cast<size_t>(a.n_tokens * a.n_head * splits * (2 + a.head_dim_v));
}

void attention(const Attention& a, int64_t splits, int max_shared, cudaStream_t s) {
    if (a.n_tokens <= 0) return;
    const int64_t group = a.n_head / a.n_head_kv;
    const int64_t dmax = std::max(a.head_dim_k, a.head_dim_v);
    if (a.n_head % a.n_head_kv != 0 || group > kMaxGroup)
        throw Error("CUDA attention: " + std::to_string(a.n_head) + " query heads over " + std::to_string(a.n_head_kv) +
                    " KV heads (at most " + std::to_string(kMaxGroup) + " per KV head)");
    if (dmax > 32 * kMaxDimPerLane) throw Error("CUDA attention: head_dim " + std::to_string(dmax) + " is over 256");
    if (a.q8.q != nullptr && a.head_dim_v % 32 != 0) throw Error("CUDA attention: 8-bit output needs head_dim_v a multiple of 32");
    // Shared memory: q of the group, then each warp's (m, l, accumulators) per head to merge.
    const auto shared_for = [&](int warps) {
        return sizeof(float) * static_cast<size_t>(std::max(group * a.head_dim_k, 2 * warps * group + warps * group * a.head_dim_v));
    };
    const int warps = shared_for(kWarps) <= static_cast<size_t>(max_shared) ? kWarps : kFallbackWarps;
    const size_t shared = shared_for(warps);
    const dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(splits));
    const int dpl = static_cast<int>((dmax + 31) / 32);
    auto launch_typed = [&]<int DPL, int G, typename KvT, int W>() {
        if (shared > 48 * 1024)
            STRATA_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<DPL, G, KvT, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(shared)));
        launch_kernel(attention_kernel<DPL, G, KvT, W>, grid, W * 32, shared, s, a, splits);
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
