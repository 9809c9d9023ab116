#include "net/request_parser.h"

#include <algorithm>

namespace strata::net {

namespace {

constexpr size_t kMaxChunkLine = 4096;

bool is_ows(char c) { return c == ' ' || c == '\t'; }

// field-value characters (RFC 9110 5.5): visible ASCII, SP, HTAB and obs-text; no other controls.
bool is_value_char(unsigned char c) { return c == '\t' || c == ' ' || (c >= 0x21 && c != 0x7f); }

std::string trim_ows(const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && is_ows(s[b])) ++b;
    while (e > b && is_ows(s[e - 1])) --e;
    return s.substr(b, e - b);
}

std::vector<std::string> split_list(const std::string& v) {
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
        const size_t comma = v.find(',', start);
        out.push_back(trim_ows(v.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

// "name: value" with a token name right before the colon and a clean value; false otherwise.
bool split_field(const std::string& line, std::string& name, std::string& value, std::string& why) {
    if (!line.empty() && is_ows(line[0])) {
        why = "obsolete line folding (a field line starting with whitespace)";
        return false;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
        why = "a header field line without a colon";
        return false;
    }
    if (colon == 0) {
        why = "a header field with an empty name";
        return false;
    }
    for (size_t i = 0; i < colon; ++i) {
        if (!is_token_char(static_cast<unsigned char>(line[i]))) {
            why = is_ows(line[i]) ? "whitespace between a header field name and the colon"
                                  : "a character not allowed in a header field name";
            return false;
        }
    }
    for (size_t i = colon + 1; i < line.size(); ++i) {
        if (!is_value_char(static_cast<unsigned char>(line[i]))) {
            why = "a control character in a header field value";
            return false;
        }
    }
    name = line.substr(0, colon);
    value = trim_ows(line.substr(colon + 1));
    return true;
}

}  // namespace

bool is_token_char(unsigned char c) {
    if (c >= '0' && c <= '9') return true;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
    switch (c) {
        case '!':
        case '#':
        case '$':
        case '%':
        case '&':
        case '\'':
        case '*':
        case '+':
        case '-':
        case '.':
        case '^':
        case '_':
        case '`':
        case '|':
        case '~': return true;
        default: return false;
    }
}

bool iequals(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        unsigned char x = static_cast<unsigned char>(a[i]), y = static_cast<unsigned char>(b[i]);
        if (x >= 'A' && x <= 'Z') x = static_cast<unsigned char>(x + 32);
        if (y >= 'A' && y <= 'Z') y = static_cast<unsigned char>(y + 32);
        if (x != y) return false;
    }
    return true;
}

void RequestParser::reset() {
    const ParserLimits limits = limits_;
    *this = RequestParser(limits);
}

bool RequestParser::fail(int status, std::string why) {
    state_ = State::Failed;
    error_status_ = status;
    error_ = std::move(why);
    return false;
}

size_t RequestParser::feed(const char* data, size_t n) {
    size_t used = 0;
    if (state_ == State::Head) used += feed_head(data, n);
    else if (state_ == State::Body) used += feed_body(data, n);
    return used;
}

size_t RequestParser::feed_head(const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const char c = data[i];
        started_ = true;
        if (head_buf_.size() + skipped_ >= limits_.max_head_bytes) {
            if (lines_ == 0 && !head_buf_.empty())
                fail(414, "the request line is longer than " + std::to_string(limits_.max_head_bytes) + " bytes");
            else fail(431, "the request head is larger than " + std::to_string(limits_.max_head_bytes) + " bytes");
            return i;
        }
        if (c == '\n') {
            if (!prev_cr_) {
                fail(400, "a bare LF in the request head (lines end with CRLF)");
                return i;
            }
            prev_cr_ = false;
            if (line_len_ == 0) {
                if (lines_ == 0) {
                    // A leading empty line: skipped, though its bytes count toward the limit.
                    head_buf_.pop_back();  // its CR
                    skipped_ += 2;
                    continue;
                }
                head_buf_ += c;
                if (!parse_head()) return i + 1;
                state_ = State::Body;
                return i + 1;
            }
            head_buf_ += c;
            line_len_ = 0;
            if (++lines_ > limits_.max_headers + 1) {
                fail(431, "more than " + std::to_string(limits_.max_headers) + " header fields");
                return i;
            }
            continue;
        }
        if (prev_cr_) {
            fail(400, "a bare CR in the request head");
            return i;
        }
        if (c == '\r') prev_cr_ = true;
        else ++line_len_;
        head_buf_ += c;
    }
    return n;
}

bool RequestParser::parse_head() {
    // head_buf_: lines each ending in CRLF, the last one empty.
    std::vector<std::string> lines;
    size_t start = 0;
    for (;;) {
        const size_t end = head_buf_.find("\r\n", start);
        if (end == std::string::npos || end == start) break;
        lines.push_back(head_buf_.substr(start, end - start));
        start = end + 2;
    }
    if (lines.empty()) return fail(400, "an empty request");

    // request-line = method SP request-target SP HTTP-version
    const std::string& rl = lines[0];
    const size_t sp1 = rl.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? std::string::npos : rl.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos || rl.find(' ', sp2 + 1) != std::string::npos)
        return fail(400, "a malformed request line (method SP target SP version)");
    head_.method = rl.substr(0, sp1);
    head_.target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string version = rl.substr(sp2 + 1);
    if (head_.method.empty()) return fail(400, "a request line without a method");
    for (unsigned char c : head_.method)
        if (!is_token_char(c)) return fail(400, "a malformed request method");
    if (head_.target.empty()) return fail(400, "a request line without a target");
    for (unsigned char c : head_.target)
        if (c <= 0x20 || c >= 0x7f) return fail(400, "a character not allowed in the request target");
    const bool origin_form = head_.target[0] == '/';
    const bool absolute_form = head_.target.rfind("http://", 0) == 0 || head_.target.rfind("https://", 0) == 0;
    if (!origin_form && !absolute_form && !(head_.target == "*" && head_.method == "OPTIONS"))
        return fail(400, "a malformed request target");
    if (version.size() != 8 || version.compare(0, 5, "HTTP/") != 0 || version[6] != '.' || version[5] < '0' || version[5] > '9' ||
        version[7] < '0' || version[7] > '9')
        return fail(400, "a malformed HTTP version");
    if (version[5] != '1') return fail(505, "HTTP version " + version.substr(5) + " is not supported (HTTP/1.1 is)");
    head_.minor_version = version[7] - '0';
    head_.keep_alive = head_.minor_version >= 1;

    int hosts = 0;
    std::vector<std::string> lengths, codings_fields;
    for (size_t i = 1; i < lines.size(); ++i) {
        std::string name, value, why;
        if (!split_field(lines[i], name, value, why)) return fail(400, why);
        if (iequals(name, "host")) ++hosts;
        else if (iequals(name, "content-length")) lengths.push_back(value);
        else if (iequals(name, "transfer-encoding")) codings_fields.push_back(value);
        else if (iequals(name, "connection")) {
            for (const std::string& t : split_list(value)) {
                if (iequals(t, "close")) head_.keep_alive = false;
                else if (iequals(t, "keep-alive") && head_.minor_version == 0) head_.keep_alive = true;
            }
        } else if (iequals(name, "expect")) {
            if (!iequals(value, "100-continue")) return fail(417, "the expectation '" + value + "' is not supported");
            head_.expect_continue = head_.minor_version >= 1;
        }
        head_.fields.emplace_back(std::move(name), std::move(value));
    }
    if (hosts > 1) return fail(400, "more than one Host header field");
    if (hosts == 0 && head_.minor_version >= 1) return fail(400, "an HTTP/1.1 request without a Host header field");

    if (!codings_fields.empty()) {
        if (head_.minor_version == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
        if (!lengths.empty()) return fail(400, "both Content-Length and Transfer-Encoding");
        if (codings_fields.size() > 1) return fail(400, "more than one Transfer-Encoding field");
        const std::vector<std::string> codings = split_list(codings_fields[0]);
        for (size_t i = 0; i < codings.size(); ++i) {
            if (codings[i].empty()) return fail(400, "an empty transfer coding");
            const bool chunked = iequals(codings[i], "chunked");
            if (chunked && i + 1 != codings.size()) return fail(400, "Transfer-Encoding with chunked before another coding");
            if (!chunked) return fail(501, "the transfer coding '" + codings[i] + "' is not supported (only chunked is)");
        }
        head_.chunked = true;
    } else if (!lengths.empty()) {
        if (lengths.size() > 1) return fail(400, "more than one Content-Length");
        const std::string& v = lengths[0];
        if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return fail(400, "a malformed Content-Length '" + v.substr(0, 32) + "'");
        size_t digits = v.find_first_not_of('0');
        digits = digits == std::string::npos ? 0 : v.size() - digits;
        if (digits > 18) return fail(413, "request body larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
        head_.content_length = std::stoll(v);
        if (head_.content_length > limits_.max_body_bytes)
            return fail(413, "request body larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
    }
    if (!head_.chunked && head_.content_length == 0) head_.expect_continue = false;
    remaining_ = head_.content_length;
    if (!head_.chunked) body_.reserve(static_cast<size_t>(std::min<int64_t>(head_.content_length, 1 << 20)));
    head_buf_.clear();
    head_buf_.shrink_to_fit();
    return true;
}

size_t RequestParser::feed_body(const char* data, size_t n) {
    if (head_.chunked) return feed_chunked(data, n);
    const size_t take = static_cast<size_t>(std::min<int64_t>(remaining_, static_cast<int64_t>(n)));
    body_.append(data, take);
    remaining_ -= static_cast<int64_t>(take);
    if (remaining_ == 0) state_ = State::Done;
    return take;
}

size_t RequestParser::feed_chunked(const char* data, size_t n) {
    size_t i = 0;
    while (i < n && state_ == State::Body) {
        switch (chunk_) {
            case Chunk::Data: {
                const size_t take = static_cast<size_t>(std::min<int64_t>(remaining_, static_cast<int64_t>(n - i)));
                body_.append(data + i, take);
                i += take;
                remaining_ -= static_cast<int64_t>(take);
                if (remaining_ == 0) chunk_ = Chunk::DataCr;
                break;
            }
            case Chunk::DataCr:
                if (data[i++] != '\r') return fail(400, "chunk data not followed by CRLF"), i - 1;
                chunk_ = Chunk::DataLf;
                break;
            case Chunk::DataLf:
                if (data[i++] != '\n') return fail(400, "chunk data not followed by CRLF"), i - 1;
                chunk_ = Chunk::Size;
                break;
            case Chunk::Size:
            case Chunk::Trailer: {
                const char c = data[i++];
                if (c == '\n') {
                    if (line_.empty() || line_.back() != '\r')
                        return fail(400, "a bare LF in the chunked framing (lines end with CRLF)"), i - 1;
                    line_.pop_back();
                    const bool ok = chunk_ == Chunk::Size ? chunk_size_line() : trailer_line();
                    line_.clear();
                    if (!ok) return i - 1;
                    break;
                }
                if (!line_.empty() && line_.back() == '\r') return fail(400, "a bare CR in the chunked framing"), i - 1;
                line_ += c;
                if (chunk_ == Chunk::Size && line_.size() > kMaxChunkLine)
                    return fail(400, "a chunk-size line longer than " + std::to_string(kMaxChunkLine) + " bytes"), i - 1;
                if (chunk_ == Chunk::Trailer && ++trailer_bytes_ > limits_.max_head_bytes)
                    return fail(431, "trailer fields larger than " + std::to_string(limits_.max_head_bytes) + " bytes"), i - 1;
                break;
            }
        }
    }
    return i;
}

// chunk-size [ BWS ";" chunk-ext ] (extensions are read past, not interpreted).
bool RequestParser::chunk_size_line() {
    size_t digits = 0;
    int64_t size = 0;
    const int64_t room = limits_.max_body_bytes - static_cast<int64_t>(body_.size());
    for (; digits < line_.size(); ++digits) {
        const char c = line_[digits];
        int v;
        if (c >= '0' && c <= '9') v = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') v = (c | 0x20) - 'a' + 10;
        else break;
        size = size * 16 + v;
        if (size > room) return fail(413, "request body larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
    }
    if (digits == 0) return fail(400, "a malformed chunk size");
    size_t rest = digits;
    while (rest < line_.size() && is_ows(line_[rest])) ++rest;
    if (rest < line_.size() && line_[rest] != ';') return fail(400, "a malformed chunk size");
    if (rest == line_.size() && rest != digits) return fail(400, "a malformed chunk size");
    for (size_t j = rest; j < line_.size(); ++j)
        if (!is_value_char(static_cast<unsigned char>(line_[j]))) return fail(400, "a control character in a chunk extension");
    remaining_ = size;
    chunk_ = size == 0 ? Chunk::Trailer : Chunk::Data;
    return true;
}

bool RequestParser::trailer_line() {
    if (line_.empty()) {
        state_ = State::Done;
        return true;
    }
    if (++trailer_lines_ > limits_.max_headers)
        return fail(431, "more than " + std::to_string(limits_.max_headers) + " trailer fields");
    std::string name, value, why;
    if (!split_field(line_, name, value, why)) return fail(400, why + " (in the trailer)");
    return true;
}

}  // namespace strata::net
