// Scratch memory of a forward pass, in backend memory: named, typed buffers (float, int32) that a
// block takes for the length of one call and gives back when it returns.
//
//   void moe_block(ForwardPass& fp, ...) {
//       Scratch s(*fp.arena);                         // given back when s goes out of scope
//       float* router = s.floats(n * c.n_expert);     // [n][n_expert]
//       int32_t* ids = s.ints(n * c.n_expert_used);   // [n][k]
//
// Takes are stacked: a call's buffers follow those of its callers (Model::forward's hidden
// states, the architecture's normed/branch), and the blocks of one layer after another reuse the
// same memory. The arena carves them from one backend allocation that the Model keeps across
// forwards, so a steady decode step allocates nothing and its buffers keep their addresses
// (the CUDA backend replays recorded steps only when every op's pointers match).
//
// Typed views of one float allocation rather than a byte-typed Backend alloc: memory from
// Backend::alloc_floats is aligned for any 4-byte type (CPU 64 bytes, CUDA 256), int32_t has
// float's size and alignment, views start on kAlign boundaries, and the host never reads a
// device backend's buffers; the arena is the one place that turns that storage into typed
// pointers, and Backend keeps its one float allocator.
//
// Growth: a take that does not fit in the block gets memory of its own, kept under its offset so
// that the next layers' takes at the same offset reuse it; the next forward (begin) replaces the
// block and those pieces with one block of the largest extent seen. Only a forward larger than
// any before allocates (and begin once after it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "backend/backend.h"

namespace strata::model {

class ScratchArena {
public:
    // Offsets (bytes) of views: CUDA's own allocation alignment, and whole cache lines on a CPU.
    static constexpr size_t kAlign = 256;

    explicit ScratchArena(backend::Backend& be) : be_(&be) {}

    // Starts a forward: nothing is taken. After a forward that outgrew the block, one block of
    // the largest extent seen replaces it and its overflow pieces (every earlier view is invalid).
    void begin();
    size_t capacity_bytes() const { return capacity_; }
    size_t high_water_bytes() const { return high_water_; }

private:
    friend class Scratch;
    void* take(size_t bytes);

    backend::Backend* be_;
    backend::Buffer block_;
    size_t capacity_ = 0;                         // bytes of block_
    size_t top_ = 0;                              // bytes taken (the next view's offset, before rounding)
    size_t high_water_ = 0;                       // the largest extent taken since the block was made
    std::map<size_t, backend::Buffer> overflow_;  // by offset: takes beyond the block this time
};

// One call's buffers; given back, in stack order, when it is destroyed.
class Scratch {
public:
    explicit Scratch(ScratchArena& a) : arena_(a), mark_(a.top_) {}
    ~Scratch() { arena_.top_ = mark_; }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

    float* floats(int64_t n) { return static_cast<float*>(arena_.take(bytes(n, sizeof(float)))); }
    int32_t* ints(int64_t n) { return static_cast<int32_t*>(arena_.take(bytes(n, sizeof(int32_t)))); }

private:
    static size_t bytes(int64_t n, size_t elem) { return static_cast<size_t>(n > 0 ? n : 1) * elem; }
    ScratchArena& arena_;
    size_t mark_;
};

}  // namespace strata::model
