// Stored Responses API responses (`store: true`) of one `strata serve`, bounded by count and by
// bytes: the oldest go first when either bound is passed (docs/serve.md, --responses-store /
// --responses-store-mib). A response is visible only to the caller identity that made it (the
// key, the gateway's key name, or the peer address). Also the responses in flight, so that
// POST /v1/responses/{id}/cancel can stop one. Thread-safe.
//
// With a database file (--responses-db) every stored response is also written to SQLite (WAL
// mode), so a restarted serve still answers GET and previous_response_id; the file is read back
// at start (the bounds applied again, oldest first) and every put and delete is one transaction
// whose COMMIT is checked. Schema:
//   responses(seq, id, owner, response, input, context, bytes)   seq: insertion order (oldest first)
// The memory copy stays the one that answers; the file is its durable mirror, so its faults
// degrade rather than fail: a file that cannot be opened (a read-only file or folder, another
// process holding it) or a write or COMMIT that fails later (a full disk, a file-size limit:
// serve ignores SIGXFSZ so a write fails with EFBIG) logs one warning, naming the system's
// reason, and the file is let go (responses then live in memory only until serve restarts); a
// file that is not a database (corrupt) is moved aside at start (PATH.corrupt-UNIXTIME) and a
// fresh one made. The file is held with an exclusive lock, so no shared-memory index (-shm) is
// mapped and a second process on the same file is told at once (memory only). The SQLite
// plumbing and this faults policy are shared with the gateway's session store (serve/sqlite_store.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/sqlite_store.h"

namespace strata::serve {

struct StoredResponse {
    std::string id, owner;
    nlohmann::ordered_json response;  // the response object as GET returns it
    nlohmann::ordered_json input;     // this request's input items (with ids), for input_items
    nlohmann::ordered_json context;   // the items a continuation (previous_response_id) starts from
    size_t bytes = 0;
};

struct ResponseStoreOptions {
    int64_t max_count = 1000;
    int64_t max_bytes = int64_t{256} << 20;
    std::filesystem::path db;                     // empty: memory only
    std::function<void(const std::string&)> log;  // a warning line; null: stderr
    int busy_timeout_ms = 250;                    // another process holding the file: memory only after this
};

class ResponseStore {
public:
    ResponseStore(int64_t max_count, int64_t max_bytes) : ResponseStore(ResponseStoreOptions{max_count, max_bytes, {}, {}}) {}
    // Opens or creates the file when one is named; never throws for the file's faults (it
    // degrades to memory only).
    explicit ResponseStore(ResponseStoreOptions options);
    ~ResponseStore();
    ResponseStore(const ResponseStore&) = delete;
    ResponseStore& operator=(const ResponseStore&) = delete;

    // Keeps `r` (its bytes are measured here), evicting the oldest past the bounds; a response
    // larger than the byte bound alone is not kept. Replaces one of the same id.
    void put(StoredResponse r);
    std::shared_ptr<const StoredResponse> get(const std::string& id, const std::string& owner) const;
    bool erase(const std::string& id, const std::string& owner);
    int64_t count() const;
    int64_t bytes() const;
    // Whether the responses are written to the database file (false: none named, or it turned
    // off; why in the one warning).
    bool persistent() const { return file_.on(); }

    // A response being generated: `cancel` is set by POST .../cancel; the entry goes when the
    // returned token is released.
    struct InFlight {
        std::string owner;
        nlohmann::ordered_json skeleton;  // the response object as created (status in_progress)
        std::atomic<bool> cancel{false};
    };
    std::shared_ptr<void> begin(const std::string& id, std::shared_ptr<InFlight> flight);
    std::shared_ptr<InFlight> in_flight(const std::string& id, const std::string& owner) const;

private:
    using Entry = std::shared_ptr<const StoredResponse>;
    // Under mu_: adds `entry` to memory, appending the ids it pushed out to `evicted`.
    void insert_locked(Entry entry, std::vector<std::string>& evicted);
    void open_file();  // throws; loads the stored responses into memory
    void load_rows();
    void write_put(const StoredResponse& r, const std::string& response_json, const std::string& input_json,
                   const std::string& context_json, const std::vector<std::string>& evicted);
    void write_erase(const std::string& id);
    void warn(const std::string& line) const;

    ResponseStoreOptions options_;
    mutable std::mutex mu_;
    std::list<Entry> order_;  // oldest first
    std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
    int64_t bytes_ = 0;
    std::map<std::string, std::shared_ptr<InFlight>> in_flight_;
    sqlite::StoreFile file_;  // under mu_
    int64_t seq_ = 0;         // the last row's insertion stamp
};

}  // namespace strata::serve
