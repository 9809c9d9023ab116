// The CUDA backend's tuning knobs, one row each in STRATA_CUDA_TUNING below: the CudaTuning
// field, how its environment variable is read (the kind), the default, the variable, and one
// line saying what it does. tuning_from_environment() reads every row when a backend is made
// (src/backend/backend_factory.cpp); the backend keeps the result as a const member and hands it
// to the launchers that read a knob. Adding a knob is one row here plus its use (and its line in
// docs/cuda.md, which tests/backend/cuda_tuning_test.cpp checks). Flags of the command line
// (--vram-budget, ...) are not knobs: they come in through backend::BackendOptions.
// Plain C++ (no CUDA headers): compiled in every build, so the factory and the tests use it alone.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace strata::cuda {

// How a row's variable is read (tuning_from); unset or empty keeps the default everywhere.
//   Switch: "0" or "1"; any other value keeps the default (as the switches always were read).
//   Auto: -1 (decided per call) unless "0" or "1".
//   Count: a non-negative integer. Positive: at least 1. RowsPerWarp: 0 (by shape), 1, 2 or 4.
//   WarpsPerRow: 1 or 2. A count that breaks its rule is an Error naming the variable.
struct Switch {
    using type = bool;
};
struct Auto {
    using type = int;
};
struct Count {
    using type = int64_t;
};
struct Positive {
    using type = int64_t;
};
struct RowsPerWarp {
    using type = int64_t;
};
struct WarpsPerRow {
    using type = int64_t;
};

// X(field, kind, default, variable, what it does)
#define STRATA_CUDA_TUNING(X)                                                                                               \
    X(graphs, Switch, true, "STRATA_CUDA_GRAPHS", "0: no CUDA graphs (every forward launches its kernels one by one)")      \
    X(graph_max_tokens, Count, 32, "STRATA_CUDA_GRAPH_MAX_TOKENS", "largest forward recorded as a graph (8: GEMV-only)")    \
    X(times, Switch, false, "STRATA_CUDA_TIMES", "1: print where replayed forwards' time went when the backend closes")     \
    X(dependent_launch, Switch, true, "STRATA_CUDA_PDL", "0: no programmatic dependent launch (only ever on for sm_90+)")   \
    X(int8_products, Switch, true, "STRATA_CUDA_Q8", "0: decode products keep f32 inputs (no 8-bit rounding)")              \
    X(f32_kv, Switch, false, "STRATA_CUDA_KV_F32", "1: f32 KV caches also for models with quantised attention weights")     \
    X(weight_prefetch, Switch, true, "STRATA_CUDA_PREFETCH", "0: products do not ask L2 for their weight rows ahead")       \
    X(gemv_stage, Switch, true, "STRATA_CUDA_GEMV_STAGE",                                                                   \
      "0: one-input GEMVs ask L2 for their rows instead of copying them to shared memory before the wait")                  \
    X(moe_pair_major, Auto, -1, "STRATA_CUDA_MOE_PAIR_MAJOR",                                                               \
      "experts' grids pairs-major: 1 always, 0 never (default: for calls of several tokens)")                               \
    X(attention_octet_min, Count, 48, "STRATA_CUDA_ATTN_OCTET_MIN",                                                         \
      "decode attention splits of this many positions or more walk 8 positions a warp (0: all)")                            \
    X(attention_split_min, Positive, 4, "STRATA_CUDA_ATTN_SPLIT_MIN",                                                       \
      "positions a one-token decode attention split covers at least (batches: times the tokens, up to 16)")                 \
    X(moe_gate_rows, RowsPerWarp, 0, "STRATA_CUDA_MOE_GATE_ROWS", "the experts' gate/up kernel's rows per warp")            \
    X(moe_down_rows, RowsPerWarp, 0, "STRATA_CUDA_MOE_DOWN_ROWS", "the experts' down kernel's rows per warp")               \
    X(gemv_rows, RowsPerWarp, 0, "STRATA_CUDA_GEMV_ROWS", "one-input GEMVs' rows per warp")                                 \
    X(gemv_warps, WarpsPerRow, 1, "STRATA_CUDA_GEMV_WARPS", "one-input GEMVs' warps per row, where they take 1 row a warp") \
    X(host_link, Switch, true, "STRATA_CUDA_HOST_LINK",                                                                     \
      "0: an expert store's host share of a decode step joins through a host callback and copies, not the mapped link")

struct CudaTuning {
#define STRATA_CUDA_TUNING_FIELD(field, kind, value, variable, doc) kind::type field = value;
    STRATA_CUDA_TUNING(STRATA_CUDA_TUNING_FIELD)
#undef STRATA_CUDA_TUNING_FIELD
};

// A row of the table as text: for listings and the check that docs/cuda.md names every knob.
struct TuningKnob {
    const char* field;
    const char* variable;
    const char* default_value;
    const char* doc;
};
std::span<const TuningKnob> tuning_knobs();

// Every knob from value_of(variable) (null: unset); throws strata::Error on a bad count.
CudaTuning tuning_from(const std::function<const char*(const char* variable)>& value_of);
// The same from the process environment (read again for every backend made).
CudaTuning tuning_from_environment();

}  // namespace strata::cuda
