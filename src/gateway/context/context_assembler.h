// Long-context assembly for the gateway: when a conversation (system + messages) is larger than
// the token budget a lane leaves for it, build a prompt that fits:
//
//   system prompt + history_block     the note that history was abridged, then the chunks of
//                                     older messages most relevant to the latest turn, in their
//                                     original order, each message labelled "[earlier turn 37, user]"
//   messages[first_verbatim..]        the most recent turns, verbatim (about recent_fraction of
//                                     the budget), starting at a user turn; a single message too
//                                     big to keep (a 1M-token paste) is replaced by split_text:
//                                     its head and tail verbatim, excerpts of its middle between
//
// Each conversation is indexed once: its session (chunks, token counts, BM25 index) is found by
// the chain of hashes of its messages, in memory or in the SessionStore, and only messages it has
// not seen are chunked, counted and indexed. A conversation that diverges from a stored one at
// message k gets its own session holding only the shared prefix.
//
// Thread safety: assemble() may run on many threads at once; requests for the same conversation
// take turns on its session. The TokenCounter must be safe to call from several threads at once
// (assemble counts new chunks on IndexingOptions::count_threads threads).
#pragma once

#include <atomic>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/context/chunker.h"
#include "gateway/context/retriever.h"
#include "gateway/context/session_cache.h"

namespace strata::gateway {

class Session;
class SessionStore;

struct Message {              // one message of the request, flattened to text by the caller
    std::string role;         // "user", "assistant", "tool"
    std::string text;         // its text; tool calls / results already rendered as text
    bool turn_start = false;  // a user message that starts a turn (not a tool result): the only places a verbatim tail may begin
};

struct Conversation {
    std::string system;
    std::vector<Message> messages;
};

// Tokens of a text with the lane's tokenizer (no template, no special-token parsing).
using TokenCounter = std::function<int64_t(std::string_view)>;

struct AssembleOptions {
    int64_t budget_tokens =
        0;  // tokens the system + messages may use in total (caller already subtracted max_tokens and template overhead)
    double recent_fraction = 0.25;                                       // of the budget, for the most recent turns kept verbatim
    int64_t huge_message_head_tokens = 0, huge_message_tail_tokens = 0;  // 0 = 1/8 of the budget each
};

struct AssembleStats {
    int64_t tokens_in = 0;   // system + messages as sent (exact when near the budget, else the sum of chunk counts)
    int64_t tokens_out = 0;  // the assembled prompt, counted on the final texts
    int chunks_total = 0, chunks_new = 0, chunks_chosen = 0;
    double ms_total = 0, ms_chunk_count = 0, ms_index = 0, ms_retrieve = 0;
    double ms_session = 0;     // finding the session (and loading it from the store after a restart)
    bool session_hit = false;  // an earlier request of this conversation was found (memory or store)
    std::string retrieval;     // "bm25", "bm25+dense", "bm25+rerank" or "bm25+dense+rerank" (retriever.h)
    // With an embedder: chunks embedded by this request (candidates never embedded before, newest
    // first, until RetrievalOptions::dense_budget_ms), its time, candidates still without a vector.
    int chunks_embedded = 0, chunks_unembedded = 0;
    double ms_embed = 0;
};

struct AssembleResult {
    bool abridged = false;                // false: it all fits — send unchanged (other fields empty)
    bool fits = true;                     // false: not even the last turn fits (reject the request)
    size_t first_verbatim = 0;            // messages[first_verbatim..] go unchanged, except split_message
    std::string history_block;            // appended to the system prompt (system_with_history); "" if none
    std::optional<size_t> split_message;  // a message too large to keep whole: replaced by split_text
    std::string split_text;  // its head verbatim + note + retrieved middle excerpts (labelled, in order) + its tail verbatim
    AssembleStats stats;
};

// The system prompt to send: the original, a blank line, the history block. The budget is
// checked on exactly this text.
std::string system_with_history(std::string_view system, std::string_view history_block);

// The chain hashes h_1..h_n that identify a conversation's messages within a scope.
std::vector<uint64_t> conversation_chain(std::string_view scope, const Conversation& conversation);

struct IndexingOptions {
    ChunkOptions chunking;
    int count_threads = 0;                       // threads counting new chunks; 0 = hardware concurrency
    int64_t cache_max_bytes = int64_t{1} << 30;  // in-memory sessions (when no shared cache is given)
    std::shared_ptr<SessionCache> shared_cache;  // non-null: sessions kept there (one bound for several assemblers)
    uint64_t cache_space = 0;                    // this assembler's keys in a shared cache
};

class ContextAssembler {
public:
    // store: nullable (sessions then live in memory only).
    ContextAssembler(SessionStore* store, TokenCounter count, RetrievalOptions retrieval = {}, IndexingOptions indexing = {});
    ~ContextAssembler();

    // scope: the API-key identity (or "" when keys are off): sessions never cross scopes.
    AssembleResult assemble(std::string_view scope, const Conversation& conversation, const AssembleOptions& options);

    SessionCache& cache() { return *cache_; }

private:
    struct Acquired;
    Acquired acquire(std::string_view scope, const std::vector<uint64_t>& chain);
    // Chunks, counts and indexes messages [session.n_messages(), n); returns the new chunks.
    int extend(Session& session, const Conversation& conversation, const std::vector<uint64_t>& chain);
    void embed_new(Session& session, std::unique_lock<std::mutex>& lock, std::span<const uint32_t> candidates,
                   const std::function<std::string_view(uint32_t)>& text, AssembleStats& stats);

    SessionStore* store_;
    TokenCounter count_;
    RetrievalOptions retrieval_;
    IndexingOptions indexing_;
    std::shared_ptr<SessionCache> cache_;
    // The embedder's measured passages a second (0: not yet), which sizes each call to the time
    // the dense budget has left.
    std::atomic<double> embed_rate_{0.0};
    std::atomic<int64_t> embed_reprobe_{0};  // steady-clock ticks of the last re-measuring call
};

}  // namespace strata::gateway
