// The GPU a CUDA backend runs on: made current, programmatic dependent launch allowed or not for
// the process, the backend's one stream and its cuBLAS handle (whose workspace is the backend's
// own memory, so recorded forwards' cuBLAS calls use fixed addresses), and the limits kernels are
// shaped by. Made first and destroyed last of a backend's parts: everything else queues on the
// stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "util/error.h"

namespace strata::cuda {

inline void blas_check(cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS)
        throw Error(std::string("cuBLAS: ") + what + " failed with status " + std::to_string(static_cast<int>(st)));
}

class CudaDevice {
public:
    // dependent_launch: STRATA_CUDA_PDL's setting; on only where the device runs sm_90+ code.
    CudaDevice(int index, bool dependent_launch);
    ~CudaDevice();
    CudaDevice(const CudaDevice&) = delete;
    CudaDevice& operator=(const CudaDevice&) = delete;

    // cuBLAS's workspace: `bytes` of device memory (the caller has counted them in the budget).
    void make_blas_workspace(size_t bytes);

    cudaStream_t stream() const { return stream_; }
    cublasHandle_t blas() const { return blas_; }
    int n_sm() const { return n_sm_; }
    int max_shared() const { return max_shared_; }  // shared memory a block may opt in to

private:
    cudaStream_t stream_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    void* blas_workspace_ = nullptr;
    int n_sm_ = 1;
    int max_shared_ = 48 * 1024;
};

}  // namespace strata::cuda
