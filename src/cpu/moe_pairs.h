// (token, expert) pairs of one MoE layer on the CPU: the CPU backend's experts, and the expert
// store's host tier (the pairs whose expert is not in VRAM). Contract:
//   out[t] = sum over the pairs p of token t of p.weight * E_{p.expert}(x[t]),
//   E_e(x) = down_e(silu(gate_e x) * up_e x),
// rows of tokens without pairs are zero. Each token's sum runs in the pairs' order (callers pass
// them in (token, slot) order, so the result does not depend on how pairs are grouped). The
// experts' matrices come from a callback, so they may live anywhere in host memory (the mapped
// file, a pinned arena).
//
//   cpu::MoePairs run;
//   run.run({x, n_tokens, n_embd}, pairs, [&](int32_t e) { return ExpertMatrices{...}; }, out, &pool, ks);
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "util/phase_times.h"
#include "util/thread_pool.h"

namespace strata::cpu {

struct ExpertPair {
    int32_t token = 0;
    int32_t expert = 0;
    float weight = 0.0f;
};

// One expert's three matrices: gate and up [n_ff][n_embd], down [n_embd][n_ff].
struct ExpertMatrices {
    WeightMatrix gate, up, down;
};

class MoePairs {
public:
    using ExpertFn = std::function<ExpertMatrices(int32_t expert)>;
    // x [n_tokens][n_embd] f32; out [n_tokens][n_embd] (overwritten). Throws strata::Error on an
    // expert id the callback refuses or weight types without a CPU kernel.
    void run(const float* x, int64_t n_tokens, int64_t n_embd, std::span<const ExpertPair> pairs, const ExpertFn& expert,
             float* out, util::ThreadPool* pool, const KernelSet& ks = default_kernels());
    // The distinct experts the last run() used.
    size_t n_experts() const { return experts_.size(); }
    // Wall time of each part of run() ("moe.*") into times; null (the default) turns it off.
    void set_phase_times(util::PhaseTimes* times) { times_ = times; }

private:
    Activations x_q_, h_q_;
    std::vector<MatmulJob> jobs_;
    std::vector<float> hidden_, pair_out_;
    std::vector<int32_t> experts_, order_, offsets_, token_of_, rows_, row_of_;
    std::vector<ExpertMatrices> mats_;
    util::PhaseTimes* times_ = nullptr;
};

}  // namespace strata::cpu
