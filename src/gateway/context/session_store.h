// Persistent sessions in one SQLite file (WAL mode), so a restarted gateway still indexes only
// the new turns of a conversation it has seen. Schema:
//   sessions(id, scope, n_messages, bytes, last_used)      one row per conversation (or fork)
//   messages(session, position, hash, tokens, exact)       its chain; index on hash for lookups
//   chunks(session, message, seq, offset, length, tokens, terms)
//       terms: the chunk's bag of words, (u64 term hash, u32 count) pairs, little-endian
//   vectors(session, chunk, v)                             dense vectors (DenseIndex's int8 form)
//       v: the f32 scale, then one int8 per dimension; chunk: the session's chunk number
// Session ids are AUTOINCREMENT (never reused: a request still holding an evicted session must
// not write into a newer one); a file of the first schema, whose ids could be reused, is emptied
// at open (it is a cache). A restarted gateway so keeps what an embed lane computed (a 1M-token paste is ~14,000 chunks:
// hours of a small model on a few cores), and a fork's stored copy keeps its prefix's vectors.
// A session is found by the longest prefix of a request's chain it shares (within the scope);
// forks copy the shared prefix's rows into a new session. The file is bounded: past max_bytes
// whole sessions are deleted, least recently used first. One connection, guarded by a mutex:
// every method is safe to call from many threads.
//
// The store is a cache of derived data, so its faults degrade rather than fail: a store that
// cannot be opened (a read-only file or folder, locked by another process) or a write or COMMIT
// that fails later (a disk that fills up or turns read-only, a file-size limit: the process
// ignores SIGXFSZ so a write fails with EFBIG) logs one warning, naming the system's reason, and
// the store turns off (every method a no-op: sessions are then
// kept in memory only); a file that is not a database (corrupt) is moved aside at start
// (PATH.corrupt-UNIXTIME) and a fresh one made. The file is held with an exclusive lock in WAL
// mode, so no shared-memory index (-shm) is mapped: a read-only or truncated one cannot SIGBUS
// the gateway, and a second process on the same file is told at once (memory only) rather than
// after a 10 s wait.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "serve/sqlite_store.h"

namespace strata::gateway {

class Session;

struct SessionStoreOptions {
    std::filesystem::path path;
    int64_t max_bytes = int64_t{4} << 30;         // of chunk and message rows (an estimate of the file's size)
    std::function<void(const std::string&)> log;  // a warning line; null: stderr
    int busy_timeout_ms = 250;                    // another process holding the file: memory only after this
};

class SessionStore {
public:
    // Opens or creates; never throws for the file's faults (it degrades to memory only).
    explicit SessionStore(SessionStoreOptions options);
    ~SessionStore();
    SessionStore(const SessionStore&) = delete;
    SessionStore& operator=(const SessionStore&) = delete;

    struct Match {
        int64_t session;
        size_t length;  // chain[0, length) is the session's prefix
    };
    // The stored session sharing the longest prefix with chain, within scope.
    std::optional<Match> find_prefix(std::string_view scope, std::span<const uint64_t> chain);
    // Whether some session of scope holds the message with chain hash `hash`.
    bool contains(std::string_view scope, uint64_t hash);

    // The whole stored session; nullptr when it is gone (evicted).
    std::unique_ptr<Session> load(int64_t session);
    // Stores a new session's rows (it gets an id). A fork names its parent: the rows of the
    // `shared` messages it has in common are copied inside SQLite, the rest written from memory.
    void create(Session& session, int64_t parent = 0, size_t shared = 0);
    // Adds the rows of messages [from_message, n) of a stored session; recreates it when it was evicted.
    void append(Session& session, size_t from_message);
    void touch(int64_t session);
    // Stores the vectors of `chunks` (session.dense holds them) of a stored session; vectors of
    // other dimensions stored before (the lane's model changed) go.
    void put_vectors(const Session& session, std::span<const uint32_t> chunks);

    int64_t total_bytes();
    int64_t n_sessions();
    // False once the store has turned off (sessions in memory only); why in the one warning.
    bool available() const { return file_.on(); }

private:
    void open_file();  // throws (serve::sqlite::SqliteError carries the SQLite code)
    // Runs fn under the mutex if the store is on; an error turns it off (one warning) and gives `off`.
    template <typename T, typename F>
    T guarded(const char* what, T off, F&& fn);
    void warn(const std::string& line) const;
    sqlite3* db() const { return file_.db(); }  // null when the store is off
    std::optional<Match> find_prefix_locked(std::string_view scope, std::span<const uint64_t> chain);
    std::unique_ptr<Session> load_locked(int64_t session);
    void create_locked(Session& session, int64_t parent, size_t shared);
    void insert_rows(const Session& session, size_t from_message, int64_t& bytes);
    int64_t insert_vectors(const Session& session, std::span<const uint32_t> chunks);
    void evict_over_bound(int64_t keep);
    int64_t now();

    SessionStoreOptions options_;
    std::mutex mutex_;
    serve::sqlite::StoreFile file_;  // under mutex_
    int64_t clock_ = 0;              // last_used stamps: a counter, so the order is exact
    int64_t total_bytes_ = 0;        // sum of sessions.bytes
};

}  // namespace strata::gateway
