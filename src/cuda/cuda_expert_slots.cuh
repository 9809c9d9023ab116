// The expert store's device tier on a CUDA backend (backend.h's expert-slot vocabulary; the
// policy is the store's, src/experts/). Contract:
// - make() allocates one layer's slot arenas (gate, up and down slices of n_slots experts at a
//   fixed stride, so the expert kernels address slot s as they address expert s of a whole
//   tensor) and its device table expert -> slot (all -1), counted in the VRAM budget. The first
//   make() also allocates the fixed exchange for the host's share of decode-sized calls and,
//   when asked, registers the host tensors for DMA (one range over every layer's experts).
// - copy() queues expert e's slices host -> slot on the copy stream after everything queued on
//   the main stream so far, and returns a fence; reached() polls it. set_table() queues the
//   table's new contents on the main stream (between forwards).
// - Uploads for batches grouped on the host (prefill): upload() queues up to kUploadExperts
//   experts into one of two transient halves on the copy stream, after the main stream has
//   released that half (release(), recorded after the kernels that read it); the main stream
//   waits for the copy (wait_upload) before its kernels read the half.
// - The decode exchange: pinned host rows and device rows of fixed addresses (recorded graphs
//   keep them). Two ways to join the host's share into a step, both recordable into graphs:
//   - the link (the default): link_post() is one kernel that does the slot lookup, writes the pack
//     (and x, when the host has pairs) into the pinned rows and rings a doorbell in pinned memory
//     with the next number of a device counter; a host thread of ours, spinning while forwards
//     run (wake() at each forward's start; asleep after 50 ms without one), answers it: the hit
//     statistics, the host's pairs into the pinned output, then the same number back.
//     link_join() is one kernel, after the GPU's experts, that spins on that answer (bounded:
//     kLinkTimeoutS, then the step's result is void) and adds the host's rows into its target.
//     No host node, no copy and no second stream in a step: a join costs a PCIe round trip.
//   - the callback (STRATA_CUDA_HOST_LINK=0): a side stream and two events fork/join the host's
//     share, copies the pack and x down, runs one host-callback job per (layer, tokens) and
//     copies the result up.
//   A host share that throws leaves its rows zero and its message for take_error(), which the
//   backend's forward_end turns into an Error.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_vram_pool.cuh"

namespace strata::cuda {

class ExpertSlots {
public:
    static constexpr int64_t kMaxPairs = 256;      // the device-indexed MoE path's largest call
    static constexpr int64_t kUploadExperts = 32;  // experts per transient upload half

    struct Layer {
        backend::Weight gate, up, down;  // the host tensors
        int64_t n_slots = 0;
        uint8_t *gate_slots = nullptr, *up_slots = nullptr, *down_slots = nullptr;
        int32_t* table = nullptr;  // device [n_expert]
        DeviceMatrix gate_m() const { return {gate.type, gate_slots, gate.ne[1], gate.ne[0], gate.row_bytes}; }
        DeviceMatrix up_m() const { return {up.type, up_slots, up.ne[1], up.ne[0], up.row_bytes}; }
        DeviceMatrix down_m() const { return {down.type, down_slots, down.ne[1], down.ne[0], down.row_bytes}; }
    };

    // The host's share of one decode-sized MoE call, run by a host callback on the side stream
    // (STRATA_CUDA_HOST_LINK=0); it reads the exchange's pinned rows.
    struct HostJob {
        backend::HostExperts* host = nullptr;
        int layer = 0;
        int64_t n_tokens = 0, k = 0;
        std::vector<backend::HostExpertPair> pairs;
        ExpertSlots* owner = nullptr;
    };

    ExpertSlots(VramPool& pool, cudaStream_t main);
    ~ExpertSlots();
    ExpertSlots(const ExpertSlots&) = delete;
    ExpertSlots& operator=(const ExpertSlots&) = delete;

    void make(int layer, const backend::Weight& gate, const backend::Weight& up, const backend::Weight& down, int64_t n_slots,
              bool host_pinned);
    backend::Fence copy(int layer, int64_t slot, int64_t expert);
    bool reached(backend::Fence f);
    void set_table(int layer, const int32_t* slot_of, int64_t n_expert);
    double rate() const { return rate_; }
    const Layer& layer(int l) const;
    bool far_ok() {
        if (!tried_register_) register_host();
        return registered_dev_ != nullptr;
    }
    // The layer's host tensors as the device reads them in place (null when not registered).
    MoeFar far(int layer) const;

    // Transient uploads (prefill). half: 0 or 1. experts: host expert ids, <= kUploadExperts.
    void upload(int layer, int half, const int32_t* experts, int64_t n);
    void wait_upload(int half);  // the main stream waits for half's last upload
    void release(int half);      // the main stream is done reading half
    DeviceMatrix upload_gate(int layer, int half) const;
    DeviceMatrix upload_up(int layer, int half) const;
    DeviceMatrix upload_down(int layer, int half) const;

    // The decode exchange.
    int32_t* d_pack() const { return d_pack_; }      // device [3][kMaxPairs]
    float* d_partial() const { return d_partial_; }  // device [kMaxPairs][n_embd]
    int32_t* h_pack() const { return h_pack_; }
    float* h_x() const { return h_x_; }
    float* h_out() const { return h_out_; }
    cudaStream_t side() const { return side_; }
    cudaEvent_t fork() const { return fork_; }
    cudaEvent_t join() const { return join_; }
    HostJob* job(int layer, int64_t n_tokens);  // stable address (graphs keep it)
    static void CUDART_CB run_host_job(void* job);

    // The link (see the contract). link_post replaces the slot lookup: d_pack() as
    // expert_slot_lookup writes it. link_join adds the host's rows into y [n_tokens][n_embd] of
    // the last post. host: the store's executor (one per backend).
    static constexpr double kLinkTimeoutS = 60.0;
    void link_post(int layer, backend::HostExperts* host, const int32_t* ids, const float* weights, const int32_t* table,
                   int64_t n_tokens, int64_t k, const float* x, cudaStream_t s);
    void link_join(float* y, int64_t n_tokens, cudaStream_t s);
    void wake();  // a forward starts: the link's thread spins
    // A host share that failed since the last call (its message), or empty: the forward that ran
    // it must not return a result computed without it.
    std::string take_error();

    struct LinkHeader;  // the doorbell, in pinned host memory (cuda_expert_slots.cu)

private:
    void register_host();
    // The host's share of the pack in the pinned rows (both joins): statistics, then the pairs
    // whose slot is -1 into h_out. Never throws (an error is kept for take_error()).
    void serve_host_share(backend::HostExperts* host, int layer, int64_t n_tokens, int64_t k,
                          std::vector<backend::HostExpertPair>& pairs);
    void link_main();
    void ensure_exchange(int64_t n_embd);
    uint8_t* alloc(size_t bytes, const char* what);

    VramPool& pool_;
    const cudaStream_t main_;
    cudaStream_t copy_ = nullptr, side_ = nullptr;
    cudaEvent_t fork_ = nullptr, join_ = nullptr, main_mark_ = nullptr;
    std::map<int, Layer> layers_;
    std::vector<void*> allocations_;
    bool want_pinned_ = false, tried_register_ = false;
    void* registered_ = nullptr;
    uint8_t* registered_dev_ = nullptr;  // the registered range's device address
    // Fences: a start and an end event per copy, recycled once reached.
    struct FenceEvents {
        cudaEvent_t start, end;
        uint64_t bytes;
    };
    std::map<backend::Fence, FenceEvents> fences_;
    std::vector<FenceEvents> spare_;
    backend::Fence next_fence_ = 1;
    double rate_ = 0.0;
    // Transient halves, sized for the largest layer's expert.
    size_t half_gate_ = 0, half_up_ = 0, half_down_ = 0;
    uint8_t* halves_[2] = {nullptr, nullptr};
    cudaEvent_t uploaded_[2] = {nullptr, nullptr}, released_[2] = {nullptr, nullptr};
    // The exchange (fixed once made).
    int64_t exchange_embd_ = 0;
    int32_t *d_pack_ = nullptr, *h_pack_ = nullptr;
    float *d_partial_ = nullptr, *h_x_ = nullptr, *h_out_ = nullptr;
    std::map<std::pair<int, int64_t>, std::unique_ptr<HostJob>> jobs_;
    std::mutex error_mu_;
    std::string error_;
    // The link: its doorbell (pinned), device counter of posts and the last post's host pairs,
    // its thread and what wakes it.
    LinkHeader* link_ = nullptr;
    unsigned long long* d_link_seq_ = nullptr;
    int32_t* d_link_host_ = nullptr;
    std::atomic<backend::HostExperts*> link_host_{nullptr};
    std::thread link_thread_;
    std::atomic<bool> link_stop_{false};
    std::atomic<int64_t> link_woken_ns_{0};
    std::mutex link_mu_;
    std::condition_variable link_cv_;
};

}  // namespace strata::cuda
