#include "serve/admission.h"

#include <algorithm>
#include <chrono>

namespace strata::serve {

Admission::Outcome Admission::acquire(const std::string& client, const std::function<bool()>& gone, Ticket& ticket) {
    std::unique_lock<std::mutex> lock(mu_);
    if (running_ < slots_ && waiting_ == 0) {
        ++running_;
        ticket = Ticket(this);
        return Outcome::Admitted;
    }
    if (waiting_ >= max_waiting_) return Outcome::QueueFull;
    auto w = std::make_shared<Waiter>();
    auto& q = queues_[client];
    if (q.empty()) turn_.push_back(client);
    q.push_back(w);
    ++waiting_;
    grant_next();
    while (!w->granted) {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        if (w->granted) break;
        lock.unlock();
        const bool left = gone && gone();
        lock.lock();
        if (left && !w->granted) {
            auto& cq = queues_[client];
            cq.erase(std::find(cq.begin(), cq.end(), w));
            if (cq.empty()) {
                queues_.erase(client);
                turn_.remove(client);
            }
            --waiting_;
            return Outcome::Gone;
        }
    }
    ticket = Ticket(this);  // running_ was counted when granted
    return Outcome::Admitted;
}

void Admission::grant_next() {
    while (running_ < slots_ && !turn_.empty()) {
        const std::string client = turn_.front();
        turn_.pop_front();
        auto& q = queues_[client];
        q.front()->granted = true;
        q.pop_front();
        --waiting_;
        ++running_;
        if (q.empty()) queues_.erase(client);
        else turn_.push_back(client);  // its next waiter goes to the back of the rotation
    }
    cv_.notify_all();
}

void Admission::release() {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    grant_next();
}

int Admission::running() const {
    std::lock_guard<std::mutex> lock(mu_);
    return running_;
}

int Admission::waiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_;
}

}  // namespace strata::serve
