// A small persistent thread pool for the compute kernels.
//
// parallel_for(n_tasks, fn) runs fn(task, thread) for every task in [0, n_tasks) on the calling
// thread (thread 0) and the pool's workers (threads 1..size()-1), and returns when all are done.
// Tasks are handed out one at a time from a shared counter, so uneven tasks and busy cores
// balance themselves. Workers spin for a short while after each call (a decode step makes
// hundreds of calls per token, microseconds apart) and then sleep on a futex.
//
// The caller never waits for a worker that has not started: a worker must enter the job (one
// CAS on a word holding the job's generation and the number of workers inside) before touching
// it, and the caller closes the job once every task is taken, then waits only for the workers
// inside. So a worker that the OS has descheduled (a busy or oversubscribed machine) costs
// nothing; the tasks it would have taken are done by the others.
//
// A parallel_for issued from inside a task, or while another thread is using the pool, runs
// serially on the calling thread (as thread 0). The first exception thrown by a task is rethrown
// by parallel_for after all threads have stopped; the remaining tasks are skipped.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace strata::util {

class ThreadPool {
public:
    // n_threads counts the caller: n_threads - 1 workers are started (n_threads < 1 means 1).
    // spin_us: how long an idle worker polls for new work before sleeping.
    explicit ThreadPool(int n_threads, int spin_us = 200);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    template <class Fn>
    void parallel_for(int64_t n_tasks, Fn&& fn) {
        using F = std::remove_reference_t<Fn>;
        run(
            n_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<F*>(ctx))(task, thread); },
            const_cast<void*>(static_cast<const void*>(&fn)));
    }

private:
    using TaskFn = void (*)(void* ctx, int64_t task, int thread);

    void run(int64_t n_tasks, TaskFn fn, void* ctx);
    void worker_main(int thread);
    bool enter(uint32_t gen);
    void work(int thread);  // takes tasks of the current job until none are left

    int n_threads_;
    int spin_us_;
    std::vector<std::thread> workers_;

    // The current job; written by the caller before generation_ is bumped (release).
    TaskFn fn_ = nullptr;
    void* ctx_ = nullptr;
    int64_t n_tasks_ = 0;

    alignas(64) std::atomic<int64_t> next_task_{0};
    alignas(64) std::atomic<uint32_t> generation_{0};  // wakes workers; bumped per job (31 bits used)
    // Job gate: (generation << 32) | workers inside; bit 63 set once the job is closed.
    alignas(64) std::atomic<uint64_t> gate_{0};
    alignas(64) std::atomic<int> sleepers_{0};  // workers blocked in generation_.wait
    std::atomic<bool> failed_{false};
    std::atomic<bool> stop_{false};
    std::atomic<bool> in_use_{false};
    std::mutex error_mutex_;
    std::exception_ptr error_;
};

}  // namespace strata::util
