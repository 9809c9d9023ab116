#include "devices/backend_factory.h"

#include <cmath>
#include <cstdlib>

#include "backend/cpu_backend.h"
#include "util/error.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace strata::devices {

bool cuda_usable(std::string* why) {
#ifdef STRATA_HAVE_CUDA
    return cuda::device_available(why);
#else
    if (why != nullptr) *why = "this strata was built without CUDA (configure with nvcc on the PATH or -DSTRATA_CUDA=ON)";
    return false;
#endif
}

std::unique_ptr<backend::Backend> make_backend(const BackendOptions& o) {
    if (o.device == "cpu") return std::make_unique<backend::CpuBackend>(o.threads);
    if (o.device == "cuda" || o.device.starts_with("cuda:")) {
        int index = 0;
        if (o.device.size() > 5) {
            char* end = nullptr;
            const long v = std::strtol(o.device.c_str() + 5, &end, 10);
            if (end == o.device.c_str() + 5 || *end != '\0' || v < 0 || v > 64)
                throw Error("--device " + o.device + ": expected cuda or cuda:N with N a GPU index");
            index = static_cast<int>(v);
        }
        std::string why;
        if (!cuda_usable(&why)) throw Error("--device " + o.device + ": " + why);
#ifdef STRATA_HAVE_CUDA
        // The STRATA_CUDA_* knobs are read by the CUDA backend's table (src/cuda/cuda_tuning.h);
        // this backend's options can only turn graphs and 8-bit products off.
        cuda::CudaOptions co;
        co.vram_budget = o.vram_budget;
        co.tuning = cuda::tuning_from_environment();
        co.tuning.graphs = co.tuning.graphs && o.cuda_graphs;
        co.tuning.int8_products = co.tuning.int8_products && o.cuda_int8_products;
        return cuda::make_cuda_backend(index, co);
#else
        (void)index;
#endif
    }
    throw Error("--device " + o.device + ": expected cpu, cuda or cuda:N");
}

double cuda_copy_bandwidth(int index) {
#ifdef STRATA_HAVE_CUDA
    return cuda::copy_bandwidth(index);
#else
    (void)index;
    throw Error("this strata was built without CUDA");
#endif
}

uint64_t parse_byte_size(const std::string& text) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || !std::isfinite(v) || v < 0) throw Error("'" + text + "' is not a size (e.g. 12G, 800M)");
    const std::string unit(end);
    double mul = 1;
    if (unit == "K" || unit == "KiB" || unit == "k") mul = 1024.0;
    else if (unit == "M" || unit == "MiB") mul = 1024.0 * 1024;
    else if (unit == "G" || unit == "GiB") mul = 1024.0 * 1024 * 1024;
    else if (unit == "T" || unit == "TiB") mul = 1024.0 * 1024 * 1024 * 1024;
    else if (!unit.empty()) throw Error("'" + text + "': unknown size unit '" + unit + "' (use K, M, G or T)");
    const double bytes = v * mul;
    if (bytes > 1e18) throw Error("'" + text + "' is too large");
    return static_cast<uint64_t>(bytes);
}

}  // namespace strata::devices
