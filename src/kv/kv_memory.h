// The memory behind the engine's sequences: per attention layer one K and one V pool of
// blocks (paged, bookkeeping in BlockPool), a fixed number of recurrent-state slots for the
// Gated DeltaNet layers (one per running sequence), and snapshots of that state taken at block
// boundaries so a hybrid model's prefix can be reused (attention KV alone is not enough: the
// recurrent state after the prefix must be restored too).
//
// Sizes (floats per position): attention layers 2 * n_head_kv * head_dim; recurrent slot: for
// every GDN layer, conv [kernel-1][channels] + state [n_v_heads][d_k][d_v], independent of length.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "kv/block_pool.h"
#include "model/model.h"

namespace strata::kv {

struct KvMemoryOptions {
    int64_t kv_bytes = int64_t{2} << 30;        // attention KV pool budget
    int32_t block_size = 16;                    // positions per block
    int32_t n_slots = 16;                       // recurrent-state slots (max running sequences, hybrid models)
    int64_t snapshot_bytes = int64_t{1} << 30;  // budget for recurrent-state snapshots (hybrid models)
};

class KvMemory {
public:
    KvMemory(const model::Model& model, const KvMemoryOptions& opts);

    const KvMemoryOptions& options() const { return opts_; }
    BlockPool& blocks() { return *pool_; }
    const BlockPool& blocks() const { return *pool_; }
    bool has_recurrent() const { return !recurrent_layers_.empty(); }
    bool has_attention() const { return !attention_layers_.empty(); }
    size_t bytes_per_block() const { return bytes_per_block_; }
    size_t bytes_per_slot() const { return static_cast<size_t>(slot_floats_) * sizeof(float); }
    size_t total_bytes() const;

    // Recurrent-state slots (always available for models without GDN layers: slot -1 is fine).
    int32_t acquire_slot();  // -1 when all are taken
    void release_slot(int32_t slot);
    int32_t n_free_slots() const { return static_cast<int32_t>(free_slots_.size()); }
    void clear_slot(int32_t slot);  // zero conv and recurrent state (a fresh sequence)

    // A sequence viewing the pools (empty block table) and, for hybrid models, the slot.
    std::unique_ptr<model::SequenceState> make_sequence(int32_t slot) const;

    // Snapshots of a slot's recurrent state, keyed by the block that ends the prefix they follow.
    int32_t n_snapshots() const { return static_cast<int32_t>(snap_of_block_.size()); }
    int32_t snapshot_capacity() const { return n_snap_slots_; }
    bool has_snapshot(int32_t block) const { return snap_of_block_.count(block) != 0; }
    // Copies the slot's state into a snapshot for `block` (evicting the least recently used
    // snapshot when full). False when snapshots are disabled (zero budget).
    bool save_snapshot(int32_t slot, int32_t block);
    void load_snapshot(int32_t block, int32_t slot);  // the block must have one
    void drop_snapshot(int32_t block);

private:
    float* slot_base(int32_t slot) const { return state_.data() + static_cast<size_t>(slot) * static_cast<size_t>(slot_floats_); }

    const model::Model& model_;
    backend::Backend& be_;
    KvMemoryOptions opts_;
    std::vector<int64_t> attention_layers_, recurrent_layers_;
    std::vector<backend::Buffer> k_pools_, v_pools_;  // [attention layer]
    size_t bytes_per_block_ = 0;
    std::unique_ptr<BlockPool> pool_;
    // Recurrent state: slot s at state_ + s * slot_floats_, layer by layer (conv, then state).
    int64_t conv_floats_ = 0, ssm_floats_ = 0, slot_floats_ = 0;
    backend::Buffer state_;
    std::vector<int32_t> free_slots_;
    backend::Buffer snapshots_;
    int32_t n_snap_slots_ = 0;
    std::vector<int32_t> free_snaps_;
    std::unordered_map<int32_t, int32_t> snap_of_block_;
    std::unordered_map<int32_t, uint64_t> snap_used_at_;  // block -> clock, for LRU
    uint64_t clock_ = 0;
};

}  // namespace strata::kv
