// Matrix x small batch on the CPU: y[b][r] = W_r . x_b, the entry the model calls.
//
//   util::ThreadPool pool(n_threads);
//   cpu::WeightMatrix w{type, data, rows, cols};           // one GGUF 2-D tensor (or one expert)
//   cpu::matmul(w, x, cols, batch, y, rows, &pool);         // x: batch x cols f32, y: batch x rows
//
// The activations are quantised once per call to the format the weight type's kernel consumes
// (kernels.h); rows are split over the pool in contiguous chunks taken from a shared counter,
// and each kernel call dots a weight row with up to 4 activation rows per pass, so for batched
// decode every weight byte comes from memory once per call.
//
// For several matrices that share an input (Q/K/V, gate/up, the experts of a MoE layer), quantise
// once with Activations and pass a list of jobs to matmul_jobs: one pool dispatch for all of them.
// A job can use a subset of the weight rows and an arbitrary subset of the activation rows (the
// tokens routed to an expert), writing its results wherever the caller wants.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/kernels.h"
#include "quant/types.h"
#include "util/thread_pool.h"

namespace strata::cpu {

struct WeightMatrix {
    quant::Type type = quant::Type::F32;
    const void* data = nullptr;
    int64_t rows = 0;       // output features
    int64_t cols = 0;       // input features (values per row)
    size_t row_stride = 0;  // bytes between rows; 0 = packed (row_bytes(type, cols))

    size_t stride() const;  // row_stride or the packed row size
    const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * stride(); }
};

// Activation rows quantised to one ActFormat, 64-byte aligned rows.
class Activations {
public:
    // Converts batch rows of n floats (row b at x + b * x_stride) into fmt with ks's quantiser;
    // rows are spread over the pool when there are several. Reuses its buffer across calls.
    void quantize(const KernelSet& ks, ActFormat fmt, const float* x, int64_t n, int64_t batch, int64_t x_stride,
                  util::ThreadPool* pool = nullptr);
    // Same, in the format weight type t needs (throws strata::Error when t has no kernel).
    void quantize_for(const KernelSet& ks, quant::Type t, const float* x, int64_t n, int64_t batch, int64_t x_stride,
                      util::ThreadPool* pool = nullptr);

    ActFormat format() const { return fmt_; }
    int64_t n() const { return n_; }
    int64_t batch() const { return batch_; }
    size_t row_stride() const { return stride_; }
    const uint8_t* row(int64_t b) const { return base_ + static_cast<size_t>(b) * stride_; }

private:
    std::vector<uint8_t> buf_;
    uint8_t* base_ = nullptr;
    size_t stride_ = 0;
    ActFormat fmt_ = ActFormat::F32;
    int64_t n_ = 0;
    int64_t batch_ = 0;
};

// One matrix x activations product. Results: y[j * y_stride + (r - row_begin)] = W_r . x_{col(j)}
// for r in [row_begin, row_end) and j < n_cols, where col(j) = cols[j], or j when cols is null.
struct MatmulJob {
    WeightMatrix w;
    const Activations* x = nullptr;  // format must be act_format_for(w.type), n = w.cols
    int64_t row_begin = 0;
    int64_t row_end = -1;           // -1: w.rows
    const int32_t* cols = nullptr;  // activation rows to use; null = 0..n_cols-1
    int64_t n_cols = -1;            // -1: x->batch()
    float* y = nullptr;
    int64_t y_stride = 0;  // floats between result rows; 0 = row_end - row_begin
};

// Runs all jobs on the pool (null: on the calling thread). Throws strata::Error on a type without
// a kernel or mismatched shapes/formats.
void matmul_jobs(const MatmulJob* jobs, size_t n_jobs, util::ThreadPool* pool, const KernelSet& ks = default_kernels());

// y[b * y_stride + r] = W_r . x_b for b < batch, r < w.rows; x row b at x + b * x_stride floats.
// Quantises x into a per-thread scratch buffer, then runs one job.
void matmul(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t batch, float* y, int64_t y_stride,
            util::ThreadPool* pool, const KernelSet& ks = default_kernels());

// Single-threaded tile for callers that schedule work themselves: outs[j][r - row_begin] =
// W_r . acts[j] for r in [row_begin, row_end), j < n_cols; acts[j] are rows in the weight type's
// activation format.
void dot_rows(const WeightMatrix& w, int64_t row_begin, int64_t row_end, const uint8_t* const* acts, float* const* outs,
              int64_t n_cols, const KernelSet& ks = default_kernels());

}  // namespace strata::cpu
