// A session's dense vectors: one per chunk that an embedding lane has embedded, kept as int8
// with a scale per vector (a quarter of float32's memory: ~10,000 chunks of 1,024 dimensions,
// a 1M-token conversation, in 10 MiB). Chunks are embedded once, when they first become
// candidates for retrieval, so each turn embeds only its new chunks.
// Contract:
// - set(chunk, v): v of the index's dimensions (the first set fixes them; a vector of other
//   dimensions — the lane's model changed — clears the index first); stored as round(v / s) with
//   s = max |v| / 127, so each component is off by at most s / 2.
// - dot(chunk, q): Σ q_i v_i of the stored vector; chunks never set: has() is false.
// - prefix(n): a copy holding chunks [0, n) (a fork's).
// - scale(chunk) / codes(chunk) read a stored vector as it is kept; set_codes(chunk, s, codes)
//   puts one back exactly (the session store's copy), with set()'s rule for other dimensions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::gateway {

class DenseIndex {
public:
    void set(uint32_t chunk, std::span<const float> v);
    bool has(uint32_t chunk) const { return chunk < scale_.size() && scale_[chunk] >= 0; }
    double dot(uint32_t chunk, std::span<const float> q) const;
    size_t dims() const { return dims_; }
    size_t count() const { return count_; }  // chunks with a vector
    DenseIndex prefix(uint32_t n) const;
    float scale(uint32_t chunk) const { return has(chunk) ? scale_[chunk] : -1.0f; }
    std::span<const int8_t> codes(uint32_t chunk) const {
        return has(chunk) ? std::span<const int8_t>(codes_.data() + static_cast<size_t>(chunk) * dims_, dims_)
                          : std::span<const int8_t>();
    }
    void set_codes(uint32_t chunk, float scale, std::span<const int8_t> codes);
    size_t memory_bytes() const { return codes_.capacity() + scale_.capacity() * sizeof(float); }

private:
    int8_t* slot(uint32_t chunk, size_t dims);  // the chunk's row, the index (re)shaped for dims
    size_t dims_ = 0, count_ = 0;
    std::vector<int8_t> codes_;  // [chunk][dims_]
    std::vector<float> scale_;   // [chunk]; -1: no vector
};

}  // namespace strata::gateway
