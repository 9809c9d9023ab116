// How fast could a batch-1 decode step of a given model file go on this GPU, whatever the kernels
// computed? This program replays the byte pattern of one step with no arithmetic at all: every
// phase of a layer only streams the bytes the real step reads there (16-byte loads, perfectly
// coalesced, XOR-folded so nothing is optimised away), and phases follow each other as the
// model's data dependencies force them to. The result is an upper bound on the share of copy
// bandwidth any design of that shape can reach, set beside the same bytes read with no
// dependencies at all.
//
// Phases of one layer, in dependency order (each needs the one before it finished):
//   in      the products of the normed hidden row: q, k, v (attention layers) or the Gated
//           DeltaNet input projections; norms ride along
//   mix     attention over the KV cache (depth positions, f16 K and V) or the recurrent state
//           read (Gated DeltaNet layers, f32): the only non-weight bytes, not in the per-token sum
//   out     the output projection (attn_output / ssm_out)
//   router  the routing product (ffn_gate_inp, and the shared expert's gate if any)
//   gate_up the chosen experts' gate and up rows (and the shared expert's): chosen by routing
//   down    the chosen experts' down rows (and the shared expert's)
// then the output head. The experts a layer uses are drawn at random once (seeded); a step
// reads ~2 GB, so nothing from the previous step is left in the 50 MB L2.
//
// Ways to run the phases (each timed as the median of repeated 16-step runs):
//   stream               every tile of a step in one grid, no dependencies: the read ceiling
//   kernels              one kernel per phase, captured in a CUDA graph, launched with
//                        programmatic dependent launch (the CUDA backend's design today)
//   kernels+prefetch     as above, and blocks of phases whose addresses do not depend on
//                        routing ask L2 for their tiles before waiting on the previous kernel
//   kernels+loadahead    as above, but such blocks issue the loads of their first tile into
//                        registers before waiting
//   persistent           one kernel of SMs x occupancy blocks; a grid barrier between phases
//   persistent+prefetch  as above, and each phase first asks L2 for the tiles of the phases after
//                        it whose addresses are already known (up to the next routing), <= 24 MB
//   persistent+loadahead as persistent, and before each barrier a block issues the loads of its
//                        first tile of the next phase when that phase's addresses are known
//
//   bench_cuda_decode_bound -m MODEL [-d DEPTH] [-r ROUNDS] [-s STEPS] [-B BLOCKS_PER_SM]
//
// -B: resident blocks per SM of the persistent grid and the largest per-phase grids (default:
// the persistent kernel's occupancy limit, 5 an SM on an H200).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cuda/cuda_common.cuh"
#include "devices/backend_factory.h"
#include "gguf/gguf.h"
#include "model/architecture.h"

namespace {

using strata::bench::median;

constexpr int kThreads = 256;
constexpr int kLoadsPerThread = 4;
constexpr uint32_t kTileUnits = kThreads * kLoadsPerThread;  // 16-byte units: 16 KiB tiles
constexpr size_t kPrefetchWindow = size_t{24} << 20;

struct Tile {
    const uint4* p;
    uint32_t units;  // ≤ kTileUnits
};

enum Phase { kIn, kMix, kOut, kRouter, kGateUp, kDown, kHead, kPhases };
const char* const kPhaseNames[kPhases] = {"in", "mix", "out", "router", "gate_up", "down", "head"};

struct PhaseRange {
    int begin, end;        // its tiles
    int pf_begin, pf_end;  // tiles it asks L2 for first (persistent+prefetch)
    bool known_early;      // addresses independent of this layer's routing
    bool next_known;       // the next phase's addresses are known while this one runs
};

// One tile's loads of this thread, issued together (kLoadsPerThread in flight).
struct TileLoads {
    uint4 v[kLoadsPerThread];
    __device__ __forceinline__ void issue(const Tile& t) {
#pragma unroll
        for (int u = 0; u < kLoadsPerThread; ++u) {
            const uint32_t k = threadIdx.x + u * kThreads;
            v[u] = k < t.units ? __ldg(t.p + k) : make_uint4(0, 0, 0, 0);
        }
    }
    __device__ __forceinline__ uint32_t folded() const {
        uint32_t acc = 0;
#pragma unroll
        for (int u = 0; u < kLoadsPerThread; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        return acc;
    }
};

// Streams tiles [begin + first, end) with a stride of `stride` tiles.
__device__ __forceinline__ uint32_t read_tiles(const Tile* tiles, int begin, int end, int first, int stride) {
    uint32_t acc = 0;
    for (int i = begin + first; i < end; i += stride) {
        TileLoads l;
        l.issue(tiles[i]);
        acc ^= l.folded();
    }
    return acc;
}

__device__ __forceinline__ void prefetch_tiles(const Tile* tiles, int begin, int end, int first, int stride) {
    if (threadIdx.x != 0) return;
    for (int i = begin + first; i < end; i += stride) strata::cuda::prefetch_l2(tiles[i].p, size_t{tiles[i].units} * 16);
}

// The sink: written only when the fold hits a value it practically never takes, so the loads
// stay live without a store per block.
__device__ __forceinline__ void keep(uint32_t acc, uint32_t* sink) {
    if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void stream_kernel(const Tile* tiles, int n, uint32_t* sink) {
    keep(read_tiles(tiles, 0, n, blockIdx.x, gridDim.x), sink);
}

// mode 0: wait, then read; 1: ask L2 for the block's tiles first; 2: issue the loads of the
// block's first tile first (into registers), then wait. 1 and 2 only where the addresses are
// known before the previous phase ends.
__global__ void phase_kernel(const Tile* tiles, int begin, int end, int mode, uint32_t* sink) {
    if (mode == 1) prefetch_tiles(tiles, begin, end, blockIdx.x, gridDim.x);
    TileLoads first;
    const int i0 = begin + static_cast<int>(blockIdx.x);
    const bool ahead = mode == 2 && i0 < end;
    if (ahead) first.issue(tiles[i0]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    uint32_t acc = ahead ? first.folded() : 0;
    acc ^= read_tiles(tiles, begin, end, static_cast<int>(blockIdx.x) + (ahead ? static_cast<int>(gridDim.x) : 0), gridDim.x);
    keep(acc, sink);
}

// A grid barrier, one use per phase (its counters zeroed before each step): blocks arrive on
// one of kBarrierGroups counters; the last of a group arrives on the top counter, and the last
// there raises the phase's flag, which everyone else waits on. Fewer atomics meet on one address
// than with a single counter, and waiting blocks poll a line nobody writes until it is set.
constexpr int kBarrierGroups = 8;
struct BarrierState {
    unsigned group[kBarrierGroups];
    unsigned top;
    unsigned flag;
};
__device__ __forceinline__ void grid_barrier(BarrierState* b) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned g = blockIdx.x % kBarrierGroups;
        const unsigned in_group = (gridDim.x - g + kBarrierGroups - 1) / kBarrierGroups;
        bool last = atomicAdd(&b->group[g], 1u) == in_group - 1;
        if (last) last = atomicAdd(&b->top, 1u) == kBarrierGroups - 1;
        if (last) {
            __threadfence();
            asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(&b->flag), "r"(1u) : "memory");
        } else {
            unsigned seen;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(&b->flag) : "memory");
            } while (seen == 0);
        }
    }
    __syncthreads();
}

// mode 0: read each phase after the barrier; 1: first ask L2 for the known tiles ahead
// (pf_begin, pf_end); 2: before arriving at a barrier, issue the loads of the block's first tile
// of the next phase when its addresses are known.
__global__ void persistent_kernel(const Tile* tiles, const PhaseRange* phases, int n_phases, int mode, BarrierState* barriers,
                                  uint32_t* sink) {
    uint32_t acc = 0;
    TileLoads pending;
    bool has_pending = false;
    for (int p = 0; p < n_phases; ++p) {
        const PhaseRange r = phases[p];
        if (mode == 1) prefetch_tiles(tiles, r.pf_begin, r.pf_end, blockIdx.x, gridDim.x);
        if (has_pending) acc ^= pending.folded();
        acc ^= read_tiles(tiles, r.begin, r.end, static_cast<int>(blockIdx.x) + (has_pending ? static_cast<int>(gridDim.x) : 0),
                          gridDim.x);
        has_pending = false;
        if (p + 1 < n_phases) {
            const PhaseRange& n = phases[p + 1];
            const int i0 = n.begin + static_cast<int>(blockIdx.x);
            if (mode == 2 && r.next_known && i0 < n.end) {
                pending.issue(tiles[i0]);
                has_pending = true;
            }
            grid_barrier(barriers + p);
        }
    }
    keep(acc, sink);
}

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "bench_cuda_decode_bound: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

struct Step {
    std::vector<Tile> tiles;
    std::vector<PhaseRange> phases;
    std::vector<int> phase_kind;
    double weight_bytes = 0;  // what bench_model counts per token (no KV or state bytes)
    double other_bytes = 0;
};

// The whole 16-byte units of [p, p + bytes) as tiles (an expert's slice of a tensor may start
// off a 16-byte boundary; the < 32 bytes trimmed at its ends are not read).
void add_tiles(Step& s, const uint8_t* p, size_t bytes) {
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t{15};
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes) & ~uintptr_t{15};
    const size_t units = hi > lo ? (hi - lo) / 16 : 0;
    for (size_t u = 0; u < units; u += kTileUnits)
        s.tiles.push_back(
            {reinterpret_cast<const uint4*>(lo) + u, static_cast<uint32_t>(std::min<size_t>(kTileUnits, units - u))});
}

}  // namespace

int main(int argc, char** argv) {
    std::string path;
    int depth = 0, rounds = 5, steps = 16, blocks_per_sm = 0;
    const auto usage = [] {
        std::fprintf(stderr, "usage: bench_cuda_decode_bound -m MODEL [-d DEPTH] [-r ROUNDS] [-s STEPS] [-B BLOCKS_PER_SM]\n");
        return 2;
    };
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) return usage();
        if (a == "-m") path = argv[++i];
        else if (a == "-d") depth = std::atoi(argv[++i]);
        else if (a == "-r") rounds = std::max(1, std::atoi(argv[++i]));
        else if (a == "-s") steps = std::max(1, std::atoi(argv[++i]));
        else if (a == "-B") blocks_per_sm = std::max(1, std::atoi(argv[++i]));
        else return usage();
    }
    if (path.empty()) return usage();
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        std::fprintf(stderr, "bench_cuda_decode_bound: no CUDA device\n");
        return 1;
    }
    try {
        const auto file = strata::gguf::File::open(path);
        strata::model::ModelConfig c = strata::model::read_config(*file);
        c.tied_output = file->find_tensor("output.weight") == nullptr;
        cudaDeviceProp prop{};
        check(cudaGetDeviceProperties(&prop, 0), "properties");

        // Device copies of every tensor a step reads (contents do not matter, sizes and places do).
        struct LayerTensors {
            std::vector<std::pair<const strata::gguf::TensorInfo*, uint8_t*>> in, out, router, gate_up_shared, down_shared,
                experts_gate_up, experts_down;
        };
        std::vector<LayerTensors> layers(static_cast<size_t>(c.n_layer));
        std::vector<std::pair<const strata::gguf::TensorInfo*, uint8_t*>> head;
        std::vector<void*> allocations;
        double allocated = 0;
        for (const auto& t : file->tensors()) {
            const bool block = t.name.rfind("blk.", 0) == 0;
            int layer = -1;
            std::string rest;
            if (block) {
                const size_t dot = t.name.find('.', 4);
                layer = std::atoi(t.name.substr(4, dot - 4).c_str());
                rest = t.name.substr(dot + 1);
                if (layer >= c.n_layer) continue;  // MTP blocks: not run by a decode step
            } else if (t.name == "token_embd.weight" && !c.tied_output) {
                continue;  // one row of it per token
            }
            void* d = nullptr;
            check(cudaMalloc(&d, t.n_bytes), "cudaMalloc");
            check(cudaMemset(d, 0x5a, t.n_bytes), "cudaMemset");
            allocations.push_back(d);
            allocated += static_cast<double>(t.n_bytes);
            const auto entry = std::make_pair(&t, static_cast<uint8_t*>(d));
            if (!block) {
                head.push_back(entry);
                continue;
            }
            auto& L = layers[static_cast<size_t>(layer)];
            const bool experts = rest.find("_exps.") != std::string::npos;
            const bool shared = rest.find("_shexp") != std::string::npos;
            if (experts) (rest.rfind("ffn_down", 0) == 0 ? L.experts_down : L.experts_gate_up).push_back(entry);
            else if (rest.rfind("ffn_gate_inp", 0) == 0) L.router.push_back(entry);
            else if (shared) (rest.rfind("ffn_down", 0) == 0 ? L.down_shared : L.gate_up_shared).push_back(entry);
            else if (rest.rfind("attn_output", 0) == 0 || rest.rfind("ssm_out", 0) == 0) L.out.push_back(entry);
            else L.in.push_back(entry);
        }
        // The mix phase's bytes: the KV cache at `depth` (f16) or a Gated DeltaNet state (f32).
        const size_t kv_bytes = static_cast<size_t>(std::max(depth, 1)) * static_cast<size_t>(c.n_head_kv) *
                                static_cast<size_t>(c.head_dim_k + c.head_dim_v) * 2;
        const size_t state_bytes =
            c.ssm_d_inner > 0 ? static_cast<size_t>(c.ssm_d_inner) * static_cast<size_t>(c.ssm_d_state) * 4 : 0;
        std::vector<uint8_t*> mix(static_cast<size_t>(c.n_layer));
        for (auto& m : mix) {
            const size_t b = std::max(kv_bytes, state_bytes) + 16;
            check(cudaMalloc(reinterpret_cast<void**>(&m), b), "cudaMalloc");
            check(cudaMemset(m, 0x33, b), "cudaMemset");
            allocations.push_back(m);
        }

        Step s;
        std::mt19937 rng(1234);
        for (int64_t l = 0; l < c.n_layer; ++l) {
            auto& L = layers[static_cast<size_t>(l)];
            const bool gdn = std::any_of(L.in.begin(), L.in.end(),
                                         [](const auto& e) { return e.first->name.find("ssm_") != std::string::npos; });
            std::vector<int> ids(static_cast<size_t>(c.n_expert));
            for (int i = 0; i < c.n_expert; ++i) ids[static_cast<size_t>(i)] = i;
            std::shuffle(ids.begin(), ids.end(), rng);
            ids.resize(static_cast<size_t>(c.n_expert_used));
            auto phase = [&](int kind, auto&& body) {
                const int begin = static_cast<int>(s.tiles.size());
                body();
                s.phases.push_back({begin, static_cast<int>(s.tiles.size()), 0, 0, kind != kGateUp && kind != kDown, false});
                s.phase_kind.push_back(kind);
            };
            auto whole = [&](const auto& list) {
                for (const auto& [t, d] : list) {
                    add_tiles(s, d, t->n_bytes);
                    s.weight_bytes += static_cast<double>(t->n_bytes);
                }
            };
            auto chosen = [&](const auto& list) {
                for (const auto& [t, d] : list) {
                    const size_t per = t->n_bytes / static_cast<size_t>(c.n_expert);
                    for (int e : ids) add_tiles(s, d + per * static_cast<size_t>(e), per);
                    s.weight_bytes += static_cast<double>(per) * static_cast<double>(ids.size());
                }
            };
            phase(kIn, [&] { whole(L.in); });
            phase(kMix, [&] {
                const size_t b = gdn ? state_bytes : kv_bytes;
                add_tiles(s, mix[static_cast<size_t>(l)], b);
                s.other_bytes += static_cast<double>(b);
            });
            phase(kOut, [&] { whole(L.out); });
            phase(kRouter, [&] { whole(L.router); });
            phase(kGateUp, [&] {
                chosen(L.experts_gate_up);
                whole(L.gate_up_shared);
            });
            phase(kDown, [&] {
                chosen(L.experts_down);
                whole(L.down_shared);
            });
        }
        {
            const int begin = static_cast<int>(s.tiles.size());
            for (const auto& [t, d] : head) {
                add_tiles(s, d, t->n_bytes);
                s.weight_bytes += static_cast<double>(t->n_bytes);
            }
            s.phases.push_back({begin, static_cast<int>(s.tiles.size()), 0, 0, true, false});
            s.phase_kind.push_back(kHead);
        }
        for (size_t p = 0; p + 1 < s.phases.size(); ++p)
            s.phases[p].next_known = s.phases[p + 1].known_early || s.phase_kind[p] == kGateUp;
        // Prefetch windows: from the first tile not yet asked for, through the following phases
        // whose addresses are known (a layer's experts only from its gate_up phase on), ≤ 24 MB.
        {
            int asked = 0;  // phases [0, asked) were asked for already
            for (size_t p = 0; p < s.phases.size(); ++p) {
                auto& r = s.phases[p];
                asked = std::max(asked, static_cast<int>(p) + 1);
                r.pf_begin = r.pf_end =
                    s.phases[static_cast<size_t>(std::min<int>(asked, static_cast<int>(s.phases.size()) - 1))].begin;
                size_t bytes = 0;
                int q = asked;
                for (; q < static_cast<int>(s.phases.size()); ++q) {
                    const auto& n = s.phases[static_cast<size_t>(q)];
                    const bool known = n.known_early || (s.phase_kind[p] == kGateUp && q == static_cast<int>(p) + 1);
                    if (!known) break;
                    size_t nb = 0;
                    for (int i = n.begin; i < n.end; ++i) nb += size_t{s.tiles[static_cast<size_t>(i)].units} * 16;
                    if (bytes + nb > kPrefetchWindow && q > asked) break;
                    bytes += nb;
                    r.pf_end = n.end;
                }
                if (r.pf_end > r.pf_begin) asked = q;
            }
        }

        const double copy_bw = strata::devices::cuda_copy_bandwidth(0) * 1e9;
        std::printf("model: %s (%s, %lld layers, %lld/%lld experts), %.2f GiB on the device\n", path.c_str(), c.arch_name.c_str(),
                    static_cast<long long>(c.n_layer), static_cast<long long>(c.n_expert_used),
                    static_cast<long long>(c.n_expert), allocated / (1 << 30));
        std::printf("device: %s, %d SMs; copy bandwidth %.1f GB/s\n", prop.name, prop.multiProcessorCount, copy_bw / 1e9);
        std::printf("a step: %zu phases, %zu tiles of <= 16 KiB, %.1f MB of weights (+ %.1f MB KV/state at depth %d)\n",
                    s.phases.size(), s.tiles.size(), s.weight_bytes / 1e6, s.other_bytes / 1e6, depth);
        {
            double per_kind[kPhases] = {};
            for (size_t p = 0; p < s.phases.size(); ++p)
                for (int i = s.phases[p].begin; i < s.phases[p].end; ++i)
                    per_kind[s.phase_kind[p]] += static_cast<double>(s.tiles[static_cast<size_t>(i)].units) * 16;
            std::printf("bytes by phase (MB):");
            for (int k = 0; k < kPhases; ++k) std::printf(" %s %.1f", kPhaseNames[k], per_kind[k] / 1e6);
            std::printf("\n");
        }

        Tile* d_tiles = nullptr;
        PhaseRange* d_phases = nullptr;
        BarrierState* d_barriers = nullptr;
        uint32_t* d_sink = nullptr;
        const int n_tiles = static_cast<int>(s.tiles.size());
        const int n_phases = static_cast<int>(s.phases.size());
        check(cudaMalloc(&d_tiles, s.tiles.size() * sizeof(Tile)), "cudaMalloc");
        check(cudaMalloc(&d_phases, s.phases.size() * sizeof(PhaseRange)), "cudaMalloc");
        check(cudaMalloc(&d_barriers, s.phases.size() * sizeof(BarrierState)), "cudaMalloc");
        check(cudaMalloc(&d_sink, sizeof(uint32_t)), "cudaMalloc");
        check(cudaMemcpy(d_tiles, s.tiles.data(), s.tiles.size() * sizeof(Tile), cudaMemcpyHostToDevice), "copy");
        check(cudaMemcpy(d_phases, s.phases.data(), s.phases.size() * sizeof(PhaseRange), cudaMemcpyHostToDevice), "copy");

        int per_sm = 0;
        check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, kThreads, 0), "occupancy");
        if (blocks_per_sm > 0) per_sm = std::min(per_sm, blocks_per_sm);
        const int resident = per_sm * prop.multiProcessorCount;
        cudaStream_t stream;
        check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");

        // One step of one-kernel-per-phase as a graph (captured with programmatic dependent launch).
        auto capture_kernels = [&](int mode) {
            cudaGraph_t g;
            check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
            for (int p = 0; p < n_phases; ++p) {
                const auto& r = s.phases[static_cast<size_t>(p)];
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3(static_cast<unsigned>(std::max(1, std::min(r.end - r.begin, resident))));
                cfg.blockDim = dim3(kThreads);
                cfg.stream = stream;
                cudaLaunchAttribute attr[1] = {};
                attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                attr[0].val.programmaticStreamSerializationAllowed = 1;
                cfg.attrs = attr;
                cfg.numAttrs = 1;
                check(cudaLaunchKernelEx(&cfg, phase_kernel, static_cast<const Tile*>(d_tiles), r.begin, r.end,
                                         r.known_early ? mode : 0, d_sink),
                      "launch");
            }
            check(cudaStreamEndCapture(stream, &g), "capture");
            cudaGraphExec_t e;
            check(cudaGraphInstantiate(&e, g, 0), "instantiate");
            cudaGraphDestroy(g);
            return e;
        };
        const cudaGraphExec_t graphs[3] = {capture_kernels(0), capture_kernels(1), capture_kernels(2)};

        auto run_step = [&](int mode) {
            switch (mode) {
                case 0: stream_kernel<<<resident, kThreads, 0, stream>>>(d_tiles, n_tiles, d_sink); break;
                case 1:
                case 2:
                case 3: check(cudaGraphLaunch(graphs[mode - 1], stream), "graph"); break;
                default: {
                    check(cudaMemsetAsync(d_barriers, 0, s.phases.size() * sizeof(BarrierState), stream), "memset");
                    int pmode = mode - 4;
                    const Tile* t = d_tiles;
                    const PhaseRange* ph = d_phases;
                    int np = n_phases;
                    void* args[] = {&t, &ph, &np, &pmode, &d_barriers, &d_sink};
                    check(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_kernel), dim3(resident), dim3(kThreads),
                                                      args, 0, stream),
                          "cooperative launch");
                }
            }
            check(cudaGetLastError(), "launch");
        };
        const char* const mode_names[] = {"stream",
                                          "kernels",
                                          "kernels+prefetch",
                                          "kernels+loadahead",
                                          "persistent",
                                          "persistent+prefetch",
                                          "persistent+loadahead"};
        constexpr int kModes = 7;
        std::vector<std::vector<double>> ms(kModes);
        cudaEvent_t e0, e1;
        check(cudaEventCreate(&e0), "event");
        check(cudaEventCreate(&e1), "event");
        for (int round = 0; round <= rounds; ++round) {  // round 0 warms up
            for (int mode = 0; mode < kModes; ++mode) {
                check(cudaEventRecord(e0, stream), "event");
                for (int i = 0; i < steps; ++i) run_step(mode);
                check(cudaEventRecord(e1, stream), "event");
                check(cudaEventSynchronize(e1), "sync");
                float t = 0;
                check(cudaEventElapsedTime(&t, e0, e1), "elapsed");
                if (round > 0) ms[static_cast<size_t>(mode)].push_back(t / steps);
            }
        }
        std::printf("%d blocks of %d threads resident (%d per SM); medians of %d rounds of %d steps\n", resident, kThreads,
                    per_sm, rounds, steps);
        std::printf("| way | µs / step | steps/s | weight bytes / s | share of copy bandwidth |\n|---|---|---|---|---|\n");
        for (int mode = 0; mode < kModes; ++mode) {
            const double t = median(ms[static_cast<size_t>(mode)]) * 1e-3;
            std::printf("| %s | %.1f | %.1f | %.1f GB/s | %.0f %% |\n", mode_names[mode], t * 1e6, 1.0 / t,
                        s.weight_bytes / t / 1e9, 100.0 * s.weight_bytes / t / copy_bw);
        }
        for (void* p : allocations) cudaFree(p);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda_decode_bound: %s\n", e.what());
        return 1;
    }
    return 0;
}
