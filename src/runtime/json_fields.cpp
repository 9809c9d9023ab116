// Field readers: the wording of every message is what clients of both HTTP APIs see (tests pin it).
#include "runtime/json_fields.h"

#include <cmath>
#include <limits>

namespace strata::runtime::fields {

void fail(const std::string& param, const std::string& message) { throw FieldError(param, message); }

std::string type_name(const ojson& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

const ojson* find(const ojson& object, const char* key) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
}

bool need_bool(const ojson& v, const std::string& param) {
    if (!v.is_boolean()) fail(param, param + ": expected a boolean, got " + type_name(v));
    return v.get<bool>();
}

void need_object(const ojson& v, const std::string& param) {
    if (!v.is_object()) fail(param, param + ": expected an object, got " + type_name(v));
}

double need_number(const ojson& v, const std::string& param, double lo, double hi) {
    if (!v.is_number()) fail(param, param + ": expected a number, got " + type_name(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
        fail(param, param + ": " + v.dump() + " is out of range [" + ojson(lo).dump() + ", " + ojson(hi).dump() + "]");
    return x;
}

int64_t need_int(const ojson& v, const std::string& param, int64_t lo, int64_t hi) {
    if (v.is_number_float()) {
        const double x = v.get<double>();
        // x < 2^63 as well: double(INT64_MAX) rounds up to 2^63, which does not fit in an int64_t.
        if (std::isfinite(x) && x == std::floor(x) && x >= static_cast<double>(lo) && x <= static_cast<double>(hi) && x < 0x1p63)
            return static_cast<int64_t>(x);
    }
    if (!v.is_number_integer())
        fail(param, param + ": expected an integer, got " + type_name(v) + (v.is_number() ? " " + v.dump() : ""));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(param, param + ": " + v.dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
        fail(param,
             param + ": " + std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
}

}  // namespace strata::runtime::fields
