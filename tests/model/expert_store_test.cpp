// The expert store on the CPU backend (the paths CI runs; the VRAM tier is tests/cuda): whole
// forwards with the store equal the all-resident forward bit for bit (the host executor runs the
// same kernels in the same order) on every architecture, also when the RAM budget is below the
// experts' size (the file tier); the file tier keeps the experts' resident pages within the
// budget; the statistics file round-trips and refuses another model's; bad budgets are refused
// naming the flag. And cpu::MoePairs against a plain reference on random data.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <numeric>
#include <random>
#include <string>

#include "backend/cpu_backend.h"
#include "cpu/moe_pairs.h"
#include "model/model.h"
#include "model_tools/make_model.h"
#include "quant/dequant.h"
#include "quant/quantize.h"
#include "test_util.h"
#include "util/error.h"

namespace strata::model {
namespace {

std::filesystem::path make(const test::TempDir& dir, const std::string& arch, int64_t embd, int64_t ff, int64_t experts,
                           const std::string& name = "m.gguf") {
    model_tools::MakeModelOptions o;
    o.arch = arch;
    o.type = "q8_0";
    o.layers = 4;
    o.embd = embd;
    o.ff_exp = ff;
    if (arch != "qwen3moe") o.ff_shexp = ff;
    o.experts = experts;
    o.experts_used = 4;
    o.init = "quantize";
    const auto path = dir / name;
    model_tools::make_model(o, path);
    return path;
}

// A 24-token prompt in one batch, then 8 greedy decode steps: every logits row, in order.
std::vector<float> run(Model& m) {
    const int64_t n_vocab = m.config().n_vocab;
    auto seq = m.new_sequence(64);
    SequenceState* s = seq.get();
    Batch b;
    for (int i = 0; i < 24; ++i) b.add((i * 7919 + 11) % static_cast<int>(n_vocab), i, 0, true);
    std::vector<float> all, logits(static_cast<size_t>(24 * n_vocab));
    m.forward(b, {&s, 1}, logits.data());
    all = logits;
    int32_t next = static_cast<int32_t>(std::max_element(logits.end() - n_vocab, logits.end()) - (logits.end() - n_vocab));
    for (int i = 0; i < 8; ++i) {
        b.clear();
        b.add(next, 24 + i, 0, true);
        m.forward(b, {&s, 1}, logits.data());
        all.insert(all.end(), logits.begin(), logits.begin() + n_vocab);
        next = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + n_vocab) - logits.begin());
    }
    return all;
}

uint64_t expert_bytes(const Model& m) {
    uint64_t n = 0;
    for (const auto& t : m.file().tensors())
        if (t.name.find("_exps.") != std::string::npos) n += t.n_bytes;
    return n;
}

class StoreCpu : public testing::TestWithParam<std::string> {};

TEST_P(StoreCpu, ForwardsEqualAllResident) {
    test::TempDir dir;
    const auto path = make(dir, GetParam(), 256, 128, 16);
    backend::CpuBackend cpu(2);
    LoadOptions off;
    off.expert_store = LoadOptions::ExpertStoreMode::Off;
    auto m0 = Model::load(path, cpu, off);
    EXPECT_EQ(m0->expert_store(), nullptr);
    const std::vector<float> ref = run(*m0);

    LoadOptions on;
    on.expert_store = LoadOptions::ExpertStoreMode::On;
    auto m1 = Model::load(path, cpu, on);
    ASSERT_NE(m1->expert_store(), nullptr);
    EXPECT_EQ(run(*m1), ref);
    const experts::StoreStats st = m1->expert_store()->stats();
    // Every pair ran on the host (no VRAM tier here): 4 layers x (24 + 8) tokens x 4 experts.
    EXPECT_EQ(st.pairs_vram, 0u);
    EXPECT_EQ(st.pairs_host, 4u * 32u * 4u);
    EXPECT_EQ(st.slots_per_layer, 0);

    // A RAM budget of a third of the experts: the file tier, same results.
    LoadOptions file;
    file.store.ram_budget = expert_bytes(*m0) / 3;
    auto m2 = Model::load(path, cpu, file);  // Auto: the budget below the experts asks for a store
    ASSERT_NE(m2->expert_store(), nullptr);
    EXPECT_EQ(run(*m2), ref);
    EXPECT_GT(m2->expert_store()->stats().file_reads, 0u);
}

INSTANTIATE_TEST_SUITE_P(Archs, StoreCpu, testing::Values("qwen3moe", "qwen3next", "qwen35moe"));

// Bytes of [p, p + n) whose pages are resident (mincore).
uint64_t resident_bytes(const uint8_t* p, size_t n) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = reinterpret_cast<uintptr_t>(p) / page * page;
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page * page;
    std::vector<unsigned char> v((hi - lo) / page);
    if (mincore(reinterpret_cast<void*>(lo), hi - lo, v.data()) != 0) return ~uint64_t{0};
    uint64_t r = 0;
    for (unsigned char c : v) r += (c & 1) != 0 ? page : 0;
    return r;
}

uint64_t resident_expert_bytes(const Model& m) {
    uint64_t r = 0;
    for (const auto& t : m.file().tensors())
        if (t.name.find("_exps.") != std::string::npos) r += resident_bytes(t.data, t.n_bytes);
    return r;
}

TEST(StoreCpuFileTier, ResidentExpertsStayWithinTheBudget) {
    test::TempDir dir;
    const auto path = make(dir, "qwen3moe", 512, 512, 32);  // ~0.8 MB an expert, 107 MB of experts
    {
        // Written back now: the kernel drops only clean pages (a model on disk has none other).
        const int fd = ::open(path.c_str(), O_RDONLY);
        ASSERT_GE(fd, 0);
        ::fsync(fd);
        ::close(fd);
    }
    backend::CpuBackend cpu(2);
    LoadOptions o;
    o.expert_store = LoadOptions::ExpertStoreMode::On;
    auto probe = Model::load(path, cpu, o);
    const uint64_t all = expert_bytes(*probe);
    probe.reset();
    o.store.ram_budget = all / 4;
    auto m = Model::load(path, cpu, o);
    // The store handed every expert page back at start; where the file system keeps them anyway
    // (a tmpfs /tmp), residency cannot be bounded and the check below would say nothing.
    if (resident_expert_bytes(*m) > all / 2)
        GTEST_SKIP() << "this file system keeps the pages the store hands back (" << resident_expert_bytes(*m) << " of " << all
                     << " bytes resident): residency is not measurable here";
    (void)run(*m);
    const uint64_t resident = resident_expert_bytes(*m);
    // The budget, plus for each expert it holds (and one more per layer) the pages its three
    // slices share with their neighbours at each end, which mincore counts whole.
    const uint64_t per_expert = all / (4 * 32);
    const uint64_t slack = (o.store.ram_budget / per_expert + 4) * 3 * 2 * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    EXPECT_LE(resident, o.store.ram_budget + slack) << "resident " << resident << " of " << all;
    EXPECT_GT(m->expert_store()->stats().file_reads, 0u);
}

TEST(StoreCpuStats, FileRoundTripsAndRefusesAnotherModel) {
    test::TempDir dir;
    const auto path = make(dir, "qwen3moe", 256, 128, 16);
    const auto other = make(dir, "qwen35moe", 256, 128, 16, "other.gguf");
    const auto stats = dir / "experts.stats";
    backend::CpuBackend cpu(2);
    LoadOptions o;
    o.store.stats_file = stats;  // Auto: a statistics file asks for a store
    {
        auto m = Model::load(path, cpu, o);
        ASSERT_NE(m->expert_store(), nullptr);
        (void)run(*m);
    }  // written here
    ASSERT_TRUE(std::filesystem::exists(stats));
    std::ifstream f(stats);
    std::string magic, line;
    std::getline(f, magic);
    EXPECT_EQ(magic, "strata-expert-stats 1");
    // Every layer's counts: one per routed pair (32 tokens x 4), the plans' decay rounds them.
    std::getline(f, line);
    std::getline(f, line);
    int layers = 0;
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string tag;
        int layer;
        ls >> tag >> layer;
        int64_t sum = 0, v;
        while (ls >> v) sum += v;
        EXPECT_GT(sum, 100) << line;
        EXPECT_LE(sum, 128) << line;
        ++layers;
    }
    EXPECT_EQ(layers, 4);
    {
        auto again = Model::load(path, cpu, o);  // reads it back
        EXPECT_NE(again->expert_store(), nullptr);
    }
    try {
        (void)Model::load(other, cpu, o);
        ADD_FAILURE() << "another model's statistics were accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--expert-stats"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
    }
    std::ofstream(stats) << "strata-expert-stats 1\nmodel x\nlayers four\n";
    try {
        (void)Model::load(path, cpu, o);
        ADD_FAILURE() << "a malformed statistics file was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--expert-stats"), std::string::npos) << e.what();
    }
}

TEST(StoreCpuBudgets, TooSmallRamBudgetIsRefused) {
    test::TempDir dir;
    const auto path = make(dir, "qwen3moe", 256, 128, 16);
    backend::CpuBackend cpu(2);
    LoadOptions o;
    o.store.ram_budget = 4096;
    try {
        (void)Model::load(path, cpu, o);
        ADD_FAILURE() << "a 4 KiB RAM budget was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--ram-budget"), std::string::npos) << e.what();
    }
}

// cpu::MoePairs against a plain reference: weights dequantised, f64 products, on random data.
TEST(MoePairs, MatchesPlainReference) {
    const int64_t n_embd = 256, n_ff = 512, n_expert = 6, n_tokens = 5;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (quant::Type t : {quant::Type::F32, quant::Type::Q8_0, quant::Type::Q4_K}) {
        struct Mat {
            std::vector<uint8_t> q;
            std::vector<float> f;  // dequantised
            int64_t rows, cols;
        };
        auto make_mat = [&](int64_t rows, int64_t cols) {
            Mat m{{}, std::vector<float>(static_cast<size_t>(rows * cols)), rows, cols};
            const size_t rb = *quant::row_bytes(t, static_cast<uint64_t>(cols));
            m.q.resize(rb * static_cast<size_t>(rows));
            std::vector<float> x(static_cast<size_t>(cols));
            for (int64_t r = 0; r < rows; ++r) {
                for (float& v : x) v = nd(rng) * 0.1f;
                quant::quantize_row(t, x.data(), m.q.data() + rb * static_cast<size_t>(r), cols);
                quant::dequantize_row(t, m.q.data() + rb * static_cast<size_t>(r), m.f.data() + r * cols, cols);
            }
            return m;
        };
        std::vector<Mat> gate, up, down;
        for (int64_t e = 0; e < n_expert; ++e) {
            gate.push_back(make_mat(n_ff, n_embd));
            up.push_back(make_mat(n_ff, n_embd));
            down.push_back(make_mat(n_embd, n_ff));
        }
        std::vector<float> x(static_cast<size_t>(n_tokens * n_embd));
        for (float& v : x) v = nd(rng);
        std::vector<cpu::ExpertPair> pairs;
        for (int32_t tok = 0; tok < n_tokens; ++tok)
            for (int j = 0; j < 3; ++j)
                pairs.push_back({tok, static_cast<int32_t>((tok * 5 + j * 2) % n_expert), 0.2f + 0.1f * j});
        auto wm = [&](const Mat& m) { return cpu::WeightMatrix{t, m.q.data(), m.rows, m.cols, 0}; };
        cpu::MoePairs run;
        util::ThreadPool pool(2);
        std::vector<float> out(static_cast<size_t>(n_tokens * n_embd));
        run.run(
            x.data(), n_tokens, n_embd, pairs,
            [&](int32_t e) {
                return cpu::ExpertMatrices{wm(gate[static_cast<size_t>(e)]), wm(up[static_cast<size_t>(e)]),
                                           wm(down[static_cast<size_t>(e)])};
            },
            out.data(), &pool);
        std::vector<float> ref(out.size(), 0.0f);
        for (const auto& p : pairs) {
            const float* xt = x.data() + p.token * n_embd;
            std::vector<double> h(static_cast<size_t>(n_ff));
            for (int64_t r = 0; r < n_ff; ++r) {
                double g = 0, u = 0;
                for (int64_t c = 0; c < n_embd; ++c) {
                    g += static_cast<double>(gate[static_cast<size_t>(p.expert)].f[static_cast<size_t>(r * n_embd + c)]) * xt[c];
                    u += static_cast<double>(up[static_cast<size_t>(p.expert)].f[static_cast<size_t>(r * n_embd + c)]) * xt[c];
                }
                h[static_cast<size_t>(r)] = g / (1.0 + std::exp(-g)) * u;
            }
            for (int64_t r = 0; r < n_embd; ++r) {
                double d = 0;
                for (int64_t c = 0; c < n_ff; ++c)
                    d += static_cast<double>(down[static_cast<size_t>(p.expert)].f[static_cast<size_t>(r * n_ff + c)]) *
                         h[static_cast<size_t>(c)];
                ref[static_cast<size_t>(p.token * n_embd + r)] += static_cast<float>(p.weight * d);
            }
        }
        // f32: summation order only; quantised: the activations rounded to 8 bits on the way.
        const double bound = t == quant::Type::F32 ? 1e-5 : 2e-2;
        EXPECT_LT(test::rel_l2(out.data(), ref.data(), out.size()), bound) << quant::type_name(t);
    }
}

}  // namespace
}  // namespace strata::model
