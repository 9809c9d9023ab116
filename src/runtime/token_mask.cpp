#include "runtime/token_mask.h"

namespace strata::runtime {

void TokenMask::reset(int32_t n_vocab, bool allow_all) {
    const size_t n = n_vocab > 0 ? static_cast<size_t>(n_vocab) : 0;
    words.assign((n + 63) / 64, allow_all ? ~uint64_t{0} : uint64_t{0});
    // Bits past the vocabulary stay clear, so counting set bits counts tokens.
    if (allow_all && (n & 63)) words.back() = (uint64_t{1} << (n & 63)) - 1;
}

}  // namespace strata::runtime
