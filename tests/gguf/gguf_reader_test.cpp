// GGUF reader and writer: round trips, typed access, and every way a file can be broken.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"
#include "util/error.h"

namespace strata::gguf {
namespace {

using strata::test::TempDir;

// Little-endian byte builder for hand-made (and deliberately broken) files.
struct Bytes {
    std::vector<uint8_t> b;
    template <typename T>
    Bytes& put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        b.insert(b.end(), p, p + sizeof v);
        return *this;
    }
    Bytes& str(const std::string& s) {
        put<uint64_t>(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Bytes& pad(size_t align) {
        while (b.size() % align) b.push_back(0);
        return *this;
    }
};

// A valid one-tensor file: header, one u32 kv, tensor "t" f32[8] at offset 0.
Bytes minimal_file(uint32_t version = 3) {
    Bytes x;
    x.put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(1).put<uint64_t>(1);
    x.str("general.architecture").put<uint32_t>(8).str("test");
    x.str("t").put<uint32_t>(1).put<uint64_t>(8).put<uint32_t>(0).put<uint64_t>(0);
    x.pad(32);
    for (int k = 0; k < 8; ++k) x.put<float>(static_cast<float>(k) + 0.5f);
    return x;
}

std::string open_error(const Bytes& x) {
    try {
        File::from_memory(x.b.data(), x.b.size(), "mem.gguf");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(GgufReader, MinimalFileParses) {
    Bytes x = minimal_file();
    auto f = File::from_memory(x.b.data(), x.b.size(), "mem.gguf");
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->architecture(), "test");
    const TensorInfo& t = f->tensor("t");
    EXPECT_EQ(t.type, quant::Type::F32);
    EXPECT_EQ(t.n_bytes, 32u);
    float v[8];
    std::memcpy(v, t.data, 32);
    EXPECT_EQ(v[7], 7.5f);
}

TEST(GgufReader, Version2Accepted) {
    Bytes x = minimal_file(2);
    EXPECT_EQ(open_error(x), "");
}

struct Corruption {
    const char* name;
    std::function<Bytes()> make;
    const char* expect;  // substring of the error
};

TEST(GgufReader, RejectsBrokenHeaders) {
    const std::vector<Corruption> cases = {
        {"bad magic",
         [] {
             Bytes x = minimal_file();
             x.b[0] = 'X';
             return x;
         },
         "bad magic"},
        {"version 1", [] { return minimal_file(1); }, "version 1 is not supported"},
        {"version 7", [] { return minimal_file(7); }, "unsupported GGUF version 7"},
        {"empty", [] { return Bytes{}; }, "too short"},
        {"huge tensor count",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(UINT64_MAX).put<uint64_t>(0);
             return x;
         },
         "tensor count"},
        {"huge kv count",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1ull << 60);
             return x;
         },
         "metadata count"},
        {"string longer than file",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
             x.put<uint64_t>(1ull << 40);
             x.pad(64);
             return x;
         },
         "claims 1099511627776 bytes"},
        {"unknown value type",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
             x.str("k").put<uint32_t>(99).put<uint32_t>(0);
             return x;
         },
         "unknown value type 99"},
        {"bool not 0/1",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
             x.str("k").put<uint32_t>(7).put<uint8_t>(5);
             return x;
         },
         "neither 0 nor 1"},
        {"huge array",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
             x.str("k").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(1ull << 62);
             return x;
         },
         "does not fit"},
        {"arrays nested too deep",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
             x.str("k").put<uint32_t>(9);
             for (int d = 0; d < 20; ++d) x.put<uint32_t>(9).put<uint64_t>(1);
             x.put<uint32_t>(0).put<uint64_t>(0);
             return x;
         },
         "nested deeper"},
        {"duplicate key",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(2);
             x.str("k").put<uint32_t>(4).put<uint32_t>(1);
             x.str("k").put<uint32_t>(4).put<uint32_t>(2);
             return x;
         },
         "duplicate metadata key 'k'"},
        {"alignment not power of two",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
             x.str("general.alignment").put<uint32_t>(4).put<uint32_t>(48);
             return x;
         },
         "not a power of two"},
        {"alignment wrong type",
         [] {
             Bytes x;
             x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
             x.str("general.alignment").put<uint32_t>(10).put<uint64_t>(64);
             return x;
         },
         "must be u32"},
    };
    for (const auto& c : cases) {
        const std::string err = open_error(c.make());
        EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": got '" << err << "'";
        EXPECT_EQ(err.rfind("mem.gguf: ", 0), 0u) << c.name << ": error must start with the file name: " << err;
    }
}

// Tensor-info defects: build a file with one tensor described by the arguments.
Bytes tensor_file(uint32_t n_dims, std::vector<uint64_t> shape, uint32_t type, uint64_t offset, size_t data_bytes,
                  int n_tensors = 1, const char* second_name = "t") {
    Bytes x;
    x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(n_tensors).put<uint64_t>(0);
    for (int k = 0; k < n_tensors; ++k) {
        x.str(k == 0 ? "t" : second_name).put<uint32_t>(n_dims);
        for (uint64_t d : shape) x.put<uint64_t>(d);
        x.put<uint32_t>(type).put<uint64_t>(k == 0 ? offset : offset + 64);
    }
    x.pad(32);
    x.b.resize(x.b.size() + data_bytes, 0x3c);
    return x;
}

TEST(GgufReader, RejectsBrokenTensorInfos) {
    EXPECT_EQ(open_error(tensor_file(1, {8}, 0, 0, 32)), "");
    EXPECT_NE(open_error(tensor_file(5, {1, 1, 1, 1, 1}, 0, 0, 4)).find("5 dimensions"), std::string::npos);
    EXPECT_NE(open_error(tensor_file(0, {}, 0, 0, 4)).find("0 dimensions"), std::string::npos);
    EXPECT_NE(open_error(tensor_file(1, {8}, 77, 0, 32)).find("unknown type id 77"), std::string::npos);
    EXPECT_NE(open_error(tensor_file(1, {8}, 0, 4, 64)).find("not aligned"), std::string::npos);
    EXPECT_NE(open_error(tensor_file(1, {8}, 0, 0, 16)).find("extends past the end"), std::string::npos);
    EXPECT_NE(open_error(tensor_file(1, {8}, 0, UINT64_MAX - 31, 64)).find("extends past the end"), std::string::npos);
    // 2^32 * 2^32 values overflow u64.
    EXPECT_NE(open_error(tensor_file(2, {1ull << 32, 1ull << 32}, 0, 0, 64)).find("overflows"), std::string::npos);
    // Byte size overflow: 2^62 f32 values is 2^64 bytes.
    EXPECT_NE(open_error(tensor_file(2, {1ull << 31, 1ull << 31}, 0, 0, 64)).find("overflows"), std::string::npos);
    // Q4_K needs rows of 256.
    EXPECT_NE(open_error(tensor_file(1, {100}, 12, 0, 512)).find("whole number"), std::string::npos);
    EXPECT_NE(open_error(tensor_file(1, {8}, 0, 0, 128, 2, "t")).find("duplicate tensor name 't'"), std::string::npos);
}

// Every prefix of a valid file is an error or (for the complete file) a success; never a crash.
TEST(GgufReader, EveryTruncationFailsCleanly) {
    Bytes x = minimal_file();
    for (size_t n = 0; n < x.b.size(); ++n) {
        Bytes cut;
        cut.b.assign(x.b.begin(), x.b.begin() + static_cast<long>(n));
        EXPECT_NE(open_error(cut), "") << "prefix of " << n << " bytes parsed";
    }
}

// Random byte corruption: each attempt either parses or throws strata::Error.
TEST(GgufReader, RandomCorruptionNeverCrashes) {
    Writer w;
    w.set("general.architecture", Value::of_string("x"));
    w.set("list", Value::of_strings({"a", "bb", "ccc"}));
    w.set("ints", Value::of_i32s({1, -2, 3}));
    w.add_tensor("a", quant::Type::F32, {16, 2});
    w.add_tensor("b", quant::Type::F16, {32});
    TempDir dir;
    std::vector<float> a(32, 1.0f);
    std::vector<uint16_t> b(32, 0x3c00);
    w.write_all(dir / "c.gguf", {a.data(), b.data()});
    std::ifstream in(dir / "c.gguf", std::ios::binary);
    std::vector<uint8_t> good((std::istreambuf_iterator<char>(in)), {});
    std::mt19937 rng(1234);
    int parsed = 0, rejected = 0;
    for (int it = 0; it < 3000; ++it) {
        std::vector<uint8_t> bad = good;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
        try {
            auto f = File::from_memory(bad.data(), bad.size(), "c.gguf");
            for (const auto& t : f->tensors()) {
                ASSERT_GE(t.data, bad.data());
                ASSERT_LE(t.data + t.n_bytes, bad.data() + bad.size());
            }
            ++parsed;
        } catch (const Error&) {
            ++rejected;
        }
    }
    EXPECT_GT(rejected, 100);
    EXPECT_GT(parsed, 100);  // flips inside tensor data are harmless
}

TEST(GgufWriter, RoundTripsEveryValueType) {
    Writer w;
    w.set("u8", Value::scalar_u(ValueType::U8, 200));
    w.set("i8", Value::scalar_i(ValueType::I8, -100));
    w.set("u16", Value::scalar_u(ValueType::U16, 60000));
    w.set("i16", Value::scalar_i(ValueType::I16, -30000));
    w.set("u32", Value::of_u32(4000000000u));
    w.set("i32", Value::of_i32(-2000000000));
    w.set("f32", Value::of_f32(1.5f));
    w.set("bool", Value::of_bool(true));
    w.set("str", Value::of_string("héllo\nworld"));
    w.set("u64", Value::of_u64(UINT64_MAX));
    w.set("i64", Value::scalar_i(ValueType::I64, INT64_MIN));
    Value f64;
    f64.type = ValueType::F64;
    f64.f = 1e300;
    w.set("f64", f64);
    w.set("strs", Value::of_strings({"", "a", std::string(1000, 'z')}));
    w.set("floats", Value::of_f32s({0.25f, -3.0f}));
    Value bools;
    bools.type = ValueType::ARRAY;
    bools.elem_type = ValueType::BOOL;
    bools.arr_u = {1, 0, 1};
    w.set("bools", bools);
    Value nested;
    nested.type = ValueType::ARRAY;
    nested.elem_type = ValueType::ARRAY;
    nested.arr_v = {Value::of_i32s({1, 2}), Value::of_strings({"x"})};
    w.set("nested", nested);
    w.set_alignment(64);
    w.add_tensor("w.q8", quant::Type::Q8_0, {64, 3});
    w.add_tensor("w.f16", quant::Type::F16, {5});
    std::vector<uint8_t> q8(34 * 2 * 3);
    for (size_t k = 0; k < q8.size(); ++k) q8[k] = static_cast<uint8_t>(k * 7);
    std::vector<uint16_t> h = {1, 2, 3, 4, 5};
    TempDir dir;
    w.write_all(dir / "rt.gguf", {q8.data(), h.data()});

    auto f = File::open(dir / "rt.gguf");
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->get_u32("u8"), 200u);
    EXPECT_EQ(f->get_i64("i8"), -100);
    EXPECT_EQ(f->get_u32("u16"), 60000u);
    EXPECT_EQ(f->get_i64("i16"), -30000);
    EXPECT_EQ(f->get_u32("u32"), 4000000000u);
    EXPECT_EQ(f->get_i64("i32"), -2000000000);
    EXPECT_EQ(f->get_f32("f32"), 1.5f);
    EXPECT_TRUE(f->get_bool("bool"));
    EXPECT_EQ(f->get_string("str"), "héllo\nworld");
    EXPECT_EQ(f->get_u64("u64"), UINT64_MAX);
    EXPECT_EQ(f->get_i64("i64"), INT64_MIN);
    EXPECT_EQ(f->find("f64")->f, 1e300);
    EXPECT_EQ(f->get_strings("strs"), (std::vector<std::string>{"", "a", std::string(1000, 'z')}));
    EXPECT_EQ(f->get_floats("floats"), (std::vector<float>{0.25f, -3.0f}));
    EXPECT_EQ(f->get_array("bools").arr_u, (std::vector<uint64_t>{1, 0, 1}));
    const Value& n = f->get_array("nested", ValueType::ARRAY);
    ASSERT_EQ(n.arr_v.size(), 2u);
    EXPECT_EQ(n.arr_v[0].arr_i, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(n.arr_v[1].arr_s, (std::vector<std::string>{"x"}));
    const TensorInfo& tq = f->tensor("w.q8");
    EXPECT_EQ(tq.shape, (std::vector<uint64_t>{64, 3}));
    EXPECT_EQ(tq.n_bytes, q8.size());
    EXPECT_EQ(std::memcmp(tq.data, q8.data(), q8.size()), 0);
    const TensorInfo& th = f->tensor("w.f16");
    EXPECT_EQ(th.offset % 64, 0u);
    EXPECT_EQ(std::memcmp(th.data, h.data(), 10), 0);
    EXPECT_FALSE(std::filesystem::exists(dir / "rt.gguf.tmp"));
}

TEST(GgufReader, TypedAccessorsNameTheProblem) {
    Writer w;
    w.set("s", Value::of_string("x"));
    w.set("neg", Value::of_i32(-1));
    w.set("big", Value::of_u64(1ull << 40));
    TempDir dir;
    w.write_all(dir / "k.gguf", {});
    auto f = File::open(dir / "k.gguf");
    auto err = [&](auto fn) {
        try {
            fn();
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    const std::string p = (dir / "k.gguf").string();
    EXPECT_EQ(err([&] { f->get_u32("nope"); }), p + ": metadata key 'nope' is missing");
    EXPECT_EQ(err([&] { f->get_u32("s"); }), p + ": metadata key 's' has type string, expected an unsigned integer");
    EXPECT_EQ(err([&] { f->get_string("neg"); }), p + ": metadata key 'neg' has type i32, expected string");
    EXPECT_NE(err([&] { f->get_u32("neg"); }).find("is negative"), std::string::npos);
    EXPECT_NE(err([&] { f->get_u32("big"); }).find("too large"), std::string::npos);
    EXPECT_EQ(f->get_u64("big"), 1ull << 40);
    EXPECT_EQ(err([&] { f->tensor("w"); }), p + ": tensor 'w' is missing");
    EXPECT_FALSE(f->opt_u32("nope").has_value());
    EXPECT_EQ(err([&] { f->opt_bool("s"); }), p + ": metadata key 's' has type string, expected bool");
}

TEST(GgufWriter, RefusesBadTensorsAndLeavesNoFileOnFailure) {
    Writer w;
    EXPECT_THROW(w.add_tensor("q", quant::Type::Q4_K, {100}), Error);
    w.add_tensor("a", quant::Type::F32, {4});
    EXPECT_THROW(w.add_tensor("a", quant::Type::F32, {4}), Error);
    TempDir dir;
    {
        Writer w2;
        w2.add_tensor("a", quant::Type::F32, {4});
        w2.begin(dir / "x.gguf");
        float two[2] = {1, 2};
        w2.write_data(two, sizeof two);
        EXPECT_THROW(w2.finish(), Error);  // only half the data
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
    EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf.tmp"));
}

TEST(GgufReader, SplitModelsOpenAsOne) {
    TempDir dir;
    for (int part = 1; part <= 3; ++part) {
        Writer w;
        if (part == 1) w.set("general.architecture", Value::of_string("qwen3moe"));
        w.set("split.no", Value::scalar_u(ValueType::U16, static_cast<uint64_t>(part - 1)));
        w.set("split.count", Value::scalar_u(ValueType::U16, 3));
        w.set("split.tensors.count", Value::scalar_i(ValueType::I32, 3));
        w.add_tensor("t" + std::to_string(part), quant::Type::F32, {4});
        float v[4] = {static_cast<float>(part), 0, 0, 0};
        char name[64];
        std::snprintf(name, sizeof name, "m-%05d-of-%05d.gguf", part, 3);
        w.write_all(dir / name, {v});
    }
    auto f = File::open(dir / "m-00002-of-00003.gguf");  // any part opens the whole model
    EXPECT_EQ(f->n_files(), 3u);
    EXPECT_EQ(f->architecture(), "qwen3moe");
    ASSERT_EQ(f->tensors().size(), 3u);
    for (int part = 1; part <= 3; ++part) {
        const TensorInfo& t = f->tensor("t" + std::to_string(part));
        EXPECT_EQ(t.file_index, static_cast<uint32_t>(part - 1));
        float v;
        std::memcpy(&v, t.data, 4);
        EXPECT_EQ(v, static_cast<float>(part));
    }
    std::filesystem::remove(dir / "m-00003-of-00003.gguf");
    try {
        File::open(dir / "m-00001-of-00003.gguf");
        FAIL() << "missing part accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("split part 3 of 3 is missing"), std::string::npos) << e.what();
    }
}

TEST(GgufReader, OpensRealConvertedModels) {
    for (const char* arch : {"qwen3moe", "qwen3next", "qwen35moe"}) {
        const auto path = strata::test::fixture(std::string("hf-tiny/") + arch + "/" + arch + "-bf16.gguf");
        STRATA_REQUIRE_FIXTURE(path);
        auto f = File::open(path);
        EXPECT_EQ(f->architecture(), arch);
        EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens").size(), 151936u);
        EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
        EXPECT_EQ(f->tensor("token_embd.weight").shape, (std::vector<uint64_t>{32, 151936}));
        EXPECT_GT(f->tensors().size(), 20u);
    }
}

TEST(GgufReader, MissingFileIsAClearError) {
    try {
        File::open("/nonexistent/model.gguf");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "/nonexistent/model.gguf: cannot open: No such file or directory");
    }
}

}  // namespace
}  // namespace strata::gguf
