// The compute backend interface: every op the model forwards use, on buffers the backend owns
// (host memory for the CPU backend, device memory for a GPU backend). Model code only
// orchestrates: it never reads or writes activation memory itself, so a new backend slots in
// without touching the architectures.
//
// Shapes are given row-major, outermost first: x [n_tokens][n_embd] means n_tokens rows of
// n_embd contiguous floats.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/row_sampling.h"
#include "backend/weight.h"
#include "cpu/moe_pairs.h"
#include "quant/types.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace strata::backend {

struct RopeParams {
    int64_t n_rot = 0;                  // rotated dims per head (<= head_dim); NeoX pairs (i, i + n_rot/2)
    float theta = 10000.0f;             // frequency base
    std::array<int32_t, 4> sections{};  // M-RoPE sections in pairs (t, h, w, extra); all zero: plain RoPE
    bool interleaved_mrope = false;     // Qwen3.5: sections interleaved over the pairs (t h w t h w ...)
    bool freqs_bf16 = false;            // round the frequencies to bf16 (model::LoadOptions::rope_freqs_bf16)
};

// The rotation frequency of each of the n_rot/2 NeoX pairs: theta^(-2i/n_rot), rounded to bf16
// when p.freqs_bf16. Every backend rotates with these exact values (backend.cpp).
std::vector<float> rope_inv_freq(const RopeParams& p);
// The index of the largest of x[0..n) (ties to the lower index, NaN as -inf; -1 if none is
// above -inf): Backend::argmax_rows on the host.
int32_t argmax_row(const float* x, int64_t n);

// What a KV cache pool holds: f32 values, or f16 where the backend offers it (Backend::kv_type):
// half the memory and the bandwidth, ~2.4e-4 relative rounding per value.
enum class KvType : uint8_t { F32, F16 };
// Pools are backend memory allocated in floats: the floats that hold n values of type t.
inline int64_t kv_pool_floats(int64_t n, KvType t) { return t == KvType::F16 ? (n + 1) / 2 : n; }
inline size_t kv_value_bytes(KvType t) { return t == KvType::F16 ? 2 : 4; }

// One attention layer's cache for one sequence, in blocks of block_size positions: position p
// lives in row p % block_size of block blocks[p / block_size] of the layer's pool. A contiguous
// cache is one block of block_size = capacity.
struct KvCacheView {
    void* k = nullptr;                // pool [n_pool_blocks][block_size][n_head_kv][head_dim_k] of `type`
    void* v = nullptr;                // pool [n_pool_blocks][block_size][n_head_kv][head_dim_v] of `type`
    const int32_t* blocks = nullptr;  // [n_blocks] block table of the sequence (host memory)
    int64_t n_blocks = 0;
    int64_t block_size = 0;
    KvType type = KvType::F32;
    int64_t capacity() const { return n_blocks * block_size; }  // positions it can hold now
};

struct AttentionArgs {
    const float* q = nullptr;  // [n_tokens][n_head][head_dim_k], normed and rotated
    float* out = nullptr;      // [n_tokens][n_head][head_dim_v]
    int64_t n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;
    float scale = 1.0f;                      // usually 1/sqrt(head_dim_k)
    const int32_t* pos = nullptr;            // [n_tokens]: token attends to cache rows 0..pos
    const KvCacheView* const* kv = nullptr;  // [n_tokens]: the cache of the token's sequence
    // The backend may round q, k, v and the probabilities to f16 for its products (~5e-4
    // relative each): set for quantised models, whose weights already carry far more error;
    // unquantised (f32/bf16/f16) models get f32 attention throughout.
    bool f16_ok = false;
};

// ---- The expert store's seat (docs/design/expert_store_seat.md) ---------------------------
// An expert store (src/experts/) keeps a model's experts in host memory and, on a GPU backend, the
// hot ones in VRAM slots. The backend runs the resident pairs itself and hands the others to the
// store's host executor; the store knows nothing of routing, the backend nothing of policy.

// One (token, expert) pair for the host: out[token] += weight * E_expert(x[token]).
using HostExpertPair = cpu::ExpertPair;

// The store's executor of the pairs whose expert is not in VRAM (the CPU kernels over the
// host-RAM / file tiers), and where it hears which experts a layer's batch used.
class HostExperts {
public:
    virtual ~HostExperts() = default;
    // out [n_tokens][n_embd] = the pairs' weighted expert outputs (cpu::MoePairs' contract).
    // pool: the thread pool to run on (the CPU backend's own), or null for the store's pool. May
    // run on a CUDA host-callback thread: it must not call the CUDA API.
    virtual void run(int layer, const float* x, int64_t n_tokens, std::span<const HostExpertPair> pairs, float* out,
                     util::ThreadPool* pool) = 0;
    // The experts of every pair of a batch (n ids), for the hit statistics: n_far of the pairs
    // ran on the GPU with their expert brought over the bus (read in place in decode, uploaded in
    // prefill), n_host ran on the host executor, the rest from VRAM slots.
    virtual void saw(int layer, const int32_t* ids, int64_t n, int64_t n_far, int64_t n_host) = 0;
    // A prefill layer split between the GPU and the host executor (ExpertPlacement's cost
    // model): how long the GPU's side took and how long the host's did (0: it had no share),
    // both from the layer's start, so the store can correct the model's balance.
    virtual void prefill_times(int layer, double gpu_s, double host_s) {
        (void)layer;
        (void)gpu_s;
        (void)host_s;
    }
};

// Where one layer's experts are: filled by the store, read by the backend's moe.
struct ExpertPlacement {
    int layer = -1;
    int64_t n_expert = 0;
    HostExperts* host = nullptr;
    // [n_expert]: the expert's VRAM slot (>= 0), -1 (missing: the host executor or an upload
    // runs it), or -2 - e (missing, but read in place from host memory by the GPU's kernels in
    // decode-sized calls: reads_host_experts), as the backend's device table has it for this
    // forward (set_expert_slots). Null on a backend without a device tier.
    const int32_t* slot_of = nullptr;
    // Cost model for batches grouped on the host (prefill): seconds to upload one expert of this
    // layer to the GPU, and for the host to apply it to n tokens: host_fixed_s + n * host_token_s.
    double upload_s = 0.0, host_fixed_s = 0.0, host_token_s = 0.0;
};

// A point in a backend's background copy stream (copy_to_expert_slot), for fence_reached.
using Fence = uint64_t;

// The experts of one MoE layer applied to a batch: out[t] = sum_j w[t][j] * E_{ids[t][j]}(x[t]),
// E_e(x) = down_e(silu(gate_e x) * up_e x). The one call through which all expert work goes, so
// a later expert store can decide per expert where it runs. ids and weights are backend memory
// (as route_softmax_topk writes them): a GPU backend routes and runs a decode step's experts
// without a round trip to the host.
struct MoeArgs {
    const Weight* gate = nullptr;  // [n_expert][n_ff][n_embd]   (GGUF ne: n_embd, n_ff, n_expert)
    const Weight* up = nullptr;    // [n_expert][n_ff][n_embd]
    const Weight* down = nullptr;  // [n_expert][n_embd][n_ff]
    const float* x = nullptr;      // [n_tokens][n_embd]
    int64_t n_tokens = 0;
    const int32_t* ids = nullptr;    // [n_tokens][k] expert ids (backend memory)
    const float* weights = nullptr;  // [n_tokens][k] routing weights (backend memory)
    int64_t k = 0;
    float* out = nullptr;  // [n_tokens][n_embd], overwritten
    int layer = -1;        // for statistics / placement decisions
    // null: every expert resident in this backend's copy of the weights (made at upload). Else the
    // store's placement of this layer's experts: gate/up/down are then the host tensors (not
    // uploaded), resident experts run from the backend's slots, the others through placement->host.
    const ExpertPlacement* placement = nullptr;
    // Optional, the layer's residual add and the norm after it: residual += the experts' result,
    // then normed = rms_norm(residual) * norm, as add_rms_norm(residual, out, norm, n_tokens,
    // n_embd, eps, normed) would (out is then scratch: a GPU adds the result into the residual
    // in its last kernel without writing it).
    float* residual = nullptr;
    const Weight* norm = nullptr;
    float eps = 0.0f;
    float* normed = nullptr;
};

// One product y = W x for a batch: y [n_tokens][W rows], x [n_tokens][W ne0].
struct MatmulArgs {
    const Weight* w = nullptr;
    const float* x = nullptr;
    int64_t n_tokens = 0;
    float* y = nullptr;
};

// Which key head a value head reads when a Gated DeltaNet layer has fewer key heads than value
// heads (n_v_heads = r * n_k_heads).
enum class KeyHeadMap : uint8_t {
    Grouped,  // value head h reads key head h / r: the r value heads of a key head are adjacent
    Tiled,    // value head h reads key head h % n_k_heads: key heads repeat as K0 K1 .. K0 K1 ..
};

// Gated DeltaNet over one sequence's run of tokens (conv applied; q, k L2-normed). S is the
// recurrent state per value head, [n_v_heads][d_k][d_v]; for each token t and value head h, with
// q and k of the key head that h reads:
//   S = exp(g[t][h]) * S;  S += k (beta[t][h] (v - S^T k))^T;  o = S^T q * scale
// chunk_size 0 runs that recurrence token by token (decode). chunk_size C > 0 computes the same
// result C tokens at a time (prefill): within a chunk the tokens' interactions are small C x C
// products (a triangular solve for the corrected values), the state is read once and updated
// once per chunk. Both agree up to float rounding, so a backend may choose its own form and
// chunk length for a run (the CUDA backend: 64-token chunks for runs of 128+ tokens with
// head sizes it has the kernels for, token by token otherwise).
struct DeltaRuleArgs {
    const float* q = nullptr;                          // token t at q + t*q_stride: [n_k_heads][d_k]
    const float* k = nullptr;                          // token t at k + t*k_stride: [n_k_heads][d_k]
    const float* v = nullptr;                          // token t at v + t*v_stride: [n_v_heads][d_v]
    int64_t q_stride = 0, k_stride = 0, v_stride = 0;  // floats between tokens; 0: dense rows
    const float* g = nullptr;                          // [n_tokens][n_v_heads] log decay (<= 0)
    const float* beta = nullptr;                       // [n_tokens][n_v_heads] in (0, 1)
    float* state = nullptr;                            // [n_v_heads][d_k][d_v], updated in place
    float* out = nullptr;                              // [n_tokens][n_v_heads][d_v]
    int64_t n_tokens = 0, n_v_heads = 0, d_k = 0, d_v = 0;
    int64_t n_k_heads = 0;  // 0: one key head per value head; else divides n_v_heads
    KeyHeadMap key_heads = KeyHeadMap::Grouped;
    float scale = 1.0f;
    int64_t chunk_size = 0;  // 0: recurrent form; > 0: chunked form with chunks of this size
};

// Gated DeltaNet gates per token t and value head h (n_heads of them):
//   g[t][h] = a[h] * softplus(alpha + dt_bias[h])   (a = -exp(A_log) < 0, so g is a log decay)
//   beta[t][h] = sigmoid(b)
// alpha and b of head h are read at alpha/b + t*row_stride + (h / group)*group_stride + h % group:
// group = n_heads reads dense [n_tokens][n_heads] rows; group = r, group_stride = 2r reads rows
// where each key head's r b values and r alpha values sit side by side (qwen3next's ssm_ba).
struct GdnGateArgs {
    const float* alpha = nullptr;
    const float* b = nullptr;
    int64_t row_stride = 0, group = 0, group_stride = 0;
    const Weight* a = nullptr;        // f32 [n_heads]
    const Weight* dt_bias = nullptr;  // f32 [n_heads]
    float* g = nullptr;               // [n_tokens][n_heads]
    float* beta = nullptr;            // [n_tokens][n_heads]
    int64_t n_tokens = 0, n_heads = 0;
};

// q [n_tokens][n_head][head_dim] and k [n_tokens][n_head_kv][head_dim]: each head scaled by
// rms_norm with q_norm / k_norm (f32 [head_dim]), then rotated as rope at pos[token].
struct QkNormRopeArgs {
    float* q = nullptr;
    const Weight* q_norm = nullptr;
    int64_t n_head = 0;
    float* k = nullptr;
    const Weight* k_norm = nullptr;
    int64_t n_head_kv = 0;
    int64_t n_tokens = 0, head_dim = 0;
    float eps = 0.0f;
    const int32_t* pos = nullptr;
    RopeParams rope;
    // Optional: then store k (normed and rotated) and v [n_tokens][v_row] into the tokens' cache
    // rows, as kv_store(kv, pos, n_tokens, k, n_head_kv * head_dim, v, v_row) would (the GPU
    // does it in the same kernel).
    const KvCacheView* const* kv = nullptr;
    const float* v = nullptr;
    int64_t v_row = 0;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;
    // Whether this backend has the kernels to compute with a matrix of type t (the loader asks
    // before binding a tensor, so a file loads on exactly the backends that can run it).
    virtual bool supports(quant::Type t) const = 0;

    // Makes the model's weights usable before the first forward: a GPU backend copies them into
    // device memory (Weight::data stays the key it finds them by), the CPU backend reads them in
    // place from the mapped file. progress(done, total) in bytes. Throws strata::Error naming the
    // tensor when a type has no kernel here, or when the weights do not fit the memory budget.
    using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;
    virtual void upload_weights(std::span<const Weight> weights, const ProgressFn& progress) {
        (void)weights;
        (void)progress;
    }

    // Brackets one model forward. A GPU backend may record the ops between them as a graph and
    // replay it for later forwards with the same ops (only the host inputs, uploaded by the ops,
    // differ). forward_end returns false when the ops ran nothing (the recording could not be
    // used): the caller then runs the forward again with may_replay = false, and it runs
    // eagerly. Host copies (copy_to_host) of a replayed forward are done by forward_end.
    virtual void forward_begin(int64_t n_tokens, bool may_replay) {
        (void)n_tokens;
        (void)may_replay;
    }
    virtual bool forward_end() { return true; }

    // Memory for activations and states, zero-filled. Freed with free_floats.
    virtual float* alloc_floats(size_t n) = 0;
    // The element type this backend's KV caches use for a model whose attention weights are
    // quantised (or not): f32 unless the backend offers f16 and the model's own error is far
    // larger than f16 rounding.
    virtual KvType kv_type(bool quantised_attention) const {
        (void)quantised_attention;
        return KvType::F32;
    }
    virtual void free_floats(float* p) = 0;
    virtual void copy_to_host(const float* src, float* host, size_t n) = 0;
    // Greedy sampling where the logits are: host ids[r] = the index of the largest value of row
    // r of x [rows][n] (ties to the lower index; NaN counts as -inf; -1 when the whole row is
    // -inf or NaN), written like copy_to_host. Only ids cross to the host, not n_vocab floats a
    // row. By default: the rows copied to the host, then the same argmax there.
    virtual void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids);
    // Sampling summaries where the logits are (row_sampling.h), outside a forward: for each
    // request i, applies its edits to row req[i].row of x [rows][n] in place and writes out[i]
    // and top [i*k, i*k + out[i].n_top). By default: each row through the host reference
    // (sample_row_host) and back.
    virtual void sample_rows(float* x, int64_t n, std::span<const RowSampleRequest> req, int32_t k, RowSample* out,
                             TokenLogit* top);
    // True where sample_rows saves copying rows to the host (a GPU backend); the engine then
    // samples through it.
    virtual bool samples_where_logits_are() const { return false; }
    virtual void copy_from_host(const float* host, float* dst, size_t n) = 0;
    virtual void copy(const float* src, float* dst, size_t n) = 0;
    // A strided block: dst row r (cols values at dst + r*dst_stride) = src row r (src + r*src_stride).
    virtual void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols) = 0;

    // out [n][ne0] = rows ids of the table (dequantised).
    virtual void get_rows(const Weight& table, const int32_t* ids, int64_t n, float* out) = 0;
    // Several products in one dispatch (e.g. q, k, v of one input).
    virtual void matmul(std::span<const MatmulArgs> products) = 0;
    // out [rows][dim] = x / rms(x) * w (w: f32 [dim], null: no scale). In place allowed.
    virtual void rms_norm(const float* x, const Weight* w, int64_t rows, int64_t dim, float eps, float* out) = 0;
    // y += x, n values.
    virtual void add(float* y, const float* x, int64_t n) = 0;
    // The residual add and the next norm in one pass: y [rows][dim] += x, then out = rms_norm(y)
    // (as rms_norm). A backend may fuse them; by default they run one after the other.
    virtual void add_rms_norm(float* y, const float* x, const Weight* w, int64_t rows, int64_t dim, float eps, float* out) {
        add(y, x, rows * dim);
        rms_norm(y, w, rows, dim, eps, out);
    }
    // out = silu(gate) * up, n values. gate/up may be strided: row r at gate + r*stride.
    virtual void swiglu(const float* gate, const float* up, int64_t rows, int64_t dim, int64_t in_stride, float* out) = 0;
    // x[r][:] *= sigmoid(g[r * g_stride + c]) for every column c (g_stride 0: one gate per row).
    virtual void mul_sigmoid(float* x, const float* g, int64_t rows, int64_t dim, int64_t g_stride) = 0;
    // Rotates the first n_rot dims of every head: x [n_tokens][n_heads][head_dim].
    virtual void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeParams& p) = 0;
    // Attention's per-head q/k RMSNorm then RoPE, in place (QkNormRopeArgs), and the optional
    // cache store. A backend may do it all in one pass; by default: rms_norm q, rms_norm k, rope
    // q, rope k, kv_store.
    virtual void qk_norm_rope(const QkNormRopeArgs& a) {
        rms_norm(a.q, a.q_norm, a.n_tokens * a.n_head, a.head_dim, a.eps, a.q);
        rms_norm(a.k, a.k_norm, a.n_tokens * a.n_head_kv, a.head_dim, a.eps, a.k);
        rope(a.q, a.n_tokens, a.n_head, a.head_dim, a.pos, a.rope);
        rope(a.k, a.n_tokens, a.n_head_kv, a.head_dim, a.pos, a.rope);
        if (a.kv != nullptr) kv_store(a.kv, a.pos, a.n_tokens, a.k, a.n_head_kv * a.head_dim, a.v, a.v_row);
    }
    // Writes rows of k [n_tokens][n_head_kv*head_dim_k] and v into the caches at pos.
    virtual void kv_store(const KvCacheView* const* kv, const int32_t* pos, int64_t n_tokens, const float* k, int64_t k_row,
                          const float* v, int64_t v_row) = 0;
    virtual void attention(const AttentionArgs& a) = 0;
    // Routing: softmax over n_expert logits per token, top-k (ties to the lower id), optional
    // renormalisation of the chosen weights. ids [n_tokens][k] and weights [n_tokens][k] are
    // backend memory (int32 and float views of the model's scratch arena: model/scratch.h).
    virtual void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                                    float* weights) = 0;
    virtual void moe(const MoeArgs& a) = 0;

    // ---- Expert slots: the expert store's device tier (none on a backend without VRAM) ----
    virtual bool has_expert_slots() const { return false; }
    // Bytes of device memory the budget has left for expert slots now (after weights, caches and
    // scratch so far), less `headroom` for what later forwards will still allocate.
    virtual uint64_t expert_slot_memory(uint64_t headroom) const {
        (void)headroom;
        return 0;
    }
    // Makes the layer's slot arenas for n_slots experts shaped as these tensors' slices, every
    // expert mapped to -1. host_pinned: the tensors' host memory may be registered for DMA.
    virtual void make_expert_slots(int layer, const Weight& gate, const Weight& up, const Weight& down, int64_t n_slots,
                                   bool host_pinned) {
        (void)layer, (void)gate, (void)up, (void)down, (void)n_slots, (void)host_pinned;
        throw Error(std::string("the ") + name() + " backend has no expert slots");
    }
    // Starts copying expert e of the layer (from the host tensors of make_expert_slots) into
    // slot s on a background stream, after every op queued so far (so a slot unmapped by
    // set_expert_slots is no longer read by an earlier forward). Returns its fence.
    virtual Fence copy_to_expert_slot(int layer, int64_t slot, int64_t expert) {
        (void)layer, (void)slot, (void)expert;
        throw Error(std::string("the ") + name() + " backend has no expert slots");
    }
    virtual bool fence_reached(Fence f) {
        (void)f;
        return true;
    }
    // The layer's device table (expert -> slot or -1) from host memory, for the forwards from
    // the next one on. Only between forwards.
    virtual void set_expert_slots(int layer, const int32_t* slot_of, int64_t n_expert) {
        (void)layer, (void)slot_of, (void)n_expert;
    }
    // Host-to-device speed of the slot copies measured so far (bytes/s; 0: none yet).
    virtual double expert_copy_rate() const { return 0.0; }
    // Whether this backend's expert kernels can read missing experts in place from host memory
    // (slot code -2 - e): the host tensors are registered and mapped for the device.
    virtual bool reads_host_experts() { return false; }

    // Gated DeltaNet pieces.
    // Causal depthwise conv1d with SiLU over one sequence's tokens, carrying the last
    // (kernel-1) inputs in conv_state [kernel-1][channels]:
    //   out[t][c] = silu(sum_j w[c][j] * in[t - kernel + 1 + j][c]), inputs before t = 0 from the state.
    // x, out: [n_tokens][channels], distinct buffers; w: f32, GGUF ne {kernel, channels}.
    virtual void ssm_conv_silu(const float* x, int64_t n_tokens, int64_t channels, const Weight& w, int64_t kernel,
                               float* conv_state, float* out) = 0;
    virtual void gdn_gates(const GdnGateArgs& a) = 0;
    virtual void delta_rule(const DeltaRuleArgs& a) = 0;
    // Scales rows of dim values to unit L2 norm, x / sqrt(sum x^2 + eps), in place. Each of the
    // n_tokens tokens has `rows` consecutive rows; token t's first row starts at x + t*token_stride
    // (token_stride = rows*dim: one dense [n_tokens][rows][dim] block).
    virtual void l2_norm(float* x, int64_t n_tokens, int64_t rows, int64_t dim, int64_t token_stride, float eps) = 0;
};

// RAII float buffer in backend memory.
class Buffer {
public:
    Buffer() = default;
    Buffer(Backend* b, size_t n) : backend_(b), data_(b->alloc_floats(n)), size_(n) {}
    ~Buffer() { reset(); }
    Buffer(Buffer&& o) noexcept : backend_(o.backend_), data_(o.data_), size_(o.size_) {
        o.data_ = nullptr;
        o.size_ = 0;
    }
    Buffer& operator=(Buffer&& o) noexcept {
        if (this != &o) {
            reset();
            backend_ = o.backend_;
            data_ = o.data_;
            size_ = o.size_;
            o.data_ = nullptr;
            o.size_ = 0;
        }
        return *this;
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    float* data() const { return data_; }
    size_t size() const { return size_; }
    // Grows (contents discarded) when smaller than n.
    float* ensure(Backend* b, size_t n) {
        if (size_ < n || backend_ != b) *this = Buffer(b, n);
        return data_;
    }
    void reset() {
        if (data_ != nullptr) backend_->free_floats(data_);
        data_ = nullptr;
        size_ = 0;
    }

private:
    Backend* backend_ = nullptr;
    float* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace strata::backend
