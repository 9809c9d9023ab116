// Quantised weight products on the GPU: the decode GEMV (one warp per weight row, every input
// row of a small batch dotted with each dequantised group of eight), the experts of a few tokens
// read through their routed ids without a host round trip, and dequantisation to dense rows for
// the cuBLAS path of large batches.
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_quant.cuh"
#include "quant/iq_tables.h"

namespace strata::cuda {

void init_quant_tables() {
    STRATA_CUDA_CHECK(cudaMemcpyToSymbol(g_iq2xxs_grid, quant::kIq2XxsGrid, sizeof(quant::kIq2XxsGrid)));
    STRATA_CUDA_CHECK(cudaMemcpyToSymbol(g_iq2xs_grid, quant::kIq2XsGrid, sizeof(quant::kIq2XsGrid)));
    STRATA_CUDA_CHECK(cudaMemcpyToSymbol(g_iq2s_grid, quant::kIq2SGrid, sizeof(quant::kIq2SGrid)));
    STRATA_CUDA_CHECK(cudaMemcpyToSymbol(g_iq3xxs_grid, quant::kIq3XxsGrid, sizeof(quant::kIq3XxsGrid)));
    STRATA_CUDA_CHECK(cudaMemcpyToSymbol(g_iq3s_grid, quant::kIq3SGrid, sizeof(quant::kIq3SGrid)));
    STRATA_CUDA_CHECK(cudaMemcpyToSymbol(g_iq_sign_masks, quant::kIqSignMasks.data(), quant::kIqSignMasks.size()));
    STRATA_CUDA_CHECK(cudaMemcpyToSymbol(c_iq4nl_values, quant::kIq4NlValues, sizeof(quant::kIq4NlValues)));
}

// set_weight_prefetch's switch, per device.
__constant__ int c_weight_prefetch = 1;

void set_weight_prefetch(bool on) {
    const int v = on ? 1 : 0;
    STRATA_CUDA_CHECK(cudaMemcpyToSymbol(c_weight_prefetch, &v, sizeof(v)));
}

bool type_supported(quant::Type t) {
    bool found = false;
    with_dequantizer(t, [&]<class Dq>() { found = Dq::kBytes > 0; });
    return found;
}

namespace {

constexpr int kWarps = 4;  // weight rows per 128-thread block
// f32-input GEMVs of fewer rows than this take a block a row (gemv_kernel's kWpr). A/B on the
// H200, 30B-A3B Q4_K_M, the router's 128 rows a block a row against a warp a row: batch 4 801 ->
// 827 t/s aggregate, batch 8 958 -> 994, batch 1 unchanged.
constexpr int64_t kGemvBlockPerRowBelow = 1024;

// Rows [lo, hi) of a matrix asked of L2 by one thread (prefetch_l2): the products call it for
// their block's rows before grid_dependency_enter() (weights never change during a forward), so
// with programmatic dependent launch the fetch overlaps the kernel before. A/B on the H200,
// 30B-A3B Q4_K_M decode: +1-2 % (replayed step 2,738 -> 2,710 us).
__device__ __forceinline__ void prefetch_rows(const uint8_t* w, size_t row_bytes, int lo, int hi) {
    if (c_weight_prefetch != 0 && lo < hi)
        prefetch_l2(w + static_cast<size_t>(lo) * row_bytes, static_cast<size_t>(hi - lo) * row_bytes);
}

// Dot of one dequantised group of eight with x[0..8) (x 32-byte aligned).
__device__ __forceinline__ float dot8(const float* v, const float* x) {
    const float4 a = *reinterpret_cast<const float4*>(x), b = *reinterpret_cast<const float4*>(x + 4);
    return v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z + v[7] * b.w;
}

// y[c][row] = W[row] . x[c] for c < n (n <= NC): one warp a row, or with kWpr = kWarps the
// whole block a row (each warp a quarter of its groups, the partial sums added in shared memory),
// for matrices of few rows (the f32 router's 128 rows were 32 blocks: 21 us a layer at 8 inputs).
template <class Dq, int NC, int kWpr>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int rows, int groups, const float* __restrict__ x,
                int64_t x_stride, int n, float* __restrict__ y, int64_t y_stride) {
    static_assert(kWpr == 1 || kWpr == kWarps, "a warp a row or a block a row");
    constexpr int kRowsPerBlock = kWarps / kWpr;
    if (threadIdx.x == 0) prefetch_rows(w, row_bytes, blockIdx.x * kRowsPerBlock, min(rows, (blockIdx.x + 1) * kRowsPerBlock));
    grid_dependency_enter();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int row = blockIdx.x * kRowsPerBlock + warp / kWpr;
    if (row >= rows) return;  // kWpr > 1: the whole block leaves together
    constexpr int kGroups = Dq::kValues / 8;
    const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
    for (int i = (warp % kWpr) * 32 + lane; i < groups; i += 32 * kWpr) {
        float v[8];
        Dq::dequant8(wr + static_cast<size_t>(i / kGroups) * Dq::kBytes, i % kGroups, v);
#pragma unroll
        for (int c = 0; c < NC; ++c)
            if (c < n) acc[c] += dot8(v, x + c * x_stride + 8 * i);
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[c] = warp_sum(acc[c]);
    if constexpr (kWpr > 1) {
        __shared__ float partial[kWarps][NC];
        if (lane == 0)
#pragma unroll
            for (int c = 0; c < NC; ++c) partial[warp][c] = acc[c];
        __syncthreads();
        if (warp != 0) return;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < kWarps; ++k) s += partial[k][c];
            acc[c] = s;
        }
    }
#pragma unroll
    for (int c = 0; c < NC; ++c)
        if (lane == 0 && c < n) y[c * y_stride + row] = acc[c];
}

// y[c][row] = W[row] . x[c] for c < n (n <= NC) with 8-bit inputs x (rows of chunks * 32
// values): one warp per weight row, each lane's weight chunk dotted with every input row's,
// decoded once for all of them. A/B on the H200 against row_dot32_q8 for each input, 30B-A3B
// Q4_K_M: batch 4 721 -> 791 t/s aggregate, batch 8 859 -> 964.
template <class Dq, int NC>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_q8_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int rows, int chunks, Q8Row x, int n, float* __restrict__ y,
                   int64_t y_stride) {
    if (threadIdx.x == 0) prefetch_rows(w, row_bytes, blockIdx.x * kWarps, min(rows, (blockIdx.x + 1) * kWarps));
    grid_dependency_enter();
    const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
    for (int i = lane; i < chunks; i += 32) {
        const WeightChunkQ8 wc = weight_chunk_q8<Dq>(wr, i);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            if (c < n) {
                ChunkQ8 xc;
                load_chunk<Dq>(row_at(x, c, 32 * chunks), i, xc);
                acc[c] += weight_chunk_dot(wc, xc);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        const float s = warp_sum(acc[c]);
        if (lane == 0 && c < n) y[c * y_stride + row] = s;
    }
}

// Sum of row_dot32 over chunks first, first + stride, ... < chunks, two chunks per step so each
// lane has both chunks' loads in flight before it does any arithmetic (decode is latency-bound:
// a lane waiting on one 16-byte load at a time leaves most of the memory bandwidth idle).
template <class Dq, class X>
__device__ __forceinline__ float row_dot_strided(const uint8_t* wr, int first, int stride, int chunks, const X& x) {
    float acc = 0.0f;
    for (int i = first; i < chunks; i += 2 * stride) {
        const int i2 = i + stride;
        typename ChunkOf<X>::type ca, cb;
        load_chunk<Dq>(x, i, ca);
        const float a = chunk_dot<Dq>(wr, i, ca);
        float b = 0.0f;
        if (i2 < chunks) {
            load_chunk<Dq>(x, i2, cb);
            b = chunk_dot<Dq>(wr, i2, cb);
        }
        acc += a + b;
    }
    return acc;
}

// Adds up the partial sums of the kWpr warps that share a weight row; lane 0 of the row's first
// warp gets the total. `shared` holds one float per warp of the block.
template <int kWpr>
__device__ __forceinline__ float row_total(float acc, float* shared) {
    acc = warp_sum(acc);
    if constexpr (kWpr > 1) {
        const int warp = threadIdx.x / 32;
        if ((threadIdx.x & 31) == 0) shared[warp] = acc;
        __syncthreads();
        acc = 0.0f;
#pragma unroll
        for (int k = 0; k < kWpr; ++k) acc += shared[warp - warp % kWpr + k];
    }
    return acc;
}

// One input row times up to kGemvBatchMax matrices of one type and width (a multiple of 32
// values), warps indexing the rows of all matrices in turn. Either kRows rows per warp — each
// lane loads its chunk of x once for all of them (x is read through L1 at 4 bytes a value
// against ~0.6 for Q4_K weights; ncu showed the one-row-per-warp kernel at ~70 % L1 and ~10 %
// DRAM throughput) — or, for matrices of few rows, kWpr warps per row so small products still
// fill the GPU. X: the input row, f32 (const float*) or 8-bit (Q8Row).
template <class Dq, int kRows, int kWpr, class X>
__device__ __forceinline__ void gemv1_rows(const GemvBatch& b, int chunks, X x, bool stage) {
    static_assert(kRows == 1 || kWpr == 1, "rows per warp or warps per row, not both");
    constexpr int kBlockRows = kWarps / kWpr * kRows;
    const int lo = blockIdx.x * kBlockRows, hi = lo + kBlockRows;
    // The block's rows (which may straddle matrices, all of one type) copied into shared memory
    // before waiting on the kernel before, or else asked of L2.
    extern __shared__ __align__(16) uint8_t staged[];
    __shared__ uint64_t staged_bar;
    size_t block_row_bytes = 0;
    if (stage) {
        int m = 0, start = 0;
        while (m < b.count && lo >= start + b.rows[m]) start += b.rows[m++];
        block_row_bytes = b.row_bytes_of(m < b.count ? m : 0);
        if (threadIdx.x == 0) {
            uint32_t bytes = 0;
            for (int mm = m, st = start; mm < b.count && st < hi; st += b.rows[mm++])
                bytes += static_cast<uint32_t>((min(hi, st + b.rows[mm]) - max(lo, st)) * block_row_bytes);
            bulk_copy_begin(&staged_bar, bytes);
            for (; m < b.count && start < hi; start += b.rows[m++]) {
                const int a = max(lo, start), e = min(hi, start + b.rows[m]);
                bulk_copy(staged + static_cast<size_t>(a - lo) * block_row_bytes,
                          b.w[m] + static_cast<size_t>(a - start) * block_row_bytes,
                          static_cast<uint32_t>((e - a) * block_row_bytes), &staged_bar);
            }
        }
        __syncthreads();  // the barrier is ready before anyone waits on it
    } else if (threadIdx.x == 0) {
        for (int m = 0, start = 0; m < b.count && start < hi; start += b.rows[m++])
            prefetch_rows(b.w[m], b.row_bytes_of(m), max(lo, start) - start, min(hi, start + b.rows[m]) - start);
    }
    grid_dependency_enter();
    __shared__ float partial[kWarps];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int first = (blockIdx.x * (kWarps / kWpr) + warp / kWpr) * kRows;
    const uint8_t* wr[kRows];
    float* yr[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        int row = first + r, m = 0;
        while (m < b.count && row >= b.rows[m]) row -= b.rows[m++];
        wr[r] = m >= b.count ? nullptr
                : stage      ? staged + static_cast<size_t>(first + r - lo) * block_row_bytes
                             : b.w[m] + static_cast<size_t>(row) * b.row_bytes_of(m);
        yr[r] = m < b.count ? b.y[m] + row : nullptr;
    }
    if (stage) bulk_copy_wait(&staged_bar);
    float acc[kRows];
    if constexpr (kRows == 1) {
        // Whole blocks share a row set, but a block can straddle the end: no early return
        // before the barrier in row_total.
        acc[0] = wr[0] != nullptr ? row_dot_strided<Dq>(wr[0], (warp % kWpr) * 32 + lane, 32 * kWpr, chunks, x) : 0.0f;
        acc[0] = row_total<kWpr>(acc[0], partial);
    } else {
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
        for (int i = lane; i < chunks; i += 32) {
            typename ChunkOf<X>::type xc;
            load_chunk<Dq>(x, i, xc);
#pragma unroll
            for (int r = 0; r < kRows; ++r)
                if (wr[r] != nullptr) acc[r] += chunk_dot<Dq>(wr[r], i, xc);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = warp_sum(acc[r]);
    }
    if (lane == 0 && warp % kWpr == 0) {
#pragma unroll
        for (int r = 0; r < kRows; ++r)
            if (yr[r] != nullptr) *yr[r] = acc[r];
    }
}
template <class Dq, int kRows, int kWpr, class X>
__global__ void __launch_bounds__(kWarps * 32) gemv1_kernel(GemvBatch b, int chunks, X x, bool stage) {
    gemv1_rows<Dq, kRows, kWpr, X>(b, chunks, x, stage);
}
// Matrices of two types in one launch (q and k of Q4_K with v of Q6_K, as Q4_K_M files have on a
// third of their layers): blocks below b_block hold DqA's rows, the rest DqB's (the matrices
// from b.first_b on); the type boundary falls on a block boundary.
template <class DqA, class DqB, int kRows, int kWpr, class X>
__global__ void __launch_bounds__(kWarps * 32)
    gemv1_two_types_kernel(GemvBatch b, int chunks, X x, unsigned b_block, bool stage) {
    if (blockIdx.x < b_block) gemv1_rows<DqA, kRows, kWpr, X>(b, chunks, x, stage);
    else gemv1_rows<DqB, kRows, kWpr, X>(b, chunks, x, stage);
}

// How a product of `rows` weight rows of `chunks` 32-value chunks is spread: rows per warp
// (sharing input loads) while enough warps remain, else warps per row (~4K warps in all fill an
// H200 or an RTX card) unless a lane would have no chunk. f32 inputs: 4 or 2 rows per warp
// while ~1,000 warps or more remain.
struct GemvShape {
    int rows_per_warp, warps_per_row;
};
// With 8-bit inputs (a quarter of the input traffic) half as many rows per warp, and two warps
// per row for rows of 4,096+ values: A/B on the H200, 30B-A3B decode 304 -> 317 t/s (Q4_K_M) and
// 295 -> 302 (IQ3_XXS), against one row per warp everywhere 314 / 294.
// CudaTuning's gemv_rows / gemv_warps force one shape for A/B runs.
GemvShape gemv_shape(int64_t rows, int chunks, bool int8_input, const CudaTuning& t) {
    if (t.gemv_rows > 0) {
        const int rows_per_warp = static_cast<int>(t.gemv_rows);
        return {rows_per_warp, rows_per_warp > 1 ? 1 : static_cast<int>(t.gemv_warps)};
    }
    if (int8_input) {
        if (rows >= 4096) return {2, 1};
        if (rows >= 1024 && chunks < 128) return {1, 1};
        return {1, 2};
    }
    if (rows >= 4096) return {4, 1};
    if (rows >= 2048) return {2, 1};
    if (rows >= 1024 || chunks < 64) return {1, 1};
    return {1, 2};
}

// Calls f.template operator()<kRows, kWpr>() for the shape's compile-time form.
template <class F>
void with_gemv_shape(GemvShape sh, F&& f) {
    if (sh.rows_per_warp == 4) f.template operator()<4, 1>();
    else if (sh.rows_per_warp == 2) f.template operator()<2, 1>();
    else if (sh.warps_per_row == 2) f.template operator()<1, 2>();
    else f.template operator()<1, 1>();
}

// Eight dequantised values to out[0..8), 16-byte aligned: one 16-byte store for bf16 (two for
// f32). Eight 2-byte stores made dequantising a third of a long prefill.
template <class Out>
__device__ __forceinline__ void store8(Out* o, const float* v) {
    if constexpr (sizeof(Out) == 4) {
        reinterpret_cast<float4*>(o)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4*>(o)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        uint4 packed;
        uint32_t* w = &packed.x;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const __nv_bfloat162 two = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
            w[j] = *reinterpret_cast<const uint32_t*>(&two);
        }
        *reinterpret_cast<uint4*>(o) = packed;
    }
}

// out row r = dequantised source row ids[r / per_id] * per_id + r % per_id (ids null: row r).
// per_id 1 picks single rows (embeddings); per_id = rows per expert picks whole experts.
template <class Dq, class Out>
__global__ void dequant_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int groups,
                               const int32_t* __restrict__ ids, int64_t per_id, Out* __restrict__ out) {
    grid_dependency_enter();
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= rows * groups) return;
    const int64_t r = idx / groups;
    const int i = static_cast<int>(idx % groups);
    constexpr int kGroups = Dq::kValues / 8;
    const int64_t src_row = ids != nullptr ? ids[r / per_id] * per_id + r % per_id : r;
    float v[8];
    Dq::dequant8(w + static_cast<size_t>(src_row) * row_bytes + static_cast<size_t>(i / kGroups) * Dq::kBytes, i % kGroups, v);
    store8(out + r * static_cast<int64_t>(groups) * 8 + 8 * i, v);
}

// dequant_kernel for IQ3_XXS with its grid and sign tables in shared memory: the two grid
// lookups and the sign lookup of each 8 values are gathers a warp spreads over the whole table,
// which L1 serves a cache line at a time. Blocks loop over the work (the tables are loaded once a
// block, before the wait: they never change). A/B on the H200 against dequant_kernel reading
// them through L1, 30B-A3B IQ3_XXS: pp512 7,509 -> 7,679 t/s, pp4096 16,690 -> 16,769.
constexpr unsigned kDequantLoopBlocks = 4096;
template <class Out>
__global__ void __launch_bounds__(256)
    dequant_iq3xxs_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int groups,
                          const int32_t* __restrict__ ids, int64_t per_id, Out* __restrict__ out) {
    __shared__ uint32_t grid[256];
    __shared__ uint32_t signs[128];
    grid[threadIdx.x] = g_iq3xxs_grid[threadIdx.x];
    if (threadIdx.x < 128) signs[threadIdx.x] = g_iq_sign_masks[threadIdx.x];
    grid_dependency_enter();
    __syncthreads();
    constexpr int kGroups = DqIQ3_XXS::kValues / 8;
    const int64_t total = rows * groups;
    for (int64_t idx = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * 256) {
        const int64_t r = idx / groups;
        const int i = static_cast<int>(idx % groups);
        const int64_t src_row = ids != nullptr ? ids[r / per_id] * per_id + r % per_id : r;
        float v[8];
        DqIQ3_XXS::dequant8_with(
            w + static_cast<size_t>(src_row) * row_bytes + static_cast<size_t>(i / kGroups) * DqIQ3_XXS::kBytes, i % kGroups, v,
            grid, signs);
        store8(out + r * static_cast<int64_t>(groups) * 8 + 8 * i, v);
    }
}

// Launches the dequantising kernel for Dq over rows x groups (dequant_kernel's arguments).
template <class Dq, class Out>
void launch_dequant(const uint8_t* w, size_t row_bytes, int64_t rows, int groups, const int32_t* ids, int64_t per_id, Out* out,
                    cudaStream_t s) {
    const int64_t total = rows * groups;
    if constexpr (std::is_same_v<Dq, DqIQ3_XXS>) {
        const unsigned blocks = std::min<unsigned>(blocks_for(total, 256), kDequantLoopBlocks);
        launch_kernel(dequant_iq3xxs_kernel<Out>, blocks, 256, 0, s, w, row_bytes, rows, groups, ids, per_id, out);
    } else {
        launch_kernel(dequant_kernel<Dq, Out>, blocks_for(total, 256), 256, 0, s, w, row_bytes, rows, groups, ids, per_id, out);
    }
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// Blocks per SM the gate/up kernel is compiled to fit (ptxas caps its registers to suit). For
// IQ3_XXS at one row per warp and 8-bit inputs, 12 (48 -> 40 registers, no spills): a decode
// step's 1,536 blocks of the 30B geometry then run as one wave instead of 1.3. A/B of two
// binaries, 30B-A3B IQ3_XXS tg64 364.9 -> 370.8 t/s (80B IQ3_XXS 258.9 -> 257.7, within its
// spread); the same cap on Q4_K spilled and lost 6 % (392.4 -> 367.3), so the other types keep
// what ptxas picks.
template <class Dq, int kRows, class X>
inline constexpr int kGateUpMinBlocks = kRows == 1 && std::is_same_v<Dq, DqIQ3_XXS> && !std::is_same_v<X, const float*> ? 12 : 1;

// hidden[p][row] = silu(gate_e[row] . x_t) * (up_e[row] . x_t), e = ids[p], t = p / k; kRows
// rows of gate and of up per warp, sharing each lane's loads of x (f32, or Q8Row for rows of
// whole 32-value chunks). The experts are known only after the wait: each block then asks L2
// for its gate and up rows and for its share (1 / the row blocks) of expert e's down matrix
// (down_bytes each, from `down`), which the down kernel reads next. The grid is (row blocks,
// pairs), or with pair_major (pairs, row blocks): then the blocks of every pair for the same rows
// are dispatched together, and pairs that share an expert read its rows from DRAM about once
// (L2 serves the rest) instead of each pair streaming the whole expert on its own.
template <class Dq, int kRows, class X>
__global__ void __launch_bounds__(kWarps * 32, kGateUpMinBlocks<Dq, kRows, X>)
    moe_gate_up_kernel(const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up, size_t row_bytes, int rows, int groups,
                       X x, const int32_t* __restrict__ ids, int k, float* __restrict__ hidden, const uint8_t* down,
                       size_t down_bytes, bool pair_major, const uint8_t* gate_far, const uint8_t* up_far) {
    grid_dependency_enter();
    constexpr int kGroups = Dq::kValues / 8;
    const int lane = threadIdx.x & 31, p = pair_major ? blockIdx.x : blockIdx.y;
    const int rb = pair_major ? blockIdx.y : blockIdx.x, n_rb = pair_major ? gridDim.y : gridDim.x;
    const int first = (rb * kWarps + threadIdx.x / 32) * kRows;
    // An expert store's ids: a slot (>= 0), -1 (the host runs the pair: its hidden row is
    // unused), or -2 - e: expert e read in place from host memory over the bus (gate_far, up_far).
    const int id = ids[p];
    if (id == -1) return;
    const bool far = id < -1;
    if (far) {
        gate = gate_far;
        up = up_far;
    }
    const size_t base = static_cast<size_t>(far ? -2 - id : id) * rows;
    if (threadIdx.x == 0 && first < rows && !far) {
        const int lo = static_cast<int>(base) + first, hi = static_cast<int>(base) + min(rows, first + kWarps * kRows);
        prefetch_rows(gate, row_bytes, lo, hi);
        prefetch_rows(up, row_bytes, lo, hi);
        if (c_weight_prefetch != 0 && down != nullptr) {
            const size_t from = down_bytes * rb / n_rb, to = down_bytes * (rb + 1) / n_rb;
            prefetch_l2(down + static_cast<size_t>(ids[p]) * down_bytes + from, to - from);
        }
    }
    if (first >= rows) return;
    const X xt = row_at(x, p / k, groups * 8);
    float g[kRows], u[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) g[r] = u[r] = 0.0f;
    const int n = min(kRows, rows - first);
    if (!std::is_same_v<X, const float*> || groups % 4 == 0) {  // rows of whole 32-value chunks (every real model)
        for (int i = lane; i < groups / 4; i += 32) {
            typename ChunkOf<X>::type xc;
            load_chunk<Dq>(xt, i, xc);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                if (r >= n) break;
                const size_t off = (base + first + r) * row_bytes;
                g[r] += chunk_dot<Dq>(gate + off, i, xc);
                u[r] += chunk_dot<Dq>(up + off, i, xc);
            }
        }
    } else if constexpr (std::is_same_v<X, const float*>) {
        for (int i = lane; i < groups; i += 32) {
            for (int r = 0; r < n; ++r) {
                float v[8];
                const size_t off = (base + first + r) * row_bytes + static_cast<size_t>(i / kGroups) * Dq::kBytes;
                Dq::dequant8(gate + off, i % kGroups, v);
                g[r] += dot8(v, xt + 8 * i);
                Dq::dequant8(up + off, i % kGroups, v);
                u[r] += dot8(v, xt + 8 * i);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float gs = warp_sum(g[r]), us = warp_sum(u[r]);
        if (lane == 0 && r < n) hidden[static_cast<int64_t>(p) * rows + first + r] = silu(gs) * us;
    }
}

// out_pairs[p][row] = down_e[row] . hidden[p], e = ids[p]; kRows rows per warp; the grid as the
// gate/up kernel's.
template <class Dq, int kRows, class X>
__global__ void __launch_bounds__(kWarps * 32)
    moe_down_kernel(const uint8_t* __restrict__ down, size_t row_bytes, int rows, int groups, X hidden,
                    const int32_t* __restrict__ ids, float* __restrict__ out, bool pair_major, const uint8_t* down_far) {
    grid_dependency_enter();
    constexpr int kGroups = Dq::kValues / 8;
    const int lane = threadIdx.x & 31, p = pair_major ? blockIdx.x : blockIdx.y;
    const int first = ((pair_major ? blockIdx.y : blockIdx.x) * kWarps + threadIdx.x / 32) * kRows;
    if (first >= rows) return;
    const int n = min(kRows, rows - first);
    const int id = ids[p];  // as the gate/up kernel's
    if (id == -1) {         // the host runs the pair: its row adds nothing here
        if (lane < n) out[static_cast<int64_t>(p) * rows + first + lane] = 0.0f;
        return;
    }
    const uint8_t* w0 = (id < -1 ? down_far + static_cast<size_t>(-2 - id) * rows * row_bytes
                                 : down + static_cast<size_t>(id) * rows * row_bytes) +
                        static_cast<size_t>(first) * row_bytes;
    const X h = row_at(hidden, p, groups * 8);
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    if (!std::is_same_v<X, const float*> || groups % 4 == 0) {
        for (int i = lane; i < groups / 4; i += 32) {
            typename ChunkOf<X>::type xc;
            load_chunk<Dq>(h, i, xc);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                if (r >= n) break;
                acc[r] += chunk_dot<Dq>(w0 + static_cast<size_t>(r) * row_bytes, i, xc);
            }
        }
    } else if constexpr (std::is_same_v<X, const float*>) {
        for (int i = lane; i < groups; i += 32) {
            for (int r = 0; r < n; ++r) {
                float v[8];
                Dq::dequant8(w0 + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(i / kGroups) * Dq::kBytes, i % kGroups,
                             v);
                acc[r] += dot8(v, h + 8 * i);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && r < n) out[static_cast<int64_t>(p) * rows + first + r] = s;
    }
}

// Rows per warp for the expert kernels: `rows` of one expert times the pairs of the call.
// (8-bit inputs: x costs a quarter of the L1 traffic, and more warps with fewer rows each won:
// 30B-A3B decode 304 -> 317 t/s on Q4_K_M, 295 -> 302 on IQ3_XXS.)
int moe_rows_per_warp(int64_t rows, int64_t n_pairs, bool int8_input) {
    const int64_t all = rows * n_pairs;
    if (int8_input) return all >= 16384 ? 2 : 1;
    return all >= 8192 ? 4 : all >= 2048 ? 2 : 1;
}

// Calls f.template operator()<kRows>() for kRows = 1, 2 or 4.
template <class F>
void with_rows_per_warp(int rows, F&& f) {
    if (rows == 4) f.template operator()<4>();
    else if (rows == 2) f.template operator()<2>();
    else f.template operator()<1>();
}

void check_type(const DeviceMatrix& w) {
    if (!type_supported(w.type)) throw Error(std::string("no CUDA kernel for weight type ") + quant::type_name(w.type));
    if (w.ne0 % 8 != 0) throw Error("CUDA products need rows of a multiple of 8 values, got " + std::to_string(w.ne0));
}

void check_aligned(const void* out) {
    if (reinterpret_cast<uintptr_t>(out) % 16 != 0) throw Error("CUDA dequantisation: output must be 16-byte aligned");
}

}  // namespace

void gemv(const DeviceMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride, const CudaTuning& t,
          cudaStream_t s) {
    check_type(w);
    if (n < 1 || n > kGemvMaxCols) throw Error("gemv: batch of " + std::to_string(n) + " rows");
    if (reinterpret_cast<uintptr_t>(x) % 32 != 0 || x_stride % 8 != 0) throw Error("gemv: input rows must be 32-byte aligned");
    if (n == 1 && w.ne0 % 32 == 0) {
        float* const ys[1] = {y};
        gemv1_multi(&w, ys, 1, x, t, s);
        return;
    }
    const int groups = static_cast<int>(w.ne0 / 8);
    // A block a row while a warp a row would leave most SMs idle (fewer than ~8 warps an SM).
    const bool block_per_row = w.rows < kGemvBlockPerRowBelow && groups >= 32 * kWarps;
    const dim3 grid(block_per_row ? static_cast<unsigned>(w.rows) : blocks_for(w.rows, kWarps));
    with_dequantizer(w.type, [&]<class Dq>() {
        const auto run = [&](auto kernel) {
            launch_kernel(kernel, grid, kWarps * 32, 0, s, w.data, w.row_bytes, static_cast<int>(w.rows), groups, x, x_stride,
                          static_cast<int>(n), y, y_stride);
        };
        const auto pick = [&]<int NC>() {
            if (block_per_row) run(gemv_kernel<Dq, NC, kWarps>);
            else run(gemv_kernel<Dq, NC, 1>);
        };
        if (n == 1) pick.template operator()<1>();
        else if (n == 2) pick.template operator()<2>();
        else if (n <= 4) pick.template operator()<4>();
        else pick.template operator()<kGemvMaxCols>();
    });
    STRATA_CUDA_LAUNCHED();
}

namespace {

// Rounds each 32 values to int8 with one scale (one warp per 32 values) and sums each 16 of the
// original values.
__global__ void quantize_act_q8_kernel(const float* __restrict__ x, int64_t rows, int n, int64_t x_stride, ActQ8 out) {
    grid_dependency_enter();
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= rows * n) return;  // n % 32 == 0: whole warps leave together
    const int64_t r = idx / n;
    store_q8_lane(x[r * x_stride + idx % n], idx, out);
}

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

// with_dequantizer for products whose input is X: f32 inputs take every type, 8-bit inputs
// (Q8Row) only those with a dp4a dot; any other type is refused, naming it.
template <class X, class F>
void with_input_dequantizer(quant::Type t, F&& f) {
    with_dequantizer(t, [&]<class Dq>() {
        if constexpr (std::is_same_v<X, const float*> || kHasQ8Dot<Dq>) f.template operator()<Dq>();
        else throw Error(std::string("no 8-bit-input product for ") + quant::type_name(t));
    });
}

// The batch of matrices ws[0..count): matrices [first_b, count) may be of a second type (the
// first first_b all of ws[0]'s). Rows of the first type, and the shape.
struct GemvPlan {
    GemvBatch b{};
    int rows_a = 0, total = 0, chunks = 0;
    GemvShape shape{};
};
GemvPlan gemv1_plan(const DeviceMatrix* ws, float* const* ys, int count, bool int8_input, const CudaTuning& t) {
    if (count < 1 || count > kGemvBatchMax) throw Error("gemv1_multi: " + std::to_string(count) + " matrices");
    GemvPlan p;
    p.b.first_b = count;
    for (int i = 0; i < count; ++i) {
        check_type(ws[i]);
        if (ws[i].type != ws[0].type && p.b.first_b == count) {
            p.b.first_b = i;
            p.b.row_bytes_b = ws[i].row_bytes;
        }
        const DeviceMatrix& first = i < p.b.first_b ? ws[0] : ws[p.b.first_b];
        if (ws[i].type != first.type || ws[i].ne0 != ws[0].ne0 || ws[i].row_bytes != first.row_bytes || ws[i].ne0 % 32 != 0)
            throw Error("gemv1_multi: matrices differ in width, or in type other than once from one to a second");
        p.b.w[i] = ws[i].data;
        p.b.rows[i] = static_cast<int>(ws[i].rows);
        p.b.y[i] = ys[i];
        p.total += p.b.rows[i];
        if (i < p.b.first_b) p.rows_a += p.b.rows[i];
    }
    p.b.count = count;
    p.b.row_bytes = ws[0].row_bytes;
    p.chunks = static_cast<int>(ws[0].ne0 / 32);
    p.shape = gemv_shape(p.total, p.chunks, int8_input, t);
    return p;
}
int gemv_block_rows(const GemvShape& sh) { return kWarps / sh.warps_per_row * sh.rows_per_warp; }

// Shared memory for a one-input product's block rows copied in ahead of its wait (gemv1_rows),
// or 0 where they are read from global memory: switched off (gemv_stage), before sm_90, rows
// that break the copy engine's 16-byte rule, or more than the 48 KiB a launch gets without
// opting in.
size_t gemv1_stage_bytes(const GemvPlan& p, const CudaTuning& t) {
    if (!t.gemv_stage || !dependent_launch()) return 0;
    const size_t rb = std::max(p.b.row_bytes, p.b.first_b < p.b.count ? p.b.row_bytes_b : 0);
    if (p.b.row_bytes % 16 != 0 || (p.b.first_b < p.b.count && p.b.row_bytes_b % 16 != 0)) return 0;
    for (int i = 0; i < p.b.count; ++i)
        if (reinterpret_cast<uintptr_t>(p.b.w[i]) % 16 != 0) return 0;
    const size_t bytes = rb * static_cast<size_t>(gemv_block_rows(p.shape));
    return bytes <= 48 * 1024 ? bytes : 0;
}

template <class X>
void gemv1_launch(const DeviceMatrix* ws, float* const* ys, int count, X x, const CudaTuning& t, cudaStream_t s) {
    const GemvPlan p = gemv1_plan(ws, ys, count, !std::is_same_v<X, const float*>, t);
    if (p.b.first_b != count) throw Error("gemv1_multi: matrices differ in type");
    const unsigned blocks = blocks_for(p.total, gemv_block_rows(p.shape));
    const size_t stage = gemv1_stage_bytes(p, t);
    with_input_dequantizer<X>(ws[0].type, [&]<class Dq>() {
        with_gemv_shape(p.shape, [&]<int kRows, int kWpr>() {
            launch_kernel(gemv1_kernel<Dq, kRows, kWpr, X>, blocks, kWarps * 32, stage, s, p.b, p.chunks, x, stage > 0);
        });
    });
    STRATA_CUDA_LAUNCHED();
}

Q8Row q8_row(const ActQ8& a) { return {a.q, a.d, a.s}; }

}  // namespace

bool q8_supported(quant::Type t) {
    bool found = false;
    with_dequantizer(t, [&]<class Dq>() { found = kHasQ8Dot<Dq>; });
    return found;
}

size_t act_q8_bytes(int64_t rows, int64_t n) {
    const auto v = static_cast<size_t>(rows * n);
    return align16(v) + align16(v / 32 * sizeof(float)) + v / 16 * sizeof(float);
}

ActQ8 act_q8_in(void* buf, int64_t rows, int64_t n) {
    const auto v = static_cast<size_t>(rows * n);
    auto* p = static_cast<uint8_t*>(buf);
    return {reinterpret_cast<int8_t*>(p), reinterpret_cast<float*>(p + align16(v)),
            reinterpret_cast<float*>(p + align16(v) + align16(v / 32 * sizeof(float)))};
}

void quantize_act_q8(const float* x, int64_t rows, int64_t n, int64_t x_stride, const ActQ8& out, cudaStream_t s) {
    if (n % 32 != 0) throw Error("8-bit activations need rows of a multiple of 32 values, got " + std::to_string(n));
    if (rows <= 0) return;
    launch_kernel(quantize_act_q8_kernel, blocks_for(rows * n, 256), 256, 0, s, x, rows, static_cast<int>(n), x_stride, out);
    STRATA_CUDA_LAUNCHED();
}

void gemv1_multi(const DeviceMatrix* ws, float* const* ys, int count, const float* x, const CudaTuning& t, cudaStream_t s) {
    if (reinterpret_cast<uintptr_t>(x) % 32 != 0) throw Error("gemv: input rows must be 32-byte aligned");
    gemv1_launch<const float*>(ws, ys, count, x, t, s);
}

void gemv1_multi(const DeviceMatrix* ws, float* const* ys, int count, const ActQ8& x, const CudaTuning& t, cudaStream_t s) {
    gemv1_launch<Q8Row>(ws, ys, count, q8_row(x), t, s);
}

// A/B on the H200 against a launch per type, Q4_K_M files: batch-1 decode 374.4 -> 384.6 t/s
// (30B-A3B), 257.8 -> 264.8 (80B-A3B).
bool gemv1_two_types_fit(const DeviceMatrix* ws, int count, const CudaTuning& t) {
    if (count < 2 || count > kGemvBatchMax || ws[0].type != quant::Type::Q4_K) return false;
    int first_b = count, rows_a = 0, total = 0;
    for (int i = 0; i < count; ++i) {
        if (ws[i].type != ws[0].type && first_b == count) first_b = i;
        const quant::Type want = i < first_b ? quant::Type::Q4_K : quant::Type::Q6_K;
        if (ws[i].type != want || ws[i].ne0 != ws[0].ne0 || ws[i].ne0 % 32 != 0) return false;
        total += static_cast<int>(ws[i].rows);
        if (i < first_b) rows_a += static_cast<int>(ws[i].rows);
    }
    if (first_b == count) return false;
    const GemvShape sh = gemv_shape(total, static_cast<int>(ws[0].ne0 / 32), true, t);
    return rows_a % gemv_block_rows(sh) == 0;
}

void gemv1_two_types(const DeviceMatrix* ws, float* const* ys, int count, const ActQ8& x, const CudaTuning& t, cudaStream_t s) {
    if (!gemv1_two_types_fit(ws, count, t)) throw Error("gemv1_two_types: needs Q4_K matrices then Q6_K ones, split on a block");
    const GemvPlan p = gemv1_plan(ws, ys, count, true, t);
    const int block_rows = gemv_block_rows(p.shape);
    const unsigned blocks = blocks_for(p.total, block_rows), b_block = static_cast<unsigned>(p.rows_a / block_rows);
    const size_t stage = gemv1_stage_bytes(p, t);
    with_gemv_shape(p.shape, [&]<int kRows, int kWpr>() {
        launch_kernel(gemv1_two_types_kernel<DqQ4_K, DqQ6_K, kRows, kWpr, Q8Row>, blocks, kWarps * 32, stage, s, p.b, p.chunks,
                      q8_row(x), b_block, stage > 0);
    });
    STRATA_CUDA_LAUNCHED();
}

void dequant_rows_f32(const DeviceMatrix& w, const int32_t* ids, int64_t n, float* out, cudaStream_t s) {
    check_type(w);
    check_aligned(out);
    const int groups = static_cast<int>(w.ne0 / 8);
    with_dequantizer(w.type, [&]<class Dq>() { launch_dequant<Dq>(w.data, w.row_bytes, n, groups, ids, 1, out, s); });
    STRATA_CUDA_LAUNCHED();
}

void dequant_matrix(const DeviceMatrix& w, bool to_bf16, void* out, cudaStream_t s) {
    check_type(w);
    check_aligned(out);
    const int groups = static_cast<int>(w.ne0 / 8);
    with_dequantizer(w.type, [&]<class Dq>() {
        if (to_bf16) launch_dequant<Dq>(w.data, w.row_bytes, w.rows, groups, nullptr, 1, static_cast<__nv_bfloat16*>(out), s);
        else launch_dequant<Dq>(w.data, w.row_bytes, w.rows, groups, nullptr, 1, static_cast<float*>(out), s);
    });
    STRATA_CUDA_LAUNCHED();
}

void dequant_experts_bf16(const DeviceMatrix& w, const int32_t* experts, int64_t count, void* out, cudaStream_t s) {
    check_type(w);
    check_aligned(out);
    const int groups = static_cast<int>(w.ne0 / 8);
    const int64_t rows = count * w.rows;
    with_dequantizer(w.type, [&]<class Dq>() {
        launch_dequant<Dq>(w.data, w.row_bytes, rows, groups, experts, w.rows, static_cast<__nv_bfloat16*>(out), s);
    });
    STRATA_CUDA_LAUNCHED();
}

void gemv(const DeviceMatrix& w, const ActQ8& x, int64_t n, float* y, int64_t y_stride, cudaStream_t s) {
    check_type(w);
    if (n < 1 || n > kGemvMaxCols) throw Error("gemv: batch of " + std::to_string(n) + " rows");
    if (w.ne0 % 32 != 0) throw Error("8-bit-input products need rows of 32-value chunks");
    const int chunks = static_cast<int>(w.ne0 / 32);
    const dim3 grid(blocks_for(w.rows, kWarps));
    with_input_dequantizer<Q8Row>(w.type, [&]<class Dq>() {
        const auto run = [&](auto kernel) {
            launch_kernel(kernel, grid, kWarps * 32, 0, s, w.data, w.row_bytes, static_cast<int>(w.rows), chunks, q8_row(x),
                          static_cast<int>(n), y, y_stride);
        };
        if (n <= 2) run(gemv_q8_kernel<Dq, 2>);
        else if (n <= 4) run(gemv_q8_kernel<Dq, 4>);
        else run(gemv_q8_kernel<Dq, kGemvMaxCols>);
    });
    STRATA_CUDA_LAUNCHED();
}

namespace {

// order: CudaTuning::moe_pair_major (-1: pairs-major for calls of more than one token).
bool moe_pair_major(int64_t n_pairs, int64_t k, int order) { return order < 0 ? n_pairs > k : order == 1; }
dim3 moe_grid(unsigned row_blocks, int64_t n_pairs, bool pair_major) {
    const auto pairs = static_cast<unsigned>(n_pairs);
    return pair_major ? dim3(pairs, row_blocks) : dim3(row_blocks, pairs);
}

template <class X>
void moe_gate_up_launch(const DeviceMatrix& gate, const DeviceMatrix& up, X x, int64_t n_pairs, int64_t k, const int32_t* ids,
                        float* hidden, const DeviceMatrix* down, const CudaTuning& t, cudaStream_t s, const MoeFar& far) {
    check_type(gate);
    if (up.type != gate.type || up.row_bytes != gate.row_bytes) throw Error("expert gate and up weights differ in type");
    if (!std::is_same_v<X, const float*> && gate.ne0 % 32 != 0) throw Error("8-bit expert products need rows of 32-value chunks");
    const int groups = static_cast<int>(gate.ne0 / 8);
    const int rpw = t.moe_gate_rows > 0 ? static_cast<int>(t.moe_gate_rows)
                                        : moe_rows_per_warp(gate.rows, n_pairs, !std::is_same_v<X, const float*>);
    const bool pair_major = moe_pair_major(n_pairs, k, t.moe_pair_major);
    const dim3 grid = moe_grid(blocks_for(gate.rows, kWarps * rpw), n_pairs, pair_major);
    with_input_dequantizer<X>(gate.type, [&]<class Dq>() {
        with_rows_per_warp(rpw, [&]<int kRows>() {
            launch_kernel(moe_gate_up_kernel<Dq, kRows, X>, grid, kWarps * 32, 0, s, gate.data, up.data, gate.row_bytes,
                          static_cast<int>(gate.rows), groups, x, ids, static_cast<int>(k), hidden,
                          down != nullptr ? down->data : nullptr, down != nullptr ? down->rows * down->row_bytes : 0, pair_major,
                          far.gate, far.up);
        });
    });
    STRATA_CUDA_LAUNCHED();
}

template <class X>
void moe_down_launch(const DeviceMatrix& down, X hidden, int64_t n_pairs, int64_t k, const int32_t* ids, float* out_pairs,
                     const CudaTuning& t, cudaStream_t s, const MoeFar& far) {
    check_type(down);
    if (!std::is_same_v<X, const float*> && down.ne0 % 32 != 0) throw Error("8-bit expert products need rows of 32-value chunks");
    const int groups = static_cast<int>(down.ne0 / 8);
    const int rpw = t.moe_down_rows > 0 ? static_cast<int>(t.moe_down_rows)
                                        : moe_rows_per_warp(down.rows, n_pairs, !std::is_same_v<X, const float*>);
    const bool pair_major = moe_pair_major(n_pairs, k, t.moe_pair_major);
    const dim3 grid = moe_grid(blocks_for(down.rows, kWarps * rpw), n_pairs, pair_major);
    with_input_dequantizer<X>(down.type, [&]<class Dq>() {
        with_rows_per_warp(rpw, [&]<int kRows>() {
            launch_kernel(moe_down_kernel<Dq, kRows, X>, grid, kWarps * 32, 0, s, down.data, down.row_bytes,
                          static_cast<int>(down.rows), groups, hidden, ids, out_pairs, pair_major, far.down);
        });
    });
    STRATA_CUDA_LAUNCHED();
}

}  // namespace

void moe_gate_up(const DeviceMatrix& gate, const DeviceMatrix& up, const float* x, int64_t n_pairs, int64_t k, const int32_t* ids,
                 float* hidden, const CudaTuning& t, cudaStream_t s, const DeviceMatrix* down, const MoeFar& far) {
    moe_gate_up_launch<const float*>(gate, up, x, n_pairs, k, ids, hidden, down, t, s, far);
}
void moe_gate_up(const DeviceMatrix& gate, const DeviceMatrix& up, const ActQ8& x, int64_t n_pairs, int64_t k, const int32_t* ids,
                 float* hidden, const CudaTuning& t, cudaStream_t s, const DeviceMatrix* down, const MoeFar& far) {
    moe_gate_up_launch<Q8Row>(gate, up, q8_row(x), n_pairs, k, ids, hidden, down, t, s, far);
}
void moe_down(const DeviceMatrix& down, const float* hidden, int64_t n_pairs, int64_t k, const int32_t* ids, float* out_pairs,
              const CudaTuning& t, cudaStream_t s, const MoeFar& far) {
    moe_down_launch<const float*>(down, hidden, n_pairs, k, ids, out_pairs, t, s, far);
}
void moe_down(const DeviceMatrix& down, const ActQ8& hidden, int64_t n_pairs, int64_t k, const int32_t* ids, float* out_pairs,
              const CudaTuning& t, cudaStream_t s, const MoeFar& far) {
    moe_down_launch<Q8Row>(down, q8_row(hidden), n_pairs, k, ids, out_pairs, t, s, far);
}

}  // namespace strata::cuda
