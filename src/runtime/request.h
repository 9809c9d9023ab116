// What a client asks the engine for, and what the engine tells it back. The same types serve
// the in-process API (Scheduler) and the line protocol of `strata engine` (docs/protocol.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/usage.h"

namespace strata::runtime {

class JsonGrammar;
class XmlCallGrammar;

struct Request {
    std::string id;                                  // unique among the requests in flight
    std::vector<int32_t> prompt;                     // token ids, at least one
    SamplingParams sampling;                         // the sampler's knobs, max_tokens, stop strings and ids, ignore_eos
    std::shared_ptr<const JsonGrammar> grammar;      // constrained decoding (null: none)
    std::shared_ptr<const XmlCallGrammar> xml_call;  // or a forced XML tool call (xml_call_constraint.h)
};

// One generated token as reported to the client.
struct GeneratedToken {
    int32_t id = -1;
    float logprob = 0;              // valid when the request asked for logprobs
    std::vector<TokenLogprob> top;  // top_logprobs alternatives
};

enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);

// Receives a request's output. Called on the engine's thread; must not block for long.
class EventSink {
public:
    virtual ~EventSink() = default;
    // New tokens of one step and the text they made safe to emit (may be empty: held back as a
    // possible stop string or an unfinished UTF-8 character).
    virtual void on_tokens(const std::string& id, const std::vector<GeneratedToken>& tokens, const std::string& text) = 0;
    // The request was admitted for the first time: its prompt tokens reused from the prefix cache
    // (the usage's cached_tokens, known before any output).
    virtual void on_admitted(const std::string& id, int64_t cached_tokens) {
        (void)id;
        (void)cached_tokens;
    }
    // The last event of a request. stop_reason: the stop string or token that ended it, if any.
    virtual void on_done(const std::string& id, FinishReason reason, const Usage& usage, const std::string& detail) = 0;
};

}  // namespace strata::runtime
