#include "util/thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#else
#define STRATA_CPU_RELAX() ((void)0)
#endif

namespace strata::util {

namespace {
// The pool whose task the current thread is running, to turn nested calls into serial loops.
thread_local const ThreadPool* tls_running_pool = nullptr;

// gate_ layout: job generation in bits 32..62, closed flag in bit 63, workers inside in bits 0..31.
constexpr uint64_t kClosed = uint64_t{1} << 63;
constexpr uint64_t kInsideMask = 0xffffffffu;
constexpr uint32_t kGenMask = 0x7fffffffu;
}  // namespace

ThreadPool::ThreadPool(int n_threads, int spin_us) : n_threads_(n_threads < 1 ? 1 : n_threads), spin_us_(spin_us) {
    workers_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    generation_.store((generation_.load(std::memory_order_relaxed) + 1) & kGenMask, std::memory_order_seq_cst);
    generation_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::work(int thread) {
    const ThreadPool* outer = tls_running_pool;
    tls_running_pool = this;
    for (;;) {
        const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
        if (task >= n_tasks_) break;
        if (failed_.load(std::memory_order_relaxed)) continue;  // drain the counter after an error
        try {
            fn_(ctx_, task, thread);
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
            failed_.store(true, std::memory_order_relaxed);
        }
    }
    tls_running_pool = outer;
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, void* ctx) {
    if (n_tasks <= 0) return;
    bool expected = false;
    const bool serial = n_threads_ == 1 || n_tasks == 1 || tls_running_pool == this ||
                        !in_use_.compare_exchange_strong(expected, true, std::memory_order_acquire);
    if (serial) {
        for (int64_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
        return;
    }

    fn_ = fn;
    ctx_ = ctx;
    n_tasks_ = n_tasks;
    failed_.store(false, std::memory_order_relaxed);
    next_task_.store(0, std::memory_order_relaxed);
    const uint32_t gen = (generation_.load(std::memory_order_relaxed) + 1) & kGenMask;
    gate_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);  // open, nobody inside
    generation_.store(gen, std::memory_order_seq_cst);                         // publishes the job; pairs with sleepers_
    if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();

    work(0);
    // Every task is taken: close the job so no further worker enters, then wait for those inside
    // (still finishing a task). Spin briefly, then yield: on a busy machine the worker we wait
    // for may need this core to run at all.
    gate_.fetch_or(kClosed, std::memory_order_acq_rel);
    for (int i = 0; (gate_.load(std::memory_order_acquire) & kInsideMask) != 0; ++i) {
        if (i < 4096) {
            STRATA_CPU_RELAX();
        } else {
            std::this_thread::yield();
        }
    }

    std::exception_ptr err;
    if (failed_.load(std::memory_order_relaxed)) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        err = error_;
        error_ = nullptr;
    }
    in_use_.store(false, std::memory_order_release);
    if (err) std::rethrow_exception(err);
}

// Enters job `gen` if it is still open: the only way a worker may touch the job's state.
bool ThreadPool::enter(uint32_t gen) {
    uint64_t g = gate_.load(std::memory_order_acquire);
    while ((g >> 32) == gen) {  // open (bit 63 clear) and the same job
        if (gate_.compare_exchange_weak(g, g + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    }
    return false;
}

void ThreadPool::worker_main(int thread) {
    // Generation 0 is the pool's state before any job; reading generation_ here instead would
    // miss a job published before this thread got to run.
    uint32_t seen = 0;
    for (;;) {
        // Spin a while for the next job, then sleep until the generation changes.
        uint32_t gen = generation_.load(std::memory_order_acquire);
        if (gen == seen) {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
            for (int i = 0;; ++i) {
                STRATA_CPU_RELAX();
                if ((i & 1023) == 1023) std::this_thread::yield();  // let an oversubscribed core's other threads in
                gen = generation_.load(std::memory_order_acquire);
                if (gen != seen) break;
                if ((i & 255) == 255 && std::chrono::steady_clock::now() > deadline) {
                    sleepers_.fetch_add(1, std::memory_order_seq_cst);
                    // Re-check after announcing ourselves: the caller reads sleepers_ after bumping.
                    gen = generation_.load(std::memory_order_seq_cst);
                    while (gen == seen) {
                        generation_.wait(seen, std::memory_order_acquire);
                        gen = generation_.load(std::memory_order_acquire);
                    }
                    sleepers_.fetch_sub(1, std::memory_order_relaxed);
                    break;
                }
            }
        }
        seen = gen;
        if (stop_.load(std::memory_order_acquire)) return;
        if (enter(gen)) {
            work(thread);
            gate_.fetch_sub(1, std::memory_order_release);
        }
    }
}

}  // namespace strata::util
