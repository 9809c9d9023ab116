#include "serve/sqlite_store.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace strata::serve::sqlite {

// SQLite's own record of the system's reason (sqlite3_system_errno) is often 0 by then; errno,
// read first thing after the failed call, still holds it, and is used only when it is one of
// the disk faults.
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

void fail(sqlite3* db, int rc, const std::string& context) {
    throw SqliteError(rc & 0xff, context + ": " + describe(db, rc, nullptr));
}

void exec(sqlite3* db, const char* sql) {
    char* err = nullptr;
    if (const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
        const std::string msg = describe(db, rc, err);
        sqlite3_free(err);
        throw SqliteError(rc & 0xff, msg + " in: " + sql);
    }
}

Stmt::Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (const int rc = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); rc != SQLITE_OK) fail(db, rc, sql);
}

Stmt::~Stmt() { sqlite3_finalize(s_); }

Stmt& Stmt::bind(int i, int64_t v) { return check(sqlite3_bind_int64(s_, i, v)); }

Stmt& Stmt::bind_text(int i, std::string_view v) {
    return check(sqlite3_bind_text64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
}

Stmt& Stmt::bind_blob(int i, const void* p, size_t n) { return check(sqlite3_bind_blob64(s_, i, p, n, SQLITE_TRANSIENT)); }

bool Stmt::step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail(db_, rc, sqlite3_sql(s_));
    return false;
}

void Stmt::run() {
    step();
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
}

void Stmt::reset() { sqlite3_reset(s_); }

int64_t Stmt::i64(int col) const { return sqlite3_column_int64(s_, col); }

std::string Stmt::text(int col) const {
    const auto* p = sqlite3_column_text(s_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s_, col))) : std::string();
}

std::pair<const void*, size_t> Stmt::blob(int col) const {
    return {sqlite3_column_blob(s_, col), static_cast<size_t>(sqlite3_column_bytes(s_, col))};
}

Stmt& Stmt::check(int rc) {
    if (rc != SQLITE_OK) fail(db_, rc, "bind");
    return *this;
}

Transaction::Transaction(sqlite3* db) : db_(db) {
    if (const int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr); rc != SQLITE_OK)
        fail(db_, rc, "BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
    if (!committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
    if (const int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr); rc != SQLITE_OK) fail(db_, rc, "COMMIT");
    committed_ = true;
}

StoreFile::StoreFile(std::string what, std::string after, std::function<void(const std::string&)> warn)
    : what_(std::move(what)), after_(std::move(after)), warn_(std::move(warn)) {}

StoreFile::~StoreFile() { sqlite3_close(db_); }

void StoreFile::close() {
    sqlite3_close(db_);
    db_ = nullptr;
}

void StoreFile::start(const std::filesystem::path& file, const std::function<void()>& open, const std::function<void()>& forget) {
    const std::string path = file.string();
    try {
        open();
    } catch (const SqliteError& e) {
        close();
        if (forget) forget();
        if (e.code != SQLITE_NOTADB && e.code != SQLITE_CORRUPT) {
            turn_off("cannot use " + path + " (" + e.what() + ")");
            return;
        }
        // Not a database, or a damaged one: kept aside for a look, and a fresh store made.
        const std::string aside = path + ".corrupt-" + std::to_string(std::time(nullptr));
        std::error_code ec;
        std::filesystem::rename(file, aside, ec);
        for (const char* side : {"-wal", "-shm", "-journal"}) std::filesystem::remove(path + side, ec);
        warn_(what_ + ": " + path + " is damaged (" + e.what() + "): moved aside to " + aside + "; starting a fresh one");
        try {
            open();
        } catch (const Error& again) {
            close();
            if (forget) forget();
            turn_off("cannot use " + path + " (" + again.what() + ")");
            return;
        }
    } catch (const Error& e) {
        close();
        if (forget) forget();
        turn_off("cannot use " + path + " (" + e.what() + ")");
        return;
    }
    on_ = true;
}

void StoreFile::open_exclusive(const std::filesystem::path& file, int busy_timeout_ms) {
    const std::string path = file.string();
    if (file.has_parent_path()) {
        std::error_code ec;
        std::filesystem::create_directories(file.parent_path(), ec);
        if (ec) throw Error("cannot make the folder " + file.parent_path().string() + ": " + ec.message());
    }
    const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) fail(db_, rc, "open");
    // SQLite opens a file it may not write read-only without a word: every write would fail.
    if (sqlite3_db_readonly(db_, "main") == 1) throw Error("the file is read-only");
    sqlite3_busy_timeout(db_, busy_timeout_ms);
    // Exclusive before the first WAL access: no -shm is ever made or mapped (a read-only or
    // truncated one is a SIGBUS otherwise), and the lock the store's first transaction takes
    // keeps other processes out.
    exec(db_, "PRAGMA locking_mode=EXCLUSIVE");
    exec(db_, "PRAGMA mmap_size=0");
    exec(db_, "PRAGMA journal_mode=WAL");
    exec(db_, "PRAGMA synchronous=NORMAL");
}

void StoreFile::turn_off(const std::string& why) {
    if (db_ != nullptr) close();
    on_ = false;
    if (!warned_) {
        warned_ = true;
        warn_(what_ + ": " + why + "; " + after_);
    }
}

}  // namespace strata::serve::sqlite
