// The Unicode character classes the pre-tokenizers test: letter (\p{L}), number (\p{N}),
// mark (\p{M}) and white space (\s, the White_Space property, which is what Oniguruma's \s
// means for UTF-8 text and so what Hugging Face tokenizers use).
//
// The table is built once per process from ICU (u_charType, u_isUWhiteSpace) into a two-stage
// lookup: stage1[cp >> 8] picks a 256-entry block of stage2, identical blocks shared (~40 KiB).
#pragma once

#include <cstdint>
#include <vector>

namespace strata::tokenizer {

enum CharClass : uint8_t {
    kLetter = 1,
    kNumber = 2,
    kMark = 4,
    kSpace = 8,
};

class CharClassTable {
public:
    // The process-wide table (built on first use, thread-safe).
    static const CharClassTable& get();

    uint8_t of(uint32_t cp) const {
        if (cp < 0x80) return ascii_[cp];
        if (cp > 0x10FFFF) return 0;
        return blocks_[(static_cast<uint32_t>(stage1_[cp >> 8]) << 8) | (cp & 0xFF)];
    }

private:
    CharClassTable();
    uint8_t ascii_[128];
    std::vector<uint16_t> stage1_;  // 0x1100 entries: block index per 256 code points
    std::vector<uint8_t> blocks_;   // unique blocks of 256 classes
};

}  // namespace strata::tokenizer
