// The in-memory sessions of recently active conversations, least recently used evicted first
// past a byte bound, so a hot conversation's next turn neither reloads from SQLite nor
// re-indexes. Sessions are found by chain hash: each cached session registers the hash of every
// message it holds, with its position. Safe to call from many threads.
//
// One cache may serve several assemblers (the gateway's lanes share one byte bound): each names
// its `space` (a salt mixed into every key), so sessions counted with one lane's tokenizer are
// never found for another's.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::gateway {

class Session;

class SessionCache {
public:
    explicit SessionCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

    struct Found {
        std::shared_ptr<Session> session;
        size_t length = 0;  // chain[0, length) is a prefix of the session
    };
    // The cached session sharing the longest prefix with chain (chains start from the scope's
    // hash, so a match never crosses scopes).
    Found find(std::span<const uint64_t> chain, uint64_t space = 0);

    // Inserts or refreshes a session; registers the hashes of messages it gained and re-measures
    // it (a base shared by several cached sessions is counted once). The caller holds session->mutex. Returns the cached object
    // for a stored id when one is already cached (a session loaded twice is kept once).
    std::shared_ptr<Session> put(std::shared_ptr<Session> session, uint64_t space = 0);

    size_t size();
    int64_t bytes();
    int64_t max_bytes() const { return max_bytes_; }

private:
    struct Entry {
        std::shared_ptr<Session> session;
        std::vector<uint64_t> hashes;  // registered in by_hash_ (salted)
        int64_t id = 0;                // the session's store id when put (registered in by_id_)
        uint64_t space = 0;
        int64_t bytes = 0;           // the session's own, and this entry's bookkeeping
        const void* base = nullptr;  // the session's shared base, counted once in bases_
    };
    void hold_base(const void* base, int64_t bytes);
    void release_base(const void* base);
    void evict_locked(const Session* keep);

    std::mutex mutex_;
    int64_t max_bytes_;
    int64_t bytes_ = 0;
    std::list<Entry> lru_;  // front: most recently used
    std::unordered_map<const Session*, std::list<Entry>::iterator> where_;
    std::map<std::pair<uint64_t, int64_t>, const Session*> by_id_;  // (space, store id)
    struct Position {
        const Session* session;
        size_t index;
    };
    std::unordered_map<uint64_t, Position> by_hash_;
    struct Base {
        int users = 0;
        int64_t bytes = 0;
    };
    std::unordered_map<const void*, Base> bases_;  // shared bases of cached sessions (forks share one)
};

}  // namespace strata::gateway
