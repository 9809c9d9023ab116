// Shared by the CUDA backend's translation units: error checks, warp reductions, and the host
// launchers each kernel file provides (all on the backend's one stream).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "backend/row_sampling.h"
#include "cuda/cuda_tuning.h"
#include "quant/types.h"
#include "util/error.h"

namespace strata::cuda {

[[noreturn]] inline void fail(cudaError_t e, const char* what) {
    throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}
#define STRATA_CUDA_CHECK(call)                                                   \
    do {                                                                          \
        const cudaError_t strata_err_ = (call);                                   \
        if (strata_err_ != cudaSuccess) ::strata::cuda::fail(strata_err_, #call); \
    } while (0)
// After a kernel launch: a bad configuration shows up here, not at the next sync.
#define STRATA_CUDA_LAUNCHED() STRATA_CUDA_CHECK(cudaGetLastError())
// Waits for the work queued on s so far.
inline void sync_stream(cudaStream_t s) { STRATA_CUDA_CHECK(cudaStreamSynchronize(s)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// A KV cache value: the pools hold f32 values, or f16 ones (backend::KvType::F16).
__device__ __forceinline__ void kv_put(void* base, bool half, int64_t i, float x) {
    if (half) static_cast<__half*>(base)[i] = __float2half_rn(x);
    else static_cast<float*>(base)[i] = x;
}
__device__ __forceinline__ float kv_value(float x) { return x; }
__device__ __forceinline__ float kv_value(__half x) { return __half2float(x); }

inline unsigned blocks_for(int64_t n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

// ---- programmatic dependent launch (sm_90+) --------------------------------------------------
// Each kernel may be launched while the one before it on the stream is still running: its
// blocks get resident early and wait in grid_dependency_enter() until the previous grid has
// finished and its writes are visible, then let the next kernel launch. A decode step is ~500
// small dependent kernels, and this overlaps each launch with the kernel before it. Every
// kernel started through launch_kernel() must call grid_dependency_enter() before it touches
// global memory (a kernel that skipped it could overtake its predecessor).
__device__ __forceinline__ void grid_dependency_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// Asks the L2 cache to start fetching global bytes [p, p + n): a hint nothing waits on (sm_90's
// bulk prefetch, run by the SM's copy engine while the threads go on; nothing on older parts).
// Trimmed to the whole 16-byte units inside the range, as the instruction requires.
__device__ __forceinline__ void prefetch_l2(const void* p, size_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr uintptr_t kMaxBytes = uintptr_t{1} << 20;  // the size operand is 32-bit
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uintptr_t lo = (a + 15) & ~uintptr_t{15};
    const uintptr_t hi = (a + n) & ~uintptr_t{15};
    for (; lo < hi; lo += kMaxBytes) {
        const auto bytes = static_cast<uint32_t>(hi - lo < kMaxBytes ? hi - lo : kMaxBytes);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(lo), "r"(bytes) : "memory");
    }
#else
    (void)p;
    (void)n;
#endif
}

// ---- bulk copies into shared memory (sm_90+) ------------------------------------------------
// One thread starts copies of global bytes into the block's shared memory, run by the SM's copy
// engine, and counts them on an mbarrier; the block's threads wait on it before reading the
// copy. A product issues its weight rows' copies before grid_dependency_enter() (weights never
// change during a forward), so they land while the kernel before it finishes. The host asks for
// this only where dependent launch is on (sm_90+ code: gemv1_stage_bytes); older parts compile
// these to nothing.
__device__ __forceinline__ uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// Thread 0: readies `bar` for one arrival carrying `bytes` of copies.
__device__ __forceinline__ void bulk_copy_begin(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint32_t b = shared_address(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
#else
    (void)bar;
    (void)bytes;
#endif
}
// Thread 0: `bytes` (a multiple of 16, both addresses 16-byte aligned) from src to dst.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(shared_address(dst)),
        "l"(src), "r"(bytes), "r"(shared_address(bar))
        : "memory");
#else
    (void)dst;
    (void)src;
    (void)bytes;
    (void)bar;
#endif
}
// Every thread: until the copies counted on `bar` have landed.
__device__ __forceinline__ void bulk_copy_wait(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(shared_address(bar))
                     : "memory");
    } while (done == 0);
#else
    (void)bar;
#endif
}

// Whether launch_kernel() asks for early launch: allowed by each backend when the code that
// runs on its device was compiled for sm_90 or later (kernel_code_version() >= 90: the wait above
// is compiled in), unless STRATA_CUDA_PDL=0. Process-wide: the first backend sets it and later
// ones can only turn it off (GPUs of different generations in one process run without it).
void allow_dependent_launch(bool on);
bool dependent_launch();
int kernel_code_version();  // min(SASS, PTX) version of the code the device runs, e.g. 90

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t s, Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shared;
    cfg.stream = s;
    cudaLaunchAttribute attr[1] = {};
    if (dependent_launch()) {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    STRATA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// ---- quantised products (cuda_matmul.cu) ---------------------------------------------------

// Copies the i-quant and IQ4 tables into device memory; once per process and device.
void init_quant_tables();
// Whether the products ask L2 for their weight rows ahead of their loads (prefetch_l2), on the
// current device (CudaTuning::weight_prefetch). A constant the kernels read, so it is set per
// device, by each backend when it is made.
void set_weight_prefetch(bool on);
// The launchers below that take a CudaTuning read these of its knobs: the one-input GEMVs
// gemv_rows, gemv_warps (their shape; 0 rows: by shape) and gemv_stage; the experts' kernels
// moe_pair_major (their grid order: by default pairs-major when a call has more than one token,
// so the blocks of every pair for the same rows run together and pairs sharing an expert share
// its reads in L2), moe_gate_rows and moe_down_rows (rows per warp; 0: by shape).

// True when the products below take weights of this type.
bool type_supported(quant::Type t);

// A weight matrix in device memory: rows of row_bytes bytes, ne0 values each.
struct DeviceMatrix {
    quant::Type type;
    const uint8_t* data;
    int64_t rows, ne0;
    size_t row_bytes;
};

// Activations rounded to 8 bits for the integer-dot products of decode (dp4a on the weights'
// codes instead of dequantising every weight to f32): rows of n values (n a multiple of 32); per
// 32 values one scale (value ~ d * q, q in [-127, 127]) and per 16 values the f32 sum of the
// original values, which the k-quants' min terms use exactly.
struct ActQ8 {
    int8_t* q;  // [rows][n]
    float* d;   // [rows][n / 32]
    float* s;   // [rows][n / 16]
};
size_t act_q8_bytes(int64_t rows, int64_t n);
// Value idx of an ActQ8 from the lane holding it, the warp holding one whole 32-value block
// (idx % 32 == lane): max, scale and rounding by shuffles (every lane must take part).
__device__ __forceinline__ void store_q8_lane(float v, int64_t idx, const ActQ8& out) {
    const float amax = warp_max(fabsf(v));
    out.q[idx] = static_cast<int8_t>(amax > 0.0f ? __float2int_rn(v * (127.0f / amax)) : 0);
    float sum = v;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const int lane = threadIdx.x & 31;
    if (lane == 0) out.d[idx / 32] = amax / 127.0f;
    if ((lane & 15) == 0) out.s[idx / 16] = sum;
}
// The three arrays laid out in buf (act_q8_bytes of it, 16-byte aligned).
ActQ8 act_q8_in(void* buf, int64_t rows, int64_t n);
void quantize_act_q8(const float* x, int64_t rows, int64_t n, int64_t x_stride, const ActQ8& out, cudaStream_t s);
// True when the products take ActQ8 input for weights of this type (Q4_K, Q5_K, Q6_K, Q8_0,
// IQ3_XXS: the types of real Q4_K_M and IQ3_XXS files' big tensors); others keep f32 input.
bool q8_supported(quant::Type t);

// y[n][y_stride] (first rows columns) = W x for n <= kGemvMaxCols input rows x[n][x_stride]:
// one warp per weight row, the weight read once for all n inputs.
inline constexpr int kGemvMaxCols = 8;
void gemv(const DeviceMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride, const CudaTuning& t,
          cudaStream_t s);
// The same with n rows of 8-bit inputs (x: n rows of w.ne0 values; the type q8_supported).
void gemv(const DeviceMatrix& w, const ActQ8& x, int64_t n, float* y, int64_t y_stride, cudaStream_t s);

// Up to kGemvBatchMax matrices of one type and width (a multiple of 32) times one input row in
// one launch: y[i] = W[i] x.
inline constexpr int kGemvBatchMax = 4;
struct GemvBatch {
    const uint8_t* w[kGemvBatchMax];
    float* y[kGemvBatchMax];
    int rows[kGemvBatchMax];
    int count;
    size_t row_bytes;    // matrices [0, first_b)
    int first_b;         // the first matrix of a second type (gemv1_two_types), else count
    size_t row_bytes_b;  // matrices [first_b, count)
    __device__ __forceinline__ size_t row_bytes_of(int m) const { return m < first_b ? row_bytes : row_bytes_b; }
};
void gemv1_multi(const DeviceMatrix* ws, float* const* ys, int count, const float* x, const CudaTuning& t, cudaStream_t s);
// The same with the input rounded to 8 bits (every matrix's type q8_supported).
void gemv1_multi(const DeviceMatrix* ws, float* const* ys, int count, const ActQ8& x, const CudaTuning& t, cudaStream_t s);
// Q4_K matrices then Q6_K ones (attention's q and k, then v on the layers where Q4_K_M files
// keep v at 6 bits) in one launch, 8-bit input; _fit says whether ws can go this way (the order,
// and the type boundary on a block boundary of the launch's shape).
bool gemv1_two_types_fit(const DeviceMatrix* ws, int count, const CudaTuning& t);
void gemv1_two_types(const DeviceMatrix* ws, float* const* ys, int count, const ActQ8& x, const CudaTuning& t, cudaStream_t s);

// out[r][0..ne0) = the dequantised rows ids[r] of w, as float or bf16 (dense for cuBLAS).
void dequant_rows_f32(const DeviceMatrix& w, const int32_t* ids, int64_t n, float* out, cudaStream_t s);
void dequant_matrix(const DeviceMatrix& w, bool to_bf16, void* out, cudaStream_t s);
// out [count][w.rows][ne0] bf16 = experts experts[0..count) of a stacked expert tensor (w: expert
// 0's rows; expert e's rows start at e * w.rows).
void dequant_experts_bf16(const DeviceMatrix& w, const int32_t* experts, int64_t count, void* out, cudaStream_t s);

// Experts applied to a few tokens without leaving the device (decode): for pair p = t*k + j,
// hidden[p] = silu(gate_e x_t) * up_e x_t and out_pair[p] = down_e hidden[p], e = ids[p].
// An expert store's experts read in place from host memory (registered, mapped: with unified
// addressing the host address serves the device): an id -2 - e names expert e of these tensors.
// An id -1 is a pair the host runs (no hidden row; a zero output row).
struct MoeFar {
    const uint8_t *gate = nullptr, *up = nullptr, *down = nullptr;
};
// gate/up/down hold every expert: expert e's rows start at e * rows. moe_gate_up's `down` (the
// one to come, or null) is asked of L2 for the pairs' experts while gate and up are multiplied.
void moe_gate_up(const DeviceMatrix& gate, const DeviceMatrix& up, const float* x, int64_t n_pairs, int64_t k, const int32_t* ids,
                 float* hidden, const CudaTuning& t, cudaStream_t s, const DeviceMatrix* down = nullptr, const MoeFar& far = {});
void moe_down(const DeviceMatrix& down, const float* hidden, int64_t n_pairs, int64_t k, const int32_t* ids, float* out_pairs,
              const CudaTuning& t, cudaStream_t s, const MoeFar& far = {});
// The same with 8-bit inputs: x [n_tokens][ne0], hidden [n_pairs][n_ff] (types q8_supported,
// rows of a multiple of 32 values).
void moe_gate_up(const DeviceMatrix& gate, const DeviceMatrix& up, const ActQ8& x, int64_t n_pairs, int64_t k, const int32_t* ids,
                 float* hidden, const CudaTuning& t, cudaStream_t s, const DeviceMatrix* down = nullptr, const MoeFar& far = {});
void moe_down(const DeviceMatrix& down, const ActQ8& hidden, int64_t n_pairs, int64_t k, const int32_t* ids, float* out_pairs,
              const CudaTuning& t, cudaStream_t s, const MoeFar& far = {});

// ---- element-wise and small ops (cuda_ops.cu) ---------------------------------------------

// q8 (optional): the output also rounded to 8 bits (dim a multiple of 32), fused where it can be.
void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out, cudaStream_t s,
              const ActQ8* q8 = nullptr);
void add(float* y, const float* x, int64_t n, cudaStream_t s);
// y += x, then out = rms_norm(y) * w: one kernel for rows of up to 16,384 values (else add and
// rms_norm).
void add_rms_norm(float* y, const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out, cudaStream_t s,
                  const ActQ8* q8 = nullptr);
// Attention's q and k heads in one kernel: each head rms-normed with its weight, then RoPE'd,
// in place; for head_dim 64/128/256/512 and n_rot/2 a multiple of 32 (head_norm_rope_fits).
struct HeadNormRope {
    float* q;
    const float* q_norm;
    int64_t n_head;
    float* k;
    const float* k_norm;
    int64_t n_head_kv, n_tokens, head_dim;
    float eps;
    const int32_t* pos;
    const float* inv_freq;
    int64_t n_rot;
    // Optional (k_base non-null): k heads also go to k_base + k_off[t], and v [n_tokens][n_head_kv
    // * head_dim] is copied to v_base + v_off[t] (cache rows, offsets in values; f16 values when
    // kv_half).
    void* k_base = nullptr;
    void* v_base = nullptr;
    bool kv_half = false;
    const int64_t* k_off = nullptr;
    const int64_t* v_off = nullptr;
    const float* v = nullptr;
};
bool head_norm_rope_fits(int64_t head_dim, int64_t n_rot);
void head_norm_rope(const HeadNormRope& a, cudaStream_t s);
void swiglu(const float* gate, const float* up, int64_t rows, int64_t dim, int64_t in_stride, float* out, cudaStream_t s);
void mul_sigmoid(float* x, const float* g, int64_t rows, int64_t dim, int64_t g_stride, cudaStream_t s);
// inv_freq [n_rot/2] computed on the host exactly as the CPU backend does.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const float* inv_freq, int64_t n_rot,
          cudaStream_t s);
// Token t's cache rows start at k_base + k_off[t] and v_base + v_off[t] (offsets in values: f32,
// or f16 when half).
void kv_store(void* k_base, void* v_base, bool half, const int64_t* k_off, const int64_t* v_off, int64_t n_tokens, const float* k,
              int64_t k_row, const float* v, int64_t v_row, cudaStream_t s);
void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                        float* weights, cudaStream_t s);
void l2_norm(float* x, int64_t n_tokens, int64_t rows, int64_t dim, int64_t token_stride, float eps, cudaStream_t s);
void gdn_gates(const float* alpha, const float* b, int64_t row_stride, int64_t group, int64_t group_stride, const float* a,
               const float* dt_bias, float* g, float* beta, int64_t n_tokens, int64_t n_heads, cudaStream_t s);
void ssm_conv_silu(const float* x, int64_t n_tokens, int64_t channels, const float* w, int64_t kernel, float* conv_state,
                   float* out, cudaStream_t s);
struct DeltaRule {
    const float *q, *k, *v;
    int64_t q_stride, k_stride, v_stride;
    const float *g, *beta;
    float *state, *out;
    int64_t n_tokens, n_v_heads, n_k_heads, d_k, d_v;
    bool tiled;  // value head h reads key head h % n_k (else h / (n_v / n_k))
    float scale;
};
void delta_rule(const DeltaRule& a, cudaStream_t s);  // token by token
// The chunked form (prefill; the same result up to rounding): head sizes up to 128, scratch of
// delta_rule_chunked_scratch_floats(a) floats of device memory.
bool delta_rule_chunkable(const DeltaRule& a);
size_t delta_rule_chunked_scratch_floats(const DeltaRule& a);
void delta_rule_chunked(const DeltaRule& a, float* scratch, cudaStream_t s);
void to_bf16(const float* x, int64_t rows, int64_t cols, int64_t x_stride, void* out, cudaStream_t s);
// ids[r] = argmax of row r of x [rows][n] (ties to the lower index, NaN as -inf, -1 if none is
// above -inf), device memory.
void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids, cudaStream_t s);
// Sampling summaries (cuda_sampling.cu, Backend::sample_rows): job i reads row jobs[i].row of
// x [rows][n] and its edits [edit_begin, edit_begin + n_edits) of edits; writes out[i] and
// top [i*k, i*k + k). k <= backend::kMaxRowSampleTop. All pointers are device memory.
struct RowSampleJob {
    int64_t row = 0;
    int32_t edit_begin = 0, n_edits = 0;
    float inv_t = 1.0f;
    double u = -1.0;
    float top_p = 1.0f, min_p = 0.0f;
    int32_t top = 0;  // tokens to return, <= k
};
void sample_rows(float* x, int64_t n, const RowSampleJob* jobs, int64_t n_jobs, const backend::LogitEdit* edits, int32_t k,
                 backend::RowSample* out, backend::TokenLogit* top, cudaStream_t s);
// out[i] = x[rows[i]] for n rows of cols floats.
void gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t n, float* out, cudaStream_t s);
// The experts' combine fused with the residual add and the next norm (decode): y[t] += sum_j
// weights[t*k + j] * pairs[t*k + j], then out = rms_norm(y) * w (and its 8-bit copy), for the
// shapes _fits accepts (add_rms_norm's one-kernel form, dim a multiple of 128).
bool moe_combine_add_rms_norm_fits(const float* pairs, const float* y, const float* out, int64_t dim);
void moe_combine_add_rms_norm(const float* pairs, const float* weights, int64_t k, float* y, const float* w, int64_t rows,
                              int64_t dim, float eps, float* out, cudaStream_t s, const ActQ8* q8 = nullptr);
// An expert store's decode pairs: pack [3][n] = the ids, their slots (table[id]: -1 where the
// host runs the pair) and the weights' bits, for the host's share and the slot-addressed kernels.
void expert_slot_lookup(const int32_t* ids, const float* weights, const int32_t* table, int64_t n, int32_t* pack, cudaStream_t s);
// out[t] = sum_j weights[t*k + j] * pairs[slot_row[t*k + j]] (slot_row null: row t*k + j).
void moe_combine(const float* pairs, const int32_t* slot_row, const float* weights, int64_t n_tokens, int64_t k, int64_t dim,
                 float* out, cudaStream_t s);
// The same with bf16 pairs (the grouped-GEMM path's outputs).
void moe_combine_bf16(const void* pairs, const int32_t* slot_row, const float* weights, int64_t n_tokens, int64_t k, int64_t dim,
                      float* out, cudaStream_t s);
// out = bf16(silu(gate) * up) over n bf16 values.
void swiglu_bf16(const void* gate, const void* up, int64_t n, void* out, cudaStream_t s);

// ---- attention (cuda_attention.cu) ---------------------------------------------------------

// Where one query token reads its sequence's cache.
struct TokenKv {
    int64_t k_off, v_off;   // the layer's pools, [blocks][block_size][n_head_kv][head_dim], as
                            // offsets in values from Attention::k / v
    const int32_t* blocks;  // device copy of the sequence's block table
    int32_t block_size;
    int32_t pos;  // attends to positions 0..pos
};
struct Attention {
    const float* q;
    float* out;
    const void *k, *v;  // bases of the TokenKv offsets: f32 values, or f16 when kv_half
    bool kv_half;
    const TokenKv* tokens;  // device [n_tokens]
    int64_t n_tokens, n_head, n_head_kv, head_dim_k, head_dim_v;
    int32_t max_pos;
    float scale;
    float* partial;  // scratch for split partial results (attention_partial_floats)
    ActQ8 q8{};      // optional (q8.q non-null): out also rounded to 8 bits, [n_tokens][n_head *
                     // head_dim_v] (head_dim_v a multiple of 32; the per-token kernel only)
};
// Splits of a decode attention: enough blocks to fill the GPU twice, each split at least
// split_min positions for one token (4 by default: CudaTuning::attention_split_min), longer for
// batches (split_min * n_tokens, up to 16), a power of two.
int64_t attention_splits(const Attention& a, int n_sm, int64_t split_min);
size_t attention_partial_floats(const Attention& a, int64_t splits);
// max_shared: the device's shared memory per block with opt-in (cudaDevAttrMaxSharedMemoryPerBlockOptin).
// Splits of octet_min positions or more (from max_pos) walk 8 positions a warp at a time, 4 lanes
// each (attention_octets); shorter ones a position a warp at a time.
bool attention_octets(const Attention& a, int64_t splits, int64_t octet_min);
void attention(const Attention& a, int64_t splits, int max_shared, int64_t octet_min, cudaStream_t s);

// Prefill-sized batches on tensor cores (cuda_attention_mma.cu). A tile is a run of batch tokens
// t0..t0+n-1 that share one KV view (one sequence's run of a prefill); max_pos is the last
// position any of them attends to. Keys, values and queries are rounded to f16 for the products
// (f32 accumulation and softmax).
struct AttnTile {
    int32_t t0, n, max_pos;
};
// Tokens per tile for this shape (64 query rows over the heads of a KV group), or 0 when the
// tensor-core kernel does not take it (head dims 64, 128 and 256, equal for keys and values).
int attention_tile_tokens(const Attention& a);
void attention_tiled(const Attention& a, const AttnTile* tiles, int64_t n_tiles, cudaStream_t s);

}  // namespace strata::cuda
