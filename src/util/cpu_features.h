// What the CPU (and the OS, through XCR0) lets us run, detected once with cpuid/xgetbv, and the
// instruction-set level the kernels are chosen for.
//
// Levels: Scalar (baseline x86-64), Avx2 (AVX2 + FMA + F16C + BMI2: Haswell / Zen 1 and later),
// Avx512 (F + BW + VL + DQ + VNNI: Cascade Lake / Ice Lake / Zen 4 and later). AVX-512 BF16 is a
// separate flag: the Avx512 kernel set uses vdpbf16ps only when it is there.
//
// STRATA_ISA=scalar|avx2|avx512 lowers the level for tests and benches; it is capped at what the
// CPU supports (asking for more than that is ignored, with the real level kept).
#pragma once

#include <optional>
#include <string_view>

namespace strata::util {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool bmi2 = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512dq = false;
    bool avx512vnni = false;
    bool avx512bf16 = false;
    bool avx512vbmi = false;
    bool os_ymm = false;  // XCR0 has SSE + AVX state enabled
    bool os_zmm = false;  // XCR0 also has opmask + ZMM state enabled
};

// Detected once (thread-safe), then cached.
const CpuFeatures& cpu_features();

// Highest level the CPU and OS support, ignoring STRATA_ISA.
Isa detected_isa();
// detected_isa() lowered by STRATA_ISA when set (read once).
Isa best_isa();
// True when code of this level can run here.
bool isa_supported(Isa isa);
// Whether the Avx512 kernel set may use AVX-512 BF16 (vdpbf16ps).
bool has_avx512_bf16();
// Whether the Avx512 kernel set may use AVX-512 VBMI (vpermi2b, vpmultishiftqb): the i-quant
// grids decoded by byte permutes (vec_dot_iq3xxs_avx512vbmi.cpp). STRATA_VBMI=0 says no.
bool has_avx512_vbmi();

const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512"
std::optional<Isa> isa_from_name(std::string_view name);

}  // namespace strata::util
