// Every CUDA op against the CPU backend's op on the same random data (and the products against
// a plain double-precision reference on the dequantised weights), with an NMSE bound. Skipped,
// with the reason, where this build has no CUDA backend or no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cpu_backend.h"
#include "cpu/kernels.h"
#include "devices/backend_factory.h"
#include "quant/dequant.h"
#include "quant/quantize.h"
#include "test_util.h"
#include "util/error.h"
#include "util/fp16.h"

namespace strata::backend {
namespace {

using quant::Type;

double nmse(const std::vector<float>& ref, const std::vector<float>& got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = static_cast<double>(got[i]) - ref[i];
        num += d * d;
        den += static_cast<double>(ref[i]) * ref[i];
    }
    return den > 0 ? num / den : num;
}

// Half offsets (scales) inside one block of each block type: patched to sane values in random blocks.
std::vector<int> half_fields(Type t) {
    switch (t) {
        case Type::Q4_1:
        case Type::Q5_1:
        case Type::Q4_K:
        case Type::Q5_K: return {0, 2};
        case Type::Q2_K: return {80, 82};
        case Type::Q3_K: return {108};
        case Type::Q6_K: return {208};
        default: return {0};
    }
}

// A weight tensor [n_expert][rows][ne0] of random content: float types from random values,
// block types from random bytes with their scale halves set to random values in [0.002, 0.02].
struct HostWeight {
    std::vector<uint8_t> bytes;
    backend::Weight w;
};
HostWeight random_weight(Type t, int64_t ne0, int64_t rows, int64_t n_expert, uint32_t seed) {
    const auto& ti = quant::type_info(t);
    const size_t row_bytes = static_cast<size_t>(*quant::row_bytes(t, static_cast<uint64_t>(ne0)));
    HostWeight h;
    h.bytes.resize(row_bytes * static_cast<size_t>(rows * n_expert));
    std::mt19937 rng(seed);
    if (!ti.quantized) {
        const auto v = test::random_floats(static_cast<size_t>(ne0 * rows * n_expert), seed, 0.05f);
        for (int64_t r = 0; r < rows * n_expert; ++r)
            quant::quantize_row(t, v.data() + r * ne0, h.bytes.data() + r * row_bytes, ne0);
    } else {
        for (auto& b : h.bytes) b = static_cast<uint8_t>(rng());
        std::uniform_real_distribution<float> scale(0.002f, 0.02f);
        const auto fields = half_fields(t);
        for (size_t off = 0; off < h.bytes.size(); off += static_cast<size_t>(ti.block_bytes))
            for (int f : fields) {
                const uint16_t v = f32_to_f16(scale(rng));
                std::memcpy(h.bytes.data() + off + f, &v, 2);
            }
    }
    h.w.type = t;
    h.w.data = h.bytes.data();
    h.w.ne = {ne0, rows, n_expert, 1};
    h.w.row_bytes = row_bytes;
    return h;
}

std::vector<float> dequantized(const HostWeight& h) {
    const int64_t ne0 = h.w.ne[0], rows = h.w.rows();
    std::vector<float> out(static_cast<size_t>(ne0 * rows));
    for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(h.w.type, h.w.data + r * h.w.row_bytes, out.data() + r * ne0, ne0);
    return out;
}

class CudaOps : public testing::Test {
protected:
    void SetUp() override {
        std::string why;
        if (!devices::cuda_usable(&why)) GTEST_SKIP() << why;
        devices::BackendOptions o;
        o.device = "cuda";
        gpu_ = devices::make_backend(o);
        o.cuda_int8_products = false;
        gpu_f32_ = devices::make_backend(o);
        cpu_ = std::make_unique<CpuBackend>(2);
    }
    // Decode products of these types take their input rounded to 8 bits per 32 values (unless
    // the backend was made with cuda_int8_products off).
    static bool int8_input(Type t) {
        return t == Type::Q4_K || t == Type::Q5_K || t == Type::Q6_K || t == Type::Q8_0 || t == Type::IQ3_XXS;
    }
    // NMSE of a product against the f64 reference: f32 accumulation alone stays under 1e-9; the
    // 8-bit input adds its rounding, up to half a step of amax/127 per value: ~2e-5 for normal
    // inputs, 1.2e-4 .. 3.5e-4 measured with test::random_floats' outliers (one value in 97 is
    // 8x, and its block's step with it).
    static double product_bound(Type t, bool int8_on) { return int8_on && int8_input(t) ? 1e-3 : 1e-9; }
    // The same values in a buffer of each backend.
    struct Twin {
        Buffer cpu, gpu;
        size_t n;
    };
    Twin twin(const std::vector<float>& v) {
        Twin t{Buffer(cpu_.get(), v.size()), Buffer(gpu_.get(), v.size()), v.size()};
        cpu_->copy_from_host(v.data(), t.cpu.data(), v.size());
        gpu_->copy_from_host(v.data(), t.gpu.data(), v.size());
        return t;
    }
    std::vector<float> read(Backend& b, const float* p, size_t n) {
        std::vector<float> v(n);
        b.copy_to_host(p, v.data(), n);
        return v;
    }
    std::vector<float> cpu_of(const Twin& t) { return read(*cpu_, t.cpu.data(), t.n); }
    std::vector<float> gpu_of(const Twin& t) { return read(*gpu_, t.gpu.data(), t.n); }
    // Uploaded weights are found again by their host address: keep every one alive for the test.
    const HostWeight& upload(HostWeight h) {
        kept_.push_back(std::make_unique<HostWeight>(std::move(h)));
        gpu_->upload_weights({&kept_.back()->w, 1}, {});
        gpu_f32_->upload_weights({&kept_.back()->w, 1}, {});
        return *kept_.back();
    }

    std::unique_ptr<Backend> gpu_, gpu_f32_, cpu_;
    std::vector<std::unique_ptr<HostWeight>> kept_;
};

// ---- products ------------------------------------------------------------------------------

class CudaMatmul : public CudaOps, public testing::WithParamInterface<Type> {};

TEST_P(CudaMatmul, MatchesReferenceAndCpuForEveryBatchSize) {
    const Type t = GetParam();
    const int64_t ne0 = 512, rows = 72;
    const auto& h = upload(random_weight(t, ne0, rows, 1, 11));
    const auto deq = dequantized(h);
    for (int64_t n : {1, 2, 3, 8, 9, 16, 17, 32, 40}) {
        const auto x = test::random_floats(static_cast<size_t>(n * ne0), 100 + static_cast<uint32_t>(n));
        std::vector<float> ref(static_cast<size_t>(n * rows));
        for (int64_t c = 0; c < n; ++c)
            for (int64_t r = 0; r < rows; ++r) {
                double s = 0;
                for (int64_t i = 0; i < ne0; ++i)
                    s += static_cast<double>(deq[static_cast<size_t>(r * ne0 + i)]) * x[static_cast<size_t>(c * ne0 + i)];
                ref[static_cast<size_t>(c * rows + r)] = static_cast<float>(s);
            }
        Twin xin = twin(x), y = twin(std::vector<float>(static_cast<size_t>(n * rows), 0.0f));
        const MatmulArgs pg[] = {{&h.w, xin.gpu.data(), n, y.gpu.data()}};
        gpu_->matmul(pg);
        const auto got = gpu_of(y);
        // A type without a CPU kernel would be held to the reference alone.
        const bool on_cpu = cpu::act_format_for(t).has_value();
        if (on_cpu) {
            const MatmulArgs pc[] = {{&h.w, xin.cpu.data(), n, y.cpu.data()}};
            cpu_->matmul(pc);
        }
        // GEMVs (n <= 8) of the int8_input types take 8-bit inputs, of other types f32
        // throughout; larger batches of quantised weights run through bf16 cuBLAS, float weights
        // through f32 cuBLAS. The CPU rounds activations to 8 bits for quantised weights.
        const bool bf16_path = n > 8 && quant::type_info(t).quantized;
        const double bound = bf16_path ? 1e-4 : n <= 8 ? product_bound(t, true) : 1e-9;
        EXPECT_LT(nmse(ref, got), bound) << quant::type_name(t) << " n=" << n;
        if (on_cpu) {
            EXPECT_LT(nmse(cpu_of(y), got), 1e-3) << quant::type_name(t) << " n=" << n;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaMatmul,
                         testing::Values(Type::F32, Type::F16, Type::BF16, Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1,
                                         Type::Q8_0, Type::IQ4_NL, Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K,
                                         Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS, Type::IQ3_S, Type::IQ4_XS),
                         [](const auto& info) { return std::string(quant::type_name(info.param)); });

// q, k and v of one input row go to the GPU as one launch: each output as its own product,
// against the plain reference on the dequantised weights.
TEST_F(CudaOps, SeveralProductsOfOneRowMatchReference) {
    for (Type t : {Type::Q4_K, Type::F32, Type::IQ3_XXS}) {
        const HostWeight* w[3] = {&upload(random_weight(t, 512, 96, 1, 21)), &upload(random_weight(t, 512, 32, 1, 22)),
                                  &upload(random_weight(t, 512, 7, 1, 23))};
        const auto x = test::random_floats(512, 24);
        Twin xin = twin(x);
        std::vector<Twin> ys;
        std::vector<MatmulArgs> products;
        for (const HostWeight* h : w) ys.push_back(twin(std::vector<float>(static_cast<size_t>(h->w.ne[1]), 0.0f)));
        for (size_t i = 0; i < 3; ++i) products.push_back({&w[i]->w, xin.gpu.data(), 1, ys[i].gpu.data()});
        gpu_->matmul(products);
        for (size_t i = 0; i < 3; ++i) {
            const auto deq = dequantized(*w[i]);
            std::vector<float> ref(static_cast<size_t>(w[i]->w.ne[1]));
            for (size_t r = 0; r < ref.size(); ++r) {
                double s = 0;
                for (size_t j = 0; j < 512; ++j) s += static_cast<double>(deq[r * 512 + j]) * x[j];
                ref[r] = static_cast<float>(s);
            }
            EXPECT_LT(nmse(ref, gpu_of(ys[i])), product_bound(t, true)) << quant::type_name(t) << " product " << i;
        }
    }
}

// Q4_K matrices then Q6_K ones on one input (attention's q, k and v where Q4_K_M keeps v at 6
// bits) share a launch when the type boundary falls on a block of the launch's shape; other
// mixes (boundary inside a block, Q6_K first) go in a launch per type. Every case against the f64
// product of the dequantised rows.
TEST_F(CudaOps, ProductsOfTwoTypesOnOneInputMatchReference) {
    struct Mat {
        Type t;
        int64_t rows;
    };
    const std::vector<std::vector<Mat>> cases = {
        {{Type::Q4_K, 96}, {Type::Q4_K, 32}, {Type::Q6_K, 40}},      // one launch, a warp pair a row
        {{Type::Q4_K, 4096}, {Type::Q4_K, 512}, {Type::Q6_K, 512}},  // one launch, 2 rows a warp
        {{Type::Q4_K, 4100}, {Type::Q6_K, 300}},                     // boundary inside a block
        {{Type::Q6_K, 64}, {Type::Q4_K, 64}, {Type::Q6_K, 8}},       // Q6_K first
    };
    const int64_t width = 512;
    const auto x = test::random_floats(width, 25);
    Twin xin = twin(x);
    uint32_t seed = 40;
    for (const auto& mats : cases) {
        std::vector<const HostWeight*> w;
        std::vector<Twin> ys;
        std::vector<MatmulArgs> products;
        for (const Mat& m : mats) {
            w.push_back(&upload(random_weight(m.t, width, m.rows, 1, seed++)));
            ys.push_back(twin(std::vector<float>(static_cast<size_t>(m.rows), 0.0f)));
        }
        for (size_t i = 0; i < mats.size(); ++i) products.push_back({&w[i]->w, xin.gpu.data(), 1, ys[i].gpu.data()});
        gpu_->matmul(products);
        for (size_t i = 0; i < mats.size(); ++i) {
            const auto deq = dequantized(*w[i]);
            std::vector<float> ref(static_cast<size_t>(mats[i].rows));
            for (size_t r = 0; r < ref.size(); ++r) {
                double s = 0;
                for (size_t j = 0; j < static_cast<size_t>(width); ++j) s += static_cast<double>(deq[r * width + j]) * x[j];
                ref[r] = static_cast<float>(s);
            }
            EXPECT_LT(nmse(ref, gpu_of(ys[i])), product_bound(mats[i].t, true))
                << quant::type_name(mats[i].t) << " matrix " << i << " of " << mats.size() << ", first " << mats[0].rows
                << " rows";
        }
    }
}

TEST_F(CudaOps, GetRowsDequantisesTheChosenRows) {
    // Rows of one and of four blocks of the k-quants and i-quants.
    for (Type t : {Type::F32, Type::Q4_K, Type::Q6_K, Type::IQ3_XXS, Type::IQ2_XXS}) {
        for (int64_t width : {256, 1024}) {
            const auto& h = upload(random_weight(t, width, 50, 1, 5));
            const std::vector<int32_t> ids = {3, 49, 0, 3, 17};
            Twin out = twin(std::vector<float>(static_cast<size_t>(5 * width), 1.0f));
            cpu_->get_rows(h.w, ids.data(), 5, out.cpu.data());
            gpu_->get_rows(h.w, ids.data(), 5, out.gpu.data());
            EXPECT_LT(nmse(cpu_of(out), gpu_of(out)), 1e-12) << quant::type_name(t) << " width " << width;
        }
    }
}

// Experts: shuffled ids, uneven loads (one expert takes a third of the pairs), both the decode
// path (ids read on the device) and the grouped path of large batches.
TEST_F(CudaOps, MoeMatchesCpuWithUnevenExpertLoads) {
    // The second shape: rows of 2,048 values (several chunks per lane) and few rows per expert.
    for (auto [n_embd, n_ff] : {std::pair<int64_t, int64_t>{256, 512}, std::pair<int64_t, int64_t>{2048, 256}}) {
        const int64_t n_expert = 16, k = 4;
        for (auto [gate_t, down_t] :
             {std::pair{Type::Q4_K, Type::Q6_K}, std::pair{Type::IQ3_XXS, Type::Q4_K}, std::pair{Type::BF16, Type::BF16}}) {
            const auto& gate = upload(random_weight(gate_t, n_embd, n_ff, n_expert, 1));
            const auto& up = upload(random_weight(gate_t, n_embd, n_ff, n_expert, 2));
            const auto& down = upload(random_weight(down_t, n_ff, n_embd, n_expert, 3));
            for (int64_t n : {1, 7, 90}) {
                std::mt19937 rng(static_cast<uint32_t>(n));
                std::vector<float> ids_f(static_cast<size_t>(n * k)), w(static_cast<size_t>(n * k));
                for (int64_t t = 0; t < n; ++t) {
                    std::vector<int32_t> e(static_cast<size_t>(n_expert));
                    std::iota(e.begin(), e.end(), 0);
                    std::shuffle(e.begin(), e.end(), rng);
                    if (rng() % 3 == 0) std::swap(e[0], *std::find(e.begin(), e.end(), 5));  // expert 5 is popular
                    for (int64_t j = 0; j < k; ++j) {
                        const int32_t id = e[static_cast<size_t>(j)];
                        std::memcpy(&ids_f[static_cast<size_t>(t * k + j)], &id, 4);
                        w[static_cast<size_t>(t * k + j)] = 0.1f + static_cast<float>(rng() % 100) / 100.0f;
                    }
                }
                Twin x = twin(test::random_floats(static_cast<size_t>(n * n_embd), 7)), ids = twin(ids_f), ww = twin(w);
                Twin out = twin(std::vector<float>(static_cast<size_t>(n * n_embd), 0.0f));
                MoeArgs a;
                a.gate = &gate.w;
                a.up = &up.w;
                a.down = &down.w;
                a.n_tokens = n;
                a.k = k;
                // The same call on each backend's copies; with resid, the residual add and the
                // norm into normed as well.
                const auto moe_on_both = [&](Twin* resid, Twin* normed) {
                    for (const bool on_gpu : {false, true}) {
                        const auto at = [&](Twin& t) { return (on_gpu ? t.gpu : t.cpu).data(); };
                        a.x = at(x);
                        a.ids = reinterpret_cast<const int32_t*>(at(ids));
                        a.weights = at(ww);
                        a.out = at(out);
                        a.residual = resid != nullptr ? at(*resid) : nullptr;
                        a.normed = normed != nullptr ? at(*normed) : nullptr;
                        (on_gpu ? gpu_ : cpu_)->moe(a);
                    }
                };
                moe_on_both(nullptr, nullptr);
                // The CPU rounds activations to 8 bits for quantised experts, the GPU keeps f32: the
                // bound is the CPU's rounding (IQ3_XXS with rows of 2,048 values: 2.2e-3).
                const double e = nmse(cpu_of(out), gpu_of(out));
                EXPECT_LT(e, n_embd > 256 ? 4e-3 : 2e-3) << quant::type_name(gate_t) << " n=" << n << " embd " << n_embd;
                if (n > 7) continue;
                // With the residual add and the next norm (decode): rows of 2,048 values take the
                // kernel that combines, adds and norms at once and writes the 8-bit copy the next
                // product reads; rows of 256 the separate combine and add_rms_norm.
                const auto& nw = upload(random_weight(Type::F32, n_embd, 1, 1, 9));
                Twin resid = twin(test::random_floats(static_cast<size_t>(n * n_embd), 8));
                Twin normed = twin(std::vector<float>(static_cast<size_t>(n * n_embd), 0.0f));
                a.norm = &nw.w;
                a.eps = 1e-6f;
                moe_on_both(&resid, &normed);
                EXPECT_LT(nmse(cpu_of(resid), gpu_of(resid)), n_embd > 256 ? 4e-3 : 2e-3)
                    << "residual " << quant::type_name(gate_t) << " n=" << n << " embd " << n_embd;
                EXPECT_LT(nmse(cpu_of(normed), gpu_of(normed)), n_embd > 256 ? 4e-3 : 2e-3)
                    << "normed " << quant::type_name(gate_t) << " n=" << n << " embd " << n_embd;
                // The normed rows' 8-bit copy feeds the next product: it must be theirs.
                const auto& probe = upload(random_weight(Type::Q4_K, n_embd, 64, 1, 10));
                Twin py = twin(std::vector<float>(static_cast<size_t>(n * 64), 0.0f));
                const MatmulArgs pc[] = {{&probe.w, normed.cpu.data(), n, py.cpu.data()}};
                cpu_->matmul(pc);
                const MatmulArgs pg[] = {{&probe.w, normed.gpu.data(), n, py.gpu.data()}};
                gpu_->matmul(pg);
                EXPECT_LT(nmse(cpu_of(py), gpu_of(py)), 4e-3) << "product of normed " << quant::type_name(gate_t) << " n=" << n;
            }
        }
    }
}

// Decode GEMVs spread rows over warps by shape (4 or 2 rows per warp, one row per warp, two
// warps per row): every form, with ragged last sets, against the f64 product of the dequantised
// rows, with 8-bit inputs and with f32 inputs.
TEST_F(CudaOps, GemvEveryShapeMatchesReference) {
    struct Shape {
        int64_t rows, ne0;
    };
    for (Type t : {Type::Q4_K, Type::Q6_K, Type::IQ3_XXS, Type::Q5_K, Type::Q8_0}) {
        for (const Shape sh : {Shape{4101, 2048}, Shape{4099, 512}, Shape{2103, 4096}, Shape{2051, 2048}, Shape{2050, 1024},
                               Shape{1031, 2048}, Shape{300, 512}, Shape{300, 2048}, Shape{1000, 4096}}) {
            const auto& h = upload(random_weight(t, sh.ne0, sh.rows, 1, 40 + static_cast<uint32_t>(sh.rows)));
            const auto deq = dequantized(h);
            const auto x = test::random_floats(static_cast<size_t>(sh.ne0), 41);
            std::vector<float> ref(static_cast<size_t>(sh.rows));
            for (int64_t r = 0; r < sh.rows; ++r) {
                double s = 0;
                for (int64_t i = 0; i < sh.ne0; ++i)
                    s += static_cast<double>(deq[static_cast<size_t>(r * sh.ne0 + i)]) * x[static_cast<size_t>(i)];
                ref[static_cast<size_t>(r)] = static_cast<float>(s);
            }
            for (bool int8_on : {true, false}) {
                Backend& gpu = int8_on ? *gpu_ : *gpu_f32_;
                Buffer xin(&gpu, x.size()), y(&gpu, ref.size());
                gpu.copy_from_host(x.data(), xin.data(), x.size());
                const std::vector<float> junk(ref.size(), 1e3f);
                gpu.copy_from_host(junk.data(), y.data(), junk.size());
                const MatmulArgs pg[] = {{&h.w, xin.data(), 1, y.data()}};
                gpu.matmul(pg);
                const double e = nmse(ref, read(gpu, y.data(), ref.size()));
                EXPECT_LT(e, product_bound(t, int8_on))
                    << quant::type_name(t) << " " << sh.rows << " x " << sh.ne0 << (int8_on ? " 8-bit input" : " f32 input");
                // The 8-bit rounding must show (a path that silently kept f32 would not).
                if (int8_on) {
                    EXPECT_GT(e, 1e-9) << quant::type_name(t) << " " << sh.rows << " x " << sh.ne0;
                }
            }
        }
    }
}

// Products of 9+ inputs read a bf16 copy of a dense weight kept in spare VRAM. The copies give
// their memory back when an allocation needs it: here a 200 MiB buffer fits a 300 MiB budget only
// without the 64 MiB copy (fixed: 36 MiB of staging and cuBLAS workspace, the 34 MiB weight), and
// the product afterwards (its copy made again) equals the one before bit for bit.
TEST_F(CudaOps, Bf16WeightCopiesGiveTheirMemoryBack) {
    devices::BackendOptions o;
    o.device = "cuda";
    o.vram_budget = uint64_t{300} << 20;
    const auto b = devices::make_backend(o);
    const int64_t ne0 = 2048, rows = 16384, n = 16;
    kept_.push_back(std::make_unique<HostWeight>(random_weight(Type::Q8_0, ne0, rows, 1, 90)));
    const HostWeight& h = *kept_.back();
    b->upload_weights({&h.w, 1}, {});
    const auto x = test::random_floats(static_cast<size_t>(n * ne0), 91);
    Buffer xin(b.get(), x.size()), y(b.get(), static_cast<size_t>(n * rows));
    b->copy_from_host(x.data(), xin.data(), x.size());
    const MatmulArgs pg[] = {{&h.w, xin.data(), n, y.data()}};
    b->matmul(pg);
    const auto first = read(*b, y.data(), static_cast<size_t>(n * rows));
    {
        Buffer big(b.get(), size_t{200} << 18);  // 200 MiB of floats
        const std::vector<float> ones(16, 1.0f);
        b->copy_from_host(ones.data(), big.data(), ones.size());
    }
    const std::vector<float> junk(static_cast<size_t>(n * rows), 7.0f);
    b->copy_from_host(junk.data(), y.data(), junk.size());
    b->matmul(pg);
    const auto second = read(*b, y.data(), static_cast<size_t>(n * rows));
    EXPECT_TRUE(first == second);
    // And the product is right: a few rows against the f64 product of the dequantised weight.
    std::vector<float> row(static_cast<size_t>(ne0)), ref, got;
    for (int64_t r : {int64_t{0}, int64_t{777}, rows - 1}) {
        quant::dequantize_row(h.w.type, h.w.data + r * h.w.row_bytes, row.data(), ne0);
        for (int64_t c = 0; c < n; ++c) {
            double acc = 0;
            for (int64_t i = 0; i < ne0; ++i)
                acc += static_cast<double>(row[static_cast<size_t>(i)]) * x[static_cast<size_t>(c * ne0 + i)];
            ref.push_back(static_cast<float>(acc));
            got.push_back(second[static_cast<size_t>(c * rows + r)]);
        }
    }
    EXPECT_LT(nmse(ref, got), 1e-4);
}

// Few-row matrices of wide rows at 2-8 inputs with f32 inputs (the f32 router; every type on a
// backend without 8-bit inputs) take a block a row: against the f64 product of the dequantised rows.
TEST_F(CudaOps, GemvOfFewWideRowsTakesABlockARow) {
    for (Type t : {Type::F32, Type::BF16, Type::Q4_K, Type::IQ4_XS}) {
        for (int64_t rows : {128, 300, 1023}) {
            const int64_t ne0 = 2048;
            const auto& h = upload(random_weight(t, ne0, rows, 1, 70 + static_cast<uint32_t>(rows)));
            const auto deq = dequantized(h);
            for (int64_t n : {2, 3, 8}) {
                const auto x = test::random_floats(static_cast<size_t>(n * ne0), 71 + static_cast<uint32_t>(n));
                std::vector<float> ref(static_cast<size_t>(n * rows));
                for (int64_t c = 0; c < n; ++c)
                    for (int64_t r = 0; r < rows; ++r) {
                        double acc = 0;
                        for (int64_t i = 0; i < ne0; ++i)
                            acc +=
                                static_cast<double>(deq[static_cast<size_t>(r * ne0 + i)]) * x[static_cast<size_t>(c * ne0 + i)];
                        ref[static_cast<size_t>(c * rows + r)] = static_cast<float>(acc);
                    }
                Buffer xin(gpu_f32_.get(), x.size()), y(gpu_f32_.get(), ref.size());
                gpu_f32_->copy_from_host(x.data(), xin.data(), x.size());
                const std::vector<float> junk(ref.size(), 1e3f);
                gpu_f32_->copy_from_host(junk.data(), y.data(), junk.size());
                const MatmulArgs pg[] = {{&h.w, xin.data(), n, y.data()}};
                gpu_f32_->matmul(pg);
                EXPECT_LT(nmse(ref, read(*gpu_f32_, y.data(), ref.size())), 1e-9)
                    << quant::type_name(t) << " " << rows << " rows, n=" << n;
            }
        }
    }
}

// Decode norms also write their output rounded to 8 bits (in the norm's kernel where the row
// fits it, by a second kernel otherwise), and the next products of those rows use that copy; an
// op that writes the rows in between makes the products round the new values instead.
TEST_F(CudaOps, ProductsAfterANormUseItsRoundedCopyAndNotAStaleOne) {
    struct Case {
        int64_t dim;
        Type t;
    };
    // 2048: the fused kernel; 1056: add_rms_norm's kernel, then rounding; 352: the warp norm.
    for (const Case c : {Case{2048, Type::Q4_K}, Case{1056, Type::Q8_0}, Case{352, Type::Q8_0}}) {
        const int64_t dim = c.dim, out_rows = 200;
        const auto& w = upload(random_weight(c.t, dim, out_rows, 1, 61));
        const auto deq = dequantized(w);
        const auto& nw = upload(random_weight(Type::F32, dim, 1, 1, 62));
        auto product_ref = [&](const std::vector<float>& x) {
            std::vector<float> ref(static_cast<size_t>(out_rows));
            for (int64_t r = 0; r < out_rows; ++r) {
                double s = 0;
                for (int64_t i = 0; i < dim; ++i)
                    s += static_cast<double>(deq[static_cast<size_t>(r * dim + i)]) * x[static_cast<size_t>(i)];
                ref[static_cast<size_t>(r)] = static_cast<float>(s);
            }
            return ref;
        };
        for (bool add : {true, false}) {
            Twin y = twin(test::random_floats(static_cast<size_t>(dim), 63)),
                 x = twin(test::random_floats(static_cast<size_t>(dim), 64));
            Twin out = twin(std::vector<float>(static_cast<size_t>(dim), 0.0f));
            Twin prod = twin(std::vector<float>(static_cast<size_t>(out_rows), 0.0f));
            if (add) {
                cpu_->add_rms_norm(y.cpu.data(), x.cpu.data(), &nw.w, 1, dim, 1e-6f, out.cpu.data());
                gpu_->add_rms_norm(y.gpu.data(), x.gpu.data(), &nw.w, 1, dim, 1e-6f, out.gpu.data());
            } else {
                cpu_->rms_norm(y.cpu.data(), &nw.w, 1, dim, 1e-6f, out.cpu.data());
                gpu_->rms_norm(y.gpu.data(), &nw.w, 1, dim, 1e-6f, out.gpu.data());
            }
            const MatmulArgs pg[] = {{&w.w, out.gpu.data(), 1, prod.gpu.data()}};
            gpu_->matmul(pg);
            const double e = nmse(product_ref(cpu_of(out)), gpu_of(prod));
            EXPECT_LT(e, product_bound(c.t, true)) << "dim " << dim << " add " << add;
            EXPECT_GT(e, 1e-9) << "dim " << dim << " add " << add;  // rounded
            // Overwrite the rows, then the same product: it must see the new values.
            cpu_->add(out.cpu.data(), x.cpu.data(), dim);
            gpu_->add(out.gpu.data(), x.gpu.data(), dim);
            gpu_->matmul(pg);
            EXPECT_LT(nmse(product_ref(cpu_of(out)), gpu_of(prod)), product_bound(c.t, true)) << "after a write, dim " << dim;
            // A product that writes the rows counts too: a square Q4_0 matrix (f32 inputs, so it
            // leaves the norm's copy in place) from another input.
            const auto& sq = upload(random_weight(Type::Q4_0, dim, dim, 1, 65));
            gpu_->add_rms_norm(y.gpu.data(), x.gpu.data(), &nw.w, 1, dim, 1e-6f, out.gpu.data());
            const MatmulArgs overwrite[] = {{&sq.w, x.gpu.data(), 1, out.gpu.data()}};
            gpu_->matmul(overwrite);
            gpu_->matmul(pg);
            EXPECT_LT(nmse(product_ref(gpu_of(out)), gpu_of(prod)), product_bound(c.t, true))
                << "after a product wrote the rows, dim " << dim;
        }
    }
}

// Greedy sampling on the device: the same ids as the CPU (ties to the lower index, NaN and -inf
// never chosen, -1 for a row with nothing to pick), for vocabulary-sized and short rows.
TEST_F(CudaOps, ArgmaxRowsMatchCpu) {
    for (int64_t n : {int64_t{151936}, int64_t{1000}, int64_t{33}}) {
        const int64_t rows = 6;
        auto x = test::random_floats(static_cast<size_t>(rows * n), 5);
        x[static_cast<size_t>(1 * n + 3)] = x[static_cast<size_t>(1 * n + n - 2)] = 60.0f;  // a tie far apart
        for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(2 * n + i)] = i % 3 == 0 ? std::nanf("") : -INFINITY;
        x[static_cast<size_t>(4 * n + n / 2)] = std::nanf("");
        x[static_cast<size_t>(4 * n + n / 3)] = 70.0f;
        Twin t = twin(x);
        std::vector<int32_t> want(static_cast<size_t>(rows), -7), got(static_cast<size_t>(rows), -7);
        cpu_->argmax_rows(t.cpu.data(), rows, n, want.data());
        gpu_->argmax_rows(t.gpu.data(), rows, n, got.data());
        EXPECT_EQ(want, got) << "n " << n;
        EXPECT_EQ(got[1], 3);
        EXPECT_EQ(got[2], -1);
        EXPECT_EQ(got[4], n / 3);
    }
}

// Sampling summaries (Backend::sample_rows) against the host reference on the CPU backend:
// edits, +inf, NaN, ties across the k boundary, rows with fewer tokens than k, rows with none.
TEST_F(CudaOps, SampleRowsMatchTheHostReference) {
    for (int64_t n : {int64_t{151936}, int64_t{1000}, int64_t{37}}) {
        const int64_t rows = 6;
        auto x = test::random_floats(static_cast<size_t>(rows * n), 11, 4.0f);
        auto at = [&](int64_t r, int64_t i) -> float& { return x[static_cast<size_t>(r * n + i)]; };
        for (int64_t i = 0; i < std::min<int64_t>(n, 300); ++i) at(1, (i * 7919) % n) = 60.0f;  // a tie across the k boundary
        for (int64_t i = 0; i < n; ++i) at(2, i) = i % 5 == 0 ? std::nanf("") : -INFINITY;
        for (int64_t i = 0; i < 10; ++i) at(2, (i * 13) % n) = static_cast<float>(i % 4);
        at(2, 52 % n) = -0.0f;  // ties with the +0 values: by id, whatever the sign of zero
        at(3, n / 2) = at(3, n / 3) = INFINITY;
        for (int64_t i = 0; i < n; ++i) at(4, i) = i % 2 == 0 ? -INFINITY : std::nanf("");
        for (int64_t i = 0; i < n; ++i) at(5, i) = std::round(at(5, i) * 4.0f) / 4.0f;  // many ties everywhere
        std::vector<backend::LogitEdit> edits;
        for (int32_t i = 0; i < std::min<int32_t>(static_cast<int32_t>(n), 60); ++i)
            edits.push_back({static_cast<int32_t>((i * 104729) % n), i % 3 == 0 ? 2.5f : 0.0f, i % 2 == 0 ? 1.3f : 1.0f,
                             i % 4 == 0 ? 0.7f : 0.0f});
        const double us[rows] = {0.37, -1.0, 0.999999, 0.5, 0.2, 0.0};
        for (int32_t k : {256, 20, 1}) {
            std::vector<backend::RowSampleRequest> req(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) {
                req[static_cast<size_t>(r)].row = r;
                req[static_cast<size_t>(r)].u = us[r];
                req[static_cast<size_t>(r)].inv_temperature = r % 2 == 0 ? 1.0f / 0.8f : 1.0f;
            }
            req[0].edits = edits;
            req[5].edits = edits;
            req[0].top_p = 0.9f;
            req[2].top_p = 0.3f;
            req[3].min_p = 0.05f;
            req[5].top_p = 0.5f;  // ties on the nucleus boundary: part of them kept, lowest ids first
            req[5].min_p = 0.01f;
            req[3].top = 5;  // fewer of the most likely tokens than k
            Twin t = twin(x);
            std::vector<backend::RowSample> want(static_cast<size_t>(rows)), got(static_cast<size_t>(rows));
            std::vector<backend::TokenLogit> want_top(static_cast<size_t>(rows * k)), got_top(static_cast<size_t>(rows * k));
            cpu_->sample_rows(t.cpu.data(), n, req, k, want.data(), want_top.data());
            gpu_->sample_rows(t.gpu.data(), n, req, k, got.data(), got_top.data());
            const auto cpu_rows = cpu_of(t), gpu_rows = gpu_of(t);
            for (int64_t r = 0; r < rows; ++r) {
                const std::string where = "n " + std::to_string(n) + " k " + std::to_string(k) + " row " + std::to_string(r);
                const backend::RowSample& w = want[static_cast<size_t>(r)];
                const backend::RowSample& g = got[static_cast<size_t>(r)];
                for (int64_t i = 0; i < n; ++i) {  // the edited rows, bit for bit (NaN stays NaN)
                    const float a = cpu_rows[static_cast<size_t>(r * n + i)], b = gpu_rows[static_cast<size_t>(r * n + i)];
                    if (!(a == b || (std::isnan(a) && std::isnan(b)))) {
                        ADD_FAILURE() << where << " edited value " << i << ": " << a << " vs " << b;
                        break;
                    }
                }
                EXPECT_EQ(w.max, g.max) << where;
                if (r == 4) {
                    EXPECT_EQ(g.max, -INFINITY) << where;
                    EXPECT_EQ(g.n_top, 0) << where;
                    continue;
                }
                EXPECT_NEAR(g.sum_t, w.sum_t, 1e-6 * w.sum_t) << where;
                EXPECT_NEAR(g.sum_1, w.sum_1, 1e-6 * w.sum_1) << where;
                ASSERT_EQ(g.n_top, w.n_top) << where;
                for (int32_t j = 0; j < g.n_top; ++j) {
                    EXPECT_EQ(got_top[static_cast<size_t>(r * k + j)].id, want_top[static_cast<size_t>(r * k + j)].id)
                        << where << " top " << j;
                    EXPECT_EQ(got_top[static_cast<size_t>(r * k + j)].logit, want_top[static_cast<size_t>(r * k + j)].logit)
                        << where << " top " << j;
                }
                if (us[r] < 0) {
                    EXPECT_EQ(g.drawn, -1) << where;
                    continue;
                }
                // The drawn token: the reference's, or (a target within rounding of a boundary
                // between two tokens, or of the nucleus boundary) the reference's for a uniform
                // number within 1e-6 of this one.
                if (g.drawn != w.drawn) {
                    bool near = false;
                    for (const double du : {-1e-6, 1e-6}) {
                        std::vector<float> edited(cpu_rows.begin() + r * n, cpu_rows.begin() + (r + 1) * n);
                        backend::RowSampleRequest q = req[static_cast<size_t>(r)];
                        q.edits = {};
                        q.u = std::clamp(us[r] + du, 0.0, 0.9999999);
                        backend::RowSample alt;
                        std::vector<backend::TokenLogit> alt_top(static_cast<size_t>(k));
                        backend::sample_row_host(edited.data(), n, q, k, &alt, alt_top.data());
                        near = near || alt.drawn == g.drawn;
                    }
                    EXPECT_TRUE(near) << where << " drawn " << g.drawn << " vs " << w.drawn;
                }
                EXPECT_EQ(g.drawn_logit, gpu_rows[static_cast<size_t>(r * n + g.drawn)]) << where;
            }
            if (n == 151936 && k == 256) {
                EXPECT_EQ(got[1].n_top, 256);  // 300 tied at 60, a few above: the lowest ids of them fill it
                EXPECT_EQ(got_top[static_cast<size_t>(1 * k + 255)].logit, 60.0f);
                EXPECT_EQ(got[2].n_top, 10);
                EXPECT_EQ(got_top[static_cast<size_t>(3 * k)].logit, std::numeric_limits<float>::max());
            }
        }
    }
}

// ---- element-wise and per-row ops ---------------------------------------------------------

TEST_F(CudaOps, NormsActivationsAndCopiesMatchCpu) {
    for (int64_t dim : {32, 2048}) {
        const int64_t rows = 6;
        Twin x = twin(test::random_floats(static_cast<size_t>(rows * dim), 1)),
             out = twin(std::vector<float>(static_cast<size_t>(rows * dim), 0.0f));
        const auto& nw = upload(random_weight(Type::F32, dim, 1, 1, 2));
        cpu_->rms_norm(x.cpu.data(), &nw.w, rows, dim, 1e-6f, out.cpu.data());
        gpu_->rms_norm(x.gpu.data(), &nw.w, rows, dim, 1e-6f, out.gpu.data());
        EXPECT_LT(nmse(cpu_of(out), gpu_of(out)), 1e-11) << "rms_norm " << dim;
        cpu_->rms_norm(x.cpu.data(), nullptr, rows, dim, 1e-6f, x.cpu.data());
        gpu_->rms_norm(x.gpu.data(), nullptr, rows, dim, 1e-6f, x.gpu.data());
        EXPECT_LT(nmse(cpu_of(x), gpu_of(x)), 1e-11) << "rms_norm in place " << dim;
    }
    const int64_t rows = 5, dim = 96;
    Twin gu = twin(test::random_floats(static_cast<size_t>(rows * 2 * dim), 3)),
         h = twin(std::vector<float>(static_cast<size_t>(rows * dim), 0.0f));
    cpu_->swiglu(gu.cpu.data(), gu.cpu.data() + dim, rows, dim, 2 * dim, h.cpu.data());
    gpu_->swiglu(gu.gpu.data(), gu.gpu.data() + dim, rows, dim, 2 * dim, h.gpu.data());
    EXPECT_LT(nmse(cpu_of(h), gpu_of(h)), 1e-11) << "swiglu";
    cpu_->mul_sigmoid(h.cpu.data(), gu.cpu.data(), rows, dim, 2 * dim);
    gpu_->mul_sigmoid(h.gpu.data(), gu.gpu.data(), rows, dim, 2 * dim);
    EXPECT_LT(nmse(cpu_of(h), gpu_of(h)), 1e-11) << "mul_sigmoid";
    cpu_->mul_sigmoid(h.cpu.data(), gu.cpu.data(), rows, dim, 0);
    gpu_->mul_sigmoid(h.gpu.data(), gu.gpu.data(), rows, dim, 0);
    EXPECT_LT(nmse(cpu_of(h), gpu_of(h)), 1e-11) << "mul_sigmoid per row";
    cpu_->add(h.cpu.data(), gu.cpu.data(), rows * dim);
    gpu_->add(h.gpu.data(), gu.gpu.data(), rows * dim);
    EXPECT_LT(nmse(cpu_of(h), gpu_of(h)), 1e-12) << "add";
    Twin split = twin(std::vector<float>(static_cast<size_t>(rows * dim), 0.0f));
    cpu_->copy_rows(gu.cpu.data() + 3, 2 * dim, split.cpu.data(), dim, rows, dim);
    gpu_->copy_rows(gu.gpu.data() + 3, 2 * dim, split.gpu.data(), dim, rows, dim);
    EXPECT_EQ(cpu_of(split), gpu_of(split)) << "copy_rows";
    EXPECT_NE(cpu_of(split)[0], 0.0f);
}

// The fused residual add + norm: one kernel for rows held in registers (up to 16,384 values,
// a multiple of 4), the separate ops otherwise; both must match the CPU's add then rms_norm.
TEST_F(CudaOps, AddRmsNormMatchesCpu) {
    for (int64_t dim : {32, 2048, 2050, 4100, 16384, 20000}) {
        const int64_t rows = 3;
        const size_t n = static_cast<size_t>(rows * dim);
        Twin y = twin(test::random_floats(n, 21)), x = twin(test::random_floats(n, 22)), out = twin(std::vector<float>(n, 0.0f));
        const auto& nw = upload(random_weight(Type::F32, dim, 1, 1, 23));
        cpu_->add_rms_norm(y.cpu.data(), x.cpu.data(), &nw.w, rows, dim, 1e-6f, out.cpu.data());
        gpu_->add_rms_norm(y.gpu.data(), x.gpu.data(), &nw.w, rows, dim, 1e-6f, out.gpu.data());
        EXPECT_LT(nmse(cpu_of(y), gpu_of(y)), 1e-12) << "sum " << dim;
        EXPECT_LT(nmse(cpu_of(out), gpu_of(out)), 1e-11) << "norm " << dim;
        cpu_->rms_norm(x.cpu.data(), &nw.w, rows, dim, 1e-6f, x.cpu.data());
        gpu_->rms_norm(x.gpu.data(), &nw.w, rows, dim, 1e-6f, x.gpu.data());
        EXPECT_LT(nmse(cpu_of(x), gpu_of(x)), 1e-11) << "rms_norm in place " << dim;
    }
}

// q/k norm + RoPE of both tensors in one kernel (full and partial rotation, as qwen3moe and
// qwen3next use; GQA head counts) and the fallback for heads the kernel does not take, against
// the CPU's rms_norm then rope.
TEST_F(CudaOps, QkNormRopeMatchesCpu) {
    const int64_t n_tokens = 3, n_head = 6, n_head_kv = 2;
    const std::vector<int32_t> pos = {3, 4095, 150000};
    const std::pair<int64_t, int64_t> shapes[] = {{64, 64},   {128, 128}, {256, 64}, {256, 256},
                                                  {512, 128}, {128, 32},  {96, 96},  {128, 16}};
    for (const auto& [head_dim, n_rot] : shapes) {
        const auto& qw = upload(random_weight(Type::F32, head_dim, 1, 1, 31));
        const auto& kw = upload(random_weight(Type::F32, head_dim, 1, 1, 33));
        Twin q = twin(test::random_floats(static_cast<size_t>(n_tokens * n_head * head_dim), 32));
        Twin k = twin(test::random_floats(static_cast<size_t>(n_tokens * n_head_kv * head_dim), 34));
        QkNormRopeArgs a;
        a.q_norm = &qw.w;
        a.n_head = n_head;
        a.k_norm = &kw.w;
        a.n_head_kv = n_head_kv;
        a.n_tokens = n_tokens;
        a.head_dim = head_dim;
        a.eps = 1e-6f;
        a.pos = pos.data();
        a.rope.n_rot = n_rot;
        a.rope.theta = 1e7f;
        a.q = q.cpu.data();
        a.k = k.cpu.data();
        cpu_->qk_norm_rope(a);
        a.q = q.gpu.data();
        a.k = k.gpu.data();
        gpu_->qk_norm_rope(a);
        EXPECT_LT(nmse(cpu_of(q), gpu_of(q)), 1e-10) << "q: head_dim " << head_dim << " n_rot " << n_rot;
        EXPECT_LT(nmse(cpu_of(k), gpu_of(k)), 1e-10) << "k: head_dim " << head_dim << " n_rot " << n_rot;

        // With the cache store (in the same kernel on the GPU): the tokens' rows of a paged
        // pool, blocks of 4 positions in shuffled order, hold k after norm and rope, and v.
        const std::vector<int32_t> store_pos = {3, 40, 95};
        a.pos = store_pos.data();
        const int64_t row = n_head_kv * head_dim, block = 4, n_blocks = 96 / block;
        std::vector<int32_t> table(static_cast<size_t>(n_blocks));
        std::iota(table.begin(), table.end(), 0);
        std::shuffle(table.begin(), table.end(), std::mt19937(7));
        const size_t pool = static_cast<size_t>(n_blocks * block * row);
        Twin kp = twin(std::vector<float>(pool, 0.0f)), vp = twin(std::vector<float>(pool, 0.0f));
        Twin v = twin(test::random_floats(static_cast<size_t>(n_tokens * row), 35));
        Twin k2 = twin(test::random_floats(static_cast<size_t>(n_tokens * row), 36));
        KvCacheView cc{kp.cpu.data(), vp.cpu.data(), table.data(), n_blocks, block};
        KvCacheView cg{kp.gpu.data(), vp.gpu.data(), table.data(), n_blocks, block};
        const std::vector<const KvCacheView*> kc(static_cast<size_t>(n_tokens), &cc), kg(static_cast<size_t>(n_tokens), &cg);
        a.v_row = row;
        a.q = q.cpu.data();
        a.k = k2.cpu.data();
        a.kv = kc.data();
        a.v = v.cpu.data();
        cpu_->qk_norm_rope(a);
        a.q = q.gpu.data();
        a.k = k2.gpu.data();
        a.kv = kg.data();
        a.v = v.gpu.data();
        gpu_->qk_norm_rope(a);
        a.kv = nullptr;
        a.pos = pos.data();
        const auto kc_out = cpu_of(kp), kg_out = gpu_of(kp);
        EXPECT_LT(nmse(kc_out, kg_out), 1e-10) << "k cache: head_dim " << head_dim << " n_rot " << n_rot;
        EXPECT_EQ(cpu_of(vp), gpu_of(vp)) << "v cache: head_dim " << head_dim;
        EXPECT_GT(std::count_if(kg_out.begin(), kg_out.end(), [](float f) { return f != 0.0f; }), n_tokens * row / 2);

        // Into f16 pools: the GPU's own f32 rows rounded to nearest (v exactly, k within one f16
        // step of the CPU's).
        const size_t half_pool = static_cast<size_t>(kv_pool_floats(static_cast<int64_t>(pool), KvType::F16));
        Twin kh = twin(std::vector<float>(half_pool, 0.0f)), vh = twin(std::vector<float>(half_pool, 0.0f));
        KvCacheView ch{kh.gpu.data(), vh.gpu.data(), table.data(), n_blocks, block, KvType::F16};
        const std::vector<const KvCacheView*> khs(static_cast<size_t>(n_tokens), &ch);
        Twin k3 = twin(test::random_floats(static_cast<size_t>(n_tokens * row), 36));
        a.pos = store_pos.data();
        a.q = q.gpu.data();
        a.k = k3.gpu.data();
        a.kv = khs.data();
        a.v = v.gpu.data();
        gpu_->qk_norm_rope(a);
        a.kv = nullptr;
        a.pos = pos.data();
        const auto halves = [&](const Twin& t) {
            const auto f = gpu_of(t);
            std::vector<uint16_t> h(pool);
            std::memcpy(h.data(), f.data(), pool * sizeof(uint16_t));
            return h;
        };
        const auto kh_out = halves(kh), vh_out = halves(vh);
        const auto vp_out = cpu_of(vp);
        size_t v_exact = 0, k_close = 0;
        for (size_t i = 0; i < pool; ++i) {
            v_exact += vh_out[i] == f32_to_f16(vp_out[i]);
            k_close += std::fabs(f16_to_f32(kh_out[i]) - kc_out[i]) <= 1e-3f * std::fabs(kc_out[i]) + 1e-6f;
        }
        EXPECT_EQ(v_exact, pool) << "f16 v cache: head_dim " << head_dim;
        EXPECT_EQ(k_close, pool) << "f16 k cache: head_dim " << head_dim << " n_rot " << n_rot;
    }
}

TEST_F(CudaOps, RopeMatchesCpuAtLargePositions) {
    const int64_t n_tokens = 4, n_heads = 3, head_dim = 64;
    const std::vector<int32_t> pos = {0, 17, 4095, 200000};
    for (int64_t n_rot : {64, 16}) {
        for (bool bf16 : {false, true}) {
            RopeParams p;
            p.n_rot = n_rot;
            p.theta = 1e6f;
            p.freqs_bf16 = bf16;
            Twin x = twin(test::random_floats(static_cast<size_t>(n_tokens * n_heads * head_dim), 9));
            cpu_->rope(x.cpu.data(), n_tokens, n_heads, head_dim, pos.data(), p);
            gpu_->rope(x.gpu.data(), n_tokens, n_heads, head_dim, pos.data(), p);
            EXPECT_LT(nmse(cpu_of(x), gpu_of(x)), 1e-10) << "n_rot " << n_rot << " bf16 " << bf16;
        }
    }
}

// Every routing kernel (registers up to 512 experts and top-32, a warp with shared memory up to
// 1,024, a block beyond), with tied logits: the same ids as the CPU, ties to the lower id.
TEST_F(CudaOps, RoutingPicksTheSameExperts) {
    const int64_t n = 33;
    for (auto [n_expert, k] : {std::pair<int64_t, int64_t>{128, 8}, {60, 4}, {512, 10}, {1000, 8}, {300, 40}, {2000, 8}}) {
        std::vector<float> l = test::random_floats(static_cast<size_t>(n * n_expert), 4, 2.0f);
        for (int64_t t = 0; t < n; t += 2) {  // ties: a few experts share the token's largest logit
            float* row = l.data() + t * n_expert;
            const float top = *std::max_element(row, row + n_expert);
            row[n_expert - 1] = row[n_expert / 2] = row[3] = top;
        }
        Twin logits = twin(l);
        for (bool renorm : {true, false}) {
            Twin ids = twin(std::vector<float>(static_cast<size_t>(n * k), 0.0f)),
                 w = twin(std::vector<float>(static_cast<size_t>(n * k), 0.0f));
            cpu_->route_softmax_topk(logits.cpu.data(), n, n_expert, k, renorm, reinterpret_cast<int32_t*>(ids.cpu.data()),
                                     w.cpu.data());
            gpu_->route_softmax_topk(logits.gpu.data(), n, n_expert, k, renorm, reinterpret_cast<int32_t*>(ids.gpu.data()),
                                     w.gpu.data());
            const auto ic = cpu_of(ids), ig = gpu_of(ids);
            EXPECT_EQ(0, std::memcmp(ic.data(), ig.data(), ic.size() * 4))
                << n_expert << " experts, top " << k << ", renorm " << renorm;
            // f32 softmax sums of up to 2,000 terms in another order: ~1e-6 relative.
            EXPECT_LT(nmse(cpu_of(w), gpu_of(w)), 1e-10) << n_expert << " experts, top " << k;
        }
    }
}

// ---- attention over paged KV ----------------------------------------------------------------

TEST_F(CudaOps, PagedAttentionMatchesCpu) {
    struct Case {
        int64_t n_head, n_head_kv, dim, ctx, block_size;
    };
    // The decode kernel walks a split a position a warp at a time, or 8 (4 lanes each) when its
    // splits are long (by default from 48 positions: which cases take which depends on the SM
    // count). Two more backends force each form for every case.
    std::vector<std::unique_ptr<Backend>> forms;
    const char* user_value = std::getenv("STRATA_CUDA_ATTN_OCTET_MIN");
    const std::string kept = user_value != nullptr ? user_value : "";
    for (const char* octet_min : {"0", "1000000000"}) {
        setenv("STRATA_CUDA_ATTN_OCTET_MIN", octet_min, 1);
        devices::BackendOptions o;
        o.device = "cuda";
        forms.push_back(devices::make_backend(o));
    }
    if (user_value != nullptr) setenv("STRATA_CUDA_ATTN_OCTET_MIN", kept.c_str(), 1);
    else unsetenv("STRATA_CUDA_ATTN_OCTET_MIN");
    // GQA 7 (28/4) leaves a padding row in each tensor-core tile of 9 tokens.
    // 32/2 at 256: the largest merge area (16 heads of 256 values per warp), over 99 KB of shared
    // memory with 8 warps: GPUs with less per block take 4.
    // 6/2 at 36: 3 query heads a group (compiled for 4), a head dim that is not a multiple of 8
    // (the key row's last step read value by value) and, in f16 pools, heads at 8-byte offsets
    // (no 16-byte loads).
    for (const Case c :
         {Case{4, 2, 32, 9, 4}, Case{32, 4, 128, 1500, 16}, Case{16, 2, 256, 700, 32}, Case{8, 8, 64, 300, 16},
          Case{16, 1, 64, 200, 8}, Case{28, 4, 128, 300, 16}, Case{32, 2, 256, 300, 16}, Case{6, 2, 36, 100, 16}}) {
        const int64_t k_row = c.n_head_kv * c.dim;
        const int64_t n_blocks = (c.ctx + c.block_size - 1) / c.block_size;
        // Two sequences share one pool with interleaved, shuffled blocks.
        std::vector<int32_t> order(static_cast<size_t>(2 * n_blocks));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), std::mt19937(3));
        std::vector<int32_t> t0(order.begin(), order.begin() + n_blocks), t1(order.begin() + n_blocks, order.end());
        const size_t pool = static_cast<size_t>(2 * n_blocks * c.block_size * k_row);
        Twin kp = twin(std::vector<float>(pool, 0.0f)), vp = twin(std::vector<float>(pool, 0.0f));
        KvCacheView vc0{kp.cpu.data(), vp.cpu.data(), t0.data(), n_blocks, c.block_size},
            vc1{kp.cpu.data(), vp.cpu.data(), t1.data(), n_blocks, c.block_size};
        KvCacheView vg0{kp.gpu.data(), vp.gpu.data(), t0.data(), n_blocks, c.block_size},
            vg1{kp.gpu.data(), vp.gpu.data(), t1.data(), n_blocks, c.block_size};
        // The same caches as f16 pools on the GPU (KvType::F16, what quantised models get).
        const size_t half_pool = static_cast<size_t>(kv_pool_floats(static_cast<int64_t>(pool), KvType::F16));
        Twin kh = twin(std::vector<float>(half_pool, 0.0f)), vh = twin(std::vector<float>(half_pool, 0.0f));
        KvCacheView vh0{kh.gpu.data(), vh.gpu.data(), t0.data(), n_blocks, c.block_size, KvType::F16};
        KvCacheView vh1{kh.gpu.data(), vh.gpu.data(), t1.data(), n_blocks, c.block_size, KvType::F16};
        // Fill both caches through kv_store: positions 0..ctx-1 of each sequence.
        std::vector<int32_t> pos(static_cast<size_t>(c.ctx));
        std::iota(pos.begin(), pos.end(), 0);
        for (int s = 0; s < 2; ++s) {
            Twin k = twin(test::random_floats(static_cast<size_t>(c.ctx * k_row), 20 + s)),
                 v = twin(test::random_floats(static_cast<size_t>(c.ctx * k_row), 30 + s));
            std::vector<const KvCacheView*> vc(static_cast<size_t>(c.ctx), s == 0 ? &vc0 : &vc1),
                vg(static_cast<size_t>(c.ctx), s == 0 ? &vg0 : &vg1);
            cpu_->kv_store(vc.data(), pos.data(), c.ctx, k.cpu.data(), k_row, v.cpu.data(), k_row);
            gpu_->kv_store(vg.data(), pos.data(), c.ctx, k.gpu.data(), k_row, v.gpu.data(), k_row);
            std::vector<const KvCacheView*> vhs(static_cast<size_t>(c.ctx), s == 0 ? &vh0 : &vh1);
            gpu_->kv_store(vhs.data(), pos.data(), c.ctx, k.gpu.data(), k_row, v.gpu.data(), k_row);
        }
        EXPECT_EQ(cpu_of(kp), gpu_of(kp));
        // The f16 pools hold the f32 values rounded to nearest.
        for (auto [f32_pool, f16_pool] : {std::pair<Twin*, Twin*>{&kp, &kh}, {&vp, &vh}}) {
            const auto want = cpu_of(*f32_pool), got_floats = gpu_of(*f16_pool);
            std::vector<uint16_t> got(pool);
            std::memcpy(got.data(), got_floats.data(), pool * sizeof(uint16_t));
            size_t exact = 0;
            for (size_t i = 0; i < pool; ++i) exact += got[i] == f32_to_f16(want[i]);
            EXPECT_EQ(exact, pool) << "f16 pool, heads " << c.n_head << "/" << c.n_head_kv << " dim " << c.dim;
        }
        // Decode-sized batch: a token of sequence 1 at the last position, then a run of
        // sequence 0. Prefill-sized batch: a run of sequence 1 ending at the last position, all
        // of sequence 0's first positions, then one more sequence-1 token. Long: every position
        // of sequence 0 (causal over the whole cache), then three of sequence 1.
        for (const int mode : {0, 1, 2}) {
            const bool prefill = mode > 0;
            std::vector<int32_t> qpos;
            std::vector<const KvCacheView*> qc, qg, qh;
            auto add = [&](int64_t p, int seq) {
                qpos.push_back(static_cast<int32_t>(p));
                qc.push_back(seq == 0 ? &vc0 : &vc1);
                qg.push_back(seq == 0 ? &vg0 : &vg1);
                qh.push_back(seq == 0 ? &vh0 : &vh1);
            };
            if (!prefill) {
                const int64_t n0 = std::min<int64_t>(c.ctx, 7);
                add(c.ctx - 1, 1);
                for (int64_t t = 0; t < n0; ++t) add(c.ctx - n0 + t, 0);
            } else if (mode == 1) {
                const int64_t n1 = std::min<int64_t>(c.ctx, 21), n0 = std::min<int64_t>(c.ctx, 30);
                for (int64_t t = 0; t < n1; ++t) add(c.ctx - n1 + t, 1);
                for (int64_t t = 0; t < n0; ++t) add(t, 0);
                add(c.ctx / 2, 1);
            } else {
                for (int64_t t = 0; t < c.ctx; ++t) add(t, 0);
                for (int64_t t = 0; t < std::min<int64_t>(c.ctx, 3); ++t) add(c.ctx - 3 + t, 1);
            }
            const auto n = static_cast<int64_t>(qpos.size());
            Twin q = twin(test::random_floats(static_cast<size_t>(n * c.n_head * c.dim), 40)),
                 out = twin(std::vector<float>(static_cast<size_t>(n * c.n_head * c.dim), 0.0f));
            AttentionArgs a;
            a.n_tokens = n;
            a.n_head = c.n_head;
            a.n_head_kv = c.n_head_kv;
            a.head_dim_k = a.head_dim_v = c.dim;
            a.scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
            a.pos = qpos.data();
            a.q = q.cpu.data();
            a.out = out.cpu.data();
            a.kv = qc.data();
            cpu_->attention(a);
            a.q = q.gpu.data();
            a.out = out.gpu.data();
            a.kv = qg.data();
            for (const bool f16_ok : {false, true}) {
                a.f16_ok = f16_ok;
                gpu_->attention(a);
                // With f16 allowed, batches of 16+ tokens in runs of one sequence with head dims
                // 64/128/256 take the tensor-core kernel: q, k, v and the probabilities rounded
                // to f16 (~5e-4 relative each), f32 sums. Everything else runs in f32.
                const bool tiled = f16_ok && prefill && n >= 16 && (c.dim == 64 || c.dim == 128 || c.dim == 256);
                const double err = nmse(cpu_of(out), gpu_of(out));
                EXPECT_LT(err, tiled ? 1e-6 : 1e-10) << "heads " << c.n_head << "/" << c.n_head_kv << " dim " << c.dim << " ctx "
                                                     << c.ctx << " mode " << mode << (tiled ? " (tensor cores)" : "");
                // f16 rounding leaves a trace: the tensor-core kernel did run.
                if (tiled) {
                    EXPECT_GT(err, 1e-10) << "heads " << c.n_head << "/" << c.n_head_kv << " dim " << c.dim << " mode " << mode;
                }
                std::printf("attention heads %lld/%lld dim %lld ctx %lld mode %d%s: NMSE %.3g\n",
                            static_cast<long long>(c.n_head), static_cast<long long>(c.n_head_kv), static_cast<long long>(c.dim),
                            static_cast<long long>(c.ctx), mode, tiled ? " (tensor cores)" : (f16_ok ? " (f16 allowed)" : ""),
                            err);
                // The second run must write every output again.
                const std::vector<float> stale(out.n, 1e3f);
                gpu_->copy_from_host(stale.data(), out.gpu.data(), out.n);
            }
            // Each walk forced, from the f32 and the f16 caches (the pools and inputs are gpu_'s:
            // its copies are done once gpu_of returns, and each backend reads back its own work).
            (void)gpu_of(q);
            for (size_t f = 0; f < forms.size(); ++f) {
                for (const bool half : {false, true}) {
                    AttentionArgs h = a;
                    h.kv = half ? qh.data() : qg.data();
                    h.f16_ok = false;
                    forms[f]->attention(h);
                    std::vector<float> got(out.n);
                    forms[f]->copy_to_host(out.gpu.data(), got.data(), out.n);
                    EXPECT_LT(nmse(cpu_of(out), got), half ? 1e-6 : 1e-10)
                        << (f == 0 ? "8 positions a warp" : "a position a warp") << (half ? ", f16 cache" : "") << ": heads "
                        << c.n_head << "/" << c.n_head_kv << " dim " << c.dim << " ctx " << c.ctx << " mode " << mode;
                    const std::vector<float> stale(out.n, 1e3f);
                    forms[f]->copy_from_host(stale.data(), out.gpu.data(), out.n);
                }
            }
            // From the f16 caches: k and v rounded (~2.4e-4 relative at most), the rest as above.
            for (const bool f16_ok : {false, true}) {
                AttentionArgs h = a;
                h.kv = qh.data();
                h.f16_ok = f16_ok;
                gpu_->attention(h);
                const double err = nmse(cpu_of(out), gpu_of(out));
                EXPECT_LT(err, 1e-6) << "f16 cache: heads " << c.n_head << "/" << c.n_head_kv << " dim " << c.dim << " ctx "
                                     << c.ctx << " mode " << mode;
                EXPECT_GT(err, 1e-12) << "f16 cache: heads " << c.n_head << "/" << c.n_head_kv << " dim " << c.dim << " mode "
                                      << mode;
                std::printf("attention heads %lld/%lld dim %lld ctx %lld mode %d, f16 cache%s: NMSE %.3g\n",
                            static_cast<long long>(c.n_head), static_cast<long long>(c.n_head_kv), static_cast<long long>(c.dim),
                            static_cast<long long>(c.ctx), mode, f16_ok ? ", f16 allowed" : "", err);
                const std::vector<float> stale(out.n, 1e3f);
                gpu_->copy_from_host(stale.data(), out.gpu.data(), out.n);
            }
            if (mode == 0 && c.n_head * c.dim % 32 == 0) {
                // One token (decode): the attention kernels also write its output rounded to 8
                // bits, which the output projection that reads the row then uses.
                AttentionArgs one = a;
                one.n_tokens = 1;
                one.f16_ok = false;
                gpu_->attention(one);
                const int64_t od = c.n_head * c.dim, rows = 64;
                const auto& w = upload(random_weight(Type::Q8_0, od, rows, 1, 70));
                const auto deq = dequantized(w);
                const auto x = cpu_of(out);
                std::vector<float> ref(static_cast<size_t>(rows));
                for (int64_t r = 0; r < rows; ++r) {
                    double s = 0;
                    for (int64_t i = 0; i < od; ++i)
                        s += static_cast<double>(deq[static_cast<size_t>(r * od + i)]) * x[static_cast<size_t>(i)];
                    ref[static_cast<size_t>(r)] = static_cast<float>(s);
                }
                Twin prod = twin(std::vector<float>(static_cast<size_t>(rows), 0.0f));
                const MatmulArgs pg[] = {{&w.w, out.gpu.data(), 1, prod.gpu.data()}};
                gpu_->matmul(pg);
                const double e = nmse(ref, gpu_of(prod));
                EXPECT_LT(e, product_bound(Type::Q8_0, true)) << "product of one token's attention, ctx " << c.ctx;
                EXPECT_GT(e, 1e-9) << "product of one token's attention, ctx " << c.ctx;
            }
        }
    }
}

// ---- Gated DeltaNet -------------------------------------------------------------------------

TEST_F(CudaOps, GatedDeltaNetPiecesMatchCpu) {
    const int64_t n = 70, channels = 96, kernel = 4;
    const auto& conv_w = upload(random_weight(Type::F32, kernel, channels, 1, 8));
    Twin x = twin(test::random_floats(static_cast<size_t>(n * channels), 1)),
         st = twin(test::random_floats(static_cast<size_t>((kernel - 1) * channels), 2));
    Twin out = twin(std::vector<float>(static_cast<size_t>(n * channels), 0.0f));
    for (int64_t run : {n, int64_t{1}}) {  // a prefill run, then a decode step on the carried state
        cpu_->ssm_conv_silu(x.cpu.data(), run, channels, conv_w.w, kernel, st.cpu.data(), out.cpu.data());
        gpu_->ssm_conv_silu(x.gpu.data(), run, channels, conv_w.w, kernel, st.gpu.data(), out.gpu.data());
        EXPECT_LT(nmse(cpu_of(out), gpu_of(out)), 1e-11) << "conv out, run " << run;
        EXPECT_LT(nmse(cpu_of(st), gpu_of(st)), 1e-12) << "conv state, run " << run;
    }
    cpu_->l2_norm(out.cpu.data(), n, 3, 16, channels, 1e-6f);
    gpu_->l2_norm(out.gpu.data(), n, 3, 16, channels, 1e-6f);
    EXPECT_LT(nmse(cpu_of(out), gpu_of(out)), 1e-11) << "l2_norm";

    const int64_t n_v = 8, n_k = 4;
    const auto& a_w = upload(random_weight(Type::F32, n_v, 1, 1, 9));
    const auto& dt = upload(random_weight(Type::F32, n_v, 1, 1, 10));
    Twin ba = twin(test::random_floats(static_cast<size_t>(n * 2 * n_v), 11));
    Twin g = twin(std::vector<float>(static_cast<size_t>(n * n_v), 0.0f)),
         beta = twin(std::vector<float>(static_cast<size_t>(n * n_v), 0.0f));
    for (bool combined : {true, false}) {
        GdnGateArgs ga;
        ga.a = &a_w.w;
        ga.dt_bias = &dt.w;
        ga.n_tokens = n;
        ga.n_heads = n_v;
        const int64_t r = n_v / n_k;
        ga.row_stride = combined ? 2 * n_v : n_v;
        ga.group = combined ? r : n_v;
        ga.group_stride = combined ? 2 * r : 0;
        ga.b = ba.cpu.data();
        ga.alpha = ba.cpu.data() + (combined ? r : n * n_v);
        ga.g = g.cpu.data();
        ga.beta = beta.cpu.data();
        cpu_->gdn_gates(ga);
        ga.b = ba.gpu.data();
        ga.alpha = ba.gpu.data() + (combined ? r : n * n_v);
        ga.g = g.gpu.data();
        ga.beta = beta.gpu.data();
        gpu_->gdn_gates(ga);
        EXPECT_LT(nmse(cpu_of(g), gpu_of(g)), 1e-11) << "gates g, combined " << combined;
        EXPECT_LT(nmse(cpu_of(beta), gpu_of(beta)), 1e-11) << "gates beta, combined " << combined;
    }
}

// With chunks asked for, runs of 129, 150 and 300 tokens take the GPU's chunked form (128 or
// more tokens: whole chunks and a partial last one), runs of 20 and 64 the token-by-token one,
// as do all runs without chunks; q, k, v either dense or interleaved in one row per token as the
// model's conv output lays them out.
TEST_F(CudaOps, DeltaRuleMatchesCpuChunkedAndRecurrent) {
    struct Shape {
        int64_t d_k, d_v;
    };
    for (const Shape shape : {Shape{16, 16}, Shape{128, 128}, Shape{64, 128}}) {
        for (int64_t n : {int64_t{20}, int64_t{64}, int64_t{129}, int64_t{150}, int64_t{300}}) {
            const int64_t n_v = 4, n_k = 2, dk = shape.d_k, dv = shape.d_v;
            const int64_t row = 2 * n_k * dk + n_v * dv;  // one token's q | k | v, interleaved layout
            std::vector<float> rows = test::random_floats(static_cast<size_t>(n * row), static_cast<uint32_t>(n + dk));
            for (int64_t t = 0; t < n; ++t)  // unit q and k rows, as after the model's L2 norm
                for (int64_t r = 0; r < 2 * n_k; ++r) {
                    float* x = rows.data() + t * row + r * dk;
                    double ss = 0;
                    for (int64_t i = 0; i < dk; ++i) ss += x[i] * x[i];
                    for (int64_t i = 0; i < dk; ++i) x[i] /= static_cast<float>(std::sqrt(ss));
                }
            std::vector<float> dense_q, dense_k, dense_v;
            for (int64_t t = 0; t < n; ++t) {
                const float* x = rows.data() + t * row;
                dense_q.insert(dense_q.end(), x, x + n_k * dk);
                dense_k.insert(dense_k.end(), x + n_k * dk, x + 2 * n_k * dk);
                dense_v.insert(dense_v.end(), x + 2 * n_k * dk, x + row);
            }
            Twin interleaved = twin(rows), q = twin(dense_q), k = twin(dense_k), v = twin(dense_v);
            std::vector<float> gv(static_cast<size_t>(n * n_v)), bv(static_cast<size_t>(n * n_v));
            std::mt19937 rng(static_cast<uint32_t>(n));
            for (auto& x : gv) x = -0.5f * static_cast<float>(rng() % 1000) / 1000.0f;
            for (auto& x : bv) x = 0.05f + 0.9f * static_cast<float>(rng() % 1000) / 1000.0f;
            Twin g = twin(gv), beta = twin(bv), state = twin(test::random_floats(static_cast<size_t>(n_v * dk * dv), 5, 0.1f));
            Twin out = twin(test::random_floats(static_cast<size_t>(n * n_v * dv), 6));
            for (int64_t chunk : {int64_t{64}, int64_t{0}}) {
                for (auto map : {KeyHeadMap::Grouped, KeyHeadMap::Tiled}) {
                    for (bool dense : {true, false}) {
                        DeltaRuleArgs a;
                        a.n_tokens = n;
                        a.n_v_heads = n_v;
                        a.n_k_heads = n_k;
                        a.d_k = dk;
                        a.d_v = dv;
                        a.key_heads = map;
                        a.scale = 1.0f / std::sqrt(static_cast<float>(dk));
                        a.chunk_size = chunk;
                        if (!dense) a.q_stride = a.k_stride = a.v_stride = row;
                        const auto bind = [&](bool gpu) {
                            const auto at = [&](const Twin& t) { return gpu ? t.gpu.data() : t.cpu.data(); };
                            a.q = dense ? at(q) : at(interleaved);
                            a.k = dense ? at(k) : at(interleaved) + n_k * dk;
                            a.v = dense ? at(v) : at(interleaved) + 2 * n_k * dk;
                            a.g = at(g), a.beta = at(beta), a.state = at(state), a.out = at(out);
                        };
                        bind(false);
                        cpu_->delta_rule(a);
                        bind(true);
                        gpu_->delta_rule(a);
                        const std::string what = "d_k " + std::to_string(dk) + " d_v " + std::to_string(dv) + " n " +
                                                 std::to_string(n) + " chunk " + std::to_string(chunk) +
                                                 (dense ? " dense" : " rows");
                        EXPECT_LT(nmse(cpu_of(out), gpu_of(out)), 1e-8) << what;
                        EXPECT_LT(nmse(cpu_of(state), gpu_of(state)), 1e-8) << what;
                    }
                }
            }
        }
    }
}

TEST_F(CudaOps, BadInputIsRefusedWithAClearError) {
    const auto h = random_weight(Type::Q4_K, 256, 4, 1, 1);
    // Not uploaded: the product names the problem instead of reading host memory on the device.
    Twin x = twin(test::random_floats(256, 1)), y = twin(std::vector<float>(4, 0.0f));
    const MatmulArgs p[] = {{&h.w, x.gpu.data(), 1, y.gpu.data()}};
    EXPECT_THROW(gpu_->matmul(p), Error);
    auto odd = random_weight(Type::IQ1_S, 256, 4, 1, 1);
    EXPECT_THROW(gpu_->upload_weights({&odd.w, 1}, {}), Error);
    devices::BackendOptions o;
    o.device = "cuda:99";
    EXPECT_THROW(devices::make_backend(o), Error);
    o.device = "tpu";
    EXPECT_THROW(devices::make_backend(o), Error);
}

}  // namespace
}  // namespace strata::backend
