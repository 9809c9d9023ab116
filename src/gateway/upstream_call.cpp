#include "gateway/upstream_call.h"

#include <httplib.h>

#include <algorithm>
#include <thread>

namespace strata::gateway {

namespace {
constexpr size_t kMaxPending = size_t{8} << 20;  // a client slower than the lane holds at most this much here

// Bytes up to the end of the last complete SSE event ("\n\n" or "\r\n\r\n"); 0 when none.
size_t event_end(const std::string& s) {
    const size_t lf = s.rfind("\n\n"), crlf = s.rfind("\r\n\r\n");
    size_t end = 0;
    if (lf != std::string::npos) end = lf + 2;
    if (crlf != std::string::npos) end = std::max(end, crlf + 4);
    return end;
}
}  // namespace

std::shared_ptr<UpstreamCall> UpstreamCall::start(const std::string& host, int port, const std::string& path, Headers headers,
                                                  std::string body, UpstreamDeadlines deadlines) {
    std::shared_ptr<UpstreamCall> call(new UpstreamCall());
    call->deadlines_ = std::move(deadlines);
    call->client_ = std::make_shared<httplib::Client>(host, port);
    std::thread([call, path, headers = std::move(headers), body = std::move(body)]() mutable {
        call->run(path, std::move(headers), std::move(body));
    }).detach();
    return call;
}

UpstreamCall::~UpstreamCall() = default;

void UpstreamCall::run(std::string path, Headers headers, std::string body) {
    httplib::Client& cli = *client_;
    cli.set_connection_timeout(std::chrono::seconds(5));
    // The deadlines are kept by the waiting side (check_deadlines); this is only a backstop.
    cli.set_read_timeout(std::max(deadlines_.first_byte, deadlines_.idle) + std::chrono::seconds(30));
    cli.set_write_timeout(std::chrono::seconds(60));
    cli.set_keep_alive(false);
    cli.set_tcp_nodelay(true);
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    for (auto& [k, v] : headers) req.headers.emplace(k, v);
    req.body = std::move(body);
    req.response_handler = [this](const httplib::Response& res) {
        std::lock_guard lock(mu_);
        status_ = res.status;
        for (const auto& [k, v] : res.headers) response_headers_.emplace_back(k, v);
        head_ = true;
        cv_.notify_all();
        return !cancelled_;
    };
    req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
        std::unique_lock lock(mu_);
        // Back-pressure on a slow client, but never while no whole event is buffered (one event
        // larger than the bound must still get through).
        cv_.wait(lock, [&] { return cancelled_ || !draining_ || pending_.size() < kMaxPending || event_end(pending_) == 0; });
        if (cancelled_) return false;
        pending_.append(data, n);
        got_body_ = true;
        last_byte_ = std::chrono::steady_clock::now();
        cv_.notify_all();
        return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool ok = cli.send(req, res, err);
    std::lock_guard lock(mu_);
    done_ = true;
    if (!ok) {
        failed_ = true;
        if (error_.empty()) error_ = httplib::to_string(err);  // a deadline's own words stay
    }
    cv_.notify_all();
}

void UpstreamCall::check_deadlines(std::unique_lock<std::mutex>& lock) {
    if (done_ || cancelled_) return;
    const auto now = std::chrono::steady_clock::now();
    auto seconds = [](std::chrono::milliseconds d) { return std::to_string((d.count() + 999) / 1000); };
    if (!got_body_ && now - started_ > deadlines_.first_byte) {
        error_ = "the lane sent no answer in " + seconds(deadlines_.first_byte) + " s (limits.upstream_first_byte_s)";
    } else if (got_body_ && now - last_byte_ > deadlines_.idle) {
        error_ = "the lane sent nothing for " + seconds(deadlines_.idle) + " s mid-answer (limits.upstream_idle_s)";
    } else if (deadlines_.alive && !deadlines_.alive()) {
        error_ = "the lane stopped answering /health (stopped or hung)";
        lane_lost_ = true;
    } else {
        return;
    }
    expired_ = true;
    cancel_locked(lock);
}

UpstreamCall::Head UpstreamCall::wait_head(const std::function<bool()>& gone) {
    std::unique_lock lock(mu_);
    for (;;) {
        if (head_) return Head::Ready;
        if (expired_) return Head::Expired;
        if (done_) return Head::Unreachable;
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        if (!head_ && !done_ && gone && gone()) {
            cancel_locked(lock);
            return Head::Gone;
        }
        if (!head_) check_deadlines(lock);
    }
}

int UpstreamCall::status() const {
    std::lock_guard lock(mu_);
    return status_;
}

std::string UpstreamCall::header(const std::string& name) const {
    std::lock_guard lock(mu_);
    for (const auto& [k, v] : response_headers_)
        if (k.size() == name.size() &&
            std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
            return v;
    return {};
}

bool UpstreamCall::take(std::string& out, std::chrono::milliseconds wait, bool whole_events) {
    std::unique_lock lock(mu_);
    draining_ = true;
    auto available = [&]() -> size_t { return !whole_events || done_ ? pending_.size() : event_end(pending_); };
    if (available() == 0 && !done_) cv_.wait_for(lock, wait, [&] { return available() > 0 || done_; });
    if (available() == 0) check_deadlines(lock);
    const size_t n = available();
    if (done_ && failed_ && whole_events) {
        // A stream cut off mid-event: the partial event is dropped, the caller ends the stream.
        out.append(pending_, 0, event_end(pending_));
        pending_.clear();
        cv_.notify_all();
        return false;
    }
    out.append(pending_, 0, n);
    pending_.erase(0, n);
    cv_.notify_all();
    return !(done_ && pending_.empty());
}

bool UpstreamCall::wait_body(const std::function<bool()>& gone) {
    std::unique_lock lock(mu_);
    while (!done_ && !got_body_) {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        if (!done_ && !got_body_ && gone && gone()) {
            cancel_locked(lock);
            return false;
        }
        check_deadlines(lock);
    }
    return true;
}

bool UpstreamCall::wait_done(const std::function<bool()>& gone) {
    std::unique_lock lock(mu_);
    while (!done_) {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        if (!done_ && gone && gone()) {
            cancel_locked(lock);
            return false;
        }
        check_deadlines(lock);
    }
    return true;
}

bool UpstreamCall::broken() const {
    std::lock_guard lock(mu_);
    return failed_;
}

bool UpstreamCall::expired() const {
    std::lock_guard lock(mu_);
    return expired_;
}

bool UpstreamCall::lane_lost() const {
    std::lock_guard lock(mu_);
    return lane_lost_;
}

bool UpstreamCall::got_body() const {
    std::lock_guard lock(mu_);
    return got_body_;
}

std::string UpstreamCall::error() const {
    std::lock_guard lock(mu_);
    return error_;
}

void UpstreamCall::cancel() {
    std::unique_lock lock(mu_);
    cancel_locked(lock);
}

void UpstreamCall::cancel_locked(std::unique_lock<std::mutex>& lock) {
    if (cancelled_ || done_) {
        cancelled_ = true;
        return;
    }
    cancelled_ = true;
    std::shared_ptr<httplib::Client> client = client_;
    cv_.notify_all();
    lock.unlock();
    client->stop();  // closes the socket: the lane sees its client leave and cancels the work
    lock.lock();
}

}  // namespace strata::gateway
