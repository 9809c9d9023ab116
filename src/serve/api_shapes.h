// What both HTTP processes (serve and gateway) say in each API's own shape: error bodies, the
// error that ends a stream which already started, and the key digests they authenticate with.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "serve/chat_request.h"

namespace strata::net {
class Server;
}

namespace strata::serve {

// The error body of `e` in the API's shape (OpenAI: {"error":{message,type,param,code}};
// Anthropic: {"type":"error","error":{type,message},"request_id"}).
nlohmann::json api_error_body(ApiKind api, const ApiError& e, const std::string& request_id);
// The SSE text that ends a stream that failed after it started: OpenAI an error chunk then
// [DONE] (the SDKs raise APIError on it); Anthropic an `error` event; Responses an `error`
// event (without a sequence_number: the gateway writes it too, not knowing the lane's count).
std::string api_stream_error(ApiKind api, const std::string& message);
// The API a path belongs to (/v1/messages...: Anthropic; /v1/responses...: Responses; everything
// else OpenAI's; Responses errors are in OpenAI's shape).
ApiKind api_of_path(const std::string& path);

// The HTTP server's error handler (404 / 405 / 413 / other 4xx and 5xx without a body; the
// server's own refusals carry their reason) and exception handler (500), each answering in the
// API shape of the path; `log` gets the exception lines.
void install_api_error_handlers(net::Server& server, int64_t max_body_bytes, std::function<void(const std::string&)> log);

// SHA-256 digest (32 raw bytes) and lowercase hex.
std::string sha256_digest(const std::string& s);
std::string hex_of(const std::string& bytes);
// Constant-time equality of two digests of the same length.
bool digest_equal(const std::string& a, const std::string& b);
// The key a request presents: x-api-key, else `Authorization: Bearer K`; "" when none.
std::string presented_key(const std::string& x_api_key, const std::string& authorization);

// JSON text, invalid UTF-8 replaced rather than thrown on.
std::string dump_json(const nlohmann::json& j);
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace strata::serve
