// The 8-bit activation cache: one copy of an activation rounded to 8 bits per 32 values (ActQ8)
// lives in scratch slot kActX, with the f32 rows it was made from. Contract:
// - Norms and the decode attention ask out() for a copy to write alongside their output
//   (decode-sized rows: one fused kernel) and then remember() the rows it holds.
// - Products and experts ask for_input() for their input: the copy when it holds those rows,
//   else the input is rounded into the slot first (a kernel of its own, signed as kOpQuantize).
// - The copy goes stale when its rows are written: ops that may write anything forget() it
//   (CudaBackend::sign), ops that write a known range report it to wrote().
// Everything here is on the per-op path and inline; the copy's memory is the pool's.
#pragma once

#include <cstdint>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_graphs.cuh"
#include "cuda/cuda_tuning.h"
#include "cuda/cuda_vram_pool.cuh"

namespace strata::cuda {

class ActQ8Cache {
public:
    ActQ8Cache(VramPool& pool, ForwardGraphs& graphs, const CudaTuning& tuning, cudaStream_t stream)
        : pool_(pool), graphs_(graphs), int8_products_(tuning.int8_products), stream_(stream) {}

    // A copy for rows a kernel is about to write (null when decode products would not use one).
    const ActQ8* out(int64_t rows, int64_t dim) {
        if (!int8_products_ || rows > kOutMaxRows || dim % 32 != 0) return nullptr;
        act_ = act_q8_in(pool_.scratch(kActX, act_q8_bytes(rows, dim)), rows, dim);
        return &act_;
    }
    void remember(const float* src, int64_t rows, int64_t n) {
        src_ = src;
        rows_ = rows;
        n_ = n;
    }
    ActQ8 for_input(const float* x, int64_t rows, int64_t n) {
        if (src_ == x && rows_ == rows && n_ == n) return act_;
        act_ = act_q8_in(pool_.scratch(kActX, act_q8_bytes(rows, n)), rows, n);
        graphs_.record(kOpQuantize, x, rows, n, act_.q);
        remember(x, rows, n);
        if (graphs_.launching()) quantize_act_q8(x, rows, n, n, act_, stream_);
        return act_;
    }
    void forget() { src_ = nullptr; }
    // [out, out + n) was written: the copy goes if it was made from rows there.
    void wrote(const float* out, int64_t n) {
        if (src_ != nullptr && out < src_ + rows_ * n_ && src_ < out + n) src_ = nullptr;
    }

private:
    static constexpr int64_t kOutMaxRows = 32;  // the device-side MoE path's tokens (256 pairs / 8)

    VramPool& pool_;
    ForwardGraphs& graphs_;
    const bool int8_products_;
    const cudaStream_t stream_;
    ActQ8 act_{};                 // the copy in kActX
    const float* src_ = nullptr;  // the rows it was made from (null: none valid)
    int64_t rows_ = 0, n_ = 0;
};

}  // namespace strata::cuda
