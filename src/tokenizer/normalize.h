// Unicode normalization form C, which the Qwen tokenizers apply to text (tokenizer.json
// "normalizer": {"type": "NFC"}) before pre-tokenization. GGUF files do not record the
// normalizer; the pre-tokenizers that come with it (pretokenize.h) say whether it applies.
#pragma once

#include <string>
#include <string_view>

namespace strata::tokenizer {

// NFC of text: returns text itself when it is already NFC (the common case, no copy), otherwise
// a view of `storage`, which receives the normalized text. Ill-formed UTF-8 bytes are kept as
// they are and the well-formed runs between them are normalized separately.
std::string_view nfc(std::string_view text, std::string& storage);

}  // namespace strata::tokenizer
