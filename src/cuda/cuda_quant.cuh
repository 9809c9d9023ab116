// Device dequantisers: for each weight type a block geometry and dequant8(block, i, v), which
// writes values 8i .. 8i+7 of the block to v. The bit layouts are those of
// src/quant/dequant.cpp (the reference; see its comments); this file only regroups the work into
// groups of eight so a warp lane can own one group. Every block type is an even number of bytes
// and starts at an even offset, so 16-bit loads are always aligned.
//
// The i-quant grids and sign masks live in device memory (cuda_matmul.cu fills them from the
// host tables at start), so this header is included by that one translation unit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace strata::cuda {

__device__ uint64_t g_iq2xxs_grid[256];
__device__ uint64_t g_iq2xs_grid[512];
__device__ uint64_t g_iq2s_grid[1024];
__device__ uint32_t g_iq3xxs_grid[256];
__device__ uint32_t g_iq3s_grid[512];
__device__ uint8_t g_iq_sign_masks[128];
__constant__ int8_t c_iq4nl_values[16];

__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return ld16(p) | (ld16(p + 2) << 16); }
__device__ __forceinline__ float half_at(const uint8_t* p) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(ld16(p))));
}

struct DqF32 {
    static constexpr int kValues = 8, kBytes = 32;
    __device__ static void dequant8(const uint8_t* b, int, float* v) {
        const float4* p = reinterpret_cast<const float4*>(b);
        const float4 x = p[0], y = p[1];
        v[0] = x.x;
        v[1] = x.y;
        v[2] = x.z;
        v[3] = x.w;
        v[4] = y.x;
        v[5] = y.y;
        v[6] = y.z;
        v[7] = y.w;
    }
};
struct DqF16 {
    static constexpr int kValues = 8, kBytes = 16;
    __device__ static void dequant8(const uint8_t* b, int, float* v) {
        const uint4 q = *reinterpret_cast<const uint4*>(b);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
            v[2 * i] = f.x;
            v[2 * i + 1] = f.y;
        }
    }
};
struct DqBF16 {
    static constexpr int kValues = 8, kBytes = 16;
    __device__ static void dequant8(const uint8_t* b, int, float* v) {
        const uint4 q = *reinterpret_cast<const uint4*>(b);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = __uint_as_float(w[i] << 16);
            v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
};

// Legacy 32-value blocks: qs[j] holds value j (low nibble) and j + 16 (high nibble).
struct DqQ4_0 {
    static constexpr int kValues = 32, kBytes = 18;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const float d = half_at(b);
        const uint8_t* qs = b + 2 + 8 * (i & 1);
        const int shift = 4 * (i >> 1);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = static_cast<float>(((qs[j] >> shift) & 15) - 8) * d;
    }
};
struct DqQ4_1 {
    static constexpr int kValues = 32, kBytes = 20;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const float d = half_at(b), m = half_at(b + 2);
        const uint8_t* qs = b + 4 + 8 * (i & 1);
        const int shift = 4 * (i >> 1);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = static_cast<float>((qs[j] >> shift) & 15) * d + m;
    }
};
__device__ __forceinline__ int q5_code(const uint8_t* qs, uint32_t qh, int idx) {
    const int nibble = idx < 16 ? (qs[idx] & 15) : (qs[idx - 16] >> 4);
    return nibble | static_cast<int>(((qh >> idx) & 1u) << 4);
}
struct DqQ5_0 {
    static constexpr int kValues = 32, kBytes = 22;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const float d = half_at(b);
        const uint32_t qh = ld32(b + 2);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = static_cast<float>(q5_code(b + 6, qh, 8 * i + j) - 16) * d;
    }
};
struct DqQ5_1 {
    static constexpr int kValues = 32, kBytes = 24;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const float d = half_at(b), m = half_at(b + 2);
        const uint32_t qh = ld32(b + 4);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = static_cast<float>(q5_code(b + 8, qh, 8 * i + j)) * d + m;
    }
};
struct DqQ8_0 {
    static constexpr int kValues = 32, kBytes = 34;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const float d = half_at(b);
        const uint8_t* qs = b + 2 + 8 * i;
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
            const uint32_t w = ld16(qs + j);
            v[j] = static_cast<float>(static_cast<int8_t>(w & 0xff)) * d;
            v[j + 1] = static_cast<float>(static_cast<int8_t>(w >> 8)) * d;
        }
    }
};
struct DqIQ4_NL {
    static constexpr int kValues = 32, kBytes = 18;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const float d = half_at(b);
        const uint8_t* qs = b + 2 + 8 * (i & 1);
        const int shift = 4 * (i >> 1);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = d * static_cast<float>(c_iq4nl_values[(qs[j] >> shift) & 15]);
    }
};

// k-quants, 256-value super-blocks.
struct DqQ2_K {  // scales@0 [16], qs@16 [64], d@80, dmin@82
    static constexpr int kValues = 256, kBytes = 84;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int v0 = 8 * i, half = v0 >> 7, w = v0 & 127, pair = w >> 5, part = (w >> 4) & 1, l0 = w & 15;
        const int s = 8 * half + 2 * pair + part;
        const float dl = half_at(b + 80) * static_cast<float>(b[s] & 15);
        const float ml = half_at(b + 82) * static_cast<float>(b[s] >> 4);
        const uint8_t* q = b + 16 + 32 * half + 16 * part + l0;
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = dl * static_cast<float>((q[j] >> (2 * pair)) & 3) - ml;
    }
};
struct DqQ3_K {  // hmask@0 [32], qs@32 [64], scales@96 [12], d@108
    static constexpr int kValues = 256, kBytes = 110;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int v0 = 8 * i, half = v0 >> 7, w = v0 & 127, pair = w >> 5, part = (w >> 4) & 1, l0 = w & 15;
        const int s = 8 * half + 2 * pair + part;
        const uint8_t* sc = b + 96;
        const int low = s < 8 ? (sc[s] & 15) : (sc[s - 8] >> 4);
        const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        const float dl = half_at(b + 108) * static_cast<float>((low | (high << 4)) - 32);
        const uint8_t* q = b + 32 + 32 * half + 16 * part + l0;
        const uint8_t* hm = b + 16 * part + l0;
        const int bit = 1 << (4 * half + pair);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int code = ((q[j] >> (2 * pair)) & 3) - ((hm[j] & bit) ? 0 : 4);
            v[j] = dl * static_cast<float>(code);
        }
    }
};
__device__ __forceinline__ void k4_scale_min(const uint8_t* sc, int s, int& scale, int& min) {
    if (s < 4) {
        scale = sc[s] & 63;
        min = sc[s + 4] & 63;
    } else {
        scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
        min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
}
struct DqQ4_K {  // d@0, dmin@2, scales@4 [12], qs@16 [128]
    static constexpr int kValues = 256, kBytes = 144;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int v0 = 8 * i, c = v0 >> 6, nib = (v0 >> 5) & 1, l0 = v0 & 31;
        int sc, mn;
        k4_scale_min(b + 4, 2 * c + nib, sc, mn);
        const float dl = half_at(b) * static_cast<float>(sc), ml = half_at(b + 2) * static_cast<float>(mn);
        const uint32_t lo = ld32(b + 16 + 32 * c + l0), hi = ld32(b + 20 + 32 * c + l0);
        const int shift = 4 * nib;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[j] = dl * static_cast<float>((lo >> (8 * j + shift)) & 15) - ml;
            v[j + 4] = dl * static_cast<float>((hi >> (8 * j + shift)) & 15) - ml;
        }
    }
};
struct DqQ5_K {  // d@0, dmin@2, scales@4 [12], qh@16 [32], qs@48 [128]
    static constexpr int kValues = 256, kBytes = 176;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int v0 = 8 * i, c = v0 >> 6, nib = (v0 >> 5) & 1, l0 = v0 & 31, s = 2 * c + nib;
        int sc, mn;
        k4_scale_min(b + 4, s, sc, mn);
        const float dl = half_at(b) * static_cast<float>(sc), ml = half_at(b + 2) * static_cast<float>(mn);
        const uint8_t* q = b + 48 + 32 * c + l0;
        const uint8_t* qh = b + 16 + l0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int code = ((q[j] >> (4 * nib)) & 15) | (((qh[j] >> s) & 1) << 4);
            v[j] = dl * static_cast<float>(code) - ml;
        }
    }
};
struct DqQ6_K {  // ql@0 [128], qh@128 [64], scales@192 [16] int8, d@208
    static constexpr int kValues = 256, kBytes = 210;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int v0 = 8 * i, half = v0 >> 7, w = v0 & 127, quarter = w >> 5, l0 = w & 31;
        const float dl = half_at(b + 208) * static_cast<float>(static_cast<int8_t>(b[192 + 8 * half + (w >> 4)]));
        const uint8_t* ql = b + 64 * half + 32 * (quarter & 1) + l0;
        const uint8_t* qh = b + 128 + 32 * half + l0;
        const int ls = 4 * (quarter >> 1), hs = 2 * quarter;
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
            const uint32_t lw = ld16(ql + j), hw = ld16(qh + j);
            const int c0 = ((lw >> ls) & 15) | (((hw >> hs) & 3) << 4);
            const int c1 = ((lw >> (8 + ls)) & 15) | (((hw >> (8 + hs)) & 3) << 4);
            v[j] = dl * static_cast<float>(c0 - 32);
            v[j + 1] = dl * static_cast<float>(c1 - 32);
        }
    }
};

// i-quants: group of 8 number i = 4g + l (g: group of 32, l: group of 8 within it).
__device__ __forceinline__ void signed_grid8(float* v, float scale, uint64_t entry, uint32_t signs) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float x = scale * static_cast<float>((entry >> (8 * j)) & 0xff);
        v[j] = (signs >> j) & 1 ? -x : x;
    }
}
__device__ __forceinline__ void signed_grid4x2(float* v, float scale, uint32_t first, uint32_t second, uint32_t signs) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float a = scale * static_cast<float>((first >> (8 * j)) & 0xff);
        const float c = scale * static_cast<float>((second >> (8 * j)) & 0xff);
        v[j] = (signs >> j) & 1 ? -a : a;
        v[j + 4] = (signs >> (j + 4)) & 1 ? -c : c;
    }
}
struct DqIQ2_XXS {  // d@0, qs@2: per group of 32, 4 index bytes then a u32 of signs and scale
    static constexpr int kValues = 256, kBytes = 66;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int g = i >> 2, l = i & 3;
        const uint8_t* q = b + 2 + 8 * g;
        const uint32_t w = ld32(q + 4);
        const float db = half_at(b) * (0.5f + static_cast<float>(w >> 28)) * 0.25f;
        signed_grid8(v, db, g_iq2xxs_grid[q[l]], g_iq_sign_masks[(w >> (7 * l)) & 127]);
    }
};
struct DqIQ2_XS {  // d@0, qs@2 u16[32], scales@66 [8]
    static constexpr int kValues = 256, kBytes = 74;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int g = i >> 2, l = i & 3;
        const uint32_t q = ld16(b + 2 + 2 * i);
        const float db = half_at(b) * (0.5f + static_cast<float>((b[66 + g] >> (4 * (l >> 1))) & 15)) * 0.25f;
        signed_grid8(v, db, g_iq2xs_grid[q & 511], g_iq_sign_masks[q >> 9]);
    }
};
struct DqIQ2_S {  // d@0, qs@2 [64] (32 index bytes, 32 sign bytes), qh@66 [8], scales@74 [8]
    static constexpr int kValues = 256, kBytes = 82;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int g = i >> 2, l = i & 3;
        const int index = b[2 + i] | (((b[66 + g] >> (2 * l)) & 3) << 8);
        const float db = half_at(b) * (0.5f + static_cast<float>((b[74 + g] >> (4 * (l >> 1))) & 15)) * 0.25f;
        signed_grid8(v, db, g_iq2s_grid[index], b[2 + 32 + i]);
    }
};
struct DqIQ3_XXS {  // d@0, qs@2: [64] index bytes, then a u32 per group of 32 (signs, scale)
    static constexpr int kValues = 256, kBytes = 98;
    // Values 8i..8i+7 of block b with the grid and sign tables at `grid` and `signs` (the global
    // ones, or copies in shared memory: dequant_iq3xxs_kernel).
    template <class Sign>
    __device__ static void dequant8_with(const uint8_t* b, int i, float* v, const uint32_t* grid, const Sign* signs) {
        const int g = i >> 2, l = i & 3;
        const uint32_t w = ld32(b + 2 + 64 + 4 * g);
        const float db = half_at(b) * (0.5f + static_cast<float>(w >> 28)) * 0.5f;
        const uint8_t* idx = b + 2 + 8 * g + 2 * l;
        signed_grid4x2(v, db, grid[idx[0]], grid[idx[1]], signs[(w >> (7 * l)) & 127]);
    }
    __device__ static void dequant8(const uint8_t* b, int i, float* v) { dequant8_with(b, i, v, g_iq3xxs_grid, g_iq_sign_masks); }
};
struct DqIQ3_S {  // d@0, qs@2 [64], qh@66 [8], signs@74 [32], scales@106 [4]
    static constexpr int kValues = 256, kBytes = 110;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int g = i >> 2, l = i & 3;
        const int s = (b[106 + g / 2] >> (4 * (g % 2))) & 15;
        const float db = half_at(b) * static_cast<float>(1 + 2 * s);
        const uint8_t* q = b + 2 + 8 * g + 2 * l;
        const int qh = b[66 + g];
        const int i0 = q[0] | (((qh >> (2 * l)) & 1) << 8), i1 = q[1] | (((qh >> (2 * l + 1)) & 1) << 8);
        signed_grid4x2(v, db, g_iq3s_grid[i0], g_iq3s_grid[i1], b[74 + i]);
    }
};
struct DqIQ4_XS {  // d@0, scales_h@2 (u16), scales_l@4 [4], qs@8 [128]
    static constexpr int kValues = 256, kBytes = 136;
    __device__ static void dequant8(const uint8_t* b, int i, float* v) {
        const int g = i >> 2, part = i & 3;
        const int low = (b[4 + g / 2] >> (4 * (g % 2))) & 15;
        const int high = (ld16(b + 2) >> (2 * g)) & 3;
        const float dl = half_at(b) * static_cast<float>((low | (high << 4)) - 32);
        const uint32_t q0 = ld32(b + 8 + 16 * g + 8 * (part & 1)), q1 = ld32(b + 12 + 16 * g + 8 * (part & 1));
        const int shift = 4 * (part >> 1);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[j] = dl * static_cast<float>(c_iq4nl_values[(q0 >> (8 * j + shift)) & 15]);
            v[j + 4] = dl * static_cast<float>(c_iq4nl_values[(q1 >> (8 * j + shift)) & 15]);
        }
    }
};

// A small unsigned code (< 2^23) as a float, exactly: its bits under the exponent of 2^23, minus
// 2^23. An OR and an add at full rate instead of an int-to-float conversion at quarter rate,
// which bounded the decode GEMVs.
__device__ __forceinline__ float code_f(uint32_t c) { return __int_as_float(0x4B000000u | c) - 8388608.0f; }

// Dot of 16 weights w[j] = q[j] (codes of 16 bytes' nibbles at `shift`) with x[0..16) held in
// four float4: returns sum q*x; adds sum x to xs (for the min term).
__device__ __forceinline__ float nibble_dot16(uint4 q, int shift, const float4* x, float& xs) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float4 xv = x[k];
        const uint32_t c = (w[k] >> shift) & 0x0F0F0F0Fu;
        s += code_f(c & 0xff) * xv.x + code_f((c >> 8) & 0xff) * xv.y + code_f((c >> 16) & 0xff) * xv.z + code_f(c >> 24) * xv.w;
        xs += xv.x + xv.y + xv.z + xv.w;
    }
    return s;
}

// Eight 32-bit words of the 32 bytes at p, which need only be 2-byte aligned (Q6_K blocks are
// 210 bytes): nine aligned loads and a funnel shift instead of sixteen 16-bit loads.
__device__ __forceinline__ void load32_unaligned(const uint8_t* p, uint32_t* out) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t* base = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
    const uint32_t sh = static_cast<uint32_t>(a & 3) * 8;
    uint32_t w[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) w[k] = base[k];
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = __funnelshift_r(w[k], w[k + 1], sh);
}

// The 6-bit codes of Q6_K chunk i of a row (values 32(i%8) .. of block i/8): eight words of four
// codes, low bits from ql[64h + 32(q&1) + l] (nibble q>>1), high bits from qh[32h + l] (bits 2q,
// 2q+1), h = (i%8)/4, q = i%4. Returns the block; its scale bytes for the chunk's two runs of 16
// are at 192 + 8h + 2q and the one after.
__device__ __forceinline__ const uint8_t* q6k_chunk_codes(const uint8_t* row, int i, uint32_t* codes, int& scale_at) {
    const uint8_t* b = row + static_cast<size_t>(i >> 3) * DqQ6_K::kBytes;
    const int j = i & 7, h = j >> 2, q = j & 3;
    uint32_t ql[8], qh[8];
    load32_unaligned(b + 64 * h + 32 * (q & 1), ql);
    load32_unaligned(b + 128 + 32 * h, qh);
    const int ls = 4 * (q >> 1), hs = 2 * q;
#pragma unroll
    for (int k = 0; k < 8; ++k) codes[k] = ((ql[k] >> ls) & 0x0F0F0F0Fu) | (((qh[k] >> hs) & 0x03030303u) << 4);
    scale_at = 192 + 8 * h + 2 * q;
    return b;
}

// The decode GEMV's unit of work per lane is chunk i of a weight row: 32 values, dotted with the
// matching 32 input values, which a lane loads once into registers (chunk_x) and reuses for
// every row it handles. For every type but Q4_K the chunk is values 32i .. 32i+31. Q4_K (the
// bulk of Q4_K_M files) reads its 16 code bytes in one load and applies each sub-block's scale
// and min once: lane i takes qs[32c + 16h ..] (c = (i%8)/2, h = i%2), whose low nibbles are
// values 64c + 16h + j of sub-block 2c and whose high nibbles are values 64c + 32 + 16h + j of 2c+1.
template <class Dq>
__device__ __forceinline__ void chunk_x(const float* x, int i, float4* xv) {
    const float* p = x + 32 * i;
    if constexpr (std::is_same_v<Dq, DqQ4_K>) {
        const int j = i & 7;
        p = x + 256 * (i >> 3) + 64 * (j >> 1) + 16 * (j & 1);
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        // Q4_K: the second run of 16 values starts 32 further on
        const int at = std::is_same_v<Dq, DqQ4_K> && k >= 4 ? 4 * k + 16 : 4 * k;
        xv[k] = *reinterpret_cast<const float4*>(p + at);
    }
}

// Byte k (< 12) of the Q4_K/Q5_K scale array held as three words.
__device__ __forceinline__ int k4_byte(uint32_t w0, uint32_t w1, uint32_t w2, int k) {
    const uint32_t w = k < 4 ? w0 : k < 8 ? w1 : w2;
    return static_cast<int>((w >> (8 * (k & 3))) & 0xff);
}

// The two halves packed in a word (a block's d and dmin), as floats.
__device__ __forceinline__ float half_lo(uint32_t w) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffff)));
}
__device__ __forceinline__ float half_hi(uint32_t w) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}

// Sub-block s's 6-bit scale and min of a Q4_K/Q5_K block whose first 16 bytes are `head` (d,
// dmin, scales[0..12)). s < 4: scale = sc[s] & 63, min = sc[s+4] & 63; s >= 4: 4 bits from
// sc[s+4] and the top 2 bits of sc[s-4] (scale) / sc[s] (min).
__device__ __forceinline__ void k4_scale_min(uint4 head, int s, int& sc, int& mn) {
    if (s < 4) {
        sc = k4_byte(head.y, head.z, head.w, s) & 63;
        mn = k4_byte(head.y, head.z, head.w, s + 4) & 63;
    } else {
        sc = (k4_byte(head.y, head.z, head.w, s + 4) & 15) | ((k4_byte(head.y, head.z, head.w, s - 4) >> 6) << 4);
        mn = (k4_byte(head.y, head.z, head.w, s + 4) >> 4) | ((k4_byte(head.y, head.z, head.w, s) >> 6) << 4);
    }
}

// Dot of chunk i of a weight row with its inputs xv (from chunk_x).
template <class Dq>
__device__ __forceinline__ float row_dot32(const uint8_t* row, int i, const float4* xv) {
    if constexpr (std::is_same_v<Dq, DqQ4_K>) {
        // Blocks are 144 bytes and rows whole blocks, so every block is 16-byte aligned.
        const uint8_t* b = row + static_cast<size_t>(i >> 3) * DqQ4_K::kBytes;
        const int j = i & 7, c = j >> 1, h = j & 1;
        const uint4 head = *reinterpret_cast<const uint4*>(b);  // d, dmin, scales[0..12)
        const uint4 q = *reinterpret_cast<const uint4*>(b + 16 + 32 * c + 16 * h);
        int sc0, m0, sc1, m1;
        k4_scale_min(head, 2 * c, sc0, m0);
        k4_scale_min(head, 2 * c + 1, sc1, m1);
        const float d = half_lo(head.x), dmin = half_hi(head.x);
        float xs0 = 0.0f, xs1 = 0.0f;
        const float p0 = nibble_dot16(q, 0, xv, xs0), p1 = nibble_dot16(q, 4, xv + 4, xs1);
        return d * (static_cast<float>(sc0) * p0 + static_cast<float>(sc1) * p1) -
               dmin * (static_cast<float>(m0) * xs0 + static_cast<float>(m1) * xs1);
    } else if constexpr (std::is_same_v<Dq, DqQ6_K>) {
        // value = d * scale * (code - 32), scale per 16 values.
        uint32_t c[8];
        int at;
        const uint8_t* b = q6k_chunk_codes(row, i, c, at);
        float s[2] = {0.0f, 0.0f}, xs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float4 x4 = xv[k];
            s[k >> 2] += code_f(c[k] & 0xff) * x4.x + code_f((c[k] >> 8) & 0xff) * x4.y + code_f((c[k] >> 16) & 0xff) * x4.z +
                         code_f(c[k] >> 24) * x4.w;
            xs[k >> 2] += x4.x + x4.y + x4.z + x4.w;
        }
        const float sc0 = static_cast<float>(static_cast<int8_t>(b[at])),
                    sc1 = static_cast<float>(static_cast<int8_t>(b[at + 1]));
        return half_at(b + 208) * (sc0 * (s[0] - 32.0f * xs[0]) + sc1 * (s[1] - 32.0f * xs[1]));
    } else {
        constexpr int kGroups = Dq::kValues / 8;
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int g = 4 * i + k;
            float v[8];
            Dq::dequant8(row + static_cast<size_t>(g / kGroups) * Dq::kBytes, g % kGroups, v);
            const float4 a = xv[2 * k], c = xv[2 * k + 1];
            acc += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * c.x + v[5] * c.y + v[6] * c.z + v[7] * c.w;
        }
        return acc;
    }
}

// Chunk i of one row dotted with x (the row's input, 32-byte aligned).
template <class Dq>
__device__ __forceinline__ float row_dot32(const uint8_t* row, int i, const float* x) {
    float4 xv[8];
    chunk_x<Dq>(x, i, xv);
    return row_dot32<Dq>(row, i, xv);
}

// ---- 8-bit activations (ActQ8) ------------------------------------------------------------
// The same chunks as above, dotted with int8 inputs by dp4a: each lane holds its chunk's 32 input
// codes (the same 32 values chunk_x picks), their scales and 16-value sums.

struct Q8Row {  // one row of an ActQ8
    const int8_t* q;
    const float* d;
    const float* s;
};
struct ChunkF32 {
    float4 v[8];
};
struct ChunkQ8 {
    uint4 lo, hi;          // codes of the chunk's first and second 16 values
    float d0, d1, s0, s1;  // their scales (d0 == d1 unless Q4_K) and sums
};
template <class X>
struct ChunkOf;
template <>
struct ChunkOf<const float*> {
    using type = ChunkF32;
};
template <>
struct ChunkOf<Q8Row> {
    using type = ChunkQ8;
};

// Row t of an input of n values per row.
__device__ __forceinline__ const float* row_at(const float* x, int64_t t, int n) { return x + t * n; }
__device__ __forceinline__ Q8Row row_at(const Q8Row& x, int64_t t, int n) {
    return {x.q + t * n, x.d + t * (n / 32), x.s + t * (n / 16)};
}

template <class Dq>
inline constexpr bool kHasQ8Dot = std::is_same_v<Dq, DqQ4_K> || std::is_same_v<Dq, DqQ5_K> || std::is_same_v<Dq, DqQ6_K> ||
                                  std::is_same_v<Dq, DqQ8_0> || std::is_same_v<Dq, DqIQ3_XXS>;

template <class Dq>
__device__ __forceinline__ void load_chunk(const float* x, int i, ChunkF32& c) {
    chunk_x<Dq>(x, i, c.v);
}
template <class Dq>
__device__ __forceinline__ void load_chunk(const Q8Row& x, int i, ChunkQ8& c) {
    // First value of each run of 16 (Q4_K: its low-nibble run and the high-nibble run 32 on).
    int v0 = 32 * i, v1 = 32 * i + 16;
    if constexpr (std::is_same_v<Dq, DqQ4_K>) {
        const int j = i & 7;
        v0 = 256 * (i >> 3) + 64 * (j >> 1) + 16 * (j & 1);
        v1 = v0 + 32;
    }
    c.lo = *reinterpret_cast<const uint4*>(x.q + v0);
    c.hi = *reinterpret_cast<const uint4*>(x.q + v1);
    c.d0 = x.d[v0 / 32];
    c.d1 = x.d[v1 / 32];
    c.s0 = x.s[v0 / 16];
    c.s1 = x.s[v1 / 16];
}

// Word k (< 8) of the chunk's codes: values 4k .. 4k+3 of the chunk.
__device__ __forceinline__ int q8_word(const ChunkQ8& a, int k) {
    const uint4& u = k < 4 ? a.lo : a.hi;
    const int m = k & 3;
    return static_cast<int>(m == 0 ? u.x : m == 1 ? u.y : m == 2 ? u.z : u.w);
}
__device__ __forceinline__ int word_of(const uint4& u, int m) {
    return static_cast<int>(m == 0 ? u.x : m == 1 ? u.y : m == 2 ? u.z : u.w);
}

// Q4_K chunk i's 16 code bytes (low nibbles: sub-block 2s, high: 2s + 1; chunk_x's order), its
// two sub-blocks' scales and mins, and the block's d and dmin.
struct Q4KChunk {
    uint4 q;
    int sc0, m0, sc1, m1;
    float d, dmin;
};
__device__ __forceinline__ Q4KChunk q4k_chunk(const uint8_t* row, int i) {
    const uint8_t* b = row + static_cast<size_t>(i >> 3) * DqQ4_K::kBytes;
    const int j = i & 7, s = j >> 1, h = j & 1;
    const uint4 head = *reinterpret_cast<const uint4*>(b);
    Q4KChunk c;
    c.q = *reinterpret_cast<const uint4*>(b + 16 + 32 * s + 16 * h);
    k4_scale_min(head, 2 * s, c.sc0, c.m0);
    k4_scale_min(head, 2 * s + 1, c.sc1, c.m1);
    c.d = half_lo(head.x);
    c.dmin = half_hi(head.x);
    return c;
}
// Q5_K chunk i = sub-block s: its 32 five-bit codes as bytes (low nibbles, s odd: high, of
// qs[32(s/2) ..], bit s of qh[0..32)), its scale and min, and the block's d and dmin.
__device__ __forceinline__ void q5k_chunk_codes(const uint8_t* row, int i, uint32_t* codes, int& sc, int& mn, float& d,
                                                float& dmin) {
    const uint8_t* b = row + static_cast<size_t>(i >> 3) * DqQ5_K::kBytes;
    const int s = i & 7, shift = 4 * (s & 1);
    const uint4 head = *reinterpret_cast<const uint4*>(b);
    const uint4* ql = reinterpret_cast<const uint4*>(b + 48 + 32 * (s >> 1));
    const uint4* qh = reinterpret_cast<const uint4*>(b + 16);
    const uint4 l0 = ql[0], l1 = ql[1], h0 = qh[0], h1 = qh[1];
    k4_scale_min(head, s, sc, mn);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const uint32_t lw = static_cast<uint32_t>(word_of(k < 4 ? l0 : l1, k & 3));
        const uint32_t hw = static_cast<uint32_t>(word_of(k < 4 ? h0 : h1, k & 3));
        codes[k] = ((lw >> shift) & 0x0F0F0F0Fu) | (((hw >> s) & 0x01010101u) << 4);
    }
    d = half_lo(head.x);
    dmin = half_hi(head.x);
}

// Chunk i of a weight row dotted with 8-bit inputs (layouts as in row_dot32).
template <class Dq>
__device__ __forceinline__ float row_dot32_q8(const uint8_t* row, int i, const ChunkQ8& a) {
    static_assert(kHasQ8Dot<Dq>, "no 8-bit dot for this type");
    if constexpr (std::is_same_v<Dq, DqQ4_K>) {
        const Q4KChunk c = q4k_chunk(row, i);
        int p0 = 0, p1 = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int w = word_of(c.q, k);
            p0 = __dp4a(w & 0x0F0F0F0F, word_of(a.lo, k), p0);
            p1 = __dp4a((w >> 4) & 0x0F0F0F0F, word_of(a.hi, k), p1);
        }
        return c.d * (static_cast<float>(c.sc0) * a.d0 * static_cast<float>(p0) +
                      static_cast<float>(c.sc1) * a.d1 * static_cast<float>(p1)) -
               c.dmin * (static_cast<float>(c.m0) * a.s0 + static_cast<float>(c.m1) * a.s1);
    } else if constexpr (std::is_same_v<Dq, DqQ5_K>) {
        uint32_t codes[8];
        int sc, mn;
        float d, dmin;
        q5k_chunk_codes(row, i, codes, sc, mn, d, dmin);
        int p = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) p = __dp4a(static_cast<int>(codes[k]), q8_word(a, k), p);
        return d * static_cast<float>(sc) * a.d0 * static_cast<float>(p) - dmin * static_cast<float>(mn) * (a.s0 + a.s1);
    } else if constexpr (std::is_same_v<Dq, DqQ6_K>) {
        // value = d * scale * (code - 32): sum code*x by dp4a, minus 32 * sum x per 16 values.
        uint32_t c[8];
        int at;
        const uint8_t* b = q6k_chunk_codes(row, i, c, at);
        int p0 = 0, p1 = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            p0 = __dp4a(static_cast<int>(c[k]), q8_word(a, k), p0);
            p1 = __dp4a(static_cast<int>(c[k + 4]), q8_word(a, k + 4), p1);
        }
        const float sc0 = static_cast<float>(static_cast<int8_t>(b[at])),
                    sc1 = static_cast<float>(static_cast<int8_t>(b[at + 1]));
        return half_at(b + 208) *
               (sc0 * (a.d0 * static_cast<float>(p0) - 32.0f * a.s0) + sc1 * (a.d1 * static_cast<float>(p1) - 32.0f * a.s1));
    } else if constexpr (std::is_same_v<Dq, DqQ8_0>) {
        const uint8_t* b = row + static_cast<size_t>(i) * DqQ8_0::kBytes;
        uint32_t w[8];
        load32_unaligned(b + 2, w);
        int p = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) p = __dp4a(static_cast<int>(w[k]), q8_word(a, k), p);
        return half_at(b) * a.d0 * static_cast<float>(p);
    } else {  // IQ3_XXS: chunk = group g of 32 values, grid bytes (< 64) with one sign bit each
        const uint8_t* b = row + static_cast<size_t>(i >> 3) * DqIQ3_XXS::kBytes;
        const int g = i & 7;
        const uint32_t w = ld32(b + 2 + 64 + 4 * g);
        const uint8_t* idx = b + 2 + 8 * g;
        int p = 0;
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const uint32_t signs = g_iq_sign_masks[(w >> (7 * l)) & 127];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const uint32_t grid = g_iq3xxs_grid[idx[2 * l + half]];
                // One byte per negative value: code ^ 0xff = -code - 1 (codes < 128), and the
                // second dp4a adds the 1 back: sum sign*code*x.
                const uint32_t bits = (((signs >> (4 * half)) & 15u) * 0x00204081u) & 0x01010101u;
                const int aw = q8_word(a, 2 * l + half);
                p = __dp4a(static_cast<int>(grid ^ (bits * 0xffu)), aw, p);
                p = __dp4a(static_cast<int>(bits), aw, p);
            }
        }
        return half_at(b) * (0.5f + static_cast<float>(w >> 28)) * 0.5f * a.d0 * static_cast<float>(p);
    }
}

// Chunk i of a weight row decoded once for the several inputs of a batch GEMV (decoding it anew
// for each input made the 8-input GEMV about 2.5x the one-input one): its 32 codes as bytes in 8
// words, word k against word k of the input chunk (q8_word), and the factors of
//   dot = a0 * x.d0 * p0 + a1 * x.d1 * p1 + b0 * x.s0 + b1 * x.s1,
// p0 and p1 the byte products of words 0..3 and 4..7 (the same sum as row_dot32_q8's, in
// another order).
struct WeightChunkQ8 {
    int code[8];
    float a0, a1, b0, b1;
};
template <class Dq>
__device__ __forceinline__ WeightChunkQ8 weight_chunk_q8(const uint8_t* row, int i) {
    static_assert(kHasQ8Dot<Dq>, "no 8-bit dot for this type");
    WeightChunkQ8 c;
    if constexpr (std::is_same_v<Dq, DqQ4_K>) {
        const Q4KChunk q = q4k_chunk(row, i);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int w = word_of(q.q, k);
            c.code[k] = w & 0x0F0F0F0F;
            c.code[k + 4] = (w >> 4) & 0x0F0F0F0F;
        }
        c.a0 = q.d * static_cast<float>(q.sc0);
        c.a1 = q.d * static_cast<float>(q.sc1);
        c.b0 = -q.dmin * static_cast<float>(q.m0);
        c.b1 = -q.dmin * static_cast<float>(q.m1);
    } else if constexpr (std::is_same_v<Dq, DqQ5_K>) {
        uint32_t codes[8];
        int sc, mn;
        float d, dmin;
        q5k_chunk_codes(row, i, codes, sc, mn, d, dmin);
#pragma unroll
        for (int k = 0; k < 8; ++k) c.code[k] = static_cast<int>(codes[k]);
        c.a0 = c.a1 = d * static_cast<float>(sc);
        c.b0 = c.b1 = -dmin * static_cast<float>(mn);
    } else if constexpr (std::is_same_v<Dq, DqQ6_K>) {
        uint32_t codes[8];
        int at;
        const uint8_t* b = q6k_chunk_codes(row, i, codes, at);
#pragma unroll
        for (int k = 0; k < 8; ++k) c.code[k] = static_cast<int>(codes[k]);
        const float d = half_at(b + 208);
        c.a0 = d * static_cast<float>(static_cast<int8_t>(b[at]));
        c.a1 = d * static_cast<float>(static_cast<int8_t>(b[at + 1]));
        c.b0 = -32.0f * c.a0;
        c.b1 = -32.0f * c.a1;
    } else if constexpr (std::is_same_v<Dq, DqQ8_0>) {
        const uint8_t* b = row + static_cast<size_t>(i) * DqQ8_0::kBytes;
        uint32_t w[8];
        load32_unaligned(b + 2, w);
#pragma unroll
        for (int k = 0; k < 8; ++k) c.code[k] = static_cast<int>(w[k]);
        c.a0 = c.a1 = half_at(b);
        c.b0 = c.b1 = 0.0f;
    } else {  // IQ3_XXS: grid bytes (< 64, never 0) negated per sign bit: (code ^ 0xff) + 1
        // (The lookups of row_dot32_q8's IQ3_XXS branch, kept apart on purpose. That branch
        // taking its codes from here moved registers both ways: one-input GEMV 64 -> 56 and
        // 48 -> 56, the experts' 2- and 4-row gate/up 72 -> 96. A/B of two binaries on the H200,
        // 30B-A3B IQ3_XXS, three rounds: batch 1 362.5 -> 361.2 t/s, batch 4 712.2 -> 704.2
        // (lower in every round); 80B IQ3_XXS 251.0 -> 254.8, within its spread.)
        const uint8_t* b = row + static_cast<size_t>(i >> 3) * DqIQ3_XXS::kBytes;
        const int g = i & 7;
        const uint32_t w = ld32(b + 2 + 64 + 4 * g);
        const uint8_t* idx = b + 2 + 8 * g;
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const uint32_t signs = g_iq_sign_masks[(w >> (7 * l)) & 127];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const uint32_t grid = g_iq3xxs_grid[idx[2 * l + half]];
                const uint32_t bits = (((signs >> (4 * half)) & 15u) * 0x00204081u) & 0x01010101u;
                c.code[2 * l + half] = static_cast<int>(__vadd4(grid ^ (bits * 0xffu), bits));
            }
        }
        c.a0 = c.a1 = half_at(b) * (0.5f + static_cast<float>(w >> 28)) * 0.5f;
        c.b0 = c.b1 = 0.0f;
    }
    return c;
}
__device__ __forceinline__ float weight_chunk_dot(const WeightChunkQ8& w, const ChunkQ8& x) {
    int p0 = 0, p1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        p0 = __dp4a(w.code[k], word_of(x.lo, k), p0);
        p1 = __dp4a(w.code[k + 4], word_of(x.hi, k), p1);
    }
    return w.a0 * x.d0 * static_cast<float>(p0) + w.a1 * x.d1 * static_cast<float>(p1) + w.b0 * x.s0 + w.b1 * x.s1;
}

template <class Dq>
__device__ __forceinline__ float chunk_dot(const uint8_t* row, int i, const ChunkF32& c) {
    return row_dot32<Dq>(row, i, c.v);
}
template <class Dq>
__device__ __forceinline__ float chunk_dot(const uint8_t* row, int i, const ChunkQ8& c) {
    return row_dot32_q8<Dq>(row, i, c);
}

// Calls f.template operator()<Dq>() with the dequantiser of type t; false when there is none.
template <class F>
bool with_dequantizer(quant::Type t, F&& f) {
    using quant::Type;
    switch (t) {
        case Type::F32: f.template operator()<DqF32>(); return true;
        case Type::F16: f.template operator()<DqF16>(); return true;
        case Type::BF16: f.template operator()<DqBF16>(); return true;
        case Type::Q4_0: f.template operator()<DqQ4_0>(); return true;
        case Type::Q4_1: f.template operator()<DqQ4_1>(); return true;
        case Type::Q5_0: f.template operator()<DqQ5_0>(); return true;
        case Type::Q5_1: f.template operator()<DqQ5_1>(); return true;
        case Type::Q8_0: f.template operator()<DqQ8_0>(); return true;
        case Type::IQ4_NL: f.template operator()<DqIQ4_NL>(); return true;
        case Type::Q2_K: f.template operator()<DqQ2_K>(); return true;
        case Type::Q3_K: f.template operator()<DqQ3_K>(); return true;
        case Type::Q4_K: f.template operator()<DqQ4_K>(); return true;
        case Type::Q5_K: f.template operator()<DqQ5_K>(); return true;
        case Type::Q6_K: f.template operator()<DqQ6_K>(); return true;
        case Type::IQ2_XXS: f.template operator()<DqIQ2_XXS>(); return true;
        case Type::IQ2_XS: f.template operator()<DqIQ2_XS>(); return true;
        case Type::IQ2_S: f.template operator()<DqIQ2_S>(); return true;
        case Type::IQ3_XXS: f.template operator()<DqIQ3_XXS>(); return true;
        case Type::IQ3_S: f.template operator()<DqIQ3_S>(); return true;
        case Type::IQ4_XS: f.template operator()<DqIQ4_XS>(); return true;
        default: return false;
    }
}

}  // namespace strata::cuda
