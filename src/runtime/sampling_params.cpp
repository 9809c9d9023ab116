// The one reader, writer and check of SamplingParams (contract in sampling_params.h).
#include "runtime/sampling_params.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <unordered_map>

#include "runtime/stop_strings.h"

namespace strata::runtime {

using ojson = nlohmann::ordered_json;

namespace {

const SamplingParams kDefaultSampling;

// A number in validate()'s messages: whole numbers in full ("1048576"), others as %g ("1.5", "nan").
std::string shortest(double v) {
    char buf[64];
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
    else std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

// A float as the shortest decimal that reads back as the same float (0.7f: 0.7, not
// 0.699999988079071), so the engine's command says what the client wrote.
ojson float_value(float f) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf - 1, f);
    if (ec == std::errc()) {
        *end = '\0';
        const double d = std::strtod(buf, nullptr);
        if (static_cast<float>(d) == f) return d;
    }
    return static_cast<double>(f);
}

bool is_temperature(const SamplingKnob& k) { return k.real == &SamplingParams::temperature; }

// {"id": bias} in the client's order; the same id twice (keys "5" and "05") is two entries.
void read_logit_bias(const ojson& v, const SamplingKnob& k, SamplingParams& out, const SamplingReadOptions& options) {
    fields::need_object(v, k.name);
    if (v.size() > options.max_logit_bias)
        fields::fail(k.name, std::string(k.name) + ": more than " + std::to_string(options.max_logit_bias) + " entries");
    const int64_t id_end = options.n_vocab > 0 ? options.n_vocab : int64_t{INT32_MAX} + 1;
    out.logit_bias.clear();
    for (const auto& [key, val] : v.items()) {
        char* end = nullptr;
        const long id = std::strtol(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX)
            fields::fail(k.name, std::string(k.name) + ": key \"" + key + "\" is not a token id");
        if (id >= id_end)
            fields::fail(k.name, std::string(k.name) + ": token id " + std::to_string(id) + " is outside the vocabulary (" +
                                     std::to_string(options.n_vocab) + ")");
        const double bias = fields::need_number(val, std::string(k.name) + "." + key, k.lo, k.hi);
        out.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
    }
}

ojson logit_bias_json(const std::vector<std::pair<int32_t, float>>& bias) {
    ojson out = ojson::object();
    std::unordered_map<int32_t, size_t> seen;  // a repeated id gets one more leading zero each time, so it stays an entry
    for (const auto& [id, b] : bias) out[std::string(seen[id]++, '0') + std::to_string(id)] = float_value(b);
    return out;
}

void check_range(const SamplingKnob& k, double x) {
    const bool ok = x >= k.lo && x <= k.hi && !(k.lo_open && x <= k.lo);
    if (!ok)
        throw FieldError(k.name, std::string(k.name) + " must be in " + (k.lo_open ? "(" : "[") + shortest(k.lo) + ", " +
                                     shortest(k.hi) + "] (got " + shortest(x) + ")");
}

}  // namespace

void read_sampling_knobs(const ojson& body, SamplingParams& out, const SamplingReadOptions& options) {
    for (const SamplingKnob& k : kSamplingKnobs) {
        const ojson* v = fields::find(body, k.name);
        if (v == nullptr) continue;
        switch (k.kind) {
            case SamplingKnob::Kind::Real: {
                double x =
                    fields::need_number(*v, k.name, k.lo, is_temperature(k) ? std::min(k.hi, options.max_temperature) : k.hi);
                // The sampler takes 32-bit floats: a value above lo can round to it (1e-308 is 0).
                const bool at_lo = x <= k.lo || static_cast<float>(x) <= static_cast<float>(k.lo);
                if (k.lo_open && at_lo) {
                    if (std::isnan(k.at_lo)) {
                        if (x <= k.lo) fields::fail(k.name, std::string(k.name) + ": must be > " + shortest(k.lo));
                        fields::fail(k.name, std::string(k.name) + ": " + shortest(x) +
                                                 " is too small (the smallest value above " + shortest(k.lo) + " is " +
                                                 shortest(std::numeric_limits<float>::denorm_min()) + ")");
                    }
                    x = k.at_lo;
                }
                out.*k.real = static_cast<float>(x);
                break;
            }
            case SamplingKnob::Kind::Integer: {
                const int64_t x =
                    fields::need_int(*v, k.name, k.minus_one_is_lo ? -1 : static_cast<int64_t>(k.lo), static_cast<int64_t>(k.hi));
                out.*k.integer = static_cast<int32_t>(x == -1 && k.minus_one_is_lo ? static_cast<int64_t>(k.lo) : x);
                break;
            }
            case SamplingKnob::Kind::Seed:
                out.seed = static_cast<uint64_t>(fields::need_int(*v, k.name, INT64_MIN, INT64_MAX));
                break;
            case SamplingKnob::Kind::Flag: out.*k.flag = fields::need_bool(*v, k.name); break;
            case SamplingKnob::Kind::LogitBias: read_logit_bias(*v, k, out, options); break;
        }
    }
}

SamplingParams sampling_from_json(const ojson& body, int32_t n_vocab) {
    SamplingParams p;
    SamplingReadOptions options;
    options.n_vocab = n_vocab;
    read_sampling_knobs(body, p, options);
    if (const ojson* v = fields::find(body, "logprobs")) p.logprobs = fields::need_bool(*v, "logprobs");
    if (const ojson* v = fields::find(body, "top_logprobs"))
        p.top_logprobs = static_cast<int32_t>(fields::need_int(*v, "top_logprobs", 0, SamplingParams::kMaxTopLogprobs));
    if (const ojson* v = fields::find(body, "max_tokens"))
        p.max_tokens = static_cast<int32_t>(fields::need_int(*v, "max_tokens", -1, INT32_MAX));
    if (const ojson* v = fields::find(body, "stop")) {
        if (v->is_string()) {
            p.stop.push_back(v->get<std::string>());
        } else if (v->is_array()) {
            for (size_t i = 0; i < v->size(); ++i) {
                const ojson& e = (*v)[i];
                const std::string param = "stop[" + std::to_string(i) + "]";
                if (!e.is_string()) fields::fail(param, param + ": expected a string, got " + fields::type_name(e));
                p.stop.push_back(e.get<std::string>());
            }
        } else {
            fields::fail("stop", "stop: expected a string or an array of strings, got " + fields::type_name(*v));
        }
    }
    if (const ojson* v = fields::find(body, "stop_token_ids")) {
        if (!v->is_array())
            fields::fail("stop_token_ids", "stop_token_ids: expected an array of token ids, got " + fields::type_name(*v));
        if (v->size() > SamplingParams::kMaxStopTokenIds)
            fields::fail("stop_token_ids",
                         "stop_token_ids: more than " + std::to_string(SamplingParams::kMaxStopTokenIds) + " entries");
        for (size_t i = 0; i < v->size(); ++i)
            p.stop_token_ids.push_back(
                static_cast<int32_t>(fields::need_int((*v)[i], "stop_token_ids[" + std::to_string(i) + "]", 0, INT32_MAX)));
    }
    p.validate(n_vocab);
    return p;
}

ojson to_json(const SamplingParams& p) {
    ojson j = ojson::object();
    for (const SamplingKnob& k : kSamplingKnobs) {
        switch (k.kind) {
            case SamplingKnob::Kind::Real:
                if (p.*k.real != kDefaultSampling.*k.real) j[k.name] = float_value(p.*k.real);
                break;
            case SamplingKnob::Kind::Integer:
                if (p.*k.integer != kDefaultSampling.*k.integer) j[k.name] = p.*k.integer;
                break;
            case SamplingKnob::Kind::Seed:
                if (p.seed) j[k.name] = static_cast<int64_t>(*p.seed);  // the same 64 bits, in the signed range the reader takes
                break;
            case SamplingKnob::Kind::Flag:
                if (p.*k.flag != kDefaultSampling.*k.flag) j[k.name] = p.*k.flag;
                break;
            case SamplingKnob::Kind::LogitBias:
                if (!p.logit_bias.empty()) j[k.name] = logit_bias_json(p.logit_bias);
                break;
        }
    }
    if (p.logprobs) j["logprobs"] = true;
    if (p.top_logprobs != 0) j["top_logprobs"] = p.top_logprobs;
    if (p.max_tokens != kDefaultSampling.max_tokens) j["max_tokens"] = p.max_tokens;
    if (!p.stop.empty()) j["stop"] = p.stop;
    if (!p.stop_token_ids.empty()) j["stop_token_ids"] = p.stop_token_ids;
    return j;
}

void SamplingParams::validate(int32_t n_vocab) const {
    if (n_vocab <= 0) throw Error("sampling: the vocabulary is empty");
    for (const SamplingKnob& k : kSamplingKnobs) {
        switch (k.kind) {
            case SamplingKnob::Kind::Real: check_range(k, this->*k.real); break;
            case SamplingKnob::Kind::Integer: check_range(k, this->*k.integer); break;
            case SamplingKnob::Kind::Seed:
            case SamplingKnob::Kind::Flag: break;
            case SamplingKnob::Kind::LogitBias:
                if (logit_bias.size() > kMaxLogitBias)
                    throw FieldError(k.name, "logit_bias has more than " + std::to_string(kMaxLogitBias) + " entries");
                for (const auto& [id, bias] : logit_bias) {
                    if (id < 0 || id >= n_vocab)
                        throw FieldError(k.name, "logit_bias token id " + std::to_string(id) + " is outside the vocabulary (" +
                                                     std::to_string(n_vocab) + ")");
                    if (!(std::fabs(bias) <= k.hi))
                        throw FieldError(k.name, "logit_bias value for token id " + std::to_string(id) + " must be in [" +
                                                     shortest(k.lo) + ", " + shortest(k.hi) + "] (got " + shortest(bias) + ")");
                }
                break;
        }
    }
    if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs)
        throw FieldError("top_logprobs", "top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "] (got " +
                                             std::to_string(top_logprobs) + ")");
    if (max_tokens < -1)
        throw FieldError("max_tokens",
                         "max_tokens must be -1 (up to the context) or more (got " + std::to_string(max_tokens) + ")");
    try {
        StopStringMatcher::validate(stop);
    } catch (const Error& e) {
        throw FieldError("stop", e.what());
    }
    if (stop_token_ids.size() > kMaxStopTokenIds)
        throw FieldError("stop_token_ids", "stop_token_ids has more than " + std::to_string(kMaxStopTokenIds) + " entries");
    for (int32_t t : stop_token_ids)
        if (t < 0 || t >= n_vocab)
            throw FieldError("stop_token_ids", "stop token id " + std::to_string(t) + " is outside the vocabulary (" +
                                                   std::to_string(n_vocab) + ")");
}

}  // namespace strata::runtime
