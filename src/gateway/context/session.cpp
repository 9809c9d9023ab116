#include "gateway/context/session.h"

namespace strata::gateway {

std::pair<uint32_t, uint32_t> Session::chunk_range(size_t i) const {
    const uint32_t end = i + 1 < messages_.size() ? messages_[i + 1].first_chunk : static_cast<uint32_t>(chunks_.size());
    return {messages_[i].first_chunk, end};
}

void Session::add_message(uint64_t hash, int64_t tokens, bool exact, std::vector<NewChunk> chunks) {
    const auto message = static_cast<uint32_t>(messages_.size());
    messages_.push_back({hash, tokens, exact, static_cast<uint32_t>(chunks_.size())});
    for (NewChunk& c : chunks) {
        const auto id = static_cast<uint32_t>(chunks_.size());
        chunks_.push_back(
            {message, c.offset, c.length, c.tokens, static_cast<uint32_t>(terms_.size()), static_cast<uint32_t>(c.terms.size())});
        terms_.insert(terms_.end(), c.terms.begin(), c.terms.end());
        index_.add(id, c.terms);
    }
}

std::unique_ptr<Session> Session::prefix_copy(size_t n) const {
    auto copy = std::make_unique<Session>(0, scope_);
    n = std::min(n, messages_.size());
    copy->messages_.assign(messages_.begin(), messages_.begin() + static_cast<ptrdiff_t>(n));
    const uint32_t n_chunks = n < messages_.size() ? messages_[n].first_chunk : static_cast<uint32_t>(chunks_.size());
    copy->chunks_.assign(chunks_.begin(), chunks_.begin() + n_chunks);
    const size_t n_terms = n_chunks == 0 ? 0 : chunks_[n_chunks - 1].terms_begin + chunks_[n_chunks - 1].terms_count;
    copy->terms_.assign(terms_.begin(), terms_.begin() + static_cast<ptrdiff_t>(n_terms));
    for (uint32_t c = 0; c < n_chunks; ++c) copy->index_.add(c, copy->chunk_terms(c));
    copy->system_hash = system_hash;
    copy->system_tokens = system_tokens;
    return copy;
}

size_t Session::memory_bytes() const {
    return sizeof(Session) + scope_.size() + messages_.size() * sizeof(MessageRecord) + chunks_.size() * sizeof(ChunkRecord) +
           terms_.size() * sizeof(TermCount) + index_.memory_bytes();
}

}  // namespace strata::gateway
