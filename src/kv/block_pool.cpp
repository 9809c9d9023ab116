#include "kv/block_pool.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace strata::kv {

BlockPool::BlockPool(int32_t n_blocks, int32_t block_size) : block_size_(block_size) {
    if (n_blocks <= 0 || block_size <= 0) throw Error("KV block pool needs at least one block of at least one position");
    blocks_.resize(static_cast<size_t>(n_blocks));
    clean_.reserve(static_cast<size_t>(n_blocks));
    for (int32_t b = n_blocks - 1; b >= 0; --b) clean_.push_back(b);  // hand out 0, 1, 2, ... first
}

uint64_t BlockPool::chain_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
    // splitmix64 finaliser over the parent hash and each token: cheap, well mixed; exactness
    // comes from the token comparison in match().
    auto mix = [](uint64_t z) {
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    };
    uint64_t h = mix(parent_hash + 0x9e3779b97f4a7c15ULL);
    for (int32_t t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ULL));
    return h;
}

int32_t BlockPool::allocate() {
    int32_t b = -1;
    if (!clean_.empty()) {
        b = clean_.back();
        clean_.pop_back();
    } else if (!lru_.empty()) {
        b = lru_.begin()->second;
        evict(b);
    } else {
        return -1;
    }
    Block& blk = blocks_[static_cast<size_t>(b)];
    blk.refs = 1;
    ++n_in_use_;
    return b;
}

void BlockPool::evict(int32_t b) {
    Block& blk = blocks_[static_cast<size_t>(b)];
    if (on_evict) on_evict(b);
    lru_.erase(blk.released_at);
    --n_cached_free_;
    by_hash_.erase(blk.hash);
    blk.committed = false;
    blk.tokens.clear();
}

void BlockPool::retain(int32_t b) {
    Block& blk = blocks_.at(static_cast<size_t>(b));
    if (blk.refs == 0) {
        if (!blk.committed) throw Error("internal: retaining a free KV block that holds no cached prefix");
        lru_.erase(blk.released_at);
        --n_cached_free_;
        ++n_in_use_;
    }
    ++blk.refs;
}

void BlockPool::release(int32_t b) {
    Block& blk = blocks_.at(static_cast<size_t>(b));
    if (blk.refs <= 0) throw Error("internal: releasing a KV block with no users");
    if (--blk.refs > 0) return;
    --n_in_use_;
    if (blk.committed) {
        blk.released_at = ++clock_;
        lru_.emplace(blk.released_at, b);
        ++n_cached_free_;
    } else {
        blk.tokens.clear();
        clean_.push_back(b);
    }
}

int32_t BlockPool::commit(int32_t b, int32_t parent, std::span<const int32_t> tokens) {
    if (static_cast<int32_t>(tokens.size()) != block_size_) throw Error("internal: committing a KV block that is not full");
    Block& blk = blocks_.at(static_cast<size_t>(b));
    const uint64_t parent_hash = parent < 0 ? 0 : blocks_.at(static_cast<size_t>(parent)).hash;
    const uint64_t h = chain_hash(parent_hash, tokens);
    if (blk.committed) return b;
    blk.hash = h;
    blk.parent_hash = parent_hash;
    if (const auto it = by_hash_.find(h); it != by_hash_.end()) {
        const Block& old = blocks_[static_cast<size_t>(it->second)];
        if (old.parent_hash == parent_hash && std::equal(tokens.begin(), tokens.end(), old.tokens.begin(), old.tokens.end()))
            return it->second;
        return b;  // a hash collision: keep this block private
    }
    blk.tokens.assign(tokens.begin(), tokens.end());
    blk.committed = true;
    by_hash_.emplace(h, b);
    return b;
}

std::vector<int32_t> BlockPool::match(std::span<const int32_t> tokens, int64_t max_blocks) const {
    std::vector<int32_t> out;
    uint64_t parent_hash = 0;
    const int64_t n = std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
    for (int64_t i = 0; i < n; ++i) {
        const auto chunk = tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_));
        const uint64_t h = chain_hash(parent_hash, chunk);
        const auto it = by_hash_.find(h);
        if (it == by_hash_.end()) break;
        const Block& blk = blocks_[static_cast<size_t>(it->second)];
        if (blk.parent_hash != parent_hash || !std::equal(chunk.begin(), chunk.end(), blk.tokens.begin(), blk.tokens.end()))
            break;
        out.push_back(it->second);
        parent_hash = h;
    }
    return out;
}

}  // namespace strata::kv
