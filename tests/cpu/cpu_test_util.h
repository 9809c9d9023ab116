// Shared helpers of the CPU kernel tests: test weights per type, dequantised activations,
// levels to test.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "test_util.h"
#include "util/cpu_features.h"
#include "util/error.h"
#include "util/fp16.h"

namespace strata::test {

// Offsets of the f16 scale fields of a block type (for the random-bytes path).
inline std::vector<size_t> half_fields(quant::Type t) {
    using namespace quant;
    switch (t) {
        case Type::Q2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
        case Type::Q3_K: return {offsetof(BlockQ3_K, d)};
        case Type::Q4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
        case Type::Q5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
        case Type::Q6_K: return {offsetof(BlockQ6_K, d)};
        case Type::Q8_0: return {offsetof(BlockQ8_0, d)};
        case Type::Q4_0: return {offsetof(BlockQ4_0, d)};
        case Type::Q4_1: return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
        case Type::Q5_0: return {offsetof(BlockQ5_0, d)};
        case Type::Q5_1: return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
        case Type::IQ4_NL: return {offsetof(BlockIQ4_NL, d)};
        case Type::IQ4_XS: return {offsetof(BlockIQ4_XS, d)};
        case Type::IQ2_XXS: return {offsetof(BlockIQ2_XXS, d)};
        case Type::IQ2_XS: return {offsetof(BlockIQ2_XS, d)};
        case Type::IQ2_S: return {offsetof(BlockIQ2_S, d)};
        case Type::IQ3_XXS: return {offsetof(BlockIQ3_XXS, d)};
        case Type::IQ3_S: return {offsetof(BlockIQ3_S, d)};
        default: return {};
    }
}

// rows x n weights of type t: quantised random floats where a quantiser exists, else random
// bytes with finite, positive scales (every i-quant grid index is valid). Outlier-bearing data,
// never all zeros.
inline std::vector<uint8_t> make_weights(quant::Type t, int64_t rows, int64_t n, uint32_t seed,
                                         bool prefer_random_bytes = false) {
    const size_t row_bytes = static_cast<size_t>(*quant::row_bytes(t, static_cast<uint64_t>(n)));
    std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
    if (quant::can_quantize(t) && !prefer_random_bytes) {
        for (int64_t r = 0; r < rows; ++r) {
            const auto v = random_floats(static_cast<size_t>(n), seed * 7919u + static_cast<uint32_t>(r), 0.05f);
            quant::quantize_row(t, v.data(), out.data() + static_cast<size_t>(r) * row_bytes, n);
        }
        return out;
    }
    std::mt19937 rng(seed);
    for (auto& b : out) b = static_cast<uint8_t>(rng());
    const auto& info = quant::type_info(t);
    const size_t bb = static_cast<size_t>(info.block_bytes);
    const size_t n_blocks = out.size() / bb;
    std::uniform_real_distribution<float> scale(0.002f, 0.02f);
    for (size_t b = 0; b < n_blocks; ++b) {
        for (size_t off : half_fields(t)) {
            const uint16_t h = f32_to_f16(scale(rng));
            std::memcpy(out.data() + b * bb + off, &h, 2);
        }
        if (t == quant::Type::MXFP4) out[b * bb] = static_cast<uint8_t>(118 + rng() % 12);  // 2^-10 .. 2^1
    }
    return out;
}

inline std::vector<float> dequant_weights(quant::Type t, const uint8_t* row, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    quant::dequantize_row(t, row, out.data(), n);
    return out;
}

// Dequantised activation row (what the kernels actually multiply) in any format.
inline std::vector<float> dequant_acts(cpu::ActFormat f, const uint8_t* row, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    switch (f) {
        case cpu::ActFormat::F32: std::memcpy(out.data(), row, static_cast<size_t>(n) * 4); break;
        case cpu::ActFormat::BF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, row + 2 * i, 2);
                out[static_cast<size_t>(i)] = bf16_to_f32(h);
            }
            break;
        case cpu::ActFormat::Q8_0:
            for (int64_t b = 0; b < n / 32; ++b) {
                quant::BlockQ8_0 blk;
                std::memcpy(&blk, row + b * sizeof blk, sizeof blk);
                for (int j = 0; j < 32; ++j) out[static_cast<size_t>(32 * b + j)] = f16_to_f32(blk.d) * blk.qs[j];
            }
            break;
        case cpu::ActFormat::Q8_1:
            for (int64_t b = 0; b < n / 32; ++b) {
                quant::BlockQ8_1Act blk;
                std::memcpy(&blk, row + b * sizeof blk, sizeof blk);
                for (int j = 0; j < 32; ++j) out[static_cast<size_t>(32 * b + j)] = blk.d * blk.qs[j];
            }
            break;
        case cpu::ActFormat::Q8_K:
            for (int64_t b = 0; b < n / quant::kQK; ++b) {
                quant::BlockQ8_K blk;
                std::memcpy(&blk, row + b * sizeof blk, sizeof blk);
                for (int j = 0; j < quant::kQK; ++j) out[static_cast<size_t>(quant::kQK * b + j)] = blk.d * blk.qs[j];
            }
            break;
    }
    return out;
}

// Levels above scalar, with whether this CPU can run them.
inline std::vector<util::Isa> simd_isas() { return {util::Isa::Avx2, util::Isa::Avx512}; }

#define STRATA_REQUIRE_ISA(isa)                                                                                        \
    do {                                                                                                               \
        if (!::strata::util::isa_supported(isa)) {                                                                     \
            GTEST_SKIP() << "CPU lacks " << ::strata::util::isa_name(isa) << " (has up to "                            \
                         << ::strata::util::isa_name(::strata::util::detected_isa()) << "): its kernels were not run"; \
        }                                                                                                              \
    } while (0)

// Row lengths to test for a type: several block counts, including odd ones.
inline std::vector<int64_t> test_lengths(quant::Type t) {
    const int64_t blk = quant::type_info(t).block_elems;
    if (blk == 1) return {1, 7, 8, 33, 64, 255, 4099};
    if (blk == 32) return {32, 96, 256, 1056, 4096};
    return {256, 768, 2816, 4096};
}

}  // namespace strata::test
