// Elementwise work split over a pool only when it pays: a prompt's rows at 16 threads (where a
// serial loop would cost as much as a matmul), not a decode step's one row.
//
//   util::parallel_ranges(pool, rows, values_per_row, [&](int64_t r0, int64_t r1) { ... });
//
// fn(begin, end) covers [0, n) once: in chunks on the pool (null or one thread: here) when
// n * cost_per_item reaches kMinParallelWork, else in one call on this thread. Chunks are a
// quarter of a thread's share, so busy cores even out.
#pragma once

#include <algorithm>
#include <cstdint>

#include "util/thread_pool.h"

namespace strata::util {

inline constexpr int64_t kMinParallelWork = 32768;

template <class Fn>
void parallel_ranges(ThreadPool* pool, int64_t n, int64_t cost_per_item, Fn&& fn) {
    if (pool == nullptr || pool->size() == 1 || n < 2 || n * cost_per_item < kMinParallelWork) {
        fn(int64_t{0}, n);
        return;
    }
    const int64_t chunk = std::max<int64_t>(1, n / (4 * pool->size()));
    pool->parallel_for((n + chunk - 1) / chunk, [&](int64_t c, int) { fn(c * chunk, std::min(n, (c + 1) * chunk)); });
}

}  // namespace strata::util
