// One lane as the gateway sees it: a `strata serve` reached over loopback HTTP, either already
// running (an upstream URL) or started and supervised by the gateway (a command line, pinned to
// CPUs and a GPU). A monitor thread checks /health, restarts a supervised lane that died (with
// back-off), and after every (re)start fetches what the lane serves: its model id, its window
// (context_length of /v1/models) and its tokenizer and chat template (/strata/v1/model-info.gguf),
// so the gateway counts tokens exactly as the lane will.
//
// Liveness, not just exit: a lane that answers /health at all (200, or 503 while its engine is
// replaced) is alive; one that has answered nothing for `dead_after` (stopped, deadlocked,
// swapping) is not: a supervised one is then killed and restarted as a crash is, and calls in
// flight to it (upstream lanes too) are ended through alive().
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gateway/gateway_config.h"

namespace strata::serve {
class ServedModel;
}

namespace strata::gateway {

// "gateway: LINE" on stderr: the log of the gateway and its lanes.
void log_line(const std::string& line);

// What a lane serves; replaced as a whole when the lane restarts.
struct LaneModel {
    std::string lane;                                   // the lane's name
    std::string id;                                     // the lane's own model id
    int64_t window = 0;                                 // positions per sequence
    std::shared_ptr<const serve::ServedModel> counter;  // tokenizer + template; null: no window guard
    bool not_strata = false;                            // the lane has no model-info endpoint (404): not asked again
    size_t info_bytes = 0;                              // the model-info document `counter` was loaded from:
    size_t info_hash = 0;                               //   its size and std::hash, to reuse it after a restart
};

class Lane {
public:
    explicit Lane(LaneConfig config, std::chrono::milliseconds dead_after = std::chrono::seconds(6));
    ~Lane();
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    // Starts the lane (supervised) or probes it (upstream), and the monitor. Waits up to
    // `timeout` for the lane to be ready; throws strata::Error if a supervised lane exits before.
    void start(std::chrono::milliseconds timeout);
    void stop();

    const LaneConfig& config() const { return config_; }
    const std::string& name() const { return config_.name; }
    bool healthy() const { return healthy_.load(); }
    // False once a lane that answered /health has been silent for dead_after.
    bool alive() const;
    bool supervised() const { return !config_.command.empty(); }
    std::string host() const;
    int port() const;
    int restarts() const { return restarts_.load(); }
    pid_t pid() const { return pid_.load(); }
    std::shared_ptr<const LaneModel> model() const;

    // Waits until the lane is healthy, checking `gone()` (the client left); false on timeout.
    bool wait_healthy(std::chrono::milliseconds timeout, const std::function<bool()>& gone);
    // A request failed to reach the lane: check it now rather than at the next poll.
    void report_failure();

    std::atomic<int> in_flight{0};

private:
    void spawn();  // supervised: fork/exec the command, its stderr read by a thread
    void monitor_loop();
    enum class Probe { Healthy, Answered, Silent };  // Answered: a status other than 200
    Probe probe();                                   // GET /health
    void fetch_model();                              // /v1/models + model-info
    void read_child_stderr(int fd, pid_t child);

    LaneConfig config_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::string host_ = "127.0.0.1";
    int port_ = 0;
    std::shared_ptr<const LaneModel> model_;
    std::atomic<bool> healthy_{false}, stopping_{false}, check_now_{false};
    std::atomic<int> restarts_{0};
    std::chrono::milliseconds dead_after_;
    std::atomic<int64_t> last_answer_ns_{0};  // steady clock; 0: not answered since (re)start
    std::atomic<pid_t> pid_{-1};
    std::thread monitor_;
    std::vector<std::thread> stderr_readers_;  // one per child started
    std::string last_child_error_;
    bool child_exited_ = false;
};

}  // namespace strata::gateway
