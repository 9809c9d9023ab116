// Prompt lookup drafts (prompt_lookup.h).
#include "runtime/prompt_lookup.h"

#include <algorithm>

#include "util/error.h"

namespace strata::runtime {

namespace {

uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

}  // namespace

PromptLookup::PromptLookup(Options o) : o_(o) {
    if (o_.min_ngram < 1 || o_.max_ngram < o_.min_ngram || o_.max_ngram > 16)
        throw Error("prompt lookup: n-gram sizes must satisfy 1 <= min <= max <= 16");
    table_.resize(1024);
}

uint64_t PromptLookup::key_of(size_t end, int n) const {
    uint64_t h = mix(static_cast<uint64_t>(n) * 0x9e3779b97f4a7c15ull);
    for (size_t i = end - static_cast<size_t>(n); i < end; ++i) h = mix(h ^ static_cast<uint32_t>(tokens_[i]));
    return h | 1;  // never 0 (the empty mark)
}

// The entry whose n tokens equal those ending before `end` (or the empty slot where they go).
PromptLookup::Entry* PromptLookup::find(uint64_t key, size_t end, int n) {
    const size_t mask = table_.size() - 1;
    for (size_t i = key & mask;; i = (i + 1) & mask) {
        Entry& e = table_[i];
        if (e.key == 0) return &e;
        if (e.key != key || e.n != static_cast<uint32_t>(n)) continue;
        // A hash match: the tokens before its follower must equal ours.
        const size_t at = e.follow;
        if (std::equal(tokens_.begin() + static_cast<std::ptrdiff_t>(at - static_cast<size_t>(n)),
                       tokens_.begin() + static_cast<std::ptrdiff_t>(at),
                       tokens_.begin() + static_cast<std::ptrdiff_t>(end - static_cast<size_t>(n))))
            return &e;
    }
}

const PromptLookup::Entry* PromptLookup::find(uint64_t key, size_t end, int n) const {
    return const_cast<PromptLookup*>(this)->find(key, end, n);
}

void PromptLookup::grow() {
    std::vector<Entry> old(table_.size() * 2);
    old.swap(table_);
    const size_t mask = table_.size() - 1;
    for (const Entry& e : old) {
        if (e.key == 0) continue;
        size_t i = e.key & mask;
        while (table_[i].key != 0) i = (i + 1) & mask;
        table_[i] = e;
    }
}

void PromptLookup::push(int32_t t) {
    tokens_.push_back(t);
    const size_t pos = tokens_.size() - 1;  // t's position: it follows the n tokens before it
    if (pos >= UINT32_MAX) return;          // 4G tokens: no more entries
    for (int n = o_.min_ngram; n <= o_.max_ngram && static_cast<size_t>(n) <= pos; ++n) {
        if (2 * (used_ + 1) > table_.size()) grow();
        const uint64_t key = key_of(pos, n);
        Entry* e = find(key, pos, n);
        if (e->key == 0) {
            ++used_;
            e->key = key;
            e->n = static_cast<uint32_t>(n);
        }
        e->follow = static_cast<uint32_t>(pos);
    }
}

std::vector<int32_t> PromptLookup::draft(int k) const {
    const size_t len = tokens_.size();
    if (k <= 0) return {};
    for (int n = o_.max_ngram; n >= o_.min_ngram; --n) {
        if (static_cast<size_t>(n) > len) continue;
        const Entry* e = find(key_of(len, n), len, n);
        if (e->key == 0) continue;
        const size_t from = e->follow, to = std::min(len, from + static_cast<size_t>(k));
        return {tokens_.begin() + static_cast<std::ptrdiff_t>(from), tokens_.begin() + static_cast<std::ptrdiff_t>(to)};
    }
    return {};
}

}  // namespace strata::runtime
