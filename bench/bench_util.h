// Shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <vector>

namespace strata::bench {

// The middle value (the upper of the two middle ones for an even count); 0 for none.
inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace strata::bench
