#include "gateway/key_limiter.h"

#include <algorithm>
#include <cmath>

#include "serve/api_shapes.h"
#include "util/error.h"

namespace strata::gateway {

namespace {

std::string unhex(const std::string& h) {
    std::string out;
    for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
    return out;
}

}  // namespace

KeyLimiter::KeyLimiter(const std::vector<KeyConfig>& keys, const LimitsConfig& limits) : limits_(limits) {
    for (const auto& k : keys) keys_.push_back({k.name, unhex(k.sha256_hex), k.max_concurrency, k.requests_per_minute});
}

std::optional<std::string> KeyLimiter::identify(const std::string& presented) const {
    if (keys_.empty()) return std::string();
    if (presented.empty() || presented.size() > 4096) return std::nullopt;
    const std::string digest = serve::sha256_digest(presented);
    // Every key is compared, match or not, so the time taken says nothing about which matched.
    const Key* found = nullptr;
    for (const auto& k : keys_)
        if (serve::digest_equal(k.digest, digest)) found = &k;
    if (!found) return std::nullopt;
    return found->name;
}

KeyLimiter::PerKey& KeyLimiter::state_of(const std::string& key) {
    auto [it, fresh] = state_.try_emplace(key);
    if (fresh) {
        PerKey& s = it->second;
        s.limit = limits_.max_concurrency_per_key;
        double rpm = limits_.requests_per_minute;
        for (const auto& k : keys_)
            if (k.name == key) {
                if (k.max_concurrency > 0) s.limit = k.max_concurrency;
                if (k.rpm >= 0) rpm = k.rpm;
            }
        s.queue_limit = limits_.queue_per_key;
        s.rate_per_s = rpm / 60.0;
        s.capacity = std::max(1.0, rpm);  // a minute's worth may come at once, then one every 60/rpm s
        s.bucket = s.capacity;
    }
    return it->second;
}

KeyLimiter::Result KeyLimiter::acquire(const std::string& key, const std::function<bool()>& gone,
                                       const std::function<void(int)>& on_position, Slot& slot) {
    std::unique_lock lock(mu_);
    PerKey& s = state_of(key);
    if (s.rate_per_s > 0) {
        const auto now = std::chrono::steady_clock::now();
        s.bucket = std::min(s.capacity, s.bucket + s.rate_per_s * std::chrono::duration<double>(now - s.refilled).count());
        s.refilled = now;
        if (s.bucket < 1.0)
            return {Outcome::RateLimited, std::max(1, static_cast<int>(std::ceil((1.0 - s.bucket) / s.rate_per_s)))};
        s.bucket -= 1.0;
    }
    if (s.running < s.limit && s.waiting.empty()) {
        ++s.running;
        slot = Slot(this, key);
        return {};
    }
    if (static_cast<int>(s.waiting.size()) >= s.queue_limit) return {Outcome::QueueFull, 1};
    const uint64_t ticket = next_ticket_++;
    s.waiting.push_back(ticket);
    int last_position = -1;
    for (;;) {
        const auto it = std::find(s.waiting.begin(), s.waiting.end(), ticket);
        const int position = static_cast<int>(it - s.waiting.begin());
        if (position == 0 && s.running < s.limit) {
            s.waiting.pop_front();
            ++s.running;
            cv_.notify_all();  // the next waiter's position changed
            slot = Slot(this, key);
            if (on_position) on_position(-1);
            return {};
        }
        if (position != last_position && on_position) {
            on_position(position + 1);
            last_position = position;
        }
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        if (gone && gone()) {
            s.waiting.erase(std::find(s.waiting.begin(), s.waiting.end(), ticket));
            cv_.notify_all();
            return {Outcome::Gone, 0};
        }
    }
}

void KeyLimiter::release(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = state_.find(key);
    if (it != state_.end() && it->second.running > 0) --it->second.running;
    // An idle identity whose bucket would be full again is forgotten (without keys every client
    // address is an identity: the map must not grow with them). Forgetting it loses nothing.
    if (it != state_.end()) {
        PerKey& s = it->second;
        const double refill = s.rate_per_s * std::chrono::duration<double>(std::chrono::steady_clock::now() - s.refilled).count();
        if (s.running == 0 && s.waiting.empty() && (s.rate_per_s <= 0 || s.bucket + refill >= s.capacity)) state_.erase(it);
    }
    cv_.notify_all();
}

std::vector<KeyLimiter::KeyState> KeyLimiter::snapshot() const {
    std::lock_guard lock(mu_);
    std::vector<KeyState> out;
    for (const auto& [name, s] : state_) out.push_back({name, s.running, static_cast<int>(s.waiting.size()), s.limit});
    return out;
}

std::string hashed_key_entry(const std::string& name, const std::string& secret) {
    if (secret.empty()) throw Error("empty key");
    return "[[keys]]\nname = \"" + name + "\"\nsha256 = \"" + serve::hex_of(serve::sha256_digest(secret)) + "\"\n";
}

}  // namespace strata::gateway
