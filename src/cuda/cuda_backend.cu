// The CUDA backend: every Backend op a kernel (or a cuBLAS call) on one stream. CudaBackend keeps
// the Backend interface (each op signs itself for the recorded forwards, then launches) and
// composes the parts that hold state:
//   CudaDevice (cuda_device.cuh)          the GPU, its stream and cuBLAS handle;
//   ForwardGraphs (cuda_graphs.cuh)       decode-sized forwards recorded as CUDA graphs, replayed;
//   VramPool (cuda_vram_pool.cuh)         the VRAM budget, activations and scratch buffers;
//   HostStaging (cuda_staging.cuh)        ops' host inputs on their way to the device;
//   DeviceWeights (cuda_weights.cuh)      the weights in device memory and their bf16 copies;
//   ActQ8Cache (cuda_act_cache.cuh)       the 8-bit copy of an activation the products reuse;
//   MoeGrouping (cuda_moe_grouping.cuh)   large MoE batches grouped by expert on the host;
//   ExpertSlots (cuda_expert_slots.cuh)   an expert store's VRAM slots, uploads and host share.
// Products: a GEMV for up to kGemvMaxCols input rows (decode), else the weight as bf16 (its copy,
// or dequantised into scratch; f32 for float weights) and cuBLAS. MoE decode reads the routed
// expert ids on the device; larger batches group pairs by expert. The knobs: tuning_
// (cuda_tuning.h), passed to the launchers that read one.
#include "cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "cuda/cuda_act_cache.cuh"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_expert_slots.cuh"
#include "cuda/cuda_graphs.cuh"
#include "cuda/cuda_moe_grouping.cuh"
#include "cuda/cuda_staging.cuh"
#include "cuda/cuda_tuning.h"
#include "cuda/cuda_vram_pool.cuh"
#include "cuda/cuda_weights.cuh"

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
using backend::Weight;

// Pairs of a MoE call up to which experts are read through their ids (no grouping on the host).
constexpr int64_t kMoeIndexedPairs = 256;
// cuBLAS's workspace (ours, so that recorded calls use fixed memory).
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
// The staging area's first size (it doubles when one upload does not fit).
constexpr size_t kStagingBytes = size_t{4} << 20;
// Attention batches of at least this many tokens may take the tensor-core kernel.
constexpr int64_t kAttnTiledMinTokens = 16;
// Gated DeltaNet runs of at least this many tokens take the chunked delta rule (three kernels of
// 64-token chunks); shorter ones the token-by-token kernel. 80B-A3B geometry, H200, chunked
// against token by token: pp4096 +30 %, pp512 +12 %, pp128 even, pp64 and pp32 within noise.
constexpr int64_t kDeltaChunkedMinTokens = 128;

using quant::is_float_type;

class CudaBackend final : public backend::Backend {
    using Mode = ForwardGraphs::Mode;

public:
    CudaBackend(int index, const CudaOptions& o)
        : tuning_(o.tuning),
          dev_(index, tuning_.dependent_launch),
          stream_(dev_.stream()),
          blas_(dev_.blas()),
          graphs_(tuning_, stream_),
          pool_(o.vram_budget, index, graphs_, stream_),
          staging_(pool_, graphs_, stream_),
          weights_(pool_, graphs_, stream_),
          act_(pool_, graphs_, tuning_, stream_),
          moe_(pool_, staging_, weights_, dev_),
          slots_(pool_, stream_) {
        pool_.set_give_back([this] { weights_.give_back_bf16_copies(); });  // spare memory
        init_quant_tables();
        set_weight_prefetch(tuning_.weight_prefetch);
        staging_.grow(kStagingBytes);
        pool_.reserve(kBlasWorkspaceBytes, "the cuBLAS workspace");
        dev_.make_blas_workspace(kBlasWorkspaceBytes);
        pool_.charge(kBlasWorkspaceBytes);
    }

    // The parts free their own memory after this (the device, with the stream, last).
    ~CudaBackend() override {
        if (tuning_.times) graphs_.report_times();
        graphs_.abandon_capture();
        cudaStreamSynchronize(stream_);
        for (cudaEvent_t& e : placed_ev_)
            if (e != nullptr) cudaEventDestroy(e);
    }

    const char* name() const override { return "cuda"; }
    bool supports(quant::Type t) const override { return type_supported(t); }

    void forward_begin(int64_t n_tokens, bool may_replay) override {
        slots_.wake();
        act_.forget();
        graphs_.begin(n_tokens, may_replay, staging_);
    }
    bool forward_end() override {
        const bool ran = graphs_.end(staging_);
        if (const std::string e = slots_.take_error(); !e.empty())
            throw Error("the expert store's host share failed (" + e + "); the forward's result is void");
        return ran;
    }

    bool has_expert_slots() const override { return true; }
    uint64_t expert_slot_memory(uint64_t headroom) const override {
        const uint64_t used = pool_.used() + headroom;
        return pool_.budget() > used ? pool_.budget() - used : 0;
    }
    void make_expert_slots(int layer, const Weight& gate, const Weight& up, const Weight& down, int64_t n_slots,
                           bool host_pinned) override {
        graphs_.abandon_capture();
        slots_.make(layer, gate, up, down, n_slots, host_pinned);
    }
    backend::Fence copy_to_expert_slot(int layer, int64_t slot, int64_t expert) override {
        return slots_.copy(layer, slot, expert);
    }
    bool fence_reached(backend::Fence f) override { return slots_.reached(f); }
    void set_expert_slots(int layer, const int32_t* slot_of, int64_t n_expert) override {
        if (graphs_.mode() != Mode::Eager) throw Error("CUDA: expert slot tables change between forwards, not inside one");
        slots_.set_table(layer, slot_of, n_expert);
    }
    double expert_copy_rate() const override { return slots_.rate(); }
    bool reads_host_experts() override { return slots_.far_ok(); }

    void upload_weights(std::span<const Weight> weights, const ProgressFn& progress) override {
        act_.forget();
        weights_.upload(weights, progress);
    }
    float* alloc_floats(size_t n) override { return pool_.alloc_floats(n); }
    void free_floats(float* p) override { pool_.free_floats(p); }

    void copy_to_host(const float* src, float* host, size_t n) override {
        if (graphs_.mode() != Mode::Eager) {
            sign(kOpCopyToHost, src, n);
            graphs_.defer_copy_to_host(src, host, n);
            return;
        }
        STRATA_CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
        sync_stream(stream_);
    }
    void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids) override {
        if (rows <= 0) return;
        auto* dev = static_cast<int32_t*>(pool_.scratch(kArgmax, static_cast<size_t>(rows) * sizeof(int32_t)));
        sign(kOpArgmax, x, rows, n, dev);
        if (launching()) cuda::argmax_rows(x, rows, n, dev, stream_);
        // int32 ids travel as 4-byte floats (a bit copy).
        copy_to_host(reinterpret_cast<const float*>(dev), reinterpret_cast<float*>(ids), static_cast<size_t>(rows));
    }
    bool samples_where_logits_are() const override { return true; }
    void sample_rows(float* x, int64_t n, std::span<const backend::RowSampleRequest> req, int32_t k, backend::RowSample* out,
                     backend::TokenLogit* top) override {
        if (req.empty()) return;
        if (graphs_.mode() != Mode::Eager) throw Error("CUDA: sample_rows runs between forwards, not inside one");
        // The kernel reads rows as float4: other rows (no real vocabulary) take the host path.
        if (n % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) {
            Backend::sample_rows(x, n, req, k, out, top);
            return;
        }
        act_.forget();  // the edits write rows
        // One upload (jobs, then edits) and one download (summaries, then tokens).
        std::vector<cuda::RowSampleJob> jobs(req.size());
        size_t n_edits = 0;
        for (const auto& r : req) n_edits += r.edits.size();
        std::vector<backend::LogitEdit> edits;
        edits.reserve(n_edits);
        for (size_t i = 0; i < req.size(); ++i) {
            jobs[i] = {req[i].row,
                       static_cast<int32_t>(edits.size()),
                       static_cast<int32_t>(req[i].edits.size()),
                       req[i].inv_temperature,
                       req[i].u,
                       req[i].top_p,
                       req[i].min_p,
                       std::min(req[i].top, k)};
            edits.insert(edits.end(), req[i].edits.begin(), req[i].edits.end());
        }
        auto aligned = [](size_t b) { return (b + 255) / 256 * 256; };
        const size_t jobs_b = aligned(jobs.size() * sizeof(cuda::RowSampleJob));
        const size_t edits_b = aligned(std::max<size_t>(1, edits.size()) * sizeof(backend::LogitEdit));
        const size_t out_b = aligned(req.size() * sizeof(backend::RowSample));
        const size_t top_b = req.size() * static_cast<size_t>(std::max(k, 1)) * sizeof(backend::TokenLogit);
        auto* base = static_cast<uint8_t*>(pool_.scratch(kSample, jobs_b + edits_b + out_b + top_b));
        auto* d_jobs = reinterpret_cast<cuda::RowSampleJob*>(base);
        auto* d_edits = reinterpret_cast<backend::LogitEdit*>(base + jobs_b);
        auto* d_out = reinterpret_cast<backend::RowSample*>(base + jobs_b + edits_b);
        auto* d_top = reinterpret_cast<backend::TokenLogit*>(base + jobs_b + edits_b + out_b);
        STRATA_CUDA_CHECK(
            cudaMemcpyAsync(d_jobs, jobs.data(), jobs.size() * sizeof(cuda::RowSampleJob), cudaMemcpyHostToDevice, stream_));
        if (!edits.empty())
            STRATA_CUDA_CHECK(cudaMemcpyAsync(d_edits, edits.data(), edits.size() * sizeof(backend::LogitEdit),
                                              cudaMemcpyHostToDevice, stream_));
        cuda::sample_rows(x, n, d_jobs, static_cast<int64_t>(jobs.size()), d_edits, k, d_out, d_top, stream_);
        STRATA_CUDA_CHECK(cudaMemcpyAsync(out, d_out, req.size() * sizeof(backend::RowSample), cudaMemcpyDeviceToHost, stream_));
        if (k > 0) STRATA_CUDA_CHECK(cudaMemcpyAsync(top, d_top, top_b, cudaMemcpyDeviceToHost, stream_));
        sync_stream(stream_);
    }
    void copy_from_host(const float* host, float* dst, size_t n) override {
        act_.forget();
        graphs_.abandon_capture();
        if (graphs_.mode() != Mode::Eager) return;
        STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
        sync_stream(stream_);
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
        STRATA_CUDA_CHECK(cudaMemcpy2DAsync(
            dst, static_cast<size_t>(dst_stride) * sizeof(float), src, static_cast<size_t>(src_stride) * sizeof(float),
            static_cast<size_t>(cols) * sizeof(float), static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_));
    }

    void get_rows(const Weight& table, const int32_t* ids, int64_t n, float* out) override {
        for (int64_t i = 0; i < n; ++i)
            if (ids[i] < 0 || ids[i] >= table.rows())
                throw Error("token id " + std::to_string(ids[i]) + " is outside the vocabulary (" + std::to_string(table.rows()) +
                            ")");
        const int32_t* d = staging_.upload(ids, static_cast<size_t>(n));
        sign(kOpGetRows, table.data, n, out, d);
        if (!launching()) return;
        dequant_rows_f32(weights_.matrix(table), d, n, out, stream_);
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
                for (size_t k = i; k < j2; ++k) ws[k - i] = weights_.matrix(*products[k].w);
                if (gemv1_two_types_fit(ws, static_cast<int>(j2 - i), tuning_)) {
                    two_types = true;
                    j = j2;
                }
            }
            if (!batchable && p.n_tokens > 1 && p.n_tokens <= kGemvMaxCols && int8_ok) {
                // A few rows (decode of several sequences): 8-bit inputs too.
                const ActQ8 xq = act_.for_input(p.x, p.n_tokens, p.w->ne[0]);
                const DeviceMatrix w = weights_.matrix(*p.w);
                sign(kOpProduct, w.data, p.x, p.n_tokens, p.y, true);
                if (launching()) gemv(w, xq, p.n_tokens, p.y, p.w->ne[1], stream_);
            } else if (!batchable || (j - i == 1 && !int8)) {
                product(weights_.matrix(*p.w), p.x, p.w->ne[0], p.n_tokens, p.y, p.w->ne[1], true);
            } else {
                const ActQ8 xq = int8 ? act_.for_input(p.x, 1, p.w->ne[0]) : ActQ8{};
                DeviceMatrix ws[kGemvBatchMax];
                float* ys[kGemvBatchMax];
                for (size_t k = i; k < j; ++k) {
                    ws[k - i] = weights_.matrix(*products[k].w);
                    ys[k - i] = products[k].y;
                    sign(kOpProduct, ws[k - i].data, p.x, ys[k - i], int8, two_types);
                }
                if (launching()) {
                    if (two_types) gemv1_two_types(ws, ys, static_cast<int>(j - i), xq, tuning_, stream_);
                    else if (int8) gemv1_multi(ws, ys, static_cast<int>(j - i), xq, tuning_, stream_);
                    else gemv1_multi(ws, ys, static_cast<int>(j - i), p.x, tuning_, stream_);
                }
            }
            for (size_t k = i; k < j; ++k) act_.wrote(products[k].y, products[k].n_tokens * products[k].w->ne[1]);
            i = j;
        }
    }

    void rms_norm(const float* x, const Weight* w, int64_t rows, int64_t dim, float eps, float* out) override {
        const ActQ8* q8 = act_.out(rows, dim);
        sign(kOpRmsNorm, x, w != nullptr ? w->data : nullptr, rows, dim, eps, out, q8 != nullptr ? q8->q : nullptr);
        if (q8 != nullptr) act_.remember(out, rows, dim);
        if (!launching()) return;
        cuda::rms_norm(x, w != nullptr ? weights_.f32(*w, dim) : nullptr, rows, dim, eps, out, stream_, q8);
    }
    void add(float* y, const float* x, int64_t n) override {
        sign_writing(y, n, kOpAdd, y, x, n);
        if (launching()) cuda::add(y, x, n, stream_);
    }
    void add_rms_norm(float* y, const float* x, const Weight* w, int64_t rows, int64_t dim, float eps, float* out) override {
        const ActQ8* q8 = act_.out(rows, dim);
        sign(kOpAddRmsNorm, y, x, w != nullptr ? w->data : nullptr, rows, dim, eps, out, q8 != nullptr ? q8->q : nullptr);
        if (q8 != nullptr) act_.remember(out, rows, dim);
        if (!launching()) return;
        cuda::add_rms_norm(y, x, w != nullptr ? weights_.f32(*w, dim) : nullptr, rows, dim, eps, out, stream_, q8);
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
        h.q_norm = weights_.f32(*a.q_norm, a.head_dim);
        h.n_head = a.n_head;
        h.k = a.k;
        h.k_norm = weights_.f32(*a.k_norm, a.head_dim);
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
        return (static_cast<const char*>(p) - static_cast<const char*>(base)) /
               static_cast<int64_t>(backend::kv_value_bytes(type));
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
                throw Error("position " + std::to_string(pos[t]) + " is outside the KV cache (" + std::to_string(c.capacity()) +
                            ")");
            if (c.type != kv[0]->type) throw Error("internal: one batch's KV caches hold different value types");
            const int64_t row = static_cast<int64_t>(c.blocks[pos[t] / c.block_size]) * c.block_size + pos[t] % c.block_size;
            off[static_cast<size_t>(t)] = values_between(r.k_base, c.k, c.type) + row * k_row;
            off[static_cast<size_t>(n_tokens + t)] = values_between(r.v_base, c.v, c.type) + row * v_row;
        }
        r.off = staging_.upload_cached(&key_kv_rows_, off.data(), off.size());
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
                throw Error("position " + std::to_string(a.pos[t]) + " is outside the KV cache (" +
                            std::to_string(c->capacity()) + ")");
            if (c->type != type) throw Error("internal: one batch's KV caches hold different value types");
            // Block tables are keyed by their host array: every layer's view of a sequence shares it.
            const int32_t* table = staging_.upload_cached(c->blocks, c->blocks, static_cast<size_t>(c->n_blocks));
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
        d.tokens = staging_.upload_cached(&key_tokens_, tokens.data(), tokens.size());
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
                if (first == nullptr || tiles.back().n == tile_tokens || c->k != first->k || c->v != first->v ||
                    c->blocks != first->blocks)
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
            const AttnTile* dt = staging_.upload_cached(&key_tiles_, tiles.data(), tiles.size());
            sign(kOpAttention, d.q, d.out, d.k, d.v, d.kv_half, d.tokens, d.n_tokens, d.n_head, d.n_head_kv, d.head_dim_k,
                 d.scale, dt, tiles.size());
            if (!launching()) return;
            cuda::attention_tiled(d, dt, static_cast<int64_t>(tiles.size()), stream_);
            return;
        }
        const int64_t splits = attention_splits(d, dev_.n_sm(), tuning_.attention_split_min);
        d.partial = static_cast<float*>(pool_.scratch(kAttnPartial, attention_partial_floats(d, splits) * sizeof(float)));
        // Decode: the output also rounded to 8 bits for the output projection that reads it.
        const int64_t out_dim = a.n_head * a.head_dim_v;
        const ActQ8* q8 = a.head_dim_v % 32 == 0 ? act_.out(a.n_tokens, out_dim) : nullptr;
        if (q8 != nullptr) d.q8 = *q8;
        // The walk's form is part of the signature: a recorded graph keeps the kernel it captured.
        sign(kOpAttention, d.q, d.out, d.k, d.v, d.kv_half, d.tokens, d.n_tokens, d.n_head, d.n_head_kv, d.head_dim_k,
             d.head_dim_v, d.scale, splits, d.partial, d.q8.q, attention_octets(d, splits, tuning_.attention_octet_min));
        if (q8 != nullptr) act_.remember(d.out, a.n_tokens, out_dim);
        if (!launching()) return;
        cuda::attention(d, splits, dev_.max_shared(), tuning_.attention_octet_min, stream_);
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
        cuda::ssm_conv_silu(x, n_tokens, channels, weights_.f32(w, kernel * channels), kernel, conv_state, out, stream_);
    }
    void gdn_gates(const GdnGateArgs& a) override {
        sign(kOpGates, a.alpha, a.b, a.row_stride, a.group, a.group_stride, a.a->data, a.dt_bias->data, a.g, a.beta, a.n_tokens,
             a.n_heads);
        if (!launching()) return;
        cuda::gdn_gates(a.alpha, a.b, a.row_stride, a.group, a.group_stride, weights_.f32(*a.a, a.n_heads),
                        weights_.f32(*a.dt_bias, a.n_heads), a.g, a.beta, a.n_tokens, a.n_heads, stream_);
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
        float* work =
            chunked ? static_cast<float*>(pool_.scratch(kDeltaChunks, cuda::delta_rule_chunked_scratch_floats(d) * sizeof(float)))
                    : nullptr;
        sign(kOpDeltaRule, d.q, d.k, d.v, d.q_stride, d.k_stride, d.v_stride, d.g, d.beta, d.state, d.out, d.n_tokens,
             d.n_v_heads, d.n_k_heads, d.d_k, d.d_v, d.tiled, d.scale, work);
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
    // Appends an op and its arguments to the signature of the forward being recorded or replayed.
    // Every op passes here first: all but those that only read activations (products, experts,
    // routing, the rounding itself) may write the input the 8-bit copy was made from.
    template <class... A>
    void sign(OpCode op, A... args) {
        if (op != kOpProduct && op != kOpMoe && op != kOpRoute && op != kOpQuantize) act_.forget();
        graphs_.record(op, args...);
    }
    // For ops that write only [out, out + n): the 8-bit copy stays valid unless they overlap
    // its rows.
    template <class... A>
    void sign_writing(const float* out, int64_t n, OpCode op, A... args) {
        act_.wrote(out, n);
        graphs_.record(op, args...);
    }
    bool launching() const { return graphs_.launching(); }

    // Device positions and inverse frequencies for rope: the frequencies exactly as the CPU
    // backend rotates with, computed again only when the parameters change (every layer of every
    // step asks with the same ones).
    std::pair<const int32_t*, const float*> rope_inputs(const int32_t* pos, int64_t n_tokens, const RopeParams& p) {
        if (inv_freq_.empty() || p.n_rot != inv_freq_params_.n_rot || p.theta != inv_freq_params_.theta ||
            p.freqs_bf16 != inv_freq_params_.freqs_bf16) {
            inv_freq_ = backend::rope_inv_freq(p);
            inv_freq_params_ = p;
        }
        return {staging_.upload_cached(&key_pos_, pos, static_cast<size_t>(n_tokens)),
                staging_.upload_cached(&key_inv_freq_, inv_freq_.data(), inv_freq_.size())};
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
                float* deq = static_cast<float*>(pool_.scratch(kDenseW, static_cast<size_t>(m) * k * sizeof(float)));
                dequant_matrix(w, false, deq, stream_);
                a = deq;
            }
            blas_check(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, cols, k, &one, a, k, x, static_cast<int>(x_stride), &zero,
                                   y, static_cast<int>(y_stride)),
                       "sgemm");
            return;
        }
        void* b = pool_.scratch(kDenseX, static_cast<size_t>(cols) * k * 2);
        const void* a = cacheable ? weights_.bf16_copy(w) : nullptr;
        if (!launching()) return;  // bf16_copy declined a recording: the forward reruns eagerly
        if (a == nullptr) {
            void* deq = pool_.scratch(kDenseW, static_cast<size_t>(m) * k * 2);
            if (!launching()) return;
            dequant_matrix(w, true, deq, stream_);
            a = deq;
        }
        to_bf16(x, n, k, x_stride, b, stream_);
        blas_check(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, cols, k, &one, a, CUDA_R_16BF, k, b, CUDA_R_16BF, k, &zero, y,
                                CUDA_R_32F, static_cast<int>(y_stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "bf16 gemm");
    }

    void moe_experts(const MoeArgs& a);  // moe() but for telling the 8-bit copy what it wrote
    void moe_placed_indexed(const MoeArgs& a);
    void moe_placed_grouped(const MoeArgs& a);
    void moe_on_device(const MoeArgs& a, float* outp);
    void moe_grouped_on_host(const MoeArgs& a, float* outp);

    const CudaTuning tuning_;
    CudaDevice dev_;
    const cudaStream_t stream_;  // dev_'s
    const cublasHandle_t blas_;  // dev_'s
    ForwardGraphs graphs_;
    VramPool pool_;
    HostStaging staging_;
    DeviceWeights weights_;
    ActQ8Cache act_;
    MoeGrouping moe_;
    ExpertSlots slots_;
    std::vector<float> inv_freq_;  // rope_inv_freq of inv_freq_params_
    RopeParams inv_freq_params_;
    // Keys of upload_cached for per-step arrays (their addresses only serve as keys).
    char key_pos_ = 0, key_inv_freq_ = 0, key_kv_rows_ = 0, key_tokens_ = 0, key_tiles_ = 0;
    // Host arrays of the ops, kept for their memory.
    std::vector<int64_t> kv_offsets_;
    std::vector<TokenKv> attn_tokens_;
    std::vector<AttnTile> attn_tiles_;
    // The placed grouped MoE's host arrays.
    std::vector<int32_t> placed_ids_, placed_token_of_, placed_slot_row_;
    std::vector<float> placed_w_, placed_x_, placed_out_;
    std::vector<backend::HostExpertPair> placed_host_pairs_;
    // The GPU side's start and end in a placed grouped MoE (its time for the store's balance).
    cudaEvent_t placed_ev_[2] = {nullptr, nullptr};
};

void CudaBackend::moe(const MoeArgs& a) {
    if (a.placement == nullptr) moe_experts(a);
    else if (a.n_tokens * a.k <= ExpertSlots::kMaxPairs) moe_placed_indexed(a);
    else moe_placed_grouped(a);
    act_.wrote(a.out, a.n_tokens * a.gate->ne[0]);  // after: x may be out, and its copy was used
}

void CudaBackend::moe_experts(const MoeArgs& a) {
    const int64_t n_embd = a.gate->ne[0];
    const int64_t n_pairs = a.n_tokens * a.k;
    if (n_pairs <= 0) return;
    float* outp = static_cast<float*>(pool_.scratch(kMoePairs, static_cast<size_t>(n_pairs * n_embd) * sizeof(float)));
    if (n_pairs <= kMoeIndexedPairs) moe_on_device(a, outp);
    else moe_grouped_on_host(a, outp);
}

// Up to kMoeIndexedPairs pairs: the experts read through the routed ids on the device (decode),
// gate and up in one kernel, then down, then the weighted sum into a.out. outp: the pairs' rows.
void CudaBackend::moe_on_device(const MoeArgs& a, float* outp) {
    const int64_t n_embd = a.gate->ne[0], n_ff = a.gate->ne[1];
    const int64_t n_pairs = a.n_tokens * a.k;
    float* hidden = static_cast<float*>(pool_.scratch(kMoeHidden, static_cast<size_t>(n_pairs * n_ff) * sizeof(float)));
    const bool int8 =
        tuning_.int8_products && q8_supported(a.gate->type) && q8_supported(a.down->type) && n_embd % 32 == 0 && n_ff % 32 == 0;
    ActQ8 xq{}, hq{};
    if (int8) {
        xq = act_.for_input(a.x, a.n_tokens, n_embd);
        hq = act_q8_in(pool_.scratch(kActHidden, act_q8_bytes(n_pairs, n_ff)), n_pairs, n_ff);
    }
    // With a residual: the combine, the residual add and the next norm in one kernel where
    // the shape fits, else the combine and add_rms_norm.
    const bool fuse = a.residual != nullptr && moe_combine_add_rms_norm_fits(outp, a.residual, a.normed, n_embd);
    const ActQ8* nq = fuse ? act_.out(a.n_tokens, n_embd) : nullptr;
    sign(kOpMoe, a.gate->data, a.up->data, a.down->data, a.x, a.n_tokens, a.k, a.ids, a.weights, a.out, outp, hidden, xq.q, hq.q,
         fuse, a.residual, fuse ? a.norm->data : nullptr, a.eps, a.normed, nq != nullptr ? nq->q : nullptr);
    if (fuse) {
        act_.forget();  // the residual and normed rows change
        if (nq != nullptr) act_.remember(a.normed, a.n_tokens, n_embd);
    }
    if (!launching()) {
        if (a.residual != nullptr && !fuse) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
        return;
    }
    DeviceMatrix gate = weights_.expert(*a.gate, 0), up = weights_.expert(*a.up, 0), down = weights_.expert(*a.down, 0);
    if (int8) {
        moe_gate_up(gate, up, xq, n_pairs, a.k, a.ids, hidden, tuning_, stream_, &down);
        quantize_act_q8(hidden, n_pairs, n_ff, n_ff, hq, stream_);
        moe_down(down, hq, n_pairs, a.k, a.ids, outp, tuning_, stream_);
    } else {
        moe_gate_up(gate, up, a.x, n_pairs, a.k, a.ids, hidden, tuning_, stream_, &down);
        moe_down(down, hidden, n_pairs, a.k, a.ids, outp, tuning_, stream_);
    }
    if (fuse) {
        moe_combine_add_rms_norm(outp, a.weights, a.k, a.residual, weights_.f32(*a.norm, n_embd), a.n_tokens, n_embd, a.eps,
                                 a.normed, stream_, nq);
        return;
    }
    moe_combine(outp, nullptr, a.weights, a.n_tokens, a.k, n_embd, a.out, stream_);
    if (a.residual != nullptr) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
}

// More pairs: grouped by expert on the host, then dense products per expert (eager only: it
// waits for the routed ids).
void CudaBackend::moe_grouped_on_host(const MoeArgs& a, float* outp) {
    const int64_t n_embd = a.gate->ne[0], n_ff = a.gate->ne[1], n_expert = a.gate->ne[2];
    const int64_t n_pairs = a.n_tokens * a.k;
    if (graphs_.mode() != Mode::Eager) {
        graphs_.decline();
        graphs_.keep_size_eager();  // forwards of this size run eagerly from now on
        return;
    }
    moe_.group(a.ids, n_pairs, a.k, n_expert);
    float* xg = static_cast<float*>(pool_.scratch(kMoeX, static_cast<size_t>(n_pairs * n_embd) * sizeof(float)));
    float* hg = static_cast<float*>(pool_.scratch(kMoeHidden, static_cast<size_t>(n_pairs * n_ff) * sizeof(float)));
    float* hu = static_cast<float*>(pool_.scratch(kMoeUp, static_cast<size_t>(n_pairs * n_ff) * sizeof(float)));
    gather_rows(a.x, n_embd, staging_.upload(moe_.token_of().data(), moe_.token_of().size()), n_pairs, xg, stream_);
    const int32_t* slot_row = staging_.upload(moe_.slot_row().data(), moe_.slot_row().size());
    if (moe_.grouped_ok() && !is_float_type(a.gate->type) && !is_float_type(a.up->type) && !is_float_type(a.down->type) &&
        moe_.grouped_products(a, xg, hg, hu, outp, slot_row)) {
        if (a.residual != nullptr) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
        return;
    }
    const std::vector<int32_t>& offsets = moe_.offsets();
    for (int64_t e = 0; e < n_expert; ++e) {
        const int64_t b = offsets[static_cast<size_t>(e)], n = offsets[static_cast<size_t>(e + 1)] - b;
        if (n == 0) continue;
        product(weights_.expert(*a.gate, e), xg + b * n_embd, n_embd, n, hg + b * n_ff, n_ff);
        product(weights_.expert(*a.up, e), xg + b * n_embd, n_embd, n, hu + b * n_ff, n_ff);
    }
    cuda::swiglu(hg, hu, n_pairs, n_ff, n_ff, hg, stream_);
    for (int64_t e = 0; e < n_expert; ++e) {
        const int64_t b = offsets[static_cast<size_t>(e)], n = offsets[static_cast<size_t>(e + 1)] - b;
        if (n == 0) continue;
        product(weights_.expert(*a.down, e), hg + b * n_ff, n_ff, n, outp + b * n_embd, n_embd);
    }
    moe_combine(outp, slot_row, a.weights, a.n_tokens, a.k, n_embd, a.out, stream_);
    if (a.residual != nullptr) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
}

// An expert store's layer, up to kMaxPairs pairs (decode): the slot lookup splits the pairs and
// hands the host its share while the GPU runs the resident and in-place pairs; the host's
// weighted rows are added before the combine's norm (ExpertSlots: the link, one kernel each way;
// or with STRATA_CUDA_HOST_LINK=0 a side branch that copies the ids and x down, runs a host
// callback and copies the rows up). All of it records into a graph (the host reads what the
// lookup wrote at run time; the addresses are fixed).
void CudaBackend::moe_placed_indexed(const MoeArgs& a) {
    const ExpertSlots::Layer& L = slots_.layer(a.layer);
    const int64_t n_embd = a.gate->ne[0], n_ff = a.gate->ne[1];
    const int64_t n_pairs = a.n_tokens * a.k;
    if (n_pairs <= 0) return;
    float* outp = static_cast<float*>(pool_.scratch(kMoePairs, static_cast<size_t>(n_pairs * n_embd) * sizeof(float)));
    float* hidden = static_cast<float*>(pool_.scratch(kMoeHidden, static_cast<size_t>(n_pairs * n_ff) * sizeof(float)));
    const bool int8 =
        tuning_.int8_products && q8_supported(a.gate->type) && q8_supported(a.down->type) && n_embd % 32 == 0 && n_ff % 32 == 0;
    ActQ8 xq{}, hq{};
    if (int8) {
        xq = act_.for_input(a.x, a.n_tokens, n_embd);
        hq = act_q8_in(pool_.scratch(kActHidden, act_q8_bytes(n_pairs, n_ff)), n_pairs, n_ff);
    }
    const bool fuse = a.residual != nullptr && moe_combine_add_rms_norm_fits(outp, a.residual, a.normed, n_embd);
    const ActQ8* nq = fuse ? act_.out(a.n_tokens, n_embd) : nullptr;
    const bool link = tuning_.host_link;
    ExpertSlots::HostJob* job = slots_.job(a.layer, a.n_tokens);
    job->host = a.placement->host;
    job->layer = a.layer;
    job->n_tokens = a.n_tokens;
    job->k = a.k;
    int32_t* pack = slots_.d_pack();
    const int32_t* slot_ids = pack + n_pairs;
    sign(kOpMoe, L.gate_slots, L.up_slots, L.down_slots, L.table, a.x, a.n_tokens, a.k, a.ids, a.weights, a.out, outp, hidden,
         xq.q, hq.q, fuse, a.residual, fuse ? a.norm->data : nullptr, a.eps, a.normed, nq != nullptr ? nq->q : nullptr, job);
    if (fuse) {
        act_.forget();
        if (nq != nullptr) act_.remember(a.normed, a.n_tokens, n_embd);
    }
    if (!launching()) {
        if (a.residual != nullptr && !fuse) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
        return;
    }
    if (link) {
        slots_.link_post(a.layer, a.placement->host, a.ids, a.weights, L.table, a.n_tokens, a.k, a.x, stream_);
    } else {
        const size_t x_bytes = static_cast<size_t>(a.n_tokens * n_embd) * sizeof(float);
        expert_slot_lookup(a.ids, a.weights, L.table, n_pairs, pack, stream_);
        const cudaStream_t side = slots_.side();
        STRATA_CUDA_CHECK(cudaEventRecord(slots_.fork(), stream_));
        STRATA_CUDA_CHECK(cudaStreamWaitEvent(side, slots_.fork(), 0));
        STRATA_CUDA_CHECK(cudaMemcpyAsync(slots_.h_pack(), pack, static_cast<size_t>(3 * n_pairs) * sizeof(int32_t),
                                          cudaMemcpyDeviceToHost, side));
        STRATA_CUDA_CHECK(cudaMemcpyAsync(slots_.h_x(), a.x, x_bytes, cudaMemcpyDeviceToHost, side));
        STRATA_CUDA_CHECK(cudaLaunchHostFunc(side, ExpertSlots::run_host_job, job));
        STRATA_CUDA_CHECK(cudaMemcpyAsync(slots_.d_partial(), slots_.h_out(), x_bytes, cudaMemcpyHostToDevice, side));
        STRATA_CUDA_CHECK(cudaEventRecord(slots_.join(), side));
    }
    const DeviceMatrix gate = L.gate_m(), up = L.up_m(), down = L.down_m();
    const MoeFar far = slots_.far(a.layer);
    if (int8) {
        moe_gate_up(gate, up, xq, n_pairs, a.k, slot_ids, hidden, tuning_, stream_, &down, far);
        quantize_act_q8(hidden, n_pairs, n_ff, n_ff, hq, stream_);
        moe_down(down, hq, n_pairs, a.k, slot_ids, outp, tuning_, stream_, far);
    } else {
        moe_gate_up(gate, up, a.x, n_pairs, a.k, slot_ids, hidden, tuning_, stream_, &down, far);
        moe_down(down, hidden, n_pairs, a.k, slot_ids, outp, tuning_, stream_, far);
    }
    // The host's rows: into the residual before the fused combine, else into out after it.
    auto join = [&](float* y) {
        if (link) {
            slots_.link_join(y, a.n_tokens, stream_);
            return;
        }
        STRATA_CUDA_CHECK(cudaStreamWaitEvent(stream_, slots_.join(), 0));
        cuda::add(y, slots_.d_partial(), a.n_tokens * n_embd, stream_);
    };
    if (fuse) {
        join(a.residual);
        moe_combine_add_rms_norm(outp, a.weights, a.k, a.residual, weights_.f32(*a.norm, n_embd), a.n_tokens, n_embd, a.eps,
                                 a.normed, stream_, nq);
        return;
    }
    moe_combine(outp, nullptr, a.weights, a.n_tokens, a.k, n_embd, a.out, stream_);
    join(a.out);
    if (a.residual != nullptr) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
}

// An expert store's layer, more pairs (prefill, big batches; eager: the ids come to the host).
// Each used expert runs where the cost model says: resident ones from their slots; missing ones
// either uploaded into a transient half on the copy stream (overlapped with the compute of the
// previous chunk) or given to the host executor, which computes its share on this thread while
// the GPU works — balanced so that neither side waits long for the other. Experts are laid out
// resident, uploaded, host; chunks of up to ExpertSlots::kUploadExperts experts are dequantised
// to bf16 and multiplied in grouped GEMMs; the host's rows are zero in the combine and its
// weighted sums are added after.
void CudaBackend::moe_placed_grouped(const MoeArgs& a) {
    if (graphs_.mode() != Mode::Eager) {
        graphs_.decline();
        graphs_.keep_size_eager();
        return;
    }
    const ExpertSlots::Layer& L = slots_.layer(a.layer);
    const backend::ExpertPlacement& P = *a.placement;
    const int64_t n_embd = a.gate->ne[0], n_ff = a.gate->ne[1], n_expert = a.gate->ne[2];
    const int64_t n_pairs = a.n_tokens * a.k;
    act_.forget();
    // ids, weights and x to the host (one wait).
    std::vector<int32_t>& ids = placed_ids_;
    std::vector<float>& w = placed_w_;
    std::vector<float>& x = placed_x_;
    ids.resize(static_cast<size_t>(n_pairs));
    w.resize(static_cast<size_t>(n_pairs));
    x.resize(static_cast<size_t>(a.n_tokens * n_embd));
    STRATA_CUDA_CHECK(cudaMemcpyAsync(ids.data(), a.ids, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    STRATA_CUDA_CHECK(cudaMemcpyAsync(w.data(), a.weights, w.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    STRATA_CUDA_CHECK(cudaMemcpyAsync(x.data(), a.x, x.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    sync_stream(stream_);
    std::vector<int32_t> count(static_cast<size_t>(n_expert), 0);
    for (int32_t e : ids) {
        if (e < 0 || e >= n_expert) throw Error("expert id " + std::to_string(e) + " out of range");
        ++count[static_cast<size_t>(e)];
    }
    // Where each used expert runs: 0 resident, 1 uploaded, 2 host.
    enum : uint8_t { kResident, kUpload, kHost };
    std::vector<uint8_t> where(static_cast<size_t>(n_expert), kResident);
    std::vector<int32_t> missing;
    for (int64_t e = 0; e < n_expert; ++e)
        if (count[static_cast<size_t>(e)] > 0 && P.slot_of[e] < 0) missing.push_back(static_cast<int32_t>(e));
    std::stable_sort(missing.begin(), missing.end(),
                     [&](int32_t p, int32_t q) { return count[static_cast<size_t>(p)] > count[static_cast<size_t>(q)]; });
    double t_gpu = 0.0, t_host = 0.0;
    for (int32_t e : missing) {
        const double host = P.host_fixed_s + P.host_token_s * count[static_cast<size_t>(e)];
        if (t_gpu + P.upload_s <= t_host + host) {
            where[static_cast<size_t>(e)] = kUpload;
            t_gpu += P.upload_s;
        } else {
            where[static_cast<size_t>(e)] = kHost;
            t_host += host;
        }
    }
    // The grouped layout: resident experts, then uploaded, then host; rows of expert e from
    // offsets[e], the pairs in (token, slot) order within it.
    std::vector<int32_t> order;
    for (uint8_t cls : {kResident, kUpload, kHost})
        for (int64_t e = 0; e < n_expert; ++e)
            if (count[static_cast<size_t>(e)] > 0 && where[static_cast<size_t>(e)] == cls)
                order.push_back(static_cast<int32_t>(e));
    std::vector<int32_t> offset(static_cast<size_t>(n_expert), 0), fill(static_cast<size_t>(n_expert), 0);
    int32_t rows = 0, gpu_rows = 0;
    for (int32_t e : order) {
        offset[static_cast<size_t>(e)] = rows;
        rows += count[static_cast<size_t>(e)];
        if (where[static_cast<size_t>(e)] != kHost) gpu_rows = rows;
    }
    std::vector<int32_t>& token_of = placed_token_of_;
    std::vector<int32_t>& slot_row = placed_slot_row_;
    token_of.resize(static_cast<size_t>(n_pairs));
    slot_row.resize(static_cast<size_t>(n_pairs));
    std::vector<backend::HostExpertPair>& host_pairs = placed_host_pairs_;
    host_pairs.clear();
    for (int64_t i = 0; i < n_pairs; ++i) {
        const auto e = static_cast<size_t>(ids[static_cast<size_t>(i)]);
        const int32_t row = offset[e] + fill[e]++;
        token_of[static_cast<size_t>(row)] = static_cast<int32_t>(i / a.k);
        slot_row[static_cast<size_t>(i)] = row;
        if (where[e] == kHost)
            host_pairs.push_back({static_cast<int32_t>(i / a.k), static_cast<int32_t>(e), w[static_cast<size_t>(i)]});
    }
    // Uploaded pairs count with those read in place: the GPU ran them, their expert came over the bus.
    int64_t n_uploaded = 0;
    for (int32_t e : ids) n_uploaded += where[static_cast<size_t>(e)] == kUpload;
    P.host->saw(a.layer, ids.data(), n_pairs, n_uploaded, static_cast<int64_t>(host_pairs.size()));

    float* outp = static_cast<float*>(pool_.scratch(kMoePairs, static_cast<size_t>(n_pairs * n_embd) * sizeof(float)));
    float* xg = static_cast<float*>(pool_.scratch(kMoeX, static_cast<size_t>(n_pairs * n_embd) * sizeof(float)));
    float* hg = static_cast<float*>(pool_.scratch(kMoeHidden, static_cast<size_t>(n_pairs * n_ff) * sizeof(float)));
    float* hu = static_cast<float*>(pool_.scratch(kMoeUp, static_cast<size_t>(n_pairs * n_ff) * sizeof(float)));
    const size_t per_expert = static_cast<size_t>(n_ff * n_embd) * 2;  // one bf16 matrix
    const int64_t chunk = std::max<int64_t>(
        1, std::min<int64_t>(ExpertSlots::kUploadExperts, static_cast<int64_t>(MoeGrouping::kScratchBytes / per_expert)));
    void* deq = pool_.scratch(kDenseW, static_cast<size_t>(chunk) * per_expert);
    void* act = pool_.scratch(kDenseX, static_cast<size_t>(n_pairs * std::max(n_embd, n_ff)) * 2);
    // The GPU's side and the host's are timed from here (the stream is idle: synchronised above).
    const bool split = !missing.empty();
    if (split) {
        for (cudaEvent_t& e : placed_ev_)
            if (e == nullptr) STRATA_CUDA_CHECK(cudaEventCreate(&e));
        STRATA_CUDA_CHECK(cudaEventRecord(placed_ev_[0], stream_));
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (gpu_rows > 0) {
        gather_rows(a.x, n_embd, staging_.upload(token_of.data(), static_cast<size_t>(gpu_rows)), gpu_rows, xg, stream_);
        to_bf16(xg, gpu_rows, n_embd, n_embd, act, stream_);
    }
    if (gpu_rows < n_pairs)  // the host's rows add nothing in the combine
        STRATA_CUDA_CHECK(cudaMemsetAsync(reinterpret_cast<uint8_t*>(outp) + static_cast<size_t>(gpu_rows * n_embd) * 2, 0,
                                          static_cast<size_t>((n_pairs - gpu_rows) * n_embd) * 2, stream_));
    // Chunks: runs of up to `chunk` experts of one class.
    struct Chunk {
        size_t begin, end;
        bool upload;
    };
    std::vector<Chunk> chunks;
    for (size_t i = 0; i < order.size();) {
        const uint8_t cls = where[static_cast<size_t>(order[i])];
        if (cls == kHost) break;
        size_t j = i;
        while (j < order.size() && j - i < static_cast<size_t>(chunk) && where[static_cast<size_t>(order[j])] == cls) ++j;
        chunks.push_back({i, j, cls == kUpload});
        i = j;
    }
    std::vector<int> half_of(chunks.size(), -1);
    std::vector<size_t> uploads;  // chunk indices that upload, in order
    for (size_t c = 0; c < chunks.size(); ++c)
        if (chunks[c].upload) uploads.push_back(c);
    auto queue_upload = [&](size_t u) {
        if (u >= uploads.size()) return;
        const Chunk& ch = chunks[uploads[u]];
        half_of[uploads[u]] = static_cast<int>(u % 2);
        slots_.upload(a.layer, static_cast<int>(u % 2), order.data() + ch.begin, static_cast<int64_t>(ch.end - ch.begin));
    };
    queue_upload(0);
    queue_upload(1);
    size_t next_upload = 2;
    std::vector<int32_t> list;
    std::vector<const void*> ptrs;
    std::vector<int32_t> row0, nrows;
    bool ok = moe_.grouped_ok();
    for (size_t c = 0; c < chunks.size() && ok; ++c) {
        const Chunk& ch = chunks[c];
        const int cnt = static_cast<int>(ch.end - ch.begin);
        const int half = half_of[c];
        list.clear();
        row0.clear();
        nrows.clear();
        ptrs.clear();
        for (size_t i = ch.begin; i < ch.end; ++i) {
            const auto e = static_cast<size_t>(order[i]);
            list.push_back(ch.upload ? static_cast<int32_t>(i - ch.begin) : P.slot_of[e]);
            row0.push_back(offset[e]);
            nrows.push_back(count[e]);
            ptrs.push_back(static_cast<const uint8_t*>(deq) + (i - ch.begin) * per_expert);
        }
        const int32_t* dlist = staging_.upload(list.data(), list.size());
        if (ch.upload) slots_.wait_upload(half);
        const DeviceMatrix gm = ch.upload ? slots_.upload_gate(a.layer, half) : L.gate_m();
        const DeviceMatrix um = ch.upload ? slots_.upload_up(a.layer, half) : L.up_m();
        const DeviceMatrix dm = ch.upload ? slots_.upload_down(a.layer, half) : L.down_m();
        const int64_t r0 = row0.front(), nr = std::accumulate(nrows.begin(), nrows.end(), int64_t{0});
        dequant_experts_bf16(gm, dlist, cnt, deq, stream_);
        ok = moe_.grouped_gemm(ptrs.data(), row0.data(), nrows.data(), cnt, act, n_embd, hg, n_ff);
        dequant_experts_bf16(um, dlist, cnt, deq, stream_);
        ok = ok && moe_.grouped_gemm(ptrs.data(), row0.data(), nrows.data(), cnt, act, n_embd, hu, n_ff);
        // SwiGLU of the chunk's rows, in place into hg (down reads them from there).
        swiglu_bf16(reinterpret_cast<uint8_t*>(hg) + static_cast<size_t>(r0 * n_ff) * 2,
                    reinterpret_cast<uint8_t*>(hu) + static_cast<size_t>(r0 * n_ff) * 2, nr * n_ff,
                    reinterpret_cast<uint8_t*>(hg) + static_cast<size_t>(r0 * n_ff) * 2, stream_);
        dequant_experts_bf16(dm, dlist, cnt, deq, stream_);
        ok = ok && moe_.grouped_gemm(ptrs.data(), row0.data(), nrows.data(), cnt, hg, n_ff, outp, n_embd);
        if (ch.upload) {
            slots_.release(half);
            queue_upload(next_upload++);
        }
    }
    if (!ok) throw Error("the expert store on CUDA needs cuBLAS's grouped bf16 GEMM, which this cuBLAS lacks");
    if (split) STRATA_CUDA_CHECK(cudaEventRecord(placed_ev_[1], stream_));
    // The host's share on this thread while the GPU works, then its rows up and added.
    float* partial = nullptr;
    double host_s = 0.0;
    if (!host_pairs.empty()) {
        std::vector<float>& out = placed_out_;
        out.resize(x.size());
        P.host->run(a.layer, x.data(), a.n_tokens, host_pairs, out.data(), nullptr);
        host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        partial = static_cast<float*>(pool_.scratch(kMoeHostRows, out.size() * sizeof(float)));
        STRATA_CUDA_CHECK(cudaMemcpyAsync(partial, out.data(), out.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
    }
    moe_combine_bf16(outp, staging_.upload(slot_row.data(), slot_row.size()), a.weights, a.n_tokens, a.k, n_embd, a.out, stream_);
    if (partial != nullptr) cuda::add(a.out, partial, a.n_tokens * n_embd, stream_);
    if (a.residual != nullptr) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
    // The host vectors above are read by queued copies: wait before they change (the next layer).
    sync_stream(stream_);
    if (split) {
        float gpu_ms = 0.0f;
        STRATA_CUDA_CHECK(cudaEventElapsedTime(&gpu_ms, placed_ev_[0], placed_ev_[1]));
        P.host->prefill_times(a.layer, 1e-3 * gpu_ms, host_s);
    }
}

}  // namespace

std::unique_ptr<backend::Backend> make_cuda_backend(int index, const CudaOptions& o) {
    int n = 0;
    STRATA_CUDA_CHECK(cudaGetDeviceCount(&n));
    if (index >= n) throw Error("GPU " + std::to_string(index) + " does not exist (" + std::to_string(n) + " visible)");
    return std::make_unique<CudaBackend>(index, o);
}

}  // namespace strata::cuda
