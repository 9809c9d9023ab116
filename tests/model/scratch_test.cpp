// The forward pass's scratch arena: typed views in stack order, memory given back by scope,
// growth by pieces then one block, and the same addresses from one forward to the next.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cpu_backend.h"
#include "model/scratch.h"

namespace strata::model {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// One "forward": a layer-level pair, then per layer a block that takes and gives back.
std::vector<const void*> walk(ScratchArena& arena, int64_t n, int layers) {
    std::vector<const void*> seen;
    arena.begin();
    Scratch outer(arena);
    seen.push_back(outer.floats(n * 64));
    seen.push_back(outer.floats(n * 64));
    for (int l = 0; l < layers; ++l) {
        Scratch block(arena);
        float* x = block.floats(n * 96);
        int32_t* ids = block.ints(n * 8);
        float* w = block.floats(n * 8);
        // The memory is usable as the types it was taken as.
        for (int64_t i = 0; i < n * 8; ++i) ids[i] = static_cast<int32_t>(i * 3 + l);
        for (int64_t i = 0; i < n * 8; ++i) w[i] = 0.5f * static_cast<float>(i);
        for (int64_t i = 0; i < n * 96; ++i) x[i] = 1.0f;
        for (int64_t i = 0; i < n * 8; ++i) EXPECT_EQ(ids[i], static_cast<int32_t>(i * 3 + l));
        seen.push_back(x);
        seen.push_back(ids);
        seen.push_back(w);
    }
    return seen;
}

TEST(ScratchArena, ViewsAreAlignedAndDisjointWhileLive) {
    backend::CpuBackend be(1);
    ScratchArena arena(be);
    arena.begin();
    Scratch s(arena);
    float* a = s.floats(10);
    int32_t* b = s.ints(3);
    float* c = s.floats(1000);
    for (const void* p : {static_cast<const void*>(a), static_cast<const void*>(b), static_cast<const void*>(c)})
        EXPECT_EQ(address(p) % 64, 0u);
    // Disjoint, in either order: a fresh arena's takes are allocations of their own, whose order
    // in memory is the heap's (it depends on what ran before in the process).
    auto disjoint = [](const void* p, size_t p_bytes, const void* q, size_t q_bytes) {
        return address(p) + p_bytes <= address(q) || address(q) + q_bytes <= address(p);
    };
    EXPECT_TRUE(disjoint(a, 10 * sizeof(float), b, 3 * sizeof(int32_t)));
    EXPECT_TRUE(disjoint(b, 3 * sizeof(int32_t), c, 1000 * sizeof(float)));
    EXPECT_TRUE(disjoint(a, 10 * sizeof(float), c, 1000 * sizeof(float)));
}

TEST(ScratchArena, ABlocksBuffersAreGivenBackWhenItsScopeEnds) {
    backend::CpuBackend be(1);
    ScratchArena arena(be);
    walk(arena, 4, 1);  // grows
    arena.begin();
    Scratch s(arena);
    float* keep = s.floats(64);
    const void* first = nullptr;
    {
        Scratch inner(arena);
        first = inner.floats(32);
    }
    Scratch again(arena);
    EXPECT_EQ(static_cast<const void*>(again.floats(32)), first);  // the same place, taken again
    EXPECT_NE(static_cast<const void*>(keep), first);
}

TEST(ScratchArena, GrowsOnceThenKeepsItsAddresses) {
    backend::CpuBackend be(1);
    ScratchArena arena(be);
    EXPECT_EQ(arena.capacity_bytes(), 0u);
    const auto grown = walk(arena, 16, 3);  // nothing fits: every offset gets a piece of its own
    // The layers after the first reuse the first layer's pieces.
    EXPECT_EQ(grown[2], grown[5]);
    EXPECT_EQ(grown[3], grown[6]);
    const auto first = walk(arena, 16, 3);  // one block of the largest extent seen
    EXPECT_EQ(arena.capacity_bytes(), arena.high_water_bytes());
    const size_t capacity = arena.capacity_bytes();
    const auto second = walk(arena, 16, 3);
    EXPECT_EQ(first, second);  // a forward of the same size: the same addresses
    EXPECT_EQ(arena.capacity_bytes(), capacity);
    const auto smaller = walk(arena, 1, 3);  // smaller ones fit in the block
    EXPECT_EQ(smaller.front(), first.front());
    EXPECT_EQ(arena.capacity_bytes(), capacity);
    walk(arena, 64, 2);  // a larger one grows it again
    walk(arena, 1, 1);
    EXPECT_GT(arena.capacity_bytes(), capacity);
}

}  // namespace
}  // namespace strata::model
