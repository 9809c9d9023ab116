#include "quant/types.h"

#include <array>
#include <cctype>
#include <string>

#include "quant/blocks.h"

namespace strata::quant {
namespace {

constexpr TypeInfo kTypes[] = {
    {Type::F32, "f32", 1, 4, false, true},
    {Type::F16, "f16", 1, 2, false, true},
    {Type::Q4_0, "q4_0", 32, sizeof(BlockQ4_0), true, true},
    {Type::Q4_1, "q4_1", 32, sizeof(BlockQ4_1), true, true},
    {Type::Q5_0, "q5_0", 32, sizeof(BlockQ5_0), true, true},
    {Type::Q5_1, "q5_1", 32, sizeof(BlockQ5_1), true, true},
    {Type::Q8_0, "q8_0", 32, sizeof(BlockQ8_0), true, true},
    {Type::Q8_1, "q8_1", 32, sizeof(BlockQ8_1), true, false},
    {Type::Q2_K, "q2_K", kQK, sizeof(BlockQ2_K), true, true},
    {Type::Q3_K, "q3_K", kQK, sizeof(BlockQ3_K), true, true},
    {Type::Q4_K, "q4_K", kQK, sizeof(BlockQ4_K), true, true},
    {Type::Q5_K, "q5_K", kQK, sizeof(BlockQ5_K), true, true},
    {Type::Q6_K, "q6_K", kQK, sizeof(BlockQ6_K), true, true},
    {Type::Q8_K, "q8_K", kQK, sizeof(BlockQ8_K), true, false},
    {Type::IQ2_XXS, "iq2_xxs", kQK, sizeof(BlockIQ2_XXS), true, true},
    {Type::IQ2_XS, "iq2_xs", kQK, sizeof(BlockIQ2_XS), true, true},
    {Type::IQ3_XXS, "iq3_xxs", kQK, sizeof(BlockIQ3_XXS), true, true},
    {Type::IQ1_S, "iq1_s", kQK, sizeof(BlockIQ1_S), true, true},
    {Type::IQ4_NL, "iq4_nl", 32, sizeof(BlockIQ4_NL), true, true},
    {Type::IQ3_S, "iq3_s", kQK, sizeof(BlockIQ3_S), true, true},
    {Type::IQ2_S, "iq2_s", kQK, sizeof(BlockIQ2_S), true, true},
    {Type::IQ4_XS, "iq4_xs", kQK, sizeof(BlockIQ4_XS), true, true},
    {Type::I8, "i8", 1, 1, false, false},
    {Type::I16, "i16", 1, 2, false, false},
    {Type::I32, "i32", 1, 4, false, false},
    {Type::I64, "i64", 1, 8, false, false},
    {Type::F64, "f64", 1, 8, false, false},
    {Type::IQ1_M, "iq1_m", kQK, sizeof(BlockIQ1_M), true, true},
    {Type::BF16, "bf16", 1, 2, false, true},
    {Type::TQ1_0, "tq1_0", kQK, sizeof(BlockTQ1_0), true, true},
    {Type::TQ2_0, "tq2_0", kQK, sizeof(BlockTQ2_0), true, true},
    {Type::MXFP4, "mxfp4", 32, sizeof(BlockMXFP4), true, true},
};

constexpr uint32_t kMaxId = 40;

constexpr std::array<const TypeInfo*, kMaxId> make_index() {
    std::array<const TypeInfo*, kMaxId> idx{};
    for (const TypeInfo& t : kTypes) idx[static_cast<uint32_t>(t.type)] = &t;
    return idx;
}

constexpr auto kIndex = make_index();

}  // namespace

const TypeInfo* type_info(uint32_t id) { return id < kMaxId ? kIndex[id] : nullptr; }

const TypeInfo& type_info(Type t) { return *kIndex[static_cast<uint32_t>(t)]; }

const char* type_name(Type t) { return type_info(t).name; }

std::optional<Type> type_from_name(std::string_view name) {
    for (const TypeInfo& t : kTypes) {
        std::string_view n = t.name;
        if (n.size() != name.size()) continue;
        bool eq = true;
        for (size_t i = 0; i < n.size() && eq; ++i)
            eq = std::tolower(static_cast<unsigned char>(n[i])) == std::tolower(static_cast<unsigned char>(name[i]));
        if (eq) return t.type;
    }
    return std::nullopt;
}

std::optional<uint64_t> row_bytes(Type t, uint64_t n) {
    const TypeInfo& ti = type_info(t);
    const uint64_t be = static_cast<uint64_t>(ti.block_elems);
    if (n % be != 0) return std::nullopt;
    const uint64_t blocks = n / be;
    const uint64_t bb = static_cast<uint64_t>(ti.block_bytes);
    if (blocks != 0 && bb > UINT64_MAX / blocks) return std::nullopt;
    return blocks * bb;
}

}  // namespace strata::quant
