// Half-precision conversions with exactly the semantics GGUF files assume:
// f16 -> f32 is exact (subnormals, inf, nan kept); f32 -> f16 rounds to nearest even;
// bf16 is the top 16 bits of an f32, f32 -> bf16 rounds to nearest even and keeps nan quiet.
#pragma once

#include <cstdint>
#include <cstring>

namespace strata {

inline float bits_to_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint32_t f32_to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float f16_to_f32(uint16_t h) {
    // Scale the shifted bits by 2^-112 (exponent rebias 127-15); subnormals fall out of the
    // float multiply, inf/nan are patched separately.
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp_mant = h & 0x7fffu;
    if (exp_mant >= 0x7c00u) {  // inf or nan
        return bits_to_f32(sign | 0x7f800000u | (static_cast<uint32_t>(exp_mant & 0x3ffu) << 13));
    }
    const float mag = bits_to_f32(exp_mant << 13) * bits_to_f32(0x77800000u);  // * 2^112
    return bits_to_f32(sign | f32_to_bits(mag));
}

inline uint16_t f32_to_f16(float f) {
    const uint32_t x = f32_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // nan
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (abs < 0x38800000u) {                      // result is subnormal or zero: let float addition round it
        const float r = bits_to_f32(abs) + 0.5f;  // 0.5 = 2^-1: ulp of f16 subnormals is 2^-24
        return static_cast<uint16_t>(sign | (f32_to_bits(r) - 0x3f000000u));
    }
    // normal: rebias exponent and round mantissa 23 -> 10 bits, nearest even
    const uint32_t odd = (abs >> 13) & 1u;
    const uint32_t r = abs + 0xc8000fffu + odd;  // (-(127-15) << 23) + 0xfff + odd
    return static_cast<uint16_t>(sign | (r >> 13));
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
    const uint32_t x = f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64u);  // quiet nan
    return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

}  // namespace strata
