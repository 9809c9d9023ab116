#include "net/http.h"

#include <strings.h>

namespace strata::net {

bool CaseLess::operator()(const std::string& a, const std::string& b) const { return strcasecmp(a.c_str(), b.c_str()) < 0; }

std::string Request::get_header_value(const std::string& name, size_t index) const {
    auto [b, e] = headers.equal_range(name);
    for (size_t i = 0; b != e; ++b, ++i)
        if (i == index) return b->second;
    return {};
}

std::string Request::get_param_value(const std::string& name) const {
    auto it = params.find(name);
    return it == params.end() ? std::string() : it->second;
}

void Response::set_header(const std::string& name, const std::string& value) {
    if (name.find_first_of("\r\n") != std::string::npos || value.find_first_of("\r\n") != std::string::npos) return;
    headers.emplace(name, value);
}

std::string Response::get_header_value(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
}

void Response::set_content(std::string content, const std::string& content_type) {
    body = std::move(content);
    headers.erase("Content-Type");
    set_header("Content-Type", content_type);
}

void Response::set_chunked_content_provider(const std::string& content_type, ContentProvider p,
                                            ContentProviderResourceReleaser r) {
    headers.erase("Content-Type");
    set_header("Content-Type", content_type);
    provider = std::move(p);
    releaser = std::move(r);
}

std::string percent_decode(std::string_view s, bool plus_as_space) {
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
            out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
            i += 2;
        } else if (plus_as_space && s[i] == '+') {
            out += ' ';
        } else {
            out += s[i];
        }
    }
    return out;
}

}  // namespace strata::net
