#include "backend/weight.h"

#include "gguf/gguf.h"

namespace strata::backend {

const std::string& Weight::name() const {
    static const std::string absent = "(absent tensor)";
    return info != nullptr ? info->name : absent;
}

}  // namespace strata::backend
