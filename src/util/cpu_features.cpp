#include "util/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace strata::util {

namespace {

struct Regs {
    uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t sub) {
    Regs r;
    __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
    return r;
}

// xgetbv(0) without needing -mxsave on this (baseline) file.
uint64_t read_xcr0() {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
    CpuFeatures f;
    const uint32_t max_leaf = __get_cpuid_max(0, nullptr);
    if (max_leaf < 1) return f;
    const Regs l1 = cpuid(1, 0);
    const bool osxsave = (l1.c >> 27) & 1;
    const bool avx = (l1.c >> 28) & 1;
    f.fma = (l1.c >> 12) & 1;
    f.f16c = (l1.c >> 29) & 1;
    if (osxsave && avx) {
        const uint64_t xcr0 = read_xcr0();
        f.os_ymm = (xcr0 & 0x6) == 0x6;                // XMM | YMM state
        f.os_zmm = f.os_ymm && (xcr0 & 0xe0) == 0xe0;  // opmask | ZMM_Hi256 | Hi16_ZMM
    }
    if (max_leaf >= 7) {
        const Regs l7 = cpuid(7, 0);
        f.avx2 = (l7.b >> 5) & 1;
        f.bmi2 = (l7.b >> 8) & 1;
        f.avx512f = (l7.b >> 16) & 1;
        f.avx512dq = (l7.b >> 17) & 1;
        f.avx512bw = (l7.b >> 30) & 1;
        f.avx512vl = (l7.b >> 31) & 1;
        f.avx512vnni = (l7.c >> 11) & 1;
        f.avx512vbmi = (l7.c >> 1) & 1;
        if (l7.a >= 1) f.avx512bf16 = (cpuid(7, 1).a >> 5) & 1;
    }
    return f;
}

Isa detect_isa(const CpuFeatures& f) {
    const bool avx2 = f.os_ymm && f.avx2 && f.fma && f.f16c && f.bmi2;
    if (!avx2) return Isa::Scalar;
#if defined(STRATA_AVX512_EMULATED)
    // Test-only build where the *_avx512.cpp files run on SIMDe's software AVX-512 (simd_avx512.h).
    return Isa::Avx512;
#endif
    const bool avx512 = f.os_zmm && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
    return avx512 ? Isa::Avx512 : Isa::Avx2;
}

Isa choose_isa() {
    const Isa hw = detected_isa();
    const char* env = std::getenv("STRATA_ISA");
    if (env == nullptr || *env == '\0') return hw;
    const auto want = isa_from_name(env);
    if (!want) return hw;  // unknown names are ignored rather than failing a run
    return static_cast<int>(*want) < static_cast<int>(hw) ? *want : hw;
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detect();
    return f;
}

Isa detected_isa() {
    static const Isa isa = detect_isa(cpu_features());
    return isa;
}

Isa best_isa() {
    static const Isa isa = choose_isa();
    return isa;
}

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(detected_isa()); }

bool has_avx512_bf16() {
#if defined(STRATA_AVX512_EMULATED)
    return true;
#else
    return detected_isa() == Isa::Avx512 && cpu_features().avx512bf16;
#endif
}

bool has_avx512_vbmi() {
#if defined(STRATA_AVX512_EMULATED)
    return false;
#else
    // STRATA_VBMI=0 leaves VBMI out (benches compare the kernels it replaces on the same CPU).
    static const bool off = [] {
        const char* env = std::getenv("STRATA_VBMI");
        return env != nullptr && std::string(env) == "0";
    }();
    return detected_isa() == Isa::Avx512 && cpu_features().avx512vbmi && !off;
#endif
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
    }
    return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
    std::string lower(name);
    for (char& ch : lower) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    if (lower == "scalar") return Isa::Scalar;
    if (lower == "avx2") return Isa::Avx2;
    if (lower == "avx512") return Isa::Avx512;
    return std::nullopt;
}

}  // namespace strata::util
