#include "serve/responses_store.h"

#include <sqlite3.h>

#include <cstdio>
#include <ctime>

#include "util/error.h"

namespace strata::serve {
namespace {

// An SQLite failure, with its primary result code (SQLITE_NOTADB, SQLITE_FULL, ...).
class StoreSqliteError : public Error {
public:
    StoreSqliteError(int rc, const std::string& what) : Error(what), code(rc) {}
    int code;
};

[[noreturn]] void store_fail(sqlite3* db, int rc, const std::string& context) {
    throw StoreSqliteError(rc & 0xff, context + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
}

void store_exec(sqlite3* db, const char* sql) {
    char* err = nullptr;
    if (const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
        const std::string msg = err ? err : sqlite3_errstr(rc);
        sqlite3_free(err);
        throw StoreSqliteError(rc & 0xff, msg + " in: " + sql);
    }
}

class StoreStmt {
public:
    StoreStmt(sqlite3* db, const char* sql) : db_(db) {
        if (const int rc = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); rc != SQLITE_OK) store_fail(db, rc, sql);
    }
    ~StoreStmt() { sqlite3_finalize(s_); }
    StoreStmt(const StoreStmt&) = delete;
    StoreStmt& operator=(const StoreStmt&) = delete;

    StoreStmt& bind(int i, int64_t v) { return check(sqlite3_bind_int64(s_, i, v)); }
    StoreStmt& bind_text(int i, std::string_view v) {
        return check(sqlite3_bind_text64(s_, i, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8));
    }
    // true while there is a row.
    bool step() {
        const int rc = sqlite3_step(s_);
        if (rc == SQLITE_ROW) return true;
        if (rc != SQLITE_DONE) store_fail(db_, rc, sqlite3_sql(s_));
        return false;
    }
    void run() {
        step();
        sqlite3_reset(s_);
        sqlite3_clear_bindings(s_);
    }
    int64_t i64(int col) const { return sqlite3_column_int64(s_, col); }
    std::string text(int col) const {
        const auto* p = sqlite3_column_text(s_, col);
        return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s_, col)))
                 : std::string();
    }

private:
    StoreStmt& check(int rc) {
        if (rc != SQLITE_OK) store_fail(db_, rc, "bind");
        return *this;
    }
    sqlite3* db_;
    sqlite3_stmt* s_ = nullptr;
};

// BEGIN IMMEDIATE ... commit(); rolled back on scope exit when not committed (an exception, or a
// COMMIT that failed: commit() throws then).
class StoreTransaction {
public:
    explicit StoreTransaction(sqlite3* db) : db_(db) { store_exec(db_, "BEGIN IMMEDIATE"); }
    ~StoreTransaction() {
        if (!committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    void commit() {
        store_exec(db_, "COMMIT");
        committed_ = true;
    }
    StoreTransaction(const StoreTransaction&) = delete;
    StoreTransaction& operator=(const StoreTransaction&) = delete;

private:
    sqlite3* db_;
    bool committed_ = false;
};

size_t stored_bytes(const std::string& id, const std::string& owner, size_t response, size_t input, size_t context) {
    return response + input + context + id.size() + owner.size();
}

}  // namespace

ResponseStore::ResponseStore(ResponseStoreOptions options) : options_(std::move(options)) {
    if (options_.db.empty()) return;
    const std::string path = options_.db.string();
    std::lock_guard lock(mu_);
    try {
        open_file();
    } catch (const StoreSqliteError& e) {
        sqlite3_close(db_);
        db_ = nullptr;
        order_.clear();
        by_id_.clear();
        bytes_ = 0;
        if (e.code != SQLITE_NOTADB && e.code != SQLITE_CORRUPT) {
            turn_off("cannot use " + path + " (" + e.what() + ")");
            return;
        }
        // Not a database, or a damaged one: kept aside for a look, and a fresh store made.
        const std::string aside = path + ".corrupt-" + std::to_string(std::time(nullptr));
        std::error_code ec;
        std::filesystem::rename(options_.db, aside, ec);
        for (const char* side : {"-wal", "-shm", "-journal"}) std::filesystem::remove(path + side, ec);
        warn("responses store: " + path + " is damaged (" + e.what() + "): moved aside to " + aside + "; starting a fresh one");
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
        order_.clear();
        by_id_.clear();
        bytes_ = 0;
        turn_off("cannot use " + path + " (" + e.what() + ")");
        return;
    }
    persistent_ = true;
}

ResponseStore::~ResponseStore() { sqlite3_close(db_); }

void ResponseStore::open_file() {
    const std::string path = options_.db.string();
    if (options_.db.has_parent_path()) {
        std::error_code ec;
        std::filesystem::create_directories(options_.db.parent_path(), ec);
        if (ec) throw Error("cannot make the folder " + options_.db.parent_path().string() + ": " + ec.message());
    }
    const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) store_fail(db_, rc, "open");
    // SQLite opens a file it may not write read-only without a word: every write would fail.
    if (sqlite3_db_readonly(db_, "main") == 1) throw Error("the file is read-only");
    sqlite3_busy_timeout(db_, options_.busy_timeout_ms);
    // Exclusive before the first WAL access: no -shm is ever made or mapped (a read-only or
    // truncated one is a SIGBUS otherwise), and the lock keeps other processes out.
    store_exec(db_, "PRAGMA locking_mode=EXCLUSIVE");
    store_exec(db_, "PRAGMA mmap_size=0");
    store_exec(db_, "PRAGMA journal_mode=WAL");
    store_exec(db_, "PRAGMA synchronous=NORMAL");
    store_exec(db_, "BEGIN EXCLUSIVE");
    store_exec(db_,
               "CREATE TABLE IF NOT EXISTS responses(seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL,"
               " response TEXT NOT NULL, input TEXT NOT NULL, context TEXT NOT NULL, bytes INTEGER NOT NULL)");
    store_exec(db_, "COMMIT");
    load_rows();
}

// Reads every row back, oldest first, under the current bounds: rows past them (the bounds
// were lowered since) and rows that do not parse are deleted.
void ResponseStore::load_rows() {
    std::vector<std::string> drop;
    {
        StoreStmt s(db_, "SELECT seq, id, owner, response, input, context FROM responses ORDER BY seq");
        while (s.step()) {
            seq_ = s.i64(0);
            auto r = std::make_shared<StoredResponse>();
            r->id = s.text(1);
            r->owner = s.text(2);
            const std::string response = s.text(3), input = s.text(4), context = s.text(5);
            r->response = nlohmann::ordered_json::parse(response, nullptr, false);
            r->input = nlohmann::ordered_json::parse(input, nullptr, false);
            r->context = nlohmann::ordered_json::parse(context, nullptr, false);
            r->bytes = stored_bytes(r->id, r->owner, response.size(), input.size(), context.size());
            if (r->response.is_discarded() || r->input.is_discarded() || r->context.is_discarded() || options_.max_count <= 0 ||
                static_cast<int64_t>(r->bytes) > options_.max_bytes) {
                drop.push_back(r->id);
                continue;
            }
            insert_locked(std::move(r), drop);
        }
    }
    if (drop.empty()) return;
    StoreTransaction tx(db_);
    StoreStmt d(db_, "DELETE FROM responses WHERE id = ?");
    for (const std::string& id : drop) d.bind_text(1, id).run();
    tx.commit();
}

void ResponseStore::warn(const std::string& line) const {
    if (options_.log) {
        options_.log(line);
    } else {
        std::fprintf(stderr, "serve: %s\n", line.c_str());
        std::fflush(stderr);
    }
}

// Under mu_ (or in the constructor).
void ResponseStore::turn_off(const std::string& why) {
    if (db_ != nullptr) {
        sqlite3_close(db_);
        db_ = nullptr;
    }
    persistent_ = false;
    if (!warned_) {
        warned_ = true;
        warn("responses store: " + why + "; stored responses are kept in memory only until serve restarts");
    }
}

void ResponseStore::insert_locked(Entry entry, std::vector<std::string>& evicted) {
    if (auto it = by_id_.find(entry->id); it != by_id_.end()) {
        bytes_ -= static_cast<int64_t>((*it->second)->bytes);
        order_.erase(it->second);
        by_id_.erase(it);
    }
    while (!order_.empty() && (static_cast<int64_t>(order_.size()) >= options_.max_count ||
                               bytes_ + static_cast<int64_t>(entry->bytes) > options_.max_bytes)) {
        bytes_ -= static_cast<int64_t>(order_.front()->bytes);
        evicted.push_back(order_.front()->id);
        by_id_.erase(order_.front()->id);
        order_.pop_front();
    }
    bytes_ += static_cast<int64_t>(entry->bytes);
    order_.push_back(entry);
    by_id_[entry->id] = std::prev(order_.end());
}

void ResponseStore::put(StoredResponse r) {
    const std::string response = r.response.dump(), input = r.input.dump(), context = r.context.dump();
    r.bytes = stored_bytes(r.id, r.owner, response.size(), input.size(), context.size());
    if (options_.max_count <= 0 || static_cast<int64_t>(r.bytes) > options_.max_bytes) return;
    auto entry = std::make_shared<const StoredResponse>(std::move(r));
    std::lock_guard lock(mu_);
    std::vector<std::string> evicted;
    insert_locked(entry, evicted);
    if (db_ != nullptr) write_put(*entry, response, input, context, evicted);
}

// Under mu_, with the file open.
void ResponseStore::write_put(const StoredResponse& r, const std::string& response_json, const std::string& input_json,
                              const std::string& context_json, const std::vector<std::string>& evicted) {
    try {
        StoreTransaction tx(db_);
        if (!evicted.empty()) {
            StoreStmt d(db_, "DELETE FROM responses WHERE id = ?");
            for (const std::string& id : evicted) d.bind_text(1, id).run();
        }
        StoreStmt s(db_,
                    "INSERT OR REPLACE INTO responses(seq, id, owner, response, input, context, bytes)"
                    " VALUES(?, ?, ?, ?, ?, ?, ?)");
        s.bind(1, seq_ + 1)
            .bind_text(2, r.id)
            .bind_text(3, r.owner)
            .bind_text(4, response_json)
            .bind_text(5, input_json)
            .bind_text(6, context_json)
            .bind(7, static_cast<int64_t>(r.bytes))
            .run();
        tx.commit();
        ++seq_;
    } catch (const Error& e) {
        turn_off(std::string("a write failed (") + e.what() + ")");
    }
}

void ResponseStore::write_erase(const std::string& id) {
    try {
        StoreTransaction tx(db_);
        StoreStmt d(db_, "DELETE FROM responses WHERE id = ?");
        d.bind_text(1, id).run();
        tx.commit();
    } catch (const Error& e) {
        turn_off(std::string("a delete failed (") + e.what() + ")");
    }
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id, const std::string& owner) const {
    std::lock_guard lock(mu_);
    const auto it = by_id_.find(id);
    if (it == by_id_.end() || (*it->second)->owner != owner) return nullptr;
    return *it->second;
}

bool ResponseStore::erase(const std::string& id, const std::string& owner) {
    std::lock_guard lock(mu_);
    const auto it = by_id_.find(id);
    if (it == by_id_.end() || (*it->second)->owner != owner) return false;
    bytes_ -= static_cast<int64_t>((*it->second)->bytes);
    order_.erase(it->second);
    by_id_.erase(it);
    if (db_ != nullptr) write_erase(id);
    return true;
}

int64_t ResponseStore::count() const {
    std::lock_guard lock(mu_);
    return static_cast<int64_t>(order_.size());
}

int64_t ResponseStore::bytes() const {
    std::lock_guard lock(mu_);
    return bytes_;
}

std::shared_ptr<void> ResponseStore::begin(const std::string& id, std::shared_ptr<InFlight> flight) {
    {
        std::lock_guard lock(mu_);
        in_flight_[id] = std::move(flight);
    }
    return std::shared_ptr<void>(nullptr, [this, id](void*) {
        std::lock_guard lock(mu_);
        in_flight_.erase(id);
    });
}

std::shared_ptr<ResponseStore::InFlight> ResponseStore::in_flight(const std::string& id, const std::string& owner) const {
    std::lock_guard lock(mu_);
    const auto it = in_flight_.find(id);
    if (it == in_flight_.end() || it->second->owner != owner) return nullptr;
    return it->second;
}

}  // namespace strata::serve
