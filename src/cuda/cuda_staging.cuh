// Host inputs of ops (positions, block tables, cache rows, token ids, expert lists) on their way
// to the device: a pinned staging area and its device twin. Contract:
// - upload() copies n host values into the next 256-byte-aligned piece of the area and returns
//   that piece's device address, valid for the kernels queued after it on the stream. Eagerly it
//   queues the copy at once; in a recorded forward nothing is copied until ForwardGraphs::end,
//   which sends the whole used area in one copy ahead of the graph (so a replay must stage at the
//   same offsets as its capture: anything that would move them declines the recording).
// - The area is reused from the start only after a wait for the stream (restart() at a forward's
//   begin, or upload() when it is full), so a device pointer it handed out stays valid for the
//   rest of the op that asked for it. It grows (doubling) when one upload does not fit at all.
// - upload_cached() returns the previous copy when the same key last uploaded the same bytes and
//   the area has not been reused since: a decode step's positions, block tables and cache rows
//   are the same for every layer, so they go up once per step instead of once per op.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_graphs.cuh"
#include "cuda/cuda_vram_pool.cuh"

namespace strata::cuda {

class HostStaging {
public:
    HostStaging(VramPool& pool, ForwardGraphs& graphs, cudaStream_t stream) : pool_(pool), graphs_(graphs), stream_(stream) {}
    ~HostStaging();
    HostStaging(const HostStaging&) = delete;
    HostStaging& operator=(const HostStaging&) = delete;

    // A new area of `bytes` (recorded graphs are dropped: their copy read the old one).
    void grow(size_t bytes);
    // After a wait for the stream: the area is free again.
    void restart() {
        used_ = 0;
        ++generation_;
    }

    template <class T>
    T* upload(const T* host, size_t n) {
        const size_t bytes = std::max<size_t>(n * sizeof(T), 1);
        if (bytes > cap_) {
            graphs_.decline();
            grow(std::max(bytes, 2 * cap_));
        }
        size_t off = (used_ + 255) / 256 * 256;
        if (off + bytes > cap_) {
            graphs_.decline();  // offsets would differ from the graph's
            sync_stream(stream_);
            off = 0;
            ++generation_;
        }
        std::memcpy(static_cast<uint8_t*>(host_) + off, host, n * sizeof(T));
        if (graphs_.mode() == ForwardGraphs::Mode::Eager)
            STRATA_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(dev_) + off, static_cast<uint8_t*>(host_) + off,
                                              n * sizeof(T), cudaMemcpyHostToDevice, stream_));
        used_ = off + bytes;
        return reinterpret_cast<T*>(static_cast<uint8_t*>(dev_) + off);
    }
    template <class T>
    const T* upload_cached(const void* key, const T* host, size_t n) {
        if (graphs_.mode() != ForwardGraphs::Mode::Eager) return upload(host, n);  // recorded forwards stage every input in order
        if (cache_.size() > 4096) cache_.clear();                                  // block tables of sequences long gone
        Cached& c = cache_[key];
        const size_t bytes = n * sizeof(T);
        if (c.dev != nullptr && c.generation == generation_ && c.bytes.size() == bytes &&
            std::memcmp(c.bytes.data(), host, bytes) == 0)
            return static_cast<const T*>(c.dev);
        c.bytes.assign(reinterpret_cast<const uint8_t*>(host), reinterpret_cast<const uint8_t*>(host) + bytes);
        c.dev = upload(host, n);
        c.generation = generation_;
        return static_cast<const T*>(c.dev);
    }

    // The area as ForwardGraphs::end copies it: bytes [0, used()) of host() to device().
    size_t used() const { return used_; }
    const void* host() const { return host_; }
    void* device() const { return dev_; }

private:
    struct Cached {
        std::vector<uint8_t> bytes;
        const void* dev = nullptr;
        uint64_t generation = 0;
    };

    VramPool& pool_;
    ForwardGraphs& graphs_;
    const cudaStream_t stream_;
    void* host_ = nullptr;  // pinned
    void* dev_ = nullptr;
    size_t cap_ = 0, used_ = 0;
    uint64_t generation_ = 0;  // bumped whenever the area is reused from the start
    std::unordered_map<const void*, Cached> cache_;
};

}  // namespace strata::cuda
