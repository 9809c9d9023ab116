// What a route handler of net::Server sees and fills: the request (its head, body and peer, and
// whether the client is still there) and the response (a status, headers and a whole body, or a
// chunked stream from a content provider). The names follow cpp-httplib's server interface,
// which the handlers of serve and gateway were written against, so that they port by a rename.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <string_view>

namespace strata::net {

struct CaseLess {
    bool operator()(const std::string& a, const std::string& b) const;
};
using Headers = std::multimap<std::string, std::string, CaseLess>;
using Params = std::multimap<std::string, std::string>;

struct Request {
    std::string method;
    std::string target;  // as sent
    std::string path;    // the target's path, percent-decoded, without the query
    std::string version;
    Headers headers;
    Params params;  // the query's name=value pairs, decoded
    std::string body;
    std::string remote_addr, local_addr;
    int remote_port = -1, local_port = -1;
    std::smatch matches;  // the route pattern's groups, matched against `path`
    // True once the client has closed or reset the connection, or it was dropped (a handler that
    // waits looks at it to cancel its work). Safe from any thread.
    std::function<bool()> is_connection_closed = [] { return false; };

    bool has_header(const std::string& name) const { return headers.find(name) != headers.end(); }
    std::string get_header_value(const std::string& name, size_t index = 0) const;
    bool has_param(const std::string& name) const { return params.find(name) != params.end(); }
    std::string get_param_value(const std::string& name) const;
};

// Where a content provider writes a streamed response. write() sends one chunk (false: the client
// is gone or the connection was dropped for not reading: stop and return false); done() ends the
// stream. Writes never block: they go into the connection's output buffer, and the server calls
// the provider again only once that buffer has drained below its mark.
class DataSink {
public:
    struct Target {
        virtual ~Target() = default;
        virtual bool write(const char* data, size_t n) = 0;
        virtual void done() = 0;
        virtual bool is_writable() const = 0;
    };
    explicit DataSink(Target& t) : t_(t) {}
    bool write(const char* data, size_t n) { return t_.write(data, n); }
    bool write(std::string_view s) { return t_.write(s.data(), s.size()); }
    void done() { t_.done(); }
    bool is_writable() const { return t_.is_writable(); }

private:
    Target& t_;
};

// Called (on a worker thread) until it calls sink.done() or returns false (the stream is then cut
// and the connection closed). `offset`: bytes written so far.
using ContentProvider = std::function<bool(size_t offset, DataSink& sink)>;
// Called once when the stream ends: true when done() was reached, false when it was cut (the
// client left, did not read, or the provider failed).
using ContentProviderResourceReleaser = std::function<void(bool success)>;

struct Response {
    int status = -1;  // -1 until set: 200 after a handler
    Headers headers;
    std::string body;
    // Why the server itself refused the request (a framing error, a timeout, no capacity), for
    // the error handler to put in its body; empty for a handler's responses.
    std::string reason;

    // Adds a header; one whose name or value holds CR or LF is dropped (no header injection).
    void set_header(const std::string& name, const std::string& value);
    bool has_header(const std::string& name) const { return headers.find(name) != headers.end(); }
    std::string get_header_value(const std::string& name) const;
    void set_content(std::string content, const std::string& content_type);
    void set_chunked_content_provider(const std::string& content_type, ContentProvider provider,
                                      ContentProviderResourceReleaser releaser = nullptr);

    ContentProvider provider;  // set: a chunked stream
    ContentProviderResourceReleaser releaser;
};

// "/a%20b" -> "/a b" (invalid escapes left as they are); with plus_as_space also '+' -> ' '.
std::string percent_decode(std::string_view s, bool plus_as_space);

}  // namespace strata::net
