// A JSON schema compiled for constrained decoding (docs/constrained_decoding.md).
//
// The compiled form is a graph of nodes. A node is "a JSON value matching this (sub)schema" and
// is a union of alternatives; an alternative has one JSON type and that type's constraints
// (an object with its properties, an array with its items, a string with length bounds, a
// number with bounds, or a set of literal values written out as compact JSON text). anyOf,
// type arrays, nullable and $ref all become unions; recursion ($ref to an enclosing schema) is
// a cycle in the graph, bounded at match time by the nesting limit.
//
// Every alternative left after compiling can be completed within the nesting limit
// (min_depth), so a matcher that only takes alternatives that fit never reaches a dead end.
//
// Immutable once built; one grammar serves any number of sequences on any threads.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace strata::runtime {

struct JsonGrammarOptions {
    int max_depth = 32;          // nesting of objects and arrays, the top-level container counting 1
    int max_whitespace_run = 2;  // whitespace bytes allowed in one gap between JSON tokens (0: compact JSON)
};

class JsonGrammar {
public:
    // response_format json_object: any JSON object (any keys, any values, keys unique).
    static std::shared_ptr<const JsonGrammar> any_json_object(const JsonGrammarOptions& options = {});
    // A JSON schema. nlohmann::json keeps object keys sorted, so properties are emitted in
    // alphabetical order; from_ordered_schema / from_schema_text keep the order written.
    // Throws strata::Error naming the place, e.g. "schema at /properties/x: unsupported keyword
    // 'patternProperties'".
    static std::shared_ptr<const JsonGrammar> from_schema(const nlohmann::json& schema, const JsonGrammarOptions& options = {});
    static std::shared_ptr<const JsonGrammar> from_ordered_schema(const nlohmann::ordered_json& schema,
                                                                  const JsonGrammarOptions& options = {});
    static std::shared_ptr<const JsonGrammar> from_schema_text(std::string_view text, const JsonGrammarOptions& options = {});

    // ---- the compiled form, read by the matcher (json_matcher.h) ----

    static constexpr int32_t kUnreachable = std::numeric_limits<int32_t>::max() / 4;
    static constexpr uint32_t kUnlimited = std::numeric_limits<uint32_t>::max();
    // Magnitudes of bounded numbers have at most 18 digits, so they fit an int64_t.
    static constexpr int kMaxBoundedDigits = 18;
    static constexpr int64_t kMaxMagnitude = 999'999'999'999'999'999;

    enum class Kind : uint8_t { Object, Array, String, Number, Literals };

    struct Property {
        std::string name;  // as decoded (what a JSON parser gives)
        int32_t node = -1;
        bool required = false;
    };

    // Closed range of number magnitudes (absolute values); empty when lo > hi.
    struct MagnitudeRange {
        int64_t lo = 1, hi = 0;
        bool empty() const { return lo > hi; }
        bool contains(int64_t m) const { return lo <= m && m <= hi; }
        bool meets(int64_t a, int64_t b) const { return lo <= b && a <= hi; }
    };

    struct Alt {
        Kind kind = Kind::Literals;
        int32_t min_depth = kUnreachable;  // containers needed to complete a value, this one included
        // Object: properties in emission order; required ones must appear, optional ones may be
        // skipped; extra properties (extra_node >= 0) only after every required one.
        std::vector<Property> properties;
        std::vector<uint32_t> next_required;  // [i]: first required property at index >= i (size() when none); size()+1 entries
        int32_t extra_node = -1;
        uint32_t name_root = 0;             // name_trie node of the property names (canonical JSON encoding)
        std::vector<uint64_t> name_hashes;  // key_hash of every property name, sorted
        // Array: item i matches prefix_items[i], later ones items (-1: none).
        std::vector<int32_t> prefix_items;
        int32_t items = -1;
        uint32_t min_items = 0, max_items = kUnlimited;
        // String: length in code points.
        uint32_t min_length = 0, max_length = kUnlimited;
        // Number. integer: no fraction or exponent. bounded: minimum/maximum given; then no
        // exponent, at most 18 integer digits, and the magnitude of the integer part must lie in
        // end[neg] when the number ends there or in fraction[neg] when a fraction follows
        // (ranges chosen so that every such number is within the bounds).
        bool integer = false, bounded = false;
        MagnitudeRange end[2], fraction[2];
        // Literals: compact JSON texts (enum/const values, true/false/null), sorted, unique.
        std::vector<std::string> literals;
        uint64_t literal_first_bytes[4] = {0, 0, 0, 0};  // bitmap of the literals' first bytes

        int32_t item_node(uint32_t index) const { return index < prefix_items.size() ? prefix_items[index] : items; }
    };

    struct Node {
        std::vector<int32_t> alts;
        int32_t min_depth = kUnreachable;
    };

    // A trie over the canonical encodings of property names (the bytes between the quotes).
    struct NameTrieNode {
        std::vector<std::pair<uint8_t, uint32_t>> children;  // byte -> node, sorted by byte
        int32_t property = -1;                               // the property whose name ends here
        std::vector<int32_t> properties_below;               // properties ending here or deeper, ascending
    };

    const std::vector<Node>& nodes() const { return nodes_; }
    const std::vector<Alt>& alts() const { return alts_; }
    const std::vector<NameTrieNode>& name_trie() const { return name_trie_; }
    int32_t root() const { return root_; }
    const JsonGrammarOptions& options() const { return options_; }

    // The hash of a decoded key, one code point at a time from key_hash_seed. Keys of extra
    // properties are compared by hash (a collision refuses a key; it never lets a duplicate pass).
    static constexpr uint64_t key_hash_seed = 0x243F6A8885A308D3ull;
    static uint64_t key_hash_step(uint64_t h, uint32_t code_point) {
        h = (h ^ (code_point + 1)) * 0x9E3779B97F4A7C15ull;
        return h ^ (h >> 29);
    }
    static uint64_t key_hash(std::string_view utf8);

    JsonGrammar(const JsonGrammar&) = delete;
    JsonGrammar& operator=(const JsonGrammar&) = delete;

private:
    JsonGrammar() = default;
    friend class SchemaCompiler;

    std::vector<Node> nodes_;
    std::vector<Alt> alts_;
    std::vector<NameTrieNode> name_trie_;
    int32_t root_ = -1;
    JsonGrammarOptions options_;
};

}  // namespace strata::runtime
