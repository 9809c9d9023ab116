#include "tokenizer/unicode_class.h"

#include <unicode/uchar.h>

#include <cstring>
#include <map>
#include <string>

namespace strata::tokenizer {

namespace {

uint8_t category_class(UCharCategory category) {
    switch (category) {
        case U_UPPERCASE_LETTER:
        case U_LOWERCASE_LETTER:
        case U_TITLECASE_LETTER:
        case U_MODIFIER_LETTER:
        case U_OTHER_LETTER: return kLetter;
        case U_NON_SPACING_MARK:
        case U_ENCLOSING_MARK:
        case U_COMBINING_SPACING_MARK: return kMark;
        case U_DECIMAL_DIGIT_NUMBER:
        case U_LETTER_NUMBER:
        case U_OTHER_NUMBER: return kNumber;
        default: return 0;
    }
}

// Classes of all 0x110000 code points: general categories come from ICU in ranges, White_Space
// one code point at a time.
std::vector<uint8_t> all_classes() {
    std::vector<uint8_t> classes(0x110000, 0);
    u_enumCharTypes(
        [](const void* context, UChar32 start, UChar32 limit, UCharCategory category) -> UBool {
            auto* out = static_cast<std::vector<uint8_t>*>(const_cast<void*>(context));
            const uint8_t c = category_class(category);
            for (UChar32 cp = start; cp < limit; ++cp) (*out)[static_cast<size_t>(cp)] = c;
            return true;
        },
        &classes);
    for (UChar32 cp = 0; cp < 0x110000; ++cp)
        if (u_isUWhiteSpace(cp)) classes[static_cast<size_t>(cp)] |= kSpace;
    return classes;
}

}  // namespace

const CharClassTable& CharClassTable::get() {
    static const CharClassTable table;
    return table;
}

CharClassTable::CharClassTable() : stage1_(0x110000 >> 8) {
    const std::vector<uint8_t> classes = all_classes();
    for (uint32_t cp = 0; cp < 0x80; ++cp) ascii_[cp] = classes[cp];
    std::map<std::string, uint16_t> seen;  // block contents -> index, to share identical blocks
    for (uint32_t hi = 0; hi < stage1_.size(); ++hi) {
        const std::string block(reinterpret_cast<const char*>(classes.data()) + (hi << 8), 256);
        auto [it, inserted] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
        if (inserted) blocks_.insert(blocks_.end(), block.begin(), block.end());
        stage1_[hi] = it->second;
    }
}

}  // namespace strata::tokenizer
