// Admission of requests to the engine: at most `slots` requests run at once (the engine's
// --max-running); the rest wait in a bounded queue. Waiters are served round-robin by client (an
// API key's hash or the peer address), so one client's burst cannot starve another; within a
// client, first come first served. Only a full queue refuses (the caller answers 429 / 529 with
// Retry-After). A slot is held from admission until the request's generation has ended in the
// engine (a stream whose tail is still being written to a slow client gives it back: see
// SharedTicket), not until its answer is written out.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace strata::serve {

class Admission {
public:
    Admission(int slots, int max_waiting) : slots_(slots), max_waiting_(max_waiting) {}

    // A held slot; released when destroyed.
    class Ticket {
    public:
        Ticket() = default;
        explicit Ticket(Admission* a) : a_(a) {}
        Ticket(Ticket&& o) noexcept : a_(o.a_) { o.a_ = nullptr; }
        Ticket& operator=(Ticket&& o) noexcept {
            std::swap(a_, o.a_);
            return *this;
        }
        ~Ticket() {
            if (a_) a_->release();
        }
        explicit operator bool() const { return a_ != nullptr; }

    private:
        Admission* a_ = nullptr;
    };

    // A ticket that whichever of two threads comes first releases: a stream's slot goes when its
    // generation ends in the engine (on the engine client's reader thread), or when the stream
    // ends, or with the request.
    class SharedTicket {
    public:
        explicit SharedTicket(Ticket t) : t_(std::move(t)) {}
        void release() {
            std::lock_guard<std::mutex> lock(mu_);
            t_ = Ticket();
        }
        bool held() const {
            std::lock_guard<std::mutex> lock(mu_);
            return static_cast<bool>(t_);
        }

    private:
        mutable std::mutex mu_;
        Ticket t_;
    };

    enum class Outcome { Admitted, QueueFull, Gone };
    // Waits for a slot, checking `gone()` (the client left) every poll interval.
    Outcome acquire(const std::string& client, const std::function<bool()>& gone, Ticket& ticket);

    int running() const;
    int waiting() const;
    int slots() const { return slots_; }

private:
    struct Waiter {
        bool granted = false;
    };
    void release();
    void grant_next();  // with mu_ held

    const int slots_, max_waiting_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    int running_ = 0, waiting_ = 0;
    // Waiters per client, and the order in which clients take turns.
    std::map<std::string, std::deque<std::shared_ptr<Waiter>>> queues_;
    std::list<std::string> turn_;
};

}  // namespace strata::serve
