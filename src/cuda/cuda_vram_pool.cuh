// The VRAM budget of a CUDA backend and the device memory it hands out itself. Contract:
// - The budget is --vram-budget, or the free memory less 1 GiB when the backend is made.
//   Everything the backend allocates is counted against it: the buffers below, and what other
//   parts allocate themselves and charge() (weights, staging, the cuBLAS workspace, bf16 copies).
// - reserve() is the check before an allocation: when it would not fit, the give-back function
//   (set_give_back: the bf16 weight copies, memory that is only spare) runs first; still short,
//   it throws naming the allocation and the budget.
// - Activations (alloc_floats) are zeroed, freed one by one; scratch buffers are one per slot,
//   grown (by a quarter more) and never shrunk. A device pointer a slot handed out stays valid
//   until the slot next grows, which waits for the stream first.
// - Allocating while a forward is being captured abandons the capture (the forward is not
//   steady yet); a replay is unaffected (its graph keeps the addresses it recorded).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "cuda/cuda_graphs.cuh"

namespace strata::cuda {

inline std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20) + " MiB"; }

// The scratch buffers, one per use.
enum ScratchSlot : size_t {
    kDenseW,       // a weight dequantised for cuBLAS (products of 9+ tokens, grouped experts)
    kDenseX,       // a product's input rounded to bf16
    kAttnPartial,  // decode attention's split partial results
    kMoeHidden,    // experts' hidden rows (gate, or gate/up fused)
    kMoePairs,     // experts' outputs per (token, expert) pair
    kMoeX,         // inputs gathered by expert (host-grouped MoE)
    kMoeUp,        // up's rows (host-grouped MoE)
    kActX,         // the 8-bit copy of an activation (ActQ8Cache)
    kActHidden,    // the experts' hidden rows rounded to 8 bits
    kArgmax,       // argmax_rows' ids
    kSample,       // sample_rows' jobs, edits and results
    kDeltaChunks,  // the chunked delta rule's work
    kMoeHostRows,  // an expert store's host share of a grouped MoE call
    kScratchSlots
};

class VramPool {
public:
    // budget 0: the free memory less 1 GiB; more than is free is an Error (gpu: for the message).
    VramPool(uint64_t budget, int gpu, ForwardGraphs& graphs, cudaStream_t stream);
    ~VramPool();
    VramPool(const VramPool&) = delete;
    VramPool& operator=(const VramPool&) = delete;

    void set_give_back(std::function<void()> give_back) { give_back_ = std::move(give_back); }

    uint64_t budget() const { return budget_; }
    uint64_t used() const { return used_; }
    bool fits(size_t bytes) const { return used_ + bytes <= budget_; }
    void reserve(size_t bytes, const char* what);
    void charge(size_t bytes) { used_ += bytes; }
    void refund(size_t bytes) { used_ -= bytes; }

    float* alloc_floats(size_t n);
    void free_floats(float* p);

    void* scratch(ScratchSlot slot, size_t bytes) {
        Buffer& b = scratch_[slot];
        if (b.bytes < bytes) grow(b, bytes);
        return b.ptr;
    }

private:
    struct Buffer {
        void* ptr = nullptr;
        size_t bytes = 0;
    };
    void grow(Buffer& b, size_t bytes);

    ForwardGraphs& graphs_;
    const cudaStream_t stream_;
    uint64_t budget_ = 0, used_ = 0;
    std::function<void()> give_back_;
    std::unordered_map<void*, size_t> allocs_;  // activations, by address
    std::array<Buffer, kScratchSlots> scratch_{};
};

}  // namespace strata::cuda
