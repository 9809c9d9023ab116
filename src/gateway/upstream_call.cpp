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
                                                  std::string body) {
    std::shared_ptr<UpstreamCall> call(new UpstreamCall());
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
    cli.set_read_timeout(std::chrono::hours(1));  // a long prefill sends nothing for a while
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
        error_ = httplib::to_string(err);
    }
    cv_.notify_all();
}

UpstreamCall::Head UpstreamCall::wait_head(const std::function<bool()>& gone) {
    std::unique_lock lock(mu_);
    for (;;) {
        if (head_) return Head::Ready;
        if (done_) return Head::Unreachable;
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        if (!head_ && !done_ && gone && gone()) {
            lock.unlock();
            cancel();
            return Head::Gone;
        }
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

bool UpstreamCall::wait_done(const std::function<bool()>& gone) {
    std::unique_lock lock(mu_);
    while (!done_) {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        if (!done_ && gone && gone()) {
            lock.unlock();
            cancel();
            return false;
        }
    }
    return true;
}

bool UpstreamCall::broken() const {
    std::lock_guard lock(mu_);
    return failed_;
}

std::string UpstreamCall::error() const {
    std::lock_guard lock(mu_);
    return error_;
}

void UpstreamCall::cancel() {
    std::shared_ptr<httplib::Client> client;
    {
        std::lock_guard lock(mu_);
        if (cancelled_ || done_) {
            cancelled_ = true;
            return;
        }
        cancelled_ = true;
        client = client_;
        cv_.notify_all();
    }
    client->stop();  // closes the socket: the lane sees its client leave and cancels the work
}

}  // namespace strata::gateway
