// The in-place share's online tuner: which share of a decode layer's missing experts the GPU
// should read in place over the bus (the rest run on the host executor at the same time), found
// from the step times the store measures, not from a model of the machine.
//
// Why: the cost model (ExpertStore::model_share) starts from the bus rate measured by the copy
// engine and the host executor's time per expert, each measured alone. Running together they
// share the host's RAM bandwidth, so the in-place reads run slower than either measurement says
// and the model's share lands 5-10 % off the best one (docs/BENCHMARKS.md, expert store sitting
// 4). The step time itself sees every such effect.
//
// Contract:
// - restart(share) starts a climb from `share` (the model's share, or the last tuned one).
// - add(key, seconds): one decode forward of `key` pairs a layer took `seconds` at share(). Only
//   forwards of the climb's key count (a batch of 16 is not compared with a batch of 1); when
//   another key has come `key_patience` times in a row, the climb starts again on that key. A
//   sample more than twice the median so far of its window is dropped (an idle gap before the
//   next request), and so is the first forward after a change of share (its step also carries
//   the upload of every layer's new table).
// - The climb: the median of `window` forwards at the centre, then at centre -/+ step (down
//   first); a probe better by more than `gain` becomes the centre and the climb goes on that way;
//   when neither side is better, the step halves down to min_step, then the share is settled.
//   After `retune_after` settled forwards it climbs again from there with min_step.
// - share() is always in [0, 1], in steps of min_step from the start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::experts {

class ShareTuner {
public:
    struct Options {
        int window = 12;         // forwards measured at each share
        double step = 0.1;       // the first probe's distance
        double min_step = 0.05;  // the finest step
        double gain = 0.01;      // a probe must be this much faster (relative) to win
        int64_t key_patience = 64;
        int64_t retune_after = 4096;
    };
    ShareTuner() : ShareTuner(Options{}) {}
    explicit ShareTuner(Options o) : o_(o) {}

    // A climb from `share` with the first step (step <= 0: Options::step).
    void restart(double share, double step = 0);
    // A climb from the share now in force at the finest step (a retune).
    void refine() { restart(share(), o_.min_step); }
    void add(int64_t key, double seconds);
    double share() const { return probing_ ? probe_ : centre_; }
    bool settled() const { return settled_; }
    int64_t climbs() const { return climbs_; }
    // The last decision, for the log: "" when nothing was decided since the last call.
    std::string take_note();

private:
    void climb(double share, double step);
    void begin_window();
    void window_done(double median);
    bool start_probe(int dir);  // false: the probe would leave [0, 1]

    Options o_;
    double centre_ = 1.0, centre_t_ = 0.0, step_ = 0.1, probe_ = 1.0;
    bool probing_ = false, settled_ = false, skip_next_ = true;
    int dir_ = -1;              // the probe's direction
    bool tried_other_ = false;  // both sides probed at this step
    int64_t key_ = -1, other_key_run_ = 0, settled_for_ = 0, climbs_ = 0;
    std::vector<double> samples_;
    std::string note_;
};

}  // namespace strata::experts
