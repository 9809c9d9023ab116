// The expert store's device tier (cuda_expert_slots.cuh).
#include "cuda/cuda_expert_slots.cuh"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "util/error.h"

namespace strata::cuda {

namespace {
size_t slice_bytes(const backend::Weight& w) { return static_cast<size_t>(w.ne[1]) * w.row_bytes; }
}  // namespace

ExpertSlots::ExpertSlots(VramPool& pool, cudaStream_t main) : pool_(pool), main_(main) {}

ExpertSlots::~ExpertSlots() {
    if (copy_ != nullptr) cudaStreamSynchronize(copy_);
    if (side_ != nullptr) cudaStreamSynchronize(side_);
    cudaStreamSynchronize(main_);
    for (auto& [f, e] : fences_) spare_.push_back(e);
    for (auto& e : spare_) {
        cudaEventDestroy(e.start);
        cudaEventDestroy(e.end);
    }
    for (cudaEvent_t e : {fork_, join_, main_mark_, uploaded_[0], uploaded_[1], released_[0], released_[1]})
        if (e != nullptr) cudaEventDestroy(e);
    for (void* p : allocations_) cudaFree(p);
    if (h_pack_ != nullptr) cudaFreeHost(h_pack_);
    if (h_x_ != nullptr) cudaFreeHost(h_x_);
    if (h_out_ != nullptr) cudaFreeHost(h_out_);
    if (registered_ != nullptr) cudaHostUnregister(registered_);
    if (copy_ != nullptr) cudaStreamDestroy(copy_);
    if (side_ != nullptr) cudaStreamDestroy(side_);
}

uint8_t* ExpertSlots::alloc(size_t bytes, const char* what) {
    if (bytes == 0) return nullptr;
    pool_.reserve(bytes, what);
    void* p = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&p, bytes));
    pool_.charge(bytes);
    allocations_.push_back(p);
    return static_cast<uint8_t*>(p);
}

void ExpertSlots::make(int layer, const backend::Weight& gate, const backend::Weight& up, const backend::Weight& down,
                       int64_t n_slots, bool host_pinned) {
    if (layers_.count(layer) != 0)
        throw Error("a backend holds the slots of one expert store (layer " + std::to_string(layer) + " has them already)");
    for (const backend::Weight* w : {&gate, &up, &down})
        if (!type_supported(w->type))
            throw Error("tensor " + w->name() + " has type " + quant::type_name(w->type) + ", which has no CUDA kernel");
    if (copy_ == nullptr) {
        STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
        STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
        for (cudaEvent_t* e : {&fork_, &join_, &main_mark_, &uploaded_[0], &uploaded_[1], &released_[0], &released_[1]})
            STRATA_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    want_pinned_ = want_pinned_ || host_pinned;
    Layer L;
    L.gate = gate;
    L.up = up;
    L.down = down;
    L.n_slots = n_slots;
    const auto S = static_cast<size_t>(n_slots);
    L.gate_slots = alloc(S * slice_bytes(gate), "expert slots (gate)");
    L.up_slots = alloc(S * slice_bytes(up), "expert slots (up)");
    L.down_slots = alloc(S * slice_bytes(down), "expert slots (down)");
    const int64_t n_expert = gate.ne[2];
    L.table = reinterpret_cast<int32_t*>(alloc(static_cast<size_t>(n_expert) * sizeof(int32_t), "the expert slot table"));
    STRATA_CUDA_CHECK(cudaMemsetAsync(L.table, 0xff, static_cast<size_t>(n_expert) * sizeof(int32_t), main_));  // all -1
    half_gate_ = std::max(half_gate_, static_cast<size_t>(kUploadExperts) * slice_bytes(gate));
    half_up_ = std::max(half_up_, static_cast<size_t>(kUploadExperts) * slice_bytes(up));
    half_down_ = std::max(half_down_, static_cast<size_t>(kUploadExperts) * slice_bytes(down));
    ensure_exchange(gate.ne[0]);
    layers_[layer] = L;
}

void ExpertSlots::ensure_exchange(int64_t n_embd) {
    if (exchange_embd_ != 0) {
        if (n_embd != exchange_embd_) throw Error("expert slots: layers differ in width");
        return;
    }
    exchange_embd_ = n_embd;
    const size_t rows = static_cast<size_t>(kMaxPairs) * static_cast<size_t>(n_embd) * sizeof(float);
    d_pack_ = reinterpret_cast<int32_t*>(alloc(3 * kMaxPairs * sizeof(int32_t), "the expert exchange"));
    d_partial_ = reinterpret_cast<float*>(alloc(rows, "the expert exchange"));
    STRATA_CUDA_CHECK(cudaMallocHost(&h_pack_, 3 * kMaxPairs * sizeof(int32_t)));
    STRATA_CUDA_CHECK(cudaMallocHost(&h_x_, rows));
    STRATA_CUDA_CHECK(cudaMallocHost(&h_out_, rows));
}

const ExpertSlots::Layer& ExpertSlots::layer(int l) const {
    const auto it = layers_.find(l);
    if (it == layers_.end()) throw Error("layer " + std::to_string(l) + " has no expert slots");
    return it->second;
}

// One registration over every layer's expert tensors (they may share pages with their
// neighbours, so one range, not one per tensor). Read-only: the file is mapped read-only.
void ExpertSlots::register_host() {
    tried_register_ = true;
    if (!want_pinned_ || layers_.empty()) return;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (const auto& [l, L] : layers_)
        for (const backend::Weight* w : {&L.gate, &L.up, &L.down}) {
            lo = std::min(lo, reinterpret_cast<uintptr_t>(w->data));
            hi = std::max(hi, reinterpret_cast<uintptr_t>(w->data) + slice_bytes(*w) * static_cast<size_t>(w->ne[2]));
        }
    const uintptr_t page = 4096;
    lo = lo / page * page;
    hi = (hi + page - 1) / page * page;
    const auto t0 = std::chrono::steady_clock::now();
    // Fault the pages in first, from all cores (pinning them one by one in the driver's single
    // thread is what makes a registration of tens of GiB slow).
    {
        const unsigned n = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
        const uintptr_t span = (hi - lo + n - 1) / n / page * page + page;
        std::vector<std::thread> ts;
        for (unsigned i = 0; i < n; ++i)
            ts.emplace_back([=] {
                const uintptr_t a = lo + span * i, b = std::min(hi, a + span);
                if (a < b) (void)madvise(reinterpret_cast<void*>(a), b - a, 22 /* MADV_POPULATE_READ, Linux 5.14 */);
            });
        for (auto& t : ts) t.join();
    }
    const cudaError_t e = cudaHostRegister(reinterpret_cast<void*>(lo), hi - lo,
                                           cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterReadOnly);
    if (e != cudaSuccess) {
        cudaGetLastError();
        std::fprintf(stderr,
                     "experts: the host tier could not be registered for DMA (%s); slot copies go through the driver's staging\n",
                     cudaGetErrorString(e));
        return;
    }
    registered_ = reinterpret_cast<void*>(lo);
    void* dev = nullptr;
    if (cudaHostGetDevicePointer(&dev, registered_, 0) == cudaSuccess) registered_dev_ = static_cast<uint8_t*>(dev);
    cudaGetLastError();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "experts: %s of host experts registered for DMA in %.1f s\n", mib(hi - lo).c_str(), s);
}

backend::Fence ExpertSlots::copy(int layer, int64_t slot, int64_t expert) {
    if (!tried_register_) register_host();
    const Layer& L = this->layer(layer);
    if (slot < 0 || slot >= L.n_slots || expert < 0 || expert >= L.gate.ne[2])
        throw Error("expert slot copy out of range (layer " + std::to_string(layer) + ", slot " + std::to_string(slot) +
                    ", expert " + std::to_string(expert) + ")");
    FenceEvents ev;
    if (!spare_.empty()) {
        ev = spare_.back();
        spare_.pop_back();
    } else {
        STRATA_CUDA_CHECK(cudaEventCreate(&ev.start));
        STRATA_CUDA_CHECK(cudaEventCreate(&ev.end));
    }
    // After everything queued on the main stream so far (a forward that still reads the slot).
    STRATA_CUDA_CHECK(cudaEventRecord(main_mark_, main_));
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(copy_, main_mark_, 0));
    STRATA_CUDA_CHECK(cudaEventRecord(ev.start, copy_));
    ev.bytes = 0;
    const auto s = static_cast<size_t>(slot);
    for (auto [w, dst] : {std::pair{&L.gate, L.gate_slots}, std::pair{&L.up, L.up_slots}, std::pair{&L.down, L.down_slots}}) {
        const size_t n = slice_bytes(*w);
        STRATA_CUDA_CHECK(cudaMemcpyAsync(dst + s * n, w->slice(expert), n, cudaMemcpyHostToDevice, copy_));
        ev.bytes += n;
    }
    STRATA_CUDA_CHECK(cudaEventRecord(ev.end, copy_));
    const backend::Fence f = next_fence_++;
    fences_[f] = ev;
    return f;
}

bool ExpertSlots::reached(backend::Fence f) {
    const auto it = fences_.find(f);
    if (it == fences_.end()) return true;
    const cudaError_t e = cudaEventQuery(it->second.end);
    if (e == cudaErrorNotReady) return false;
    STRATA_CUDA_CHECK(e);
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, it->second.start, it->second.end) == cudaSuccess && ms > 0.0f) {
        const double r = static_cast<double>(it->second.bytes) / (static_cast<double>(ms) * 1e-3);
        rate_ = rate_ == 0.0 ? r : 0.9 * rate_ + 0.1 * r;
    }
    cudaGetLastError();
    spare_.push_back(it->second);
    fences_.erase(it);
    return true;
}

void ExpertSlots::set_table(int layer, const int32_t* slot_of, int64_t n_expert) {
    const Layer& L = this->layer(layer);
    if (n_expert != L.gate.ne[2]) throw Error("expert slot table of the wrong size");
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(L.table, slot_of, static_cast<size_t>(n_expert) * sizeof(int32_t), cudaMemcpyHostToDevice, main_));
}

void ExpertSlots::upload(int layer, int half, const int32_t* experts, int64_t n) {
    if (!tried_register_) register_host();
    if (n > kUploadExperts) throw Error("internal: too many experts for one upload half");
    if (halves_[0] == nullptr) {
        const size_t bytes = half_gate_ + half_up_ + half_down_;
        halves_[0] = alloc(bytes, "the expert upload area");
        halves_[1] = alloc(bytes, "the expert upload area");
    }
    const Layer& L = this->layer(layer);
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(copy_, released_[half], 0));
    uint8_t* base = halves_[half];
    for (int64_t i = 0; i < n; ++i) {
        const auto e = experts[i];
        const auto at = static_cast<size_t>(i);
        STRATA_CUDA_CHECK(cudaMemcpyAsync(base + at * slice_bytes(L.gate), L.gate.slice(e), slice_bytes(L.gate),
                                          cudaMemcpyHostToDevice, copy_));
        STRATA_CUDA_CHECK(cudaMemcpyAsync(base + half_gate_ + at * slice_bytes(L.up), L.up.slice(e), slice_bytes(L.up),
                                          cudaMemcpyHostToDevice, copy_));
        STRATA_CUDA_CHECK(cudaMemcpyAsync(base + half_gate_ + half_up_ + at * slice_bytes(L.down), L.down.slice(e),
                                          slice_bytes(L.down), cudaMemcpyHostToDevice, copy_));
    }
    STRATA_CUDA_CHECK(cudaEventRecord(uploaded_[half], copy_));
}

void ExpertSlots::wait_upload(int half) { STRATA_CUDA_CHECK(cudaStreamWaitEvent(main_, uploaded_[half], 0)); }
void ExpertSlots::release(int half) { STRATA_CUDA_CHECK(cudaEventRecord(released_[half], main_)); }

DeviceMatrix ExpertSlots::upload_gate(int l, int half) const {
    const Layer& L = layer(l);
    return {L.gate.type, halves_[half], L.gate.ne[1], L.gate.ne[0], L.gate.row_bytes};
}
DeviceMatrix ExpertSlots::upload_up(int l, int half) const {
    const Layer& L = layer(l);
    return {L.up.type, halves_[half] + half_gate_, L.up.ne[1], L.up.ne[0], L.up.row_bytes};
}
DeviceMatrix ExpertSlots::upload_down(int l, int half) const {
    const Layer& L = layer(l);
    return {L.down.type, halves_[half] + half_gate_ + half_up_, L.down.ne[1], L.down.ne[0], L.down.row_bytes};
}

MoeFar ExpertSlots::far(int l) const {
    if (registered_dev_ == nullptr) return {};
    const Layer& L = layer(l);
    auto dev = [&](const backend::Weight& w) { return registered_dev_ + (w.data - static_cast<const uint8_t*>(registered_)); };
    return {dev(L.gate), dev(L.up), dev(L.down)};
}

ExpertSlots::HostJob* ExpertSlots::job(int layer, int64_t n_tokens) {
    auto& j = jobs_[{layer, n_tokens}];
    if (!j) {
        j = std::make_unique<HostJob>();
        j->owner = this;
    }
    return j.get();
}

// On CUDA's callback thread: the pairs whose slot is -1, through the store's host executor. No
// CUDA calls here. An exception cannot cross the callback: the share is left zero and the message
// kept for take_error().
void CUDART_CB ExpertSlots::run_host_job(void* p) {
    auto* j = static_cast<HostJob*>(p);
    const int64_t n_pairs = j->n_tokens * j->k;
    const int32_t* ids = j->h_pack;
    const int32_t* slots = j->h_pack + n_pairs;
    const auto* w = reinterpret_cast<const float*>(j->h_pack + 2 * n_pairs);
    j->pairs.clear();
    int64_t n_far = 0;
    for (int64_t i = 0; i < n_pairs; ++i) {
        if (slots[i] == -1) j->pairs.push_back({static_cast<int32_t>(i / j->k), ids[i], w[i]});
        n_far += slots[i] < -1;
    }
    try {
        j->host->saw(j->layer, ids, n_pairs, n_far, static_cast<int64_t>(j->pairs.size()));
        if (j->pairs.empty()) std::fill(j->h_out, j->h_out + j->n_tokens * j->n_embd, 0.0f);
        else j->host->run(j->layer, j->h_x, j->n_tokens, j->pairs, j->h_out, nullptr);
    } catch (const std::exception& e) {
        std::fill(j->h_out, j->h_out + j->n_tokens * j->n_embd, 0.0f);
        std::lock_guard<std::mutex> g(j->owner->error_mu_);
        if (j->owner->error_.empty()) j->owner->error_ = "layer " + std::to_string(j->layer) + ": " + e.what();
    }
}

std::string ExpertSlots::take_error() {
    std::lock_guard<std::mutex> g(error_mu_);
    return std::exchange(error_, std::string());
}

}  // namespace strata::cuda
