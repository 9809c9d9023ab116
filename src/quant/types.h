// The tensor element types GGUF files use, numbered as GGUF numbers them, with their block geometry.
// Layouts of the blocks themselves are in blocks.h; this header is what the file layer needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata::quant {

enum class Type : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

struct TypeInfo {
    Type type;
    const char* name;     // lower-case GGUF name: "f32", "q4_K", "iq3_xxs"
    int64_t block_elems;  // values per block (1 for plain types)
    int64_t block_bytes;  // bytes per block
    bool quantized;       // true for block types
    bool can_dequantize;  // we have a reference dequantizer for it
};

// Info for a raw GGUF type id, or nullptr when the id is not a type we know.
const TypeInfo* type_info(uint32_t id);
const TypeInfo& type_info(Type t);
const char* type_name(Type t);
// Parses a case-insensitive type name ("Q4_K", "q4_k", "iq4_xs"); nullopt when unknown.
std::optional<Type> type_from_name(std::string_view name);

// Bytes needed for n values of type t; nullopt when n is not a whole number of blocks or the
// result overflows.
std::optional<uint64_t> row_bytes(Type t, uint64_t n);

// Unquantised: f32, f16 or bf16.
inline bool is_float_type(Type t) { return t == Type::F32 || t == Type::F16 || t == Type::BF16; }

}  // namespace strata::quant
