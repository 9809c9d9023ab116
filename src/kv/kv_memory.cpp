#include "kv/kv_memory.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace strata::kv {

using model::LayerKind;

KvMemory::KvMemory(const model::Model& model, const KvMemoryOptions& opts) : model_(model), be_(model.backend()), opts_(opts) {
    const model::ModelConfig& c = model.config();
    if (opts.block_size <= 0) throw Error("KV block size must be positive");
    for (int64_t il = 0; il < c.n_layer; ++il)
        (c.layers[static_cast<size_t>(il)] == LayerKind::Attention ? attention_layers_ : recurrent_layers_).push_back(il);

    const backend::KvType type = model.kv_type();
    const int64_t k_values = static_cast<int64_t>(opts.block_size) * c.n_head_kv * c.head_dim_k;
    const int64_t v_values = static_cast<int64_t>(opts.block_size) * c.n_head_kv * c.head_dim_v;
    bytes_per_block_ = static_cast<size_t>((k_values + v_values) * static_cast<int64_t>(attention_layers_.size())) *
                       backend::kv_value_bytes(type);
    int64_t n_blocks = bytes_per_block_ == 0 ? 1 : opts.kv_bytes / static_cast<int64_t>(bytes_per_block_);
    if (n_blocks < 1)
        throw Error("KV memory budget of " + std::to_string(opts.kv_bytes >> 20) + " MiB holds no block of " +
                    std::to_string(opts.block_size) + " positions (" + std::to_string(bytes_per_block_) + " bytes)");
    n_blocks = std::min<int64_t>(n_blocks, 1 << 30);
    pool_ = std::make_unique<BlockPool>(static_cast<int32_t>(n_blocks), opts.block_size);
    for (size_t i = 0; i < attention_layers_.size(); ++i) {
        k_pools_.emplace_back(&be_, static_cast<size_t>(backend::kv_pool_floats(n_blocks * k_values, type)));
        v_pools_.emplace_back(&be_, static_cast<size_t>(backend::kv_pool_floats(n_blocks * v_values, type)));
    }

    if (!recurrent_layers_.empty()) {
        conv_floats_ = model::recurrent_conv_floats(c);
        ssm_floats_ = model::recurrent_state_floats(c);
        slot_floats_ = (conv_floats_ + ssm_floats_) * static_cast<int64_t>(recurrent_layers_.size());
        if (opts.n_slots <= 0) throw Error("a hybrid model needs at least one recurrent-state slot");
        state_ = backend::Buffer(&be_, static_cast<size_t>(slot_floats_ * opts.n_slots));
        n_snap_slots_ = static_cast<int32_t>(std::min<int64_t>(opts.snapshot_bytes / (slot_floats_ * 4), 1 << 20));
        if (n_snap_slots_ > 0) snapshots_ = backend::Buffer(&be_, static_cast<size_t>(slot_floats_ * n_snap_slots_));
        for (int32_t s = n_snap_slots_ - 1; s >= 0; --s) free_snaps_.push_back(s);
        pool_->on_evict = [this](int32_t block) { drop_snapshot(block); };
    }
    const int32_t n_slots = recurrent_layers_.empty() ? 0 : opts.n_slots;
    for (int32_t s = n_slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

size_t KvMemory::total_bytes() const {
    return bytes_per_block_ * static_cast<size_t>(pool_->n_blocks()) + state_.size() * sizeof(float) +
           snapshots_.size() * sizeof(float);
}

int32_t KvMemory::acquire_slot() {
    if (recurrent_layers_.empty()) return -1;
    if (free_slots_.empty()) return -1;
    const int32_t s = free_slots_.back();
    free_slots_.pop_back();
    clear_slot(s);
    return s;
}

void KvMemory::release_slot(int32_t slot) {
    if (slot < 0) return;
    free_slots_.push_back(slot);
}

void KvMemory::clear_slot(int32_t slot) {
    if (slot < 0) return;
    // Zero through a host buffer: backend memory is not host-addressable in general.
    static thread_local std::vector<float> zeros;
    zeros.assign(static_cast<size_t>(slot_floats_), 0.0f);
    be_.copy_from_host(zeros.data(), slot_base(slot), zeros.size());
}

std::unique_ptr<model::SequenceState> KvMemory::make_sequence(int32_t slot) const {
    const model::ModelConfig& c = model_.config();
    auto s = std::make_unique<model::SequenceState>(c.n_layer);
    for (size_t i = 0; i < attention_layers_.size(); ++i)
        s->set_layer_kv(attention_layers_[i], k_pools_[i].data(), v_pools_[i].data(), model_.kv_type());
    if (!recurrent_layers_.empty()) {
        if (slot < 0) throw Error("internal: a hybrid model's sequence needs a recurrent-state slot");
        float* p = slot_base(slot);
        for (int64_t il : recurrent_layers_) {
            s->set_layer_recurrent(il, p, p + conv_floats_);
            p += conv_floats_ + ssm_floats_;
        }
    }
    s->set_block_size(opts_.block_size);
    return s;
}

bool KvMemory::save_snapshot(int32_t slot, int32_t block) {
    if (n_snap_slots_ == 0 || slot < 0) return false;
    int32_t snap;
    if (const auto it = snap_of_block_.find(block); it != snap_of_block_.end()) {
        snap = it->second;
    } else {
        if (free_snaps_.empty()) {
            // Evict the least recently used snapshot.
            const auto lru = std::min_element(snap_used_at_.begin(), snap_used_at_.end(),
                                              [](const auto& a, const auto& b) { return a.second < b.second; });
            drop_snapshot(lru->first);
        }
        snap = free_snaps_.back();
        free_snaps_.pop_back();
        snap_of_block_[block] = snap;
    }
    snap_used_at_[block] = ++clock_;
    be_.copy(slot_base(slot), snapshots_.data() + static_cast<size_t>(snap) * static_cast<size_t>(slot_floats_),
             static_cast<size_t>(slot_floats_));
    return true;
}

void KvMemory::load_snapshot(int32_t block, int32_t slot) {
    const auto it = snap_of_block_.find(block);
    if (it == snap_of_block_.end() || slot < 0)
        throw Error("internal: no recurrent-state snapshot for KV block " + std::to_string(block));
    snap_used_at_[block] = ++clock_;
    be_.copy(snapshots_.data() + static_cast<size_t>(it->second) * static_cast<size_t>(slot_floats_), slot_base(slot),
             static_cast<size_t>(slot_floats_));
}

void KvMemory::drop_snapshot(int32_t block) {
    const auto it = snap_of_block_.find(block);
    if (it == snap_of_block_.end()) return;
    free_snaps_.push_back(it->second);
    snap_of_block_.erase(it);
    snap_used_at_.erase(block);
}

}  // namespace strata::kv
