// What a request asks of the sampler and of the end of its generation: one typed struct from the
// HTTP body to the Sampler (strata serve reads it from the body, writes it into the engine's submit
// command; the engine reads it back, the scheduler and the sampler run it), with one JSON form,
// one table of ranges and one reader that checks a client's values against them.
//
// Shapes:
//   JSON form (docs/protocol.md, `submit`): {"temperature": 0.7, "top_k": 40, "logit_bias":
//   {"15": -100}, "seed": 42, "logprobs": true, "top_logprobs": 3, "max_tokens": 256,
//   "stop": ["\n\n"], "stop_token_ids": [7], "ignore_eos": false, ...}; absent or null fields take
//   the defaults below, and to_json writes only the fields that differ from them.
//
// Ranges: kSamplingKnobs below is the one place each knob's name, type and range is written. The
// JSON reader checks what a client sent against it (in the HTTP APIs' words: "top_p: 1.5 is out of
// range [0.0, 1.0]"); validate() checks a typed struct against the same rows ("top_p must be in
// (0, 1] (got 1.5)": the scheduler and the sampler call it, for requests built in code too), so a
// value cannot pass one and fail the other. A knob
// added to the table is read from HTTP bodies and engine commands, written and checked with no
// other code; the sampler then uses it. The fields only the engine's form carries under these
// names (logprobs, top_logprobs, max_tokens, stop, stop_token_ids: each HTTP API has its own names
// and rules for them) are read and checked in sampling_params.cpp, with the same constants.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/json_fields.h"

namespace strata::runtime {

struct SamplingParams {
    // The sampler (runtime/sampler.h has the order they apply in, docs/sampling.md what they mean).
    float temperature = 1.0f;         // 0 (or < 1e-5): greedy (argmax, ties to the lower id)
    int32_t top_k = 0;                // 0: off
    float top_p = 1.0f;               // 1: off
    float min_p = 0.0f;               // 0: off; keep tokens with p >= min_p * p_max
    float repetition_penalty = 1.0f;  // 1: off; CTRL-style over prompt + generated tokens: logit>0 ? logit/r : logit*r
    float presence_penalty = 0.0f;    // OpenAI semantics, over generated tokens only: logit -= presence * (count>0)
    float frequency_penalty = 0.0f;   //   ... logit -= frequency * count
    std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logit of that id (repeated ids: summed, then added)
    std::optional<uint64_t> seed;                       // same seed + same logits => same tokens, whatever else the engine runs
    int32_t top_logprobs = 0;                           // 0..20 alternatives to report with each token
    bool logprobs = false;                              // report the chosen token's logprob

    // The end of the generation (the scheduler).
    int32_t max_tokens = -1;              // completion tokens; -1: until the context is full
    std::vector<std::string> stop;        // stop strings (not included in the output)
    std::vector<int32_t> stop_token_ids;  // extra ids that end generation (besides eos/eot)
    bool ignore_eos = false;              // keep going past eos/eot (benchmarks)
    bool speculative = true;              // drafts may be verified for it (the engine's --spec-ngram); false: never

    static constexpr float kGreedyTemperature = 1e-5f;  // below this, temperature means greedy
    static constexpr int32_t kMaxTopLogprobs = 20;
    static constexpr size_t kMaxLogitBias = 1024;      // entries
    static constexpr double kMaxAbsLogitBias = 100.0;  // logit_bias value range, as OpenAI's API
    static constexpr size_t kMaxStopTokenIds = 64;

    bool greedy() const { return temperature < kGreedyTemperature; }
    bool wants_logprobs() const { return logprobs || top_logprobs > 0; }
    bool has_penalties() const { return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f; }

    // Throws FieldError naming the field in the client's terms ("top_p must be in (0, 1]").
    // Stop strings as StopStringMatcher::validate; ids (logit_bias, stop_token_ids) inside n_vocab.
    void validate(int32_t n_vocab) const;

    bool operator==(const SamplingParams&) const = default;
};

// One knob that HTTP bodies and engine commands carry under the same name, in the order they are
// read (the order a body's errors are found in). Its range as the sampler takes it: [lo, hi], or
// (lo, hi] when lo_open. A client may still send lo of an open range where `at_lo` says what it
// means (top_p 0: the most likely token only, kept as 1e-6); otherwise lo itself is refused
// ("repetition_penalty: must be > 0"). Integers: a client's -1 means lo where minus_one_is_lo
// (top_k -1: off, as in vLLM).
struct SamplingKnob {
    enum class Kind { Real, Integer, Seed, Flag, LogitBias };
    Kind kind;
    const char* name;
    float SamplingParams::*real = nullptr;       // Real
    int32_t SamplingParams::*integer = nullptr;  // Integer
    bool SamplingParams::*flag = nullptr;        // Flag
    double lo = 0, hi = 0;                       // Real, Integer
    bool lo_open = false;
    double at_lo = std::numeric_limits<double>::quiet_NaN();  // NaN: lo of an open range is refused
    bool minus_one_is_lo = false;
};

inline constexpr double kMaxTemperature = 2.0;  // OpenAI's range; Anthropic's API narrows it to 1 (SamplingReadOptions)
inline constexpr SamplingKnob kSamplingKnobs[] = {
    {.kind = SamplingKnob::Kind::Real,
     .name = "temperature",
     .real = &SamplingParams::temperature,
     .lo = 0,
     .hi = kMaxTemperature},
    {.kind = SamplingKnob::Kind::Real,
     .name = "top_p",
     .real = &SamplingParams::top_p,
     .lo = 0,
     .hi = 1,
     .lo_open = true,
     .at_lo = 1e-6},
    {.kind = SamplingKnob::Kind::Integer,
     .name = "top_k",
     .integer = &SamplingParams::top_k,
     .lo = 0,
     .hi = 1 << 20,
     .minus_one_is_lo = true},
    {.kind = SamplingKnob::Kind::Real, .name = "min_p", .real = &SamplingParams::min_p, .lo = 0, .hi = 1},
    {.kind = SamplingKnob::Kind::Seed, .name = "seed"},
    {.kind = SamplingKnob::Kind::Real, .name = "presence_penalty", .real = &SamplingParams::presence_penalty, .lo = -2, .hi = 2},
    {.kind = SamplingKnob::Kind::Real,
     .name = "frequency_penalty",
     .real = &SamplingParams::frequency_penalty,
     .lo = -2,
     .hi = 2},
    {.kind = SamplingKnob::Kind::Real,
     .name = "repetition_penalty",
     .real = &SamplingParams::repetition_penalty,
     .lo = 0,
     .hi = 10,
     .lo_open = true},
    // An extension (vLLM's too): generate past end-of-sequence, so benchmarks get exact lengths.
    {.kind = SamplingKnob::Kind::Flag, .name = "ignore_eos", .flag = &SamplingParams::ignore_eos},
    // Ours: false keeps this request out of speculative decoding (it never changes the output,
    // only how many positions a step computes for it).
    {.kind = SamplingKnob::Kind::Flag, .name = "speculative", .flag = &SamplingParams::speculative},
    // {"id": bias}: at most kMaxLogitBias entries, ids inside the vocabulary, bias in [-100, 100].
    {.kind = SamplingKnob::Kind::LogitBias,
     .name = "logit_bias",
     .lo = -SamplingParams::kMaxAbsLogitBias,
     .hi = SamplingParams::kMaxAbsLogitBias},
};

// How a client's JSON is read. Defaults: the engine protocol's; the HTTP APIs narrow them.
struct SamplingReadOptions {
    double max_temperature = kMaxTemperature;
    size_t max_logit_bias = SamplingParams::kMaxLogitBias;
    int64_t n_vocab = 0;  // token ids must be below it; 0: not known (ids up to INT32_MAX pass)
};

// The knobs (kSamplingKnobs) from `body` into `out`, each checked as it is read. Throws FieldError
// (runtime/json_fields.h: the HTTP APIs' words, which the engine's error events use too).
void read_sampling_knobs(const nlohmann::ordered_json& body, SamplingParams& out, const SamplingReadOptions& options);

// The whole JSON form: the knobs, then logprobs, top_logprobs, max_tokens, stop, stop_token_ids;
// validate()d against n_vocab. Throws FieldError.
SamplingParams sampling_from_json(const nlohmann::ordered_json& body, int32_t n_vocab);
// Fields that differ from the defaults, in the table's order; floats as their shortest decimal
// (0.7f is written 0.7), so sampling_from_json gives back the same struct.
nlohmann::ordered_json to_json(const SamplingParams& params);

}  // namespace strata::runtime
