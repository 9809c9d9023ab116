#include "gateway/context/session_store.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "gateway/context/session.h"
#include "util/error.h"

namespace strata::gateway {
namespace {

// Row size estimates for the byte bound (SQLite's own overhead per row included roughly).
constexpr int64_t kMessageRowBytes = 40;
constexpr int64_t kChunkRowBytes = 40;

// An SQLite failure, with its primary result code (SQLITE_NOTADB, SQLITE_FULL, ...).
class SqliteError : public Error {
public:
    SqliteError(int code, const std::string& what) : Error(what), code(code) {}
    int code;
};

// SQLite's message, and for a failed file operation the system's reason: a full disk, a quota, a
// read-only or failing one are otherwise all "disk I/O error" or "database or disk is full".
// SQLite's own record of it (sqlite3_system_errno) is often 0 by then; errno, read first thing
// after the failed call, still holds it, and is used only when it is one of those disk faults.
std::string describe(sqlite3* db, int rc, const char* message) {
    const int after_call = errno;
    std::string out = message ? message : (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    const int primary = rc & 0xff;
    if (db != nullptr && (primary == SQLITE_IOERR || primary == SQLITE_FULL || primary == SQLITE_CANTOPEN)) {
        int err = sqlite3_system_errno(db);
        if (err == 0 &&
            (after_call == ENOSPC || after_call == EDQUOT || after_call == EROFS || after_call == EFBIG || after_call == EIO))
            err = after_call;
        if (err != 0) out += std::string(": ") + std::strerror(err);
    }
    return out;
}

[[noreturn]] void fail(sqlite3* db, int rc, const std::string& context) {
    throw SqliteError(rc & 0xff, context + ": " + describe(db, rc, nullptr));
}

class Stmt {
public:
    Stmt(sqlite3* db, const char* sql) : db_(db) {
        if (const int rc = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); rc != SQLITE_OK) fail(db, rc, sql);
    }
    ~Stmt() { sqlite3_finalize(s_); }
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;

    Stmt& bind(int i, int64_t v) { return check(sqlite3_bind_int64(s_, i, v)); }
    Stmt& bind_text(int i, std::string_view v) {
        return check(sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
    Stmt& bind_blob(int i, const void* p, size_t n) {
        return check(sqlite3_bind_blob(s_, i, p, static_cast<int>(n), SQLITE_TRANSIENT));
    }
    // true while there is a row.
    bool step() {
        const int rc = sqlite3_step(s_);
        if (rc == SQLITE_ROW) return true;
        if (rc != SQLITE_DONE) fail(db_, rc, sqlite3_sql(s_));
        return false;
    }
    void run() {
        step();
        sqlite3_reset(s_);
    }
    void reset() { sqlite3_reset(s_); }
    int64_t i64(int col) const { return sqlite3_column_int64(s_, col); }
    std::string text(int col) const {
        const auto* p = sqlite3_column_text(s_, col);
        return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s_, col)))
                 : std::string();
    }
    std::pair<const void*, size_t> blob(int col) const {
        return {sqlite3_column_blob(s_, col), static_cast<size_t>(sqlite3_column_bytes(s_, col))};
    }

private:
    Stmt& check(int rc) {
        if (rc != SQLITE_OK) fail(db_, rc, "bind");
        return *this;
    }
    sqlite3* db_;
    sqlite3_stmt* s_ = nullptr;
};

// SQLite integers are signed: hashes are stored as their two's-complement bit pattern.
int64_t as_row(uint64_t h) { return static_cast<int64_t>(h); }

constexpr size_t kTermBytes = 12;  // u64 hash + u32 count

std::string encode_terms(std::span<const TermCount> terms) {
    std::string out(terms.size() * kTermBytes, '\0');
    for (size_t i = 0; i < terms.size(); ++i) {
        std::memcpy(out.data() + i * kTermBytes, &terms[i].term, 8);
        std::memcpy(out.data() + i * kTermBytes + 8, &terms[i].count, 4);
    }
    return out;
}

std::vector<TermCount> decode_terms(const void* p, size_t n) {
    std::vector<TermCount> out(n / kTermBytes);
    const auto* b = static_cast<const char*>(p);
    for (size_t i = 0; i < out.size(); ++i) {
        std::memcpy(&out[i].term, b + i * kTermBytes, 8);
        std::memcpy(&out[i].count, b + i * kTermBytes + 8, 4);
    }
    return out;
}

// BEGIN IMMEDIATE ... commit(); rolled back on scope exit when not committed (an exception, or a
// COMMIT that failed: commit() throws then).
class Transaction {
public:
    explicit Transaction(sqlite3* db) : db_(db) {
        if (const int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr); rc != SQLITE_OK)
            fail(db_, rc, "BEGIN IMMEDIATE");
    }
    ~Transaction() {
        if (!committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    void commit() {
        if (const int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr); rc != SQLITE_OK) fail(db_, rc, "COMMIT");
        committed_ = true;
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

private:
    sqlite3* db_;
    bool committed_ = false;
};

}  // namespace

SessionStore::SessionStore(SessionStoreOptions options) : options_(std::move(options)) {
    const std::string path = options_.path.string();
    try {
        open_file();
    } catch (const SqliteError& e) {
        sqlite3_close(db_);
        db_ = nullptr;
        if (e.code != SQLITE_NOTADB && e.code != SQLITE_CORRUPT) {
            turn_off("cannot use " + path + " (" + e.what() + ")");
            return;
        }
        // Not a database, or a damaged one: kept aside for a look, and a fresh store made.
        const std::string aside = path + ".corrupt-" + std::to_string(std::time(nullptr));
        std::error_code ec;
        std::filesystem::rename(options_.path, aside, ec);
        for (const char* side : {"-wal", "-shm"}) std::filesystem::remove(path + side, ec);
        warn("session store: " + path + " is damaged (" + e.what() + "): moved aside to " + aside + "; starting a fresh one");
        try {
            open_file();
        } catch (const Error& again) {
            sqlite3_close(db_);
            db_ = nullptr;
            turn_off("cannot use " + path + " (" + again.what() + ")");
            return;
        }
    } catch (const Error& e) {
        sqlite3_close(db_);
        db_ = nullptr;
        turn_off("cannot use " + path + " (" + e.what() + ")");
        return;
    }
    available_ = true;
}

void SessionStore::open_file() {
    const std::string path = options_.path.string();
    if (options_.path.has_parent_path()) {
        std::error_code ec;
        std::filesystem::create_directories(options_.path.parent_path(), ec);
        if (ec) throw Error("cannot make the folder " + options_.path.parent_path().string() + ": " + ec.message());
    }
    const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) fail(db_, rc, "open");
    // SQLite opens a file it may not write read-only without a word: every write would fail.
    if (sqlite3_db_readonly(db_, "main") == 1) throw Error("the file is read-only");
    sqlite3_busy_timeout(db_, options_.busy_timeout_ms);
    // Exclusive before the first WAL access: no -shm is ever made or mapped (a read-only or
    // truncated one is a SIGBUS otherwise), and the lock taken below keeps other processes out.
    exec("PRAGMA locking_mode=EXCLUSIVE");
    exec("PRAGMA mmap_size=0");
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    exec("BEGIN EXCLUSIVE");
    exec(
        "CREATE TABLE IF NOT EXISTS sessions(id INTEGER PRIMARY KEY, scope TEXT NOT NULL, n_messages INTEGER NOT NULL,"
        " bytes INTEGER NOT NULL, last_used INTEGER NOT NULL)");
    exec(
        "CREATE TABLE IF NOT EXISTS messages(session INTEGER NOT NULL, position INTEGER NOT NULL, hash INTEGER NOT NULL,"
        " tokens INTEGER NOT NULL, exact INTEGER NOT NULL, PRIMARY KEY(session, position)) WITHOUT ROWID");
    exec("CREATE INDEX IF NOT EXISTS messages_by_hash ON messages(hash)");
    exec(
        "CREATE TABLE IF NOT EXISTS chunks(session INTEGER NOT NULL, message INTEGER NOT NULL, seq INTEGER NOT NULL,"
        " offset INTEGER NOT NULL, length INTEGER NOT NULL, tokens INTEGER NOT NULL, terms BLOB NOT NULL,"
        " PRIMARY KEY(session, message, seq))");
    {
        Stmt s(db_, "SELECT COALESCE(SUM(bytes), 0), COALESCE(MAX(last_used), 0) FROM sessions");
        if (s.step()) {
            total_bytes_ = s.i64(0);
            clock_ = s.i64(1);
        }
    }
    exec("COMMIT");
}

SessionStore::~SessionStore() { sqlite3_close(db_); }

void SessionStore::warn(const std::string& line) const {
    if (options_.log) {
        options_.log(line);
    } else {
        std::fprintf(stderr, "gateway: %s\n", line.c_str());
        std::fflush(stderr);
    }
}

// Under mutex_ (or in the constructor).
void SessionStore::turn_off(const std::string& why) {
    if (db_ != nullptr) {
        sqlite3_close(db_);
        db_ = nullptr;
    }
    available_ = false;
    if (!warned_) {
        warned_ = true;
        warn("session store: " + why + "; sessions are kept in memory only until the gateway restarts");
    }
}

template <typename T, typename F>
T SessionStore::guarded(const char* what, T off, F&& fn) {
    std::lock_guard lock(mutex_);
    if (!available_.load()) return off;
    try {
        return fn();
    } catch (const Error& e) {
        turn_off(std::string(what) + " failed (" + e.what() + ")");
        return off;
    }
}

void SessionStore::exec(const char* sql) {
    char* err = nullptr;
    if (const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
        const std::string msg = describe(db_, rc, err);
        sqlite3_free(err);
        throw SqliteError(rc & 0xff, msg + " in: " + sql);
    }
}

int64_t SessionStore::now() { return ++clock_; }

bool SessionStore::contains(std::string_view scope, uint64_t hash) {
    return guarded("a lookup", false, [&] {
        Stmt s(db_, "SELECT 1 FROM messages m JOIN sessions s ON s.id = m.session WHERE m.hash = ? AND s.scope = ? LIMIT 1");
        s.bind(1, as_row(hash)).bind_text(2, scope);
        return s.step();
    });
}

std::optional<SessionStore::Match> SessionStore::find_prefix(std::string_view scope, std::span<const uint64_t> chain) {
    return guarded("a lookup", std::optional<Match>(),
                   [&]() -> std::optional<Match> { return find_prefix_locked(scope, chain); });
}

std::optional<SessionStore::Match> SessionStore::find_prefix_locked(std::string_view scope, std::span<const uint64_t> chain) {
    Stmt s(db_,
           "SELECT m.session FROM messages m JOIN sessions s ON s.id = m.session"
           " WHERE m.hash = ? AND m.position = ? AND s.scope = ? ORDER BY s.last_used DESC LIMIT 1");
    auto probe = [&](size_t length) -> int64_t {  // a session holding chain[0, length), or 0
        s.reset();
        s.bind(1, as_row(chain[length - 1])).bind(2, static_cast<int64_t>(length - 1)).bind_text(3, scope);
        return s.step() ? s.i64(0) : 0;
    };
    // Chains make presence monotone: a session holding h_k holds h_1..h_{k-1} too.
    size_t lo = 0, hi = chain.size();  // the answer is in [lo, hi]
    int64_t found = 0;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo + 1) / 2;
        if (const int64_t id = probe(mid)) {
            lo = mid;
            found = id;
        } else {
            hi = mid - 1;
        }
    }
    if (lo == 0) return std::nullopt;
    if (found == 0) found = probe(lo);
    return Match{found, lo};
}

std::unique_ptr<Session> SessionStore::load(int64_t id) {
    return guarded("loading a session", std::unique_ptr<Session>(), [&] { return load_locked(id); });
}

std::unique_ptr<Session> SessionStore::load_locked(int64_t id) {
    Stmt head(db_, "SELECT scope FROM sessions WHERE id = ?");
    head.bind(1, id);
    if (!head.step()) return nullptr;
    auto session = std::make_unique<Session>(id, head.text(0));
    Stmt msgs(db_, "SELECT position, hash, tokens, exact FROM messages WHERE session = ? ORDER BY position");
    msgs.bind(1, id);
    std::vector<std::tuple<uint64_t, int64_t, bool>> rows;
    while (msgs.step()) rows.emplace_back(static_cast<uint64_t>(msgs.i64(1)), msgs.i64(2), msgs.i64(3) != 0);
    Stmt chunks(db_, "SELECT message, offset, length, tokens, terms FROM chunks WHERE session = ? ORDER BY message, seq");
    chunks.bind(1, id);
    bool have = chunks.step();
    for (size_t m = 0; m < rows.size(); ++m) {
        std::vector<NewChunk> mine;
        while (have && static_cast<size_t>(chunks.i64(0)) == m) {
            const auto [p, n] = chunks.blob(4);
            mine.push_back({static_cast<uint32_t>(chunks.i64(1)), static_cast<uint32_t>(chunks.i64(2)),
                            static_cast<int32_t>(chunks.i64(3)), decode_terms(p, n)});
            have = chunks.step();
        }
        const auto& [hash, tokens, exact] = rows[m];
        session->add_message(hash, tokens, exact, std::move(mine));
    }
    Stmt t(db_, "UPDATE sessions SET last_used = ? WHERE id = ?");
    t.bind(1, now()).bind(2, id).run();
    return session;
}

void SessionStore::insert_rows(const Session& session, size_t from_message, int64_t& bytes) {
    Stmt m(db_, "INSERT OR REPLACE INTO messages(session, position, hash, tokens, exact) VALUES(?, ?, ?, ?, ?)");
    Stmt c(db_,
           "INSERT OR REPLACE INTO chunks(session, message, seq, offset, length, tokens, terms) VALUES(?, ?, ?, ?, ?, ?, ?)");
    for (size_t i = from_message; i < session.n_messages(); ++i) {
        const MessageRecord& r = session.message(i);
        m.bind(1, session.id())
            .bind(2, static_cast<int64_t>(i))
            .bind(3, as_row(r.hash))
            .bind(4, r.tokens)
            .bind(5, r.exact ? 1 : 0)
            .run();
        bytes += kMessageRowBytes;
        const auto [first, end] = session.chunk_range(i);
        for (uint32_t k = first; k < end; ++k) {
            const ChunkRecord& ch = session.chunk(k);
            const std::string blob = encode_terms(session.chunk_terms(k));
            c.bind(1, session.id()).bind(2, static_cast<int64_t>(i)).bind(3, k - first).bind(4, ch.offset).bind(5, ch.length);
            c.bind(6, ch.tokens).bind_blob(7, blob.data(), blob.size()).run();
            bytes += kChunkRowBytes + static_cast<int64_t>(blob.size());
        }
    }
}

void SessionStore::create(Session& session, int64_t parent, size_t shared) {
    const bool ok = guarded("a write", false, [&] {
        create_locked(session, parent, shared);
        return true;
    });
    if (!ok) session.set_id(0);  // its row was rolled back (or never made): a session of memory only
}

void SessionStore::create_locked(Session& session, int64_t parent, size_t shared) {
    const int64_t total_before = total_bytes_;
    Transaction tx(db_);
    Stmt s(db_, "INSERT INTO sessions(scope, n_messages, bytes, last_used) VALUES(?, 0, 0, ?)");
    s.bind_text(1, session.scope()).bind(2, now()).run();
    session.set_id(sqlite3_last_insert_rowid(db_));
    int64_t bytes = 0;
    size_t copied = 0;
    if (parent != 0 && shared > 0) {
        // Copy the shared prefix's rows only when the parent still holds them all.
        Stmt have(db_, "SELECT n_messages FROM sessions WHERE id = ?");
        have.bind(1, parent);
        if (have.step() && static_cast<size_t>(have.i64(0)) >= shared) {
            Stmt cm(
                db_,
                "INSERT INTO messages SELECT ?, position, hash, tokens, exact FROM messages WHERE session = ? AND position < ?");
            Stmt cc(db_,
                    "INSERT INTO chunks SELECT ?, message, seq, offset, length, tokens, terms FROM chunks WHERE session = ? AND "
                    "message < ?");
            copied = shared;
            cm.bind(1, session.id()).bind(2, parent).bind(3, static_cast<int64_t>(copied)).run();
            cc.bind(1, session.id()).bind(2, parent).bind(3, static_cast<int64_t>(copied)).run();
            Stmt sz(db_, "SELECT COUNT(*), COALESCE(SUM(LENGTH(terms)), 0) FROM chunks WHERE session = ?");
            sz.bind(1, session.id());
            if (sz.step()) bytes += sz.i64(0) * kChunkRowBytes + sz.i64(1);
            bytes += static_cast<int64_t>(copied) * kMessageRowBytes;
        }
    }
    insert_rows(session, copied, bytes);
    Stmt u(db_, "UPDATE sessions SET n_messages = ?, bytes = ? WHERE id = ?");
    u.bind(1, static_cast<int64_t>(session.n_messages())).bind(2, bytes).bind(3, session.id()).run();
    tx.commit();
    total_bytes_ = total_before + bytes;
    evict_over_bound(session.id());
}

void SessionStore::append(Session& session, size_t from_message) {
    const bool appended = guarded("a write", true, [&] {
        Stmt have(db_, "SELECT bytes FROM sessions WHERE id = ?");
        have.bind(1, session.id());
        if (!have.step()) return false;
        have.reset();
        Transaction tx(db_);
        int64_t bytes = 0;
        insert_rows(session, from_message, bytes);
        Stmt u(db_, "UPDATE sessions SET n_messages = ?, bytes = bytes + ?, last_used = ? WHERE id = ?");
        u.bind(1, static_cast<int64_t>(session.n_messages())).bind(2, bytes).bind(3, now()).bind(4, session.id()).run();
        tx.commit();
        total_bytes_ += bytes;
        evict_over_bound(session.id());
        return true;
    });
    if (!appended) create(session);  // evicted meanwhile: store it again under a new id
}

void SessionStore::touch(int64_t id) {
    guarded("a write", 0, [&] {
        Stmt t(db_, "UPDATE sessions SET last_used = ? WHERE id = ?");
        t.bind(1, now()).bind(2, id).run();
        return 0;
    });
}

void SessionStore::evict_over_bound(int64_t keep) {
    if (total_bytes_ <= options_.max_bytes) return;
    Stmt pick(db_, "SELECT id, bytes FROM sessions WHERE id != ? ORDER BY last_used ASC");
    pick.bind(1, keep);
    std::vector<std::pair<int64_t, int64_t>> victims;
    int64_t over = total_bytes_ - options_.max_bytes;
    while (over > 0 && pick.step()) {
        victims.emplace_back(pick.i64(0), pick.i64(1));
        over -= pick.i64(1);
    }
    pick.reset();
    Transaction tx(db_);
    Stmt dm(db_, "DELETE FROM messages WHERE session = ?");
    Stmt dc(db_, "DELETE FROM chunks WHERE session = ?");
    Stmt ds(db_, "DELETE FROM sessions WHERE id = ?");
    int64_t freed = 0;
    for (const auto& [id, bytes] : victims) {
        dm.bind(1, id).run();
        dc.bind(1, id).run();
        ds.bind(1, id).run();
        freed += bytes;
    }
    tx.commit();
    total_bytes_ -= freed;
}

int64_t SessionStore::total_bytes() {
    std::lock_guard lock(mutex_);
    return available_.load() ? total_bytes_ : 0;
}

int64_t SessionStore::n_sessions() {
    return guarded("a count", int64_t{0}, [&] {
        Stmt s(db_, "SELECT COUNT(*) FROM sessions");
        return s.step() ? s.i64(0) : int64_t{0};
    });
}

}  // namespace strata::gateway
