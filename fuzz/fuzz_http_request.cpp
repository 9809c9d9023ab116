// libFuzzer target over the HTTP/1.1 request parser of net::Server (net/request_parser.h): any
// bytes, read as a connection's stream of pipelined requests, must parse into requests that keep
// the limits or stop at an error with one of the parser's statuses and a reason. And the result
// must not depend on how the bytes arrived: the same stream fed whole and fed in pieces (of sizes
// the input picks) gives the same requests, bodies and error. Any other outcome, a crash or a
// sanitizer report is a finding.
//
// Input: byte 0 picks the piece size (1 + b % 64) and bit 7 of byte 1 tight limits (256-byte
// heads, 8 fields, 64-byte bodies) so that small inputs reach the limit checks; the rest is the
// stream. Seed files (fuzz/corpus/http_request/) start with those two bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "net/request_parser.h"

namespace {

using strata::net::ParserLimits;
using strata::net::RequestParser;

[[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "fuzz_http_request: %s\n", what.c_str());
    std::abort();
}

// What a stream parsed into: each request as "method target body", then the error if any.
std::vector<std::string> parse_stream(const std::string& wire, size_t piece, const ParserLimits& limits) {
    std::vector<std::string> out;
    RequestParser p(limits);
    size_t off = 0;
    for (int guard = 0; guard < 1 << 20; ++guard) {
        const size_t n = std::min(piece, wire.size() - off);
        const size_t used = p.feed(wire.data() + off, n);
        if (used > n) fail("consumed more than it was given");
        off += used;
        switch (p.state()) {
            case RequestParser::State::Failed: {
                const int s = p.error_status();
                if (s != 400 && s != 413 && s != 414 && s != 417 && s != 431 && s != 501 && s != 505)
                    fail("an unexpected status " + std::to_string(s));
                if (p.error().empty()) fail("an error without a reason");
                out.push_back("error " + std::to_string(s));
                return out;
            }
            case RequestParser::State::Done: {
                const auto& h = p.head();
                if (static_cast<int64_t>(p.body().size()) > limits.max_body_bytes) fail("a body over the limit");
                if (static_cast<int>(h.fields.size()) > limits.max_headers) fail("more fields than the limit");
                if (!h.chunked && static_cast<int64_t>(p.body().size()) != h.content_length)
                    fail("a body not of its Content-Length");
                if (h.method.empty() || h.target.empty()) fail("a request without a method or target");
                out.push_back(h.method + " " + h.target + " " + p.body());
                p.reset();
                break;
            }
            case RequestParser::State::Body:
            case RequestParser::State::Head:
                if (used == 0 && n == 0) return out;  // all fed; an unfinished request waits for more
                if (used == 0 && p.state() == RequestParser::State::Head) fail("a head that took no bytes");
                break;
        }
        if (off == wire.size() && p.state() == RequestParser::State::Head) return out;
    }
    fail("no progress");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    const size_t piece = 1 + data[0] % 64;
    ParserLimits limits;
    if (data[1] & 0x80) {
        limits.max_head_bytes = 256;
        limits.max_headers = 8;
        limits.max_body_bytes = 64;
    }
    const std::string wire(reinterpret_cast<const char*>(data) + 2, size - 2);
    const auto whole = parse_stream(wire, wire.size() + 1, limits);
    const auto pieces = parse_stream(wire, piece, limits);
    if (whole != pieces) fail("fed whole and in pieces of " + std::to_string(piece) + " the stream parses differently");
    return 0;
}
