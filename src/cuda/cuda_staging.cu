// The staging area's allocation (cuda_staging.cuh).
#include "cuda/cuda_staging.cuh"

namespace strata::cuda {

HostStaging::~HostStaging() {
    cudaFreeHost(host_);
    cudaFree(dev_);
}

void HostStaging::grow(size_t bytes) {
    graphs_.drop();  // their copy nodes read the old staging area
    if (host_ != nullptr) {
        sync_stream(stream_);
        cudaFreeHost(host_);
        cudaFree(dev_);
        host_ = dev_ = nullptr;
        pool_.refund(cap_);
        cap_ = 0;
    }
    pool_.reserve(bytes, "staging");
    STRATA_CUDA_CHECK(cudaMallocHost(&host_, bytes));
    STRATA_CUDA_CHECK(cudaMalloc(&dev_, bytes));
    cap_ = bytes;
    pool_.charge(bytes);
    used_ = 0;
    ++generation_;
}

}  // namespace strata::cuda
