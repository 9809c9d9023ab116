// Byte-level BPE over one pre-tokenized piece: start from one token per byte, then repeatedly
// apply the merge of lowest rank (leftmost on ties) until none applies — the order Hugging Face
// tokenizers use. Merges are looked up by (left id, right id) in an open-addressing table.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace strata::tokenizer {

// (left id, right id) -> rank, in 8-byte slots: left << 20 | right in the low 40 bits and the
// rank in the high 24 (Qwen's 151k merges fill 4 MiB at load 0.29). The merged token is looked up
// by rank only for the merges actually applied.
class MergeTable {
public:
    static constexpr int32_t kMaxMerges = (1 << 24) - 1;

    explicit MergeTable(const std::vector<Merge>& merges);

    // The rank of merging (left, right), or -1.
    int32_t rank(int32_t left, int32_t right) const {
        const uint64_t key = pack(left, right);
        for (size_t i = slot(key);; i = (i + 1) & mask_) {
            const uint64_t e = slots_[i];
            if ((e & kKeyMask) == key) return static_cast<int32_t>(e >> 40);
            if (e == kEmpty) return -1;
        }
    }
    int32_t result(int32_t rank) const { return results_[static_cast<size_t>(rank)]; }

private:
    static constexpr uint64_t kKeyMask = (uint64_t{1} << 40) - 1;
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // its key names no pair: ids are below kMaxVocabSize
    static uint64_t pack(int32_t left, int32_t right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 20) | static_cast<uint32_t>(right);
    }
    size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }

    std::vector<uint64_t> slots_;
    std::vector<int32_t> results_;  // by rank
    size_t mask_ = 0;
    unsigned shift_ = 64;
};

// Reusable buffers for encoding many pieces without allocating.
struct BpeScratch {
    std::vector<int32_t> ids, next, prev, ranks, results;
    std::vector<uint8_t> bytes;  // the byte of each initial symbol
    std::vector<uint64_t> heap;
};

class Bpe {
public:
    explicit Bpe(const Vocab& vocab);

    // Appends the tokens of `piece` to out. Bytes without a token of their own are dropped, as
    // Hugging Face tokenizers drop unknown characters when there is no unknown token.
    void encode(std::string_view piece, std::vector<int32_t>& out, BpeScratch& scratch) const;

private:
    void merge_small(BpeScratch& s, std::vector<int32_t>& out) const;
    void merge_heap(BpeScratch& s, std::vector<int32_t>& out) const;

    // The merge of two single-byte tokens, by (first byte << 8 | second byte): rank << 32 | result,
    // or kNoMerge. Every piece starts as bytes, so its first round of lookups stays in this 512 KiB
    // table instead of the large hash table.
    static constexpr uint64_t kNoMerge = ~uint64_t{0};
    uint64_t byte_pair(uint8_t a, uint8_t b) const { return byte_pairs_[(static_cast<size_t>(a) << 8) | b]; }

    std::array<int32_t, 256> byte_token_;
    MergeTable merges_;
    std::vector<uint64_t> byte_pairs_;
};

}  // namespace strata::tokenizer
