#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

namespace strata::test {
namespace {

using util::ThreadPool;

TEST(ThreadPool, RunsEveryTaskOnceWithValidThreadIds) {
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads);
        EXPECT_EQ(pool.size(), threads);
        for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            std::atomic<bool> bad_thread{false};
            pool.parallel_for(n, [&](int64_t task, int thread) {
                if (thread < 0 || thread >= threads) bad_thread = true;
                hits[static_cast<size_t>(task)].fetch_add(1);
            });
            for (int64_t i = 0; i < n; ++i)
                EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "threads " << threads << " n " << n;
            EXPECT_FALSE(bad_thread);
        }
    }
}

TEST(ThreadPool, ManySmallCalls) {
    // 3 threads may oversubscribe a small machine: that must stay correct (and not hang).
    for (int threads : {2, 3}) {
        ThreadPool pool(threads, /*spin_us=*/50);
        std::atomic<int64_t> sum{0};
        const int calls = threads == 2 ? 5000 : 500;
        const auto t0 = std::chrono::steady_clock::now();
        for (int call = 0; call < calls; ++call) {
            pool.parallel_for(4, [&](int64_t task, int) { sum.fetch_add(task + 1, std::memory_order_relaxed); });
        }
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
        EXPECT_EQ(sum.load(), int64_t{calls} * 10);
        std::printf("  %d threads: %.2f us per parallel_for\n", threads, us);
    }
}

TEST(ThreadPool, WorkersTakePart) {
    // Task 0 waits (up to 5 s) until another thread has run a task: passes only if a worker
    // joined, however busy the machine is.
    ThreadPool pool(2);
    for (int round = 0; round < 3; ++round) {
        std::atomic<bool> other_ran{false};
        pool.parallel_for(8, [&](int64_t task, int thread) {
            if (thread != 0) other_ran = true;
            if (task == 0) {
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
                while (!other_ran && std::chrono::steady_clock::now() < until) std::this_thread::yield();
            }
        });
        EXPECT_TRUE(other_ran.load()) << "round " << round;
    }
}

TEST(ThreadPool, WakesSleepingWorkers) {
    ThreadPool pool(3, /*spin_us=*/1);
    for (int round = 0; round < 20; ++round) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let the workers fall asleep
        std::atomic<int> count{0};
        pool.parallel_for(50, [&](int64_t, int) { count.fetch_add(1); });
        EXPECT_EQ(count.load(), 50);
    }
}

TEST(ThreadPool, NestedCallsRunSerially) {
    ThreadPool pool(3);
    std::atomic<int> inner{0};
    pool.parallel_for(6, [&](int64_t, int outer_thread) {
        pool.parallel_for(5, [&](int64_t, int thread) {
            EXPECT_EQ(thread, 0);  // the nested loop runs on the calling thread as thread 0
            (void)outer_thread;
            inner.fetch_add(1);
        });
        pool.parallel_for(0, [&](int64_t, int) { ADD_FAILURE() << "empty range ran a task"; });
    });
    EXPECT_EQ(inner.load(), 30);
}

TEST(ThreadPool, CallsFromSeveralThreadsAllComplete) {
    ThreadPool pool(2);
    std::atomic<int> count{0};
    std::vector<std::thread> callers;
    for (int i = 0; i < 3; ++i) {
        callers.emplace_back([&] {
            for (int k = 0; k < 500; ++k) pool.parallel_for(3, [&](int64_t, int) { count.fetch_add(1); });
        });
    }
    for (auto& t : callers) t.join();
    EXPECT_EQ(count.load(), 3 * 500 * 3);
}

TEST(ThreadPool, RethrowsTaskException) {
    ThreadPool pool(3);
    EXPECT_THROW(pool.parallel_for(100,
                                   [&](int64_t task, int) {
                                       if (task == 37) throw std::runtime_error("task failed");
                                   }),
                 std::runtime_error);
    // The pool is usable afterwards.
    std::atomic<int> count{0};
    pool.parallel_for(10, [&](int64_t, int) { count.fetch_add(1); });
    EXPECT_EQ(count.load(), 10);
}

}  // namespace
}  // namespace strata::test
