// The CUDA backend's entry points (plain C++: callers need no CUDA headers). Only compiled when
// the build has STRATA_CUDA; src/backend/backend_factory.cpp is the one caller.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace strata::cuda {

// True when the CUDA runtime sees at least one device; otherwise false with the reason.
bool device_available(std::string* why);

struct CudaOptions {
    uint64_t vram_budget = 0;       // 0: the free memory less 1 GiB
    bool graphs = true;             // record decode-sized forwards as CUDA graphs and replay them
    int64_t graph_max_tokens = 32;  // largest forward recorded (cuBLAS products included)
    bool times = false;             // report where replayed forwards' time went, at close
    bool dependent_launch = true;   // programmatic dependent launch where the GPU has it (sm_90+)
    bool int8_products = true;      // decode products of Q4_K/Q5_K/Q6_K/Q8_0/IQ3_XXS weights take
                                    // their input rounded to 8 bits per 32 values (as the CPU does)
    bool half_kv = true;            // f16 KV caches for models with quantised attention weights
    bool weight_prefetch = true;    // products ask L2 for their weight rows ahead (sm_90+)
    int moe_order = -1;             // experts' grids pairs-major for calls of several tokens
                                    // (-1), never (0) or always (1): cuda::set_moe_order
    int64_t attention_octet_min = 48;  // decode attention splits of this many positions or more
                                       // walk 8 positions a warp at a time (cuda::attention)
    int64_t attention_split_min = 4;  // positions a one-token decode attention split covers at
                                      // least (batches: that times the tokens, up to 16)
    int64_t moe_gate_rows = 0, moe_down_rows = 0;  // experts' rows per warp (1, 2, 4; 0: by shape)
    int64_t gemv_rows = 0, gemv_warps = 1;  // one-input GEMVs' rows per warp (0: by shape) and warps per row
    bool gemv_stage = true;         // one-input GEMVs copy their rows to shared memory before the wait
};
// A backend on GPU `index`.
std::unique_ptr<backend::Backend> make_cuda_backend(int index, const CudaOptions& o);

// GB/s of a 2 GiB device-to-device copy (read + write bytes over the median time of 5 copies).
double copy_bandwidth(int index);

}  // namespace strata::cuda
