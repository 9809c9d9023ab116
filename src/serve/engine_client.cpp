#include "serve/engine_client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "util/error.h"

namespace strata::serve {

using nlohmann::json;

namespace {

constexpr auto kMaxBackoff = std::chrono::milliseconds(8000);

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string exit_description(int status) {
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    return "stopped";
}

// The done event of a request that ends without (more) engine work.
json cancelled_event(const std::string& id) {
    return json{{"event", "done"},
                {"id", id},
                {"finish_reason", "cancelled"},
                {"usage", {{"prompt_tokens", 0}, {"cached_tokens", 0}, {"completion_tokens", 0}}}};
}

}  // namespace

EngineClient::EngineClient(std::vector<std::string> argv) : argv_(std::move(argv)) {
    if (argv_.empty()) throw Error("engine command line is empty");
    ::signal(SIGPIPE, SIG_IGN);  // a dead engine must not kill the server through a write
}

EngineClient::~EngineClient() {
    stopping_ = true;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (to_engine_ >= 0) {
            enqueue_line(R"({"op":"shutdown"})", false);  // written now unless the engine is not reading
            ::close(to_engine_);                          // either way its stdin ends: it exits
            to_engine_ = -1;
            drop_queue();
        }
        out_cv_.notify_all();
    }
    // Give the engine a moment to exit cleanly, then make sure it is gone.
    const pid_t pid = pid_.load();
    for (int i = 0; i < 100 && pid > 0 && ::kill(pid, 0) == 0 && pid_.load() == pid; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (pid_.load() > 0) ::kill(pid_.load(), SIGKILL);
    if (reader_.joinable()) reader_.join();
    if (watchdog_.joinable()) watchdog_.join();
    if (writer_.joinable()) writer_.join();
}

bool EngineClient::healthy() const {
    return ready_.load() && steady_ns() - last_heard_ns_.load() < std::chrono::nanoseconds(kStaleAfter).count();
}

void EngineClient::kill_engine(const std::string& why) {
    const pid_t pid = pid_.load();
    if (pid <= 0) return;
    {
        std::lock_guard<std::mutex> lock(kill_mu_);
        kill_reason_ = why;
    }
    std::fprintf(stderr, "strata serve: %s: killing it (pid %d)\n", why.c_str(), static_cast<int>(pid));
    ::kill(pid, SIGKILL);  // also ends a stopped process; the reader then sees the pipe close
}

// Pings (none while commands wait unread: the engine has something to read, and what it
// answers, or its silence, says the same).
void EngineClient::watchdog_loop() {
    int64_t last_ping = 0;
    while (!stopping_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (!ready_ || stopping_) continue;
        const int64_t now = steady_ns();
        if (now - last_ping >= std::chrono::nanoseconds(kPingEvery).count()) {
            std::lock_guard<std::mutex> lock(mu_);
            if (ready_ && out_.empty()) enqueue_line(R"({"op":"ping"})", false);
            last_ping = now;
        }
        const int64_t silent_ms = (now - last_heard_ns_.load()) / 1000000;
        if (silent_ms >= kDeadAfter.count()) {
            kill_engine("the engine answered nothing for " + std::to_string(silent_ms / 1000) + " s (stopped or hung)");
            last_heard_ns_ = now;  // once per silence: the reader restarts it
        }
    }
}

void EngineClient::spawn() {
    int in_pipe[2], out_pipe[2];
    if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0)
        throw Error(std::string("cannot create pipes for the engine: ") + std::strerror(errno));
    std::vector<char*> args;
    for (auto& a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw Error(std::string("cannot start the engine: ") + std::strerror(errno));
    if (pid == 0) {
        // Child: stdin/stdout are the pipes (dup2 clears close-on-exec), stderr is shared.
        ::dup2(in_pipe[0], 0);
        ::dup2(out_pipe[1], 1);
        // Nothing else of the server's passes on: client sockets the HTTP library opened without
        // close-on-exec would otherwise stay open in the engine (a closed connection would not
        // reach its client while the engine lives), and its listening socket with them.
        ::syscall(SYS_close_range, 3u, ~0u, 0u);
        ::signal(SIGXFSZ, SIG_DFL);  // serve ignores it (its responses database), the engine need not
        ::execv(args[0], args.data());
        // Only async-signal-safe calls between fork and exec (the server has threads).
        static const char msg[] = "strata serve: cannot run the engine binary\n";
        [[maybe_unused]] const ssize_t w = ::write(2, msg, sizeof msg - 1);
        ::_exit(127);
    }
    ::close(in_pipe[0]);
    ::close(out_pipe[1]);
    // Writes to the engine never block: what the pipe does not take waits in out_ (writer_loop).
    ::fcntl(in_pipe[1], F_SETFL, ::fcntl(in_pipe[1], F_GETFL) | O_NONBLOCK);
    to_engine_ = in_pipe[1];
    from_engine_ = out_pipe[0];
    pid_ = pid;
}

void EngineClient::start(std::chrono::milliseconds timeout) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        spawn();
    }
    reader_ = std::thread([this] { reader_loop(); });
    watchdog_ = std::thread([this] { watchdog_loop(); });
    writer_ = std::thread([this] { writer_loop(); });
    std::unique_lock<std::mutex> lock(mu_);
    // The first engine must come up: a bad model is a startup error, not something to retry.
    if (!cv_.wait_for(lock, timeout, [&] { return ready_.load() || restarts_.load() > 0; }) || !ready_.load()) {
        stopping_ = true;
        throw Error("the engine did not start (" + argv_[0] + " engine ...): see its messages above");
    }
}

bool EngineClient::enqueue_line(std::string line, bool bounded) {
    if (to_engine_ < 0) return false;
    if (bounded && out_bytes_ > 0 && out_bytes_ + line.size() + 1 > max_queued_bytes_) return false;
    line.push_back('\n');
    out_bytes_ += line.size();
    out_.push_back(std::move(line));
    flush_locked();
    if (!out_.empty()) out_cv_.notify_all();
    return true;
}

void EngineClient::flush_locked() {
    while (!out_.empty() && to_engine_ >= 0) {
        const std::string& head = out_.front();
        const ssize_t n = ::write(to_engine_, head.data() + out_head_written_, head.size() - out_head_written_);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // the pipe is full: the writer waits for room
            drop_queue();  // EPIPE: the engine is gone; the reader sees EOF and restarts it
            return;
        }
        out_head_written_ += static_cast<size_t>(n);
        out_bytes_ -= static_cast<size_t>(n);
        if (out_head_written_ == head.size()) {
            out_.pop_front();
            out_head_written_ = 0;
        }
    }
}

void EngineClient::drop_queue() {
    out_.clear();
    out_head_written_ = out_bytes_ = 0;
}

// Waits for room in the pipe without the lock (poll), then writes under it without blocking.
// The fd can be closed and reused meanwhile: the poll then only wakes early, and the write goes
// to whatever to_engine_ is by then.
void EngineClient::writer_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
        if (out_.empty() || to_engine_ < 0) {
            out_cv_.wait_for(lock, std::chrono::milliseconds(500));
            continue;
        }
        flush_locked();
        if (out_.empty()) continue;
        pollfd p{to_engine_, POLLOUT, 0};
        lock.unlock();
        ::poll(&p, 1, 100);
        lock.lock();
    }
}

size_t EngineClient::queued_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return out_bytes_;
}

void EngineClient::submit(const std::string& id, nlohmann::ordered_json command, Handler handler) {
    command["op"] = "submit";
    command["id"] = id;
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.count(id) != 0) throw Error("request id '" + id + "' is already in flight");
    std::string line = command.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    // Not ready: sent when the (restarted) engine says ready.
    if (ready_ && !enqueue_line(std::move(line), true))
        throw EngineBusy("the engine is not reading its input (" + std::to_string(out_bytes_ >> 10) +
                         " KiB of commands wait unread); retry later");
    Pending& p = pending_[id];
    p.command = std::move(command);
    p.handler = std::move(handler);
}

void EngineClient::cancel(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = pending_.find(id);
    if (it == pending_.end()) return;
    if (it->second.cancelled) return;
    it->second.cancelled = true;
    if (ready_) {
        enqueue_line(json{{"op", "cancel"}, {"id", id}}.dump(), false);
    } else {
        // Never reached an engine: finish it here.
        Handler h = std::move(it->second.handler);
        pending_.erase(it);
        h(cancelled_event(id));
    }
}

json EngineClient::stats(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    // An engine that is silent, or not reading, would not answer within the timeout either.
    if (!ready_ || !healthy() || !enqueue_line(R"({"op":"stats"})", true)) return json::object();
    const uint64_t want = ++stats_seq_;
    if (!cv_.wait_for(lock, timeout, [&] { return stats_seen_ >= want || !ready_; }) || stats_seen_ < want) return json::object();
    return last_stats_;
}

int64_t EngineClient::in_flight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(pending_.size());
}

json EngineClient::ready_info() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ready_info_;
}

void EngineClient::reader_loop() {
    std::string buf;
    char chunk[65536];
    while (true) {
        int fd;
        {
            std::lock_guard<std::mutex> lock(mu_);
            fd = from_engine_;
        }
        const ssize_t n = fd < 0 ? 0 : ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n > 0) {
            buf.append(chunk, static_cast<size_t>(n));
            size_t start = 0, nl;
            while ((nl = buf.find('\n', start)) != std::string::npos) {
                handle_line(buf.substr(start, nl - start));
                start = nl + 1;
            }
            buf.erase(0, start);
            continue;
        }
        // EOF or error: the engine is gone.
        buf.clear();
        on_engine_exit();
        if (stopping_) return;
        std::this_thread::sleep_for(backoff_);
        backoff_ = std::min(backoff_ * 2, kMaxBackoff);
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        try {
            spawn();
            ++restarts_;
        } catch (const Error& e) {
            std::fprintf(stderr, "strata serve: %s\n", e.what());
        }
    }
}

void EngineClient::handle_line(const std::string& line) {
    last_heard_ns_ = steady_ns();
    json ev;
    try {
        ev = json::parse(line);
    } catch (const json::exception&) {
        std::fprintf(stderr, "strata serve: engine wrote a line that is not JSON: %.200s\n", line.c_str());
        return;
    }
    const std::string kind = ev.value("event", "");
    if (kind == "ready") {
        std::lock_guard<std::mutex> lock(mu_);
        ready_info_ = ev;
        ready_ = true;
        backoff_ = std::chrono::milliseconds(250);
        // Requests that never reached an engine (or waited in one that died) go now.
        for (auto& [id, p] : pending_)
            enqueue_line(p.command.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace), false);
        cv_.notify_all();
        return;
    }
    if (kind == "stats") {
        std::lock_guard<std::mutex> lock(mu_);
        last_stats_ = ev;
        ++stats_seen_;
        cv_.notify_all();
        return;
    }
    if (kind == "bye") return;
    if (kind == "pong") {
        const int64_t step_ms = ev.value("step_ms", int64_t{0});
        if (step_ms > step_timeout_ms_.load())
            kill_engine("the engine's step has run for " + std::to_string(step_ms / 1000) + " s (hung)");
        return;
    }
    const std::string id = ev.value("id", "");
    Handler h;
    bool last = kind == "done" || kind == "error";
    {
        std::lock_guard<std::mutex> lock(mu_);
        const auto it = pending_.find(id);
        if (it == pending_.end()) {
            if (kind == "error") std::fprintf(stderr, "strata serve: engine error: %s\n", ev.value("message", "").c_str());
            return;
        }
        it->second.got_output = true;
        h = last ? std::move(it->second.handler) : it->second.handler;
        if (last) pending_.erase(it);
    }
    h(ev);
}

void EngineClient::on_engine_exit() {
    std::vector<std::pair<std::string, Handler>> failed, cancelled;
    std::string why;
    {
        std::lock_guard<std::mutex> lock(mu_);
        const bool was_ready = ready_.exchange(false);
        drop_queue();
        if (to_engine_ >= 0) ::close(to_engine_);
        if (from_engine_ >= 0) ::close(from_engine_);
        to_engine_ = from_engine_ = -1;
        int status = 0;
        const pid_t pid = pid_.exchange(-1);
        if (pid > 0) ::waitpid(pid, &status, 0);
        why = "the engine " + exit_description(status);
        {
            std::lock_guard<std::mutex> k(kill_mu_);
            if (!kill_reason_.empty()) why = std::exchange(kill_reason_, std::string());
        }
        if (!stopping_)
            std::fprintf(stderr, "strata serve: %s%s; restarting it\n", why.c_str(), was_ready ? "" : " before it was ready");
        // Streams already under way cannot be resumed: they end with an error. Cancelled ones end
        // as cancelled (the engine that had the cancel is gone). The rest wait.
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->second.cancelled) {
                cancelled.emplace_back(it->first, std::move(it->second.handler));
                it = pending_.erase(it);
            } else if (it->second.got_output || stopping_) {
                failed.emplace_back(it->first, std::move(it->second.handler));
                it = pending_.erase(it);
            } else {
                ++it;
            }
        }
        cv_.notify_all();
    }
    for (auto& [id, h] : cancelled) h(cancelled_event(id));
    for (auto& [id, h] : failed)
        h(json{{"event", "error"}, {"id", id}, {"message", why + " while answering this request"}, {"engine_lost", true}});
}

}  // namespace strata::serve
