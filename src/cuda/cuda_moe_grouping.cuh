// MoE calls of more (token, expert) pairs than the device-side path takes, grouped by expert on
// the host. Contract:
// - group() copies the routed ids to the host (it waits for the stream: eager forwards only) and
//   lays the pairs out by expert: rows offsets()[e] .. offsets()[e + 1] of the grouped layout
//   are expert e's pairs, token_of()[row] the token a row reads, slot_row()[p] the row of pair p.
//   An id outside [0, n_expert) is an Error.
// - grouped_products() runs the layer's experts on that layout for quantised experts: each chunk
//   of experts dequantised to bf16 (<= kScratchBytes of scratch) and multiplied in one grouped
//   cuBLAS call (bf16 in and out: grouped GEMMs take no f32 output for bf16 operands), SwiGLU
//   and the weighted sum on bf16, into a.out. It returns false, once and for all (grouped_ok()),
//   when this cuBLAS has no grouped bf16 GEMM for the shapes; the caller then multiplies expert
//   by expert.
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_staging.cuh"
#include "cuda/cuda_vram_pool.cuh"
#include "cuda/cuda_weights.cuh"

namespace strata::cuda {

class MoeGrouping {
public:
    MoeGrouping(VramPool& pool, HostStaging& staging, const DeviceWeights& weights, const CudaDevice& dev)
        : pool_(pool), staging_(staging), weights_(weights), stream_(dev.stream()), blas_(dev.blas()) {}

    void group(const int32_t* ids, int64_t n_pairs, int64_t k, int64_t n_expert);
    const std::vector<int32_t>& offsets() const { return offsets_; }
    const std::vector<int32_t>& token_of() const { return token_of_; }
    const std::vector<int32_t>& slot_row() const { return slot_row_; }

    bool grouped_ok() const { return grouped_gemm_ok_; }
    // xg: the pairs' inputs gathered in grouped order; hg, hu, outp: scratch sized for floats
    // (they hold bf16 here); slot_row: device copy of slot_row().
    bool grouped_products(const backend::MoeArgs& a, const float* xg, float* hg, float* hu, float* outp, const int32_t* slot_row);
    // One grouped bf16 GEMM over cnt experts: rows [row0[i], row0[i] + n[i]) of out (out_dim bf16
    // each) = W_i times the same rows of in (in_dim bf16 each), W_i [out_dim][in_dim] bf16 at
    // a[i] (host arrays). False when this cuBLAS has no grouped GEMM for the shapes.
    bool grouped_gemm(const void* const* a, const int32_t* row0, const int32_t* n, int cnt, const void* in, int64_t in_dim,
                      void* out, int64_t out_dim);
    static constexpr size_t kScratchBytes = size_t{256} << 20;  // dequantised experts, counted in the VRAM budget

private:
    VramPool& pool_;
    HostStaging& staging_;
    const DeviceWeights& weights_;
    const cudaStream_t stream_;
    const cublasHandle_t blas_;
    std::vector<int32_t> ids_, offsets_, fill_, token_of_, slot_row_, active_;
    bool grouped_gemm_ok_ = true;
    // cublasGemmGroupedBatchedEx's host argument arrays, one entry per expert of a chunk.
    std::vector<int> m_, n_, k_, ldc_, one_;
    std::vector<float> alpha_, beta_;
    std::vector<cublasOperation_t> ta_, tb_;
    std::vector<const void*> a_, b_, ptrs_;
    std::vector<int32_t> row0_, rows_n_;
    std::vector<void*> c_;
};

}  // namespace strata::cuda
