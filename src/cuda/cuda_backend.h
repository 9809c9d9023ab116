// The CUDA backend's entry points (plain C++: callers need no CUDA headers). Only compiled when
// the build has STRATA_CUDA; src/backend/backend_factory.cpp is the one caller.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "cuda/cuda_tuning.h"

namespace strata::cuda {

// True when the CUDA runtime sees at least one device; otherwise false with the reason.
bool device_available(std::string* why);

struct CudaOptions {
    uint64_t vram_budget = 0;  // --vram-budget; 0: the free memory less 1 GiB
    CudaTuning tuning;         // the STRATA_CUDA_* knobs (cuda_tuning.h)
};
// A backend on GPU `index`.
std::unique_ptr<backend::Backend> make_cuda_backend(int index, const CudaOptions& o);

// GB/s of a 2 GiB device-to-device copy (read + write bytes over the median time of 5 copies).
double copy_bandwidth(int index);

}  // namespace strata::cuda
