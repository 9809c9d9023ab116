// A strict, incremental HTTP/1.1 request parser (RFC 9112): bytes in, one request's head and body
// out, or an error with the status to answer it with. It holds no socket and no clock; the server
// (net/http_server.h) feeds it what it reads and keeps the deadlines.
//
// What it accepts: CRLF line ends only (a bare LF or CR is a 400); a request line of exactly
// `method SP target SP HTTP/1.x`; fields `name ":" OWS value OWS` with a token name (whitespace
// before the colon, obsolete line folding and control characters in values are 400s); exactly one
// Host in HTTP/1.1. Framing: either one Content-Length of 1*DIGIT (a list, a sign, a second field
// or anything else is a 400), or one Transfer-Encoding field whose only coding is `chunked`
// (chunked not last, twice, or with other codings is a 400; a coding we do not decode alone, or
// before chunked, is a 501; both Content-Length and Transfer-Encoding, or Transfer-Encoding in
// HTTP/1.0, is a 400), or no body. Limits: the head (request line and fields, leading empty lines
// included) within max_head_bytes and max_headers lines, else 431 (414 when the request line alone
// is longer); the body within max_body_bytes
// in every framing (a declared length over it is refused before any body byte is read), else 413;
// chunk-size lines within 4 KiB and trailers within the head limits. Leading empty lines before
// the request line are skipped (RFC 9112 2.2). Every error ends the connection (the server closes
// after answering it): nothing after a framing error can be trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata::net {

struct ParserLimits {
    size_t max_head_bytes = 16 << 10;
    int max_headers = 100;
    int64_t max_body_bytes = 32ll << 20;
};

// The head of a request as it came (names keep their case; values are OWS-trimmed).
struct RequestHead {
    std::string method, target;
    int minor_version = 1;  // HTTP/1.<minor>
    std::vector<std::pair<std::string, std::string>> fields;
    bool chunked = false;
    int64_t content_length = 0;  // the declared length (not chunked)
    bool keep_alive = true;      // HTTP/1.1 without "Connection: close", or 1.0 with "keep-alive"
    bool expect_continue = false;
};

class RequestParser {
public:
    enum class State { Head, Body, Done, Failed };
    explicit RequestParser(ParserLimits limits = {}) : limits_(limits) {}

    // Consumes bytes of [data, data + n) and returns how many it used. It stops after the head
    // (state Body: the caller may look at the head before the body is read; call again, also with
    // n == 0, to go on), at the end of the request (Done: the rest belongs to the next request)
    // and at an error (Failed).
    size_t feed(const char* data, size_t n);

    State state() const { return state_; }
    // Any byte of this request seen (a partial head: the head deadline runs).
    bool started() const { return started_; }
    const RequestHead& head() const { return head_; }
    std::string& body() { return body_; }
    // When Failed: the status to answer (400, 413, 414, 417, 431, 501, 505) and why, in words.
    int error_status() const { return error_status_; }
    const std::string& error() const { return error_; }
    // For the next request on the connection.
    void reset();

private:
    size_t feed_head(const char* data, size_t n);
    size_t feed_body(const char* data, size_t n);
    size_t feed_chunked(const char* data, size_t n);
    bool parse_head();
    bool chunk_size_line();
    bool trailer_line();
    bool fail(int status, std::string why);

    ParserLimits limits_;
    State state_ = State::Head;
    bool started_ = false;
    // Head scanning: the head's bytes (without leading empty lines), whether the last byte was a
    // CR, the current line's length, the lines seen.
    std::string head_buf_;
    bool prev_cr_ = false;
    size_t line_len_ = 0;
    int lines_ = 0;
    size_t skipped_ = 0;  // bytes of leading empty lines
    RequestHead head_;
    std::string body_;
    int64_t remaining_ = 0;  // of a Content-Length body or of the current chunk
    enum class Chunk { Size, Data, DataCr, DataLf, Trailer } chunk_ = Chunk::Size;
    std::string line_;  // a chunk-size or trailer line being read
    size_t trailer_bytes_ = 0;
    int trailer_lines_ = 0;
    int error_status_ = 0;
    std::string error_;
};

// Helpers shared with the server: RFC 9110 token characters, and a case-insensitive compare.
bool is_token_char(unsigned char c);
bool iequals(const std::string& a, const std::string& b);

}  // namespace strata::net
