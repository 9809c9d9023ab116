// Helpers shared by the long-context tests (one definition, so the area's unity build, which
// compiles test files four to a unit, never sees two).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "../../bench/gateway_needles.h"

namespace strata::gateway::test_helpers {

// A stand-in for a tokenizer that is not additive over joins (rounding per call, newlines), so
// the assembler cannot get away with summing chunk counts.
inline int64_t rough_count(std::string_view s) {
    int64_t lines = 0;
    for (char c : s) lines += c == '\n';
    return (static_cast<int64_t>(s.size()) + 3) / 4 + lines / 2;
}

// `sentences` seeded prose sentences, space-separated.
inline std::string paragraph(bench::needles::Gen& g, int sentences) {
    std::string s;
    for (int i = 0; i < sentences; ++i) s += (i ? " " : "") + bench::needles::prose_sentence(g);
    return s;
}

}  // namespace strata::gateway::test_helpers
