#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <functional>

namespace strata::tokenizer {

MergeTable::MergeTable(const std::vector<Merge>& merges) {
    size_t capacity = 16;
    unsigned bits = 4;
    while (capacity < merges.size() * 2) {
        capacity <<= 1;
        ++bits;
    }
    slots_.assign(capacity, Entry{kEmpty, -1, -1});
    mask_ = capacity - 1;
    shift_ = 64 - bits;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const Merge& m = merges[rank];
        const uint64_t key = pack(m.left, m.right);
        size_t i = slot(key);
        while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
        if (slots_[i].key == key) continue;  // a repeated pair keeps its first (lowest) rank
        slots_[i] = Entry{key, static_cast<int32_t>(rank), m.result};
    }
}

namespace {
// Pieces up to this many bytes merge by rescanning a flat array (quadratic but branch-light and
// cache-resident); longer ones use a heap (n log n), which keeps a 100 KB base64 blob cheap.
constexpr size_t kSmallPiece = 48;
}  // namespace

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out, BpeScratch& s) const {
    s.ids.clear();
    for (const char c : piece) {
        const int32_t id = byte_token_[static_cast<uint8_t>(c)];
        if (id >= 0) s.ids.push_back(id);
    }
    if (s.ids.size() <= 1) {
        out.insert(out.end(), s.ids.begin(), s.ids.end());
        return;
    }
    if (s.ids.size() <= kSmallPiece) merge_small(s, out);
    else merge_heap(s, out);
}

void Bpe::merge_small(BpeScratch& s, std::vector<int32_t>& out) const {
    std::vector<int32_t>& ids = s.ids;
    size_t n = ids.size();
    // ranks[k], results[k]: the merge of (ids[k], ids[k+1]); INT_MAX when there is none.
    s.ranks.resize(n);
    s.results.resize(n);
    int32_t* ranks = s.ranks.data();
    int32_t* results = s.results.data();
    const auto set_pair = [&](size_t k) {
        const MergeTable::Entry* e = merges_.find(ids[k], ids[k + 1]);
        ranks[k] = e ? e->rank : INT_MAX;
        results[k] = e ? e->result : -1;
    };
    for (size_t k = 0; k + 1 < n; ++k) set_pair(k);
    for (;;) {
        size_t best = 0;
        int32_t best_rank = INT_MAX;
        for (size_t k = 0; k + 1 < n; ++k) {
            if (ranks[k] < best_rank) {
                best_rank = ranks[k];
                best = k;
            }
        }
        if (best_rank == INT_MAX) break;
        ids[best] = results[best];
        // Drop symbol best+1 and the pair that started at it.
        for (size_t k = best + 1; k + 1 < n; ++k) {
            ids[k] = ids[k + 1];
            ranks[k] = ranks[k + 1];
            results[k] = results[k + 1];
        }
        --n;
        if (best > 0) set_pair(best - 1);
        if (best + 1 < n) set_pair(best);
        if (n == 1) break;
    }
    out.insert(out.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
}

void Bpe::merge_heap(BpeScratch& s, std::vector<int32_t>& out) const {
    std::vector<int32_t>& ids = s.ids;  // ids[k] = -1 once symbol k is merged into its left neighbour
    const auto n = static_cast<int32_t>(ids.size());
    s.next.resize(static_cast<size_t>(n));
    s.prev.resize(static_cast<size_t>(n));
    for (int32_t k = 0; k < n; ++k) {
        s.next[k] = k + 1 < n ? k + 1 : -1;
        s.prev[k] = k - 1;
    }
    // Heap entries: rank << 32 | position of the left symbol; the smallest pops first, so equal
    // ranks resolve leftmost first. An entry is stale when the pair at its position has changed.
    std::vector<uint64_t>& heap = s.heap;
    heap.clear();
    const auto push_pair = [&](int32_t k) {
        const int32_t r = s.next[k];
        if (r < 0) return;
        if (const MergeTable::Entry* e = merges_.find(ids[k], ids[r])) {
            heap.push_back((static_cast<uint64_t>(e->rank) << 32) | static_cast<uint32_t>(k));
            std::push_heap(heap.begin(), heap.end(), std::greater<>());
        }
    };
    for (int32_t k = 0; k + 1 < n; ++k) push_pair(k);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<>());
        const uint64_t top = heap.back();
        heap.pop_back();
        const auto k = static_cast<int32_t>(top & 0xFFFFFFFFu);
        const auto rank = static_cast<int32_t>(top >> 32);
        if (ids[k] < 0) continue;
        const int32_t r = s.next[k];
        if (r < 0) continue;
        const MergeTable::Entry* e = merges_.find(ids[k], ids[r]);
        if (!e || e->rank != rank) continue;  // stale: a rank names exactly one pair
        ids[k] = e->result;
        ids[r] = -1;
        s.next[k] = s.next[r];
        if (s.next[r] >= 0) s.prev[s.next[r]] = k;
        if (s.prev[k] >= 0) push_pair(s.prev[k]);
        push_pair(k);
    }
    for (int32_t k = 0; k >= 0; k = s.next[k]) out.push_back(ids[k]);
}

}  // namespace strata::tokenizer
