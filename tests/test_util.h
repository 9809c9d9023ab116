// Helpers shared by tests: where the shared fixtures are, temp files, running the CLI.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace strata::test {

// ../shared beside the checkout, or $STRATA_SHARED_DIR.
inline std::filesystem::path shared_dir() {
    if (const char* env = std::getenv("STRATA_SHARED_DIR")) return env;
    return std::filesystem::path(STRATA_SOURCE_DIR).parent_path() / "shared";
}

inline std::filesystem::path fixture(const std::string& rel) { return shared_dir() / "fixtures" / rel; }

// Iteration counts of the heaviest randomized tests: n, or n / $STRATA_TEST_DIVISOR (at least
// `floor`). The sanitizer run (`make sanitize`, 10-20x slower code) sets the divisor so CI stays
// short; the normal run always does the full count. Every check still runs, on fewer samples.
inline int64_t scaled(int64_t n, int64_t floor = 1) {
    static const int64_t div = [] {
        const char* e = std::getenv("STRATA_TEST_DIVISOR");
        const long v = e != nullptr ? std::atol(e) : 1;
        return v > 1 ? static_cast<int64_t>(v) : int64_t{1};
    }();
    return std::max(floor, n / div);
}

// Skips the current test when a fixture is missing (the project builds and tests without shared/).
#define STRATA_REQUIRE_FIXTURE(path)                                                       \
    do {                                                                                   \
        if (!std::filesystem::exists(path)) GTEST_SKIP() << "fixture missing: " << (path); \
    } while (0)

// A fresh directory under the system temp dir, removed by the destructor.
class TempDir {
public:
    TempDir() {
        std::random_device rd;
        path_ = std::filesystem::temp_directory_path() / ("strata-test-" + std::to_string(rd()) + std::to_string(rd()));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

private:
    std::filesystem::path path_;
};

struct CommandResult {
    int exit_code = -1;
    std::string out;  // stdout
    std::string err;  // stderr
};

// Runs `strata ARGS` (the built binary) through the shell; captures stdout and stderr.
CommandResult run_strata(const std::string& args, const std::string& stdin_text = "");

// Relative L2 error of a against the reference b: |a - b| / |b|.
inline double rel_l2(const float* a, const float* b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / den);
}

// Random floats, normal with occasional outliers (never zeros-only data).
inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = nd(rng) * ((rng() % 97 == 0) ? 8.0f : 1.0f);
    return v;
}

// A component's log lines, collected (its `log` option: lines.sink()).
struct LogLines {
    std::vector<std::string> lines;
    std::function<void(const std::string&)> sink() {
        return [this](const std::string& l) { lines.push_back(l); };
    }
};

// Runs `body` in a child process (as `uid` when >= 0: a test as root checking what another user
// meets); its exit status: 0 when every check held, 90 when the uid could not be taken, 100 + the
// signal when it died of one.
inline int run_in_child(int uid, const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        if (uid >= 0 && (::setgid(uid) != 0 || ::setuid(uid) != 0)) ::_exit(90);
        ::_exit(body());
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return 100 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

}  // namespace strata::test
