// Wall time summed per named phase: where a CPU forward's time goes (`bench_model --profile`).
//
//   util::PhaseTimes times;                       // owned by the caller
//   backend.set_phase_times(&times);              // null (the default) turns timing off
//   { util::PhaseScope s(times_, "moe.gate_up"); ... }   // one branch when off
//   for (auto& [name, seconds, calls] : times.sorted()) ...
//
// Phases are timed on the thread that issues them (the forward's), so a phase that runs on the
// pool counts its whole dispatch, waits included; phases may nest (an op and its parts), so the
// report says which are parts. Names must be string literals (kept by pointer). One thread adds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace strata::util {

class PhaseTimes {
public:
    struct Entry {
        const char* name;
        double seconds;
        int64_t calls;
    };

    void add(const char* name, double seconds) {
        for (Entry& e : entries_) {
            if (e.name == name || std::strcmp(e.name, name) == 0) {
                e.seconds += seconds;
                ++e.calls;
                return;
            }
        }
        entries_.push_back({name, seconds, 1});
    }
    void clear() { entries_.clear(); }
    // Longest first.
    std::vector<Entry> sorted() const {
        std::vector<Entry> out = entries_;
        std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
        return out;
    }

private:
    std::vector<Entry> entries_;
};

class PhaseScope {
public:
    PhaseScope(PhaseTimes* times, const char* name) : times_(times), name_(name) {
        if (times_ != nullptr) t0_ = std::chrono::steady_clock::now();
    }
    ~PhaseScope() {
        if (times_ != nullptr) times_->add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
    }
    PhaseScope(const PhaseScope&) = delete;
    PhaseScope& operator=(const PhaseScope&) = delete;

private:
    PhaseTimes* times_;
    const char* name_;
    std::chrono::steady_clock::time_point t0_{};
};

}  // namespace strata::util
