// Weight residency (cuda_weights.cuh): uploads and the bf16 copies' memory.
#include "cuda/cuda_weights.cuh"

namespace strata::cuda {

DeviceWeights::~DeviceWeights() {
    for (auto& [host, dev] : weights_) cudaFree(dev.ptr);
    for (auto& [w, b] : bf16_) cudaFree(b.ptr);
}

void DeviceWeights::upload(std::span<const backend::Weight> weights, const backend::Backend::ProgressFn& progress) {
    uint64_t total = 0;
    for (const backend::Weight& w : weights) {
        const bool vector = w.ne[1] * w.ne[2] * w.ne[3] == 1;
        if (!vector && !type_supported(w.type))
            throw Error("tensor " + w.name() + " has type " + quant::type_name(w.type) + ", which has no CUDA kernel");
        total += bytes_of(w);
    }
    give_back_bf16_copies();  // device addresses of weights may be reused
    graphs_.forget_eager_sizes();
    if (!pool_.fits(total))
        throw Error("the model's weights need " + mib(total) + " of GPU memory; the budget is " + mib(pool_.budget()) + " (" +
                    mib(pool_.used()) + " in use). Raise --vram-budget, or run on the CPU (--device cpu)");
    uint64_t done = 0;
    graphs_.drop();  // recorded kernels hold device addresses of weights
    for (const backend::Weight& w : weights) {
        const size_t n = bytes_of(w);
        if (const auto it = weights_.find(w.data); it != weights_.end()) {
            if (it->second.bytes == n && it->second.type == w.type) continue;
            // Host memory reused for another tensor: the old copy is stale.
            sync_stream(stream_);
            cudaFree(it->second.ptr);
            pool_.refund(it->second.bytes);
            weights_.erase(it);
        }
        void* dev = nullptr;
        STRATA_CUDA_CHECK(cudaMalloc(&dev, n));
        STRATA_CUDA_CHECK(cudaMemcpy(dev, w.data, n, cudaMemcpyHostToDevice));
        weights_[w.data] = {static_cast<uint8_t*>(dev), n, w.type};
        pool_.charge(n);
        done += n;
        if (progress) progress(done, total);
    }
}

const void* DeviceWeights::make_bf16_copy(const DeviceMatrix& w, size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    pool_.charge(bytes);
    bf16_bytes_ += bytes;
    bf16_[w.data] = {p, bytes};
    dequant_matrix(w, true, p, stream_);
    return p;
}

void DeviceWeights::give_back_bf16_copies() {
    if (bf16_.empty()) return;
    graphs_.abandon_capture();
    sync_stream(stream_);
    graphs_.drop();  // recorded products read the copies
    for (auto& [w, b] : bf16_) cudaFree(b.ptr);
    bf16_.clear();
    pool_.refund(bf16_bytes_);
    bf16_bytes_ = 0;
}

}  // namespace strata::cuda
