// The CUDA backend: weights copied once into device memory (found again by their host address),
// activations and states in device memory, every op a kernel on one stream. Host-side inputs of
// an op (positions, block tables, token ids) go up through a pinned staging area that is reused
// only after the stream has been synchronised. Products: a GEMV for up to kGemvMaxCols input
// rows (decode), else the weight dequantised to bf16 (f32 for float weights) and cuBLAS. MoE
// decode reads the routed expert ids on the device; large batches group pairs by expert.
// Forwards of up to tuning_.graph_max_tokens tokens are recorded as CUDA graphs and replayed.
#include "cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/cuda_common.cuh"
#include "gguf/gguf.h"
#include "util/fp16.h"

namespace strata::cuda {

namespace {

using backend::AttentionArgs;
using backend::DeltaRuleArgs;
using backend::GdnGateArgs;
using backend::KvCacheView;
using backend::MatmulArgs;
using backend::MoeArgs;
using backend::QkNormRopeArgs;
using backend::RopeParams;
using model::Weight;

void blas_check(cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLAS: ") + what + " failed with status " + std::to_string(static_cast<int>(st)));
}

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20) + " MiB"; }

// Pairs of a MoE call up to which experts are read through their ids (no grouping on the host).
constexpr int64_t kMoeIndexedPairs = 256;
// Above that, experts are dequantised to bf16 in chunks of at most this many bytes for grouped
// cuBLAS products (scratch counted in the VRAM budget).
constexpr size_t kGroupedScratchBytes = size_t{256} << 20;
// cuBLAS's workspace (ours, so that recorded calls use fixed memory).
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
// Attention batches of at least this many tokens may take the tensor-core kernel.
constexpr int64_t kAttnTiledMinTokens = 16;
// Gated DeltaNet runs of at least this many tokens take the chunked delta rule (three kernels of
// 64-token chunks); shorter ones the token-by-token kernel. 80B-A3B geometry, H200, chunked
// against token by token: pp4096 +30 %, pp512 +12 %, pp128 even, pp64 and pp32 within noise.
constexpr int64_t kDeltaChunkedMinTokens = 128;

using quant::is_float_type;

class CudaBackend final : public backend::Backend {
public:
    CudaBackend(int index, const CudaOptions& o) : tuning_(o.tuning) {
        const uint64_t budget = o.vram_budget;
        STRATA_CUDA_CHECK(cudaSetDevice(index));
        // Process-wide; only code compiled for sm_90+ carries the kernels' wait.
        allow_dependent_launch(tuning_.dependent_launch && kernel_code_version() >= 90);
        STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        blas_check(cublasCreate(&blas_), "create");
        blas_check(cublasSetStream(blas_, stream_), "set stream");
        STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm_, cudaDevAttrMultiProcessorCount, index));
        STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&max_shared_, cudaDevAttrMaxSharedMemoryPerBlockOptin, index));
        size_t free_b = 0, total_b = 0;
        STRATA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        const uint64_t margin = uint64_t{1} << 30;
        budget_ = budget != 0 ? budget : (free_b > margin ? free_b - margin : free_b / 2);
        if (budget_ > free_b)
            throw Error("--vram-budget " + mib(budget_) + " is more than the " + mib(free_b) + " free on GPU " + std::to_string(index));
        init_quant_tables();
        set_weight_prefetch(tuning_.weight_prefetch);
        grow_stage(size_t{4} << 20);
        // A workspace of our own, so recorded forwards' cuBLAS calls use fixed memory.
        reserve(kBlasWorkspaceBytes, "the cuBLAS workspace");
        STRATA_CUDA_CHECK(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes));
        used_ += kBlasWorkspaceBytes;
        blas_check(cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes), "set workspace");
    }

    ~CudaBackend() override {
        if (tuning_.times) report_times();
        if (mode_ == Mode::Capture) abandon();
        cudaStreamSynchronize(stream_);
        for (auto& [n, list] : graphs_)
            for (auto& g : list) cudaGraphExecDestroy(g.exec);
        for (auto& [host, dev] : weights_) cudaFree(dev.ptr);
        for (auto& b : scratch_) cudaFree(b.ptr);
        for (auto& [p, n] : allocs_) cudaFree(p);
        cudaFreeHost(stage_host_);
        cudaFree(stage_dev_);
        cublasDestroy(blas_);
        cudaFree(blas_workspace_);
        for (auto& [w, b] : bf16_cache_) cudaFree(b.ptr);
        cudaStreamDestroy(stream_);
    }

    const char* name() const override { return "cuda"; }

    // ---- recorded forwards (CUDA graphs) ----------------------------------------------------
    // A decode-sized forward (at most tuning_.graph_max_tokens tokens: GEMVs, cuBLAS products on the
    // stream and the device-side MoE path, nothing that waits for the host) is captured into a
    // graph and launched; later
    // forwards of the same size first run their ops in replay mode, which only stages the host
    // inputs (at the same staging addresses the graph reads; one copy before the launch) and
    // builds the signature: every
    // op with its pointers and sizes. A graph with that signature is launched; otherwise the
    // forward is declined and runs eagerly, and the next one is captured anew.
    void forward_begin(int64_t n_tokens, bool may_replay) override {
        act_src_ = nullptr;
        if (tuning_.times) walk_start_ = std::chrono::steady_clock::now();
        if (mode_ == Mode::Capture) abandon();  // a forward that threw half way
        mode_ = Mode::Eager;
        sync();
        stage_used_ = 0;
        ++stage_generation_;
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

    bool forward_end() override {
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
        if (stage_used_ > 0)
            STRATA_CUDA_CHECK(cudaMemcpyAsync(stage_dev_, stage_host_, stage_used_, cudaMemcpyHostToDevice, stream_));
        STRATA_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
        for (const HostCopy& c : deferred_)
            STRATA_CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src, c.n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
        sync();
        if (tuning_.times && mode == Mode::Replay) {
            const auto done = std::chrono::steady_clock::now();
            walk_us_.push_back(std::chrono::duration<double, std::micro>(walked - walk_start_).count());
            run_us_.push_back(std::chrono::duration<double, std::micro>(done - walked).count());
        }
        return true;
    }

    // STRATA_CUDA_TIMES=1: where a replayed forward's time goes, printed when the backend closes
    // (the host walk that stages inputs and signs the ops, then the graph until its results are
    // on the host; they run one after the other).
    void report_times() {
        if (walk_us_.empty()) return;
        auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        std::fprintf(stderr, "cuda: %zu replayed forwards: host walk %.0f us, graph and copies %.0f us (medians)\n",
                     walk_us_.size(), median(walk_us_), median(run_us_));
    }

    void upload_weights(std::span<const Weight> weights, const ProgressFn& progress) override {
        act_src_ = nullptr;
        uint64_t total = 0;
        for (const Weight& w : weights) {
            const bool vector = w.ne[1] * w.ne[2] * w.ne[3] == 1;
            if (!vector && !type_supported(w.type))
                throw Error("tensor " + w.name() + " has type " + quant::type_name(w.type) + ", which has no CUDA kernel");
            total += bytes_of(w);
        }
        evict_bf16_cache();  // device addresses of weights may be reused
        eager_sizes_.clear();  // another model may route fewer pairs a token
        if (used_ + total > budget_)
            throw Error("the model's weights need " + mib(total) + " of GPU memory; the budget is " + mib(budget_) + " (" +
                        mib(used_) + " in use). Raise --vram-budget, or run on the CPU (--device cpu)");
        uint64_t done = 0;
        drop_graphs();  // recorded kernels hold device addresses of weights
        for (const Weight& w : weights) {
            const size_t n = bytes_of(w);
            if (const auto it = weights_.find(w.data); it != weights_.end()) {
                if (it->second.bytes == n && it->second.type == w.type) continue;
                // Host memory reused for another tensor: the old copy is stale.
                sync();
                cudaFree(it->second.ptr);
                used_ -= it->second.bytes;
                weights_.erase(it);
            }
            void* dev = nullptr;
            STRATA_CUDA_CHECK(cudaMalloc(&dev, n));
            STRATA_CUDA_CHECK(cudaMemcpy(dev, w.data, n, cudaMemcpyHostToDevice));
            weights_[w.data] = {static_cast<uint8_t*>(dev), n, w.type};
            used_ += n;
            done += n;
            if (progress) progress(done, total);
        }
    }

    float* alloc_floats(size_t n) override {
        if (mode_ == Mode::Capture) abandon();  // a forward that still allocates is not steady yet
        const size_t bytes = std::max<size_t>(256, n * sizeof(float));
        reserve(bytes, "activations");
        void* p = nullptr;
        STRATA_CUDA_CHECK(cudaMalloc(&p, bytes));
        STRATA_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
        allocs_[p] = bytes;
        used_ += bytes;
        return static_cast<float*>(p);
    }
    void free_floats(float* p) override {
        if (p == nullptr) return;
        if (mode_ == Mode::Capture) abandon();
        const auto it = allocs_.find(p);
        if (it == allocs_.end()) return;
        cudaStreamSynchronize(stream_);
        cudaFree(p);
        used_ -= it->second;
        allocs_.erase(it);
    }
    void copy_to_host(const float* src, float* host, size_t n) override {
        if (mode_ != Mode::Eager) {
            sign(kOpCopyToHost, src, n);
            deferred_.push_back({src, host, n});
            return;
        }
        STRATA_CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
        sync();
    }
    void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids) override {
        if (rows <= 0) return;
        auto* dev = static_cast<int32_t*>(scratch(kArgmax, static_cast<size_t>(rows) * sizeof(int32_t)));
        sign(kOpArgmax, x, rows, n, dev);
        if (launching()) cuda::argmax_rows(x, rows, n, dev, stream_);
        // int32 ids travel as 4-byte floats (a bit copy).
        copy_to_host(reinterpret_cast<const float*>(dev), reinterpret_cast<float*>(ids), static_cast<size_t>(rows));
    }
    bool samples_where_logits_are() const override { return true; }
    void sample_rows(float* x, int64_t n, std::span<const backend::RowSampleRequest> req, int32_t k, backend::RowSample* out,
                     backend::TokenLogit* top) override {
        if (req.empty()) return;
        if (mode_ != Mode::Eager) throw Error("CUDA: sample_rows runs between forwards, not inside one");
        // The kernel reads rows as float4: other rows (no real vocabulary) take the host path.
        if (n % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) {
            Backend::sample_rows(x, n, req, k, out, top);
            return;
        }
        act_src_ = nullptr;  // the edits write rows
        // One upload (jobs, then edits) and one download (summaries, then tokens).
        std::vector<cuda::RowSampleJob> jobs(req.size());
        size_t n_edits = 0;
        for (const auto& r : req) n_edits += r.edits.size();
        std::vector<backend::LogitEdit> edits;
        edits.reserve(n_edits);
        for (size_t i = 0; i < req.size(); ++i) {
            jobs[i] = {req[i].row, static_cast<int32_t>(edits.size()), static_cast<int32_t>(req[i].edits.size()),
                       req[i].inv_temperature, req[i].u, req[i].top_p, req[i].min_p, std::min(req[i].top, k)};
            edits.insert(edits.end(), req[i].edits.begin(), req[i].edits.end());
        }
        auto aligned = [](size_t b) { return (b + 255) / 256 * 256; };
        const size_t jobs_b = aligned(jobs.size() * sizeof(cuda::RowSampleJob));
        const size_t edits_b = aligned(std::max<size_t>(1, edits.size()) * sizeof(backend::LogitEdit));
        const size_t out_b = aligned(req.size() * sizeof(backend::RowSample));
        const size_t top_b = req.size() * static_cast<size_t>(std::max(k, 1)) * sizeof(backend::TokenLogit);
        auto* base = static_cast<uint8_t*>(scratch(kSample, jobs_b + edits_b + out_b + top_b));
        auto* d_jobs = reinterpret_cast<cuda::RowSampleJob*>(base);
        auto* d_edits = reinterpret_cast<backend::LogitEdit*>(base + jobs_b);
        auto* d_out = reinterpret_cast<backend::RowSample*>(base + jobs_b + edits_b);
        auto* d_top = reinterpret_cast<backend::TokenLogit*>(base + jobs_b + edits_b + out_b);
        STRATA_CUDA_CHECK(cudaMemcpyAsync(d_jobs, jobs.data(), jobs.size() * sizeof(cuda::RowSampleJob), cudaMemcpyHostToDevice, stream_));
        if (!edits.empty())
            STRATA_CUDA_CHECK(cudaMemcpyAsync(d_edits, edits.data(), edits.size() * sizeof(backend::LogitEdit), cudaMemcpyHostToDevice, stream_));
        cuda::sample_rows(x, n, d_jobs, static_cast<int64_t>(jobs.size()), d_edits, k, d_out, d_top, stream_);
        STRATA_CUDA_CHECK(cudaMemcpyAsync(out, d_out, req.size() * sizeof(backend::RowSample), cudaMemcpyDeviceToHost, stream_));
        if (k > 0) STRATA_CUDA_CHECK(cudaMemcpyAsync(top, d_top, top_b, cudaMemcpyDeviceToHost, stream_));
        sync();
    }
    void copy_from_host(const float* host, float* dst, size_t n) override {
        act_src_ = nullptr;
        if (mode_ == Mode::Capture) abandon();
        if (mode_ != Mode::Eager) return;
        STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
        sync();
    }
    void copy(const float* src, float* dst, size_t n) override {
        if (n == 0 || src == dst) return;
        sign(kOpCopy, src, dst, n);
        if (!launching()) return;
        STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    }
    void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols) override {
        if (rows <= 0 || cols <= 0) return;
        sign(kOpCopyRows, src, src_stride, dst, dst_stride, rows, cols);
        if (!launching()) return;
        STRATA_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * sizeof(float), src,
                                            static_cast<size_t>(src_stride) * sizeof(float), static_cast<size_t>(cols) * sizeof(float),
                                            static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_));
    }

    void get_rows(const Weight& table, const int32_t* ids, int64_t n, float* out) override {
        for (int64_t i = 0; i < n; ++i)
            if (ids[i] < 0 || ids[i] >= table.rows())
                throw Error("token id " + std::to_string(ids[i]) + " is outside the vocabulary (" + std::to_string(table.rows()) + ")");
        const int32_t* d = upload(ids, static_cast<size_t>(n));
        sign(kOpGetRows, table.data, n, out, d);
        if (!launching()) return;
        dequant_rows_f32(matrix(table), d, n, out, stream_);
    }

    void matmul(std::span<const MatmulArgs> products) override {
        // Single-row products of one input with matrices of one type and width go in one launch;
        // the input is rounded to 8 bits once for all of them that take it.
        size_t i = 0;
        while (i < products.size()) {
            const MatmulArgs& p = products[i];
            // The end of the run from `from` of one-token products of p's input, `type` and width.
            const auto run_end = [&](size_t from, quant::Type type) {
                size_t e = from;
                while (e < products.size() && e - i < kGemvBatchMax && products[e].x == p.x && products[e].n_tokens == 1 &&
                       products[e].w->type == type && products[e].w->ne[0] == p.w->ne[0])
                    ++e;
                return e;
            };
            const bool batchable = p.n_tokens == 1 && p.w->ne[0] % 32 == 0;
            size_t j = batchable ? run_end(i + 1, p.w->type) : i + 1;
            // GEMVs of these weights take the input rounded to 8 bits (batchable implies the width).
            const bool int8_ok = tuning_.int8_products && q8_supported(p.w->type) && p.w->ne[0] % 32 == 0;
            const bool int8 = batchable && int8_ok;
            // Then matrices of a second type on the same input may join the launch (q and k of
            // Q4_K with v of Q6_K: gemv1_two_types).
            bool two_types = false;
            if (const size_t j2 = int8 && j < products.size() ? run_end(j, products[j].w->type) : j; j2 > j) {
                DeviceMatrix ws[kGemvBatchMax];
                for (size_t k = i; k < j2; ++k) ws[k - i] = matrix(*products[k].w);
                if (gemv1_two_types_fit(ws, static_cast<int>(j2 - i), tuning_)) {
                    two_types = true;
                    j = j2;
                }
            }
            if (!batchable && p.n_tokens > 1 && p.n_tokens <= kGemvMaxCols && int8_ok) {
                // A few rows (decode of several sequences): 8-bit inputs too.
                const ActQ8 xq = act_q8_for(p.x, p.n_tokens, p.w->ne[0]);
                const DeviceMatrix w = matrix(*p.w);
                sign(kOpProduct, w.data, p.x, p.n_tokens, p.y, true);
                if (launching()) gemv(w, xq, p.n_tokens, p.y, p.w->ne[1], stream_);
            } else if (!batchable || (j - i == 1 && !int8)) {
                product(matrix(*p.w), p.x, p.w->ne[0], p.n_tokens, p.y, p.w->ne[1], true);
            } else {
                const ActQ8 xq = int8 ? act_q8_for(p.x, 1, p.w->ne[0]) : ActQ8{};
                DeviceMatrix ws[kGemvBatchMax];
                float* ys[kGemvBatchMax];
                for (size_t k = i; k < j; ++k) {
                    ws[k - i] = matrix(*products[k].w);
                    ys[k - i] = products[k].y;
                    sign(kOpProduct, ws[k - i].data, p.x, ys[k - i], int8, two_types);
                }
                if (launching()) {
                    if (two_types) gemv1_two_types(ws, ys, static_cast<int>(j - i), xq, tuning_, stream_);
                    else if (int8) gemv1_multi(ws, ys, static_cast<int>(j - i), xq, tuning_, stream_);
                    else gemv1_multi(ws, ys, static_cast<int>(j - i), p.x, tuning_, stream_);
                }
            }
            for (size_t k = i; k < j; ++k) wrote(products[k].y, products[k].n_tokens * products[k].w->ne[1]);
            i = j;
        }
    }

    void rms_norm(const float* x, const Weight* w, int64_t rows, int64_t dim, float eps, float* out) override {
        const ActQ8* q8 = q8_out(rows, dim);
        sign(kOpRmsNorm, x, w != nullptr ? w->data : nullptr, rows, dim, eps, out, q8 != nullptr ? q8->q : nullptr);
        if (q8 != nullptr) remember_act(out, rows, dim);
        if (!launching()) return;
        cuda::rms_norm(x, w != nullptr ? f32(*w, dim) : nullptr, rows, dim, eps, out, stream_, q8);
    }
    void add(float* y, const float* x, int64_t n) override {
        sign_writing(y, n, kOpAdd, y, x, n);
        if (launching()) cuda::add(y, x, n, stream_);
    }
    void add_rms_norm(float* y, const float* x, const Weight* w, int64_t rows, int64_t dim, float eps, float* out) override {
        const ActQ8* q8 = q8_out(rows, dim);
        sign(kOpAddRmsNorm, y, x, w != nullptr ? w->data : nullptr, rows, dim, eps, out, q8 != nullptr ? q8->q : nullptr);
        if (q8 != nullptr) remember_act(out, rows, dim);
        if (!launching()) return;
        cuda::add_rms_norm(y, x, w != nullptr ? f32(*w, dim) : nullptr, rows, dim, eps, out, stream_, q8);
    }
    void swiglu(const float* gate, const float* up, int64_t rows, int64_t dim, int64_t in_stride, float* out) override {
        sign_writing(out, rows * dim, kOpSwiglu, gate, up, rows, dim, in_stride, out);
        if (!launching()) return;
        cuda::swiglu(gate, up, rows, dim, in_stride, out, stream_);
    }
    void mul_sigmoid(float* x, const float* g, int64_t rows, int64_t dim, int64_t g_stride) override {
        sign_writing(x, rows * dim, kOpMulSigmoid, x, g, rows, dim, g_stride);
        if (!launching()) return;
        cuda::mul_sigmoid(x, g, rows, dim, g_stride, stream_);
    }
    void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeParams& p) override {
        if (p.n_rot / 2 <= 0 || n_tokens <= 0) return;
        const auto [dpos, dfreq] = rope_inputs(pos, n_tokens, p);
        sign(kOpRope, x, n_tokens, n_heads, head_dim, p.n_rot, dpos, dfreq);
        if (!launching()) return;
        cuda::rope(x, n_tokens, n_heads, head_dim, dpos, dfreq, p.n_rot, stream_);
    }
    void qk_norm_rope(const QkNormRopeArgs& a) override {
        if (!head_norm_rope_fits(a.head_dim, a.rope.n_rot)) {
            Backend::qk_norm_rope(a);
            return;
        }
        if (a.n_tokens <= 0) return;
        // The cache store goes in the same kernel when v's rows are heads of head_dim values.
        const bool store = a.kv != nullptr && a.v_row == a.n_head_kv * a.head_dim;
        const KvRows rows = store ? kv_rows(a.kv, a.pos, a.n_tokens, a.n_head_kv * a.head_dim, a.v_row) : KvRows{};
        const auto [dpos, dfreq] = rope_inputs(a.pos, a.n_tokens, a.rope);
        sign(kOpQkNormRope, a.q, a.q_norm->data, a.n_head, a.k, a.k_norm->data, a.n_head_kv, a.n_tokens, a.head_dim, a.eps,
             a.rope.n_rot, dpos, dfreq, rows.k_base, rows.v_base, rows.half, rows.off, a.v);
        if (a.kv != nullptr && !store) kv_store(a.kv, a.pos, a.n_tokens, a.k, a.n_head_kv * a.head_dim, a.v, a.v_row);
        if (!launching()) return;
        HeadNormRope h;
        h.q = a.q;
        h.q_norm = f32(*a.q_norm, a.head_dim);
        h.n_head = a.n_head;
        h.k = a.k;
        h.k_norm = f32(*a.k_norm, a.head_dim);
        h.n_head_kv = a.n_head_kv;
        h.n_tokens = a.n_tokens;
        h.head_dim = a.head_dim;
        h.eps = a.eps;
        h.pos = dpos;
        h.inv_freq = dfreq;
        h.n_rot = a.rope.n_rot;
        if (store) {
            h.k_base = rows.k_base;
            h.v_base = rows.v_base;
            h.kv_half = rows.half;
            h.k_off = rows.off;
            h.v_off = rows.off + a.n_tokens;
            h.v = a.v;
        }
        head_norm_rope(h, stream_);
    }
    void kv_store(const KvCacheView* const* kv, const int32_t* pos, int64_t n_tokens, const float* k, int64_t k_row,
                  const float* v, int64_t v_row) override {
        if (n_tokens <= 0) return;
        const KvRows r = kv_rows(kv, pos, n_tokens, k_row, v_row);
        sign(kOpKvStore, r.k_base, r.v_base, r.half, r.off, n_tokens, k, k_row, v, v_row);
        if (!launching()) return;
        cuda::kv_store(r.k_base, r.v_base, r.half, r.off, r.off + n_tokens, n_tokens, k, k_row, v, v_row, stream_);
    }
    // Values from base to p in a pool of `type` values.
    static int64_t values_between(const void* base, const void* p, backend::KvType type) {
        return (static_cast<const char*>(p) - static_cast<const char*>(base)) / static_cast<int64_t>(backend::kv_value_bytes(type));
    }
    // Where tokens' k and v rows go: offsets in values from the first token's pools (with one
    // shared pool, the engine's KV memory, the offsets are the same for every layer of a step),
    // k's [0, n_tokens) then v's, in device memory.
    struct KvRows {
        void* k_base = nullptr;
        void* v_base = nullptr;
        bool half = false;
        const int64_t* off = nullptr;
    };
    KvRows kv_rows(const KvCacheView* const* kv, const int32_t* pos, int64_t n_tokens, int64_t k_row, int64_t v_row) {
        KvRows r;
        r.k_base = kv[0]->k;
        r.v_base = kv[0]->v;
        r.half = kv[0]->type == backend::KvType::F16;
        std::vector<int64_t>& off = kv_offsets_;
        off.resize(static_cast<size_t>(2 * n_tokens));
        for (int64_t t = 0; t < n_tokens; ++t) {
            const KvCacheView& c = *kv[t];
            if (pos[t] < 0 || pos[t] >= c.capacity())
                throw Error("position " + std::to_string(pos[t]) + " is outside the KV cache (" + std::to_string(c.capacity()) + ")");
            if (c.type != kv[0]->type) throw Error("internal: one batch's KV caches hold different value types");
            const int64_t row = static_cast<int64_t>(c.blocks[pos[t] / c.block_size]) * c.block_size + pos[t] % c.block_size;
            off[static_cast<size_t>(t)] = values_between(r.k_base, c.k, c.type) + row * k_row;
            off[static_cast<size_t>(n_tokens + t)] = values_between(r.v_base, c.v, c.type) + row * v_row;
        }
        r.off = upload_cached(&key_kv_rows_, off.data(), off.size());
        return r;
    }
    void attention(const AttentionArgs& a) override {
        if (a.n_tokens <= 0) return;
        std::vector<TokenKv>& tokens = attn_tokens_;
        tokens.resize(static_cast<size_t>(a.n_tokens));
        const void* k_base = a.kv[0]->k;
        const void* v_base = a.kv[0]->v;
        const backend::KvType type = a.kv[0]->type;
        int32_t max_pos = 0;
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            const KvCacheView* c = a.kv[t];
            if (a.pos[t] < 0 || a.pos[t] >= c->capacity())
                throw Error("position " + std::to_string(a.pos[t]) + " is outside the KV cache (" + std::to_string(c->capacity()) + ")");
            if (c->type != type) throw Error("internal: one batch's KV caches hold different value types");
            // Block tables are keyed by their host array: every layer's view of a sequence shares it.
            const int32_t* table = upload_cached(c->blocks, c->blocks, static_cast<size_t>(c->n_blocks));
            tokens[static_cast<size_t>(t)] = {values_between(k_base, c->k, type), values_between(v_base, c->v, type), table,
                                              static_cast<int32_t>(c->block_size), a.pos[t]};
            max_pos = std::max(max_pos, a.pos[t]);
        }
        Attention d;
        d.q = a.q;
        d.out = a.out;
        d.k = k_base;
        d.v = v_base;
        d.kv_half = type == backend::KvType::F16;
        d.tokens = upload_cached(&key_tokens_, tokens.data(), tokens.size());
        d.n_tokens = a.n_tokens;
        d.n_head = a.n_head;
        d.n_head_kv = a.n_head_kv;
        d.head_dim_k = a.head_dim_k;
        d.head_dim_v = a.head_dim_v;
        d.max_pos = max_pos;
        d.scale = a.scale;
        // Prefill-sized batches whose tokens come in runs of one sequence go to the tensor-core
        // kernel, a tile per run of up to tile_tokens tokens.
        std::vector<AttnTile>& tiles = attn_tiles_;
        tiles.clear();
        if (const int tile_tokens = attention_tile_tokens(d); a.f16_ok && tile_tokens > 0 && a.n_tokens >= kAttnTiledMinTokens) {
            bool aligned = true;
            for (int64_t t = 0; t < a.n_tokens && aligned; ++t) {
                const KvCacheView* c = a.kv[t];
                aligned = values_between(k_base, c->k, type) % 4 == 0 && values_between(v_base, c->v, type) % 4 == 0;
                const KvCacheView* first = tiles.empty() ? nullptr : a.kv[tiles.back().t0];
                if (first == nullptr || tiles.back().n == tile_tokens || c->k != first->k || c->v != first->v || c->blocks != first->blocks)
                    tiles.push_back({static_cast<int32_t>(t), 0, 0});
                AttnTile& tile = tiles.back();
                ++tile.n;
                tile.max_pos = std::max(tile.max_pos, a.pos[t]);
            }
            // Mostly single-token tiles (many sequences decoding together): the per-token kernel,
            // which also splits a long cache over several blocks.
            if (!aligned || static_cast<int64_t>(tiles.size()) * 2 > a.n_tokens) tiles.clear();
        }
        if (!tiles.empty()) {
            const AttnTile* dt = upload_cached(&key_tiles_, tiles.data(), tiles.size());
            sign(kOpAttention, d.q, d.out, d.k, d.v, d.kv_half, d.tokens, d.n_tokens, d.n_head, d.n_head_kv, d.head_dim_k, d.scale, dt,
                 tiles.size());
            if (!launching()) return;
            cuda::attention_tiled(d, dt, static_cast<int64_t>(tiles.size()), stream_);
            return;
        }
        const int64_t splits = attention_splits(d, n_sm_, tuning_.attention_split_min);
        d.partial = static_cast<float*>(scratch(kAttnPartial, attention_partial_floats(d, splits) * sizeof(float)));
        // Decode: the output also rounded to 8 bits for the output projection that reads it.
        const int64_t out_dim = a.n_head * a.head_dim_v;
        const ActQ8* q8 = a.head_dim_v % 32 == 0 ? q8_out(a.n_tokens, out_dim) : nullptr;
        if (q8 != nullptr) d.q8 = *q8;
        // The walk's form is part of the signature: a recorded graph keeps the kernel it captured.
        sign(kOpAttention, d.q, d.out, d.k, d.v, d.kv_half, d.tokens, d.n_tokens, d.n_head, d.n_head_kv, d.head_dim_k, d.head_dim_v, d.scale,
             splits, d.partial, d.q8.q, attention_octets(d, splits, tuning_.attention_octet_min));
        if (q8 != nullptr) remember_act(d.out, a.n_tokens, out_dim);
        if (!launching()) return;
        cuda::attention(d, splits, max_shared_, tuning_.attention_octet_min, stream_);
    }
    void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                            float* weights) override {
        sign(kOpRoute, logits, n_tokens, n_expert, k, renorm, ids, weights);
        if (!launching()) return;
        cuda::route_softmax_topk(logits, n_tokens, n_expert, k, renorm, ids, weights, stream_);
    }
    void moe(const MoeArgs& a) override;

    void ssm_conv_silu(const float* x, int64_t n_tokens, int64_t channels, const Weight& w, int64_t kernel, float* conv_state,
                       float* out) override {
        sign(kOpConv, x, n_tokens, channels, w.data, kernel, conv_state, out);
        if (!launching()) return;
        cuda::ssm_conv_silu(x, n_tokens, channels, f32(w, kernel * channels), kernel, conv_state, out, stream_);
    }
    void gdn_gates(const GdnGateArgs& a) override {
        sign(kOpGates, a.alpha, a.b, a.row_stride, a.group, a.group_stride, a.a->data, a.dt_bias->data, a.g, a.beta, a.n_tokens,
             a.n_heads);
        if (!launching()) return;
        cuda::gdn_gates(a.alpha, a.b, a.row_stride, a.group, a.group_stride, f32(*a.a, a.n_heads), f32(*a.dt_bias, a.n_heads), a.g,
                        a.beta, a.n_tokens, a.n_heads, stream_);
    }
    // f16 caches for quantised models: half the memory, and decode attention at depth reads half
    // the bytes; the attention kernels already round k and v to f16 for such models' prefill.
    backend::KvType kv_type(bool quantised_attention) const override {
        return !tuning_.f32_kv && quantised_attention ? backend::KvType::F16 : backend::KvType::F32;
    }
    void delta_rule(const DeltaRuleArgs& a) override {
        DeltaRule d;
        d.q = a.q;
        d.k = a.k;
        d.v = a.v;
        const int64_t n_k = a.n_k_heads > 0 ? a.n_k_heads : a.n_v_heads;
        d.q_stride = a.q_stride != 0 ? a.q_stride : n_k * a.d_k;
        d.k_stride = a.k_stride != 0 ? a.k_stride : n_k * a.d_k;
        d.v_stride = a.v_stride != 0 ? a.v_stride : a.n_v_heads * a.d_v;
        d.g = a.g;
        d.beta = a.beta;
        d.state = a.state;
        d.out = a.out;
        d.n_tokens = a.n_tokens;
        d.n_v_heads = a.n_v_heads;
        d.n_k_heads = n_k;
        d.d_k = a.d_k;
        d.d_v = a.d_v;
        d.tiled = a.key_heads == backend::KeyHeadMap::Tiled;
        d.scale = a.scale;
        // The chunked form where the caller asks for it (prefill) and the run is long enough for
        // its three kernels to beat the token-by-token one.
        const bool chunked = a.chunk_size > 0 && a.n_tokens >= kDeltaChunkedMinTokens && cuda::delta_rule_chunkable(d);
        float* work = chunked ? static_cast<float*>(scratch(kDeltaChunks, cuda::delta_rule_chunked_scratch_floats(d) * sizeof(float))) : nullptr;
        sign(kOpDeltaRule, d.q, d.k, d.v, d.q_stride, d.k_stride, d.v_stride, d.g, d.beta, d.state, d.out, d.n_tokens, d.n_v_heads,
             d.n_k_heads, d.d_k, d.d_v, d.tiled, d.scale, work);
        if (!launching()) return;
        if (chunked) cuda::delta_rule_chunked(d, work, stream_);
        else cuda::delta_rule(d, stream_);
    }
    void l2_norm(float* x, int64_t n_tokens, int64_t rows, int64_t dim, int64_t token_stride, float eps) override {
        sign(kOpL2Norm, x, n_tokens, rows, dim, token_stride, eps);
        if (!launching()) return;
        cuda::l2_norm(x, n_tokens, rows, dim, token_stride, eps, stream_);
    }

private:
    enum ScratchSlot : size_t {
        kDenseW, kDenseX, kAttnPartial, kMoeHidden, kMoePairs, kMoeX, kMoeUp, kActX, kActHidden, kArgmax, kSample, kDeltaChunks, kScratchSlots
    };
    struct DevBuf {
        void* ptr = nullptr;
        size_t bytes = 0;
    };

    static size_t bytes_of(const Weight& w) { return w.row_bytes * static_cast<size_t>(w.rows()); }

    void reserve(size_t bytes, const char* what) {
        if (used_ + bytes > budget_) evict_bf16_cache();  // spare memory first
        if (used_ + bytes > budget_)
            throw Error(std::string("CUDA: ") + what + " need " + mib(bytes) + " more; " + mib(used_) + " of the " + mib(budget_) +
                        " budget is in use (raise --vram-budget or lower the KV size)");
    }

    // The bf16 copy of a dense quantised weight for products of 9+ tokens, made on first use
    // while the budget has room (nullptr otherwise: the caller dequantises into scratch). The
    // copies are spare memory: any allocation that would not fit gives them all back first.
    // Against dequantising for every call (H200, 30B-A3B Q4_K_M): batch 16 1,333 -> 1,437 t/s,
    // batch 32 1,565 -> 1,699, pp512 13,297 -> 13,633.
    const void* cached_bf16(const DeviceMatrix& w) {
        if (const auto it = bf16_cache_.find(w.data); it != bf16_cache_.end()) return it->second.ptr;
        const size_t bytes = static_cast<size_t>(w.rows) * static_cast<size_t>(w.ne0) * 2;
        if (used_ + bytes > budget_) return nullptr;
        if (mode_ != Mode::Eager) {
            if (mode_ == Mode::Capture) abandon();  // allocate in the eager run of this forward
            return nullptr;
        }
        void* p = nullptr;
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            cudaGetLastError();
            return nullptr;
        }
        used_ += bytes;
        bf16_cache_bytes_ += bytes;
        bf16_cache_[w.data] = {p, bytes};
        dequant_matrix(w, true, p, stream_);
        return p;
    }
    void evict_bf16_cache() {
        if (bf16_cache_.empty()) return;
        if (mode_ == Mode::Capture) abandon();
        sync();
        drop_graphs();  // recorded products read the copies
        for (auto& [w, b] : bf16_cache_) cudaFree(b.ptr);
        bf16_cache_.clear();
        used_ -= bf16_cache_bytes_;
        bf16_cache_bytes_ = 0;
    }

    const uint8_t* device_data(const Weight& w) const {
        const auto it = weights_.find(w.data);
        if (it == weights_.end() || it->second.type != w.type || it->second.bytes != bytes_of(w))
            throw Error("tensor " + w.name() + " is not in GPU memory (weights must be uploaded first)");
        return it->second.ptr;
    }
    DeviceMatrix matrix(const Weight& w) const {
        return {w.type, device_data(w), w.ne[1] * w.ne[2] * w.ne[3], w.ne[0], w.row_bytes};
    }
    // Expert slice e of a 3-D expert tensor as its own matrix.
    DeviceMatrix expert(const Weight& w, int64_t e) const {
        return {w.type, device_data(w) + static_cast<size_t>(e) * static_cast<size_t>(w.ne[1]) * w.row_bytes, w.ne[1], w.ne[0], w.row_bytes};
    }
    const float* f32(const Weight& w, int64_t n) const {
        if (w.type != quant::Type::F32 || w.ne[0] * w.rows() != n)
            throw Error("tensor " + w.name() + " must be f32 with " + std::to_string(n) + " values");
        return reinterpret_cast<const float*>(device_data(w));
    }

    void* scratch(size_t slot, size_t bytes) {
        if (scratch_.size() < kScratchSlots) scratch_.resize(kScratchSlots);
        DevBuf& b = scratch_[slot];
        if (b.bytes < bytes) {
            if (mode_ == Mode::Capture) abandon();
            sync();
            if (b.ptr != nullptr) {
                cudaFree(b.ptr);
                used_ -= b.bytes;
                b = {};
            }
            const size_t want = std::max<size_t>(bytes + bytes / 4, 1 << 16);
            reserve(want, "scratch buffers");
            STRATA_CUDA_CHECK(cudaMalloc(&b.ptr, want));
            b.bytes = want;
            used_ += want;
        }
        return b.ptr;
    }

    // Staging space is only reused by upload() after its own sync, so a device pointer it
    // handed out stays valid for the rest of the op that asked for it.
    void sync() { STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
    void grow_stage(size_t bytes) {
        drop_graphs();  // their copy nodes read the old staging area
        if (stage_host_ != nullptr) {
            sync();
            cudaFreeHost(stage_host_);
            cudaFree(stage_dev_);
            used_ -= stage_cap_;
        }
        reserve(bytes, "staging");
        STRATA_CUDA_CHECK(cudaMallocHost(&stage_host_, bytes));
        STRATA_CUDA_CHECK(cudaMalloc(&stage_dev_, bytes));
        stage_cap_ = bytes;
        used_ += bytes;
        stage_used_ = 0;
        ++stage_generation_;
    }
    // A device copy of n host values, valid for the kernels queued after it on the stream.
    template <class T>
    T* upload(const T* host, size_t n) {
        const size_t bytes = std::max<size_t>(n * sizeof(T), 1);
        if (bytes > stage_cap_) {
            if (mode_ == Mode::Capture) abandon();
            if (mode_ == Mode::Replay) mode_ = Mode::Abandoned;
            grow_stage(std::max(bytes, 2 * stage_cap_));
        }
        size_t off = (stage_used_ + 255) / 256 * 256;
        if (off + bytes > stage_cap_) {
            if (mode_ == Mode::Capture) abandon();
            if (mode_ == Mode::Replay) mode_ = Mode::Abandoned;  // offsets would differ from the graph's
            sync();
            off = 0;
            ++stage_generation_;
        }
        std::memcpy(static_cast<uint8_t*>(stage_host_) + off, host, n * sizeof(T));
        // Recorded forwards copy the whole staging area once, before the graph (forward_end).
        if (mode_ == Mode::Eager)
            STRATA_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(stage_dev_) + off, static_cast<uint8_t*>(stage_host_) + off,
                                              n * sizeof(T), cudaMemcpyHostToDevice, stream_));
        stage_used_ = off + bytes;
        return reinterpret_cast<T*>(static_cast<uint8_t*>(stage_dev_) + off);
    }
    // As upload, but returns the previous copy when the same key last uploaded the same bytes and
    // the staging area has not wrapped since: a decode step's positions, block tables and cache
    // rows are the same for every layer, so they go up once per step instead of once per op.
    template <class T>
    const T* upload_cached(const void* key, const T* host, size_t n) {
        if (mode_ != Mode::Eager) return upload(host, n);  // recorded forwards stage every input in order
        if (upload_cache_.size() > 4096) upload_cache_.clear();  // block tables of sequences long gone
        Cached& c = upload_cache_[key];
        const size_t bytes = n * sizeof(T);
        if (c.dev != nullptr && c.generation == stage_generation_ && c.bytes.size() == bytes &&
            std::memcmp(c.bytes.data(), host, bytes) == 0)
            return static_cast<const T*>(c.dev);
        c.bytes.assign(reinterpret_cast<const uint8_t*>(host), reinterpret_cast<const uint8_t*>(host) + bytes);
        c.dev = upload(host, n);
        c.generation = stage_generation_;
        return static_cast<const T*>(c.dev);
    }

    // Device positions and inverse frequencies for rope: the frequencies exactly as the CPU
    // backend rotates with, computed again only when the parameters change (every layer of every
    // step asks with the same ones).
    std::pair<const int32_t*, const float*> rope_inputs(const int32_t* pos, int64_t n_tokens, const RopeParams& p) {
        if (inv_freq_.empty() || p.n_rot != inv_freq_params_.n_rot || p.theta != inv_freq_params_.theta ||
            p.freqs_bf16 != inv_freq_params_.freqs_bf16) {
            inv_freq_ = backend::rope_inv_freq(p);
            inv_freq_params_ = p;
        }
        return {upload_cached(&key_pos_, pos, static_cast<size_t>(n_tokens)),
                upload_cached(&key_inv_freq_, inv_freq_.data(), inv_freq_.size())};
    }

    // y[n][y_stride] = W x for x [n][x_stride].
    // cacheable: w is a whole dense weight (not an expert's slice), which may keep a bf16 copy.
    void product(const DeviceMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride,
                 bool cacheable = false) {
        if (n <= 0) return;
        sign(kOpProduct, w.data, x, x_stride, n, y, y_stride);
        if (!launching()) return;
        if (n <= kGemvMaxCols) {
            gemv(w, x, x_stride, n, y, y_stride, tuning_, stream_);
            return;
        }
        const float one = 1.0f, zero = 0.0f;
        const int m = static_cast<int>(w.rows), k = static_cast<int>(w.ne0), cols = static_cast<int>(n);
        if (is_float_type(w.type)) {
            // f32 math for float weights, as the CPU backend (no tf32: cuBLAS's default math mode).
            const float* a = reinterpret_cast<const float*>(w.data);
            if (w.type != quant::Type::F32) {
                float* deq = static_cast<float*>(scratch(kDenseW, static_cast<size_t>(m) * k * sizeof(float)));
                dequant_matrix(w, false, deq, stream_);
                a = deq;
            }
            blas_check(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, cols, k, &one, a, k, x, static_cast<int>(x_stride), &zero, y,
                                   static_cast<int>(y_stride)),
                       "sgemm");
            return;
        }
        void* b = scratch(kDenseX, static_cast<size_t>(cols) * k * 2);
        const void* a = cacheable ? cached_bf16(w) : nullptr;
        if (!launching()) return;  // cached_bf16 declined a recording: the forward reruns eagerly
        if (a == nullptr) {
            void* deq = scratch(kDenseW, static_cast<size_t>(m) * k * 2);
            if (!launching()) return;
            dequant_matrix(w, true, deq, stream_);
            a = deq;
        }
        to_bf16(x, n, k, x_stride, b, stream_);
        blas_check(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, cols, k, &one, a, CUDA_R_16BF, k, b, CUDA_R_16BF, k, &zero, y,
                                CUDA_R_32F, static_cast<int>(y_stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "bf16 gemm");
    }

    enum class Mode { Eager, Capture, Replay, Abandoned };
    enum Op : uint64_t {
        kOpCopy = 1, kOpCopyRows, kOpCopyToHost, kOpGetRows, kOpProduct, kOpRmsNorm, kOpAdd, kOpSwiglu, kOpMulSigmoid, kOpRope,
        kOpKvStore, kOpAttention, kOpRoute, kOpMoe, kOpConv, kOpGates, kOpDeltaRule, kOpL2Norm,
        kOpAddRmsNorm, kOpQkNormRope, kOpQuantize, kOpArgmax
    };
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
    // Appends an op and its arguments to the signature of the forward being recorded or replayed.
    // Every op passes here first: all but those that only read activations (products, experts,
    // routing, the rounding itself) may write the input the 8-bit copy was made from.
    template <class... A>
    void sign(Op op, A... args) {
        if (op != kOpProduct && op != kOpMoe && op != kOpRoute && op != kOpQuantize) act_src_ = nullptr;
        record(op, args...);
    }
    // For ops that write only [out, out + n): the 8-bit copy stays valid unless they overlap
    // its rows.
    template <class... A>
    void sign_writing(const float* out, int64_t n, Op op, A... args) {
        wrote(out, n);
        record(op, args...);
    }
    // [out, out + n) was written: the 8-bit copy goes if it was made from rows there. Products
    // and experts, which sign as readers, say what they write through this.
    void wrote(const float* out, int64_t n) {
        if (act_src_ != nullptr && out < act_src_ + act_rows_ * act_n_ && act_src_ < out + n) act_src_ = nullptr;
    }
    template <class... A>
    void record(Op op, A... args) {
        if (mode_ != Mode::Eager) {
            sig_.push_back(op);
            (sig_.push_back(word(args)), ...);
        }
    }

    // ---- 8-bit activations -------------------------------------------------------------------
    // One 8-bit copy of an activation lives in scratch kActX at a time, with the f32 rows it was
    // made from: norms write it alongside their output (decode-sized rows; one fused kernel),
    // products and experts reuse it when their input is those rows, else round their input
    // into it first.
    static constexpr int64_t kQ8OutMaxRows = 32;  // the device-side MoE path's tokens (256 pairs / 8)
    // A copy for rows a kernel is about to write (null when decode products would not use one).
    const ActQ8* q8_out(int64_t rows, int64_t dim) {
        if (!tuning_.int8_products || rows > kQ8OutMaxRows || dim % 32 != 0) return nullptr;
        act_ = act_q8_in(scratch(kActX, act_q8_bytes(rows, dim)), rows, dim);
        return &act_;
    }
    void remember_act(const float* src, int64_t rows, int64_t n) {
        act_src_ = src;
        act_rows_ = rows;
        act_n_ = n;
    }
    ActQ8 act_q8_for(const float* x, int64_t rows, int64_t n) {
        if (act_src_ == x && act_rows_ == rows && act_n_ == n) return act_;
        act_ = act_q8_in(scratch(kActX, act_q8_bytes(rows, n)), rows, n);
        sign(kOpQuantize, x, rows, n, act_.q);
        remember_act(x, rows, n);
        if (launching()) quantize_act_q8(x, rows, n, n, act_, stream_);
        return act_;
    }
    bool launching() const { return mode_ == Mode::Eager || mode_ == Mode::Capture; }
    void drop_graphs() {
        for (auto& [n, list] : graphs_)
            for (auto& g : list) cudaGraphExecDestroy(g.exec);
        graphs_.clear();
    }
    void abandon() {
        cudaGraph_t g = nullptr;
        cudaStreamEndCapture(stream_, &g);
        if (g != nullptr) cudaGraphDestroy(g);
        cudaGetLastError();
        mode_ = Mode::Abandoned;
    }

    const CudaTuning tuning_;  // the knobs (cuda_tuning.h)
    std::chrono::steady_clock::time_point walk_start_;
    std::vector<double> walk_us_, run_us_;
    void* blas_workspace_ = nullptr;
    std::unordered_map<const uint8_t*, DevBuf> bf16_cache_;  // by the weight's device address
    uint64_t bf16_cache_bytes_ = 0;
    ActQ8 act_{};                      // the 8-bit copy in kActX (act_q8_for)
    const float* act_src_ = nullptr;   // the rows it was made from (null: none valid)
    int64_t act_rows_ = 0, act_n_ = 0;
    Mode mode_ = Mode::Eager;
    std::vector<uint64_t> sig_;
    std::vector<HostCopy> deferred_;
    std::unordered_map<int64_t, std::vector<Graph>> graphs_;  // by forward size
    std::unordered_set<int64_t> eager_sizes_;  // forward sizes whose MoE groups pairs on the host
    std::unordered_map<int64_t, bool> missed_;                // the last replay of that size found no graph
    int64_t fwd_tokens_ = 0;
    std::vector<float> inv_freq_;  // rope_inv_freq of inv_freq_params_
    RopeParams inv_freq_params_;
    int n_sm_ = 1;
    int max_shared_ = 48 * 1024;  // shared memory a block may opt in to
    cudaStream_t stream_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    uint64_t budget_ = 0, used_ = 0;
    // Weights by their host address (the model's mapped file, alive as long as the model).
    struct DeviceWeight {
        uint8_t* ptr;
        size_t bytes;
        quant::Type type;
    };
    std::unordered_map<const uint8_t*, DeviceWeight> weights_;
    std::unordered_map<void*, size_t> allocs_;
    std::vector<DevBuf> scratch_;
    void* stage_host_ = nullptr;
    void* stage_dev_ = nullptr;
    size_t stage_cap_ = 0, stage_used_ = 0;
    uint64_t stage_generation_ = 0;
    struct Cached {
        std::vector<uint8_t> bytes;
        const void* dev = nullptr;
        uint64_t generation = 0;
    };
    std::unordered_map<const void*, Cached> upload_cache_;
    // Keys of upload_cached for per-step arrays (their addresses only serve as keys).
    char key_pos_ = 0, key_inv_freq_ = 0, key_kv_rows_ = 0, key_tokens_ = 0, key_tiles_ = 0;
    // Host-side grouping of a large MoE batch.
    std::vector<int64_t> kv_offsets_;
    std::vector<TokenKv> attn_tokens_;
    std::vector<AttnTile> attn_tiles_;
    std::vector<int32_t> moe_ids_, moe_offsets_, moe_fill_, moe_token_of_, moe_slot_row_, moe_active_;
    // Large-batch MoE: one grouped cuBLAS call per chunk of experts (host argument arrays).
    void moe_experts(const MoeArgs& a);  // moe() but for telling the 8-bit copy what it wrote
    bool moe_grouped(const MoeArgs& a, const float* xg, float* hg, float* hu, float* outp, const int32_t* slot_row);
    bool grouped_gemm_ok_ = true;
    std::vector<int> g_m_, g_n_, g_k_, g_ldc_, g_one_;
    std::vector<float> g_alpha_, g_beta_;
    std::vector<cublasOperation_t> g_ta_, g_tb_;
    std::vector<const void*> g_a_, g_b_;
    std::vector<void*> g_c_;
};

// Large batches with quantised experts: the pairs (sorted by expert on the host) go through one
// grouped cuBLAS call per chunk of experts, bf16 in and out (grouped GEMMs take no f32 output
// for bf16 operands), instead of three dequantisations and products per expert.
bool CudaBackend::moe_grouped(const MoeArgs& a, const float* xg, float* hg, float* hu, float* outp, const int32_t* slot_row) {
    const int64_t n_embd = a.gate->ne[0], n_ff = a.gate->ne[1], n_expert = a.gate->ne[2];
    const int64_t n_pairs = a.n_tokens * a.k;
    moe_active_.clear();
    for (int64_t e = 0; e < n_expert; ++e)
        if (moe_offsets_[static_cast<size_t>(e + 1)] > moe_offsets_[static_cast<size_t>(e)]) moe_active_.push_back(static_cast<int32_t>(e));
    // gate, up and down of one expert have the same number of values.
    const size_t per_expert = static_cast<size_t>(n_ff * n_embd) * 2;
    const auto n_active = static_cast<int64_t>(moe_active_.size());
    const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(kGroupedScratchBytes / per_expert), 1, n_active);
    void* deq = scratch(kDenseW, static_cast<size_t>(chunk) * per_expert);
    void* act = scratch(kDenseX, static_cast<size_t>(n_pairs * std::max(n_embd, n_ff)) * 2);

    // out rows (bf16) of the pairs of each active expert = W_e in, in_dim -> out_dim.
    auto grouped = [&](const Weight& w, int64_t in_dim, void* out, int64_t out_dim) {
        for (int64_t c0 = 0; c0 < n_active; c0 += chunk) {
            const int cnt = static_cast<int>(std::min(chunk, n_active - c0));
            dequant_experts_bf16(expert(w, 0), upload(moe_active_.data() + c0, static_cast<size_t>(cnt)), cnt, deq, stream_);
            g_m_.assign(static_cast<size_t>(cnt), static_cast<int>(out_dim));
            g_k_.assign(static_cast<size_t>(cnt), static_cast<int>(in_dim));
            g_ldc_.assign(static_cast<size_t>(cnt), static_cast<int>(out_dim));
            g_one_.assign(static_cast<size_t>(cnt), 1);
            g_alpha_.assign(static_cast<size_t>(cnt), 1.0f);
            g_beta_.assign(static_cast<size_t>(cnt), 0.0f);
            g_ta_.assign(static_cast<size_t>(cnt), CUBLAS_OP_T);
            g_tb_.assign(static_cast<size_t>(cnt), CUBLAS_OP_N);
            g_n_.resize(static_cast<size_t>(cnt));
            g_a_.resize(static_cast<size_t>(cnt));
            g_b_.resize(static_cast<size_t>(cnt));
            g_c_.resize(static_cast<size_t>(cnt));
            for (int i = 0; i < cnt; ++i) {
                const auto e = static_cast<size_t>(moe_active_[static_cast<size_t>(c0 + i)]);
                const int64_t off = moe_offsets_[e], n = moe_offsets_[e + 1] - off;
                g_n_[static_cast<size_t>(i)] = static_cast<int>(n);
                g_a_[static_cast<size_t>(i)] = static_cast<const uint8_t*>(deq) + static_cast<size_t>(i) * per_expert;
                g_b_[static_cast<size_t>(i)] = static_cast<const uint8_t*>(act) + static_cast<size_t>(off * in_dim) * 2;
                g_c_[static_cast<size_t>(i)] = static_cast<uint8_t*>(out) + static_cast<size_t>(off * out_dim) * 2;
            }
            const cublasStatus_t st = cublasGemmGroupedBatchedEx(
                blas_, g_ta_.data(), g_tb_.data(), g_m_.data(), g_n_.data(), g_k_.data(), g_alpha_.data(),
                upload(g_a_.data(), g_a_.size()), CUDA_R_16BF, g_k_.data(), upload(g_b_.data(), g_b_.size()), CUDA_R_16BF,
                g_k_.data(), g_beta_.data(), upload(g_c_.data(), g_c_.size()), CUDA_R_16BF, g_ldc_.data(), cnt, g_one_.data(),
                CUBLAS_COMPUTE_32F);
            if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
                std::fprintf(stderr, "cuda: this cuBLAS has no grouped bf16 GEMM for these shapes; experts are multiplied one by one\n");
                return false;
            }
            blas_check(st, "grouped bf16 gemm");
        }
        return true;
    };
    to_bf16(xg, n_pairs, n_embd, n_embd, act, stream_);
    if (!grouped(*a.gate, n_embd, hg, n_ff) || !grouped(*a.up, n_embd, hu, n_ff)) {
        grouped_gemm_ok_ = false;  // this cuBLAS lacks it: products per expert from now on
        return false;
    }
    // hg, hu and outp hold bf16 here (they are sized for floats).
    swiglu_bf16(hg, hu, n_pairs * n_ff, act, stream_);
    if (!grouped(*a.down, n_ff, outp, n_embd)) {
        grouped_gemm_ok_ = false;
        return false;
    }
    moe_combine_bf16(outp, slot_row, a.weights, a.n_tokens, a.k, n_embd, a.out, stream_);
    return true;
}

void CudaBackend::moe(const MoeArgs& a) {
    moe_experts(a);
    wrote(a.out, a.n_tokens * a.gate->ne[0]);  // after: x may be out, and its copy was used
}

void CudaBackend::moe_experts(const MoeArgs& a) {
    const int64_t n_embd = a.gate->ne[0], n_ff = a.gate->ne[1], n_expert = a.gate->ne[2];
    const int64_t n_pairs = a.n_tokens * a.k;
    if (n_pairs <= 0) return;
    float* outp = static_cast<float*>(scratch(kMoePairs, static_cast<size_t>(n_pairs * n_embd) * sizeof(float)));
    if (n_pairs <= kMoeIndexedPairs) {
        float* hidden = static_cast<float*>(scratch(kMoeHidden, static_cast<size_t>(n_pairs * n_ff) * sizeof(float)));
        const bool int8 = tuning_.int8_products && q8_supported(a.gate->type) && q8_supported(a.down->type) && n_embd % 32 == 0 &&
                          n_ff % 32 == 0;
        ActQ8 xq{}, hq{};
        if (int8) {
            xq = act_q8_for(a.x, a.n_tokens, n_embd);
            hq = act_q8_in(scratch(kActHidden, act_q8_bytes(n_pairs, n_ff)), n_pairs, n_ff);
        }
        // With a residual: the combine, the residual add and the next norm in one kernel where
        // the shape fits, else the combine and add_rms_norm.
        const bool fuse = a.residual != nullptr && moe_combine_add_rms_norm_fits(outp, a.residual, a.normed, n_embd);
        const ActQ8* nq = fuse ? q8_out(a.n_tokens, n_embd) : nullptr;
        sign(kOpMoe, a.gate->data, a.up->data, a.down->data, a.x, a.n_tokens, a.k, a.ids, a.weights, a.out, outp, hidden, xq.q,
             hq.q, fuse, a.residual, fuse ? a.norm->data : nullptr, a.eps, a.normed, nq != nullptr ? nq->q : nullptr);
        if (fuse) {
            act_src_ = nullptr;  // the residual and normed rows change
            if (nq != nullptr) remember_act(a.normed, a.n_tokens, n_embd);
        }
        if (!launching()) {
            if (a.residual != nullptr && !fuse) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
            return;
        }
        DeviceMatrix gate = expert(*a.gate, 0), up = expert(*a.up, 0), down = expert(*a.down, 0);
        if (int8) {
            moe_gate_up(gate, up, xq, n_pairs, a.k, a.ids, hidden, tuning_, stream_, &down);
            quantize_act_q8(hidden, n_pairs, n_ff, n_ff, hq, stream_);
            moe_down(down, hq, n_pairs, a.k, a.ids, outp, tuning_, stream_);
        } else {
            moe_gate_up(gate, up, a.x, n_pairs, a.k, a.ids, hidden, tuning_, stream_, &down);
            moe_down(down, hidden, n_pairs, a.k, a.ids, outp, tuning_, stream_);
        }
        if (fuse) {
            moe_combine_add_rms_norm(outp, a.weights, a.k, a.residual, f32(*a.norm, n_embd), a.n_tokens, n_embd, a.eps, a.normed,
                                     stream_, nq);
            return;
        }
        moe_combine(outp, nullptr, a.weights, a.n_tokens, a.k, n_embd, a.out, stream_);
        if (a.residual != nullptr) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
        return;
    }
    // Group the pairs by expert on the host, then dense products per expert (eager only: it waits
    // for the routed ids).
    if (mode_ != Mode::Eager) {
        if (mode_ == Mode::Capture) abandon();
        mode_ = Mode::Abandoned;
        eager_sizes_.insert(fwd_tokens_);  // forwards of this size run eagerly from now on
        return;
    }
    moe_ids_.resize(static_cast<size_t>(n_pairs));
    STRATA_CUDA_CHECK(cudaMemcpyAsync(moe_ids_.data(), a.ids, static_cast<size_t>(n_pairs) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    sync();
    moe_offsets_.assign(static_cast<size_t>(n_expert + 1), 0);
    for (int32_t e : moe_ids_) {
        if (e < 0 || e >= n_expert) throw Error("expert id " + std::to_string(e) + " out of range");
        ++moe_offsets_[static_cast<size_t>(e) + 1];
    }
    for (int64_t e = 0; e < n_expert; ++e) moe_offsets_[static_cast<size_t>(e + 1)] += moe_offsets_[static_cast<size_t>(e)];
    moe_fill_.assign(moe_offsets_.begin(), moe_offsets_.end() - 1);
    moe_token_of_.resize(static_cast<size_t>(n_pairs));
    moe_slot_row_.resize(static_cast<size_t>(n_pairs));
    for (int64_t i = 0; i < n_pairs; ++i) {
        const int32_t row = moe_fill_[static_cast<size_t>(moe_ids_[static_cast<size_t>(i)])]++;
        moe_token_of_[static_cast<size_t>(row)] = static_cast<int32_t>(i / a.k);
        moe_slot_row_[static_cast<size_t>(i)] = row;
    }
    float* xg = static_cast<float*>(scratch(kMoeX, static_cast<size_t>(n_pairs * n_embd) * sizeof(float)));
    float* hg = static_cast<float*>(scratch(kMoeHidden, static_cast<size_t>(n_pairs * n_ff) * sizeof(float)));
    float* hu = static_cast<float*>(scratch(kMoeUp, static_cast<size_t>(n_pairs * n_ff) * sizeof(float)));
    gather_rows(a.x, n_embd, upload(moe_token_of_.data(), moe_token_of_.size()), n_pairs, xg, stream_);
    const int32_t* slot_row = upload(moe_slot_row_.data(), moe_slot_row_.size());
    if (grouped_gemm_ok_ && !is_float_type(a.gate->type) && !is_float_type(a.up->type) && !is_float_type(a.down->type) &&
        moe_grouped(a, xg, hg, hu, outp, slot_row)) {
        if (a.residual != nullptr) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
        return;
    }
    for (int64_t e = 0; e < n_expert; ++e) {
        const int64_t b = moe_offsets_[static_cast<size_t>(e)], n = moe_offsets_[static_cast<size_t>(e + 1)] - b;
        if (n == 0) continue;
        product(expert(*a.gate, e), xg + b * n_embd, n_embd, n, hg + b * n_ff, n_ff);
        product(expert(*a.up, e), xg + b * n_embd, n_embd, n, hu + b * n_ff, n_ff);
    }
    cuda::swiglu(hg, hu, n_pairs, n_ff, n_ff, hg, stream_);
    for (int64_t e = 0; e < n_expert; ++e) {
        const int64_t b = moe_offsets_[static_cast<size_t>(e)], n = moe_offsets_[static_cast<size_t>(e + 1)] - b;
        if (n == 0) continue;
        product(expert(*a.down, e), hg + b * n_ff, n_ff, n, outp + b * n_embd, n_embd);
    }
    moe_combine(outp, slot_row, a.weights, a.n_tokens, a.k, n_embd, a.out, stream_);
    if (a.residual != nullptr) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
}

}  // namespace

bool device_available(std::string* why) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why != nullptr) *why = std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
        cudaGetLastError();
        return false;
    }
    if (n == 0) {
        if (why != nullptr) *why = "no CUDA device is visible";
        return false;
    }
    return true;
}

double copy_bandwidth(int index) {
    STRATA_CUDA_CHECK(cudaSetDevice(index));
    const size_t bytes = size_t{2} << 30;
    void *a = nullptr, *b = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&a, bytes));
    STRATA_CUDA_CHECK(cudaMalloc(&b, bytes));
    STRATA_CUDA_CHECK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    STRATA_CUDA_CHECK(cudaEventCreate(&e0));
    STRATA_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < 6; ++r) {
        STRATA_CUDA_CHECK(cudaEventRecord(e0));
        STRATA_CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
        STRATA_CUDA_CHECK(cudaEventRecord(e1));
        STRATA_CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        STRATA_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (r > 0) ms.push_back(t);  // the first copy warms up
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    std::sort(ms.begin(), ms.end());
    return 2.0 * static_cast<double>(bytes) / (static_cast<double>(ms[ms.size() / 2]) * 1e-3) / 1e9;
}

std::unique_ptr<backend::Backend> make_cuda_backend(int index, const CudaOptions& o) {
    int n = 0;
    STRATA_CUDA_CHECK(cudaGetDeviceCount(&n));
    if (index >= n) throw Error("GPU " + std::to_string(index) + " does not exist (" + std::to_string(n) + " visible)");
    return std::make_unique<CudaBackend>(index, o);
}

namespace {
// Kernels are launched only by backends, each of which has called allow_dependent_launch first.
std::atomic<bool> g_dependent_launch{true};
}  // namespace
void allow_dependent_launch(bool on) {
    if (!on) g_dependent_launch.store(false, std::memory_order_relaxed);
}
bool dependent_launch() { return g_dependent_launch.load(std::memory_order_relaxed); }

}  // namespace strata::cuda
