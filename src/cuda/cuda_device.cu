// The device a backend runs on (cuda_device.cuh), and the device-level entry points of
// cuda_backend.h.
#include "cuda/cuda_device.cuh"

#include <algorithm>
#include <atomic>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"

namespace strata::cuda {

CudaDevice::CudaDevice(int index, bool dependent_launch) {
    STRATA_CUDA_CHECK(cudaSetDevice(index));
    // Process-wide; only code compiled for sm_90+ carries the kernels' wait.
    allow_dependent_launch(dependent_launch && kernel_code_version() >= 90);
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    blas_check(cublasCreate(&blas_), "create");
    blas_check(cublasSetStream(blas_, stream_), "set stream");
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm_, cudaDevAttrMultiProcessorCount, index));
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&max_shared_, cudaDevAttrMaxSharedMemoryPerBlockOptin, index));
}

CudaDevice::~CudaDevice() {
    cublasDestroy(blas_);
    cudaFree(blas_workspace_);
    cudaStreamDestroy(stream_);
}

void CudaDevice::make_blas_workspace(size_t bytes) {
    STRATA_CUDA_CHECK(cudaMalloc(&blas_workspace_, bytes));
    blas_check(cublasSetWorkspace(blas_, blas_workspace_, bytes), "set workspace");
}

bool device_available(std::string* why) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why != nullptr) *why = std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
        cudaGetLastError();
        return false;
    }
    if (n == 0) {
        if (why != nullptr) *why = "no CUDA device is visible";
        return false;
    }
    return true;
}

double copy_bandwidth(int index) {
    STRATA_CUDA_CHECK(cudaSetDevice(index));
    const size_t bytes = size_t{2} << 30;
    void *a = nullptr, *b = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&a, bytes));
    STRATA_CUDA_CHECK(cudaMalloc(&b, bytes));
    STRATA_CUDA_CHECK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    STRATA_CUDA_CHECK(cudaEventCreate(&e0));
    STRATA_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < 6; ++r) {
        STRATA_CUDA_CHECK(cudaEventRecord(e0));
        STRATA_CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
        STRATA_CUDA_CHECK(cudaEventRecord(e1));
        STRATA_CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        STRATA_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (r > 0) ms.push_back(t);  // the first copy warms up
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    std::sort(ms.begin(), ms.end());
    return 2.0 * static_cast<double>(bytes) / (static_cast<double>(ms[ms.size() / 2]) * 1e-3) / 1e9;
}

namespace {
// Kernels are launched only by backends, each of which has called allow_dependent_launch first.
// Process-wide, not a knob's value: launch_kernel (every launcher) reads it, and a process with
// GPUs of two generations must run without for both.
std::atomic<bool> g_dependent_launch{true};
}  // namespace
void allow_dependent_launch(bool on) {
    if (!on) g_dependent_launch.store(false, std::memory_order_relaxed);
}
bool dependent_launch() { return g_dependent_launch.load(std::memory_order_relaxed); }

}  // namespace strata::cuda
