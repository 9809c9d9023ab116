// What a request used, as the engine counts it (its done event, docs/protocol.md) and as both HTTP
// APIs report it (strata serve adds the reasoning tokens its output parser saw, and sums choices).
#pragma once

#include <cstdint>

namespace strata::runtime {

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;      // prompt tokens whose KV (and recurrent state) came from the prefix cache
    int64_t completion_tokens = 0;  // a final eos/stop token included
    int64_t reasoning_tokens = 0;   // completion tokens inside a thinking block (strata serve counts them; the engine reports 0)
};

}  // namespace strata::runtime
