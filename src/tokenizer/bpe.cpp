#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <string>

#include "util/error.h"

namespace strata::tokenizer {

MergeTable::MergeTable(const std::vector<Merge>& merges) {
    if (merges.size() > static_cast<size_t>(kMaxMerges))
        throw Error("too many merges for the BPE table (" + std::to_string(merges.size()) + ")");
    size_t capacity = 16;
    unsigned bits = 4;
    while (capacity < merges.size() * 2) {
        capacity <<= 1;
        ++bits;
    }
    slots_.assign(capacity, kEmpty);
    mask_ = capacity - 1;
    shift_ = 64 - bits;
    results_.resize(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const Merge& m = merges[rank];
        results_[rank] = m.result;
        if (m.left < 0 || m.right < 0 || m.left >= kMaxVocabSize || m.right >= kMaxVocabSize)
            throw Error("merge " + std::to_string(rank) + " names a token id beyond " + std::to_string(kMaxVocabSize));
        const uint64_t key = pack(m.left, m.right);
        size_t i = slot(key);
        while (slots_[i] != kEmpty && (slots_[i] & kKeyMask) != key) i = (i + 1) & mask_;
        if (slots_[i] != kEmpty) continue;  // a repeated pair keeps its first (lowest) rank
        slots_[i] = (static_cast<uint64_t>(rank) << 40) | key;
    }
}

Bpe::Bpe(const Vocab& vocab) : byte_token_(vocab.byte_token), merges_(vocab.merges), byte_pairs_(65536, kNoMerge) {
    for (uint32_t a = 0; a < 256; ++a) {
        if (byte_token_[a] < 0) continue;
        for (uint32_t b = 0; b < 256; ++b) {
            if (byte_token_[b] < 0) continue;
            const int32_t rank = merges_.rank(byte_token_[a], byte_token_[b]);
            if (rank >= 0)
                byte_pairs_[(a << 8) | b] = (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(merges_.result(rank));
        }
    }
}

namespace {
// Pieces up to this many bytes merge by rescanning a flat array (quadratic but branch-light and
// cache-resident); longer ones use a heap (n log n), which keeps a 100 KB base64 blob cheap.
constexpr size_t kSmallPiece = 48;
}  // namespace

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out, BpeScratch& s) const {
    s.ids.clear();
    s.bytes.clear();
    for (const char c : piece) {
        const int32_t id = byte_token_[static_cast<uint8_t>(c)];
        if (id < 0) continue;
        s.ids.push_back(id);
        s.bytes.push_back(static_cast<uint8_t>(c));
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
        const int32_t rank = merges_.rank(ids[k], ids[k + 1]);
        ranks[k] = rank >= 0 ? rank : INT_MAX;
        results[k] = -1;  // looked up by rank when applied
    };
    for (size_t k = 0; k + 1 < n; ++k) {
        const uint64_t m = byte_pair(s.bytes[k], s.bytes[k + 1]);
        ranks[k] = m == kNoMerge ? INT_MAX : static_cast<int32_t>(m >> 32);
        results[k] = static_cast<int32_t>(m & 0xFFFFFFFFu);
    }
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
        ids[best] = results[best] >= 0 ? results[best] : merges_.result(best_rank);
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
        const int32_t rank = merges_.rank(ids[k], ids[r]);
        if (rank >= 0) {
            heap.push_back((static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(k));
            std::push_heap(heap.begin(), heap.end(), std::greater<>());
        }
    };
    for (int32_t k = 0; k + 1 < n; ++k) {
        const uint64_t m = byte_pair(s.bytes[k], s.bytes[k + 1]);
        if (m != kNoMerge) heap.push_back((m & ~uint64_t{0xFFFFFFFFu}) | static_cast<uint32_t>(k));
    }
    std::make_heap(heap.begin(), heap.end(), std::greater<>());
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<>());
        const uint64_t top = heap.back();
        heap.pop_back();
        const auto k = static_cast<int32_t>(top & 0xFFFFFFFFu);
        const auto rank = static_cast<int32_t>(top >> 32);
        if (ids[k] < 0) continue;
        const int32_t r = s.next[k];
        if (r < 0) continue;
        if (merges_.rank(ids[k], ids[r]) != rank) continue;  // stale: a rank names exactly one pair
        ids[k] = merges_.result(rank);
        ids[r] = -1;
        s.next[k] = s.next[r];
        if (s.next[r] >= 0) s.prev[s.next[r]] = k;
        if (s.prev[k] >= 0) push_pair(s.prev[k]);
        push_pair(k);
    }
    for (int32_t k = 0; k >= 0; k = s.next[k]) out.push_back(ids[k]);
}

}  // namespace strata::tokenizer
