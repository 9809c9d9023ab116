// The attention kernel compiled for the avx512 level (flags from the file name, see CMakeLists.txt).
#include "backend/cpu_attention_impl.h"

namespace strata::backend {

void attention_group_avx512(const AttentionGroupTask& t) { detail::attention_group(t); }

}  // namespace strata::backend
