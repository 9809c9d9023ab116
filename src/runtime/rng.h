// The sampler's random numbers: xoshiro256** (Blackman and Vigna) seeded through splitmix64,
// and a uniform double in [0, 1) from its top 53 bits. Written out here rather than taken from
// <random> because std:: distributions differ between standard libraries and a seed must give
// the same tokens on every machine.
#pragma once

#include <cstdint>

namespace strata::runtime {

// splitmix64: spreads one 64-bit seed over the generator state (any seed, 0 included, is fine).
inline uint64_t splitmix64_next(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

class Rng {
public:
    explicit Rng(uint64_t seed = 0) { reseed(seed); }

    void reseed(uint64_t seed) {
        uint64_t sm = seed;
        for (uint64_t& word : s_) word = splitmix64_next(sm);
    }

    uint64_t next_u64() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    // Uniform in [0, 1): the top 53 bits as a multiple of 2^-53 (every value exactly representable).
    double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

}  // namespace strata::runtime
