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

bool type_supported(quant::Type t) {
    bool found = false;
    with_dequantizer(t, [&]<class Dq>() { found = Dq::kBytes > 0; });
    return found;
}

namespace {

constexpr int kWarps = 4;  // weight rows per 128-thread block

// Dot of one dequantised group of eight with x[0..8) (x 32-byte aligned).
__device__ __forceinline__ float dot8(const float* v, const float* x) {
    const float4 a = *reinterpret_cast<const float4*>(x), b = *reinterpret_cast<const float4*>(x + 4);
    return v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z + v[7] * b.w;
}

// y[c][row] = W[row] . x[c] for c < n (n <= NC).
template <class Dq, int NC>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int rows,
                                                           int groups, const float* __restrict__ x, int64_t x_stride,
                                                           int n, float* __restrict__ y, int64_t y_stride) {
    const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    constexpr int kGroups = Dq::kValues / 8;
    const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
    for (int i = lane; i < groups; i += 32) {
        float v[8];
        Dq::dequant8(wr + static_cast<size_t>(i / kGroups) * Dq::kBytes, i % kGroups, v);
#pragma unroll
        for (int c = 0; c < NC; ++c)
            if (c < n) acc[c] += dot8(v, x + c * x_stride + 8 * i);
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        const float s = warp_sum(acc[c]);
        if (lane == 0 && c < n) y[c * y_stride + row] = s;
    }
}

// One input row, rows of a multiple of 32 values: each lane takes 32-value chunks (row_dot32).
template <class Dq>
__global__ void __launch_bounds__(kWarps * 32) gemv1_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int rows,
                                                             int chunks, const float* __restrict__ x, float* __restrict__ y) {
    const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
    float acc = 0.0f;
    for (int i = lane; i < chunks; i += 32) acc += row_dot32<Dq>(wr, i, x);
    acc = warp_sum(acc);
    if (lane == 0) y[row] = acc;
}

// Several matrices of one type and width applied to the same single input row in one launch
// (q, k and v of a layer; the router and the shared expert's gate): warps index the rows of
// all of them in turn.
template <class Dq>
__global__ void __launch_bounds__(kWarps * 32) gemv1_multi_kernel(GemvBatch b, int chunks, const float* __restrict__ x) {
    int row = blockIdx.x * kWarps + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    int m = 0;
    while (m < b.count && row >= b.rows[m]) row -= b.rows[m++];
    if (m == b.count) return;
    const uint8_t* wr = b.w[m] + static_cast<size_t>(row) * b.row_bytes;
    float acc = 0.0f;
    for (int i = lane; i < chunks; i += 32) acc += row_dot32<Dq>(wr, i, x);
    acc = warp_sum(acc);
    if (lane == 0) b.y[m][row] = acc;
}

template <class Dq, class Out>
__global__ void dequant_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int groups,
                               const int32_t* __restrict__ ids, Out* __restrict__ out) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= rows * groups) return;
    const int64_t r = idx / groups;
    const int i = static_cast<int>(idx % groups);
    constexpr int kGroups = Dq::kValues / 8;
    const int64_t src_row = ids != nullptr ? ids[r] : r;
    float v[8];
    Dq::dequant8(w + static_cast<size_t>(src_row) * row_bytes + static_cast<size_t>(i / kGroups) * Dq::kBytes, i % kGroups, v);
    Out* o = out + r * static_cast<int64_t>(groups) * 8 + 8 * i;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        if constexpr (sizeof(Out) == 4) o[j] = v[j];
        else o[j] = __float2bfloat16(v[j]);
    }
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// hidden[p][row] = silu(gate_e[row] . x_t) * (up_e[row] . x_t), e = ids[p], t = p / k.
template <class Dq>
__global__ void __launch_bounds__(kWarps * 32) moe_gate_up_kernel(const uint8_t* __restrict__ gate,
                                                                   const uint8_t* __restrict__ up, size_t row_bytes,
                                                                   int rows, int groups, const float* __restrict__ x,
                                                                   const int32_t* __restrict__ ids, int k,
                                                                   float* __restrict__ hidden) {
    const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x & 31, p = blockIdx.y;
    if (row >= rows) return;
    constexpr int kGroups = Dq::kValues / 8;
    const size_t off = (static_cast<size_t>(ids[p]) * rows + row) * row_bytes;
    const float* xt = x + static_cast<int64_t>(p / k) * groups * 8;
    float g = 0.0f, u = 0.0f;
    if (groups % 4 == 0) {  // rows of whole 32-value chunks (every real model)
        for (int i = lane; i < groups / 4; i += 32) {
            g += row_dot32<Dq>(gate + off, i, xt);
            u += row_dot32<Dq>(up + off, i, xt);
        }
    } else {
        for (int i = lane; i < groups; i += 32) {
            float v[8];
            const size_t b = static_cast<size_t>(i / kGroups) * Dq::kBytes;
            Dq::dequant8(gate + off + b, i % kGroups, v);
            g += dot8(v, xt + 8 * i);
            Dq::dequant8(up + off + b, i % kGroups, v);
            u += dot8(v, xt + 8 * i);
        }
    }
    g = warp_sum(g);
    u = warp_sum(u);
    if (lane == 0) hidden[static_cast<int64_t>(p) * rows + row] = silu(g) * u;
}

// out_pairs[p][row] = down_e[row] . hidden[p], e = ids[p].
template <class Dq>
__global__ void __launch_bounds__(kWarps * 32) moe_down_kernel(const uint8_t* __restrict__ down, size_t row_bytes,
                                                                int rows, int groups, const float* __restrict__ hidden,
                                                                const int32_t* __restrict__ ids,
                                                                float* __restrict__ out) {
    const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x & 31, p = blockIdx.y;
    if (row >= rows) return;
    constexpr int kGroups = Dq::kValues / 8;
    const uint8_t* wr = down + (static_cast<size_t>(ids[p]) * rows + row) * row_bytes;
    const float* h = hidden + static_cast<int64_t>(p) * groups * 8;
    float acc = 0.0f;
    if (groups % 4 == 0) {
        for (int i = lane; i < groups / 4; i += 32) acc += row_dot32<Dq>(wr, i, h);
    } else {
        for (int i = lane; i < groups; i += 32) {
            float v[8];
            Dq::dequant8(wr + static_cast<size_t>(i / kGroups) * Dq::kBytes, i % kGroups, v);
            acc += dot8(v, h + 8 * i);
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) out[static_cast<int64_t>(p) * rows + row] = acc;
}

void check_type(const DeviceMatrix& w) {
    if (!type_supported(w.type)) throw Error(std::string("no CUDA kernel for weight type ") + quant::type_name(w.type));
    if (w.ne0 % 8 != 0) throw Error("CUDA products need rows of a multiple of 8 values, got " + std::to_string(w.ne0));
}

}  // namespace

void gemv(const DeviceMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride, cudaStream_t s) {
    check_type(w);
    if (n < 1 || n > kGemvMaxCols) throw Error("gemv: batch of " + std::to_string(n) + " rows");
    if (reinterpret_cast<uintptr_t>(x) % 32 != 0 || x_stride % 8 != 0) throw Error("gemv: input rows must be 32-byte aligned");
    const int groups = static_cast<int>(w.ne0 / 8);
    const dim3 grid(blocks_for(w.rows, kWarps));
    with_dequantizer(w.type, [&]<class Dq>() {
        if (n == 1 && groups % 4 == 0)
            gemv1_kernel<Dq><<<grid, kWarps * 32, 0, s>>>(w.data, w.row_bytes, static_cast<int>(w.rows), groups / 4, x, y);
        else if (n == 1)
            gemv_kernel<Dq, 1><<<grid, kWarps * 32, 0, s>>>(w.data, w.row_bytes, static_cast<int>(w.rows), groups, x, x_stride, 1, y, y_stride);
        else if (n == 2)
            gemv_kernel<Dq, 2><<<grid, kWarps * 32, 0, s>>>(w.data, w.row_bytes, static_cast<int>(w.rows), groups, x, x_stride, 2, y, y_stride);
        else if (n <= 4)
            gemv_kernel<Dq, 4><<<grid, kWarps * 32, 0, s>>>(w.data, w.row_bytes, static_cast<int>(w.rows), groups, x, x_stride, static_cast<int>(n), y, y_stride);
        else
            gemv_kernel<Dq, kGemvMaxCols><<<grid, kWarps * 32, 0, s>>>(w.data, w.row_bytes, static_cast<int>(w.rows), groups, x, x_stride, static_cast<int>(n), y, y_stride);
    });
    STRATA_CUDA_LAUNCHED();
}

void gemv1_multi(const DeviceMatrix* ws, float* const* ys, int count, const float* x, cudaStream_t s) {
    if (count < 1 || count > kGemvBatchMax) throw Error("gemv1_multi: " + std::to_string(count) + " matrices");
    GemvBatch b{};
    int total = 0;
    for (int i = 0; i < count; ++i) {
        check_type(ws[i]);
        if (ws[i].type != ws[0].type || ws[i].ne0 != ws[0].ne0 || ws[i].row_bytes != ws[0].row_bytes || ws[i].ne0 % 32 != 0)
            throw Error("gemv1_multi: matrices differ in type or width");
        b.w[i] = ws[i].data;
        b.rows[i] = static_cast<int>(ws[i].rows);
        b.y[i] = ys[i];
        total += b.rows[i];
    }
    b.count = count;
    b.row_bytes = ws[0].row_bytes;
    if (reinterpret_cast<uintptr_t>(x) % 32 != 0) throw Error("gemv: input rows must be 32-byte aligned");
    with_dequantizer(ws[0].type, [&]<class Dq>() {
        gemv1_multi_kernel<Dq><<<blocks_for(total, kWarps), kWarps * 32, 0, s>>>(b, static_cast<int>(ws[0].ne0 / 32), x);
    });
    STRATA_CUDA_LAUNCHED();
}

void dequant_rows_f32(const DeviceMatrix& w, const int32_t* ids, int64_t n, float* out, cudaStream_t s) {
    check_type(w);
    const int groups = static_cast<int>(w.ne0 / 8);
    with_dequantizer(w.type, [&]<class Dq>() {
        dequant_kernel<Dq, float><<<blocks_for(n * groups, 256), 256, 0, s>>>(w.data, w.row_bytes, n, groups, ids, out);
    });
    STRATA_CUDA_LAUNCHED();
}

void dequant_matrix(const DeviceMatrix& w, bool to_bf16, void* out, cudaStream_t s) {
    check_type(w);
    const int groups = static_cast<int>(w.ne0 / 8);
    with_dequantizer(w.type, [&]<class Dq>() {
        const unsigned blocks = blocks_for(w.rows * groups, 256);
        if (to_bf16)
            dequant_kernel<Dq, __nv_bfloat16><<<blocks, 256, 0, s>>>(w.data, w.row_bytes, w.rows, groups, nullptr, static_cast<__nv_bfloat16*>(out));
        else
            dequant_kernel<Dq, float><<<blocks, 256, 0, s>>>(w.data, w.row_bytes, w.rows, groups, nullptr, static_cast<float*>(out));
    });
    STRATA_CUDA_LAUNCHED();
}

void moe_gate_up(const DeviceMatrix& gate, const DeviceMatrix& up, const float* x, int64_t n_pairs, int64_t k,
                 const int32_t* ids, float* hidden, cudaStream_t s) {
    check_type(gate);
    if (up.type != gate.type || up.row_bytes != gate.row_bytes) throw Error("expert gate and up weights differ in type");
    const int groups = static_cast<int>(gate.ne0 / 8);
    const dim3 grid(blocks_for(gate.rows, kWarps), static_cast<unsigned>(n_pairs));
    with_dequantizer(gate.type, [&]<class Dq>() {
        moe_gate_up_kernel<Dq><<<grid, kWarps * 32, 0, s>>>(gate.data, up.data, gate.row_bytes, static_cast<int>(gate.rows),
                                                             groups, x, ids, static_cast<int>(k), hidden);
    });
    STRATA_CUDA_LAUNCHED();
}

void moe_down(const DeviceMatrix& down, const float* hidden, int64_t n_pairs, const int32_t* ids, float* out_pairs,
              cudaStream_t s) {
    check_type(down);
    const int groups = static_cast<int>(down.ne0 / 8);
    const dim3 grid(blocks_for(down.rows, kWarps), static_cast<unsigned>(n_pairs));
    with_dequantizer(down.type, [&]<class Dq>() {
        moe_down_kernel<Dq><<<grid, kWarps * 32, 0, s>>>(down.data, down.row_bytes, static_cast<int>(down.rows), groups,
                                                          hidden, ids, out_pairs);
    });
    STRATA_CUDA_LAUNCHED();
}

}  // namespace strata::cuda
