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

// The link's doorbell. posted and the post's shape are written by the GPU (link_post_kernel),
// done by the host thread (link_main), timed_out by the GPU (link_join_kernel). Each side's
// words on their own 128 bytes.
struct ExpertSlots::LinkHeader {
    alignas(128) unsigned long long posted;
    int32_t layer, n_tokens, k, n_host;
    alignas(128) unsigned long long done;
    alignas(128) unsigned int timed_out;
};

namespace {
size_t slice_bytes(const backend::Weight& w) { return static_cast<size_t>(w.ne[1]) * w.row_bytes; }

using LinkHeader = ExpertSlots::LinkHeader;
using Clock = std::chrono::steady_clock;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One block. The slot lookup (as expert_slot_lookup_kernel), the pack also into the pinned rows,
// x too when the host has pairs, then the doorbell: every write before it visible to the host
// (system fence), the counter's next number last.
__global__ void link_post_kernel(const int32_t* ids, const float* weights, const int32_t* table, int n_pairs, int k, int layer,
                                 const float* x, int n_x, int32_t* d_pack, int32_t* h_pack, float* h_x, LinkHeader* h,
                                 unsigned long long* seq, int32_t* n_host_out) {
    grid_dependency_enter();
    __shared__ int n_host;
    if (threadIdx.x == 0) n_host = 0;
    __syncthreads();
    for (int i = static_cast<int>(threadIdx.x); i < n_pairs; i += static_cast<int>(blockDim.x)) {
        const int32_t e = ids[i], slot = table[e], w = __float_as_int(weights[i]);
        d_pack[i] = e;
        d_pack[n_pairs + i] = slot;
        d_pack[2 * n_pairs + i] = w;
        h_pack[i] = e;
        h_pack[n_pairs + i] = slot;
        h_pack[2 * n_pairs + i] = w;
        if (slot == -1) atomicAdd(&n_host, 1);
    }
    __syncthreads();
    if (n_host > 0) {
        if ((n_x & 3) == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 && (reinterpret_cast<uintptr_t>(h_x) & 15) == 0)
            for (int i = static_cast<int>(threadIdx.x); i < n_x / 4; i += static_cast<int>(blockDim.x))
                reinterpret_cast<float4*>(h_x)[i] = reinterpret_cast<const float4*>(x)[i];
        else
            for (int i = static_cast<int>(threadIdx.x); i < n_x; i += static_cast<int>(blockDim.x)) h_x[i] = x[i];
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned long long next = *seq + 1;
        *seq = next;
        *n_host_out = n_host;
        h->layer = layer;
        h->n_tokens = n_pairs / k;
        h->k = k;
        h->n_host = n_host;
        __threadfence_system();
        *reinterpret_cast<volatile unsigned long long*>(&h->posted) = next;
    }
}

// Every block's first thread waits for the host's answer to the last post (bounded: then
// timed_out is raised and nothing added); then y += the host's rows, read past the caches.
__global__ void link_join_kernel(LinkHeader* h, const unsigned long long* seq, const int32_t* n_host, const float* h_out,
                                 float* y, int n, unsigned long long timeout_ns) {
    grid_dependency_enter();
    __shared__ int go;
    if (threadIdx.x == 0) {
        const unsigned long long want = *seq;
        const volatile unsigned long long* done = &h->done;
        const unsigned long long t0 = global_ns();
        int ok = 1;
        while (*done != want) {
            if (global_ns() - t0 > timeout_ns) {
                ok = 0;
                *reinterpret_cast<volatile unsigned int*>(&h->timed_out) = 1;
                break;
            }
            __nanosleep(100);
        }
        __threadfence_system();
        go = ok && *n_host > 0;
    }
    __syncthreads();
    if (!go) return;
    for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += static_cast<int>(gridDim.x * blockDim.x))
        y[i] += __ldcv(h_out + i);
}
}  // namespace

ExpertSlots::ExpertSlots(VramPool& pool, cudaStream_t main) : pool_(pool), main_(main) {}

ExpertSlots::~ExpertSlots() {
    if (copy_ != nullptr) cudaStreamSynchronize(copy_);
    if (side_ != nullptr) cudaStreamSynchronize(side_);
    cudaStreamSynchronize(main_);  // a join still waiting is answered by the link's thread, still running
    if (link_thread_.joinable()) {
        link_stop_ = true;
        link_cv_.notify_all();
        link_thread_.join();
    }
    if (link_ != nullptr) cudaFreeHost(link_);
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
    d_link_seq_ = reinterpret_cast<unsigned long long*>(alloc(2 * sizeof(unsigned long long), "the expert exchange"));
    d_link_host_ = reinterpret_cast<int32_t*>(d_link_seq_ + 1);
    STRATA_CUDA_CHECK(cudaMemsetAsync(d_link_seq_, 0, 2 * sizeof(unsigned long long), main_));
    STRATA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&link_), sizeof(LinkHeader), cudaHostAllocMapped));
    *link_ = LinkHeader{};
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

// The pairs whose slot is -1, through the store's host executor, on the link's thread or CUDA's
// callback thread. No CUDA calls here. An exception cannot cross either: the share is left zero
// and the message kept for take_error().
void ExpertSlots::serve_host_share(backend::HostExperts* host, int layer, int64_t n_tokens, int64_t k,
                                   std::vector<backend::HostExpertPair>& pairs) {
    const int64_t n_pairs = n_tokens * k, n_embd = exchange_embd_;
    float* out = h_out_;
    pairs.clear();
    try {
        if (host == nullptr || n_pairs <= 0 || n_pairs > kMaxPairs || layers_.count(layer) == 0)
            throw Error("a host share of " + std::to_string(n_pairs) + " pairs for layer " + std::to_string(layer) +
                        " this store does not hold");
        const int32_t* ids = h_pack_;
        const int32_t* slots = h_pack_ + n_pairs;
        const auto* w = reinterpret_cast<const float*>(h_pack_ + 2 * n_pairs);
        int64_t n_far = 0;
        for (int64_t i = 0; i < n_pairs; ++i) {
            if (slots[i] == -1) pairs.push_back({static_cast<int32_t>(i / k), ids[i], w[i]});
            n_far += slots[i] < -1;
        }
        host->saw(layer, ids, n_pairs, n_far, static_cast<int64_t>(pairs.size()));
        if (pairs.empty()) std::fill(out, out + n_tokens * n_embd, 0.0f);
        else host->run(layer, h_x_, n_tokens, pairs, out, nullptr);
    } catch (const std::exception& e) {
        if (n_pairs > 0 && n_pairs <= kMaxPairs) std::fill(out, out + n_tokens * n_embd, 0.0f);
        std::lock_guard<std::mutex> g(error_mu_);
        if (error_.empty()) error_ = "layer " + std::to_string(layer) + ": " + e.what();
    }
}

void CUDART_CB ExpertSlots::run_host_job(void* p) {
    auto* j = static_cast<HostJob*>(p);
    j->owner->serve_host_share(j->host, j->layer, j->n_tokens, j->k, j->pairs);
}

void ExpertSlots::link_post(int layer, backend::HostExperts* host, const int32_t* ids, const float* weights, const int32_t* table,
                            int64_t n_tokens, int64_t k, const float* x, cudaStream_t s) {
    const int64_t n_pairs = n_tokens * k;
    if (n_pairs <= 0 || n_pairs > kMaxPairs) throw Error("internal: a decode exchange of " + std::to_string(n_pairs) + " pairs");
    link_host_ = host;
    if (!link_thread_.joinable()) link_thread_ = std::thread([this] { link_main(); });
    launch_kernel(link_post_kernel, 1, 256, 0, s, ids, weights, table, static_cast<int>(n_pairs), static_cast<int>(k), layer, x,
                  static_cast<int>(n_tokens * exchange_embd_), d_pack_, h_pack_, h_x_, link_, d_link_seq_, d_link_host_);
    STRATA_CUDA_LAUNCHED();
}

void ExpertSlots::link_join(float* y, int64_t n_tokens, cudaStream_t s) {
    const int64_t n = n_tokens * exchange_embd_;
    const auto blocks = static_cast<unsigned>(std::clamp<int64_t>((n + 1023) / 1024, 1, 32));
    launch_kernel(link_join_kernel, blocks, 256, 0, s, link_, static_cast<const unsigned long long*>(d_link_seq_),
                  static_cast<const int32_t*>(d_link_host_), static_cast<const float*>(h_out_), y, static_cast<int>(n),
                  static_cast<unsigned long long>(kLinkTimeoutS * 1e9));
    STRATA_CUDA_LAUNCHED();
}

void ExpertSlots::wake() {
    if (!link_thread_.joinable()) return;
    link_woken_ns_.store(now_ns(), std::memory_order_relaxed);
    link_cv_.notify_one();
}

// The link's thread: answers each post in turn. It spins (a post comes a layer apart, 100-500 us)
// while forwards run, and sleeps, waking every millisecond, after 50 ms with neither a post nor a
// forward's start.
void ExpertSlots::link_main() {
    std::atomic_ref<unsigned long long> posted(link_->posted), done(link_->done);
    // Both counters start at 0 (ensure_exchange), and this thread starts at the first post's
    // launch, which the GPU may already have executed: reading posted here would skip that post
    // and leave its join waiting out the timeout (seen on the H100, 2026-12-07).
    unsigned long long seen = 0;
    int64_t last = now_ns();
    std::vector<backend::HostExpertPair> pairs;
    for (uint32_t spins = 1; !link_stop_.load(std::memory_order_relaxed); ++spins) {
        const unsigned long long p = posted.load(std::memory_order_acquire);
        if (p != seen) {
            seen = p;
            const LinkHeader& h = *link_;
            serve_host_share(link_host_.load(std::memory_order_acquire), h.layer, h.n_tokens, h.k, pairs);
            done.store(p, std::memory_order_release);
            last = now_ns();
            continue;
        }
        if (spins % 1024 == 0) {
            const int64_t t = now_ns();
            if (t - std::max(last, link_woken_ns_.load(std::memory_order_relaxed)) > 50'000'000) {
                std::unique_lock<std::mutex> g(link_mu_);
                link_cv_.wait_for(g, std::chrono::milliseconds(1));
                continue;
            }
        }
#if defined(__x86_64__)
        asm volatile("pause" ::: "memory");
#endif
    }
}

std::string ExpertSlots::take_error() {
    if (link_ != nullptr && std::atomic_ref<unsigned int>(link_->timed_out).exchange(0) != 0) {
        std::lock_guard<std::mutex> g(error_mu_);
        if (error_.empty()) error_ = "the host did not answer within " + std::to_string(static_cast<int>(kLinkTimeoutS)) + " s";
    }
    std::lock_guard<std::mutex> g(error_mu_);
    return std::exchange(error_, std::string());
}

}  // namespace strata::cuda
