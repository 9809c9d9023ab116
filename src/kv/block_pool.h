// Bookkeeping of the paged KV cache: which blocks are in use, by how many sequences, and which
// full blocks hold a known token prefix (the prefix cache). No memory here: a block id names the
// same rows in every attention layer's pool (kv_memory.h).
//
// A block is full once all block_size positions are computed; a full block is committed under
// the chain hash of (its parent's hash, its tokens), so a lookup for a token sequence walks the
// chain from the first block and finds every block whose whole prefix matches. Lookups verify
// the tokens and the parent's hash, so a hash collision can never hand out wrong KV.
//
// Freed blocks that hold a committed prefix stay cached until the memory is needed: allocation
// takes never-committed blocks first, then evicts the least recently released cached block.
// Sequences release their blocks last-first, so a prefix's tail is evicted before its head.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

namespace strata::kv {

class BlockPool {
public:
    BlockPool(int32_t n_blocks, int32_t block_size);

    int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
    int32_t block_size() const { return block_size_; }
    // Blocks allocate() can hand out now (never used or cached with no user).
    int32_t n_available() const { return static_cast<int32_t>(clean_.size()) + n_cached_free_; }
    int32_t n_in_use() const { return n_in_use_; }
    int32_t n_cached() const { return static_cast<int32_t>(by_hash_.size()); }

    // A block with one user, or -1 when every block is in use. Evicting a cached block calls
    // on_evict(block) first (the owner drops what it keyed on that block, e.g. a state snapshot).
    int32_t allocate();
    void retain(int32_t block);
    void release(int32_t block);
    int32_t ref_count(int32_t block) const { return blocks_.at(static_cast<size_t>(block)).refs; }

    // Records that `block` now holds tokens (block_size of them) following the prefix that ends
    // in `parent` (-1: the first block). Returns the block that holds this prefix in the cache:
    // `block` itself, or an older block with the same content (then the caller should use that
    // one instead — retain it, release `block` — so equal prefixes share memory).
    int32_t commit(int32_t block, int32_t parent, std::span<const int32_t> tokens);
    bool is_committed(int32_t block) const { return blocks_.at(static_cast<size_t>(block)).committed; }

    // The cached blocks holding tokens[0 .. n*block_size) for the largest n <= max_blocks whose
    // every block is cached. Does not retain them.
    std::vector<int32_t> match(std::span<const int32_t> tokens, int64_t max_blocks) const;

    std::function<void(int32_t)> on_evict;

private:
    struct Block {
        int32_t refs = 0;
        bool committed = false;  // in by_hash_
        uint64_t hash = 0, parent_hash = 0;
        uint64_t released_at = 0;  // LRU clock value of the last release to zero users
        std::vector<int32_t> tokens;
    };
    static uint64_t chain_hash(uint64_t parent_hash, std::span<const int32_t> tokens);
    void evict(int32_t block);

    int32_t block_size_;
    std::vector<Block> blocks_;
    std::vector<int32_t> clean_;  // free blocks holding nothing reusable
    // Free committed blocks by release time (oldest first): the LRU order for eviction.
    std::map<uint64_t, int32_t> lru_;  // released_at -> block
    int32_t n_cached_free_ = 0, n_in_use_ = 0;
    uint64_t clock_ = 0;
    std::unordered_map<uint64_t, int32_t> by_hash_;
};

}  // namespace strata::kv
