// The attention kernel compiled for the avx512 level (flags from the file name, see CMakeLists.txt).
#include "backend/cpu_attention_impl.h"

namespace strata::backend {

void attention_tile_avx512(const AttentionTileTask& t) { detail::attention_tile(t); }

}  // namespace strata::backend
