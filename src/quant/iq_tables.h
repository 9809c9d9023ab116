// Constant tables of the i-quants and the other non-linear formats (IQ4_NL/IQ4_XS, MXFP4).
//
// The i-quant grids are codebooks: a block stores an index per group of 8 (IQ2_*, IQ1_*) or 4
// (IQ3_*) values, and the grid entry holds those values as bytes, value j in byte j (little-endian,
// so the entry can be loaded straight into a SIMD register). The values are unsigned magnitudes
// for IQ2/IQ3 (signs are stored separately) and signed int8 in {-1, 0, +1} for IQ1.
// The tables are part of the file format: they must match the reference quantiser bit for bit.
#pragma once

#include <array>
#include <cstdint>

namespace strata::quant {

// IQ2 grids: 8 bytes from {0x08, 0x19, 0x2b} = {8, 25, 43}. All grids are 64-byte aligned.
alignas(64) extern const uint64_t kIq2XxsGrid[256];  // IQ2_XXS: 8-bit index
alignas(64) extern const uint64_t kIq2XsGrid[512];   // IQ2_XS: 9-bit index
alignas(64) extern const uint64_t kIq2SGrid[1024];   // IQ2_S: 10-bit index
// IQ3 grids: 4 bytes per entry.
alignas(64) extern const uint32_t kIq3XxsGrid[256];  // IQ3_XXS: values from {4, 12, 20, 28, 36, 44, 52, 62}
alignas(64) extern const uint32_t kIq3SGrid[512];    // IQ3_S: odd values 1..15
// IQ1 grid: 8 int8 values in {-1, 0, +1} (bytes 0xff, 0x00, 0x01), 11-bit index.
alignas(64) extern const uint64_t kIq1SGrid[2048];

// Added to every IQ1 grid value before scaling; the sign comes from a per-group bit.
constexpr float kIq1SDelta = 0.125f;
constexpr float kIq1MDelta = 0.125f;

// IQ2/IQ3 sign patterns: 7 stored bits give the signs of values 0..6 of a group of 8; the sign of
// value 7 is implied, making the number of negative values even (so 8 signs cost 7 bits).
// Entry i is the full 8-bit mask (bit j set = value j negative): i plus the parity bit in bit 7.
constexpr std::array<uint8_t, 128> make_iq_sign_masks() {
    std::array<uint8_t, 128> masks{};
    for (int i = 0; i < 128; ++i) {
        int ones = 0;
        for (int b = 0; b < 7; ++b) ones += (i >> b) & 1;
        masks[i] = static_cast<uint8_t>(i | ((ones & 1) << 7));
    }
    return masks;
}
inline constexpr std::array<uint8_t, 128> kIqSignMasks = make_iq_sign_masks();

// Bit j of a sign mask belongs to value j of the group.
inline constexpr uint8_t kIqSignBit[8] = {1, 2, 4, 8, 16, 32, 64, 128};

// IQ4_NL / IQ4_XS: the 16 levels a 4-bit code maps to (a non-uniform grid, denser near zero).
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// MXFP4 element codes: E2M1 (1 sign, 2 exponent, 1 mantissa bit), stored here doubled so that
// every value is an integer: code c means kMxfp4DoubledValues[c] / 2. Positive codes 0..7 are
// 0, 0.5, 1, 1.5, 2, 3, 4, 6; codes 8..15 are the negatives (8 is -0, which dequantises to 0).
inline constexpr int8_t kMxfp4DoubledValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

}  // namespace strata::quant
