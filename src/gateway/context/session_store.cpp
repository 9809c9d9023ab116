#include "gateway/context/session_store.h"

#include <sqlite3.h>

#include <cstdio>
#include <cstring>

#include "gateway/context/session.h"
#include "util/error.h"

namespace strata::gateway {
namespace {

// Row size estimates for the byte bound (SQLite's own overhead per row included roughly).
constexpr int64_t kMessageRowBytes = 40;
constexpr int64_t kChunkRowBytes = 40;
constexpr int64_t kVectorRowBytes = 24;

using serve::sqlite::Stmt;
using serve::sqlite::Transaction;

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

}  // namespace

SessionStore::SessionStore(SessionStoreOptions options)
    : options_(std::move(options)),
      file_("session store", "sessions are kept in memory only until the gateway restarts",
            [this](const std::string& line) { warn(line); }) {
    file_.start(options_.path, [this] { open_file(); }, {});
}

void SessionStore::open_file() {
    file_.open_exclusive(options_.path, options_.busy_timeout_ms);
    serve::sqlite::exec(db(), "BEGIN EXCLUSIVE");
    // Ids are never reused (AUTOINCREMENT): a session evicted while a request still holds it in
    // memory must not have its later writes land in a newer session that took its id. A file
    // made before that (ids reused) is a cache of derived data: it starts over.
    {
        Stmt old(db(), "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'sessions'");
        if (old.step() && old.text(0).find("AUTOINCREMENT") == std::string::npos) {
            old.reset();
            for (const char* t : {"sessions", "messages", "chunks", "vectors"})
                serve::sqlite::exec(db(), (std::string("DROP TABLE IF EXISTS ") + t).c_str());
            warn("session store: " + options_.path.string() +
                 " was written by an older gateway (session ids could be reused); it starts empty");
        }
    }
    serve::sqlite::exec(
        db(),
        "CREATE TABLE IF NOT EXISTS sessions(id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, n_messages INTEGER "
        "NOT NULL, bytes INTEGER NOT NULL, last_used INTEGER NOT NULL)");
    serve::sqlite::exec(
        db(),
        "CREATE TABLE IF NOT EXISTS messages(session INTEGER NOT NULL, position INTEGER NOT NULL, hash INTEGER NOT NULL,"
        " tokens INTEGER NOT NULL, exact INTEGER NOT NULL, PRIMARY KEY(session, position)) WITHOUT ROWID");
    serve::sqlite::exec(db(), "CREATE INDEX IF NOT EXISTS messages_by_hash ON messages(hash)");
    serve::sqlite::exec(
        db(),
        "CREATE TABLE IF NOT EXISTS chunks(session INTEGER NOT NULL, message INTEGER NOT NULL, seq INTEGER NOT NULL,"
        " offset INTEGER NOT NULL, length INTEGER NOT NULL, tokens INTEGER NOT NULL, terms BLOB NOT NULL,"
        " PRIMARY KEY(session, message, seq))");
    serve::sqlite::exec(db(),
                        "CREATE TABLE IF NOT EXISTS vectors(session INTEGER NOT NULL, chunk INTEGER NOT NULL, v BLOB NOT NULL,"
                        " PRIMARY KEY(session, chunk)) WITHOUT ROWID");
    {
        Stmt s(db(), "SELECT COALESCE(SUM(bytes), 0), COALESCE(MAX(last_used), 0) FROM sessions");
        if (s.step()) {
            total_bytes_ = s.i64(0);
            clock_ = s.i64(1);
        }
    }
    serve::sqlite::exec(db(), "COMMIT");
}

SessionStore::~SessionStore() = default;

void SessionStore::warn(const std::string& line) const {
    if (options_.log) {
        options_.log(line);
    } else {
        std::fprintf(stderr, "gateway: %s\n", line.c_str());
        std::fflush(stderr);
    }
}

template <typename T, typename F>
T SessionStore::guarded(const char* what, T off, F&& fn) {
    std::lock_guard lock(mutex_);
    if (!file_.on()) return off;
    try {
        return fn();
    } catch (const Error& e) {
        file_.turn_off(std::string(what) + " failed (" + e.what() + ")");
        return off;
    }
}

int64_t SessionStore::now() { return ++clock_; }

bool SessionStore::contains(std::string_view scope, uint64_t hash) {
    return guarded("a lookup", false, [&] {
        Stmt s(db(), "SELECT 1 FROM messages m JOIN sessions s ON s.id = m.session WHERE m.hash = ? AND s.scope = ? LIMIT 1");
        s.bind(1, as_row(hash)).bind_text(2, scope);
        return s.step();
    });
}

std::optional<SessionStore::Match> SessionStore::find_prefix(std::string_view scope, std::span<const uint64_t> chain) {
    return guarded("a lookup", std::optional<Match>(),
                   [&]() -> std::optional<Match> { return find_prefix_locked(scope, chain); });
}

std::optional<SessionStore::Match> SessionStore::find_prefix_locked(std::string_view scope, std::span<const uint64_t> chain) {
    Stmt s(db(),
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
    Stmt head(db(), "SELECT scope FROM sessions WHERE id = ?");
    head.bind(1, id);
    if (!head.step()) return nullptr;
    auto session = std::make_unique<Session>(id, head.text(0));
    Stmt msgs(db(), "SELECT position, hash, tokens, exact FROM messages WHERE session = ? ORDER BY position");
    msgs.bind(1, id);
    std::vector<std::tuple<uint64_t, int64_t, bool>> rows;
    while (msgs.step()) rows.emplace_back(static_cast<uint64_t>(msgs.i64(1)), msgs.i64(2), msgs.i64(3) != 0);
    Stmt chunks(db(), "SELECT message, offset, length, tokens, terms FROM chunks WHERE session = ? ORDER BY message, seq");
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
    Stmt vecs(db(), "SELECT chunk, v FROM vectors WHERE session = ? ORDER BY chunk");
    vecs.bind(1, id);
    while (vecs.step()) {
        const int64_t chunk = vecs.i64(0);
        const auto [p, n] = vecs.blob(1);
        if (chunk < 0 || static_cast<size_t>(chunk) >= session->n_chunks() || n <= sizeof(float)) continue;
        float scale;
        std::memcpy(&scale, p, sizeof scale);
        session->dense.set_codes(static_cast<uint32_t>(chunk), scale,
                                 std::span<const int8_t>(static_cast<const int8_t*>(p) + sizeof scale, n - sizeof scale));
    }
    Stmt t(db(), "UPDATE sessions SET last_used = ? WHERE id = ?");
    t.bind(1, now()).bind(2, id).run();
    return session;
}

void SessionStore::insert_rows(const Session& session, size_t from_message, int64_t& bytes) {
    Stmt m(db(), "INSERT OR REPLACE INTO messages(session, position, hash, tokens, exact) VALUES(?, ?, ?, ?, ?)");
    Stmt c(db(),
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
    Transaction tx(db());
    Stmt s(db(), "INSERT INTO sessions(scope, n_messages, bytes, last_used) VALUES(?, 0, 0, ?)");
    s.bind_text(1, session.scope()).bind(2, now()).run();
    session.set_id(sqlite3_last_insert_rowid(db()));
    int64_t bytes = 0;
    size_t copied = 0;
    if (parent != 0 && shared > 0) {
        // Copy the shared prefix's rows only when the parent still holds them all.
        Stmt have(db(), "SELECT n_messages FROM sessions WHERE id = ?");
        have.bind(1, parent);
        if (have.step() && static_cast<size_t>(have.i64(0)) >= shared) {
            Stmt cm(
                db(),
                "INSERT INTO messages SELECT ?, position, hash, tokens, exact FROM messages WHERE session = ? AND position < ?");
            Stmt cc(db(),
                    "INSERT INTO chunks SELECT ?, message, seq, offset, length, tokens, terms FROM chunks WHERE session = ? AND "
                    "message < ?");
            copied = shared;
            cm.bind(1, session.id()).bind(2, parent).bind(3, static_cast<int64_t>(copied)).run();
            cc.bind(1, session.id()).bind(2, parent).bind(3, static_cast<int64_t>(copied)).run();
            Stmt sz(db(), "SELECT COUNT(*), COALESCE(SUM(LENGTH(terms)), 0) FROM chunks WHERE session = ?");
            sz.bind(1, session.id());
            if (sz.step()) bytes += sz.i64(0) * kChunkRowBytes + sz.i64(1);
            // The prefix's vectors: its chunks have the same numbers in the fork.
            const int64_t prefix_chunks = session.chunk_range(shared - 1).second;
            Stmt cv(db(), "INSERT INTO vectors SELECT ?, chunk, v FROM vectors WHERE session = ? AND chunk < ?");
            cv.bind(1, session.id()).bind(2, parent).bind(3, prefix_chunks).run();
            Stmt vz(db(), "SELECT COUNT(*), COALESCE(SUM(LENGTH(v)), 0) FROM vectors WHERE session = ?");
            vz.bind(1, session.id());
            if (vz.step()) bytes += vz.i64(0) * kVectorRowBytes + vz.i64(1);
            bytes += static_cast<int64_t>(copied) * kMessageRowBytes;
        }
    }
    insert_rows(session, copied, bytes);
    // Vectors the session holds past the copied prefix (a session stored again after its
    // eviction, a fork whose parent's rows were gone).
    const uint32_t from = copied > 0 ? session.chunk_range(copied - 1).second : 0;
    std::vector<uint32_t> held;
    for (uint32_t c = from; c < session.n_chunks(); ++c)
        if (session.dense.has(c)) held.push_back(c);
    bytes += insert_vectors(session, held);
    Stmt u(db(), "UPDATE sessions SET n_messages = ?, bytes = ? WHERE id = ?");
    u.bind(1, static_cast<int64_t>(session.n_messages())).bind(2, bytes).bind(3, session.id()).run();
    tx.commit();
    total_bytes_ = total_before + bytes;
    evict_over_bound(session.id());
}

void SessionStore::append(Session& session, size_t from_message) {
    const bool appended = guarded("a write", true, [&] {
        Stmt have(db(), "SELECT bytes FROM sessions WHERE id = ?");
        have.bind(1, session.id());
        if (!have.step()) return false;
        have.reset();
        Transaction tx(db());
        int64_t bytes = 0;
        insert_rows(session, from_message, bytes);
        Stmt u(db(), "UPDATE sessions SET n_messages = ?, bytes = bytes + ?, last_used = ? WHERE id = ?");
        u.bind(1, static_cast<int64_t>(session.n_messages())).bind(2, bytes).bind(3, now()).bind(4, session.id()).run();
        tx.commit();
        total_bytes_ += bytes;
        evict_over_bound(session.id());
        return true;
    });
    if (!appended) create(session);  // evicted meanwhile: store it again under a new id
}

// Writes the vectors of `chunks` (those session.dense holds, of its dimensions; mutex_ held, in a
// transaction) and returns their bytes. Rows of other dimensions (the lane's model changed) go
// first, their bytes taken off the session's and the store's counts.
int64_t SessionStore::insert_vectors(const Session& session, std::span<const uint32_t> chunks) {
    if (chunks.empty() || session.dense.dims() == 0) return 0;
    const size_t row = sizeof(float) + session.dense.dims();
    Stmt gone(db(), "SELECT COUNT(*), COALESCE(SUM(LENGTH(v)), 0) FROM vectors WHERE session = ? AND LENGTH(v) != ?");
    gone.bind(1, session.id()).bind(2, static_cast<int64_t>(row));
    int64_t freed = 0;
    if (gone.step()) freed = gone.i64(0) * kVectorRowBytes + gone.i64(1);
    gone.reset();
    if (freed > 0) {
        Stmt old(db(), "DELETE FROM vectors WHERE session = ? AND LENGTH(v) != ?");
        old.bind(1, session.id()).bind(2, static_cast<int64_t>(row)).run();
        Stmt u(db(), "UPDATE sessions SET bytes = bytes - ? WHERE id = ?");
        u.bind(1, freed).bind(2, session.id()).run();
        total_bytes_ -= freed;
    }
    Stmt put(db(), "INSERT OR REPLACE INTO vectors(session, chunk, v) VALUES(?, ?, ?)");
    std::string blob(row, '\0');
    int64_t bytes = 0;
    for (uint32_t c : chunks) {
        const float scale = session.dense.scale(c);
        const std::span<const int8_t> codes = session.dense.codes(c);
        if (scale < 0 || codes.size() + sizeof scale != row) continue;
        std::memcpy(blob.data(), &scale, sizeof scale);
        std::memcpy(blob.data() + sizeof scale, codes.data(), codes.size());
        put.bind(1, session.id()).bind(2, c).bind_blob(3, blob.data(), blob.size()).run();
        bytes += kVectorRowBytes + static_cast<int64_t>(row);
    }
    return bytes;
}

void SessionStore::put_vectors(const Session& session, std::span<const uint32_t> chunks) {
    if (session.id() == 0 || chunks.empty() || session.dense.dims() == 0) return;
    guarded("a write", 0, [&] {
        Stmt have(db(), "SELECT 1 FROM sessions WHERE id = ?");
        have.bind(1, session.id());
        if (!have.step()) return 0;  // evicted meanwhile: its next append stores it again, vectors too
        have.reset();
        Transaction tx(db());
        const int64_t bytes = insert_vectors(session, chunks);
        Stmt u(db(), "UPDATE sessions SET bytes = bytes + ? WHERE id = ?");
        u.bind(1, bytes).bind(2, session.id()).run();
        tx.commit();
        total_bytes_ += bytes;
        evict_over_bound(session.id());
        return 0;
    });
}

void SessionStore::touch(int64_t id) {
    guarded("a write", 0, [&] {
        Stmt t(db(), "UPDATE sessions SET last_used = ? WHERE id = ?");
        t.bind(1, now()).bind(2, id).run();
        return 0;
    });
}

void SessionStore::evict_over_bound(int64_t keep) {
    if (total_bytes_ <= options_.max_bytes) return;
    Stmt pick(db(), "SELECT id, bytes FROM sessions WHERE id != ? ORDER BY last_used ASC");
    pick.bind(1, keep);
    std::vector<std::pair<int64_t, int64_t>> victims;
    int64_t over = total_bytes_ - options_.max_bytes;
    while (over > 0 && pick.step()) {
        victims.emplace_back(pick.i64(0), pick.i64(1));
        over -= pick.i64(1);
    }
    pick.reset();
    Transaction tx(db());
    Stmt dm(db(), "DELETE FROM messages WHERE session = ?");
    Stmt dc(db(), "DELETE FROM chunks WHERE session = ?");
    Stmt dv(db(), "DELETE FROM vectors WHERE session = ?");
    Stmt ds(db(), "DELETE FROM sessions WHERE id = ?");
    int64_t freed = 0;
    for (const auto& [id, bytes] : victims) {
        dm.bind(1, id).run();
        dc.bind(1, id).run();
        dv.bind(1, id).run();
        ds.bind(1, id).run();
        freed += bytes;
    }
    tx.commit();
    total_bytes_ -= freed;
}

int64_t SessionStore::total_bytes() {
    std::lock_guard lock(mutex_);
    return file_.on() ? total_bytes_ : 0;
}

int64_t SessionStore::n_sessions() {
    return guarded("a count", int64_t{0}, [&] {
        Stmt s(db(), "SELECT COUNT(*) FROM sessions");
        return s.step() ? s.i64(0) : int64_t{0};
    });
}

}  // namespace strata::gateway
