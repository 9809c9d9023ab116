// The in-place share's online tuner (share_tuner.h).
#include "experts/share_tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace strata::experts {

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string pct(double share) { return std::to_string(static_cast<int>(std::lround(100.0 * share))) + " %"; }

std::string ms(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f ms", 1e3 * s);
    return b;
}

}  // namespace

void ShareTuner::restart(double share, double step) {
    ++climbs_;
    climb(share, step);
}

void ShareTuner::climb(double share, double step) {
    const double q = o_.min_step > 0 ? o_.min_step : 0.05;
    centre_ = std::clamp(std::round(share / q) * q, 0.0, 1.0);
    centre_t_ = 0.0;
    step_ = std::max(q, step > 0 ? step : o_.step);
    probing_ = settled_ = tried_other_ = false;
    dir_ = -1;
    key_ = -1;
    other_key_run_ = settled_for_ = 0;
    begin_window();
}

void ShareTuner::begin_window() {
    samples_.clear();
    skip_next_ = true;
}

void ShareTuner::add(int64_t key, double seconds) {
    if (climbs_ == 0) return;  // never started
    if (settled_) {
        if (++settled_for_ >= o_.retune_after) {
            note_ = "retuning from " + pct(centre_);
            refine();
        }
        return;
    }
    if (key_ < 0) key_ = key;
    if (key != key_) {
        if (++other_key_run_ >= o_.key_patience) {
            // The load changed shape: measure the centre again under the new key.
            climb(centre_, step_);
            key_ = key;
        }
        return;
    }
    other_key_run_ = 0;
    if (skip_next_) {
        skip_next_ = false;
        return;
    }
    if (samples_.size() >= 3 && seconds > 2.0 * median(samples_)) return;
    samples_.push_back(seconds);
    if (static_cast<int>(samples_.size()) >= std::max(1, o_.window)) window_done(median(samples_));
}

bool ShareTuner::start_probe(int dir) {
    const double q = o_.min_step > 0 ? o_.min_step : 0.05;
    const double p = std::round((centre_ + dir * step_) / q) * q;
    if (p < -1e-9 || p > 1.0 + 1e-9 || std::abs(p - centre_) < 1e-9) return false;
    probe_ = std::clamp(p, 0.0, 1.0);
    dir_ = dir;
    probing_ = true;
    begin_window();
    return true;
}

void ShareTuner::window_done(double t) {
    if (!probing_) {
        centre_t_ = t;
        tried_other_ = false;
        if (start_probe(dir_) || (tried_other_ = true, start_probe(-dir_))) return;
    } else if (t < centre_t_ * (1.0 - o_.gain)) {
        note_ = pct(probe_) + " in place: " + ms(t) + " a step, better than " + pct(centre_) + "'s " + ms(centre_t_);
        centre_ = probe_;
        centre_t_ = t;
        tried_other_ = true;  // the side it came from is the old, slower centre
        if (start_probe(dir_)) return;
    } else if (!tried_other_) {
        tried_other_ = true;
        if (start_probe(-dir_)) return;
    }
    // Neither side of the centre is better at this step: finer, or settled.
    probing_ = false;
    if (step_ > o_.min_step + 1e-9) {
        step_ = std::max(o_.min_step, step_ / 2);
        tried_other_ = false;
        if (start_probe(-1) || (tried_other_ = true, start_probe(+1))) return;
        probing_ = false;
    }
    settled_ = true;
    settled_for_ = 0;
    note_ = "settled at " + pct(centre_) + " in place (" + ms(centre_t_) + " a step)";
}

std::string ShareTuner::take_note() {
    std::string n;
    n.swap(note_);
    return n;
}

}  // namespace strata::experts
