// The byte-level recogniser behind JSON constrained decoding: a pushdown automaton that reads
// a document one byte at a time and refuses, at the first byte, anything that cannot be
// completed into a document matching the grammar (json_grammar.h).
//
// A parse is a stack of frames (document / object / array / string / number / literal). Where
// a schema offers several alternatives that start with the same byte (anyOf of two object
// schemas, a string or an enum of strings), the parse forks into threads, one stack each;
// threads die when they refuse a byte and identical threads merge. A state is therefore a
// small flat array of frames, cheap to copy: the token-trie walk (json_constraint.h) keeps one
// state per trie depth.
//
// What is accepted (docs/constrained_decoding.md): JSON text with no whitespace before or
// after the top-level value and at most max_whitespace_run whitespace bytes in any other gap;
// strings of valid UTF-8 (escapes of lone surrogates refused); numbers with at most 18 integer
// digits, 20 fraction digits and 2 exponent digits; object keys unique, listed properties in
// schema order.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/json_grammar.h"

namespace strata::runtime {

// One frame of a parse stack: 32 bytes, no padding (stacks are compared with memcmp).
//   Document  phase 0: expects the value, 1: done
//   Object    alt, phase, ws, a next property index, b extra-key list head, c depth, d value node after the
//   key Array     alt, phase, ws, a items so far, c depth String    alt (a key: its object's alt), phase
//   escape state, flags UTF-8 state, a code points
//             (counted only under min/maxLength), b name-trie node (keys), c escape/UTF-8
//             accumulator, d 1 for a key, h hash of the key so far
//   Number    alt, phase, flags 1 when negative, a/b/c integer/fraction/exponent digits, h integer part
//   (bounded only) Literal   alt, a bytes matched, [b, c) the literals still possible
struct MatchFrame {
    enum Kind : uint8_t { Document, Object, Array, String, Number, Literal };
    uint8_t kind = Document;
    uint8_t phase = 0;
    uint8_t ws = 0;
    uint8_t flags = 0;
    int32_t alt = -1;
    uint32_t a = 0, b = 0, c = 0, d = 0;
    uint64_t h = 0;
};
static_assert(sizeof(MatchFrame) == 32);

// The parses still alive. Thread i is frames[ends[i-1], ends[i]) (ends[-1] = 0), a stack with
// the document frame at the bottom.
struct JsonParseState {
    std::vector<MatchFrame> frames;
    std::vector<uint32_t> ends;

    size_t threads() const { return ends.size(); }
    uint32_t thread_begin(size_t i) const { return i == 0 ? 0 : ends[i - 1]; }
    bool operator==(const JsonParseState& other) const;
};

// Keys of extra properties, as linked lists: an open object frame holds the index+1 of its
// latest key. Append-only while a document is read (a trie walk truncates back what it added).
struct ExtraKey {
    uint64_t hash;
    uint32_t prev;  // index+1 of the object's previous key, 0 for none
};

class JsonMatcher {
public:
    explicit JsonMatcher(std::shared_ptr<const JsonGrammar> grammar);

    void reset();
    // Consumes a byte; false (and nothing changes) when it cannot follow.
    bool feed(uint8_t byte);
    // All bytes or none.
    bool feed(std::string_view bytes);
    // Whether feed(bytes) would succeed; nothing changes.
    bool accepts(std::string_view bytes);
    // The bytes so far are a whole matching document.
    bool complete() const { return can_end(state_); }
    // Some byte may still follow.
    bool can_continue();

    const JsonParseState& state() const { return state_; }
    const JsonGrammar& grammar() const { return *g_; }
    const std::shared_ptr<const JsonGrammar>& grammar_ptr() const { return g_; }

    // ---- for the token-trie walk ----
    // dst = src advanced by one byte; false when no thread survives. Keys of extra properties
    // are appended to extra_keys().
    bool advance(const JsonParseState& src, uint8_t byte, JsonParseState& dst);
    bool can_end(const JsonParseState& s) const;
    bool thread_can_end(const MatchFrame* begin, const MatchFrame* end) const;
    // When the thread stands between characters of a string where any text may follow (a
    // value string, or a key that may be an extra property): how many more code points the
    // string may take (JsonGrammar::kUnlimited when unbounded). -1 otherwise.
    int64_t string_room(const MatchFrame* begin, const MatchFrame* end) const;
    // The thread stands between characters of a value string without length bounds, where
    // plain text leaves the state exactly as it is.
    bool in_unbounded_string(const MatchFrame* begin, const MatchFrame* end) const;
    std::vector<ExtraKey>& extra_keys() { return keys_; }

    static constexpr size_t kMaxThreads = 32;  // more live parses are dropped (never seen with real schemas)

private:
    enum class Step { Done, Fail, Redispatch, StartValue };

    bool feed_thread(JsonParseState& dst, size_t begin, uint8_t c);
    bool start_value(JsonParseState& dst, size_t begin, int32_t node, uint32_t depth, uint8_t c);
    bool begin_alt(std::vector<MatchFrame>& st, int32_t alt, uint32_t depth, uint8_t c);
    Step document_byte(std::vector<MatchFrame>& st, uint8_t c);
    Step container_whitespace(MatchFrame& f) const;
    Step object_byte(std::vector<MatchFrame>& st, uint8_t c);
    Step array_byte(std::vector<MatchFrame>& st, uint8_t c);
    Step string_byte(std::vector<MatchFrame>& st, uint8_t c);
    Step number_byte(std::vector<MatchFrame>& st, uint8_t c);
    Step literal_byte(std::vector<MatchFrame>& st, uint8_t c);
    Step close_key(std::vector<MatchFrame>& st);
    static void child_done(std::vector<MatchFrame>& st);
    bool fits(uint32_t depth, int32_t node) const;
    bool has_key_candidate(const MatchFrame& obj) const;
    bool extras_allowed(const MatchFrame& obj) const;
    bool name_alive(const MatchFrame& obj, uint32_t name_node) const;
    bool number_reachable(const JsonGrammar::Alt& a, int neg, int64_t magnitude, uint32_t digits) const;
    static void dedup(JsonParseState& s);

    std::shared_ptr<const JsonGrammar> g_;
    const JsonGrammar::Alt* alts_ = nullptr;
    const JsonGrammar::Node* nodes_ = nullptr;
    uint32_t max_depth_ = 0;
    uint8_t max_ws_ = 0;
    JsonParseState state_, next_, probe_a_, probe_b_;
    std::vector<ExtraKey> keys_;
    std::vector<MatchFrame> fork_;
    std::vector<int32_t> candidates_;
    int32_t pending_node_ = -1;
    uint32_t pending_depth_ = 0;
};

}  // namespace strata::runtime
