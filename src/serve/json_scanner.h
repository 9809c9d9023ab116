// Incremental JSON syntax check, one byte at a time: can the bytes so far still begin a JSON text
// (RFC 8259: whitespace, one value, whitespace)? The output parsers use it to find where a
// streamed value ends (a '}' inside a string does not end an object) and to decide whether a
// parameter value is JSON without buffering more than that value.
//
// Iterative with an explicit stack, nesting bounded by kMaxDepth, so any input is safe. Strings
// are checked for syntax (escapes, no raw control characters), not for UTF-8 validity: bytes of
// 0x80 and above are accepted as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::serve {

// JSON whitespace (RFC 8259): space, tab, line feed, carriage return.
inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

class JsonScanner {
public:
    static constexpr size_t kMaxDepth = 256;

    // Appends c. False, with the scanner unchanged, when no JSON text begins with the bytes so
    // far followed by c (or c would open a container deeper than kMaxDepth).
    bool feed(char c);
    // Feeds each byte in turn; false at the first one rejected (those before it stay fed).
    bool feed(std::string_view text);

    bool started() const { return started_; }  // a byte other than whitespace was accepted
    // The bytes so far are a whole JSON text; a number at the end counts ("12" is complete).
    bool complete() const;
    // Complete, and nothing but whitespace can follow: true right after the '}' of an object or
    // the closing quote of a string, but for a bare number only once a byte after it ends it.
    bool closed() const { return state_ == State::After && stack_.empty(); }
    size_t depth() const { return stack_.size(); }
    // What closes the text here by appending only (a quote, closing brackets), when the bytes so
    // far end where that keeps everything read: inside a string value, right after a value, '{'
    // or '['. nullopt inside a key, after ':' or ',', mid-literal, mid-escape or mid-number
    // ("1.", "-"), and before the first value.
    std::optional<std::string> closing() const;

private:
    enum class State : uint8_t {
        Value,       // a value must come (after ':' or ',' in an array, or at the start)
        ValueOrEnd,  // after '[': a value or ']'
        KeyOrEnd,    // after '{': a key or '}'
        Key,         // after ',' in an object: a key
        Colon,
        String,
        Escape,   // after a backslash
        Hex,      // in \uXXXX; count_ digits left
        Literal,  // in true/false/null; literal_[count_] is the next byte
        Minus,    // number: after '-'
        Zero,     // number: integer part is "0"
        Int,      // number: in the integer digits
        Dot,      // number: after '.'
        Frac,     // number: in the fraction digits
        Exp,      // number: after 'e'/'E'
        ExpSign,  // number: after the exponent's sign
        ExpInt,   // number: in the exponent digits
        After,    // a value ended: ',' or a closing bracket (or, at the top, whitespace only)
    };
    bool begin_value(char c);
    bool after_value(char c);
    bool end_number(char c);

    State state_ = State::Value;
    bool started_ = false;
    bool in_key_ = false;  // the string being read is an object key
    uint8_t count_ = 0;
    const char* literal_ = nullptr;
    std::string stack_;  // open containers, '{' or '['
};

// A JSON text cut anywhere (tool-call arguments cut by max_tokens), made whole: the longest
// prefix that JsonScanner::closing can close, and that closing. A partial string value is kept
// as far as it got (never split inside a UTF-8 character); a key without its value, a dangling
// ',' or ':', and a partial literal, escape or number are dropped. Fed incrementally, so a stream
// can send each byte once it is part of the closable prefix.
class JsonCloser {
public:
    void feed(std::string_view text);                        // bytes after the first one JsonScanner rejects are ignored
    size_t safe_size() const { return safe_; }               // 0: nothing closable yet
    const std::string& closing() const { return closing_; }  // appended to the closable prefix
    // The whole text: the closable prefix of `text` (all of it fed) and its closing; "{}" when
    // nothing is closable.
    static std::string close(std::string_view text);

private:
    JsonScanner scanner_;
    size_t fed_ = 0, safe_ = 0;
    std::string closing_;
    bool failed_ = false;
    int utf8_left_ = 0;  // continuation bytes still due in a string
};

}  // namespace strata::serve
