#include "tokenizer/normalize.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <cstdint>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace strata::tokenizer {

namespace {

const icu::Normalizer2& nfc_instance() {
    static const icu::Normalizer2* instance = [] {
        UErrorCode status = U_ZERO_ERROR;
        const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
        if (U_FAILURE(status) || n == nullptr) throw Error(std::string("ICU NFC normalizer unavailable: ") + u_errorName(status));
        return n;
    }();
    return *instance;
}

// Every code point below U+0300 is NFC and never combines with what follows it unless that is
// at least U+0300, whose UTF-8 lead byte is 0xCC or above. Continuation bytes are all below 0xCC.
bool below_u0300(std::string_view text) {
    uint8_t any = 0;
    for (const char c : text) any |= static_cast<uint8_t>(static_cast<uint8_t>(c) >= 0xCC);
    return any == 0;
}

bool is_nfc(const icu::Normalizer2& n, std::string_view well_formed) {
    UErrorCode status = U_ZERO_ERROR;
    const bool yes = n.isNormalizedUTF8(icu::StringPiece(well_formed.data(), static_cast<int32_t>(well_formed.size())), status);
    return U_SUCCESS(status) && yes;
}

void append_normalized(const icu::Normalizer2& n, std::string_view well_formed, std::string& out) {
    if (well_formed.empty()) return;
    if (is_nfc(n, well_formed)) {
        out.append(well_formed);
        return;
    }
    UErrorCode status = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(&out);
    n.normalizeUTF8(0, icu::StringPiece(well_formed.data(), static_cast<int32_t>(well_formed.size())), sink, nullptr, status);
    if (U_FAILURE(status)) throw Error(std::string("NFC normalization failed: ") + u_errorName(status));
}

}  // namespace

std::string_view nfc(std::string_view text, std::string& storage) {
    if (below_u0300(text)) return text;
    const icu::Normalizer2& n = nfc_instance();
    if (text.size() > INT32_MAX / 2) throw Error("text too long to normalize (" + std::to_string(text.size()) + " bytes)");
    const bool well_formed = utf8::is_valid(text);
    if (well_formed && is_nfc(n, text)) return text;
    storage.clear();
    storage.reserve(text.size() + text.size() / 8);
    if (well_formed) {
        append_normalized(n, text, storage);
        return storage;
    }
    const auto* base = reinterpret_cast<const uint8_t*>(text.data());
    const auto* end = base + text.size();
    const uint8_t* p = base;
    const uint8_t* run = base;  // start of the current well-formed run
    while (p < end) {
        if (*p < 0x80) {
            ++p;
            continue;
        }
        const utf8::Step s = utf8::step(p, end);
        if (s.status == utf8::Status::Ok) {
            p += s.len;
            continue;
        }
        append_normalized(n, text.substr(static_cast<size_t>(run - base), static_cast<size_t>(p - run)), storage);
        storage.append(reinterpret_cast<const char*>(p), s.len);
        p += s.len;
        run = p;
    }
    append_normalized(n, text.substr(static_cast<size_t>(run - base), static_cast<size_t>(p - run)), storage);
    return storage;
}

}  // namespace strata::tokenizer
