#include "backend/backend_factory.h"

#include <cmath>
#include <cstdlib>

#include "backend/cpu_backend.h"
#include "util/error.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace strata::backend {

bool cuda_usable(std::string* why) {
#ifdef STRATA_HAVE_CUDA
    return cuda::device_available(why);
#else
    if (why != nullptr) *why = "this strata was built without CUDA (configure with nvcc on the PATH or -DSTRATA_CUDA=ON)";
    return false;
#endif
}

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
    if (o.device == "cpu") return std::make_unique<CpuBackend>(o.threads);
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
        // Switches for A/B measurements: STRATA_CUDA_GRAPHS=0, STRATA_CUDA_PDL=0, STRATA_CUDA_Q8=0,
        // STRATA_CUDA_KV_F32=1, STRATA_CUDA_PREFETCH=0, STRATA_CUDA_TIMES=1,
        // STRATA_CUDA_MOE_PAIR_MAJOR=0|1,
        // STRATA_CUDA_GRAPH_MAX_TOKENS=N (largest forward recorded as a graph; 8: GEMV-only forwards),
        // STRATA_CUDA_ATTN_SPLIT_MIN=N (positions a decode attention split covers at least),
        // STRATA_CUDA_ATTN_OCTET_MIN=N (0: every decode attention split walks 8 positions a warp),
        // STRATA_CUDA_MOE_GATE_ROWS=N / STRATA_CUDA_MOE_DOWN_ROWS=N (the experts' kernels' rows
        // per warp: 1, 2 or 4; unset: chosen by shape), STRATA_CUDA_GEMV_ROWS=N and
        // STRATA_CUDA_GEMV_WARPS=N (one-input GEMVs: rows per warp 1, 2 or 4; warps per row 1 or 2),
        // STRATA_CUDA_GEMV_STAGE=0 (one-input GEMVs ask L2 for their rows instead of copying them
        // into shared memory before the wait).
        const auto env_is = [](const char* name, const char* value) {
            const char* v = std::getenv(name);
            return v != nullptr && std::string(v) == value;
        };
        cuda::CudaOptions co;
        co.vram_budget = o.vram_budget;
        co.graphs = o.cuda_graphs && !env_is("STRATA_CUDA_GRAPHS", "0");
        co.dependent_launch = !env_is("STRATA_CUDA_PDL", "0");
        co.times = env_is("STRATA_CUDA_TIMES", "1");
        co.int8_products = o.cuda_int8_products && !env_is("STRATA_CUDA_Q8", "0");
        co.half_kv = !env_is("STRATA_CUDA_KV_F32", "1");
        co.weight_prefetch = !env_is("STRATA_CUDA_PREFETCH", "0");
        co.gemv_stage = !env_is("STRATA_CUDA_GEMV_STAGE", "0");
        if (env_is("STRATA_CUDA_MOE_PAIR_MAJOR", "0")) co.moe_order = 0;
        if (env_is("STRATA_CUDA_MOE_PAIR_MAJOR", "1")) co.moe_order = 1;
        const auto env_count = [](const char* name, int64_t& out) {
            const char* v = std::getenv(name);
            if (v == nullptr || *v == '\0') return;
            char* end = nullptr;
            const long long n = std::strtoll(v, &end, 10);
            if (*end != '\0' || n < 0) throw Error(std::string(name) + "=" + v + ": expected a count");
            out = n;
        };
        env_count("STRATA_CUDA_ATTN_OCTET_MIN", co.attention_octet_min);
        env_count("STRATA_CUDA_GRAPH_MAX_TOKENS", co.graph_max_tokens);
        env_count("STRATA_CUDA_ATTN_SPLIT_MIN", co.attention_split_min);
        if (co.attention_split_min < 1) throw Error("STRATA_CUDA_ATTN_SPLIT_MIN must be at least 1");
        env_count("STRATA_CUDA_MOE_GATE_ROWS", co.moe_gate_rows);
        env_count("STRATA_CUDA_MOE_DOWN_ROWS", co.moe_down_rows);
        for (const int64_t r : {co.moe_gate_rows, co.moe_down_rows})
            if (r != 0 && r != 1 && r != 2 && r != 4) throw Error("STRATA_CUDA_MOE_GATE_ROWS / _DOWN_ROWS: 1, 2 or 4");
        env_count("STRATA_CUDA_GEMV_ROWS", co.gemv_rows);
        env_count("STRATA_CUDA_GEMV_WARPS", co.gemv_warps);
        if ((co.gemv_rows != 0 && co.gemv_rows != 1 && co.gemv_rows != 2 && co.gemv_rows != 4) || (co.gemv_warps != 1 && co.gemv_warps != 2))
            throw Error("STRATA_CUDA_GEMV_ROWS: 1, 2 or 4; STRATA_CUDA_GEMV_WARPS: 1 or 2");
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

}  // namespace strata::backend
