// The request parser against RFC 9112's framing rules: each case is accepted with the head and
// body it should have, or refused with the status the RFC (or our limits) call for. Every case is
// also fed one byte at a time, which must give the same result as feeding it whole.
#include "net/request_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace strata::net {
namespace {

struct Outcome {
    RequestParser::State state;
    int status = 0;
    std::string error, body;
    RequestHead head;
    size_t used = 0;  // bytes consumed
};

Outcome parse(const std::string& wire, ParserLimits limits = {}, bool bytewise = false) {
    RequestParser p(limits);
    size_t used = 0;
    if (!bytewise) {
        used += p.feed(wire.data(), wire.size());
        if (p.state() == RequestParser::State::Body) used += p.feed(wire.data() + used, wire.size() - used);
    } else {
        while (used < wire.size() && (p.state() == RequestParser::State::Head || p.state() == RequestParser::State::Body)) {
            const size_t before = used;
            used += p.feed(wire.data() + used, 1);
            if (p.state() == RequestParser::State::Body && used == before) break;  // body needs more but got none
        }
        if (p.state() == RequestParser::State::Body) used += p.feed(wire.data() + used, 0);
    }
    Outcome o{p.state(), p.error_status(), p.error(), p.body(), p.head(), used};
    return o;
}

// Parses `wire` whole and byte by byte; both must agree.
Outcome check(const std::string& wire, ParserLimits limits = {}) {
    const Outcome whole = parse(wire, limits, false);
    const Outcome bytes = parse(wire, limits, true);
    EXPECT_EQ(static_cast<int>(whole.state), static_cast<int>(bytes.state)) << wire.substr(0, 200);
    EXPECT_EQ(whole.status, bytes.status) << wire.substr(0, 200);
    EXPECT_EQ(whole.body, bytes.body);
    return whole;
}

void expect_refused(const std::string& wire, int status, ParserLimits limits = {}) {
    const Outcome o = check(wire, limits);
    EXPECT_EQ(o.state, RequestParser::State::Failed) << wire.substr(0, 200);
    EXPECT_EQ(o.status, status) << wire.substr(0, 200) << " -> " << o.error;
    EXPECT_FALSE(o.error.empty());
}

const std::string kHost = "Host: x\r\n";

TEST(RequestParser, SimpleGetAndHeaders) {
    const Outcome o = check("GET /v1/models?x=1 HTTP/1.1\r\nHost: localhost\r\nX-Thing:  a b \r\nEmpty:\r\n\r\n");
    ASSERT_EQ(o.state, RequestParser::State::Done) << o.error;
    EXPECT_EQ(o.head.method, "GET");
    EXPECT_EQ(o.head.target, "/v1/models?x=1");
    EXPECT_EQ(o.head.minor_version, 1);
    ASSERT_EQ(o.head.fields.size(), 3u);
    EXPECT_EQ(o.head.fields[1].first, "X-Thing");
    EXPECT_EQ(o.head.fields[1].second, "a b");  // OWS trimmed, inner space kept
    EXPECT_EQ(o.head.fields[2].second, "");
    EXPECT_TRUE(o.head.keep_alive);
    EXPECT_TRUE(o.body.empty());
}

TEST(RequestParser, ContentLengthBody) {
    const Outcome o = check("POST /p HTTP/1.1\r\n" + kHost + "Content-Length: 5\r\n\r\nhelloEXTRA");
    ASSERT_EQ(o.state, RequestParser::State::Done);
    EXPECT_EQ(o.body, "hello");
    // What follows belongs to the next (pipelined) request: not consumed.
    EXPECT_EQ(o.used, std::string("POST /p HTTP/1.1\r\n" + kHost + "Content-Length: 5\r\n\r\nhello").size());
}

TEST(RequestParser, ChunkedBodyWithExtensionsAndTrailer) {
    const Outcome o = check("POST /p HTTP/1.1\r\n" + kHost +
                            "Transfer-Encoding: chunked\r\n\r\n"
                            "5\r\nhello\r\n"
                            "6;name=value\r\n world\r\n"
                            "A ; ext\r\n0123456789\r\n"
                            "0\r\nX-Trailer: t\r\n\r\n");
    ASSERT_EQ(o.state, RequestParser::State::Done) << o.error;
    EXPECT_EQ(o.body, "hello world0123456789");
    EXPECT_TRUE(o.head.chunked);
}

TEST(RequestParser, LeadingEmptyLinesAreSkipped) {
    const Outcome o = check("\r\n\r\nGET / HTTP/1.1\r\n" + kHost + "\r\n");
    ASSERT_EQ(o.state, RequestParser::State::Done) << o.error;
    EXPECT_EQ(o.head.method, "GET");
}

TEST(RequestParser, ConnectionSemantics) {
    EXPECT_FALSE(check("GET / HTTP/1.1\r\n" + kHost + "Connection: close\r\n\r\n").head.keep_alive);
    EXPECT_FALSE(check("GET / HTTP/1.0\r\n\r\n").head.keep_alive);
    EXPECT_TRUE(check("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").head.keep_alive);
    EXPECT_TRUE(check("POST / HTTP/1.1\r\n" + kHost + "Expect: 100-continue\r\nContent-Length: 1\r\n\r\nx").head.expect_continue);
    expect_refused("GET / HTTP/1.1\r\n" + kHost + "Expect: something-else\r\n\r\n", 417);
}

TEST(RequestParser, ContentLengthMustBeOneNumber) {
    const std::string pre = "POST / HTTP/1.1\r\n" + kHost;
    expect_refused(pre + "Content-Length: +5\r\n\r\nhello", 400);
    expect_refused(pre + "Content-Length: -1\r\n\r\n", 400);
    expect_refused(pre + "Content-Length: 5 5\r\n\r\nhello", 400);
    expect_refused(pre + "Content-Length: 5, 5\r\n\r\nhello", 400);
    expect_refused(pre + "Content-Length: 0x10\r\n\r\n", 400);
    expect_refused(pre + "Content-Length:\r\n\r\n", 400);
    expect_refused(pre + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400);  // conflicting
    expect_refused(pre + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400);   // repeated
    EXPECT_EQ(check(pre + "Content-Length: 005\r\n\r\nhello").body, "hello");           // leading zeros are digits
}

TEST(RequestParser, TransferEncodingOnlyChunkedAlone) {
    const std::string pre = "POST / HTTP/1.1\r\n" + kHost;
    const std::string body = "\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    EXPECT_EQ(check(pre + "Transfer-Encoding: Chunked" + body).state, RequestParser::State::Done);
    expect_refused(pre + "Transfer-Encoding: chunked, identity" + body, 400);  // chunked not last
    expect_refused(pre + "Transfer-Encoding: chunked, chunked" + body, 400);
    expect_refused(pre + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked" + body, 400);  // two fields
    expect_refused(pre + "Transfer-Encoding: gzip, chunked" + body, 501);                          // a coding we do not decode
    expect_refused(pre + "Transfer-Encoding: identity" + body, 501);
    expect_refused(pre + "Transfer-Encoding: chunked,," + body, 400);
    expect_refused(pre + "Transfer-Encoding: chunked\r\nContent-Length: 5" + body, 400);  // both framings
    expect_refused(pre + "Content-Length: 5\r\nTransfer-Encoding: chunked" + body, 400);
    expect_refused("POST / HTTP/1.0\r\nTransfer-Encoding: chunked" + body, 400);  // no chunked in 1.0
}

TEST(RequestParser, FieldSyntax) {
    const std::string pre = "GET / HTTP/1.1\r\n" + kHost;
    expect_refused(pre + "Content-Length : 5\r\n\r\n", 400);  // whitespace before the colon
    expect_refused(pre + "X-A\t: b\r\n\r\n", 400);
    expect_refused(pre + "X-A: b\r\n folded\r\n\r\n", 400);  // obsolete line folding
    expect_refused("GET / HTTP/1.1\r\n Host: x\r\n\r\n", 400);
    expect_refused(pre + "No colon here\r\n\r\n", 400);
    expect_refused(pre + ": empty name\r\n\r\n", 400);
    expect_refused(pre + "X-A: b" + std::string(1, '\0') + "c\r\n\r\n", 400);  // NUL in a value
    expect_refused(pre + "X-A: b\x01\r\n\r\n", 400);
    expect_refused(pre + "X(A): b\r\n\r\n", 400);                                             // not a token
    EXPECT_EQ(check(pre + "X-Utf8: caf\xc3\xa9\r\n\r\n").state, RequestParser::State::Done);  // obs-text is allowed
}

TEST(RequestParser, LineEndsAreCrlf) {
    expect_refused("GET / HTTP/1.1\n" + kHost + "\r\n", 400);
    expect_refused("GET / HTTP/1.1\r\nHost: x\n\n", 400);
    expect_refused("GET / HTTP/1.1\r\nHost: x\rY: z\r\n\r\n", 400);
    expect_refused("POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400);
    expect_refused("POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400);
}

TEST(RequestParser, RequestLine) {
    expect_refused("GET  / HTTP/1.1\r\n" + kHost + "\r\n", 400);  // two spaces
    expect_refused("GET / HTTP/1.1 \r\n" + kHost + "\r\n", 400);
    expect_refused("GET /\r\n" + kHost + "\r\n", 400);
    expect_refused("GET / HTTP/2.0\r\n" + kHost + "\r\n", 505);
    expect_refused("GET / HTTX/1.1\r\n" + kHost + "\r\n", 400);
    expect_refused("G(T / HTTP/1.1\r\n" + kHost + "\r\n", 400);
    expect_refused("GET relative HTTP/1.1\r\n" + kHost + "\r\n", 400);
    expect_refused("GET /a\x7f HTTP/1.1\r\n" + kHost + "\r\n", 400);
    EXPECT_EQ(check("GET http://h/x HTTP/1.1\r\n" + kHost + "\r\n").state, RequestParser::State::Done);  // absolute-form
    EXPECT_EQ(check("OPTIONS * HTTP/1.1\r\n" + kHost + "\r\n").state, RequestParser::State::Done);
}

TEST(RequestParser, HostRules) {
    expect_refused("GET / HTTP/1.1\r\n\r\n", 400);
    expect_refused("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
    EXPECT_EQ(check("GET / HTTP/1.0\r\n\r\n").state, RequestParser::State::Done);  // 1.0 needs none
}

TEST(RequestParser, HeadLimits) {
    ParserLimits small;
    small.max_head_bytes = 1024;
    small.max_headers = 10;
    std::string many = "GET / HTTP/1.1\r\n" + kHost;
    for (int i = 0; i < 11; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
    expect_refused(many + "\r\n", 431, small);
    // A head that never ends is refused once it passes the limit, without waiting for its end.
    std::string flood = "GET / HTTP/1.1\r\n" + kHost + "X-Big: " + std::string(2000, 'a');
    const Outcome o = check(flood, small);
    EXPECT_EQ(o.status, 431);
    EXPECT_LE(o.used, small.max_head_bytes);
    expect_refused("GET /" + std::string(2000, 'q') + " HTTP/1.1\r\n" + kHost + "\r\n", 414, small);  // a huge URL
    std::string lines = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < 1000; ++i) lines += "a:b\r\n";
    EXPECT_EQ(check(lines, small).status, 431);
    expect_refused(std::string(2000, '\r').replace(1, 1, "\n"), 400, small);
    std::string blank;
    for (int i = 0; i < 600; ++i) blank += "\r\n";
    expect_refused(blank, 431, small);  // leading empty lines count toward the limit
}

TEST(RequestParser, BodyLimitsInEveryFraming) {
    ParserLimits small;
    small.max_body_bytes = 16;
    const std::string pre = "POST / HTTP/1.1\r\n" + kHost;
    expect_refused(pre + "Content-Length: 17\r\n\r\n", 413, small);  // before any body byte
    expect_refused(pre + "Content-Length: 99999999999999999999999\r\n\r\n", 413, small);
    EXPECT_EQ(check(pre + "Content-Length: 16\r\n\r\n" + std::string(16, 'x'), small).state, RequestParser::State::Done);
    // Chunked: the sum of the chunks, refused at the size line that passes the limit.
    expect_refused(pre + "Transfer-Encoding: chunked\r\n\r\n10\r\n" + std::string(16, 'x') + "\r\n1\r\nx\r\n0\r\n\r\n", 413,
                   small);
    expect_refused(pre + "Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFFFFFF\r\n", 413, small);
    expect_refused(pre + "Transfer-Encoding: chunked\r\n\r\n11\r\n", 413, small);
    EXPECT_EQ(check(pre + "Transfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n", small).body.size(),
              16u);
    // Chunk-size lines and trailers are bounded too.
    expect_refused(pre + "Transfer-Encoding: chunked\r\n\r\n1;" + std::string(5000, 'e') + "\r\n", 400, small);
    std::string trailers = pre + "Transfer-Encoding: chunked\r\n\r\n0\r\n";
    for (int i = 0; i < 200; ++i) trailers += "T: v\r\n";
    expect_refused(trailers + "\r\n", 431, small);
    expect_refused(pre + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, small);
    expect_refused(pre + "Transfer-Encoding: chunked\r\n\r\n5 x\r\nhello\r\n0\r\n\r\n", 400, small);
    expect_refused(pre + "Transfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n", 400, small);
}

TEST(RequestParser, PipelinedRequestsParseOneAfterAnother) {
    const std::string a = "GET /a HTTP/1.1\r\n" + kHost + "\r\n";
    const std::string b = "POST /b HTTP/1.1\r\n" + kHost + "Content-Length: 3\r\n\r\nxyz";
    const std::string c = "GET /c HTTP/1.1\r\n" + kHost + "\r\n";
    const std::string wire = a + b + c;
    RequestParser p;
    size_t off = 0;
    std::vector<std::string> seen;
    while (off < wire.size()) {
        off += p.feed(wire.data() + off, wire.size() - off);
        if (p.state() == RequestParser::State::Body) off += p.feed(wire.data() + off, wire.size() - off);
        ASSERT_EQ(p.state(), RequestParser::State::Done) << p.error();
        seen.push_back(p.head().target + ":" + p.body());
        p.reset();
    }
    EXPECT_EQ(seen, (std::vector<std::string>{"/a:", "/b:xyz", "/c:"}));
}

TEST(RequestParser, HeadEndsBeforeBodyIsRead) {
    // The server looks at the head (authentication, 100-continue) before reading any body byte.
    const std::string wire = "POST / HTTP/1.1\r\n" + kHost + "Content-Length: 3\r\n\r\nabc";
    RequestParser p;
    const size_t used = p.feed(wire.data(), wire.size());
    EXPECT_EQ(p.state(), RequestParser::State::Body);
    EXPECT_EQ(used, wire.size() - 3);
    EXPECT_EQ(p.feed(wire.data() + used, 3), 3u);
    EXPECT_EQ(p.state(), RequestParser::State::Done);
    EXPECT_EQ(p.body(), "abc");
}

}  // namespace
}  // namespace strata::net
