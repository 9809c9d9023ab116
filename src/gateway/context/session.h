// One conversation's retrieval state: its messages' chain hashes and token counts, its chunks
// (as byte ranges of the messages, with token counts and bags of words), their BM25 index and
// the dense vectors embedded so far.
// Chunk text is not kept: every request carries the whole conversation, and a message whose
// chain hash matches is byte-identical, so chunk text is read from the request.
//
// Forks share their prefix: a session's chunks, bags of words and index may start with a frozen
// base (shared, never changed again) of which it sees chunks [0, base_chunks); only what it
// added since is its own. Message records (32 bytes each) are always its own: their token counts
// are made exact in place.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "gateway/context/bm25_index.h"
#include "gateway/context/dense_index.h"
#include "gateway/context/terms.h"

namespace strata::gateway {

struct MessageRecord {
    uint64_t hash;   // chain hash h_i = H(h_{i-1}, role, text), h_0 = H(scope)
    int64_t tokens;  // lane tokens: exact when `exact`, else the sum of its chunks' counts
    bool exact;
    uint32_t first_chunk;  // its chunks are [first_chunk, the next message's first_chunk)
};

struct ChunkRecord {
    uint32_t message;
    uint32_t offset, length;            // bytes of the message text
    int32_t tokens;                     // lane tokens of exactly that text
    uint32_t terms_begin, terms_count;  // its bag of words in Session::terms
};

// A chunk as the chunker and counter produce it, before it joins a session.
struct NewChunk {
    uint32_t offset, length;
    int32_t tokens;
    std::vector<TermCount> terms;
};

class Session {
public:
    Session(int64_t id, std::string scope) : id_(id), scope_(std::move(scope)) {}

    int64_t id() const { return id_; }
    void set_id(int64_t id) { id_ = id; }
    const std::string& scope() const { return scope_; }

    size_t n_messages() const { return messages_.size(); }
    const MessageRecord& message(size_t i) const { return messages_[i]; }
    std::span<const MessageRecord> messages() const { return messages_; }
    void set_exact_tokens(size_t i, int64_t tokens) {
        messages_[i].tokens = tokens;
        messages_[i].exact = true;
    }
    // Chunk ids of message i: [first, end).
    std::pair<uint32_t, uint32_t> chunk_range(size_t i) const;

    size_t n_chunks() const { return base_chunks_ + chunks_.size(); }
    const ChunkRecord& chunk(uint32_t c) const { return c < base_chunks_ ? base_->chunks[c] : chunks_[c - base_chunks_]; }
    std::span<const TermCount> chunk_terms(uint32_t c) const {
        const ChunkRecord& r = chunk(c);
        return {(c < base_chunks_ ? base_->terms.data() : terms_.data()) + r.terms_begin, r.terms_count};
    }
    const Bm25Index& index() const { return index_; }

    void add_message(uint64_t hash, int64_t tokens, bool exact, std::vector<NewChunk> chunks);
    // A new session (id 0) holding messages [0, n) of this one, sharing their chunks and index.
    // May freeze this session's own chunks into a new base first (the caller holds `mutex`).
    std::unique_ptr<Session> fork(size_t n);

    // Heap held by this session alone, and by its base (shared with its forks; 0 without one).
    size_t memory_bytes() const;
    size_t base_bytes() const { return base_ ? base_->bytes : 0; }
    const void* base_id() const { return base_.get(); }

    // Held while the session is extended or read by one request.
    std::mutex mutex;
    // Its chunks' dense vectors, those embedded so far (the assembler adds them; a fork copies its
    // prefix's). Kept in the session store too (its `vectors` table), so a restart keeps them.
    DenseIndex dense;
    // The last system prompt counted for this conversation (system prompts rarely change).
    uint64_t system_hash = 0;
    int64_t system_tokens = -1;

private:
    struct Frozen {  // chunks [0, chunks.size()) of some session, with their bags of words and index
        std::vector<ChunkRecord> chunks;
        std::vector<TermCount> terms;
        Bm25Index index;
        size_t bytes = 0;
    };
    void freeze();  // moves (or, over a base, copies) every chunk into a new base

    int64_t id_;  // its row in the session store; 0 when not stored
    std::string scope_;
    std::vector<MessageRecord> messages_;
    std::shared_ptr<const Frozen> base_;
    uint32_t base_chunks_ = 0;
    std::vector<ChunkRecord> chunks_;  // chunks [base_chunks_, n_chunks()); terms_begin into terms_
    std::vector<TermCount> terms_;
    Bm25Index index_;
};

}  // namespace strata::gateway
