#include "experts/prefill_balance.h"

#include <algorithm>
#include <cmath>

namespace strata::experts {

double PrefillBalance::report(double gpu_s, double host_s) {
    if (!(gpu_s > 0)) return scale_;
    // host_s 0: the host had nothing while the GPU worked, as if it were 4x faster.
    const double ratio = host_s > 0 ? std::clamp(gpu_s / host_s, 0.25, 4.0) : 4.0;
    scale_ = std::clamp(scale_ / std::sqrt(ratio), kMinScale, kMaxScale);
    return scale_;
}

}  // namespace strata::experts
