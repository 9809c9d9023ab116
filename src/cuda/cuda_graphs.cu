// Recorded forwards (cuda_graphs.cuh): the once-a-forward parts.
#include "cuda/cuda_graphs.cuh"

#include <algorithm>
#include <cstdio>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_staging.cuh"

namespace strata::cuda {

// A decode-sized forward (at most graph_max_tokens tokens: GEMVs, cuBLAS products on the
// stream and the device-side MoE path, nothing that waits for the host) is captured into a graph
// and launched; later forwards of the same size first run their ops in replay mode, which only
// stages the host inputs (at the same staging addresses the graph reads; one copy before the
// launch) and builds the signature: every op with its pointers and sizes. A graph with that
// signature is launched; otherwise the forward is declined and runs eagerly, and the next one is
// captured anew.
void ForwardGraphs::begin(int64_t n_tokens, bool may_replay, HostStaging& staging) {
    if (tuning_.times) walk_start_ = std::chrono::steady_clock::now();
    abandon_capture();  // a forward that threw half way
    mode_ = Mode::Eager;
    sync_stream(stream_);
    staging.restart();
    sig_.clear();
    deferred_.clear();
    fwd_tokens_ = n_tokens;
    mode_ = Mode::Eager;
    if (!tuning_.graphs || !may_replay || n_tokens > tuning_.graph_max_tokens || eager_sizes_.contains(n_tokens)) return;
    if (!graphs_[n_tokens].empty() && !missed_[n_tokens]) {
        mode_ = Mode::Replay;
        return;
    }
    if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) == cudaSuccess) mode_ = Mode::Capture;
    else cudaGetLastError();
}

bool ForwardGraphs::end(const HostStaging& staging) {
    const auto walked = std::chrono::steady_clock::now();
    const Mode mode = mode_;
    mode_ = Mode::Eager;
    if (mode == Mode::Eager) return true;
    if (mode == Mode::Abandoned) return false;
    cudaGraphExec_t exec = nullptr;
    if (mode == Mode::Capture) {
        cudaGraph_t graph = nullptr;
        if (cudaStreamEndCapture(stream_, &graph) != cudaSuccess || graph == nullptr) {
            cudaGetLastError();
            return false;
        }
        const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        auto& list = graphs_[fwd_tokens_];
        if (list.size() >= kGraphsPerSize) {
            cudaGraphExecDestroy(list.front().exec);
            list.erase(list.begin());
        }
        list.push_back({sig_, exec});
        missed_[fwd_tokens_] = false;
    } else {
        for (const Graph& g : graphs_[fwd_tokens_])
            if (g.sig == sig_) exec = g.exec;
        if (exec == nullptr) {
            missed_[fwd_tokens_] = true;
            return false;
        }
    }
    // Every input the forward's ops staged, in one copy ahead of the graph (a graph with a
    // copy node per input spent more time in those ~7 small copies a layer than in kernels).
    if (staging.used() > 0)
        STRATA_CUDA_CHECK(cudaMemcpyAsync(staging.device(), staging.host(), staging.used(), cudaMemcpyHostToDevice, stream_));
    STRATA_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    for (const HostCopy& c : deferred_)
        STRATA_CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src, c.n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    sync_stream(stream_);
    if (tuning_.times && mode == Mode::Replay) {
        const auto done = std::chrono::steady_clock::now();
        walk_us_.push_back(std::chrono::duration<double, std::micro>(walked - walk_start_).count());
        run_us_.push_back(std::chrono::duration<double, std::micro>(done - walked).count());
    }
    return true;
}

void ForwardGraphs::drop() {
    for (auto& [n, list] : graphs_)
        for (auto& g : list) cudaGraphExecDestroy(g.exec);
    graphs_.clear();
}

void ForwardGraphs::abandon() {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g != nullptr) cudaGraphDestroy(g);
    cudaGetLastError();
    mode_ = Mode::Abandoned;
}

// The host walk that stages inputs and signs the ops, then the graph until its results are on
// the host; they run one after the other.
void ForwardGraphs::report_times() const {
    if (walk_us_.empty()) return;
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    std::fprintf(stderr, "cuda: %zu replayed forwards: host walk %.0f us, graph and copies %.0f us (medians)\n", walk_us_.size(),
                 median(walk_us_), median(run_us_));
}

}  // namespace strata::cuda
