// Term splitting for the lexical (BM25) index, the same for chunks and queries:
//   - words of letters, digits and '_' (any script but CJK) are lowercased and kept whole;
//     identifiers are also split on '_', camelCase / PascalCase and letter-digit changes
//     ("parseHTTPHeader2" -> parsehttpheader2, parse, http, header, 2);
//   - numbers are words: "4829-1735" -> 4829, 1735;
//   - Han, kana and Hangul runs give every character and every adjacent pair
//     ("長城很長" -> 長 城 很 長, 長城 城很 很長), as CJK search engines do without a lexicon;
//   - everything else separates terms.
// Terms are identified by a 64-bit hash (hash.h), so an index persists without a dictionary.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::gateway {

// Calls emit(term) for every term of text in order (a word's whole form first, then its parts).
// The view is valid only during the call.
void for_each_term(std::string_view text, const std::function<void(std::string_view)>& emit);

// The terms as strings (tests, debugging).
std::vector<std::string> split_terms(std::string_view text);

uint64_t term_hash(std::string_view term);

// A chunk's bag of words: distinct term hashes, ascending, with counts.
struct TermCount {
    uint64_t term;
    uint32_t count;
};
std::vector<TermCount> count_terms(std::string_view text);

}  // namespace strata::gateway
