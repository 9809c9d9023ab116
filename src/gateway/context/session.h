// One conversation's retrieval state: its messages' chain hashes and token counts, its chunks
// (as byte ranges of the messages, with token counts and bags of words) and their BM25 index.
// Chunk text is not kept: every request carries the whole conversation, and a message whose
// chain hash matches is byte-identical, so chunk text is read from the request.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "gateway/context/bm25_index.h"
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

    size_t n_chunks() const { return chunks_.size(); }
    const ChunkRecord& chunk(uint32_t c) const { return chunks_[c]; }
    std::span<const TermCount> chunk_terms(uint32_t c) const {
        return {terms_.data() + chunks_[c].terms_begin, chunks_[c].terms_count};
    }
    const Bm25Index& index() const { return index_; }

    void add_message(uint64_t hash, int64_t tokens, bool exact, std::vector<NewChunk> chunks);
    // A new session (id 0) holding messages [0, n) of this one, with its own index.
    std::unique_ptr<Session> prefix_copy(size_t n) const;

    size_t memory_bytes() const;

    // Held while the session is extended or read by one request.
    std::mutex mutex;
    // The last system prompt counted for this conversation (system prompts rarely change).
    uint64_t system_hash = 0;
    int64_t system_tokens = -1;

private:
    int64_t id_;  // its row in the session store; 0 when not stored
    std::string scope_;
    std::vector<MessageRecord> messages_;
    std::vector<ChunkRecord> chunks_;
    std::vector<TermCount> terms_;
    Bm25Index index_;
};

}  // namespace strata::gateway
