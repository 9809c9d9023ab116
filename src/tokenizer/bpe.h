// Byte-level BPE over one pre-tokenized piece: start from one token per byte, then repeatedly
// apply the merge of lowest rank (leftmost on ties) until none applies — the order Hugging Face
// tokenizers use. Merges are looked up by (left id, right id) in an open-addressing table.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace strata::tokenizer {

class MergeTable {
public:
    struct Entry {
        uint64_t key;  // left << 32 | right; kEmpty for a free slot
        int32_t rank;
        int32_t result;
    };

    explicit MergeTable(const std::vector<Merge>& merges);

    // The merge of (left, right), or nullptr.
    const Entry* find(int32_t left, int32_t right) const {
        const uint64_t key = pack(left, right);
        for (size_t i = slot(key);; i = (i + 1) & mask_) {
            const Entry& e = slots_[i];
            if (e.key == key) return &e;
            if (e.key == kEmpty) return nullptr;
        }
    }

private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    static uint64_t pack(int32_t left, int32_t right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }
    size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }

    std::vector<Entry> slots_;
    size_t mask_ = 0;
    unsigned shift_ = 64;
};

// Reusable buffers for encoding many pieces without allocating.
struct BpeScratch {
    std::vector<int32_t> ids, next, prev, ranks, results;
    std::vector<uint64_t> heap;
};

class Bpe {
public:
    explicit Bpe(const Vocab& vocab) : byte_token_(vocab.byte_token), merges_(vocab.merges) {}

    // Appends the tokens of `piece` to out. Bytes without a token of their own are dropped, as
    // Hugging Face tokenizers drop unknown characters when there is no unknown token.
    void encode(std::string_view piece, std::vector<int32_t>& out, BpeScratch& scratch) const;

private:
    void merge_small(BpeScratch& s, std::vector<int32_t>& out) const;
    void merge_heap(BpeScratch& s, std::vector<int32_t>& out) const;

    std::array<int32_t, 256> byte_token_;
    MergeTable merges_;
};

}  // namespace strata::tokenizer
