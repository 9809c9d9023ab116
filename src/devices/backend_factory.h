// Picks the compute backend a command runs on (the one module that knows every backend): `--device cpu` (every build) or
// `--device cuda` (builds with STRATA_CUDA and a visible NVIDIA GPU).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace strata::devices {

struct BackendOptions {
    std::string device = "cpu";      // "cpu" | "cuda" | "cuda:N"
    int threads = 2;                 // CPU threads
    uint64_t vram_budget = 0;        // bytes of device memory the backend may use; 0: what is free less 1 GiB
    bool cuda_graphs = true;         // replay decode steps as CUDA graphs (STRATA_CUDA_GRAPHS=0 turns it off)
    bool cuda_int8_products = true;  // decode products on 8-bit activations (STRATA_CUDA_Q8=0 turns it off)
};

// Throws strata::Error naming the problem: an unknown device, a build without CUDA, no GPU.
std::unique_ptr<backend::Backend> make_backend(const BackendOptions& o);

// True when this build has the CUDA backend and a GPU is visible; otherwise false and why.
bool cuda_usable(std::string* why);

// GB/s of a large device-to-device copy on GPU `index` (bytes read plus bytes written, over the
// time): the bandwidth figure decode speed is measured against. Throws without CUDA.
double cuda_copy_bandwidth(int index);

// "12G", "800M", "1.5G", or plain bytes -> bytes; throws strata::Error on anything else.
uint64_t parse_byte_size(const std::string& text);

}  // namespace strata::devices
