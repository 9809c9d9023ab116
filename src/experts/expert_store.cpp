// The expert store (expert_store.h): slots, placement plans, the host executor and its tiers.
#include "experts/expert_store.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>

#include "util/error.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21  // Linux 5.4+: reclaim the pages now (clean file pages leave the page cache)
#endif

namespace strata::experts {

namespace {

std::string mib(uint64_t b) { return std::to_string((b + (1u << 19)) >> 20) + " MiB"; }

uint64_t slice_bytes(const backend::Weight& w) { return static_cast<uint64_t>(w.ne[1]) * w.row_bytes; }

// The whole pages inside [p, p + n).
void advise_pages(const uint8_t* p, size_t n, int advice) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, advice);
}

// How much the score of an expert decays at each plan (about a 180-forward half-life with a
// plan every 8 forwards): routing drifts with the conversation, old hits should fade.
constexpr double kDecay = 0.97;
// A missing expert replaces a resident one only when clearly hotter (no copy churn on noise).
constexpr double kSwapMargin = 1.5, kSwapFloor = 2.0;
// The host executor's workers poll this long for the next layer before sleeping: in decode its
// runs come a layer apart (300-500 us on the seed's geometry), and a futex wake of 15 workers
// at every layer cost more than its share of the work.
constexpr int kHostSpinUs = 3000;
// The fixed cost of the host executor's share of a decode layer: the callback's launch, the
// hidden row down and the result up (model_share).
constexpr double kHostJoinS = 50e-6;

}  // namespace

ExpertStore::ExpertStore(backend::Backend& be, std::vector<LayerExperts> layers, int64_t n_layer_total, const StoreOptions& o)
    : be_(be), o_(o), index_(static_cast<size_t>(n_layer_total), -1), pool_(std::max(1, o.n_threads), kHostSpinUs) {
    if (layers.empty()) throw Error("the expert store needs a model with expert layers");
    n_expert_ = layers.front().gate.ne[2];
    uint64_t largest = 0;
    for (LayerExperts& w : layers) {
        if (w.layer < 0 || w.layer >= n_layer_total) throw Error("expert store: layer index out of range");
        if (w.gate.ne[2] != n_expert_ || w.up.ne[2] != n_expert_ || w.down.ne[2] != n_expert_)
            throw Error("expert store: layers differ in their number of experts");
        Layer L;
        L.w = w;
        L.expert_bytes = slice_bytes(w.gate) + slice_bytes(w.up) + slice_bytes(w.down);
        L.score.assign(static_cast<size_t>(n_expert_), 0.0);
        L.in_ram.assign(static_cast<size_t>(n_expert_), 1);
        L.last_use.assign(static_cast<size_t>(n_expert_), 0);
        L.placement.layer = w.layer;
        L.placement.n_expert = n_expert_;
        L.placement.host = this;
        expert_bytes_ += L.expert_bytes * static_cast<uint64_t>(n_expert_);
        largest = std::max(largest, L.expert_bytes);
        index_[static_cast<size_t>(w.layer)] = static_cast<int>(layers_.size());
        layers_.push_back(std::move(L));
    }
    st_.n_layers = static_cast<int64_t>(layers_.size());
    st_.n_expert = n_expert_;
    st_.expert_bytes = expert_bytes_;
    st_.ram_budget = o_.ram_budget;
    if (o_.ram_budget > 0 && o_.ram_budget < expert_bytes_) {
        if (o_.ram_budget < 16 * largest)
            throw Error("--ram-budget " + mib(o_.ram_budget) + " is below 16 experts of one layer (" + mib(16 * largest) +
                        "); the experts need " + mib(expert_bytes_) + " in all");
        // The file tier: experts come back from the file on demand; start with none in RAM.
        file_tier_ = true;
        // MADV_RANDOM: no read-around on faults (it would bring the neighbours of every expert
        // read, unaccounted); each expert is read ahead exactly, with MADV_WILLNEED, when used.
        for (Layer& L : layers_) {
            std::fill(L.in_ram.begin(), L.in_ram.end(), 0);
            for (const backend::Weight* w : {&L.w.gate, &L.w.up, &L.w.down}) {
                advise_pages(w->data, slice_bytes(*w) * static_cast<size_t>(n_expert_), MADV_RANDOM);
                drop(w->data, slice_bytes(*w) * static_cast<size_t>(n_expert_));
            }
        }
    }
    // The host executor's first cost guess (replaced by measurements): one expert read at
    // 40 GB/s, each token an eighth of that again.
    host_fixed_s_ = static_cast<double>(largest) / 40e9;
    host_token_s_ = host_fixed_s_ / 8;
    if (!o_.stats_file.empty() && std::filesystem::exists(o_.stats_file)) read_stats();
}

ExpertStore::~ExpertStore() {
    try {
        save_stats();
    } catch (const std::exception& e) {
        log(std::string("experts: could not save the statistics: ") + e.what());
    }
}

void ExpertStore::drop(const uint8_t* p, size_t n) const {
    if (o_.drop_pages) o_.drop_pages(p, n);
    else advise_pages(p, n, MADV_PAGEOUT);
}

void ExpertStore::log(const std::string& s) const {
    if (o_.log) o_.log(s);
    else std::fprintf(stderr, "%s\n", s.c_str());
}

cpu::ExpertMatrices ExpertStore::matrices(const Layer& L, int32_t e) const {
    if (e < 0 || e >= n_expert_) throw Error("expert id " + std::to_string(e) + " out of range");
    auto m = [&](const backend::Weight& w) {
        cpu::WeightMatrix x;
        x.type = w.type;
        x.data = w.slice(e);
        x.rows = w.ne[1];
        x.cols = w.ne[0];
        x.row_stride = w.row_bytes;
        return x;
    };
    return {m(L.w.gate), m(L.w.up), m(L.w.down)};
}

// ---- the device tier ---------------------------------------------------------------------

void ExpertStore::make_slots() {
    slots_made_ = true;
    if (!be_.has_expert_slots()) return;  // no device tier (the CPU backend)
    uint64_t per_slot = 0;                // one slot in every layer
    for (const Layer& L : layers_) per_slot += L.expert_bytes;
    const uint64_t mem = be_.expert_slot_memory(o_.vram_headroom);
    int64_t S = std::min<int64_t>(n_expert_, static_cast<int64_t>(mem / per_slot));
    if (o_.slots_per_layer >= 0) {
        if (o_.slots_per_layer > S && o_.slots_per_layer <= n_expert_)
            throw Error("expert store: " + std::to_string(o_.slots_per_layer) + " slots per layer need " +
                        mib(per_slot * static_cast<uint64_t>(o_.slots_per_layer)) + " of VRAM; " + mib(mem) + " are left");
        S = std::min<int64_t>(o_.slots_per_layer, n_expert_);
    }
    for (Layer& L : layers_) {
        be_.make_expert_slots(L.w.layer, L.w.gate, L.w.up, L.w.down, S, !file_tier_);
        L.slot_of.assign(static_cast<size_t>(n_expert_), -1);
        L.expert_in.assign(static_cast<size_t>(S), -1);
        L.placement.slot_of = L.slot_of.data();
    }
    st_.slots_per_layer = S;
    st_.vram_bytes = per_slot * static_cast<uint64_t>(S);
    fill_initial();
    far_ok_ = be_.reads_host_experts();
    if (far_ok_ && o_.far_fraction < 0) calibrate_host();
    {
        std::lock_guard<std::mutex> g(mu_);
        st_.pinned = far_ok_;  // registered (and mapped) for the device
        if (far_ok_) tuner_.restart(model_share());
        reassign_far();
    }
    log(describe());
}

// The first fill: each layer's S hottest experts by the statistics file, else experts 0..S-1
// (routing of an unseen model is unknown; any set is as good). Waits for the copies (load time).
void ExpertStore::fill_initial() {
    const int64_t S = st_.slots_per_layer;
    if (S == 0) return;
    std::vector<backend::Fence> fences;
    const auto t0 = Clock::now();
    auto last = t0;
    uint64_t done = 0;
    for (Layer& L : layers_) {
        std::vector<int32_t> order(static_cast<size_t>(n_expert_));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return L.score[static_cast<size_t>(a)] > L.score[static_cast<size_t>(b)]; });
        for (int64_t s = 0; s < S; ++s) {
            const int32_t e = order[static_cast<size_t>(s)];
            fences.push_back(be_.copy_to_expert_slot(L.w.layer, s, e));
            L.slot_of[static_cast<size_t>(e)] = static_cast<int32_t>(s);
            L.expert_in[static_cast<size_t>(s)] = e;
            done += L.expert_bytes;
        }
        if (const auto now = Clock::now(); now - last > std::chrono::seconds(2)) {
            last = now;
            log("experts: filling VRAM slots, " + mib(done) + " of " + mib(st_.vram_bytes) + " queued");
        }
    }
    for (backend::Fence f : fences)
        while (!be_.fence_reached(f)) std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (Layer& L : layers_) be_.set_expert_slots(L.w.layer, L.slot_of.data(), n_expert_);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    log("experts: " + mib(st_.vram_bytes) + " copied into VRAM slots in " + std::to_string(s).substr(0, 5) + " s");
}

void ExpertStore::map_reached() {
    for (Layer& L : layers_) {
        bool changed = false;
        for (size_t i = 0; i < L.pending.size();) {
            const Pending& p = L.pending[i];
            if (!be_.fence_reached(p.fence)) {
                ++i;
                continue;
            }
            L.slot_of[static_cast<size_t>(p.expert)] = static_cast<int32_t>(p.slot);
            L.expert_in[static_cast<size_t>(p.slot)] = static_cast<int32_t>(p.expert);
            L.pending[i] = L.pending.back();
            L.pending.pop_back();
            changed = true;
            std::lock_guard<std::mutex> g(mu_);
            ++st_.replacements;
        }
        if (changed) be_.set_expert_slots(L.w.layer, L.slot_of.data(), n_expert_);
    }
}

// Per layer, the hottest missing experts replace the coldest resident ones while clearly hotter,
// at most max_swaps_per_layer copies; a replaced expert's slot is unmapped first, filled on the
// backend's copy stream, and mapped again by map_reached once its fence is reached.
void ExpertStore::replan() {
    std::lock_guard<std::mutex> g(mu_);
    for (Layer& L : layers_) {
        for (double& v : L.score) v *= kDecay;
        if (L.expert_in.empty() || !L.pending.empty()) continue;
        std::vector<int32_t> missing, resident;
        for (int32_t e = 0; e < n_expert_; ++e) (L.slot_of[static_cast<size_t>(e)] >= 0 ? resident : missing).push_back(e);
        for (int32_t s = 0; s < static_cast<int32_t>(L.expert_in.size()); ++s)
            if (L.expert_in[static_cast<size_t>(s)] < 0) resident.push_back(-1 - s);  // a free slot: coldest of all
        auto score = [&](int32_t e) { return e < 0 ? -1.0 : L.score[static_cast<size_t>(e)]; };
        const auto n = static_cast<size_t>(std::min<int64_t>(o_.max_swaps_per_layer, static_cast<int64_t>(missing.size())));
        if (n == 0 || resident.empty()) continue;
        std::partial_sort(missing.begin(), missing.begin() + static_cast<std::ptrdiff_t>(n), missing.end(),
                          [&](int32_t a, int32_t b) { return score(a) > score(b); });
        const size_t m = std::min(n, resident.size());
        std::partial_sort(resident.begin(), resident.begin() + static_cast<std::ptrdiff_t>(m), resident.end(),
                          [&](int32_t a, int32_t b) { return score(a) < score(b); });
        std::vector<std::pair<int32_t, int64_t>> moves;  // (expert in, slot)
        for (size_t i = 0; i < m; ++i) {
            const int32_t in = missing[i], out = resident[i];
            if (score(in) < score(out) * kSwapMargin + kSwapFloor) break;
            int64_t slot;
            if (out < 0) {
                slot = -1 - out;
            } else {
                slot = L.slot_of[static_cast<size_t>(out)];
                L.slot_of[static_cast<size_t>(out)] = -1;
            }
            L.expert_in[static_cast<size_t>(slot)] = -1;
            moves.emplace_back(in, slot);
        }
        if (moves.empty()) continue;
        be_.set_expert_slots(L.w.layer, L.slot_of.data(), n_expert_);  // unmapped before their copies start
        for (const auto& [e, slot] : moves) L.pending.push_back({e, slot, be_.copy_to_expert_slot(L.w.layer, slot, e)});
    }
    reassign_far();  // the unmapped experts too
}

void ExpertStore::reassign_far() {
    if (!far_ok_) return;
    const double f = far_share();
    for (Layer& L : layers_)
        if (assign_far(L, f)) be_.set_expert_slots(L.w.layer, L.slot_of.data(), n_expert_);
}

double ExpertStore::far_share() const {
    if (o_.far_fraction >= 0) return std::min(1.0, o_.far_fraction);
    return tuner_.climbs() > 0 ? tuner_.share() : model_share();
}

// Where the tuner starts: the share of missing experts to read in place in decode that makes the host
// executor's part of a layer take as long as the GPU's reads over the bus, the two running at
// the same time. With m the missing pairs of a decode layer (measured), h the host's time per
// expert of a decode run (measured), o the host share's fixed cost in a layer (the callback and
// its copies) and b an expert's bytes over the in-place read rate (the copy engine's measured
// rate: the GPU's in-place reads reached about as much, 42 GB/s against 41-47):
//   f m b = o + (1 - f) m h,  so  f = (o / m + h) / (h + b),  in steps of 0.05.
// Without a measured bus rate, all of them. Measured alone, the two rates overstate what they
// reach together (they share the host's RAM): on the H100 host, seed-125b at 24 GiB, this gave
// 45 % where 30 % was 5 % faster (docs/BENCHMARKS.md), hence the tuner.
double ExpertStore::model_share() const {
    const double rate = be_.expert_copy_rate();
    if (rate <= 0 || host_fixed_s_ <= 0 || layers_.empty()) return 1.0;
    const double b =
        static_cast<double>(expert_bytes_) / static_cast<double>(n_expert_ * static_cast<int64_t>(layers_.size())) / rate;
    const double m = std::max(1.0, missing_per_layer_);
    const double f = (kHostJoinS / m + host_fixed_s_) / (host_fixed_s_ + b);
    return std::clamp(std::round(20.0 * f) / 20.0, 0.0, 1.0);
}

// The host executor's time per expert for a decode run, measured before the first forward:
// one token through 8 experts of the first layer, the median of 5 runs after a warm-up (the
// experts' pages are resident and registered by now). The runs' moving average replaces it.
void ExpertStore::calibrate_host() {
    Layer& L = layers_.front();
    const int64_t n_embd = L.w.gate.ne[0];
    const int n = static_cast<int>(std::min<int64_t>(8, n_expert_));
    std::vector<float> x(static_cast<size_t>(n_embd)), out(static_cast<size_t>(n_embd));
    for (int64_t i = 0; i < n_embd; ++i) x[static_cast<size_t>(i)] = 0.01f * static_cast<float>((i * 37) % 101 - 50);
    std::vector<backend::HostExpertPair> pairs;
    for (int i = 0; i < n; ++i) pairs.push_back({0, static_cast<int32_t>(i * (n_expert_ / n)), 1.0f / static_cast<float>(n)});
    std::vector<double> t;
    for (int rep = 0; rep < 6; ++rep) {
        const auto t0 = Clock::now();
        runner_.run(
            x.data(), 1, n_embd, pairs, [&](int32_t e) { return matrices(L, e); }, out.data(), &pool_);
        if (rep > 0) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::lock_guard<std::mutex> g(mu_);
    host_fixed_s_ = t[t.size() / 2] / n;
}

// The layer's missing experts by score (hottest first), each marked to be read in place (-2 - e)
// or run on the host (-1) so that a `fraction` of every run of them is read in place.
bool ExpertStore::assign_far(Layer& L, double fraction) {
    std::vector<int32_t> missing;
    for (int32_t e = 0; e < n_expert_; ++e)
        if (L.slot_of[static_cast<size_t>(e)] < 0) missing.push_back(e);
    std::stable_sort(missing.begin(), missing.end(),
                     [&](int32_t a, int32_t b) { return L.score[static_cast<size_t>(a)] > L.score[static_cast<size_t>(b)]; });
    bool changed = false;
    double acc = 0.0;
    for (int32_t e : missing) {
        acc += fraction;
        const bool far = acc >= 1.0 - 1e-9;
        if (far) acc -= 1.0;
        const int32_t code = far ? -2 - e : -1;
        if (L.slot_of[static_cast<size_t>(e)] != code) {
            L.slot_of[static_cast<size_t>(e)] = code;
            changed = true;
        }
    }
    st_.far_fraction = fraction;
    return changed;
}

void ExpertStore::before_forward() {
    if (!slots_made_) make_slots();
    map_reached();
    const auto now = Clock::now();
    std::string note;  // logged after the lock: the link thread's saw() and run() wait on mu_
    if (far_ok_) {
        std::lock_guard<std::mutex> g(mu_);
        if (far_dirty_) {
            // Back to automatic: climb again from where the tuner was, finely.
            if (o_.far_fraction < 0) tuner_.refine();
            reassign_far();
            far_dirty_ = false;
        } else if (o_.far_fraction < 0) {
            // The previous forward, when it was a decode step (up to 64 pairs in each layer).
            if (fwd_key_ > 0 && fwd_key_ <= 64 && st_.forwards > 0)
                tuner_.add(fwd_key_, std::chrono::duration<double>(now - fwd_start_).count());
            if (std::abs(far_share() - st_.far_fraction) > 1e-9) reassign_far();
            note = tuner_.take_note();
        }
        fwd_key_ = -1;
    }
    if (!note.empty()) log("experts: in-place share: " + note);
    fwd_start_ = now;
    const bool plan_now = st_.forwards % static_cast<uint64_t>(std::max(1, o_.replan_every)) == 0 && st_.forwards > 0;
    if (o_.adapt && st_.slots_per_layer > 0 && plan_now) replan();
    std::lock_guard<std::mutex> g(mu_);
    publish_costs();
    ++st_.forwards;
}

// The cost model the backend reads for prefill's upload-or-host choice: the bus's measured rate,
// the host executor's measured times scaled by the balance's correction.
void ExpertStore::publish_costs() {
    const double rate = be_.expert_copy_rate() > 0 ? be_.expert_copy_rate() : 20e9;
    const double scale = o_.prefill_balance ? balance_.scale() : 1.0;
    st_.prefill_host_scale = scale;
    for (Layer& L : layers_) {
        L.placement.upload_s = static_cast<double>(L.expert_bytes) / rate;
        L.placement.host_fixed_s = host_fixed_s_ * scale;
        L.placement.host_token_s = host_token_s_ * scale;
    }
}

void ExpertStore::set_prefill_balance(bool on) {
    std::lock_guard<std::mutex> g(mu_);
    o_.prefill_balance = on;
    balance_.reset();
    publish_costs();
}

// Called on the backend's thread between layers (never while it reads a placement).
void ExpertStore::prefill_times(int layer, double gpu_s, double host_s) {
    (void)layer;
    std::lock_guard<std::mutex> g(mu_);
    if (!o_.prefill_balance) return;
    balance_.report(gpu_s, host_s);
    publish_costs();
}

// ---- the host executor ------------------------------------------------------------------

void ExpertStore::file_tier_touch(Layer& L, std::span<const backend::HostExpertPair> pairs) {
    ++run_clock_;
    for (const backend::HostExpertPair& p : pairs) {
        const auto e = static_cast<size_t>(p.expert);
        L.last_use[e] = run_clock_;
        if (L.in_ram[e]) continue;
        L.in_ram[e] = 1;
        L.ram_bytes += L.expert_bytes;
        ++st_.file_reads;
        for (const backend::Weight* w : {&L.w.gate, &L.w.up, &L.w.down})
            advise_pages(w->slice(p.expert), slice_bytes(*w), MADV_WILLNEED);
    }
}

void ExpertStore::run(int layer, const float* x, int64_t n_tokens, std::span<const backend::HostExpertPair> pairs, float* out,
                      util::ThreadPool* pool) {
    const backend::ExpertPlacement* pl = placement(layer);
    if (pl == nullptr) throw Error("expert store: layer " + std::to_string(layer) + " has no experts");
    Layer& L = layers_[static_cast<size_t>(index_[static_cast<size_t>(layer)])];
    const auto t0 = Clock::now();
    if (file_tier_) {
        std::lock_guard<std::mutex> g(mu_);
        file_tier_touch(L, pairs);
    }
    runner_.run(
        x, n_tokens, L.w.gate.ne[0], pairs, [&](int32_t e) { return matrices(L, e); }, out, pool != nullptr ? pool : &pool_);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    const size_t n_ex = runner_.n_experts();
    std::lock_guard<std::mutex> g(mu_);
    st_.host_busy_s += dt;
    st_.host_bytes += static_cast<uint64_t>(n_ex) * L.expert_bytes;
    if (n_ex > 0) {
        // The cost model: runs of about a token per expert measure the fixed part, longer ones
        // the part per token (moving averages).
        const double per = dt / static_cast<double>(n_ex), m = static_cast<double>(pairs.size()) / static_cast<double>(n_ex);
        if (m < 1.5) host_fixed_s_ = 0.9 * host_fixed_s_ + 0.1 * per;
        else if (m > 2.0 && per > host_fixed_s_) host_token_s_ = 0.9 * host_token_s_ + 0.1 * (per - host_fixed_s_) / m;
    }
    if (file_tier_) {
        // Over the layer's share of the RAM budget: the least recently used experts go back to
        // the file (never one this run used).
        const auto share = static_cast<uint64_t>(static_cast<double>(o_.ram_budget) * static_cast<double>(L.expert_bytes) *
                                                 static_cast<double>(n_expert_) / static_cast<double>(expert_bytes_));
        while (L.ram_bytes > share) {
            int32_t victim = -1;
            for (int32_t e = 0; e < n_expert_; ++e)
                if (L.in_ram[static_cast<size_t>(e)] && L.last_use[static_cast<size_t>(e)] != run_clock_ &&
                    (victim < 0 || L.last_use[static_cast<size_t>(e)] < L.last_use[static_cast<size_t>(victim)]))
                    victim = e;
            if (victim < 0) break;
            L.in_ram[static_cast<size_t>(victim)] = 0;
            L.ram_bytes -= L.expert_bytes;
            for (const backend::Weight* w : {&L.w.gate, &L.w.up, &L.w.down}) drop(w->slice(victim), slice_bytes(*w));
        }
    }
}

void ExpertStore::saw(int layer, const int32_t* ids, int64_t n, int64_t n_far, int64_t n_host) {
    const backend::ExpertPlacement* pl = placement(layer);
    if (pl == nullptr) return;
    Layer& L = layers_[static_cast<size_t>(index_[static_cast<size_t>(layer)])];
    std::lock_guard<std::mutex> g(mu_);
    for (int64_t i = 0; i < n; ++i)
        if (ids[i] >= 0 && ids[i] < n_expert_) L.score[static_cast<size_t>(ids[i])] += 1.0;
    st_.pairs_vram += static_cast<uint64_t>(n - n_far - n_host);
    st_.pairs_far += static_cast<uint64_t>(n_far);
    st_.pairs_host += static_cast<uint64_t>(n_host);
    fwd_key_ = fwd_key_ == -1 ? n : (fwd_key_ == n ? n : -2);
    // Missing pairs of a decode layer, a moving average (model_share).
    if (n <= 64) {
        const auto missing = static_cast<double>(n_far + n_host);
        missing_per_layer_ = missing_per_layer_ < 0 ? missing : 0.98 * missing_per_layer_ + 0.02 * missing;
    }
}

// ---- statistics, the split ----------------------------------------------------------------

StoreStats ExpertStore::stats() const {
    std::lock_guard<std::mutex> g(mu_);
    return st_;
}

std::string ExpertStore::describe() const {
    const StoreStats s = stats();
    double host_s = 0;
    {
        std::lock_guard<std::mutex> g(mu_);
        host_s = host_fixed_s_;
    }
    std::ostringstream o;
    o << "experts: " << s.n_layers << " layers x " << s.n_expert << " experts, " << mib(s.expert_bytes)
      << "; VRAM: " << s.slots_per_layer << " slots per layer (" << mib(s.vram_bytes) << ", "
      << (s.n_expert > 0 ? 100.0 * static_cast<double>(s.slots_per_layer) / static_cast<double>(s.n_expert) : 0.0)
      << " % of the experts); host RAM: ";
    if (file_tier_) o << mib(s.ram_budget) << " budget, the rest read from the file on demand";
    else o << "all experts (" << (s.pinned ? "registered for DMA" : "pageable") << ")";
    if (far_ok_) {
        o << "; decode reads " << static_cast<int>(100.0 * s.far_fraction + 0.5) << " % of the missing experts in place";
        if (o_.far_fraction < 0)
            o << " (tuned from the decode steps' times; it starts from host " << static_cast<int>(1e6 * host_s + 0.5)
              << " us an expert, bus " << static_cast<int>(be_.expert_copy_rate() / 1e9 + 0.5) << " GB/s)";
    }
    o << "; host executor: " << pool_.size() << " threads";
    return o.str();
}

void ExpertStore::save_stats() const {
    if (o_.stats_file.empty()) return;
    std::lock_guard<std::mutex> g(mu_);
    const std::filesystem::path tmp = o_.stats_file.string() + ".tmp";
    {
        std::ofstream f(tmp);
        if (!f) throw Error("--expert-stats: cannot write " + tmp.string());
        f << "strata-expert-stats 1\nmodel " << o_.model_id << "\nlayers " << layers_.size() << " experts " << n_expert_ << "\n";
        for (const Layer& L : layers_) {
            f << "L " << L.w.layer;
            for (double v : L.score) f << ' ' << static_cast<int64_t>(v + 0.5);
            f << '\n';
        }
        if (!f) throw Error("--expert-stats: writing " + tmp.string() + " failed");
    }
    std::filesystem::rename(tmp, o_.stats_file);
}

void ExpertStore::read_stats() {
    const std::string name = o_.stats_file.string();
    std::ifstream f(o_.stats_file);
    if (!f) throw Error("--expert-stats " + name + ": cannot read the file");
    auto bad = [&](const std::string& why) { return Error("--expert-stats " + name + ": " + why); };
    std::string magic, key, id;
    int version = 0;
    if (!(f >> magic >> version) || magic != "strata-expert-stats" || version != 1)
        throw bad("not a statistics file of this version");
    if (!(f >> key) || key != "model") throw bad("no model line");
    std::getline(f, id);
    if (!id.empty() && id.front() == ' ') id.erase(0, 1);
    size_t n_layers = 0;
    int64_t n_expert = 0;
    if (!(f >> key >> n_layers) || key != "layers" || !(f >> key >> n_expert) || key != "experts") throw bad("no shape line");
    if (id != o_.model_id || n_layers != layers_.size() || n_expert != n_expert_)
        throw bad("written for another model (" + id + ", " + std::to_string(n_layers) + " layers x " + std::to_string(n_expert) +
                  " experts; this model is " + o_.model_id + ", " + std::to_string(layers_.size()) + " x " +
                  std::to_string(n_expert_) + "). Remove it or name another file");
    for (size_t i = 0; i < n_layers; ++i) {
        int layer = -1;
        if (!(f >> key >> layer) || key != "L" || layer < 0 || static_cast<size_t>(layer) >= index_.size() ||
            index_[static_cast<size_t>(layer)] < 0)
            throw bad("layer line " + std::to_string(i + 1) + " is malformed");
        Layer& L = layers_[static_cast<size_t>(index_[static_cast<size_t>(layer)])];
        for (int64_t e = 0; e < n_expert_; ++e) {
            int64_t v = 0;
            if (!(f >> v) || v < 0) throw bad("layer " + std::to_string(layer) + " has a malformed count");
            L.score[static_cast<size_t>(e)] = static_cast<double>(v);
        }
    }
}

}  // namespace strata::experts
