// The field readers the request parsers share (chat_request.cpp defines them; the Responses
// parser, responses_request.cpp, reads its bodies with the same ones): each checks one value of a
// body and throws runtime::FieldError naming the field as the client wrote it, which
// as_api_errors turns into ApiError 400 (413 for a string over max_text_bytes).
#pragma once

#include <string>
#include <vector>

#include "serve/chat_request.h"

namespace strata::serve::request_fields {

using runtime::fields::need_bool;
using runtime::fields::need_int;
using runtime::fields::need_number;
using runtime::fields::need_object;
using runtime::fields::type_name;

[[noreturn]] void bad(const std::string& param, const std::string& message);
const ojson* field(const ojson& obj, const char* key);
// A string of at most limits.max_text_bytes (longer: ApiError 413).
std::string need_string(const ojson& v, const std::string& param, const RequestLimits& limits);
void need_array(const ojson& v, const std::string& param, int64_t max_items);
std::vector<std::string> read_stop(const ojson& v, const std::string& param, const RequestLimits& limits);
// The sampling knobs of runtime::kSamplingKnobs present in `body` (temperature, top_p, seed, ...).
void read_common_sampling(const ojson& body, runtime::SamplingParams& sampling, const RequestLimits& limits, bool anthropic);
ToolDef read_tool_common(const ojson& name, const ojson* description, const ojson* schema, const std::string& param,
                         const RequestLimits& limits);
void check_unique_tools(const std::vector<ToolDef>& tools, const char* param);
// Arguments of a tool call sent back by a client: an object, or a string holding one (kept as
// text when it does not parse to an object).
ojson call_arguments(const ojson& v, const std::string& param);

template <class Read>
auto as_api_errors(Read read) -> decltype(read()) {
    try {
        return read();
    } catch (const runtime::FieldError& e) {
        throw ApiError(400, e.what(), e.param);
    }
}

}  // namespace strata::serve::request_fields
