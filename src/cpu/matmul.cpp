#include "cpu/matmul.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace strata::cpu {

namespace {

constexpr size_t kAlign = 64;
constexpr int64_t kColGroup = 64;  // activation rows per kernel call (bounds the pointer arrays)

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

DotFn kernel_for(const KernelSet& ks, quant::Type t) {
    const DotFn fn = ks.dot_for(t);
    if (fn == nullptr) throw Error(std::string("no CPU matmul kernel for weight type ") + quant::type_name(t));
    return fn;
}

// A resolved job: its kernel and the activation pointers, plus its share of the task list.
struct Prepared {
    const MatmulJob* job;
    DotFn fn;
    int64_t row_begin, rows, n_cols, y_stride;
    size_t w_stride;
    int64_t chunk_rows;
    int64_t first_task, n_tasks;
};

void run_chunk(const Prepared& p, int64_t task) {
    const MatmulJob& j = *p.job;
    const int64_t r0 = (task - p.first_task) * p.chunk_rows;
    const int64_t rows = std::min(p.chunk_rows, p.rows - r0);
    const uint8_t* acts[kColGroup];
    float* outs[kColGroup];
    for (int64_t c0 = 0; c0 < p.n_cols; c0 += kColGroup) {
        const int64_t nc = std::min(kColGroup, p.n_cols - c0);
        for (int64_t k = 0; k < nc; ++k) {
            const int64_t col = c0 + k;
            acts[k] = j.x->row(j.cols != nullptr ? j.cols[col] : col);
            outs[k] = j.y + col * p.y_stride + r0;
        }
        DotTile t;
        t.n = j.w.cols;
        t.w = j.w.row(p.row_begin + r0);
        t.w_stride = p.w_stride;
        t.rows = rows;
        t.a = acts;
        t.y = outs;
        t.cols = nc;
        p.fn(t);
    }
}

}  // namespace

size_t WeightMatrix::stride() const {
    if (row_stride != 0) return row_stride;
    const auto bytes = quant::row_bytes(type, static_cast<uint64_t>(cols));
    if (!bytes)
        throw Error("weight matrix row of " + std::to_string(cols) + " values is not a whole number of " +
                    quant::type_name(type) + " blocks");
    return static_cast<size_t>(*bytes);
}

void Activations::quantize(const KernelSet& ks, ActFormat fmt, const float* x, int64_t n, int64_t batch, int64_t x_stride,
                           util::ThreadPool* pool) {
    if (n % act_block_elems(fmt) != 0) {
        throw Error("activation row of " + std::to_string(n) + " values is not a whole number of " + act_format_name(fmt) +
                    " blocks");
    }
    const QuantizeActFn fn = ks.quantize_for(fmt);
    fmt_ = fmt;
    n_ = n;
    batch_ = batch;
    stride_ = round_up(act_row_bytes(fmt, n), kAlign);
    const size_t need = stride_ * static_cast<size_t>(batch) + kAlign;
    if (buf_.size() < need) buf_.resize(need);
    const auto addr = reinterpret_cast<uintptr_t>(buf_.data());
    base_ = buf_.data() + (round_up(addr, kAlign) - addr);
    auto one = [&](int64_t b, int) { fn(x + b * x_stride, base_ + static_cast<size_t>(b) * stride_, n); };
    if (pool != nullptr && batch > 1 && n * batch >= 16384) {
        pool->parallel_for(batch, one);
    } else {
        for (int64_t b = 0; b < batch; ++b) one(b, 0);
    }
}

void Activations::quantize_for(const KernelSet& ks, quant::Type t, const float* x, int64_t n, int64_t batch, int64_t x_stride,
                               util::ThreadPool* pool) {
    const auto fmt = act_format_for(t);
    if (!fmt) throw Error(std::string("no CPU matmul kernel for weight type ") + quant::type_name(t));
    quantize(ks, *fmt, x, n, batch, x_stride, pool);
}

void matmul_jobs(const MatmulJob* jobs, size_t n_jobs, util::ThreadPool* pool, const KernelSet& ks) {
    const int threads = pool != nullptr ? pool->size() : 1;
    std::vector<Prepared> prep;
    prep.reserve(n_jobs);
    int64_t total_rows = 0;
    for (size_t i = 0; i < n_jobs; ++i) {
        const MatmulJob& j = jobs[i];
        Prepared p{};
        p.job = &j;
        p.fn = kernel_for(ks, j.w.type);
        p.row_begin = j.row_begin;
        const int64_t row_end = j.row_end < 0 ? j.w.rows : j.row_end;
        p.rows = row_end - j.row_begin;
        if (j.x == nullptr || j.y == nullptr || p.rows < 0 || j.row_begin < 0 || row_end > j.w.rows) {
            throw Error("matmul job: bad row range or missing input/output");
        }
        if (j.x->format() != *act_format_for(j.w.type) || j.x->n() != j.w.cols) {
            throw Error(std::string("matmul job: activations are ") + act_format_name(j.x->format()) + " x " +
                        std::to_string(j.x->n()) + ", " + quant::type_name(j.w.type) + " weights need " +
                        act_format_name(*act_format_for(j.w.type)) + " x " + std::to_string(j.w.cols));
        }
        p.n_cols = j.n_cols < 0 ? j.x->batch() : j.n_cols;
        if (j.cols == nullptr && p.n_cols > j.x->batch()) throw Error("matmul job: more columns than activation rows");
        for (int64_t k = 0; j.cols != nullptr && k < p.n_cols; ++k) {
            if (j.cols[k] < 0 || j.cols[k] >= j.x->batch()) throw Error("matmul job: activation row index out of range");
        }
        p.y_stride = j.y_stride != 0 ? j.y_stride : p.rows;
        p.w_stride = j.w.stride();
        total_rows += p.rows;
        prep.push_back(p);
    }
    // Chunks: about 4 per thread over all jobs so busy cores even out, but not so small that the
    // per-chunk overhead shows; whole multiples of 4 rows.
    const int64_t target = threads > 1 ? std::max<int64_t>(16, (total_rows + 4 * threads - 1) / (4 * threads)) : total_rows;
    int64_t n_tasks = 0;
    for (Prepared& p : prep) {
        p.chunk_rows = std::max<int64_t>(1, round_up(static_cast<size_t>(std::min(target, std::max<int64_t>(p.rows, 1))), 4));
        p.first_task = n_tasks;
        p.n_tasks = p.rows == 0 || p.n_cols == 0 ? 0 : (p.rows + p.chunk_rows - 1) / p.chunk_rows;
        n_tasks += p.n_tasks;
    }
    if (n_tasks == 0) return;
    auto task_fn = [&](int64_t task, int) {
        // Jobs are few; a linear search beats building a task->job table.
        size_t i = 0;
        while (task >= prep[i].first_task + prep[i].n_tasks) ++i;
        run_chunk(prep[i], task);
    };
    if (pool != nullptr && threads > 1 && n_tasks > 1) {
        pool->parallel_for(n_tasks, task_fn);
    } else {
        for (int64_t t = 0; t < n_tasks; ++t) task_fn(t, 0);
    }
}

void matmul(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t batch, float* y, int64_t y_stride,
            util::ThreadPool* pool, const KernelSet& ks) {
    thread_local Activations scratch;
    scratch.quantize_for(ks, w.type, x, w.cols, batch, x_stride, pool);
    MatmulJob job;
    job.w = w;
    job.x = &scratch;
    job.y = y;
    job.y_stride = y_stride;
    matmul_jobs(&job, 1, pool, ks);
}

void dot_rows(const WeightMatrix& w, int64_t row_begin, int64_t row_end, const uint8_t* const* acts, float* const* outs,
              int64_t n_cols, const KernelSet& ks) {
    if (row_end <= row_begin || n_cols <= 0) return;
    DotTile t;
    t.n = w.cols;
    t.w = w.row(row_begin);
    t.w_stride = w.stride();
    t.rows = row_end - row_begin;
    t.a = acts;
    t.y = outs;
    t.cols = n_cols;
    kernel_for(ks, w.type)(t);
}

}  // namespace strata::cpu
