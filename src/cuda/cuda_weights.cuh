// Weight residency: the model's tensors in device memory, and bf16 copies of dense weights kept
// in memory the budget leaves spare. Contract:
// - upload() copies every tensor once (refusing types without a kernel and a model over the
//   budget, with the sizes), found again by its host address (the model's mapped file, alive as
//   long as the model). A host address that now holds another tensor (other bytes or type) gets
//   a fresh copy. Uploading drops the recorded graphs (they hold weights' device addresses).
// - matrix() / expert() / f32() look a tensor up on every op: an Error names a tensor never
//   uploaded.
// - bf16_copy() is the bf16 copy of a dense quantised weight for products of 9+ tokens, made on
//   first use while the budget has room, in an eager run only (a capture is abandoned, so the
//   copy is made in the eager run of that forward); nullptr otherwise, and the caller dequantises
//   into scratch. The copies are spare memory: give_back_bf16_copies(), which the VRAM pool calls
//   when an allocation would not fit, frees them all (and the graphs that read them).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_graphs.cuh"
#include "cuda/cuda_vram_pool.cuh"

namespace strata::cuda {

class DeviceWeights {
public:
    DeviceWeights(VramPool& pool, ForwardGraphs& graphs, cudaStream_t stream) : pool_(pool), graphs_(graphs), stream_(stream) {}
    ~DeviceWeights();
    DeviceWeights(const DeviceWeights&) = delete;
    DeviceWeights& operator=(const DeviceWeights&) = delete;

    void upload(std::span<const backend::Weight> weights, const backend::Backend::ProgressFn& progress);

    const uint8_t* data(const backend::Weight& w) const {
        const auto it = weights_.find(w.data);
        if (it == weights_.end() || it->second.type != w.type || it->second.bytes != bytes_of(w))
            throw Error("tensor " + w.name() + " is not in GPU memory (weights must be uploaded first)");
        return it->second.ptr;
    }
    DeviceMatrix matrix(const backend::Weight& w) const {
        return {w.type, data(w), w.ne[1] * w.ne[2] * w.ne[3], w.ne[0], w.row_bytes};
    }
    // Expert slice e of a 3-D expert tensor as its own matrix.
    DeviceMatrix expert(const backend::Weight& w, int64_t e) const {
        return {w.type, data(w) + static_cast<size_t>(e) * static_cast<size_t>(w.ne[1]) * w.row_bytes, w.ne[1], w.ne[0],
                w.row_bytes};
    }
    const float* f32(const backend::Weight& w, int64_t n) const {
        if (w.type != quant::Type::F32 || w.ne[0] * w.rows() != n)
            throw Error("tensor " + w.name() + " must be f32 with " + std::to_string(n) + " values");
        return reinterpret_cast<const float*>(data(w));
    }

    // Products of 9+ tokens, with their bf16 copies against dequantising for every call: 30B-A3B
    // Q4_K_M batch 16 1,333 -> 1,437 t/s, batch 32 1,565 -> 1,699, pp512 13,297 -> 13,633 (H200).
    const void* bf16_copy(const DeviceMatrix& w) {
        if (const auto it = bf16_.find(w.data); it != bf16_.end()) return it->second.ptr;
        const size_t bytes = static_cast<size_t>(w.rows) * static_cast<size_t>(w.ne0) * 2;
        if (!pool_.fits(bytes)) return nullptr;
        if (graphs_.mode() != ForwardGraphs::Mode::Eager) {
            graphs_.abandon_capture();  // allocate in the eager run of this forward
            return nullptr;
        }
        return make_bf16_copy(w, bytes);
    }
    void give_back_bf16_copies();

private:
    static size_t bytes_of(const backend::Weight& w) { return w.row_bytes * static_cast<size_t>(w.rows()); }
    const void* make_bf16_copy(const DeviceMatrix& w, size_t bytes);

    struct DeviceWeight {
        uint8_t* ptr;
        size_t bytes;
        quant::Type type;
    };
    struct Copy {
        void* ptr = nullptr;
        size_t bytes = 0;
    };

    VramPool& pool_;
    ForwardGraphs& graphs_;
    const cudaStream_t stream_;
    std::unordered_map<const uint8_t*, DeviceWeight> weights_;  // by the tensor's host address
    std::unordered_map<const uint8_t*, Copy> bf16_;             // by the weight's device address
    uint64_t bf16_bytes_ = 0;
};

}  // namespace strata::cuda
