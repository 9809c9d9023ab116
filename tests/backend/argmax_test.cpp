// Greedy sampling where the logits are (Backend::argmax_rows): the largest value, ties to the
// lower index, NaN and -inf never chosen, -1 for a row with nothing above -inf. The CUDA
// backend's kernel is checked against this in tests/cuda/.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/cpu_backend.h"
#include "test_util.h"

namespace strata::backend {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Argmax, LargestValueTiesToTheLowerIndexNanAndInfNeverWin) {
    const float nan = std::nanf("");
    EXPECT_EQ(argmax_row(std::vector<float>{1, 3, 2}.data(), 3), 1);
    EXPECT_EQ(argmax_row(std::vector<float>{5, 1, 5, 5}.data(), 4), 0);
    EXPECT_EQ(argmax_row(std::vector<float>{-2, 7, 1, 7}.data(), 4), 1);
    EXPECT_EQ(argmax_row(std::vector<float>{nan, -1, nan, -0.5f}.data(), 4), 3);
    EXPECT_EQ(argmax_row(std::vector<float>{-kInf, -kInf, -3}.data(), 3), 2);
    EXPECT_EQ(argmax_row(std::vector<float>{-kInf, nan, -kInf}.data(), 3), -1);
    EXPECT_EQ(argmax_row(std::vector<float>{1, kInf, 2, kInf}.data(), 4), 1);
}

TEST(Argmax, RowsOfTheCpuBackendAndTheDefaultAgree) {
    CpuBackend cpu(2);
    const int64_t rows = 5, n = 151936;
    auto x = test::random_floats(static_cast<size_t>(rows * n), 3);
    x[static_cast<size_t>(1 * n + 7)] = x[static_cast<size_t>(1 * n + 90000)] = 50.0f;  // a tie
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(3 * n + i)] = -kInf;          // nothing to pick
    Buffer b(&cpu, x.size());
    cpu.copy_from_host(x.data(), b.data(), x.size());
    std::vector<int32_t> ids(rows, -7), base(rows, -7);
    cpu.argmax_rows(b.data(), rows, n, ids.data());
    cpu.Backend::argmax_rows(b.data(), rows, n, base.data());  // the default: through copy_to_host
    EXPECT_EQ(ids, base);
    EXPECT_EQ(ids[1], 7);
    EXPECT_EQ(ids[3], -1);
    for (int64_t r : {0, 2, 4}) {
        int64_t best = 0;
        for (int64_t i = 1; i < n; ++i)
            if (x[static_cast<size_t>(r * n + i)] > x[static_cast<size_t>(r * n + best)]) best = i;
        EXPECT_EQ(ids[static_cast<size_t>(r)], best) << "row " << r;
    }
}

}  // namespace
}  // namespace strata::backend
