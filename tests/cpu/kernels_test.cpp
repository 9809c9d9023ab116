// Dot-product kernels and activation quantisers: every level against the scalar reference, and
// the scalar reference against dequantised data in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/kernel_registry.h"
#include "cpu/kernels.h"
#include "cpu_test_util.h"
#include "gguf/gguf.h"

namespace strata::test {
namespace {

using cpu::ActFormat;
using quant::Type;
using util::Isa;

constexpr uint32_t kSeeds[] = {1, 2, 3};

std::vector<uint8_t> quantize_acts(const cpu::KernelSet& ks, ActFormat f, const std::vector<float>& x) {
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> out(cpu::act_row_bytes(f, n));
    ks.quantize_for(f)(x.data(), out.data(), n);
    return out;
}

// Sum over i of |w_i * a_i| in double: the scale the error bounds are relative to.
double abs_dot(const std::vector<float>& w, const std::vector<float>& a) {
    double s = 0.0;
    for (size_t i = 0; i < w.size(); ++i) s += std::fabs(static_cast<double>(w[i]) * a[i]);
    return s;
}

double dot_double(const std::vector<float>& w, const std::vector<float>& a) {
    double s = 0.0;
    for (size_t i = 0; i < w.size(); ++i) s += static_cast<double>(w[i]) * a[i];
    return s;
}

// Runs a kernel over rows x cols and returns y[c][r].
std::vector<std::vector<float>> run_tile(cpu::DotFn fn, int64_t n, const std::vector<uint8_t>& w, size_t w_stride, int64_t rows,
                                         const std::vector<std::vector<uint8_t>>& acts) {
    std::vector<std::vector<float>> y(acts.size(), std::vector<float>(static_cast<size_t>(rows), NAN));
    std::vector<const uint8_t*> a;
    std::vector<float*> out;
    for (size_t c = 0; c < acts.size(); ++c) {
        a.push_back(acts[c].data());
        out.push_back(y[c].data());
    }
    cpu::DotTile t;
    t.n = n;
    t.w = w.data();
    t.w_stride = w_stride;
    t.rows = rows;
    t.a = a.data();
    t.y = out.data();
    t.cols = static_cast<int64_t>(acts.size());
    fn(t);
    return y;
}

class KernelLevel : public ::testing::TestWithParam<Isa> {};

// The quantisers of every level produce the scalar reference's bytes.
TEST_P(KernelLevel, ActivationQuantisersMatchScalarBytes) {
    STRATA_REQUIRE_ISA(GetParam());
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    const auto& ks = cpu::kernel_set(GetParam());
    for (ActFormat f : {ActFormat::F32, ActFormat::BF16, ActFormat::Q8_0, ActFormat::Q8_1, ActFormat::Q8_K}) {
        for (int64_t n : {256, 512, 4096}) {
            for (uint32_t seed : kSeeds) {
                auto x = random_floats(static_cast<size_t>(n), seed, seed == 2 ? 1e-3f : 3.0f);
                if (seed == 3) std::fill(x.begin(), x.begin() + 256, 0.0f);  // an all-zero block
                if (f == ActFormat::BF16) x[5] = NAN;
                const auto a = quantize_acts(ref, f, x);
                const auto b = quantize_acts(ks, f, x);
                ASSERT_EQ(a.size(), b.size());
                EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size()))
                    << cpu::act_format_name(f) << " n=" << n << " seed=" << seed << " level " << util::isa_name(GetParam());
            }
        }
    }
}

// Every kernel of the level against the scalar reference on the same bytes, over a tile of
// 3 rows x 1..9 columns (all column-group remainders). Integer sums are exact, so the only
// difference is f32 rounding in the block scaling and summation order: bound 1e-5 of
// sum |w_i a_i| (plus a tiny absolute floor for denormal-sized results).
TEST_P(KernelLevel, DotKernelsMatchScalar) {
    STRATA_REQUIRE_ISA(GetParam());
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    const auto& ks = cpu::kernel_set(GetParam());
    for (Type t : cpu::supported_weight_types()) {
        const ActFormat f = *cpu::act_format_for(t);
        for (int64_t n : test_lengths(t)) {
            for (uint32_t seed : kSeeds) {
                const int64_t rows = 3;
                const auto w = make_weights(t, rows, n, seed);
                const size_t stride = w.size() / rows;
                std::vector<std::vector<uint8_t>> acts;
                std::vector<std::vector<float>> acts_deq;
                for (int c = 0; c < 9; ++c) {
                    acts.push_back(
                        quantize_acts(ref, f, random_floats(static_cast<size_t>(n), seed * 100 + static_cast<uint32_t>(c))));
                    acts_deq.push_back(dequant_acts(f, acts.back().data(), n));
                }
                const auto want = run_tile(ref.dot_for(t), n, w, stride, rows, acts);
                const auto got = run_tile(ks.dot_for(t), n, w, stride, rows, acts);
                for (int64_t r = 0; r < rows; ++r) {
                    const auto wd = dequant_weights(t, w.data() + static_cast<size_t>(r) * stride, n);
                    for (size_t c = 0; c < acts.size(); ++c) {
                        const double bound = 1e-5 * abs_dot(wd, acts_deq[c]) + 1e-30;
                        EXPECT_NEAR(got[c][static_cast<size_t>(r)], want[c][static_cast<size_t>(r)], bound)
                            << quant::type_name(t) << " n=" << n << " seed=" << seed << " row " << r << " col " << c << " level "
                            << util::isa_name(GetParam());
                    }
                }
            }
        }
    }
}

// Random bytes where a quantiser exists too: codes and scales the quantiser would not produce
// (e.g. extreme k-quant scales) must agree as well.
TEST_P(KernelLevel, DotKernelsMatchScalarOnRandomBlocks) {
    STRATA_REQUIRE_ISA(GetParam());
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    const auto& ks = cpu::kernel_set(GetParam());
    for (Type t : cpu::supported_weight_types()) {
        if (!quant::type_info(t).quantized) continue;
        const ActFormat f = *cpu::act_format_for(t);
        const int64_t n = quant::type_info(t).block_elems == 32 ? 512 : 1024;
        const auto w = make_weights(t, 2, n, 42, /*prefer_random_bytes=*/true);
        std::vector<std::vector<uint8_t>> acts;
        for (int c = 0; c < 5; ++c)
            acts.push_back(quantize_acts(ref, f, random_floats(static_cast<size_t>(n), 900u + static_cast<uint32_t>(c))));
        const auto want = run_tile(ref.dot_for(t), n, w, w.size() / 2, 2, acts);
        const auto got = run_tile(ks.dot_for(t), n, w, w.size() / 2, 2, acts);
        for (int r = 0; r < 2; ++r) {
            const auto wd = dequant_weights(t, w.data() + static_cast<size_t>(r) * (w.size() / 2), n);
            for (size_t c = 0; c < acts.size(); ++c) {
                const double bound = 1e-5 * abs_dot(wd, dequant_acts(f, acts[c].data(), n)) + 1e-30;
                EXPECT_NEAR(got[c][static_cast<size_t>(r)], want[c][static_cast<size_t>(r)], bound)
                    << quant::type_name(t) << " row " << r << " col " << c;
            }
        }
    }
}

// Every kernel of the level gives a column the same bits alone as among 9 columns (other
// column-group sizes and, for the 32-value and float types, the two-row kernels): the engine's
// batch invariance (Matmul.ColumnResultsDoNotDependOnTheBatch) at every level.
TEST_P(KernelLevel, ColumnAloneEqualsColumnInATile) {
    STRATA_REQUIRE_ISA(GetParam());
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    const auto& ks = cpu::kernel_set(GetParam());
    for (Type t : cpu::supported_weight_types()) {
        const ActFormat f = *cpu::act_format_for(t);
        const int64_t n = quant::type_info(t).block_elems == 256 ? 1024 : 1056;
        const int64_t rows = 5;
        const auto w = make_weights(t, rows, n, 8);
        std::vector<std::vector<uint8_t>> acts;
        for (int c = 0; c < 9; ++c)
            acts.push_back(quantize_acts(ref, f, random_floats(static_cast<size_t>(n), 300u + static_cast<uint32_t>(c))));
        const auto batch = run_tile(ks.dot_for(t), n, w, w.size() / rows, rows, acts);
        for (size_t c = 0; c < acts.size(); ++c) {
            const auto alone = run_tile(ks.dot_for(t), n, w, w.size() / rows, rows, {acts[c]});
            EXPECT_EQ(0, std::memcmp(alone[0].data(), batch[c].data(), static_cast<size_t>(rows) * 4))
                << quant::type_name(t) << " col " << c << " level " << cpu::isa_name(GetParam());
        }
    }
}

// SwiGLU of every level against the scalar reference (std::exp): gates over [-40, 40], where both
// of silu's tails and its bend are, lengths that are and are not whole vectors, out of place and
// in place on the gate. Bound: 2e-6 of |silu(g) * u| + 1e-30 (the polynomial exp's ~3e-7 plus a
// division's and two products' rounding).
TEST_P(KernelLevel, SwigluMatchesScalar) {
    STRATA_REQUIRE_ISA(GetParam());
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    const auto& ks = cpu::kernel_set(GetParam());
    ASSERT_NE(ks.swiglu, nullptr);
    for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 768, 1000}) {
        auto gate = random_floats(static_cast<size_t>(n), 500u + static_cast<uint32_t>(n), 40.0f);
        const auto up = random_floats(static_cast<size_t>(n), 900u + static_cast<uint32_t>(n), 3.0f);
        std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
        ref.swiglu(gate.data(), up.data(), want.data(), n);
        ks.swiglu(gate.data(), up.data(), got.data(), n);
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i)
            worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / (std::fabs(want[i]) + 1e-30));
        EXPECT_LT(worst, 2e-6) << "n " << n << " level " << cpu::isa_name(GetParam());
        ks.swiglu(gate.data(), up.data(), gate.data(), n);
        EXPECT_EQ(0, std::memcmp(gate.data(), got.data(), got.size() * sizeof(float))) << "in place, n " << n;
    }
}

// RMS norm of every level against the scalar reference (double sums): rows of 1..5000 values with
// and without a weight, out of place and in place. Bound 1e-6 relative (float lane sums over a
// row: ~n / 16 additions of rounding 6e-8 each, relative to a sum of squares).
TEST_P(KernelLevel, RmsNormMatchesScalar) {
    STRATA_REQUIRE_ISA(GetParam());
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    const auto& ks = cpu::kernel_set(GetParam());
    ASSERT_NE(ks.rms_norm, nullptr);
    for (int64_t n : {1, 15, 16, 17, 128, 2048, 5000}) {
        auto x = random_floats(static_cast<size_t>(n), 700u + static_cast<uint32_t>(n), 3.0f);
        const auto w = random_floats(static_cast<size_t>(n), 800u + static_cast<uint32_t>(n));
        for (const float* wp : {w.data(), static_cast<const float*>(nullptr)}) {
            std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
            ref.rms_norm(x.data(), wp, n, 1e-6f, want.data());
            ks.rms_norm(x.data(), wp, n, 1e-6f, got.data());
            double worst = 0;
            for (size_t i = 0; i < want.size(); ++i)
                worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / (std::fabs(want[i]) + 1e-30));
            EXPECT_LT(worst, 1e-6) << "n " << n << (wp ? " weighted" : "") << " level " << cpu::isa_name(GetParam());
            auto in_place = x;
            ks.rms_norm(in_place.data(), wp, n, 1e-6f, in_place.data());
            EXPECT_EQ(0, std::memcmp(in_place.data(), got.data(), got.size() * sizeof(float))) << "in place, n " << n;
        }
    }
}

// The kernels a CPU feature brings over its level's own (AVX-512 VBMI: IQ3_XXS) and the level's
// own kernels of those types, each against the scalar reference on quantised and on random
// blocks at the seed's row lengths (640, 2560) and 1..9 columns: a CPU with the feature still
// checks the kernel the CPUs without it run, and the kernel set takes the feature's kernel.
TEST(KernelTables, Avx512KernelsWithAndWithoutVbmiMatchScalar) {
    STRATA_REQUIRE_ISA(Isa::Avx512);
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    const cpu::detail::KernelTable& vbmi = cpu::detail::kAvx512VbmiKernels;
    const cpu::detail::KernelTable& plain = cpu::detail::kAvx512IquantKernels;
    ASSERT_GT(vbmi.n_dots, 0u);
    for (size_t i = 0; i < vbmi.n_dots; ++i) {
        const Type t = vbmi.dots[i].type;
        const cpu::DotFn* plain_fn = nullptr;
        for (size_t k = 0; k < plain.n_dots; ++k)
            if (plain.dots[k].type == t) plain_fn = &plain.dots[k].fn;
        ASSERT_NE(plain_fn, nullptr) << quant::type_name(t);
        std::vector<std::pair<const char*, cpu::DotFn>> fns = {{"avx512", *plain_fn}};
        if (util::has_avx512_vbmi()) {
            fns.push_back({"avx512vbmi", vbmi.dots[i].fn});
            EXPECT_EQ(cpu::kernel_set(Isa::Avx512).dot_for(t), vbmi.dots[i].fn) << quant::type_name(t);
        } else {
            EXPECT_EQ(cpu::kernel_set(Isa::Avx512).dot_for(t), *plain_fn) << quant::type_name(t);
        }
        const ActFormat f = *cpu::act_format_for(t);
        for (int64_t n : {int64_t{256}, int64_t{2560}, int64_t{640 * 4}}) {
            for (bool random_bytes : {false, true}) {
                const int64_t rows = 4;
                const auto w = make_weights(t, rows, n, static_cast<uint32_t>(n) + random_bytes, random_bytes);
                const size_t stride = w.size() / rows;
                std::vector<std::vector<uint8_t>> acts;
                std::vector<std::vector<float>> acts_deq;
                for (int c = 0; c < 9; ++c) {
                    acts.push_back(quantize_acts(ref, f, random_floats(static_cast<size_t>(n), 700u + static_cast<uint32_t>(c))));
                    acts_deq.push_back(dequant_acts(f, acts.back().data(), n));
                }
                const auto want = run_tile(ref.dot_for(t), n, w, stride, rows, acts);
                for (const auto& [name, fn] : fns) {
                    const auto got = run_tile(fn, n, w, stride, rows, acts);
                    for (int64_t r = 0; r < rows; ++r) {
                        const auto wd = dequant_weights(t, w.data() + static_cast<size_t>(r) * stride, n);
                        for (size_t c = 0; c < acts.size(); ++c) {
                            const double bound = 1e-5 * abs_dot(wd, acts_deq[c]) + 1e-30;
                            EXPECT_NEAR(got[c][static_cast<size_t>(r)], want[c][static_cast<size_t>(r)], bound)
                                << name << " " << quant::type_name(t) << " n=" << n << " random " << random_bytes << " row " << r
                                << " col " << c;
                        }
                    }
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Levels, KernelLevel, ::testing::Values(Isa::Avx2, Isa::Avx512),
                         [](const auto& info) { return std::string(util::isa_name(info.param)); });

// The 32-value legacy types, Q4_1 / Q5_0 / Q5_1 among them, at every level the CPU has against
// the dequantised dot product in double (bound 1e-5 of sum |w_i a_i|): random quantised rows
// (negative mins), random bytes (every code, odd scales), every column-group remainder, and
// the fixture's rows quantised by the reference quantiser (llama.cpp) with its own
// dequantisation.
class LegacyLevel : public ::testing::TestWithParam<Isa> {};

constexpr Type kLegacyTypes[] = {Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0};

TEST_P(LegacyLevel, DotEqualsDequantisedDotProduct) {
    STRATA_REQUIRE_ISA(GetParam());
    const auto& ks = cpu::kernel_set(GetParam());
    for (Type t : kLegacyTypes) {
        const ActFormat f = *cpu::act_format_for(t);
        for (int64_t n : test_lengths(t)) {
            for (bool random_bytes : {false, true}) {
                const int64_t rows = 3;
                const auto w = make_weights(t, rows, n, static_cast<uint32_t>(n), random_bytes);
                const size_t stride = w.size() / rows;
                std::vector<std::vector<uint8_t>> acts;
                for (int c = 0; c < 9; ++c)
                    acts.push_back(quantize_acts(ks, f, random_floats(static_cast<size_t>(n), 40u + static_cast<uint32_t>(c))));
                const auto got = run_tile(ks.dot_for(t), n, w, stride, rows, acts);
                for (int64_t r = 0; r < rows; ++r) {
                    const auto wd = dequant_weights(t, w.data() + static_cast<size_t>(r) * stride, n);
                    for (size_t c = 0; c < acts.size(); ++c) {
                        const auto ad = dequant_acts(f, acts[c].data(), n);
                        EXPECT_NEAR(got[c][static_cast<size_t>(r)], dot_double(wd, ad), 1e-5 * abs_dot(wd, ad) + 1e-30)
                            << quant::type_name(t) << " n=" << n << (random_bytes ? " random bytes" : "") << " row " << r
                            << " col " << c << " level " << cpu::isa_name(GetParam());
                    }
                }
            }
        }
    }
}

TEST_P(LegacyLevel, DotOfReferenceQuantisedRowsEqualsTheirDequantisation) {
    STRATA_REQUIRE_ISA(GetParam());
    const auto path = fixture("quant/quant-test.gguf");
    STRATA_REQUIRE_FIXTURE(path);
    const auto file = gguf::File::open(path);
    const auto& ks = cpu::kernel_set(GetParam());
    for (Type t : kLegacyTypes) {
        const std::string name = quant::type_name(t);
        const gguf::TensorInfo& q = file->tensor(name + ".q");
        const gguf::TensorInfo& deq = file->tensor(name + ".deq");
        ASSERT_EQ(q.type, t);
        const auto n = static_cast<int64_t>(q.shape[0]);
        const auto rows = static_cast<int64_t>(q.n_rows());
        const size_t stride = static_cast<size_t>(*quant::row_bytes(t, q.shape[0]));
        const std::vector<uint8_t> w(q.data, q.data + stride * static_cast<size_t>(rows));
        const ActFormat f = *cpu::act_format_for(t);
        std::vector<std::vector<uint8_t>> acts;
        for (int c = 0; c < 4; ++c)
            acts.push_back(quantize_acts(ks, f, random_floats(static_cast<size_t>(n), 70u + static_cast<uint32_t>(c))));
        const auto got = run_tile(ks.dot_for(t), n, w, stride, rows, acts);
        for (int64_t r = 0; r < rows; ++r) {
            std::vector<float> wd(static_cast<size_t>(n));
            std::memcpy(wd.data(), deq.data + static_cast<size_t>(r * n) * 4, static_cast<size_t>(n) * 4);
            for (size_t c = 0; c < acts.size(); ++c) {
                const auto ad = dequant_acts(f, acts[c].data(), n);
                EXPECT_NEAR(got[c][static_cast<size_t>(r)], dot_double(wd, ad), 1e-5 * abs_dot(wd, ad) + 1e-30)
                    << name << " row " << r << " col " << c << " level " << cpu::isa_name(GetParam());
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Levels, LegacyLevel, ::testing::Values(Isa::Scalar, Isa::Avx2, Isa::Avx512),
                         [](const auto& info) { return std::string(cpu::isa_name(info.param)); });

// The types with a min take Q8_1 activations, whose s is d times the block's sum of codes.
TEST(LegacyKernels, TypesWithAMinTakeQ8_1WithTheBlockSums) {
    EXPECT_EQ(cpu::act_format_for(Type::Q4_1), ActFormat::Q8_1);
    EXPECT_EQ(cpu::act_format_for(Type::Q5_1), ActFormat::Q8_1);
    EXPECT_EQ(cpu::act_format_for(Type::Q5_0), ActFormat::Q8_0);
    const auto x = random_floats(96, 5);
    const auto a = quantize_acts(cpu::kernel_set(Isa::Scalar), ActFormat::Q8_1, x);
    ASSERT_EQ(a.size(), 3 * sizeof(quant::BlockQ8_1Act));
    for (int b = 0; b < 3; ++b) {
        quant::BlockQ8_1Act blk;
        std::memcpy(&blk, a.data() + b * sizeof blk, sizeof blk);
        int sum = 0;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) {
            sum += blk.qs[j];
            amax = std::max(amax, std::fabs(x[static_cast<size_t>(32 * b + j)]));
        }
        EXPECT_EQ(blk.d, amax / 127.0f);
        EXPECT_EQ(blk.s, blk.d * static_cast<float>(sum));
    }
}

// The scalar reference is the dequantised dot product: against dequantize_row(weights) .
// dequantised activations in double, only f32 rounding differs (bound 1e-5 of sum |w_i a_i|).
TEST(ScalarKernels, EqualDequantisedDotProduct) {
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    for (Type t : cpu::supported_weight_types()) {
        const ActFormat f = *cpu::act_format_for(t);
        for (int64_t n : test_lengths(t)) {
            for (uint32_t seed : kSeeds) {
                for (bool random_bytes : {false, true}) {
                    if (random_bytes && !quant::type_info(t).quantized) continue;
                    const auto w = make_weights(t, 1, n, seed, random_bytes);
                    const auto a = quantize_acts(ref, f, random_floats(static_cast<size_t>(n), seed + 17));
                    const auto got = run_tile(ref.dot_for(t), n, w, w.size(), 1, {a})[0][0];
                    const auto wd = dequant_weights(t, w.data(), n);
                    const auto ad = dequant_acts(f, a.data(), n);
                    EXPECT_NEAR(got, dot_double(wd, ad), 1e-5 * abs_dot(wd, ad) + 1e-30)
                        << quant::type_name(t) << " n=" << n << " seed=" << seed << (random_bytes ? " random bytes" : "");
                }
            }
        }
    }
}

// Against the unquantised activations the error is what quantising them costs: per value at
// most half a step (d / 2) plus the f16 rounding of Q8_0's scale (127 * d * 2^-11), bf16's
// relative 2^-9 for BF16, nothing for F32.
TEST(ScalarKernels, ActivationQuantisationErrorWithinBound) {
    const auto& ref = cpu::kernel_set(Isa::Scalar);
    for (Type t : cpu::supported_weight_types()) {
        const ActFormat f = *cpu::act_format_for(t);
        for (int64_t n : test_lengths(t)) {
            const auto w = make_weights(t, 1, n, 5);
            const auto x = random_floats(static_cast<size_t>(n), 77);
            const auto a = quantize_acts(ref, f, x);
            const auto got = run_tile(ref.dot_for(t), n, w, w.size(), 1, {a})[0][0];
            const auto wd = dequant_weights(t, w.data(), n);
            const int64_t blk = cpu::act_block_elems(f);
            double bound = 1e-5 * abs_dot(wd, x);
            for (int64_t b = 0; b < n / blk; ++b) {
                double amax = 0.0;
                for (int64_t i = b * blk; i < (b + 1) * blk; ++i)
                    amax = std::max(amax, std::fabs(static_cast<double>(x[static_cast<size_t>(i)])));
                const double d = amax / 127.0;
                for (int64_t i = b * blk; i < (b + 1) * blk; ++i) {
                    const double wi = std::fabs(wd[static_cast<size_t>(i)]);
                    switch (f) {
                        case ActFormat::F32: break;
                        case ActFormat::BF16: bound += wi * std::fabs(x[static_cast<size_t>(i)]) * std::ldexp(1.0, -8); break;
                        case ActFormat::Q8_0: bound += wi * (0.5 * d + 127.0 * d * std::ldexp(1.0, -11)) * 1.0001; break;
                        case ActFormat::Q8_1:
                        case ActFormat::Q8_K: bound += wi * 0.5 * d * 1.0001; break;
                    }
                }
            }
            EXPECT_NEAR(got, dot_double(wd, x), bound) << quant::type_name(t) << " n=" << n;
        }
    }
}

TEST(KernelSets, EveryLevelHasEveryTypeAndQuantiser) {
    const auto types = cpu::supported_weight_types();
    EXPECT_GE(types.size(), 17u);
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!util::isa_supported(isa)) continue;
        const auto& ks = cpu::kernel_set(isa);
        EXPECT_EQ(ks.isa, isa);
        for (Type t : types) EXPECT_NE(ks.dot_for(t), nullptr) << quant::type_name(t) << " at " << util::isa_name(isa);
        for (int f = 0; f < cpu::kActFormatCount; ++f) EXPECT_NE(ks.quantize[f], nullptr);
    }
    // Each level really brings its own kernels for the main types.
    if (util::isa_supported(Isa::Avx2)) {
        EXPECT_NE(cpu::kernel_set(Isa::Avx2).dot_for(Type::Q4_K), cpu::kernel_set(Isa::Scalar).dot_for(Type::Q4_K));
    }
    if (util::isa_supported(Isa::Avx512)) {
        for (Type t : {Type::Q4_K, Type::Q8_0, Type::IQ4_XS, Type::IQ3_XXS, Type::F16}) {
            EXPECT_NE(cpu::kernel_set(Isa::Avx512).dot_for(t), cpu::kernel_set(Isa::Avx2).dot_for(t)) << quant::type_name(t);
        }
    }
    EXPECT_TRUE(util::isa_supported(Isa::Scalar));
    EXPECT_TRUE(util::isa_supported(util::best_isa()));
    EXPECT_EQ(util::isa_from_name("AVX2"), Isa::Avx2);
    EXPECT_EQ(util::isa_from_name("sse"), std::nullopt);
}

TEST(KernelSets, UnsupportedLevelThrows) {
    if (util::isa_supported(Isa::Avx512)) GTEST_SKIP() << "CPU has AVX-512: nothing unsupported to ask for";
    EXPECT_THROW(cpu::kernel_set(Isa::Avx512), Error);
}

}  // namespace
}  // namespace strata::test
