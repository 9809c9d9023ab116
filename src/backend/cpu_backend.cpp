#include "backend/cpu_backend.h"

#include "backend/cpu_attention.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "gguf/gguf.h"
#include "quant/dequant.h"
#include "util/error.h"
#include "util/fp16.h"
#include "util/parallel_ranges.h"

namespace strata::backend {

namespace {

cpu::WeightMatrix matrix_of(const Weight& w, int64_t slice = 0) {
    cpu::WeightMatrix m;
    m.type = w.type;
    m.data = w.slice(slice);
    m.rows = w.ne[1];
    m.cols = w.ne[0];
    m.row_stride = w.row_bytes;
    return m;
}

// An f32 weight (norm scales, conv filters) read in place; refuses other types and sizes.
const float* f32_data(const Weight& w, int64_t n) {
    if (w.type != quant::Type::F32 || w.ne[0] * w.rows() != n)
        throw Error("tensor " + w.name() + " must be f32 with " + std::to_string(n) + " values");
    return reinterpret_cast<const float*>(w.data);
}

}  // namespace

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads), kernels_(cpu::default_kernels()) {}

bool CpuBackend::supports(quant::Type t) const { return cpu::act_format_for(t).has_value(); }

CpuBackend::~CpuBackend() = default;

float* CpuBackend::alloc_floats(size_t n) {
    const size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
    if (bytes >= kLargeAllocation) {
        // Large buffers (KV pools, states) come from the kernel already zeroed, page by page on
        // first touch: a 2 GiB KV pool costs no time and no memory until it is used.
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw Error("out of memory mapping " + std::to_string(bytes >> 20) + " MiB");
        std::lock_guard<std::mutex> lock(large_mu_);
        large_[p] = bytes;
        return static_cast<float*>(p);
    }
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes of activations");
    std::memset(p, 0, bytes);
    return static_cast<float*>(p);
}

void CpuBackend::free_floats(float* p) {
    if (p == nullptr) return;
    {
        std::lock_guard<std::mutex> lock(large_mu_);
        const auto it = large_.find(p);
        if (it != large_.end()) {
            ::munmap(p, it->second);
            large_.erase(it);
            return;
        }
    }
    std::free(p);
}

void CpuBackend::copy_to_host(const float* src, float* host, size_t n) { std::memcpy(host, src, n * sizeof(float)); }
void CpuBackend::copy_from_host(const float* host, float* dst, size_t n) { std::memcpy(dst, host, n * sizeof(float)); }
void CpuBackend::copy(const float* src, float* dst, size_t n) { std::memmove(dst, src, n * sizeof(float)); }
void CpuBackend::copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
        std::memmove(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(cols) * sizeof(float));
}

void CpuBackend::get_rows(const Weight& table, const int32_t* ids, int64_t n, float* out) {
    util::PhaseScope phase(times_, "get_rows");
    const int64_t dim = table.ne[0];
    for (int64_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= table.rows())
            throw Error("token id " + std::to_string(ids[i]) + " is outside the vocabulary (" + std::to_string(table.rows()) +
                        ")");
        quant::dequantize_row(table.type, table.data + static_cast<size_t>(ids[i]) * table.row_bytes, out + i * dim, dim);
    }
}

void CpuBackend::matmul(std::span<const MatmulArgs> products) {
    util::PhaseScope phase(times_, "matmul");
    // Quantise each distinct (input, format) once: q, k and v of one input share their activations.
    struct Key {
        const float* x;
        cpu::ActFormat fmt;
    };
    std::vector<Key> keys;
    std::vector<size_t> act_of(products.size());
    for (size_t i = 0; i < products.size(); ++i) {
        const MatmulArgs& p = products[i];
        const auto fmt = cpu::act_format_for(p.w->type);
        if (!fmt)
            throw Error(std::string("no CPU kernel for weight type ") + quant::type_name(p.w->type) + " (" + p.w->name() + ")");
        size_t k = 0;
        while (k < keys.size() && !(keys[k].x == p.x && keys[k].fmt == *fmt)) ++k;
        if (k == keys.size()) {
            keys.push_back({p.x, *fmt});
            if (acts_.size() < keys.size()) acts_.resize(keys.size());
            acts_[k].quantize(kernels_, *fmt, p.x, p.w->ne[0], p.n_tokens, p.w->ne[0], &pool_);
        }
        act_of[i] = k;
    }
    jobs_.clear();
    for (size_t i = 0; i < products.size(); ++i) {
        const MatmulArgs& p = products[i];
        cpu::MatmulJob j;
        j.w = matrix_of(*p.w);
        j.x = &acts_[act_of[i]];
        j.y = p.y;
        j.y_stride = p.w->ne[1];
        jobs_.push_back(j);
    }
    cpu::matmul_jobs(jobs_.data(), jobs_.size(), &pool_, kernels_);
}

void CpuBackend::rms_norm(const float* x, const Weight* weight, int64_t rows, int64_t dim, float eps, float* out) {
    util::PhaseScope phase(times_, "rms_norm");
    const float* w = weight != nullptr ? f32_data(*weight, dim) : nullptr;
    util::parallel_ranges(&pool_, rows, dim, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) kernels_.rms_norm(x + r * dim, w, dim, eps, out + r * dim);
    });
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
    util::PhaseScope phase(times_, "add");
    constexpr int64_t kChunk = 4096;
    util::parallel_ranges(&pool_, (n + kChunk - 1) / kChunk, kChunk, [&](int64_t c0, int64_t c1) {
        for (int64_t i = c0 * kChunk, end = std::min(n, c1 * kChunk); i < end; ++i) y[i] += x[i];
    });
}

void CpuBackend::swiglu(const float* gate, const float* up, int64_t rows, int64_t dim, int64_t in_stride, float* out) {
    util::PhaseScope phase(times_, "swiglu");
    util::parallel_ranges(&pool_, rows, dim, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) kernels_.swiglu(gate + r * in_stride, up + r * in_stride, out + r * dim, dim);
    });
}

void CpuBackend::mul_sigmoid(float* x, const float* g, int64_t rows, int64_t dim, int64_t g_stride) {
    util::PhaseScope phase(times_, "mul_sigmoid");
    util::parallel_ranges(&pool_, rows, dim, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < dim; ++c) x[r * dim + c] *= sigmoid(g_stride == 0 ? g[r] : g[r * g_stride + c]);
    });
}

void CpuBackend::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeParams& p) {
    util::PhaseScope phase(times_, "rope");
    const int64_t half = p.n_rot / 2;
    // Text-only M-RoPE: the three position streams are equal, so every section rotates with the
    // same position and the result is plain RoPE over n_rot dims (sections only matter once
    // images bring distinct h/w positions).
    const std::vector<float> inv_freq = rope_inv_freq(p);
    util::parallel_ranges(&pool_, n_tokens, n_heads * head_dim, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            for (int64_t i = 0; i < half; ++i) {
                const float angle = static_cast<float>(pos[t]) * inv_freq[static_cast<size_t>(i)];
                float s, c;
                ::sincosf(angle, &s, &c);
                for (int64_t h = 0; h < n_heads; ++h) {
                    float* v = x + (t * n_heads + h) * head_dim;
                    const float a = v[i], b = v[i + half];
                    v[i] = a * c - b * s;
                    v[i + half] = b * c + a * s;
                }
            }
        }
    });
}

void CpuBackend::kv_store(const KvCacheView* const* kv, const int32_t* pos, int64_t n_tokens, const float* k, int64_t k_row,
                          const float* v, int64_t v_row) {
    util::PhaseScope phase(times_, "kv_store");
    for (int64_t t = 0; t < n_tokens; ++t) {
        const KvCacheView& c = *kv[t];
        if (pos[t] < 0 || pos[t] >= c.capacity())
            throw Error("position " + std::to_string(pos[t]) + " is outside the KV cache (" + std::to_string(c.capacity()) + ")");
        if (c.type != KvType::F32) throw Error("the CPU backend's KV caches hold f32 values");
        const int64_t row = c.blocks[pos[t] / c.block_size] * c.block_size + pos[t] % c.block_size;
        std::memcpy(static_cast<float*>(c.k) + row * k_row, k + t * k_row, static_cast<size_t>(k_row) * sizeof(float));
        std::memcpy(static_cast<float*>(c.v) + row * v_row, v + t * v_row, static_cast<size_t>(v_row) * sizeof(float));
    }
}

void CpuBackend::attention(const AttentionArgs& a) {
    util::PhaseScope phase(times_, "attention");
    const int64_t group = a.n_head / a.n_head_kv;
    const int64_t k_row = a.n_head_kv * a.head_dim_k, v_row = a.n_head_kv * a.head_dim_v;
    // Tiles: runs of up to kAttentionTile consecutive tokens of one sequence (same cache,
    // consecutive positions); a task is (KV head, tile, up to kMaxAttentionGroup query heads).
    attn_tiles_.clear();
    for (int64_t t = 0; t < a.n_tokens; ++t) {
        if (a.kv[t]->type != KvType::F32) throw Error("the CPU backend's KV caches hold f32 values");
        if (!attn_tiles_.empty()) {
            auto& [begin, end] = attn_tiles_.back();
            if (end - begin < kAttentionTile && a.kv[t] == a.kv[end - 1] && a.pos[t] == a.pos[end - 1] + 1) {
                ++end;
                continue;
            }
        }
        attn_tiles_.push_back({t, t + 1});
    }
    const int64_t n_tiles = static_cast<int64_t>(attn_tiles_.size());
    // Query heads per task: all of a KV head's (they share its rows) unless that leaves threads
    // idle, as a decode step's few KV heads do at 16 threads; then halved until every thread has
    // a task (each part reads the KV head's rows again, from cache at a decode step's depths).
    int64_t heads = std::min(group, kMaxAttentionGroup);
    const auto n_tasks = [&](int64_t h) { return a.n_head_kv * n_tiles * ((group + h - 1) / h); };
    while (heads > 1 && n_tasks(heads) < pool_.size()) heads = (heads + 1) / 2;
    const int64_t parts = (group + heads - 1) / heads;
    const AttentionTileFn kernel = attention_tile_kernel(kernels_.isa);
    pool_.parallel_for(a.n_head_kv * n_tiles * parts, [&](int64_t task, int) {
        const int64_t hk = task / (n_tiles * parts), tile = task / parts % n_tiles, part = task % parts;
        const auto [t0, t1] = attn_tiles_[static_cast<size_t>(tile)];
        const int64_t h0 = hk * group + part * heads;
        AttentionTileTask g;
        g.group = std::min(heads, group - part * heads);
        g.q = a.q + (t0 * a.n_head + h0) * a.head_dim_k;
        g.q_token_stride = a.n_head * a.head_dim_k;
        g.out = a.out + (t0 * a.n_head + h0) * a.head_dim_v;
        g.out_token_stride = a.n_head * a.head_dim_v;
        g.pos = a.pos + t0;
        g.n_queries = t1 - t0;
        g.head_dim_k = a.head_dim_k;
        g.head_dim_v = a.head_dim_v;
        g.kv = a.kv[t0];
        g.k_offset = hk * a.head_dim_k;
        g.v_offset = hk * a.head_dim_v;
        g.k_row = k_row;
        g.v_row = v_row;
        g.scale = a.scale;
        kernel(g);
    });
}

void CpuBackend::route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                                    float* weights) {
    util::PhaseScope phase(times_, "route");
    std::vector<float> p(static_cast<size_t>(n_expert));
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* l = logits + t * n_expert;
        const float mx = *std::max_element(l, l + n_expert);
        float sum = 0;
        for (int64_t e = 0; e < n_expert; ++e) sum += (p[static_cast<size_t>(e)] = std::exp(l[e] - mx));
        for (float& v : p) v /= sum;
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
            return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] ||
                   (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
        });
        float chosen = 0;
        for (int64_t j = 0; j < k; ++j) chosen += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
        for (int64_t j = 0; j < k; ++j) {
            const int32_t e = order[static_cast<size_t>(j)];
            ids[t * k + j] = e;
            weights[t * k + j] = renorm ? p[static_cast<size_t>(e)] / chosen : p[static_cast<size_t>(e)];
        }
    }
}

void CpuBackend::moe(const MoeArgs& a) {
    util::PhaseScope phase(times_, "moe");
    const int64_t n_embd = a.gate->ne[0], n_expert = a.gate->ne[2];
    const int64_t n_pairs = a.n_tokens * a.k;
    // The pairs in (token, slot) order: each token's sum runs in slot order.
    moe_pairs_.resize(static_cast<size_t>(n_pairs));
    for (int64_t i = 0; i < n_pairs; ++i) {
        const int32_t e = a.ids[i];
        if (e < 0 || e >= n_expert) throw Error("expert id " + std::to_string(e) + " out of range");
        moe_pairs_[static_cast<size_t>(i)] = {static_cast<int32_t>(i / a.k), e, a.weights[i]};
    }
    if (a.placement != nullptr) {
        // An expert store: no VRAM tier here, every pair runs through its host tiers.
        if (a.placement->host == nullptr) throw Error("an expert placement without a host executor");
        a.placement->host->saw(a.layer, a.ids, n_pairs, 0, n_pairs);
        a.placement->host->run(a.layer, a.x, a.n_tokens, moe_pairs_, a.out, &pool_);
    } else {
        moe_run_.run(
            a.x, a.n_tokens, n_embd, moe_pairs_,
            [&](int32_t e) {
                return cpu::ExpertMatrices{matrix_of(*a.gate, e), matrix_of(*a.up, e), matrix_of(*a.down, e)};
            },
            a.out, &pool_, kernels_);
    }
    if (a.residual != nullptr) add_rms_norm(a.residual, a.out, a.norm, a.n_tokens, n_embd, a.eps, a.normed);
}

}  // namespace strata::backend
