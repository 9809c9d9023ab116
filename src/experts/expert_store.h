// The expert store: a MoE model's experts kept where they fit — hot ones in VRAM slots of a GPU
// backend, all of them in host RAM (the mapped file; registered for DMA when the RAM budget holds
// them all), and the file itself when the RAM budget is smaller than the experts (pages of cold
// experts handed back to the kernel, the routed ones read on demand). It knows nothing of
// routing: the backend's moe hands it each layer's ids (saw) and the pairs it could not run from
// VRAM (run, on the CPU kernels), and asks placement(layer) where the experts are.
// Design: docs/design/expert_store_seat.md. Contract:
// - Construction checks the RAM budget (below 16 experts of the largest layer: an Error naming
//   --ram-budget and the sizes) and reads --expert-stats FILE when it exists (an Error naming the
//   flag when it was written for another model or cannot be parsed).
// - before_forward() runs between forwards (Model::forward): at the first, the slots are made in
//   what the VRAM budget leaves after weights, caches and a headroom for scratch, filled from the
//   statistics (or experts 0..S-1 of each layer) and the split printed; later, copies whose
//   fences are reached are mapped, and every replan_every forwards the hottest missing experts
//   of each layer replace the coldest resident ones (a bounded number of copies, in the
//   background: a step never waits for one).
// - The statistics file is written when the store is destroyed (and by save_stats()).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cpu/moe_pairs.h"
#include "experts/prefill_balance.h"
#include "experts/share_tuner.h"
#include "util/thread_pool.h"

namespace strata::experts {

struct StoreOptions {
    uint64_t ram_budget = 0;                        // bytes of host RAM the experts may hold; 0: all of them
    std::filesystem::path stats_file;               // --expert-stats: read at start if present, written at the end
    int n_threads = 1;                              // the host executor's threads (the CPU backend lends its own pool)
    int64_t slots_per_layer = -1;                   // VRAM slots per layer; -1: as many as the budget leaves
    uint64_t vram_headroom = uint64_t{1536} << 20;  // device memory kept free for later scratch
    bool adapt = true;                              // re-place experts by their hits while serving
    int replan_every = 8;                           // forwards between re-placement plans
    int max_swaps_per_layer = 2;                    // copies one plan may start per layer
    // The share of the missing experts a GPU reads in place from host memory in decode (the rest
    // run on the host executor, at the same time); -1: tuned from the decode steps' times, from a
    // start the measured speeds give (far_share).
    double far_fraction = -1;
    // Correct prefill's upload-or-host split from the layers' measured times (PrefillBalance).
    bool prefill_balance = true;
    std::string model_id;                         // identifies the model in the statistics file
    std::function<void(const std::string&)> log;  // the split and re-placements; null: stderr
    // Hands an expert's pages back to the kernel (the file tier; the model's gguf::File does it:
    // unmapped and dropped from the page cache). Null: madvise(MADV_PAGEOUT) on the range.
    std::function<void(const uint8_t*, size_t)> drop_pages;
};

// One MoE layer's expert tensors in host memory (the model's bound views).
struct LayerExperts {
    int layer = -1;
    backend::Weight gate, up, down;
};

struct StoreStats {
    int64_t n_layers = 0, n_expert = 0, slots_per_layer = 0;
    uint64_t expert_bytes = 0;        // all experts of all layers
    uint64_t vram_bytes = 0;          // the slots
    uint64_t ram_budget = 0;          // 0: all experts in RAM
    bool pinned = false;              // host tier registered for DMA
    uint64_t pairs_vram = 0;          // (token, expert) pairs run from VRAM
    uint64_t pairs_host = 0;          // ... by the host executor
    uint64_t pairs_far = 0;           // ... by the GPU, the expert over the bus (read in place; uploaded in prefill)
    double far_fraction = 0.0;        // the share of missing experts read in place now
    double prefill_host_scale = 1.0;  // PrefillBalance's correction of the host's cost in prefill
    uint64_t host_bytes = 0;          // expert bytes the host executor read
    uint64_t file_reads = 0;          // experts brought back from the file (RAM budget below the experts)
    double host_busy_s = 0.0;         // wall time of the host executor
    uint64_t replacements = 0;        // experts copied into slots after the first fill
    uint64_t forwards = 0;
    double hit_rate() const {
        const uint64_t n = pairs_vram + pairs_host + pairs_far;
        return n == 0 ? 0.0 : static_cast<double>(pairs_vram) / static_cast<double>(n);
    }
};

using Clock = std::chrono::steady_clock;

class ExpertStore final : public backend::HostExperts {
public:
    ExpertStore(backend::Backend& be, std::vector<LayerExperts> layers, int64_t n_layer_total, const StoreOptions& o);
    ~ExpertStore() override;
    ExpertStore(const ExpertStore&) = delete;
    ExpertStore& operator=(const ExpertStore&) = delete;

    // The layer's placement, or null for a layer without experts.
    const backend::ExpertPlacement* placement(int layer) const {
        return layer >= 0 && static_cast<size_t>(layer) < index_.size() && index_[static_cast<size_t>(layer)] >= 0
                   ? &layers_[static_cast<size_t>(index_[static_cast<size_t>(layer)])].placement
                   : nullptr;
    }
    void before_forward();
    StoreStats stats() const;
    std::string describe() const;  // the split, one paragraph
    void save_stats() const;
    // Sets StoreOptions::far_fraction (-1: from the speeds) for the forwards from the next one.
    void set_far_fraction(double f) {
        o_.far_fraction = f;
        far_dirty_ = true;
    }

    // On: prefill's split corrected from measured layer times (from the model's balance again);
    // off: the cost model alone.
    void set_prefill_balance(bool on);

    // backend::HostExperts
    void run(int layer, const float* x, int64_t n_tokens, std::span<const backend::HostExpertPair> pairs, float* out,
             util::ThreadPool* pool) override;
    void saw(int layer, const int32_t* ids, int64_t n, int64_t n_far, int64_t n_host) override;
    void prefill_times(int layer, double gpu_s, double host_s) override;

private:
    struct Pending {
        int64_t expert, slot;
        backend::Fence fence;
    };
    struct Layer {
        LayerExperts w;
        uint64_t expert_bytes = 0;       // gate + up + down of one expert
        std::vector<int32_t> slot_of;    // [n_expert] -> slot or -1 (what the device has)
        std::vector<int32_t> expert_in;  // [slots] -> expert or -1 (free or being filled)
        std::vector<double> score;       // [n_expert] decayed hit counts
        std::vector<uint8_t> in_ram;     // [n_expert] pages resident (file tier only)
        uint64_t ram_bytes = 0;          // expert bytes of the in_ram ones
        std::vector<uint64_t> last_use;  // [n_expert] the run that last used it (file tier)
        std::vector<Pending> pending;
        backend::ExpertPlacement placement;
    };
    void make_slots();
    void fill_initial();
    void replan();
    void map_reached();
    void read_stats();
    void log(const std::string& s) const;
    void drop(const uint8_t* p, size_t n) const;
    void file_tier_touch(Layer& L, std::span<const backend::HostExpertPair> pairs);
    bool assign_far(Layer& L, double fraction);  // codes of the missing experts; true when changed
    void reassign_far();                         // assign_far on every layer, tables sent (mu_ held)
    void publish_costs();                        // the cost model into every placement (mu_ held)
    double far_share() const;                    // the share in force: the fixed one, the tuner's, or model_share's
    double model_share() const;
    void calibrate_host();
    cpu::ExpertMatrices matrices(const Layer& L, int32_t e) const;

    backend::Backend& be_;
    StoreOptions o_;
    std::vector<Layer> layers_;
    std::vector<int> index_;  // [n_layer_total] -> index into layers_ or -1
    int64_t n_expert_ = 0;
    uint64_t expert_bytes_ = 0;
    bool file_tier_ = false, slots_made_ = false, far_ok_ = false, far_dirty_ = false;
    util::ThreadPool pool_;
    cpu::MoePairs runner_;
    mutable std::mutex mu_;  // stats (run and saw may come from a CUDA callback thread)
    StoreStats st_;
    uint64_t run_clock_ = 0;
    double host_fixed_s_ = 0.0, host_token_s_ = 0.0;  // measured cost model of the host executor
    double missing_per_layer_ = -1;                   // missing pairs of a decode layer (average; -1: none seen)
    // The tuner of the in-place share and what it measures: each forward's pairs a layer (its
    // key; -1: none seen, -2: layers differed) and the time from one forward's start to the next.
    ShareTuner tuner_;
    PrefillBalance balance_;
    int64_t fwd_key_ = -1;
    Clock::time_point fwd_start_{};
};

}  // namespace strata::experts
