#include "serve/responses_store.h"

namespace strata::serve {

void ResponseStore::put(StoredResponse r) {
    r.bytes = r.response.dump().size() + r.input.dump().size() + r.context.dump().size() + r.id.size() + r.owner.size();
    if (max_count_ <= 0 || static_cast<int64_t>(r.bytes) > max_bytes_) return;
    auto entry = std::make_shared<const StoredResponse>(std::move(r));
    std::lock_guard lock(mu_);
    if (auto it = by_id_.find(entry->id); it != by_id_.end()) {
        bytes_ -= static_cast<int64_t>((*it->second)->bytes);
        order_.erase(it->second);
        by_id_.erase(it);
    }
    while (!order_.empty() &&
           (static_cast<int64_t>(order_.size()) >= max_count_ || bytes_ + static_cast<int64_t>(entry->bytes) > max_bytes_)) {
        bytes_ -= static_cast<int64_t>(order_.front()->bytes);
        by_id_.erase(order_.front()->id);
        order_.pop_front();
    }
    bytes_ += static_cast<int64_t>(entry->bytes);
    order_.push_back(entry);
    by_id_[entry->id] = std::prev(order_.end());
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
