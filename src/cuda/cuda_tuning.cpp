// Reading the tuning table (cuda_tuning.h): one reader per kind of knob, applied to every row.
#include "cuda/cuda_tuning.h"

#include <cstdlib>
#include <string>

#include "util/error.h"

namespace strata::cuda {

namespace {

bool unset(const char* v) { return v == nullptr || *v == '\0'; }

// "0" / "1" as 0 / 1, anything else as -1 (the default stays).
int zero_or_one(const char* v) {
    if (v == nullptr) return -1;
    const std::string s(v);
    return s == "0" ? 0 : s == "1" ? 1 : -1;
}

void read(Switch, const char*, const char* v, bool& out) {
    if (const int b = zero_or_one(v); b >= 0) out = b == 1;
}
void read(Auto, const char*, const char* v, int& out) {
    if (const int b = zero_or_one(v); b >= 0) out = b;
}

int64_t count(const char* variable, const char* v) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (*end != '\0' || n < 0) throw Error(std::string(variable) + "=" + v + ": expected a count");
    return n;
}
void read(Count, const char* variable, const char* v, int64_t& out) {
    if (!unset(v)) out = count(variable, v);
}
void read(Positive, const char* variable, const char* v, int64_t& out) {
    if (unset(v)) return;
    out = count(variable, v);
    if (out < 1) throw Error(std::string(variable) + "=" + v + ": must be at least 1");
}
void read(RowsPerWarp, const char* variable, const char* v, int64_t& out) {
    if (unset(v)) return;
    out = count(variable, v);
    if (out != 0 && out != 1 && out != 2 && out != 4) throw Error(std::string(variable) + "=" + v + ": 1, 2 or 4 (0: by shape)");
}
void read(WarpsPerRow, const char* variable, const char* v, int64_t& out) {
    if (unset(v)) return;
    out = count(variable, v);
    if (out != 1 && out != 2) throw Error(std::string(variable) + "=" + v + ": 1 or 2");
}

#define STRATA_CUDA_TUNING_ROW(field, kind, value, variable, doc) {#field, variable, #value, doc},
constexpr TuningKnob kKnobs[] = {STRATA_CUDA_TUNING(STRATA_CUDA_TUNING_ROW)};
#undef STRATA_CUDA_TUNING_ROW

}  // namespace

std::span<const TuningKnob> tuning_knobs() { return kKnobs; }

CudaTuning tuning_from(const std::function<const char*(const char* variable)>& value_of) {
    CudaTuning t;
#define STRATA_CUDA_TUNING_READ(field, kind, value, variable, doc) read(kind{}, variable, value_of(variable), t.field);
    STRATA_CUDA_TUNING(STRATA_CUDA_TUNING_READ)
#undef STRATA_CUDA_TUNING_READ
    return t;
}

CudaTuning tuning_from_environment() {
    return tuning_from([](const char* variable) -> const char* { return std::getenv(variable); });
}

}  // namespace strata::cuda
