#include "gateway/context/session.h"

namespace strata::gateway {

std::pair<uint32_t, uint32_t> Session::chunk_range(size_t i) const {
    const uint32_t end = i + 1 < messages_.size() ? messages_[i + 1].first_chunk : static_cast<uint32_t>(n_chunks());
    return {messages_[i].first_chunk, end};
}

void Session::add_message(uint64_t hash, int64_t tokens, bool exact, std::vector<NewChunk> chunks) {
    const auto message = static_cast<uint32_t>(messages_.size());
    messages_.push_back({hash, tokens, exact, static_cast<uint32_t>(n_chunks())});
    for (NewChunk& c : chunks) {
        const auto id = static_cast<uint32_t>(n_chunks());
        chunks_.push_back(
            {message, c.offset, c.length, c.tokens, static_cast<uint32_t>(terms_.size()), static_cast<uint32_t>(c.terms.size())});
        terms_.insert(terms_.end(), c.terms.begin(), c.terms.end());
        index_.add(id, c.terms);
    }
}

void Session::freeze() {
    auto f = std::make_shared<Frozen>();
    if (!base_) {
        f->chunks = std::move(chunks_);
        f->terms = std::move(terms_);
        f->index = std::move(index_);
    } else {
        // Flatten: the base's chunks this session sees, then its own (bases never stack).
        f->chunks.assign(base_->chunks.begin(), base_->chunks.begin() + base_chunks_);
        const size_t base_terms =
            base_chunks_ == 0 ? 0 : f->chunks.back().terms_begin + static_cast<size_t>(f->chunks.back().terms_count);
        f->terms.assign(base_->terms.begin(), base_->terms.begin() + static_cast<ptrdiff_t>(base_terms));
        for (ChunkRecord r : chunks_) {
            r.terms_begin += static_cast<uint32_t>(base_terms);
            f->chunks.push_back(r);
        }
        f->terms.insert(f->terms.end(), terms_.begin(), terms_.end());
        for (uint32_t c = 0; c < f->chunks.size(); ++c)
            f->index.add(c, {f->terms.data() + f->chunks[c].terms_begin, f->chunks[c].terms_count});
    }
    f->bytes = f->chunks.capacity() * sizeof(ChunkRecord) + f->terms.capacity() * sizeof(TermCount) + f->index.memory_bytes();
    base_chunks_ = static_cast<uint32_t>(f->chunks.size());
    base_ = std::move(f);
    chunks_ = {};
    terms_ = {};
    index_ = Bm25Index(std::shared_ptr<const Bm25Index>(base_, &base_->index), base_chunks_);
}

std::unique_ptr<Session> Session::fork(size_t n) {
    n = std::min(n, messages_.size());
    const uint32_t n_chunks = n < messages_.size() ? messages_[n].first_chunk : static_cast<uint32_t>(this->n_chunks());
    if (n_chunks > base_chunks_) freeze();  // the fork needs chunks of this session's own: they become shared
    auto copy = std::make_unique<Session>(0, scope_);
    copy->messages_.assign(messages_.begin(), messages_.begin() + static_cast<ptrdiff_t>(n));
    if (n_chunks > 0) {
        copy->base_ = base_;
        copy->base_chunks_ = n_chunks;
        copy->index_ = Bm25Index(std::shared_ptr<const Bm25Index>(base_, &base_->index), n_chunks);
    }
    copy->dense = dense.prefix(n_chunks);
    copy->system_hash = system_hash;
    copy->system_tokens = system_tokens;
    return copy;
}

size_t Session::memory_bytes() const {
    return sizeof(Session) + scope_.capacity() + messages_.capacity() * sizeof(MessageRecord) +
           chunks_.capacity() * sizeof(ChunkRecord) + terms_.capacity() * sizeof(TermCount) + index_.memory_bytes() +
           dense.memory_bytes();
}

}  // namespace strata::gateway
