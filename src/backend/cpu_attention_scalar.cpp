// The attention kernel compiled for the scalar level (flags from the file name, see CMakeLists.txt).
#include "backend/cpu_attention_impl.h"

namespace strata::backend {

void attention_group_scalar(const AttentionGroupTask& t) { detail::attention_group(t); }

}  // namespace strata::backend
