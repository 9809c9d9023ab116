// Stored Responses API responses (`store: true`) of one `strata serve`, kept in memory and bounded
// by count and by bytes: the oldest go first when either bound is passed (docs/serve.md,
// --responses-store / --responses-store-mib). A response is visible only to the caller identity
// that made it (the key, the gateway's key name, or the peer address). Also the responses in
// flight, so that POST /v1/responses/{id}/cancel can stop one. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace strata::serve {

struct StoredResponse {
    std::string id, owner;
    nlohmann::ordered_json response;  // the response object as GET returns it
    nlohmann::ordered_json input;     // this request's input items (with ids), for input_items
    nlohmann::ordered_json context;   // the items a continuation (previous_response_id) starts from
    size_t bytes = 0;
};

class ResponseStore {
public:
    ResponseStore(int64_t max_count, int64_t max_bytes) : max_count_(max_count), max_bytes_(max_bytes) {}

    // Keeps `r` (its bytes are measured here), evicting the oldest past the bounds; a response
    // larger than the byte bound alone is not kept. Replaces one of the same id.
    void put(StoredResponse r);
    std::shared_ptr<const StoredResponse> get(const std::string& id, const std::string& owner) const;
    bool erase(const std::string& id, const std::string& owner);
    int64_t count() const;
    int64_t bytes() const;

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
    int64_t max_count_, max_bytes_;
    mutable std::mutex mu_;
    std::list<std::shared_ptr<const StoredResponse>> order_;  // oldest first
    std::unordered_map<std::string, std::list<std::shared_ptr<const StoredResponse>>::iterator> by_id_;
    int64_t bytes_ = 0;
    std::map<std::string, std::shared_ptr<InFlight>> in_flight_;
};

}  // namespace strata::serve
