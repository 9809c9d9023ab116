#include "serve/responses_store.h"

#include <cstdio>

#include "util/error.h"

namespace strata::serve {
namespace {

size_t stored_bytes(const std::string& id, const std::string& owner, size_t response, size_t input, size_t context) {
    return response + input + context + id.size() + owner.size();
}

}  // namespace

ResponseStore::ResponseStore(ResponseStoreOptions options)
    : options_(std::move(options)),
      file_("responses store", "stored responses are kept in memory only until serve restarts",
            [this](const std::string& line) { warn(line); }) {
    if (options_.db.empty()) return;
    std::lock_guard lock(mu_);
    file_.start(
        options_.db, [this] { open_file(); },
        [this] {
            order_.clear();
            by_id_.clear();
            bytes_ = 0;
        });
}

ResponseStore::~ResponseStore() = default;

void ResponseStore::open_file() {
    file_.open_exclusive(options_.db, options_.busy_timeout_ms);
    sqlite3* db = file_.db();
    sqlite::exec(db, "BEGIN EXCLUSIVE");
    sqlite::exec(db,
                 "CREATE TABLE IF NOT EXISTS responses(seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL,"
                 " response TEXT NOT NULL, input TEXT NOT NULL, context TEXT NOT NULL, bytes INTEGER NOT NULL)");
    sqlite::exec(db, "COMMIT");
    load_rows();
}

// Reads every row back, oldest first, under the current bounds: rows past them (the bounds
// were lowered since) and rows that do not parse are deleted.
void ResponseStore::load_rows() {
    std::vector<std::string> drop;
    {
        sqlite::Stmt s(file_.db(), "SELECT seq, id, owner, response, input, context FROM responses ORDER BY seq");
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
    sqlite::Transaction tx(file_.db());
    sqlite::Stmt d(file_.db(), "DELETE FROM responses WHERE id = ?");
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
    if (file_.db() != nullptr) write_put(*entry, response, input, context, evicted);
}

// Under mu_, with the file open.
void ResponseStore::write_put(const StoredResponse& r, const std::string& response_json, const std::string& input_json,
                              const std::string& context_json, const std::vector<std::string>& evicted) {
    try {
        sqlite::Transaction tx(file_.db());
        if (!evicted.empty()) {
            sqlite::Stmt d(file_.db(), "DELETE FROM responses WHERE id = ?");
            for (const std::string& id : evicted) d.bind_text(1, id).run();
        }
        sqlite::Stmt s(file_.db(),
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
        file_.turn_off(std::string("a write failed (") + e.what() + ")");
    }
}

void ResponseStore::write_erase(const std::string& id) {
    try {
        sqlite::Transaction tx(file_.db());
        sqlite::Stmt d(file_.db(), "DELETE FROM responses WHERE id = ?");
        d.bind_text(1, id).run();
        tx.commit();
    } catch (const Error& e) {
        file_.turn_off(std::string("a delete failed (") + e.what() + ")");
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
    if (file_.db() != nullptr) write_erase(id);
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
