// The CPU backend: activations in host memory, weights read in place from the mmap'd file,
// products through the quantised kernels of src/cpu on a thread pool.
#pragma once

#include <cmath>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "cpu/matmul.h"
#include "cpu/moe_pairs.h"
#include "util/phase_times.h"
#include "util/thread_pool.h"

namespace strata::backend {

// Activations shared by the CPU backend's ops (cpu_backend.cpp, cpu_gdn.cpp).
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int n_threads);
    ~CpuBackend() override;

    const char* name() const override { return "cpu"; }
    bool supports(quant::Type t) const override;
    int n_threads() const { return pool_.size(); }
    util::ThreadPool& pool() { return pool_; }
    // Wall time per op (and per part of the MoE op) into times from now on; null stops it.
    void set_phase_times(util::PhaseTimes* times) {
        times_ = times;
        moe_run_.set_phase_times(times);
    }

    float* alloc_floats(size_t n) override;
    void free_floats(float* p) override;
    void copy_to_host(const float* src, float* host, size_t n) override;
    void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids) override {
        for (int64_t r = 0; r < rows; ++r) ids[r] = argmax_row(x + r * n, n);
    }
    void copy_from_host(const float* host, float* dst, size_t n) override;
    void copy(const float* src, float* dst, size_t n) override;
    void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols) override;

    void get_rows(const Weight& table, const int32_t* ids, int64_t n, float* out) override;
    void matmul(std::span<const MatmulArgs> products) override;
    void rms_norm(const float* x, const Weight* w, int64_t rows, int64_t dim, float eps, float* out) override;
    void add(float* y, const float* x, int64_t n) override;
    void swiglu(const float* gate, const float* up, int64_t rows, int64_t dim, int64_t in_stride, float* out) override;
    void mul_sigmoid(float* x, const float* g, int64_t rows, int64_t dim, int64_t g_stride) override;
    void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeParams& p) override;
    void kv_store(const KvCacheView* const* kv, const int32_t* pos, int64_t n_tokens, const float* k, int64_t k_row,
                  const float* v, int64_t v_row) override;
    void attention(const AttentionArgs& a) override;
    void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                            float* weights) override;
    void moe(const MoeArgs& a) override;
    // The Gated DeltaNet ops live in cpu_gdn.cpp.
    void ssm_conv_silu(const float* x, int64_t n_tokens, int64_t channels, const Weight& w, int64_t kernel, float* conv_state,
                       float* out) override;
    void gdn_gates(const GdnGateArgs& a) override;
    void delta_rule(const DeltaRuleArgs& a) override;
    void l2_norm(float* x, int64_t n_tokens, int64_t rows, int64_t dim, int64_t token_stride, float eps) override;

private:
    util::ThreadPool pool_;
    const cpu::KernelSet& kernels_;
    // Scratch reused across calls (the backend is used by one forward at a time).
    std::vector<cpu::Activations> acts_;
    std::vector<cpu::MatmulJob> jobs_;
    cpu::MoePairs moe_run_;
    std::vector<cpu::ExpertPair> moe_pairs_;
    std::vector<std::pair<int64_t, int64_t>> attn_tiles_;  // [begin, end) token runs of one attention call
    static constexpr size_t kLargeAllocation = size_t{1} << 20;
    std::mutex large_mu_;
    std::unordered_map<void*, size_t> large_;  // mmap'd buffers and their sizes
    util::PhaseTimes* times_ = nullptr;
};

}  // namespace strata::backend
