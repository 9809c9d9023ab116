// SamplingParams' one JSON form and one set of ranges: to_json / sampling_from_json round trips
// (floats as written, repeated logit_bias ids, seeds over all 64 bits), only non-defaults written,
// each range error naming its field in the reader's words, the knob table's ranges agreeing
// between the reader and validate() at and just past every end, and the engine-only fields.
#include "runtime/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "util/error.h"

namespace strata::runtime {
namespace sampling_params_test {

using ojson = nlohmann::ordered_json;
constexpr int32_t kVocab = 151936;

SamplingParams read(const std::string& text, int32_t n_vocab = kVocab) { return sampling_from_json(ojson::parse(text), n_vocab); }

// The reader refuses `text` with a FieldError whose param is `param` and whose message is `message`.
testing::AssertionResult refused(const std::string& text, const std::string& param, const std::string& message,
                                 const SamplingReadOptions& options = {}) {
    try {
        SamplingParams p;
        read_sampling_knobs(ojson::parse(text), p, options);
        sampling_from_json(ojson::parse(text), kVocab);
    } catch (const FieldError& e) {
        if (e.param != param)
            return testing::AssertionFailure()
                   << "param \"" << e.param << "\" (" << e.what() << "), expected \"" << param << "\"";
        if (e.what() != message)
            return testing::AssertionFailure() << "message \"" << e.what() << "\", expected \"" << message << "\"";
        return testing::AssertionSuccess();
    }
    return testing::AssertionFailure() << text << " was accepted";
}

TEST(SamplingParamsJson, DefaultsWriteNothingAndReadBack) {
    EXPECT_EQ(to_json(SamplingParams{}).dump(), "{}");
    EXPECT_EQ(read("{}"), SamplingParams{});
    // Explicit defaults and nulls read as the defaults.
    EXPECT_EQ(read(R"({"temperature": 1, "top_k": 0, "seed": null, "stop": null, "logit_bias": null, "max_tokens": -1})"),
              SamplingParams{});
}

TEST(SamplingParamsJson, RoundTripsEveryField) {
    SamplingParams p;
    p.temperature = 0.7f;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    p.repetition_penalty = 1.1f;
    p.presence_penalty = -1.5f;
    p.frequency_penalty = 0.3f;
    p.logit_bias = {{15, -100.0f}, {7, 5.5f}, {15, 0.25f}, {15, 1.0f}};  // repeated ids stay entries
    p.seed = UINT64_MAX;                                                 // written in the signed range: the same 64 bits
    p.logprobs = true;
    p.top_logprobs = 3;
    p.max_tokens = 256;
    p.stop = {"\n\n", "END"};
    p.stop_token_ids = {7, 9};
    p.ignore_eos = true;
    const ojson j = to_json(p);
    EXPECT_EQ(sampling_from_json(j, kVocab), p) << j.dump();
    // What the client wrote, not the float's double expansion.
    EXPECT_EQ(j["temperature"].dump(), "0.7");
    EXPECT_EQ(j["top_p"].dump(), "0.9");
    EXPECT_EQ(j["seed"].get<int64_t>(), -1);
    EXPECT_EQ(j["logit_bias"].dump(), R"({"15":-100.0,"7":5.5,"015":0.25,"0015":1.0})");
    for (uint64_t seed : {uint64_t{0}, uint64_t{42}, uint64_t{1} << 63, (uint64_t{1} << 63) - 1}) {
        p.seed = seed;
        EXPECT_EQ(sampling_from_json(to_json(p), kVocab).seed, seed);
    }
}

TEST(SamplingParamsJson, FloatsRoundTripExactly) {
    // Every float the reader can give back as a value it wrote (shortest decimal, else the double).
    SamplingParams p;
    for (float t : {1e-6f, 0.1f, 0.3f, 0.7f, 1.9999999f, 2.0f, 1.1754944e-38f, 0.33333334f}) {
        p.temperature = t;
        EXPECT_EQ(sampling_from_json(to_json(p), kVocab).temperature, t) << t;
    }
}

TEST(SamplingParamsJson, ClientAliases) {
    EXPECT_FLOAT_EQ(read(R"({"top_p": 0})").top_p, 1e-6f);                         // 0: the most likely token only
    EXPECT_FLOAT_EQ(read(R"({"top_p": 1e-308})").top_p, 1e-6f);                    // 0 as a float: the same
    EXPECT_GT(read(R"({"repetition_penalty": 1e-40})").repetition_penalty, 0.0f);  // a denormal float: kept
    EXPECT_EQ(read(R"({"top_k": -1})").top_k, 0);                                  // -1: off, as in vLLM
    EXPECT_EQ(read(R"({"top_k": 8.0})").top_k, 8);                                 // a whole number written as a float
    EXPECT_EQ(read(R"({"seed": -42})").seed, static_cast<uint64_t>(-42));
    EXPECT_EQ(read(R"({"stop": "###"})").stop, std::vector<std::string>{"###"});
    EXPECT_EQ(read(R"({"logit_bias": {"5": 1, "05": 2}})").logit_bias,
              (std::vector<std::pair<int32_t, float>>{{5, 1.0f}, {5, 2.0f}}));
}

TEST(SamplingParamsJson, RangeErrorsNameTheField) {
    EXPECT_TRUE(refused(R"({"temperature": 2.5})", "temperature", "temperature: 2.5 is out of range [0.0, 2.0]"));
    EXPECT_TRUE(refused(R"({"temperature": "hot"})", "temperature", "temperature: expected a number, got a string"));
    EXPECT_TRUE(
        refused(R"({"temperature": 1.5})", "temperature", "temperature: 1.5 is out of range [0.0, 1.0]", {.max_temperature = 1}));
    EXPECT_TRUE(refused(R"({"top_p": -0.1})", "top_p", "top_p: -0.1 is out of range [0.0, 1.0]"));
    EXPECT_TRUE(refused(R"({"top_k": -2})", "top_k", "top_k: -2 is out of range [-1, 1048576]"));
    EXPECT_TRUE(refused(R"({"top_k": 1.5})", "top_k", "top_k: expected an integer, got a number 1.5"));
    EXPECT_TRUE(refused(R"({"repetition_penalty": 0})", "repetition_penalty", "repetition_penalty: must be > 0"));
    // Above 0 as a double, 0 as the sampler's float: refused here, not by the engine (a 500).
    EXPECT_TRUE(refused(R"({"repetition_penalty": 1e-308})", "repetition_penalty",
                        "repetition_penalty: 1e-308 is too small (the smallest value above 0 is 1.4013e-45)"));
    EXPECT_TRUE(
        refused(R"({"repetition_penalty": 11})", "repetition_penalty", "repetition_penalty: 11 is out of range [0.0, 10.0]"));
    EXPECT_TRUE(refused(R"({"presence_penalty": -3})", "presence_penalty", "presence_penalty: -3 is out of range [-2.0, 2.0]"));
    EXPECT_TRUE(refused(R"({"seed": 18446744073709551615})", "seed",
                        "seed: 18446744073709551615 is out of range [-9223372036854775808, 9223372036854775807]"));
    EXPECT_TRUE(refused(R"({"ignore_eos": 1})", "ignore_eos", "ignore_eos: expected a boolean, got a number"));
    EXPECT_TRUE(refused(R"({"logit_bias": [1]})", "logit_bias", "logit_bias: expected an object, got an array"));
    EXPECT_TRUE(refused(R"({"logit_bias": {"12x": 1}})", "logit_bias", "logit_bias: key \"12x\" is not a token id"));
    EXPECT_TRUE(refused(R"({"logit_bias": {"15": 101}})", "logit_bias.15", "logit_bias.15: 101 is out of range [-100.0, 100.0]"));
    EXPECT_TRUE(refused(R"({"logit_bias": {"999999": 1}})", "logit_bias",
                        "logit_bias: token id 999999 is outside the vocabulary (151936)", {.n_vocab = kVocab}));
    ojson many = ojson::object();
    for (int i = 0; i < 1025; ++i) many[std::to_string(i)] = 1;
    EXPECT_TRUE(refused(ojson{{"logit_bias", many}}.dump(), "logit_bias", "logit_bias: more than 1024 entries"));
    // The first bad field in the table's order is the one named.
    EXPECT_TRUE(refused(R"({"min_p": 2, "top_k": -5})", "top_k", "top_k: -5 is out of range [-1, 1048576]"));
}

TEST(SamplingParamsJson, EngineOnlyFields) {
    EXPECT_THROW(read(R"({"top_logprobs": 21})"), FieldError);
    EXPECT_THROW(read(R"({"max_tokens": -2})"), FieldError);
    EXPECT_THROW(read(R"({"stop": [1]})"), FieldError);
    EXPECT_THROW(read(R"({"stop": 5})"), FieldError);
    EXPECT_THROW(read(R"({"stop": [""]})"), FieldError);
    EXPECT_THROW(read(R"({"stop": ")" + std::string(257, 's') + R"("})"), FieldError);
    EXPECT_THROW(read(R"({"stop_token_ids": [200000]})"), FieldError);
    EXPECT_THROW(read(R"({"stop_token_ids": 5})"), FieldError);
    EXPECT_THROW(read(R"({"logit_bias": {"999999": 1}})"), FieldError);
    EXPECT_EQ(read(R"({"stop_token_ids": [1, 2]})").stop_token_ids, (std::vector<int32_t>{1, 2}));
}

// For every knob of the table: the reader and validate() agree at both ends and just past them,
// so no value passes one check and fails the other.
TEST(SamplingParamsJson, TableRangesAgreeWithValidate) {
    for (const SamplingKnob& k : kSamplingKnobs) {
        if (k.kind != SamplingKnob::Kind::Real && k.kind != SamplingKnob::Kind::Integer) continue;
        const double step = k.kind == SamplingKnob::Kind::Real ? 1e-3 : 1;
        for (double x : {k.lo, k.hi, k.lo - step, k.hi + step, (k.lo + k.hi) / 2}) {
            if (k.kind == SamplingKnob::Kind::Integer) x = std::floor(x);
            ojson body = ojson::object();
            body[k.name] = k.kind == SamplingKnob::Kind::Integer ? ojson(static_cast<int64_t>(x)) : ojson(x);
            bool reader_ok = true;
            SamplingParams p;
            try {
                read_sampling_knobs(body, p, {});
            } catch (const FieldError& e) {
                reader_ok = false;
                EXPECT_EQ(e.param, k.name);
            }
            const bool inside = x >= k.lo && x <= k.hi;
            const double json_lo = k.minus_one_is_lo ? -1 : k.lo;  // what a client may send
            const bool lo_refused = k.lo_open && x <= k.lo && std::isnan(k.at_lo);
            EXPECT_EQ(reader_ok, x >= json_lo && x <= k.hi && !lo_refused) << k.name << " " << x;
            if (reader_ok) {
                EXPECT_NO_THROW(p.validate(kVocab)) << k.name << " " << x;  // lo of an open range reads as its alias
            }
            SamplingParams typed;
            if (k.kind == SamplingKnob::Kind::Real) typed.*k.real = static_cast<float>(x);
            else typed.*k.integer = static_cast<int32_t>(x);
            const bool typed_ok = inside && !(k.lo_open && x <= k.lo);
            if (typed_ok) {
                EXPECT_NO_THROW(typed.validate(kVocab)) << k.name << " " << x;
            } else {
                EXPECT_THROW(typed.validate(kVocab), FieldError) << k.name << " " << x;
            }
        }
    }
}

}  // namespace sampling_params_test
}  // namespace strata::runtime
