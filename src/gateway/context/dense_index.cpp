// A session's dense vectors (dense_index.h).
#include "gateway/context/dense_index.h"

#include <algorithm>
#include <cmath>

namespace strata::gateway {

int8_t* DenseIndex::slot(uint32_t chunk, size_t dims) {
    if (dims_ != dims) {
        *this = DenseIndex();
        dims_ = dims;
    }
    if (chunk >= scale_.size()) {
        scale_.resize(chunk + 1, -1.0f);
        codes_.resize(scale_.size() * dims_, 0);
    }
    return codes_.data() + static_cast<size_t>(chunk) * dims_;
}

void DenseIndex::set(uint32_t chunk, std::span<const float> v) {
    if (v.empty()) return;
    int8_t* out = slot(chunk, v.size());
    float m = 0;
    for (float x : v) m = std::max(m, std::abs(x));
    const float s = m > 0 ? m / 127.0f : 0.0f;
    for (size_t i = 0; i < dims_; ++i) out[i] = s > 0 ? static_cast<int8_t>(std::lround(v[i] / s)) : 0;
    if (scale_[chunk] < 0) ++count_;
    scale_[chunk] = s;
}

void DenseIndex::set_codes(uint32_t chunk, float scale, std::span<const int8_t> codes) {
    if (codes.empty() || !(scale >= 0)) return;
    int8_t* out = slot(chunk, codes.size());
    std::copy(codes.begin(), codes.end(), out);
    if (scale_[chunk] < 0) ++count_;
    scale_[chunk] = scale;
}

double DenseIndex::dot(uint32_t chunk, std::span<const float> q) const {
    if (!has(chunk) || q.size() != dims_) return 0.0;
    const int8_t* c = codes_.data() + static_cast<size_t>(chunk) * dims_;
    float acc = 0;
    for (size_t i = 0; i < dims_; ++i) acc += q[i] * static_cast<float>(c[i]);
    return static_cast<double>(acc) * scale_[chunk];
}

DenseIndex DenseIndex::prefix(uint32_t n) const {
    DenseIndex d;
    d.dims_ = dims_;
    n = std::min<uint32_t>(n, static_cast<uint32_t>(scale_.size()));
    d.scale_.assign(scale_.begin(), scale_.begin() + n);
    d.codes_.assign(codes_.begin(), codes_.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(n) * dims_));
    d.count_ = static_cast<size_t>(std::count_if(d.scale_.begin(), d.scale_.end(), [](float s) { return s >= 0; }));
    return d;
}

}  // namespace strata::gateway
