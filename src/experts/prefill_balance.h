// The prefill split's correction from measured layer times.
//
// A prefill layer's missing experts are split between uploads to the GPU and the host executor
// by a cost model (ExpertPlacement::upload_s, host_fixed_s, host_token_s) whose upload time comes
// from the bus rate measured alone. In a prefill the copies and the host executor draw on the
// same host RAM, so the modelled balance is off and one side waits for the other. After each
// such layer the backend reports how long its GPU side (the resident experts, the uploads and
// their compute) and the host executor took from the same start; the host's modelled cost is
// scaled so that the two finish together.
//
// Contract:
// - scale() multiplies the host executor's modelled cost in the split; it starts at 1.
// - report(gpu_s, host_s): one layer's times (host_s 0: the host executor had no share). A GPU
//   side slower than the host moves the scale down (more experts to the host), a faster one up,
//   by the square root of the ratio (clamped to 4x either way), so one noisy layer moves it
//   little and a steady ratio is followed within a few layers. The scale stays in
//   [kMinScale, kMaxScale]. A report without a positive GPU time changes nothing.
#pragma once

namespace strata::experts {

class PrefillBalance {
public:
    static constexpr double kMinScale = 1.0 / 32, kMaxScale = 32.0;
    double scale() const { return scale_; }
    double report(double gpu_s, double host_s);
    void reset() { scale_ = 1.0; }

private:
    double scale_ = 1.0;
};

}  // namespace strata::experts
