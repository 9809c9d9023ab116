// Reference dequantisers: bit-exact against the fixture's reference dequantisation for every
// type, plus hand-built blocks (so the layouts are checked without the fixture), the error
// cases, and the integrity of the i-quant tables.
#include "quant/dequant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/types.h"
#include "test_util.h"
#include "util/error.h"
#include "util/fp16.h"

namespace strata::quant {
namespace {

// ---- fixture: <t>.q dequantised must equal <t>.deq bit for bit -----------------------------

constexpr Type kFixtureTypes[] = {
    Type::F16,   Type::BF16,  Type::Q4_0,  Type::Q4_1,   Type::Q5_0,    Type::Q5_1,   Type::Q8_0,  Type::Q2_K,
    Type::Q3_K,  Type::Q4_K,  Type::Q5_K,  Type::Q6_K,   Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS,
    Type::IQ3_S, Type::IQ1_S, Type::IQ1_M, Type::IQ4_NL, Type::IQ4_XS,  Type::MXFP4,  Type::TQ1_0, Type::TQ2_0,
};

const gguf::File& fixture_file() {
    static const std::unique_ptr<gguf::File> file = gguf::File::open(test::fixture("quant/quant-test.gguf"));
    return *file;
}

class DequantFixture : public ::testing::TestWithParam<Type> {};

TEST_P(DequantFixture, MatchesReferenceBitForBit) {
    STRATA_REQUIRE_FIXTURE(test::fixture("quant/quant-test.gguf"));
    const Type type = GetParam();
    const std::string name = type_name(type);
    const gguf::File& file = fixture_file();
    const gguf::TensorInfo& q = file.tensor(name + ".q");
    const gguf::TensorInfo& deq = file.tensor(name + ".deq");
    ASSERT_EQ(q.type, type);
    ASSERT_EQ(deq.type, Type::F32);
    ASSERT_EQ(q.shape, deq.shape);
    ASSERT_FALSE(q.shape.empty());

    const int64_t row_len = static_cast<int64_t>(q.shape[0]);
    const uint64_t q_row_bytes = row_bytes(type, q.shape[0]).value();
    std::vector<float> got(static_cast<size_t>(row_len));
    for (uint64_t r = 0; r < q.n_rows(); ++r) {
        dequantize_row(type, q.data + r * q_row_bytes, got.data(), row_len);
        for (int64_t i = 0; i < row_len; ++i) {
            uint32_t want_bits;
            std::memcpy(&want_bits, deq.data + (r * q.shape[0] + static_cast<uint64_t>(i)) * 4, 4);
            const uint32_t got_bits = f32_to_bits(got[static_cast<size_t>(i)]);
            if (got_bits != want_bits) {
                FAIL() << name << ": first mismatch at row " << r << ", column " << i << " (block "
                       << i / type_info(type).block_elems << "): got " << got[static_cast<size_t>(i)] << " (0x" << std::hex
                       << got_bits << "), want " << std::dec << bits_to_f32(want_bits) << " (0x" << std::hex << want_bits << ")";
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantFixture, ::testing::ValuesIn(kFixtureTypes),
                         [](const ::testing::TestParamInfo<Type>& info) { return std::string(type_name(info.param)); });

// The same data at an odd address gives the same floats (blocks are read without alignment).
TEST(Dequant, UnalignedSourceGivesSameResult) {
    STRATA_REQUIRE_FIXTURE(test::fixture("quant/quant-test.gguf"));
    for (Type type : kFixtureTypes) {
        const gguf::TensorInfo& q = fixture_file().tensor(std::string(type_name(type)) + ".q");
        const uint64_t bytes = row_bytes(type, q.shape[0]).value();
        std::vector<uint8_t> shifted(bytes + 1);
        std::memcpy(shifted.data() + 1, q.data, bytes);
        std::vector<float> aligned(q.shape[0]), unaligned(q.shape[0]);
        dequantize_row(type, q.data, aligned.data(), static_cast<int64_t>(q.shape[0]));
        dequantize_row(type, shifted.data() + 1, unaligned.data(), static_cast<int64_t>(q.shape[0]));
        EXPECT_EQ(0, std::memcmp(aligned.data(), unaligned.data(), aligned.size() * 4)) << type_name(type);
    }
}

// ---- hand-built blocks: the layouts, independent of the fixture ------------------------------

constexpr uint16_t kHalfOne = 0x3c00;   // 1.0
constexpr uint16_t kHalfHalf = 0x3800;  // 0.5

template <class Block>
std::vector<float> dequant_block(Type type, const Block& block) {
    std::vector<float> out(static_cast<size_t>(type_info(type).block_elems));
    dequantize_row(type, &block, out.data(), static_cast<int64_t>(out.size()));
    return out;
}

TEST(Dequant, F32IsCopied) {
    const float in[3] = {1.5f, -0.0f, 3e-40f};
    float out[3];
    dequantize_row(Type::F32, in, out, 3);
    EXPECT_EQ(0, std::memcmp(in, out, sizeof(in)));
}

TEST(Dequant, Q4_0NibbleOrder) {
    BlockQ4_0 b{};
    b.d = kHalfHalf;
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = dequant_block(Type::Q4_0, b);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 8)) << j;
        EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(7 - j)) << j;
    }
}

TEST(Dequant, Q4_1AddsMin) {
    BlockQ4_1 b{};
    b.d = kHalfOne;
    b.m = f32_to_f16(-2.0f);
    b.qs[3] = 0x5a;  // value 3 = 10, value 19 = 5
    const auto y = dequant_block(Type::Q4_1, b);
    EXPECT_EQ(y[3], 8.0f);
    EXPECT_EQ(y[19], 3.0f);
    EXPECT_EQ(y[0], -2.0f);
}

TEST(Dequant, Q5_0HighBitPerValue) {
    BlockQ5_0 b{};
    b.d = kHalfOne;
    const uint32_t qh = (1u << 2) | (1u << 20);  // values 2 and 20 get the fifth bit
    std::memcpy(b.qh, &qh, 4);
    const auto y = dequant_block(Type::Q5_0, b);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], (i == 2 || i == 20) ? 0.0f : -16.0f) << i;
}

TEST(Dequant, Q8_0SignedBytes) {
    BlockQ8_0 b{};
    b.d = f32_to_f16(0.25f);
    for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(i * 8 - 128);
    const auto y = dequant_block(Type::Q8_0, b);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.25f * static_cast<float>(i * 8 - 128)) << i;
}

TEST(Dequant, Mxfp4E2M1CodesAndE8M0Scale) {
    const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    BlockMXFP4 b{};
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (j << 4));
    for (int e : {127, 130, 100, 2, 1, 0}) {
        b.e = static_cast<uint8_t>(e);
        const auto y = dequant_block(Type::MXFP4, b);
        for (int j = 0; j < 16; ++j) {
            const float want = std::ldexp(e2m1[j], e - 127);
            EXPECT_EQ(y[j], want) << "e=" << e << " code " << j;
            EXPECT_EQ(y[j + 16], want) << "e=" << e << " code " << j;
        }
    }
    // e = 255 is not treated as NaN: it scales by 2^128 like the reference, so the smallest
    // non-zero code (0.5) gives 2^127 and every larger one overflows to infinity.
    b.e = 255;
    const auto y = dequant_block(Type::MXFP4, b);
    EXPECT_EQ(y[1], std::ldexp(1.0f, 127));
    EXPECT_EQ(y[9], -std::ldexp(1.0f, 127));
    EXPECT_TRUE(std::isinf(y[2]) && y[2] > 0);
    EXPECT_TRUE(std::isinf(y[15]) && y[15] < 0);
    EXPECT_EQ(y[0], 0.0f);
}

TEST(Dequant, Iq4NlLevels) {
    BlockIQ4_NL b{};
    b.d = kHalfOne;
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = dequant_block(Type::IQ4_NL, b);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], static_cast<float>(kIq4NlValues[j]));
        EXPECT_EQ(y[j + 16], static_cast<float>(kIq4NlValues[15 - j]));
    }
}

TEST(Dequant, Q4_KUpperScalesAndMins) {
    BlockQ4_K b{};
    b.d = kHalfOne;
    b.dmin = kHalfOne;
    // Sub-block 5: scale 0b10'0011 = 35, min 0b01'0111 = 23 (low nibbles in byte 9, high bits
    // in the top of bytes 1 and 5).
    b.scales[9] = 0x73;
    b.scales[1] = 0x80;
    b.scales[5] = 0x40;
    for (int l = 0; l < 32; ++l) b.qs[64 + l] = 0x20;  // sub-block 5 = high nibbles of chunk 2: 2
    const auto y = dequant_block(Type::Q4_K, b);
    for (int l = 0; l < 32; ++l) EXPECT_EQ(y[160 + l], 35.0f * 2.0f - 23.0f) << l;
    // Sub-block 1 uses the low 6 bits of bytes 1 and 5: scale 0, min 0.
    EXPECT_EQ(y[32], 0.0f);
}

TEST(Dequant, Q6_KQuarterLayout) {
    BlockQ6_K b{};
    b.d = kHalfOne;
    for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
    b.ql[32 + 5] = 0x90;  // value 96 + 5: high nibble of ql[37] = 9
    b.qh[5] = 0x80;       // ... with high bits 2 (bits 6-7 of qh[5])
    const auto y = dequant_block(Type::Q6_K, b);
    EXPECT_EQ(y[101], static_cast<float>(101 / 16 - 8) * static_cast<float>((9 | (2 << 4)) - 32));
    EXPECT_EQ(y[0], -8.0f * -32.0f);
}

TEST(Dequant, Tq2_0Codes) {
    BlockTQ2_0 b{};
    b.d = kHalfHalf;
    b.qs[33] = 0b00'10'01'00;  // values 128 + 1 (code 0), 160 + 1 (1), 192 + 1 (2), 224 + 1 (0)
    const auto y = dequant_block(Type::TQ2_0, b);
    EXPECT_EQ(y[129], -0.5f);
    EXPECT_EQ(y[161], 0.0f);
    EXPECT_EQ(y[193], 0.5f);
    EXPECT_EQ(y[225], -0.5f);
}

TEST(Dequant, Tq1_0BaseThreeDigits) {
    // Trits (t + 1) = 2, 0, 1, 2, 1 in byte 0: x = 2*81 + 0*27 + 1*9 + 2*3 + 1 = 178,
    // stored as ceil(178 * 256 / 243) = 188.
    BlockTQ1_0 b{};
    b.d = kHalfOne;
    // Every other byte is 128 = ceil(121 * 256 / 243): all trits 1, i.e. value 0.
    std::memset(b.qs, 128, sizeof(b.qs));
    std::memset(b.qh, 128, sizeof(b.qh));
    b.qs[0] = 188;
    const auto y = dequant_block(Type::TQ1_0, b);
    const float want[5] = {1, -1, 0, 1, 0};
    for (int k = 0; k < 5; ++k) EXPECT_EQ(y[32 * k], want[k]) << k;
    for (int i = 0; i < 256; ++i) {
        if (i % 32 != 0 || i >= 160) {
            EXPECT_EQ(y[i], 0.0f) << i;
        }
    }
}

TEST(Dequant, Iq2XxsSignParityAndScale) {
    BlockIQ2_XXS b{};
    b.d = kHalfOne;
    uint8_t qs[64] = {};
    qs[0] = 0;                              // group 0: grid entry 0 = all 8s
    const uint32_t w = (3u << 28) | 0x01u;  // scale 3, group 0 sign index 1
    std::memcpy(qs + 4, &w, 4);
    std::memcpy(b.qs, qs, sizeof(qs));
    const auto y = dequant_block(Type::IQ2_XXS, b);
    const float db = (1.0f * 3.5f) * 0.25f;
    // Sign index 1 negates value 0 and, for even parity, value 7.
    for (int j = 0; j < 8; ++j) EXPECT_EQ(y[j], (j == 0 || j == 7 ? -1.0f : 1.0f) * db * 8.0f) << j;
}

// ---- errors -----------------------------------------------------------------------------------

TEST(Dequant, RejectsPartialBlocks) {
    std::vector<uint8_t> src(1024);
    std::vector<float> dst(512);
    EXPECT_THROW(dequantize_row(Type::Q4_K, src.data(), dst.data(), 255), Error);
    EXPECT_THROW(dequantize_row(Type::Q8_0, src.data(), dst.data(), 33), Error);
    EXPECT_THROW(dequantize_row(Type::F16, src.data(), dst.data(), -1), Error);
    EXPECT_NO_THROW(dequantize_row(Type::Q4_K, nullptr, nullptr, 0));
}

TEST(Dequant, RejectsTypesWithoutDequantiser) {
    std::vector<uint8_t> src(1024);
    std::vector<float> dst(256);
    for (Type t : {Type::Q8_1, Type::Q8_K, Type::I8, Type::I32, Type::F64}) {
        EXPECT_FALSE(type_info(t).can_dequantize) << type_name(t);
        EXPECT_THROW(dequantize_row(t, src.data(), dst.data(), 256), Error) << type_name(t);
    }
    EXPECT_THROW(dequantize_row(static_cast<Type>(77), src.data(), dst.data(), 32), Error);
}

TEST(Dequant, EveryDequantizableTypeIsSupported) {
    std::vector<uint8_t> src(4096);
    std::vector<float> dst(256);
    for (uint32_t id = 0; id < 64; ++id) {
        const TypeInfo* info = type_info(id);
        if (!info || !info->can_dequantize) continue;
        EXPECT_NO_THROW(dequantize_row(info->type, src.data(), dst.data(), 256)) << info->name;
    }
}

// ---- tables -----------------------------------------------------------------------------------

uint64_t fnv1a(const void* data, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; ++i) {
        h ^= static_cast<const uint8_t*>(data)[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

template <class T, size_t N>
bool all_bytes_in(const T (&grid)[N], std::initializer_list<int> allowed) {
    for (const T& entry : grid)
        for (size_t j = 0; j < sizeof(T); ++j) {
            const int v = static_cast<int>((entry >> (8 * j)) & 0xff);
            if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) return false;
        }
    return true;
}

template <class T, size_t N>
bool strictly_increasing(const T (&grid)[N]) {
    for (size_t i = 1; i < N; ++i)
        if (!(grid[i - 1] < grid[i])) return false;
    return true;
}

// Checksums of the reference tables: any edit to the data shows up here.
TEST(IqTables, GridsMatchReferenceChecksums) {
    EXPECT_EQ(fnv1a(kIq2XxsGrid, sizeof(kIq2XxsGrid)), 0xbb4ee025b5ac6e8eull);
    EXPECT_EQ(fnv1a(kIq2XsGrid, sizeof(kIq2XsGrid)), 0xc9b1ee61e79909bdull);
    EXPECT_EQ(fnv1a(kIq2SGrid, sizeof(kIq2SGrid)), 0x123edd38a3b62b90ull);
    EXPECT_EQ(fnv1a(kIq3XxsGrid, sizeof(kIq3XxsGrid)), 0xdfa5dc83d6a155d5ull);
    EXPECT_EQ(fnv1a(kIq3SGrid, sizeof(kIq3SGrid)), 0xfa37020c25b44829ull);
    EXPECT_EQ(fnv1a(kIq1SGrid, sizeof(kIq1SGrid)), 0x6703ed863501ae2eull);
}

TEST(IqTables, GridValuesAndOrder) {
    EXPECT_TRUE(all_bytes_in(kIq2XxsGrid, {8, 25, 43}));
    EXPECT_TRUE(all_bytes_in(kIq2XsGrid, {8, 25, 43}));
    EXPECT_TRUE(all_bytes_in(kIq2SGrid, {8, 25, 43}));
    EXPECT_TRUE(all_bytes_in(kIq3XxsGrid, {4, 12, 20, 28, 36, 44, 52, 62}));
    EXPECT_TRUE(all_bytes_in(kIq3SGrid, {1, 3, 5, 7, 9, 11, 13, 15}));
    EXPECT_TRUE(all_bytes_in(kIq1SGrid, {0xff, 0x00, 0x01}));
    EXPECT_TRUE(strictly_increasing(kIq2XxsGrid));
    EXPECT_TRUE(strictly_increasing(kIq2XsGrid));
    EXPECT_TRUE(strictly_increasing(kIq2SGrid));
    EXPECT_TRUE(strictly_increasing(kIq3XxsGrid));
    EXPECT_TRUE(strictly_increasing(kIq3SGrid));
    for (const void* grid :
         {static_cast<const void*>(kIq2XxsGrid), static_cast<const void*>(kIq2XsGrid), static_cast<const void*>(kIq2SGrid),
          static_cast<const void*>(kIq3XxsGrid), static_cast<const void*>(kIq3SGrid), static_cast<const void*>(kIq1SGrid)})
        EXPECT_EQ(reinterpret_cast<uintptr_t>(grid) % 64, 0u);
}

TEST(IqTables, SignMasksHaveEvenParity) {
    for (int i = 0; i < 128; ++i) {
        EXPECT_EQ(kIqSignMasks[i] & 127, i);
        EXPECT_EQ(std::popcount(static_cast<unsigned>(kIqSignMasks[i])) % 2, 0) << i;
    }
    EXPECT_EQ(kIqSignMasks[1], 129);
    EXPECT_EQ(kIqSignMasks[3], 3);
}

}  // namespace
}  // namespace strata::quant
