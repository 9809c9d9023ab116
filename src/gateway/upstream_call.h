// One request from the gateway to a lane, run on its own thread so that the gateway's handler can
// answer as soon as the lane's response head arrives and then pass the body through as it comes
// (SSE streams: whole events only, so a lane that dies mid-event never leaves half an event in
// the client's stream). Cancelling closes the lane connection at once, which cancels the lane's
// work (the lane notices its client went away).
//
// Deadlines: the first body byte must come within `first_byte` of the start (a streamed answer's
// head comes at once, its first event after the prefill; a whole answer's head and body come at
// the end), and later bytes within `idle` of each other; `alive()` (the lane still answers
// /health) is asked meanwhile. A deadline that fires, or a lane that is no longer alive, cancels
// the call (expired(), error() says which).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace strata::gateway {

struct UpstreamDeadlines {
    std::chrono::milliseconds first_byte{std::chrono::seconds(1800)};
    std::chrono::milliseconds idle{std::chrono::seconds(300)};
    std::function<bool()> alive;  // null: always
};

class UpstreamCall : public std::enable_shared_from_this<UpstreamCall> {
public:
    using Headers = std::vector<std::pair<std::string, std::string>>;
    static std::shared_ptr<UpstreamCall> start(const std::string& host, int port, const std::string& path, Headers headers,
                                               std::string body, UpstreamDeadlines deadlines = {});
    ~UpstreamCall();

    enum class Head { Ready, Unreachable, Gone, Expired };
    // Waits for the response's status and headers; Unreachable: the lane refused or dropped the
    // connection before answering (nothing was produced: safe to retry elsewhere); Expired: the
    // first-byte deadline passed (the lane is alive but does not answer) or the lane stopped
    // answering /health (see lane_lost()).
    Head wait_head(const std::function<bool()>& gone);
    int status() const;
    std::string header(const std::string& name) const;  // "" when absent

    // Moves the body bytes received so far into `out` (for an SSE stream: up to the last complete
    // event); waits up to `wait` for some. Returns false once everything has been taken.
    bool take(std::string& out, std::chrono::milliseconds wait, bool whole_events);
    // Waits for the first body bytes or the end, checking `gone()`; false when the client left.
    bool wait_body(const std::function<bool()>& gone);
    // Waits for the whole body, checking `gone()`; false when the client left (then cancelled).
    bool wait_done(const std::function<bool()>& gone);
    bool broken() const;        // ended by an error (connection lost, timeout) after the head
    bool expired() const;       // ended by a deadline or a lane that stopped answering
    bool lane_lost() const;     // ended because the lane stopped answering /health
    bool got_body() const;      // some body bytes arrived
    std::string error() const;  // what went wrong
    void cancel();

private:
    UpstreamCall() = default;
    void run(std::string path, Headers headers, std::string body);
    // Fires a passed deadline (cancelling the call); called by the waiting side. `lock` holds mu_
    // and is held again on return.
    void check_deadlines(std::unique_lock<std::mutex>& lock);
    void cancel_locked(std::unique_lock<std::mutex>& lock);

    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool head_ = false, done_ = false, failed_ = false, cancelled_ = false;
    bool draining_ = false;  // a stream is being taken: the receiver waits while kMaxPending bytes are unread
    bool expired_ = false, lane_lost_ = false, got_body_ = false;
    UpstreamDeadlines deadlines_;
    std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now(), last_byte_ = started_;
    int status_ = 0;
    std::vector<std::pair<std::string, std::string>> response_headers_;
    std::string pending_, error_;
    std::shared_ptr<httplib::Client> client_;
};

}  // namespace strata::gateway
