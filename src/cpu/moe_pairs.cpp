// (token, expert) pairs on the CPU (moe_pairs.h): pairs grouped by expert, gate and up of every
// group in one pool dispatch, SwiGLU, down in a second, then the weighted sums in pair order
// (SwiGLU and the sums on the pool too when a prompt brings many pairs).
#include "cpu/moe_pairs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>

#include "util/error.h"
#include "util/parallel_ranges.h"

namespace strata::cpu {

void MoePairs::run(const float* x, int64_t n_tokens, int64_t n_embd, std::span<const ExpertPair> pairs, const ExpertFn& expert,
                   float* out, util::ThreadPool* pool, const KernelSet& ks) {
    std::optional<util::PhaseScope> part(std::in_place, times_, "moe.group");
    std::fill(out, out + n_tokens * n_embd, 0.0f);
    experts_.clear();
    const auto n_pairs = static_cast<int64_t>(pairs.size());
    if (n_pairs == 0) return;
    for (const ExpertPair& p : pairs)
        if (p.token < 0 || p.token >= n_tokens)
            throw Error("expert pair names token " + std::to_string(p.token) + " of " + std::to_string(n_tokens));
    // Grouped order: pairs sorted by expert (stable), rows offsets_[g] .. offsets_[g + 1] are the
    // pairs of experts_[g].
    order_.resize(static_cast<size_t>(n_pairs));
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
        return pairs[static_cast<size_t>(a)].expert < pairs[static_cast<size_t>(b)].expert;
    });
    offsets_.clear();
    token_of_.resize(static_cast<size_t>(n_pairs));
    row_of_.resize(static_cast<size_t>(n_pairs));
    for (int64_t r = 0; r < n_pairs; ++r) {
        const ExpertPair& p = pairs[static_cast<size_t>(order_[static_cast<size_t>(r)])];
        if (experts_.empty() || experts_.back() != p.expert) {
            experts_.push_back(p.expert);
            offsets_.push_back(static_cast<int32_t>(r));
        }
        token_of_[static_cast<size_t>(r)] = p.token;
        row_of_[static_cast<size_t>(order_[static_cast<size_t>(r)])] = static_cast<int32_t>(r);
    }
    offsets_.push_back(static_cast<int32_t>(n_pairs));
    mats_.clear();
    for (int32_t e : experts_) mats_.push_back(expert(e));
    const ExpertMatrices& m0 = mats_.front();
    const int64_t n_ff = m0.gate.rows;
    const auto gate_fmt = act_format_for(m0.gate.type), down_fmt = act_format_for(m0.down.type);
    if (!gate_fmt || !down_fmt || act_format_for(m0.up.type) != gate_fmt)
        throw Error(std::string("no CPU kernel for the expert weight types ") + quant::type_name(m0.gate.type) + "/" +
                    quant::type_name(m0.down.type));
    for (const ExpertMatrices& m : mats_)
        if (m.gate.type != m0.gate.type || m.up.type != m0.up.type || m.down.type != m0.down.type || m.gate.rows != n_ff ||
            m.up.rows != n_ff || m.gate.cols != n_embd || m.down.rows != n_embd || m.down.cols != n_ff)
            throw Error("experts of one layer differ in type or shape");

    // gate and up: hidden [n_pairs][2][n_ff] in grouped order.
    part.emplace(times_, "moe.quantize_x");
    x_q_.quantize(ks, *gate_fmt, x, n_embd, n_tokens, n_embd, pool);
    part.emplace(times_, "moe.gate_up");
    hidden_.resize(static_cast<size_t>(n_pairs * 2 * n_ff));
    jobs_.clear();
    for (size_t g = 0; g < experts_.size(); ++g) {
        const int32_t b = offsets_[g], n = offsets_[g + 1] - b;
        for (int which = 0; which < 2; ++which) {
            MatmulJob j;
            j.w = which == 0 ? mats_[g].gate : mats_[g].up;
            j.x = &x_q_;
            j.cols = token_of_.data() + b;
            j.n_cols = n;
            j.y = hidden_.data() + (static_cast<size_t>(b) * 2 + static_cast<size_t>(which)) * static_cast<size_t>(n_ff);
            j.y_stride = 2 * n_ff;
            jobs_.push_back(j);
        }
    }
    matmul_jobs(jobs_.data(), jobs_.size(), pool, ks);
    // silu(gate) * up into the first half of each row, then down.
    part.emplace(times_, "moe.swiglu");
    util::parallel_ranges(pool, n_pairs, n_ff, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            float* h = hidden_.data() + i * 2 * n_ff;
            ks.swiglu(h, h + n_ff, h, n_ff);
        }
    });
    part.emplace(times_, "moe.quantize_h");
    h_q_.quantize(ks, *down_fmt, hidden_.data(), n_ff, n_pairs, 2 * n_ff, pool);
    part.emplace(times_, "moe.down");
    pair_out_.resize(static_cast<size_t>(n_pairs * n_embd));
    rows_.resize(static_cast<size_t>(n_pairs));
    std::iota(rows_.begin(), rows_.end(), 0);
    jobs_.clear();
    for (size_t g = 0; g < experts_.size(); ++g) {
        const int32_t b = offsets_[g], n = offsets_[g + 1] - b;
        MatmulJob j;
        j.w = mats_[g].down;
        j.x = &h_q_;
        j.cols = rows_.data() + b;
        j.n_cols = n;
        j.y = pair_out_.data() + static_cast<size_t>(b) * static_cast<size_t>(n_embd);
        j.y_stride = n_embd;
        jobs_.push_back(j);
    }
    matmul_jobs(jobs_.data(), jobs_.size(), pool, ks);

    // Weighted sums in the pairs' order.
    part.emplace(times_, "moe.sum");
    // Split by column ranges, so every output value still sums its pairs in their order.
    util::parallel_ranges(pool, n_embd, n_pairs, [&](int64_t c0, int64_t c1) {
        for (int64_t i = 0; i < n_pairs; ++i) {
            const ExpertPair& p = pairs[static_cast<size_t>(i)];
            float* o = out + static_cast<int64_t>(p.token) * n_embd;
            const float* r =
                pair_out_.data() + static_cast<size_t>(row_of_[static_cast<size_t>(i)]) * static_cast<size_t>(n_embd);
            for (int64_t c = c0; c < c1; ++c) o[c] += p.weight * r[c];
        }
    });
}

}  // namespace strata::cpu
