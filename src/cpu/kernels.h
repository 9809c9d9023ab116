// The kernel table: for every weight type, the dot-product kernel of the chosen instruction-set
// level and the activation format it consumes; for every activation format, the quantiser that
// makes it from f32. One KernelSet per level, filled once; callers pick a set at startup
// (default_kernels()) and index it by type, so nothing branches per row.
//
// Activation formats (what x is turned into before the dot products):
//   Q8_0 (32 int8 + f16 scale)           for Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4 weights
//   Q8_1 (32 int8 + f32 d + f32 d * sum) for Q4_1, Q5_1 weights (their min multiplies the
//                                         activation block's sum)
//   Q8_K (256 int8 + f32 scale + 16 sums) for the k-quants and the 256-block i-quants
//   F32                                   for F32, F16 and BF16 weights (widened to f32 in
//                                         registers, FMA): a bf16 or f16 model computes like its
//                                         f32 reference (bf16-rounded activations would cost ~1e-3
//                                         in the logits)
//   BF16                                  a quantiser only; no weight type consumes it today
// Integer kernels multiply 8-bit activations exactly; their only rounding is the f32 scaling
// and summation of per-block integer sums, so every level gives the scalar result up to float
// summation order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "quant/types.h"
#include "util/cpu_features.h"

namespace strata::cpu {

// The instruction-set levels (util/cpu_features.h) are the kernel sets' vocabulary.
using util::best_isa;
using util::detected_isa;
using util::has_avx512_bf16;
using util::Isa;
using util::isa_name;
using util::isa_supported;

enum class ActFormat : uint8_t { F32 = 0, BF16 = 1, Q8_0 = 2, Q8_K = 3, Q8_1 = 4 };
constexpr int kActFormatCount = 5;

const char* act_format_name(ActFormat f);
int64_t act_block_elems(ActFormat f);          // 1, 1, 32, 256, 32
size_t act_row_bytes(ActFormat f, int64_t n);  // n: a multiple of act_block_elems(f)
// Activation format the kernels of weight type t consume; nullopt when t has no kernel.
std::optional<ActFormat> act_format_for(quant::Type t);

// A tile of dot products: y[c][r] = W_r . A_c for r < rows, c < cols, where W_r is the weight
// row at w + r * w_stride and A_c the activation row a[c] (n values each, in the type's
// activation format). Kernels go over the tile row by row, dotting each weight row with all the
// columns while it is in L1, a few columns per pass over the row.
struct DotTile {
    int64_t n = 0;
    const uint8_t* w = nullptr;
    size_t w_stride = 0;
    int64_t rows = 0;
    const uint8_t* const* a = nullptr;
    float* const* y = nullptr;
    int64_t cols = 0;
};

using DotFn = void (*)(const DotTile& tile);
// Converts n f32 values (a multiple of the format's block) into the format at dst.
using QuantizeActFn = void (*)(const float* x, void* dst, int64_t n);
// out[i] = silu(gate[i]) * up[i] for i < n; out may be gate or up. The scalar level's is the
// reference (std::exp); the vector levels' exp is a polynomial (relative error ~1e-6).
using SwigluFn = void (*)(const float* gate, const float* up, float* out, int64_t n);
// out = x / sqrt(mean(x^2) + eps) * w over n values (w null: no scale); out may be x. The scalar
// level's sums in double one value at a time (the reference); the vector levels' in 16 float lanes.
using RmsNormFn = void (*)(const float* x, const float* w, int64_t n, float eps, float* out);

constexpr int kTypeSlots = 40;  // > largest quant::Type id

struct KernelSet {
    Isa isa = Isa::Scalar;
    DotFn dot[kTypeSlots] = {};                    // by quant::Type id; nullptr = no kernel
    QuantizeActFn quantize[kActFormatCount] = {};  // by ActFormat
    SwigluFn swiglu = nullptr;                     // every level has one
    RmsNormFn rms_norm = nullptr;                  // every level has one

    DotFn dot_for(quant::Type t) const {
        const auto id = static_cast<uint32_t>(t);
        return id < kTypeSlots ? dot[id] : nullptr;
    }
    QuantizeActFn quantize_for(ActFormat f) const { return quantize[static_cast<int>(f)]; }
};

// The set of one level: scalar kernels overlaid by that level's (a level without a kernel of
// its own for a type uses the next lower level's). Throws strata::Error when the CPU cannot
// run the level.
const KernelSet& kernel_set(Isa isa);
// kernel_set(best_isa()).
const KernelSet& default_kernels();
// Weight types with a dot kernel (the same list at every level).
std::vector<quant::Type> supported_weight_types();

}  // namespace strata::cpu
