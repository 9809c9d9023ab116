#include "gateway/lane.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <regex>

#include "serve/api_shapes.h"
#include "serve/served_model.h"
#include "util/error.h"

extern char** environ;

namespace strata::gateway {

using nlohmann::json;

void log_line(const std::string& line) {
    std::fprintf(stderr, "gateway: %s\n", line.c_str());
    std::fflush(stderr);
}

namespace {

// "0-3,8,10-11" -> a CPU set. Throws strata::Error.
cpu_set_t parse_cpus(const std::string& lane, const std::string& list) {
    cpu_set_t set;
    CPU_ZERO(&set);
    size_t pos = 0;
    while (pos < list.size()) {
        size_t end = list.find(',', pos);
        if (end == std::string::npos) end = list.size();
        const std::string part = list.substr(pos, end - pos);
        int a = -1, b = -1;
        char extra = 0;
        if (std::sscanf(part.c_str(), "%d-%d%c", &a, &b, &extra) == 2 ||
            (std::sscanf(part.c_str(), "%d%c", &a, &extra) == 1 && (b = a) >= 0)) {
            if (a < 0 || b < a || b >= CPU_SETSIZE) throw Error("lane '" + lane + "': bad cpus range '" + part + "'");
            for (int c = a; c <= b; ++c) CPU_SET(c, &set);
        } else {
            throw Error("lane '" + lane + "': cpus '" + list + "' must look like 0-7,16");
        }
        pos = end + 1;
    }
    return set;
}

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

httplib::Headers lane_headers(const LaneConfig& c) {
    httplib::Headers h;
    if (!c.upstream_key.empty()) h.emplace("x-api-key", c.upstream_key);
    return h;
}

}  // namespace

Lane::Lane(LaneConfig config, std::chrono::milliseconds dead_after) : config_(std::move(config)), dead_after_(dead_after) {
    if (!config_.upstream.empty()) {
        static const std::regex url(R"(http://([^/:]+|\[[^\]]+\]):(\d+)/?)");
        std::smatch m;
        if (!std::regex_match(config_.upstream, m, url))
            throw Error("lane '" + config_.name + "': upstream '" + config_.upstream + "' must be http://HOST:PORT");
        host_ = m[1].str();
        if (host_.front() == '[') host_ = host_.substr(1, host_.size() - 2);
        port_ = std::stoi(m[2].str());
    }
    if (!config_.cpus.empty()) parse_cpus(config_.name, config_.cpus);  // reject a bad list now
}

Lane::~Lane() { stop(); }

std::string Lane::host() const {
    std::lock_guard lock(mu_);
    return host_;
}

int Lane::port() const {
    std::lock_guard lock(mu_);
    return port_;
}

bool Lane::alive() const {
    const int64_t last = last_answer_ns_.load();
    return last == 0 || steady_ns() - last < std::chrono::nanoseconds(dead_after_).count();
}

std::shared_ptr<const LaneModel> Lane::model() const {
    std::lock_guard lock(mu_);
    return model_;
}

void Lane::spawn() {
    std::vector<std::string> argv = config_.command;
    argv.insert(argv.end(), {"--host", "127.0.0.1", "--port", "0"});
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    // The environment and CPU set are made before fork: only async-signal-safe calls after it.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
        if (!config_.gpu.empty() && std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) == 0) continue;
        if (std::strncmp(*e, "STRATA_API_KEY=", 15) == 0) continue;  // the clients' key is not the lane's
        env_strings.emplace_back(*e);
    }
    if (!config_.gpu.empty()) env_strings.push_back("CUDA_VISIBLE_DEVICES=" + config_.gpu);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const bool pin = !config_.cpus.empty();
    const cpu_set_t cpus = pin ? parse_cpus(config_.name, config_.cpus) : cpu_set_t{};

    int err_pipe[2];
    if (::pipe2(err_pipe, O_CLOEXEC) != 0)
        throw Error("lane '" + config_.name + "': cannot create a pipe: " + std::strerror(errno));
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw Error("lane '" + config_.name + "': cannot start: " + std::strerror(errno));
    if (pid == 0) {
        ::dup2(err_pipe[1], 2);
        // The gateway's signal mask (SIGINT/SIGTERM blocked for its signal thread), its ignored
        // SIGPIPE and its open sockets are not the lane's.
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::signal(SIGPIPE, SIG_DFL);
        ::signal(SIGXFSZ, SIG_DFL);
        ::close_range(3, ~0U, 0);
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a lane does not outlive its gateway
        if (::getppid() != parent) ::_exit(1);
        if (pin) ::sched_setaffinity(0, sizeof cpus, &cpus);
        ::execve(args[0], args.data(), envp.data());
        static const char msg[] = "cannot run the lane's command\n";
        [[maybe_unused]] const ssize_t w = ::write(2, msg, sizeof msg - 1);
        ::_exit(127);
    }
    ::close(err_pipe[1]);
    {
        std::lock_guard lock(mu_);
        port_ = 0;
        child_exited_ = false;
    }
    last_answer_ns_ = 0;  // a starting lane is not silent yet: loading a model answers nothing
    pid_ = pid;
    // Not joined here: the old lane's engine may hold the old pipe a moment longer. Joined at stop().
    stderr_readers_.emplace_back([this, fd = err_pipe[0], pid] { read_child_stderr(fd, pid); });
    log_line("lane " + config_.name + ": started pid " + std::to_string(pid) + ": " + argv[0] + " " +
             (argv.size() > 1 ? argv[1] : ""));
}

// The lane's messages go to the gateway's stderr, prefixed; "listening on http://H:P" gives its port.
void Lane::read_child_stderr(int fd, pid_t child) {
    static const std::regex listening(R"(listening on http://([^ ]+):(\d+))");
    std::string buf;
    char chunk[4096];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        buf.append(chunk, static_cast<size_t>(n));
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
            const std::string line = buf.substr(0, nl);
            buf.erase(0, nl + 1);
            std::fprintf(stderr, "lane %s: %s\n", config_.name.c_str(), line.c_str());
            std::smatch m;
            if (std::regex_search(line, m, listening) && pid_.load() == child) {  // a late line of a dead child is no port
                std::lock_guard lock(mu_);
                port_ = std::stoi(m[2].str());
                cv_.notify_all();
            }
            std::lock_guard lock(mu_);
            last_child_error_ = line;
        }
    }
    std::fflush(stderr);
    ::close(fd);
}

Lane::Probe Lane::probe() {
    const int port = this->port();
    if (port <= 0) return Probe::Silent;
    httplib::Client cli(host(), port);
    cli.set_connection_timeout(std::chrono::seconds(2));
    cli.set_read_timeout(std::chrono::seconds(3));
    auto res = cli.Get("/health", lane_headers(config_));
    if (!res) return Probe::Silent;
    return res->status == 200 ? Probe::Healthy : Probe::Answered;
}

void Lane::fetch_model() {
    httplib::Client cli(host(), port());
    cli.set_connection_timeout(std::chrono::seconds(2));
    cli.set_read_timeout(std::chrono::seconds(30));
    auto models = cli.Get("/v1/models", lane_headers(config_));
    if (models && (models->status == 401 || models->status == 403)) {
        log_line("lane " + config_.name + ": /v1/models answered " + std::to_string(models->status) +
                 ": the lane wants a key; give it as upstream_key in the lane's [[lanes]] entry (--upstream-key for --upstream)");
        return;
    }
    if (!models || models->status != 200) {
        log_line("lane " + config_.name + ": /v1/models failed; no window guard until it answers (asked again every 5 s)");
        return;
    }
    auto m = std::make_shared<LaneModel>();
    m->lane = config_.name;
    try {
        const json list = json::parse(models->body);
        const json& first = list.at("data").at(0);
        m->id = first.at("id").get<std::string>();
        m->window = first.value("context_length", int64_t{0});
    } catch (const std::exception& e) {
        log_line("lane " + config_.name + ": unexpected /v1/models answer (" + e.what() + ")");
        return;
    }
    auto info = cli.Get("/strata/v1/model-info.gguf", lane_headers(config_));
    const auto before = model();
    bool kept = false;
    if (info && info->status == 200 && info->body.size() < (size_t{512} << 20)) {
        m->info_bytes = info->body.size();
        m->info_hash = std::hash<std::string>{}(info->body);
        if (before && before->counter && before->id == m->id && before->info_bytes == m->info_bytes &&
            before->info_hash == m->info_hash) {
            // The same model after a restart: keep its tokenizer. Loading one again costs ~20 MiB
            // of short-lived allocations that the allocator keeps (issue #31's soak: a gateway
            // grew with every restart of its lane).
            m->counter = before->counter;
            kept = true;
        } else {
            try {
                // Loaded from memory: no file (a killed gateway leaves nothing behind; a file-size
                // limit or a full disk cannot cost the window guard).
                m->counter = std::make_shared<serve::ServedModel>(serve::ServedModel::Metadata{info->body}, m->id);
            } catch (const std::exception& e) {
                log_line("lane " + config_.name + ": cannot load its tokenizer (" + e.what() + "); no window guard");
            }
        }
    } else if (info && info->status == 404) {
        m->not_strata = true;  // asking again will not help
        log_line("lane " + config_.name + ": no /strata/v1/model-info.gguf (not a strata lane?); no window guard");
    } else {
        log_line("lane " + config_.name + ": model info unavailable (" +
                 (info ? "status " + std::to_string(info->status) : httplib::to_string(info.error())) +
                 "); no window guard until it answers (asked again every 5 s)");
    }
    log_line("lane " + config_.name + ": serves " + m->id + ", window " + std::to_string(m->window) +
             (kept         ? ", tokenizer kept (same model)"
              : m->counter ? ", tokenizer loaded"
                           : ""));
    std::lock_guard lock(mu_);
    model_ = std::move(m);
}

void Lane::start(std::chrono::milliseconds timeout) {
    if (supervised()) spawn();
    monitor_ = std::thread([this] { monitor_loop(); });
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock lock(mu_);
    while (!healthy_.load() && std::chrono::steady_clock::now() < deadline) {
        if (supervised() && restarts_.load() > 0) {
            // The first start must succeed: a bad command is a startup error, not something to retry.
            throw Error("lane '" + config_.name + "' exited while starting (" + last_child_error_ + ")");
        }
        cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
    if (!healthy_.load()) {
        if (supervised())
            throw Error("lane '" + config_.name + "' did not become ready in " + std::to_string(timeout.count() / 1000) + " s");
        log_line("lane " + config_.name + ": " + config_.upstream + " is not answering yet; requests wait for it");
    }
}

void Lane::monitor_loop() {
    auto backoff = std::chrono::milliseconds(250);
    bool was_healthy = false;
    auto next_model_fetch = std::chrono::steady_clock::now();
    pid_t killed = -1;  // the child killed for silence (once)
    while (!stopping_.load()) {
        if (supervised()) {
            int status = 0;
            const pid_t pid = pid_.load();
            if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
                healthy_ = false;
                pid_ = -1;
                if (stopping_.load()) break;
                std::string how = WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                      : "exited with status " + std::to_string(WEXITSTATUS(status));
                log_line("lane " + config_.name + " " + how + "; restarting in " + std::to_string(backoff.count()) + " ms");
                ++restarts_;
                cv_.notify_all();
                if (!was_healthy) {
                    std::this_thread::sleep_for(backoff);
                    backoff = std::min(backoff * 2, std::chrono::milliseconds(8000));
                } else {
                    backoff = std::chrono::milliseconds(250);
                }
                was_healthy = false;
                if (stopping_.load()) break;
                try {
                    spawn();
                } catch (const std::exception& e) {
                    log_line(e.what());
                }
                continue;
            }
        }
        const Probe answer = probe();
        const bool up = answer == Probe::Healthy;
        const auto now = std::chrono::steady_clock::now();
        if (answer != Probe::Silent) {
            last_answer_ns_ = steady_ns();
        } else if (!alive() && supervised() && pid_.load() > 0 && pid_.load() != killed) {
            // Silent for dead_after after answering: stopped or hung. Killed (a stopped process
            // too), then reaped and restarted above; its calls in flight end through alive().
            log_line("lane " + config_.name + " answered nothing for " + std::to_string(dead_after_.count() / 1000) +
                     " s (stopped or hung): killing it (pid " + std::to_string(pid_.load()) + ")");
            killed = pid_.load();
            ::kill(killed, SIGKILL);
            healthy_ = false;
            cv_.notify_all();
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            continue;
        }
        if (up && !healthy_.load()) {
            fetch_model();
            next_model_fetch = now + std::chrono::seconds(5);
            log_line("lane " + config_.name + " is ready on " + host() + ":" + std::to_string(port()));
        } else if (up && now >= next_model_fetch && (!model() || (!model()->counter && !model()->not_strata))) {
            fetch_model();  // it failed before: ask again (every 5 s) rather than run without a window guard for good
            next_model_fetch = now + std::chrono::seconds(5);
        } else if (!up && healthy_.load()) {
            log_line("lane " + config_.name + " stopped answering /health");
        }
        healthy_ = up;
        was_healthy = was_healthy || up;
        cv_.notify_all();
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(up ? 1000 : 100),
                     [&] { return stopping_.load() || check_now_.exchange(false); });
    }
}

bool Lane::wait_healthy(std::chrono::milliseconds timeout, const std::function<bool()>& gone) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock lock(mu_);
    while (!healthy_.load()) {
        if (std::chrono::steady_clock::now() >= deadline || (gone && gone())) return false;
        cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
    return true;
}

void Lane::report_failure() {
    check_now_ = true;
    cv_.notify_all();
}

void Lane::stop() {
    if (stopping_.exchange(true)) return;
    cv_.notify_all();
    if (monitor_.joinable()) monitor_.join();
    const pid_t pid = pid_.load();
    if (pid > 0) {
        ::kill(pid, SIGTERM);
        int status = 0;
        for (int i = 0; i < 100; ++i) {
            if (::waitpid(pid, &status, WNOHANG) == pid) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            if (i == 99) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &status, 0);
            }
        }
    }
    for (auto& t : stderr_readers_)
        if (t.joinable()) t.join();
}

}  // namespace strata::gateway
