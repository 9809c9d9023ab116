// The safetensors reader: parsing, dtype conversion, and one-line errors naming the file for
// every kind of damage.
#include <gtest/gtest.h>

#include "convert/safetensors.h"
#include "convert_test_util.h"
#include "util/error.h"
#include "util/fp16.h"

namespace strata::convert {
namespace {

using namespace strata::convert::test;

std::vector<uint8_t> bytes_of(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

std::vector<uint8_t> halves_of(const std::vector<float>& v, bool bf16) {
    std::vector<uint8_t> b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
        std::memcpy(b.data() + 2 * i, &h, 2);
    }
    return b;
}

// The error message of opening path, or "" when it opens.
std::string open_error(const fs::path& path) {
    try {
        SafetensorsFile::open(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

void write_raw(const fs::path& p, const std::string& header, size_t data_bytes) {
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << std::string(data_bytes, '\0');
}

TEST(Safetensors, ReadsEveryFloatDtypeInHeaderOrder) {
    strata::test::TempDir tmp;
    const std::vector<float> v = {1.0f, -2.5f, 0.375f, 65504.0f, 1e-3f, -0.0f};
    write_safetensors(tmp / "m.safetensors", {{"z.f32", "F32", {2, 3}, bytes_of(v)},
                                              {"a.f16", "F16", {6}, halves_of(v, false)},
                                              {"m.bf16", "BF16", {3, 2}, halves_of(v, true)},
                                              {"i.i64", "I64", {1}, std::vector<uint8_t>(8, 0)}});
    const auto f = SafetensorsFile::open(tmp / "m.safetensors");
    ASSERT_EQ(f->tensors().size(), 4u);
    EXPECT_EQ(f->tensors()[0].name, "z.f32");  // header order, not sorted
    EXPECT_EQ(f->tensors()[1].name, "a.f16");
    EXPECT_EQ(f->tensors()[0].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(f->tensors()[0].row_len(), 3);
    EXPECT_EQ(f->tensors()[0].n_rows(), 2);
    std::vector<float> got(6);
    for (size_t t = 0; t < 3; ++t) {
        read_f32(f->tensors()[t], 0, 6, got.data());
        for (size_t i = 0; i < 6; ++i) {
            const float want = t == 0 ? v[i] : t == 1 ? f16_to_f32(f32_to_f16(v[i])) : bf16_to_f32(f32_to_bf16(v[i]));
            EXPECT_EQ(got[i], want) << f->tensors()[t].name << " " << i;
        }
    }
    read_f32(f->tensors()[0], 4, 2, got.data());  // an element range
    EXPECT_EQ(got[0], v[4]);
    EXPECT_EQ(got[1], v[5]);
    try {
        read_f32(f->tensors()[3], 0, 1, got.data());
        FAIL() << "I64 should not convert";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("m.safetensors: tensor 'i.i64' has dtype I64"), std::string::npos) << e.what();
    }
}

TEST(Safetensors, DamageIsAOneLineErrorNamingTheFile) {
    strata::test::TempDir tmp;
    const fs::path p = tmp / "bad.safetensors";
    struct Case {
        std::string header;
        size_t data;
        std::string want;
    };
    const Case cases[] = {
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "runs past the end of the data section"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", 16, "12 data bytes, but shape [4] of F32 needs 16"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 16, "are reversed"},
        {"{\"t\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16, "unknown dtype 'Q4'"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 16, "shape entries must be non-negative"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 16, "data_offsets must be [begin, end]"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         16, "overlap"},
        {"{\"t\": [1, 2", 16, "header is not valid JSON"},
        {"[1, 2]", 16, "header is not a JSON object"},
    };
    for (const Case& c : cases) {
        write_raw(p, c.header, c.data);
        const std::string err = open_error(p);
        EXPECT_TRUE(err.starts_with(p.string() + ": ")) << err;
        EXPECT_NE(err.find(c.want), std::string::npos) << c.want << " / " << err;
        EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    }
    {
        std::ofstream out(p, std::ios::binary);
        out << "abc";
    }
    EXPECT_NE(open_error(p).find("too short for a safetensors header"), std::string::npos);
    {
        std::ofstream out(p, std::ios::binary);
        const uint64_t n = 1000;
        out.write(reinterpret_cast<const char*>(&n), 8);
        out << "{}";
    }
    EXPECT_NE(open_error(p).find("header of 1000 bytes runs past the end of the file"), std::string::npos);
    {
        std::ofstream out(p, std::ios::binary);
        const uint64_t n = uint64_t{1} << 62;
        out.write(reinterpret_cast<const char*>(&n), 8);
    }
    EXPECT_NE(open_error(p).find("is not plausible"), std::string::npos);
    EXPECT_NE(open_error(tmp / "absent.safetensors").find("absent.safetensors: cannot open"), std::string::npos);
}

TEST(Safetensors, CheckpointDirectoryParts) {
    strata::test::TempDir tmp;
    const std::vector<float> v = {1, 2, 3, 4};
    // Without an index: every model*.safetensors, sorted by name.
    write_safetensors(tmp / "model-00002-of-00002.safetensors", {{"b", "F32", {4}, bytes_of(v)}});
    write_safetensors(tmp / "model-00001-of-00002.safetensors", {{"a", "F32", {4}, bytes_of(v)}});
    write_safetensors(tmp / "other.safetensors", {{"c", "F32", {4}, bytes_of(v)}});
    auto ck = Checkpoint::open(tmp.path());
    ASSERT_EQ(ck->tensors().size(), 2u);
    EXPECT_EQ(ck->tensors()[0]->name, "a");
    EXPECT_EQ(ck->tensors()[1]->name, "b");
    EXPECT_NE(ck->find("b"), nullptr);
    EXPECT_EQ(ck->find("c"), nullptr);

    // The same tensor in two parts.
    write_safetensors(tmp / "model-00002-of-00002.safetensors", {{"a", "F32", {4}, bytes_of(v)}});
    try {
        Checkpoint::open(tmp.path());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'a' also appears in another part"), std::string::npos) << e.what();
    }

    // With an index: its parts; a part it names must exist, and agree with it.
    write_safetensors(tmp / "model-00002-of-00002.safetensors", {{"b", "F32", {4}, bytes_of(v)}});
    write_json(tmp / "model.safetensors.index.json",
               {{"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00003-of-00003.safetensors"}}}});
    try {
        Checkpoint::open(tmp.path());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(
            std::string(e.what()).find("model.safetensors.index.json: part file 'model-00003-of-00003.safetensors' is missing"),
            std::string::npos)
            << e.what();
    }
    write_json(tmp / "model.safetensors.index.json",
               {{"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00001-of-00002.safetensors"}}}});
    try {
        Checkpoint::open(tmp.path());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model-00001-of-00002.safetensors: tensor 'b' listed in the index is missing"),
                  std::string::npos)
            << e.what();
    }
    write_json(tmp / "model.safetensors.index.json", {{"weight_map", {{"a", "../model.safetensors"}}}});
    EXPECT_THROW(Checkpoint::open(tmp.path()), Error);

    strata::test::TempDir empty;
    try {
        Checkpoint::open(empty.path());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no model*.safetensors files"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace strata::convert
