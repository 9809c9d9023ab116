// The serving side of the engine protocol (docs/protocol.md): starts `strata engine` as a child
// process, writes commands to its stdin, routes the events on its stdout to the request they
// name, and restarts the engine when it dies.
//
// When the engine dies (crash, OOM kill, kill -9), every request that has already received
// output gets a final {"event":"error","id":...,"message":...,"engine_lost":true} (its stream
// cannot be resumed honestly; a caller that has sent nothing on may run it again); requests still
// waiting for their first event are resubmitted to the restarted engine, so nothing is lost, and
// requests cancelled meanwhile end with their done event here. Restarts back off (0.25 s doubling
// to 8 s while the engine keeps dying before it is ready). healthy() is true only while an engine
// is ready.
//
// Writes never block a caller or a lock: commands go into a bounded outgoing queue that a writer
// thread drains into the engine's stdin (non-blocking; the pipe holds 64 KiB). An engine that does
// not read (stopped, hung) fills it: submit() then throws EngineBusy at once, stats() waits at
// most its timeout (none once the engine has been silent kStaleAfter), cancels still queue (a few
// bytes each), pings wait until the queue has drained. The queue belongs to one engine process:
// it is dropped with it, and what the replacement needs is sent again.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace strata::serve {

// submit() found the engine's outgoing queue full (the engine is not reading its input).
class EngineBusy : public Error {
public:
    using Error::Error;
};

class EngineClient {
public:
    // Receives the events of one request, on the client's reader thread; the request is over
    // after a "done" or "error" event. Must not block for long.
    using Handler = std::function<void(const nlohmann::json& event)>;

    // argv: the engine command line, e.g. {"/path/strata", "engine", "-m", "model.gguf"}.
    explicit EngineClient(std::vector<std::string> argv);
    ~EngineClient();  // stops the engine (shutdown, then SIGKILL after a grace period)
    EngineClient(const EngineClient&) = delete;
    EngineClient& operator=(const EngineClient&) = delete;

    // Starts the engine and waits for its ready event; throws strata::Error with the engine's
    // last stderr lines if it cannot start (bad model file, ...).
    void start(std::chrono::milliseconds timeout = std::chrono::minutes(10));

    // Sends a submit command: `command` holds the submit fields (op and id are set here; key order
    // is kept, as a response_format schema's property order matters). Throws strata::Error when
    // the id is already in flight, EngineBusy when the outgoing queue is full; never blocks.
    void submit(const std::string& id, nlohmann::ordered_json command, Handler handler);
    // Cancels a request in flight (its done event still arrives). No-op for unknown ids.
    void cancel(const std::string& id);
    // Asks for a stats event and waits for it (empty object when the engine is down or not reading).
    nlohmann::json stats(std::chrono::milliseconds timeout = std::chrono::seconds(5));

    // Ready, and heard from within the last kStaleAfter (a stopped or hung engine turns
    // unhealthy before the heartbeat replaces it).
    bool healthy() const;
    // The heartbeat: a ping every kPingEvery; no line from the engine for kDeadAfter (a stopped,
    // swapped-out or deadlocked process), or a step running longer than step_timeout (a GPU
    // hang), and the engine is killed: requests with output end with an error event, the others
    // run again on its replacement.
    static constexpr std::chrono::milliseconds kPingEvery{1000}, kStaleAfter{4000}, kDeadAfter{6000};
    void set_step_timeout(std::chrono::milliseconds t) { step_timeout_ms_ = t.count(); }
    // Bytes of commands the outgoing queue holds at most before submits are refused (a single
    // command larger than that is taken when the queue is empty).
    static constexpr size_t kMaxQueuedBytes = size_t{4} << 20;
    void set_max_queued_bytes(size_t n) { max_queued_bytes_ = n; }
    size_t queued_bytes() const;
    int restarts() const { return restarts_.load(); }
    int64_t in_flight() const;
    nlohmann::json ready_info() const;  // the engine's ready event
    pid_t engine_pid() const { return pid_.load(); }

private:
    struct Pending {
        nlohmann::ordered_json command;
        Handler handler;
        bool got_output = false;
        bool cancelled = false;  // a cancel was asked for (a restart finishes it instead of resubmitting)
    };
    void spawn();  // with mu_ held
    void reader_loop();
    void handle_line(const std::string& line);
    void on_engine_exit();
    void watchdog_loop();
    void kill_engine(const std::string& why);
    void writer_loop();
    // Queues a command line for the engine and writes what the pipe takes now (mu_ held; never
    // blocks). `bounded`: refused (false) when the queue would pass max_queued_bytes_.
    bool enqueue_line(std::string line, bool bounded);
    void flush_locked();  // non-blocking writes of the queue's head (mu_ held)
    void drop_queue();    // the engine is gone (mu_ held)

    std::vector<std::string> argv_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, Pending> pending_;
    nlohmann::json ready_info_;
    nlohmann::json last_stats_;
    uint64_t stats_seq_ = 0, stats_seen_ = 0;
    std::atomic<bool> ready_{false}, stopping_{false};
    std::atomic<int> restarts_{0};
    std::atomic<pid_t> pid_{-1};
    int to_engine_ = -1, from_engine_ = -1;
    std::thread reader_, watchdog_, writer_;
    std::deque<std::string> out_;  // command lines not yet written to the engine, each ending in '\n'
    size_t out_head_written_ = 0;  // bytes of out_.front() already written
    size_t out_bytes_ = 0;         // bytes in out_ not yet written
    size_t max_queued_bytes_ = kMaxQueuedBytes;
    std::condition_variable out_cv_;         // the writer waits on it for work
    std::atomic<int64_t> last_heard_ns_{0};  // steady clock: the last line from the engine
    std::atomic<int64_t> step_timeout_ms_{120000};
    std::mutex kill_mu_;
    std::string kill_reason_;  // why the heartbeat killed the engine (for the requests it fails)
    std::chrono::milliseconds backoff_{250};
};

}  // namespace strata::serve
