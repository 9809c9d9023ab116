// Writing a ModelConfig as GGUF metadata: the inverse of the architectures' load_config, used by
// the model maker. Keys and their presence per architecture follow the ecosystem's converter.
#pragma once

#include "model/config.h"

namespace strata::gguf {
class Writer;
}

namespace strata::model {

void write_config(const ModelConfig& cfg, gguf::Writer& w);

}  // namespace strata::model
