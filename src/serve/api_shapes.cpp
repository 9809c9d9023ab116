#include "serve/api_shapes.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include "net/http_server.h"

namespace strata::serve {

using nlohmann::json;

namespace {

const char* openai_error_type(int status) {
    switch (status) {
        case 401: return "authentication_error";
        case 403: return "permission_error";
        case 404: return "not_found_error";
        case 429: return "rate_limit_error";
        default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

const char* anthropic_error_type(int status) {
    switch (status) {
        case 401: return "authentication_error";
        case 402: return "billing_error";
        case 403: return "permission_error";
        case 404: return "not_found_error";
        case 413: return "request_too_large";
        case 429: return "rate_limit_error";
        case 504: return "timeout_error";
        case 529: return "overloaded_error";
        default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

}  // namespace

json api_error_body(ApiKind api, const ApiError& e, const std::string& request_id) {
    if (api == ApiKind::Anthropic)
        return {{"type", "error"},
                {"error", {{"type", anthropic_error_type(e.status)}, {"message", e.what()}}},
                {"request_id", request_id}};
    return {{"error",
             {{"message", e.what()},
              {"type", openai_error_type(e.status)},
              {"param", e.param.empty() ? json() : json(e.param)},
              {"code", e.status == 401 ? json("invalid_api_key") : json()}}}};
}

std::string api_stream_error(ApiKind api, const std::string& message) {
    if (api == ApiKind::Anthropic)
        return "event: error\ndata: " +
               dump_json(json{{"type", "error"}, {"error", {{"type", "api_error"}, {"message", message}}}}) + "\n\n";
    if (api == ApiKind::Responses)
        // The spec's error event (code, message, param), with the error object the SDKs raise on.
        return "event: error\ndata: " +
               dump_json(json{
                   {"type", "error"},
                   {"code", "server_error"},
                   {"message", message},
                   {"param", nullptr},
                   {"error", {{"type", "server_error"}, {"code", "server_error"}, {"message", message}, {"param", nullptr}}}}) +
               "\n\n";
    return "data: " +
           dump_json(json{{"error", {{"message", message}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}}) +
           "\n\ndata: [DONE]\n\n";
}

ApiKind api_of_path(const std::string& path) {
    if (path.rfind("/v1/messages", 0) == 0) return ApiKind::Anthropic;
    if (path.rfind("/v1/responses", 0) == 0) return ApiKind::Responses;
    return ApiKind::OpenAI;
}

void install_api_error_handlers(net::Server& server, int64_t max_body_bytes, std::function<void(const std::string&)> log) {
    auto reply = [](net::Response& res, const std::string& path, const ApiError& e) {
        res.status = e.status;
        res.set_content(dump_json(api_error_body(api_of_path(path), e, "")), "application/json");
    };
    server.set_error_handler([reply, max_body_bytes](const net::Request& req, net::Response& res) {
        if (!res.body.empty()) return;
        std::string message;
        if (res.status == 404) message = "no such endpoint: " + req.method + " " + req.path;
        else if (res.status == 413) message = "request body larger than " + std::to_string(max_body_bytes) + " bytes";
        else if (res.status == 405) message = "method not allowed: " + req.method + " " + req.path;
        else if (!res.reason.empty()) message = res.reason;
        else message = "bad request";
        reply(res, req.path, ApiError(res.status, message));
    });
    server.set_exception_handler([reply, log](const net::Request& req, net::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        log("internal error on " + req.method + " " + req.path + ": " + what);
        reply(res, req.path, ApiError(500, "internal error: " + what));
    });
}

std::string sha256_digest(const std::string& s) {
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
    return std::string(reinterpret_cast<char*>(d), sizeof d);
}

std::string hex_of(const std::string& bytes) {
    static const char* digits = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

bool digest_equal(const std::string& a, const std::string& b) {
    return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string presented_key(const std::string& x_api_key, const std::string& authorization) {
    if (!x_api_key.empty()) return x_api_key;
    if (authorization.size() > 7 && (authorization.rfind("Bearer ", 0) == 0 || authorization.rfind("bearer ", 0) == 0))
        return authorization.substr(7);
    return {};
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string dump_json(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace strata::serve
