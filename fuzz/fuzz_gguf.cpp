// libFuzzer target over the GGUF parser: any input must parse or throw strata::Error, and every
// tensor the parser accepts must lie inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "gguf/gguf.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto f = strata::gguf::File::from_memory(data, size, "fuzz.gguf");
        for (const auto& t : f->tensors()) {
            if (t.data < data || t.data + t.n_bytes > data + size) std::abort();
        }
        for (const auto& [key, v] : f->metadata()) (void)v.to_display();
    } catch (const strata::Error&) {
    }
    return 0;
}
