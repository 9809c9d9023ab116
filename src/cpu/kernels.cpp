#include "cpu/kernels.h"

#include <string>

#include "cpu/kernel_registry.h"
#include "quant/blocks.h"
#include "util/error.h"

namespace strata::cpu {

using quant::Type;

const char* act_format_name(ActFormat f) {
    switch (f) {
        case ActFormat::F32: return "f32";
        case ActFormat::BF16: return "bf16";
        case ActFormat::Q8_0: return "q8_0";
        case ActFormat::Q8_K: return "q8_K";
        case ActFormat::Q8_1: return "q8_1";
    }
    return "?";
}

int64_t act_block_elems(ActFormat f) {
    switch (f) {
        case ActFormat::F32:
        case ActFormat::BF16: return 1;
        case ActFormat::Q8_0:
        case ActFormat::Q8_1: return 32;
        case ActFormat::Q8_K: return quant::kQK;
    }
    return 1;
}

size_t act_row_bytes(ActFormat f, int64_t n) {
    const auto un = static_cast<size_t>(n);
    switch (f) {
        case ActFormat::F32: return un * 4;
        case ActFormat::BF16: return un * 2;
        case ActFormat::Q8_0: return un / 32 * sizeof(quant::BlockQ8_0);
        case ActFormat::Q8_K: return un / quant::kQK * sizeof(quant::BlockQ8_K);
        case ActFormat::Q8_1: return un / 32 * sizeof(quant::BlockQ8_1Act);
    }
    return 0;
}

std::optional<ActFormat> act_format_for(Type t) {
    switch (t) {
        case Type::F32:
        case Type::F16:
        case Type::BF16: return ActFormat::F32;
        case Type::Q8_0:
        case Type::Q4_0:
        case Type::Q5_0:
        case Type::IQ4_NL:
        case Type::MXFP4: return ActFormat::Q8_0;
        case Type::Q4_1:
        case Type::Q5_1: return ActFormat::Q8_1;
        case Type::Q2_K:
        case Type::Q3_K:
        case Type::Q4_K:
        case Type::Q5_K:
        case Type::Q6_K:
        case Type::IQ2_XXS:
        case Type::IQ2_XS:
        case Type::IQ2_S:
        case Type::IQ3_XXS:
        case Type::IQ3_S:
        case Type::IQ4_XS: return ActFormat::Q8_K;
        default: return std::nullopt;
    }
}

namespace {

void apply(KernelSet& ks, const detail::KernelTable& table, bool have_bf16) {
    for (size_t i = 0; i < table.n_dots; ++i) {
        const auto& e = table.dots[i];
        if (e.needs_bf16 && !have_bf16) continue;
        ks.dot[static_cast<uint32_t>(e.type)] = e.fn;
    }
    for (size_t i = 0; i < table.n_acts; ++i) ks.quantize[static_cast<int>(table.acts[i].fmt)] = table.acts[i].fn;
}

KernelSet build(Isa isa) {
    KernelSet ks;
    ks.isa = isa;
    apply(ks, detail::kScalarKernels, false);
    apply(ks, detail::kScalarIquantKernels, false);
    apply(ks, detail::kScalarActKernels, false);
    ks.swiglu = detail::kScalarSwiglu;
    ks.rms_norm = detail::kScalarRmsNorm;
    if (isa == Isa::Scalar) return ks;
    ks.swiglu = detail::kAvx2Swiglu;
    ks.rms_norm = detail::kAvx2RmsNorm;
    apply(ks, detail::kAvx2ActKernels, false);
    apply(ks, detail::kAvx2LegacyKernels, false);
    apply(ks, detail::kAvx2KquantKernels, false);
    apply(ks, detail::kAvx2IquantKernels, false);
    if (isa == Isa::Avx2) return ks;
    const bool bf16 = has_avx512_bf16();
    ks.swiglu = detail::kAvx512Swiglu;
    ks.rms_norm = detail::kAvx512RmsNorm;
    apply(ks, detail::kAvx512ActKernels, bf16);
    apply(ks, detail::kAvx512LegacyKernels, bf16);
    apply(ks, detail::kAvx512KquantKernels, bf16);
    apply(ks, detail::kAvx512IquantKernels, bf16);
    if (util::has_avx512_vbmi()) apply(ks, detail::kAvx512VbmiKernels, bf16);
    return ks;
}

}  // namespace

const KernelSet& kernel_set(Isa isa) {
    if (!isa_supported(isa)) {
        throw Error(std::string("this CPU cannot run the ") + isa_name(isa) + " kernels (it supports up to " +
                    isa_name(detected_isa()) + ")");
    }
    static const KernelSet scalar = build(Isa::Scalar);
    if (isa == Isa::Scalar) return scalar;
    static const KernelSet avx2 = build(Isa::Avx2);
    if (isa == Isa::Avx2) return avx2;
    static const KernelSet avx512 = build(Isa::Avx512);
    return avx512;
}

const KernelSet& default_kernels() {
    static const KernelSet& ks = kernel_set(best_isa());
    return ks;
}

std::vector<Type> supported_weight_types() {
    std::vector<Type> out;
    const KernelSet& ks = kernel_set(Isa::Scalar);
    for (uint32_t id = 0; id < kTypeSlots; ++id) {
        if (ks.dot[id] != nullptr) out.push_back(static_cast<Type>(id));
    }
    return out;
}

}  // namespace strata::cpu
