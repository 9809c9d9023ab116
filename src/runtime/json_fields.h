// Reading one field of a client's JSON (an HTTP body, an engine command) with an error in the
// client's terms: FieldError names the field as the client wrote it ("logit_bias.15", "stop[2]")
// and says what is wrong ("top_k: expected an integer, got a number 1.5", "temperature: 2.5 is out
// of range [0.0, 2.0]"). strata serve answers it as a 400 naming `param`; the engine as an error
// event. These are the one wording of both.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace strata::runtime {

class FieldError : public Error {
public:
    FieldError(std::string param, const std::string& message) : Error(message), param(std::move(param)) {}
    std::string param;
};

namespace fields {

using ojson = nlohmann::ordered_json;

[[noreturn]] void fail(const std::string& param, const std::string& message);
// "null", "a boolean", "a number", "a string", "an array", "an object".
std::string type_name(const ojson& v);
// The member `key` of an object, nullptr when absent or null.
const ojson* find(const ojson& object, const char* key);

bool need_bool(const ojson& v, const std::string& param);
void need_object(const ojson& v, const std::string& param);
// A finite number in [lo, hi].
double need_number(const ojson& v, const std::string& param, double lo, double hi);
// An integer in [lo, hi]; a whole number written as a float (8.0) counts.
int64_t need_int(const ojson& v, const std::string& param, int64_t lo, int64_t hi);

}  // namespace fields
}  // namespace strata::runtime
