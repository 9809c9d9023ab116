// qwen3next: placeholder until the Gated DeltaNet layers land (see qwen35moe.cpp).
#include "model/architecture.h"
#include "util/error.h"

namespace strata::model {

std::unique_ptr<Architecture> make_qwen3next() { throw Error("architecture 'qwen3next' is not implemented yet"); }
std::unique_ptr<Architecture> make_qwen35moe() { throw Error("architecture 'qwen35moe' is not implemented yet"); }

}  // namespace strata::model
