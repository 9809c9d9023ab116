// The VRAM budget and the backend's own buffers (cuda_vram_pool.cuh).
#include "cuda/cuda_vram_pool.cuh"

#include <algorithm>

#include "cuda/cuda_common.cuh"

namespace strata::cuda {

VramPool::VramPool(uint64_t budget, int gpu, ForwardGraphs& graphs, cudaStream_t stream) : graphs_(graphs), stream_(stream) {
    size_t free_b = 0, total_b = 0;
    STRATA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const uint64_t margin = uint64_t{1} << 30;
    budget_ = budget != 0 ? budget : (free_b > margin ? free_b - margin : free_b / 2);
    if (budget_ > free_b)
        throw Error("--vram-budget " + mib(budget_) + " is more than the " + mib(free_b) + " free on GPU " + std::to_string(gpu));
}

VramPool::~VramPool() {
    for (auto& b : scratch_) cudaFree(b.ptr);
    for (auto& [p, n] : allocs_) cudaFree(p);
}

void VramPool::reserve(size_t bytes, const char* what) {
    if (!fits(bytes) && give_back_) give_back_();  // spare memory first
    if (!fits(bytes))
        throw Error(std::string("CUDA: ") + what + " need " + mib(bytes) + " more; " + mib(used_) + " of the " + mib(budget_) +
                    " budget is in use (raise --vram-budget or lower the KV size)");
}

float* VramPool::alloc_floats(size_t n) {
    graphs_.abandon_capture();  // a forward that still allocates is not steady yet
    const size_t bytes = std::max<size_t>(256, n * sizeof(float));
    reserve(bytes, "activations");
    void* p = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&p, bytes));
    STRATA_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    allocs_[p] = bytes;
    used_ += bytes;
    return static_cast<float*>(p);
}

void VramPool::free_floats(float* p) {
    if (p == nullptr) return;
    graphs_.abandon_capture();
    const auto it = allocs_.find(p);
    if (it == allocs_.end()) return;
    cudaStreamSynchronize(stream_);
    cudaFree(p);
    used_ -= it->second;
    allocs_.erase(it);
}

void VramPool::grow(Buffer& b, size_t bytes) {
    graphs_.abandon_capture();
    sync_stream(stream_);
    if (b.ptr != nullptr) {
        cudaFree(b.ptr);
        used_ -= b.bytes;
        b = {};
    }
    const size_t want = std::max<size_t>(bytes + bytes / 4, 1 << 16);
    reserve(want, "scratch buffers");
    STRATA_CUDA_CHECK(cudaMalloc(&b.ptr, want));
    b.bytes = want;
    used_ += want;
}

}  // namespace strata::cuda
