#include "model/scratch.h"

#include <algorithm>

namespace strata::model {

void ScratchArena::begin() {
    top_ = 0;
    if (overflow_.empty()) return;
    overflow_.clear();
    block_.reset();  // before the larger one: never both at once
    capacity_ = high_water_;
    block_ = backend::Buffer(be_, capacity_ / sizeof(float));
}

void* ScratchArena::take(size_t bytes) {
    const size_t offset = (top_ + kAlign - 1) / kAlign * kAlign;
    const size_t size = (bytes + kAlign - 1) / kAlign * kAlign;
    top_ = offset + size;
    high_water_ = std::max(high_water_, top_);
    if (top_ <= capacity_) return static_cast<std::byte*>(static_cast<void*>(block_.data())) + offset;
    // Beyond the block: memory of its own under this offset, which the takes of later layers at
    // the same offset reuse (nothing taken at or above an offset is live when it is taken again).
    backend::Buffer& piece = overflow_[offset];
    if (piece.size() * sizeof(float) < size) piece = backend::Buffer(be_, size / sizeof(float));
    return piece.data();
}

}  // namespace strata::model
