// Recorded forwards: decode-sized forwards captured as CUDA graphs and replayed (CudaBackend's
// forward_begin / forward_end). Contract:
// - begin() picks the forward's mode. Eager: its ops launch kernels (graphs off, a forward larger
//   than graph_max_tokens, a size that must stay eager, a capture that would not start).
//   Capture: its ops launch into a graph being recorded. Replay: a graph of this size exists and
//   the last replay found one, so its ops only stage their host inputs and sign.
// - Every op calls record() with its op code and arguments (pointers, sizes): the signature.
//   launching() says whether it also launches. Ops that cannot be part of a recording call
//   abandon_capture() (an allocation: a forward that still allocates is not steady) or decline()
//   (the forward can be neither recorded nor replayed); end() then returns false and the caller
//   runs the forward again eagerly.
// - end() instantiates a capture, or finds the graph whose signature equals the replay's, copies
//   the staged inputs up in one copy, launches it, does the deferred host copies and waits.
// - drop() destroys every graph; whoever moves device memory a graph reads calls it (weights
//   uploaded again, staging regrown, bf16 weight copies given back).
// Host cost per op: record() appends to a vector outside Eager mode, nothing else.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/cuda_tuning.h"

namespace strata::cuda {

class HostStaging;

// What each op of a forward signs as (the first word of its part of the signature).
enum OpCode : uint64_t {
    kOpCopy = 1,
    kOpCopyRows,
    kOpCopyToHost,
    kOpGetRows,
    kOpProduct,
    kOpRmsNorm,
    kOpAdd,
    kOpSwiglu,
    kOpMulSigmoid,
    kOpRope,
    kOpKvStore,
    kOpAttention,
    kOpRoute,
    kOpMoe,
    kOpConv,
    kOpGates,
    kOpDeltaRule,
    kOpL2Norm,
    kOpAddRmsNorm,
    kOpQkNormRope,
    kOpQuantize,
    kOpArgmax
};

class ForwardGraphs {
public:
    enum class Mode { Eager, Capture, Replay, Abandoned };

    ForwardGraphs(const CudaTuning& tuning, cudaStream_t stream) : tuning_(tuning), stream_(stream) {}
    ~ForwardGraphs() { drop(); }
    ForwardGraphs(const ForwardGraphs&) = delete;
    ForwardGraphs& operator=(const ForwardGraphs&) = delete;

    // Waits for the stream (a capture left open by a forward that threw is abandoned first),
    // restarts the staging area, and picks the mode of a forward of n_tokens tokens.
    void begin(int64_t n_tokens, bool may_replay, HostStaging& staging);
    // Ends the forward: true when its work is done (eagerly, or by the graph launched now),
    // false when it must run again eagerly.
    bool end(const HostStaging& staging);

    Mode mode() const { return mode_; }
    bool launching() const { return mode_ == Mode::Eager || mode_ == Mode::Capture; }

    template <class... A>
    void record(uint64_t op, A... args) {
        if (mode_ != Mode::Eager) {
            sig_.push_back(op);
            (sig_.push_back(word(args)), ...);
        }
    }
    // A replayed forward's copy of n floats from device src to host dst, done after its graph.
    void defer_copy_to_host(const float* src, float* dst, size_t n) { deferred_.push_back({src, dst, n}); }

    void abandon_capture() {
        if (mode_ == Mode::Capture) abandon();
    }
    void decline() {
        abandon_capture();
        if (mode_ == Mode::Replay) mode_ = Mode::Abandoned;
    }
    // Forwards of the current size run eagerly from now on (their MoE groups pairs on the host).
    void keep_size_eager() { eager_sizes_.insert(fwd_tokens_); }
    void forget_eager_sizes() { eager_sizes_.clear(); }  // another model may route fewer pairs a token
    void drop();

    // STRATA_CUDA_TIMES=1: medians of the replayed forwards' host walk and graph, on stderr.
    void report_times() const;

private:
    static constexpr size_t kGraphsPerSize = 8;
    struct Graph {
        std::vector<uint64_t> sig;
        cudaGraphExec_t exec;
    };
    struct HostCopy {
        const float* src;
        float* dst;
        size_t n;
    };
    template <class T>
    static uint64_t word(T v) {
        if constexpr (std::is_pointer_v<T>) return reinterpret_cast<uint64_t>(v);
        else if constexpr (std::is_same_v<T, float>) {
            uint32_t u;
            std::memcpy(&u, &v, 4);
            return u;
        } else return static_cast<uint64_t>(v);
    }
    void abandon();

    const CudaTuning& tuning_;
    const cudaStream_t stream_;
    Mode mode_ = Mode::Eager;
    std::vector<uint64_t> sig_;
    std::vector<HostCopy> deferred_;
    std::unordered_map<int64_t, std::vector<Graph>> graphs_;  // by forward size
    std::unordered_set<int64_t> eager_sizes_;                 // forward sizes whose MoE groups pairs on the host
    std::unordered_map<int64_t, bool> missed_;                // the last replay of that size found no graph
    int64_t fwd_tokens_ = 0;
    std::chrono::steady_clock::time_point walk_start_;
    std::vector<double> walk_us_, run_us_;
};

}  // namespace strata::cuda
