// API keys of the gateway and what each may do: keys are held as SHA-256 digests and a presented
// key is compared against every one in constant time; each key has a concurrency limit with a
// bounded FIFO queue in front of it and a request rate (a token bucket refilled per second).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gateway/gateway_config.h"

namespace strata::gateway {

class KeyLimiter {
public:
    KeyLimiter(const std::vector<KeyConfig>& keys, const LimitsConfig& limits);

    bool auth_required() const { return !keys_.empty(); }
    // The name of the key whose digest matches `presented` (checked against all, constant time
    // per key); nullopt when none does. Without keys: "" (anonymous).
    std::optional<std::string> identify(const std::string& presented) const;

    class Slot {
    public:
        Slot() = default;
        Slot(KeyLimiter* l, std::string key) : l_(l), key_(std::move(key)) {}
        Slot(Slot&& o) noexcept : l_(o.l_), key_(std::move(o.key_)) { o.l_ = nullptr; }
        Slot& operator=(Slot&& o) noexcept {
            std::swap(l_, o.l_);
            std::swap(key_, o.key_);
            return *this;
        }
        ~Slot() {
            if (l_) l_->release(key_);
        }
        explicit operator bool() const { return l_ != nullptr; }

    private:
        KeyLimiter* l_ = nullptr;
        std::string key_;
    };

    enum class Outcome { Admitted, RateLimited, QueueFull, Gone };
    struct Result {
        Outcome outcome = Outcome::Admitted;
        int retry_after_s = 0;
    };
    // Takes a rate token, then waits for one of the key's concurrency slots in FIFO order,
    // reporting the queue position as it changes and checking `gone()` while waiting.
    Result acquire(const std::string& key, const std::function<bool()>& gone, const std::function<void(int)>& on_position,
                   Slot& slot);

    struct KeyState {
        std::string name;
        int running = 0, queued = 0, limit = 0;
    };
    std::vector<KeyState> snapshot() const;

private:
    struct PerKey {
        int limit = 1, queue_limit = 0;
        double rate_per_s = 0, bucket = 0, capacity = 0;  // rate 0: unlimited
        std::chrono::steady_clock::time_point refilled = std::chrono::steady_clock::now();
        int running = 0;
        std::deque<uint64_t> waiting;  // tickets, FIFO
    };
    PerKey& state_of(const std::string& key);  // with mu_ held
    void release(const std::string& key);

    struct Key {
        std::string name, digest;
        int max_concurrency;
        double rpm;
    };
    std::vector<Key> keys_;
    LimitsConfig limits_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, PerKey> state_;
    uint64_t next_ticket_ = 1;
};

// A [[keys]] entry naming `name` with the digest of `secret` (the secret itself is not in it).
std::string hashed_key_entry(const std::string& name, const std::string& secret);

}  // namespace strata::gateway
