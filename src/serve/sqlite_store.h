// The SQLite plumbing shared by the stores that mirror memory into one database file (serve's
// responses store, the gateway's session store): an error carrying SQLite's primary result code,
// a prepared statement, a BEGIN IMMEDIATE transaction rolled back unless committed, and StoreFile,
// the file itself with the faults policy both stores follow. The file is a durable copy, so its
// faults degrade rather than fail: a file that cannot be opened (a read-only file or folder,
// another process holding it) or a write or COMMIT that fails later (a full disk, one turned
// read-only, a file-size limit) is let go with one warning, naming the system's reason; a file
// that is not a database (or a damaged one) is moved aside at start (PATH.corrupt-UNIXTIME, its
// -wal, -shm and -journal removed) and a fresh one made. The file is opened for this process
// alone: an exclusive lock in WAL mode, so no shared-memory index (-shm) is made or mapped (a
// read-only or truncated one cannot SIGBUS the process) and a second process on the same file is
// told at once. Nothing here is thread-safe: each store holds its own mutex around its file.
// SQLite stays private to this module's sources (and to the modules that link it themselves).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "util/error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace strata::serve::sqlite {

// An SQLite failure, with its primary result code (SQLITE_NOTADB, SQLITE_FULL, ...).
class SqliteError : public Error {
public:
    SqliteError(int code, const std::string& what) : Error(what), code(code) {}
    int code;
};

// SQLite's message (`message`, or the handle's), and for a failed file operation the system's
// reason: a full disk, a quota, a read-only or failing one are otherwise all "disk I/O error" or
// "database or disk is full". Call it first thing after the failed call (it reads errno).
std::string describe(sqlite3* db, int rc, const char* message);
// Throws SqliteError "CONTEXT: MESSAGE[: REASON]".
[[noreturn]] void fail(sqlite3* db, int rc, const std::string& context);
// Runs `sql` (no rows); throws SqliteError "MESSAGE[: REASON] in: SQL".
void exec(sqlite3* db, const char* sql);

// A prepared statement; every failure throws SqliteError. Bound text and blobs are copied.
class Stmt {
public:
    Stmt(sqlite3* db, const char* sql);
    ~Stmt();
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;

    Stmt& bind(int i, int64_t v);
    Stmt& bind_text(int i, std::string_view v);
    Stmt& bind_blob(int i, const void* p, size_t n);
    // true while there is a row.
    bool step();
    // Steps to the end, then makes it ready to bind and run again.
    void run();
    void reset();
    int64_t i64(int col) const;
    std::string text(int col) const;
    std::pair<const void*, size_t> blob(int col) const;

private:
    Stmt& check(int rc);
    sqlite3* db_;
    sqlite3_stmt* s_ = nullptr;
};

// BEGIN IMMEDIATE ... commit(); rolled back on scope exit when not committed (an exception, or a
// COMMIT that failed: commit() throws then).
class Transaction {
public:
    explicit Transaction(sqlite3* db);
    ~Transaction();
    void commit();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

private:
    sqlite3* db_;
    bool committed_ = false;
};

// One store's database file and its faults policy. Its warnings read "WHAT: ..." (`what`: the
// store's name, "session store"); the one that lets the file go ends "; AFTER" (`after`: what
// the store does without it). `warn` gets each warning line.
class StoreFile {
public:
    StoreFile(std::string what, std::string after, std::function<void(const std::string&)> warn);
    ~StoreFile();  // closes the file
    StoreFile(const StoreFile&) = delete;
    StoreFile& operator=(const StoreFile&) = delete;

    // Opens the store's file: `open` calls open_exclusive() and reads what the store needs. When
    // it throws, the handle is closed and `forget` drops what it had read; a file that is not a
    // database is moved aside (one warning) and `open` runs once more. Any other fault, or a
    // second one, lets the file go (turn_off). Never throws for the file's faults.
    void start(const std::filesystem::path& path, const std::function<void()>& open, const std::function<void()>& forget);
    // For `open`: opens or creates `path` (and its folder) for this process alone, in WAL mode.
    // Throws; the handle, if made, stays for start() to close.
    void open_exclusive(const std::filesystem::path& path, int busy_timeout_ms);
    // Closes the file for good; the first call warns "WHAT: WHY; AFTER".
    void turn_off(const std::string& why);

    sqlite3* db() const { return db_; }  // null when off
    // Whether the file is in use (false before start(), and once let go).
    bool on() const { return on_.load(); }

private:
    void close();

    std::string what_, after_;
    std::function<void(const std::string&)> warn_;
    sqlite3* db_ = nullptr;
    std::atomic<bool> on_{false};
    bool warned_ = false;
};

}  // namespace strata::serve::sqlite
