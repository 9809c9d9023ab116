// Progress of long work (loading, conversion, quantisation) on stderr: a live line on a
// terminal, otherwise one line per 10% so logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace strata {

class Progress {
public:
    explicit Progress(std::string what);
    // done/total in bytes; item: what is being worked on now.
    void update(uint64_t done, uint64_t total, const std::string& item = "");
    void finish(const std::string& summary);

private:
    std::string what_;
    bool tty_;
    int last_decile_ = -1;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace strata
