// matmul / matmul_jobs / dot_rows against the scalar kernels, over batch sizes, odd row counts
// and thread counts.
#include "cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_test_util.h"

namespace strata::test {
namespace {

using quant::Type;
using util::Isa;

// y_ref[b][r] from the scalar kernel one row and one column at a time.
std::vector<float> reference(const cpu::WeightMatrix& w, const std::vector<float>& x, int64_t batch) {
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    cpu::Activations acts;
    acts.quantize_for(ref, w.type, x.data(), w.cols, batch, w.cols);
    std::vector<float> y(static_cast<size_t>(batch * w.rows));
    for (int64_t b = 0; b < batch; ++b) {
        for (int64_t r = 0; r < w.rows; ++r) {
            const uint8_t* a = acts.row(b);
            float* out = &y[static_cast<size_t>(b * w.rows + r)];
            cpu::dot_rows(w, r, r + 1, &a, &out, 1, ref);
        }
    }
    return y;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    double scale = 0.0;
    for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-5 * scale + 1e-6 * std::fabs(want[i])) << what << " at " << i;
    }
}

TEST(Matmul, MatchesScalarForBatchesRowsAndThreads) {
    const Type types[] = {Type::Q4_K, Type::Q8_0, Type::IQ3_XXS, Type::F16, Type::Q6_K, Type::IQ4_NL, Type::Q5_1};
    for (int threads : {1, 2, 3}) {
        util::ThreadPool pool(threads);
        for (Type t : types) {
            const int64_t cols = quant::type_info(t).block_elems == 1 ? 96 : 512;
            for (int64_t rows : {1, 5, 67}) {
                const auto data = make_weights(t, rows, cols, static_cast<uint32_t>(rows));
                const cpu::WeightMatrix w{t, data.data(), rows, cols};
                for (int64_t batch : {1, 2, 3, 4, 5, 8, 13, 17}) {
                    const auto x = random_floats(static_cast<size_t>(batch * cols), static_cast<uint32_t>(batch));
                    std::vector<float> y(static_cast<size_t>(batch * rows), NAN);
                    cpu::matmul(w, x.data(), cols, batch, y.data(), rows, &pool);
                    expect_close(y, reference(w, x, batch),
                                 std::string(quant::type_name(t)) + " rows " + std::to_string(rows) + " batch " +
                                     std::to_string(batch) + " threads " + std::to_string(threads));
                }
            }
        }
    }
}

// Batch invariance, bit for bit: a column's result must not depend on how many other columns
// share the call or where it sits among them (the engine promises a sequence the same logits
// whatever else is in its batch).
TEST(Matmul, ColumnResultsDoNotDependOnTheBatch) {
    const Type types[] = {Type::Q4_K, Type::Q8_0, Type::Q6_K, Type::Q5_K, Type::IQ4_XS, Type::F16,
                          Type::BF16, Type::F32,  Type::Q4_1, Type::Q5_0, Type::Q5_1};
    util::ThreadPool pool(2);
    for (Type t : types) {
        const int64_t cols = 512, rows = 70;
        const auto data = make_weights(t, rows, cols, 7);
        const cpu::WeightMatrix w{t, data.data(), rows, cols};
        const int64_t max_batch = 37;
        const auto x = random_floats(static_cast<size_t>(max_batch * cols), 99);
        std::vector<float> all(static_cast<size_t>(max_batch * rows));
        cpu::matmul(w, x.data(), cols, max_batch, all.data(), rows, &pool);
        for (int64_t batch : {1, 2, 3, 5, 8, 16}) {
            for (int64_t start : {int64_t{0}, int64_t{3}, max_batch - batch}) {
                std::vector<float> y(static_cast<size_t>(batch * rows));
                cpu::matmul(w, x.data() + start * cols, cols, batch, y.data(), rows, &pool);
                for (int64_t b = 0; b < batch; ++b)
                    for (int64_t r = 0; r < rows; ++r)
                        ASSERT_EQ(y[static_cast<size_t>(b * rows + r)], all[static_cast<size_t>((start + b) * rows + r)])
                            << quant::type_name(t) << " batch " << batch << " column " << start + b << " row " << r;
            }
        }
    }
}

TEST(Matmul, JobsWithRowRangesColumnSubsetsAndStrides) {
    util::ThreadPool pool(2);
    const int64_t rows = 40, cols = 256, batch = 6;
    const auto a_data = make_weights(Type::Q4_K, rows, cols, 1);
    const auto b_data = make_weights(Type::Q4_K, rows, cols, 2);
    const cpu::WeightMatrix wa{Type::Q4_K, a_data.data(), rows, cols};
    const cpu::WeightMatrix wb{Type::Q4_K, b_data.data(), rows, cols};
    const auto x = random_floats(static_cast<size_t>(batch * cols), 3);
    cpu::Activations acts;
    acts.quantize_for(cpu::default_kernels(), Type::Q4_K, x.data(), cols, batch, cols, &pool);

    // Job 0: all of wa for all tokens. Job 1: rows 10..29 of wb for tokens 4, 1, 5 (like an expert).
    std::vector<float> ya(static_cast<size_t>(batch * rows), NAN);
    const int64_t y_stride = 25;  // padded result rows
    std::vector<float> yb(3 * y_stride, -1.0f);
    const int32_t picked[] = {4, 1, 5};
    cpu::MatmulJob jobs[2];
    jobs[0].w = wa;
    jobs[0].x = &acts;
    jobs[0].y = ya.data();
    jobs[1].w = wb;
    jobs[1].x = &acts;
    jobs[1].row_begin = 10;
    jobs[1].row_end = 30;
    jobs[1].cols = picked;
    jobs[1].n_cols = 3;
    jobs[1].y = yb.data();
    jobs[1].y_stride = y_stride;
    cpu::matmul_jobs(jobs, 2, &pool);

    expect_close(ya, reference(wa, x, batch), "job 0");
    const auto ref_b = reference(wb, x, batch);
    for (int j = 0; j < 3; ++j) {
        for (int64_t r = 10; r < 30; ++r) {
            const float want = ref_b[static_cast<size_t>(picked[j] * rows + r)];
            EXPECT_NEAR(yb[static_cast<size_t>(j * y_stride + r - 10)], want, 1e-4f * std::fabs(want) + 1e-5f);
        }
        for (int64_t k = 20; k < y_stride; ++k) EXPECT_EQ(yb[static_cast<size_t>(j * y_stride + k)], -1.0f) << "padding written";
    }
}

TEST(Activations, PoolAndSerialQuantisationAgree) {
    util::ThreadPool pool(3);
    const int64_t n = 1024, batch = 40;  // large enough to be spread over the pool
    const auto x = random_floats(static_cast<size_t>(n * batch), 11);
    for (auto fmt :
         {cpu::ActFormat::Q8_0, cpu::ActFormat::Q8_1, cpu::ActFormat::Q8_K, cpu::ActFormat::BF16, cpu::ActFormat::F32}) {
        cpu::Activations serial, parallel;
        serial.quantize(cpu::default_kernels(), fmt, x.data(), n, batch, n);
        parallel.quantize(cpu::default_kernels(), fmt, x.data(), n, batch, n, &pool);
        ASSERT_EQ(serial.batch(), batch);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(parallel.row(1)) % 64, 0u);
        for (int64_t b = 0; b < batch; ++b) {
            EXPECT_EQ(0, std::memcmp(serial.row(b), parallel.row(b), cpu::act_row_bytes(fmt, n)))
                << cpu::act_format_name(fmt) << " row " << b;
        }
    }
}

TEST(Matmul, RejectsMismatchedActivations) {
    const auto data = make_weights(Type::Q4_K, 4, 256, 1);
    const cpu::WeightMatrix w{Type::Q4_K, data.data(), 4, 256};
    const auto x = random_floats(256, 1);
    cpu::Activations acts;
    acts.quantize(cpu::default_kernels(), cpu::ActFormat::Q8_0, x.data(), 256, 1, 256);
    std::vector<float> y(4);
    cpu::MatmulJob job;
    job.w = w;
    job.x = &acts;
    job.y = y.data();
    EXPECT_THROW(cpu::matmul_jobs(&job, 1, nullptr), Error);
    const int32_t bad_col = 3;  // only 1 activation row
    job.x = &acts;
    acts.quantize(cpu::default_kernels(), cpu::ActFormat::Q8_K, x.data(), 256, 1, 256);
    job.cols = &bad_col;
    job.n_cols = 1;
    EXPECT_THROW(cpu::matmul_jobs(&job, 1, nullptr), Error);
    const cpu::WeightMatrix bad{Type::IQ1_S, data.data(), 4, 256};  // a type with no CPU kernel
    EXPECT_THROW(cpu::matmul(bad, x.data(), 256, 1, y.data(), 4, nullptr), Error);
}

}  // namespace
}  // namespace strata::test
