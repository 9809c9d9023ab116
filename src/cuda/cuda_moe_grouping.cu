// Host-grouped MoE (cuda_moe_grouping.cuh).
#include "cuda/cuda_moe_grouping.cuh"

#include <algorithm>
#include <cstdio>
#include <string>

namespace strata::cuda {

void MoeGrouping::group(const int32_t* ids, int64_t n_pairs, int64_t k, int64_t n_expert) {
    ids_.resize(static_cast<size_t>(n_pairs));
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(ids_.data(), ids, static_cast<size_t>(n_pairs) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    sync_stream(stream_);
    offsets_.assign(static_cast<size_t>(n_expert + 1), 0);
    for (int32_t e : ids_) {
        if (e < 0 || e >= n_expert) throw Error("expert id " + std::to_string(e) + " out of range");
        ++offsets_[static_cast<size_t>(e) + 1];
    }
    for (int64_t e = 0; e < n_expert; ++e) offsets_[static_cast<size_t>(e + 1)] += offsets_[static_cast<size_t>(e)];
    fill_.assign(offsets_.begin(), offsets_.end() - 1);
    token_of_.resize(static_cast<size_t>(n_pairs));
    slot_row_.resize(static_cast<size_t>(n_pairs));
    for (int64_t i = 0; i < n_pairs; ++i) {
        const int32_t row = fill_[static_cast<size_t>(ids_[static_cast<size_t>(i)])]++;
        token_of_[static_cast<size_t>(row)] = static_cast<int32_t>(i / k);
        slot_row_[static_cast<size_t>(i)] = row;
    }
}

// One grouped cuBLAS call per chunk of experts instead of three dequantisations and products per
// expert.
bool MoeGrouping::grouped_products(const backend::MoeArgs& a, const float* xg, float* hg, float* hu, float* outp,
                                   const int32_t* slot_row) {
    const int64_t n_embd = a.gate->ne[0], n_ff = a.gate->ne[1], n_expert = a.gate->ne[2];
    const int64_t n_pairs = a.n_tokens * a.k;
    active_.clear();
    for (int64_t e = 0; e < n_expert; ++e)
        if (offsets_[static_cast<size_t>(e + 1)] > offsets_[static_cast<size_t>(e)]) active_.push_back(static_cast<int32_t>(e));
    // gate, up and down of one expert have the same number of values.
    const size_t per_expert = static_cast<size_t>(n_ff * n_embd) * 2;
    const auto n_active = static_cast<int64_t>(active_.size());
    const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(kScratchBytes / per_expert), 1, n_active);
    void* deq = pool_.scratch(kDenseW, static_cast<size_t>(chunk) * per_expert);
    void* act = pool_.scratch(kDenseX, static_cast<size_t>(n_pairs * std::max(n_embd, n_ff)) * 2);

    // out rows (bf16) of the pairs of each active expert = W_e in, in_dim -> out_dim.
    auto grouped = [&](const backend::Weight& w, int64_t in_dim, void* out, int64_t out_dim) {
        for (int64_t c0 = 0; c0 < n_active; c0 += chunk) {
            const int cnt = static_cast<int>(std::min(chunk, n_active - c0));
            const int32_t* experts = staging_.upload(active_.data() + c0, static_cast<size_t>(cnt));
            dequant_experts_bf16(weights_.expert(w, 0), experts, cnt, deq, stream_);
            ptrs_.resize(static_cast<size_t>(cnt));
            row0_.resize(static_cast<size_t>(cnt));
            rows_n_.resize(static_cast<size_t>(cnt));
            for (int i = 0; i < cnt; ++i) {
                const auto e = static_cast<size_t>(active_[static_cast<size_t>(c0 + i)]);
                ptrs_[static_cast<size_t>(i)] = static_cast<const uint8_t*>(deq) + static_cast<size_t>(i) * per_expert;
                row0_[static_cast<size_t>(i)] = offsets_[e];
                rows_n_[static_cast<size_t>(i)] = offsets_[e + 1] - offsets_[e];
            }
            if (!grouped_gemm(ptrs_.data(), row0_.data(), rows_n_.data(), cnt, act, in_dim, out, out_dim)) return false;
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

bool MoeGrouping::grouped_gemm(const void* const* a, const int32_t* row0, const int32_t* n, int cnt, const void* in,
                               int64_t in_dim, void* out, int64_t out_dim) {
    if (cnt <= 0) return true;
    const auto c = static_cast<size_t>(cnt);
    m_.assign(c, static_cast<int>(out_dim));
    k_.assign(c, static_cast<int>(in_dim));
    ldc_.assign(c, static_cast<int>(out_dim));
    one_.assign(c, 1);
    alpha_.assign(c, 1.0f);
    beta_.assign(c, 0.0f);
    ta_.assign(c, CUBLAS_OP_T);
    tb_.assign(c, CUBLAS_OP_N);
    n_.resize(c);
    a_.assign(a, a + c);
    b_.resize(c);
    c_.resize(c);
    for (size_t i = 0; i < c; ++i) {
        n_[i] = n[i];
        b_[i] = static_cast<const uint8_t*>(in) + static_cast<size_t>(row0[i] * in_dim) * 2;
        c_[i] = static_cast<uint8_t*>(out) + static_cast<size_t>(row0[i] * out_dim) * 2;
    }
    const cublasStatus_t st = cublasGemmGroupedBatchedEx(
        blas_, ta_.data(), tb_.data(), m_.data(), n_.data(), k_.data(), alpha_.data(), staging_.upload(a_.data(), a_.size()),
        CUDA_R_16BF, k_.data(), staging_.upload(b_.data(), b_.size()), CUDA_R_16BF, k_.data(), beta_.data(),
        staging_.upload(c_.data(), c_.size()), CUDA_R_16BF, ldc_.data(), cnt, one_.data(), CUBLAS_COMPUTE_32F);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
        std::fprintf(stderr, "cuda: this cuBLAS has no grouped bf16 GEMM for these shapes; experts are multiplied one by one\n");
        return false;
    }
    blas_check(st, "grouped bf16 gemm");
    return true;
}

}  // namespace strata::cuda
