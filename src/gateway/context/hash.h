// 64-bit hashing for the long-context library: term ids (terms are stored as hashes, so the
// index persists without a dictionary) and the per-message chain that recognises a
// conversation. A multiply-fold construction (128-bit product, high ^ low); not cryptographic:
// a collision only merges two terms' postings or, with p ~ n^2 / 2^64, two conversations.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace strata::gateway {

inline uint64_t hash_fold(uint64_t a, uint64_t b) {
    const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
    return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

inline uint64_t hash_bytes(std::string_view s, uint64_t seed = 0) {
    constexpr uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull, k2 = 0x8ebc6af09c88c6e3ull;
    const char* p = s.data();
    size_t n = s.size();
    uint64_t h = seed ^ hash_fold(seed ^ k0, n ^ k1);
    while (n >= 16) {
        uint64_t a, b;
        std::memcpy(&a, p, 8);
        std::memcpy(&b, p + 8, 8);
        h = hash_fold(a ^ k1 ^ h, b ^ k2);
        p += 16;
        n -= 16;
    }
    uint64_t a = 0, b = 0;
    if (n >= 8) {
        std::memcpy(&a, p, 8);
        std::memcpy(&b, p + n - 8, 8);  // overlaps a when n < 16
    } else if (n > 0) {
        std::memcpy(&a, p, n);
        b = n;
    }
    return hash_fold(hash_fold(a ^ k1 ^ h, b ^ k2), k0 ^ s.size());
}

// h_i = H(h_{i-1}, role, text): equal prefixes of two conversations give equal chains.
inline uint64_t chain_hash(uint64_t previous, std::string_view role, std::string_view text) {
    return hash_bytes(text, hash_bytes(role, previous));
}

}  // namespace strata::gateway
