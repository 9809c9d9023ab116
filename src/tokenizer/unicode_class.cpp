#include "tokenizer/unicode_class.h"

#include <unicode/uchar.h>

#include <cstring>
#include <map>
#include <string>

namespace strata::tokenizer {

namespace {

uint8_t classify(UChar32 cp) {
    uint8_t c = 0;
    switch (u_charType(cp)) {
        case U_UPPERCASE_LETTER:
        case U_LOWERCASE_LETTER:
        case U_TITLECASE_LETTER:
        case U_MODIFIER_LETTER:
        case U_OTHER_LETTER: c |= kLetter; break;
        case U_NON_SPACING_MARK:
        case U_ENCLOSING_MARK:
        case U_COMBINING_SPACING_MARK: c |= kMark; break;
        case U_DECIMAL_DIGIT_NUMBER:
        case U_LETTER_NUMBER:
        case U_OTHER_NUMBER: c |= kNumber; break;
        default: break;
    }
    if (u_isUWhiteSpace(cp)) c |= kSpace;
    return c;
}

}  // namespace

const CharClassTable& CharClassTable::get() {
    static const CharClassTable table;
    return table;
}

CharClassTable::CharClassTable() : stage1_(0x110000 >> 8) {
    for (uint32_t cp = 0; cp < 0x80; ++cp) ascii_[cp] = classify(static_cast<UChar32>(cp));
    std::map<std::string, uint16_t> seen;  // block contents -> index, to share identical blocks
    std::string block(256, '\0');
    for (uint32_t hi = 0; hi < stage1_.size(); ++hi) {
        for (uint32_t lo = 0; lo < 256; ++lo) block[lo] = static_cast<char>(classify(static_cast<UChar32>((hi << 8) | lo)));
        auto [it, inserted] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
        if (inserted) blocks_.insert(blocks_.end(), block.begin(), block.end());
        stage1_[hi] = it->second;
    }
}

}  // namespace strata::tokenizer
