// UTF-8 helpers for the tokenizer: one strict decoding step, and lossy repair that replaces each
// ill-formed sequence with U+FFFD the way Python's errors="replace" and Rust's from_utf8_lossy do
// (one U+FFFD per "maximal subpart", Unicode 15 §3.9, Table 3-7).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tokenizer::utf8 {

enum class Status : uint8_t {
    Ok,         // a well-formed sequence of `len` bytes
    Invalid,    // `len` bytes (>= 1) that can never start a well-formed sequence
    Truncated,  // `len` bytes that are a proper prefix of a well-formed sequence, then the input ends
};

struct Step {
    uint32_t cp;  // the code point when Ok
    uint32_t len;
    Status status;
};

// Decodes the sequence starting at p (p < end). Rejects overlongs, surrogates and > U+10FFFF.
inline Step step(const uint8_t* p, const uint8_t* end) {
    const uint8_t b0 = p[0];
    if (b0 < 0x80) return {b0, 1, Status::Ok};
    uint32_t need;
    uint32_t cp;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Table 3-7)
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        cp = b0 & 0x1Fu;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        cp = b0 & 0x0Fu;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        cp = b0 & 0x07u;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return {0, 1, Status::Invalid};
    }
    for (uint32_t k = 1; k <= need; ++k) {
        if (p + k >= end) return {0, k, Status::Truncated};
        const uint8_t b = p[k];
        if (b < lo || b > hi) return {0, k, Status::Invalid};
        lo = 0x80;
        hi = 0xBF;
        cp = (cp << 6) | (b & 0x3Fu);
    }
    return {cp, need + 1, Status::Ok};
}

inline void append_code_point(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Appends `bytes` to `out`, each ill-formed or truncated subpart replaced by one U+FFFD.
// With hold_back_tail, a truncated sequence at the very end is not written; the number of bytes
// held back (0..3) is returned so a streaming caller can keep them for the next call.
inline size_t append_lossy(std::string& out, std::string_view bytes, bool hold_back_tail = false) {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    const auto* end = p + bytes.size();
    while (p < end) {
        const uint8_t* run = p;  // copy ASCII and well-formed runs in one append
        while (p < end) {
            if (*p < 0x80) {
                ++p;
                continue;
            }
            const Step s = step(p, end);
            if (s.status != Status::Ok) break;
            p += s.len;
        }
        out.append(reinterpret_cast<const char*>(run), static_cast<size_t>(p - run));
        if (p == end) break;
        const Step s = step(p, end);
        if (s.status == Status::Truncated && hold_back_tail) return s.len;
        out += kReplacement;
        p += s.len;
    }
    return 0;
}

inline bool is_valid(std::string_view bytes) {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    const auto* end = p + bytes.size();
    while (p < end) {
        if (*p < 0x80) {
            ++p;
            continue;
        }
        const Step s = step(p, end);
        if (s.status != Status::Ok) return false;
        p += s.len;
    }
    return true;
}

}  // namespace strata::tokenizer::utf8
