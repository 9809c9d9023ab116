// Half-precision conversions: f16 -> f32 exhaustively against a bit-level reference, f32 -> f16
// and f32 -> bf16 against exact (double) round-to-nearest-even references: every midpoint,
// random floats, overflow, subnormals, signed zero and NaN.
#include "util/fp16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace strata {
namespace {

constexpr uint16_t kHalfInf = 0x7c00;
constexpr uint16_t kHalfMaxFinite = 0x7bff;  // 65504

bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0; }

// f16 bits -> f32 bits by moving the fields: rebias the exponent (15 -> 127), widen the mantissa,
// and renormalise subnormal halves (all of which are normal floats).
uint32_t reference_f16_to_f32_bits(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
    const int exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return sign | 0x7f800000u | (mant << 13);
    if (exp == 0) {
        if (mant == 0) return sign;
        int e = -14;  // subnormal: mant * 2^-24 = (mant / 1024) * 2^-14
        while ((mant & 0x400u) == 0) {
            mant <<= 1;
            --e;
        }
        return sign | (static_cast<uint32_t>(e + 127) << 23) | ((mant & 0x3ffu) << 13);
    }
    return sign | (static_cast<uint32_t>(exp - 15 + 127) << 23) | (mant << 13);
}

// Exact value of a finite half, from its fields.
double half_value(uint16_t h) {
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
    return (h & 0x8000) ? -mag : mag;
}

// Round-to-nearest-even f32 -> f16 in exact arithmetic: find the two halves around |x| among
// all finite halves (their values, as doubles, are exact) and take the nearer, the even one on
// a tie. Beyond the largest half, values at or past the midpoint to 2^16 become infinity.
uint16_t reference_f32_to_f16(float x) {
    static const std::vector<double> values = [] {
        std::vector<double> v;
        for (uint32_t h = 0; h <= kHalfMaxFinite; ++h) v.push_back(half_value(static_cast<uint16_t>(h)));
        return v;
    }();
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= 65520.0) return sign | kHalfInf;  // 65504 + half an ulp (16) ties to even: inf
    // lo: the largest half <= a (values are increasing with the bits).
    const auto it = std::upper_bound(values.begin(), values.end(), a);
    const auto lo = static_cast<uint16_t>(it - values.begin() - 1);
    if (lo == kHalfMaxFinite) return sign | lo;
    const double below = a - values[lo];
    const double above = values[lo + 1] - a;
    uint16_t r = lo;
    if (above < below || (above == below && (lo & 1))) r = static_cast<uint16_t>(lo + 1);
    return sign | r;
}

// Round-to-nearest-even f32 -> bf16 in exact arithmetic: the candidates are the truncation and
// the next bf16 up in magnitude (possibly infinity, whose "value" is 2^128 for this purpose).
uint16_t reference_f32_to_bf16(float x) {
    const uint32_t bits = f32_to_bits(x);
    const uint16_t lo = static_cast<uint16_t>(bits >> 16);
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const double a = std::fabs(static_cast<double>(x));
    const double lo_value = std::fabs(static_cast<double>(bits_to_f32(static_cast<uint32_t>(lo) << 16)));
    const double hi_value = (hi & 0x7fff) == 0x7f80
                                ? std::ldexp(1.0, 128)
                                : std::fabs(static_cast<double>(bits_to_f32(static_cast<uint32_t>(hi) << 16)));
    const double below = a - lo_value;
    const double above = hi_value - a;
    if (above < below || (above == below && (lo & 1))) return hi;
    return lo;
}

// ---- f16 -> f32 -------------------------------------------------------------------------------

TEST(Fp16, F16ToF32AllHalves) {
    for (uint32_t i = 0; i <= 0xffff; ++i) {
        const auto h = static_cast<uint16_t>(i);
        const float got = f16_to_f32(h);
        if (half_is_nan(h)) {
            EXPECT_TRUE(std::isnan(got)) << std::hex << h;
            EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
            continue;
        }
        ASSERT_EQ(f32_to_bits(got), reference_f16_to_f32_bits(h)) << "half 0x" << std::hex << h;
        if ((h & 0x7c00) != 0x7c00) {
            ASSERT_EQ(static_cast<double>(got), half_value(h)) << std::hex << h;
        }
    }
}

TEST(Fp16, F16ToF32SpecialValues) {
    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
    EXPECT_EQ(f32_to_bits(f16_to_f32(0x8000)), 0x80000000u);
    EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
    EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
}

// ---- f32 -> f16 -------------------------------------------------------------------------------

TEST(Fp16, F32ToF16RoundTripsEveryHalf) {
    for (uint32_t i = 0; i <= 0xffff; ++i) {
        const auto h = static_cast<uint16_t>(i);
        const uint16_t back = f32_to_f16(f16_to_f32(h));
        if (half_is_nan(h)) {
            EXPECT_TRUE(half_is_nan(back)) << std::hex << h << " -> " << back;
            EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
        } else {
            ASSERT_EQ(back, h) << std::hex << h;
        }
    }
}

// For every pair of neighbouring finite halves: the exact midpoint rounds to the even one, and
// the floats just below and above it round down and up. Midpoints need 12 significant bits, so
// they are exact floats.
TEST(Fp16, F32ToF16MidpointsRoundToEven) {
    for (uint32_t lo = 0; lo < kHalfMaxFinite; ++lo) {
        const auto hi = static_cast<uint16_t>(lo + 1);
        const auto even = static_cast<uint16_t>((lo & 1) ? hi : lo);
        const float mid = static_cast<float>((half_value(static_cast<uint16_t>(lo)) + half_value(hi)) / 2);
        ASSERT_EQ(static_cast<double>(mid), (half_value(static_cast<uint16_t>(lo)) + half_value(hi)) / 2);
        for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
            const float m = sign ? -mid : mid;
            const float toward_zero = std::nextafter(m, 0.0f);
            const float away =
                std::nextafter(m, sign ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity());
            ASSERT_EQ(f32_to_f16(m), sign | even) << "midpoint above 0x" << std::hex << (sign | lo);
            ASSERT_EQ(f32_to_f16(toward_zero), sign | lo) << "below midpoint above 0x" << std::hex << (sign | lo);
            ASSERT_EQ(f32_to_f16(away), sign | hi) << "above midpoint above 0x" << std::hex << (sign | lo);
        }
    }
}

TEST(Fp16, F32ToF16Overflow) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(f32_to_f16(65504.0f), kHalfMaxFinite);
    EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), kHalfMaxFinite);
    EXPECT_EQ(f32_to_f16(65520.0f), kHalfInf);  // tie between 65504 (odd) and 2^16: even = inf
    EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
    EXPECT_EQ(f32_to_f16(1e10f), kHalfInf);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), kHalfInf);
    EXPECT_EQ(f32_to_f16(inf), kHalfInf);
    EXPECT_EQ(f32_to_f16(-inf), 0xfc00);
}

TEST(Fp16, F32ToF16SubnormalsAndZero) {
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal half
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24: even = 0
    EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
    EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);     // tie between 1 and 2 ulps: even = 2
    EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
    EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up to the smallest normal
    EXPECT_EQ(f32_to_f16(1e-30f), 0x0000);
    EXPECT_EQ(f32_to_f16(-1e-30f), 0x8000);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
    EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

TEST(Fp16, F32ToF16Nan) {
    for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7f802000u, 0x7fffffffu, 0xffc00000u, 0xff800001u}) {
        const uint16_t h = f32_to_f16(bits_to_f32(bits));
        EXPECT_TRUE(half_is_nan(h)) << std::hex << bits << " -> " << h;
        EXPECT_EQ(h & 0x8000, static_cast<int>((bits >> 16) & 0x8000)) << std::hex << bits;
    }
}

TEST(Fp16, F32ToF16RandomFloatsMatchExactRounding) {
    std::mt19937 rng(1234);
    // Uniform bit patterns (mostly far outside the half range) ...
    for (int i = 0; i < 200000; ++i) {
        const float x = bits_to_f32(static_cast<uint32_t>(rng()));
        if (std::isnan(x)) continue;
        ASSERT_EQ(f32_to_f16(x), reference_f32_to_f16(x)) << std::hexfloat << x;
    }
    // ... and floats spread over the half range and a little beyond, every mantissa bit random.
    std::uniform_int_distribution<int> exp(-27, 17);
    for (int i = 0; i < 400000; ++i) {
        const uint32_t mant = static_cast<uint32_t>(rng()) & 0x7fffffu;
        const uint32_t sign = static_cast<uint32_t>(rng()) & 0x80000000u;
        const float x = bits_to_f32(sign | (static_cast<uint32_t>(exp(rng) + 127) << 23) | mant);
        ASSERT_EQ(f32_to_f16(x), reference_f32_to_f16(x)) << std::hexfloat << x;
    }
}

// ---- bf16 ---------------------------------------------------------------------------------------

TEST(Bf16, ToF32IsTheTopHalf) {
    for (uint32_t i = 0; i <= 0xffff; ++i) ASSERT_EQ(f32_to_bits(bf16_to_f32(static_cast<uint16_t>(i))), i << 16);
}

TEST(Bf16, RoundTripsEveryValue) {
    for (uint32_t i = 0; i <= 0xffff; ++i) {
        const auto h = static_cast<uint16_t>(i);
        const uint16_t back = f32_to_bf16(bf16_to_f32(h));
        if (bf16_is_nan(h)) {
            EXPECT_TRUE(bf16_is_nan(back)) << std::hex << h << " -> " << back;
            EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
        } else {
            ASSERT_EQ(back, h) << std::hex << h;
        }
    }
}

TEST(Bf16, MidpointsRoundToEven) {
    for (uint32_t lo = 0; lo < 0x7f80; ++lo) {          // every finite non-negative bf16
        const auto hi = static_cast<uint16_t>(lo + 1);  // 0x7f80 (inf) after the largest finite
        const auto even = static_cast<uint16_t>((lo & 1) ? hi : lo);
        for (uint32_t sign : {0u, 0x80000000u}) {
            const uint32_t mid = sign | (lo << 16) | 0x8000u;
            const uint16_t s = static_cast<uint16_t>(sign >> 16);
            ASSERT_EQ(f32_to_bf16(bits_to_f32(mid)), s | even) << std::hex << mid;
            ASSERT_EQ(f32_to_bf16(bits_to_f32(mid - 1)), s | lo) << std::hex << mid;
            ASSERT_EQ(f32_to_bf16(bits_to_f32(mid + 1)), s | hi) << std::hex << mid;
        }
    }
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
}

TEST(Bf16, NanStaysNan) {
    // Payloads only in the low 16 bits would truncate to infinity; they must stay NaN.
    for (uint32_t bits : {0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fc00000u, 0x7fffffffu, 0xffffffffu, 0x7fbfffffu}) {
        const uint16_t h = f32_to_bf16(bits_to_f32(bits));
        EXPECT_TRUE(bf16_is_nan(h)) << std::hex << bits << " -> " << h;
        EXPECT_EQ(h & 0x8000, static_cast<int>((bits >> 16) & 0x8000)) << std::hex << bits;
    }
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
    EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
}

TEST(Bf16, RandomFloatsMatchExactRounding) {
    std::mt19937 rng(4321);
    for (int i = 0; i < 1000000; ++i) {
        const float x = bits_to_f32(static_cast<uint32_t>(rng()));
        if (std::isnan(x)) continue;
        ASSERT_EQ(f32_to_bf16(x), reference_f32_to_bf16(x)) << std::hexfloat << x;
    }
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000u)), 0x3f80);  // tie, 0x3f80 even
    EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000u)), 0x3f82);  // tie, 0x3f81 odd -> up
}

}  // namespace
}  // namespace strata
