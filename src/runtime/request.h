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

// A prompt-only request (embeddings, reranking): nothing is generated. After the prompt the
// engine reports the last token's final-normed hidden row (embed: what last-token pooling
// embeds) and the logits of score_tokens at that position, then ends it with "stop".
struct Pooling {
    static constexpr size_t kMaxScoreTokens = 64;
    bool embed = false;
    std::vector<int32_t> score_tokens;
    bool any() const { return embed || !score_tokens.empty(); }
};

struct Request {
    std::string id;                                  // unique among the requests in flight
    std::vector<int32_t> prompt;                     // token ids, at least one
    SamplingParams sampling;                         // the sampler's knobs, max_tokens, stop strings and ids, ignore_eos
    std::shared_ptr<const JsonGrammar> grammar;      // constrained decoding (null: none)
    std::shared_ptr<const XmlCallGrammar> xml_call;  // or a forced XML tool call (xml_call_constraint.h)
    Pooling pooling;                                 // a prompt-only request (none: generate)
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
    // A prompt-only request's result (Request::pooling), just before its done: the hidden row
    // [n_embd] (empty unless embed) and the logits of its score_tokens, in their order.
    virtual void on_pooled(const std::string& id, const std::vector<float>& hidden, const std::vector<float>& token_logits) {
        (void)id;
        (void)hidden;
        (void)token_logits;
    }
    // The last event of a request. stop_reason: the stop string or token that ended it, if any.
    virtual void on_done(const std::string& id, FinishReason reason, const Usage& usage, const std::string& detail) = 0;
};

}  // namespace strata::runtime
