#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace strata {

Progress::Progress(std::string what)
    : what_(std::move(what)), tty_(isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void Progress::update(uint64_t done, uint64_t total, const std::string& item) {
    const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - start_).count();
    if (tty_) {
        if (now - last_draw_ < std::chrono::milliseconds(100) && done < total) return;
        last_draw_ = now;
        std::fprintf(stderr, "\r%s: %5.1f%% (%.2f / %.2f GiB, %.0f s) %-48.48s", what_.c_str(), 100.0 * frac,
                     static_cast<double>(done) / (1 << 30), static_cast<double>(total) / (1 << 30), secs, item.c_str());
        std::fflush(stderr);
        return;
    }
    const int decile = static_cast<int>(frac * 10.0);
    if (decile == last_decile_) return;
    last_decile_ = decile;
    std::fprintf(stderr, "%s: %3d%% (%.2f / %.2f GiB, %.0f s) %s\n", what_.c_str(), decile * 10,
                 static_cast<double>(done) / (1 << 30), static_cast<double>(total) / (1 << 30), secs, item.c_str());
}

void Progress::finish(const std::string& summary) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (tty_) std::fprintf(stderr, "\r%-120s\r", "");
    std::fprintf(stderr, "%s: %s (%.1f s)\n", what_.c_str(), summary.c_str(), secs);
}

}  // namespace strata
