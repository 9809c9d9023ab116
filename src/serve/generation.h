// One generated output (one "choice") of an API request, run on the engine: submits the prompt,
// turns the engine's events into parsed output events (reasoning, content, tool calls), and
// enforces a thinking budget.
//
// Thinking budget (docs/api.md): the first engine request stops at "</think>" or after
// `thinking_budget` tokens; if the reasoning was cut off, the server closes it ("\n</think>\n\n")
// and a second engine request continues from prompt + reasoning + close (the prefix cache makes
// that cheap), with what is left of max_tokens. The client sees one answer.
//
// Forced tool calls: the prompt ends with the opening of a call ("<tool_call>\n"), which the
// output parser is fed first, and the engine's JSON constraint writes the call's JSON; the server
// closes the call ("\n</tool_call>") when the document is complete.
//
// Threading: the engine client's reader thread pushes events; the HTTP thread pulls them with
// next(). One Generation per choice; not copyable.
//
// The tail of a finished generation: the engine does not wait for a slow client, so what it has
// produced and the client has not yet taken waits in the Mailbox. Once every choice's last engine
// request has ended and that tail is at most a bound, the Mailbox says so (release_when_done: the
// request's admission slot goes back while its stream is still being written).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampling_params.h"
#include "runtime/usage.h"
#include "serve/output_parser.h"

namespace strata::tokenizer {
class Tokenizer;
}

namespace strata::serve {

class EngineClient;

struct GenerationSpec {
    std::string prompt_text;      // the rendered prompt (continuations are built on it)
    std::vector<int32_t> prompt;  // its tokens
    // The knobs and logprobs of every engine request of this choice; max_tokens and stop are set
    // for each (runtime::to_json writes the submit command).
    runtime::SamplingParams sampling;
    nlohmann::ordered_json response_format;  // engine form ({"type":"json_schema","schema":...}); null: none
    int64_t max_tokens = -1;                 // completion tokens in all (reasoning included); -1: to the context
    std::optional<int64_t> thinking_budget;
    std::vector<std::string> stop;  // the client's stop strings
    OutputFormat format = OutputFormat::Plain;
    ParserOptions parser;
    std::string forced_prefix;  // text the prompt already holds of the output ("<tool_call>\n")
    std::string forced_suffix;  // text that closes it when the engine's document is complete
};

using Usage = runtime::Usage;  // one for the engine's count and both APIs' reports

// One generated token's log-probability as the engine reported it (docs/protocol.md, `tokens`).
struct TokenLogprobs {
    std::string bytes;               // the token's raw bytes (a token can be part of a character)
    double logprob = 0;              // NaN where the engine wrote null (-inf)
    std::vector<TokenLogprobs> top;  // the alternatives asked for, most likely first (none of their own)
};

struct GenerationEvent {
    enum class Kind { Output, Done, Failed };
    Kind kind = Kind::Output;
    std::vector<OutputEvent> outputs;  // parsed events (possibly none; Done may carry the last ones)
    // Output: the tokens' logprobs when the request asked for them (possibly none: a tokens event
    // that only releases held-back text); nullopt otherwise.
    std::optional<std::vector<TokenLogprobs>> logprobs;
    int64_t tokens = 0;  // Output: tokens these events came from
    // Output: the engine admitted the request, reusing this many prompt tokens from the prefix
    // cache (the event carries nothing else); nullopt on other events.
    std::optional<int64_t> cached_tokens;
    // Done: "stop", "length", "cancelled", "context" (max_tokens was cut by the context window)
    std::string finish_reason;
    std::string stop_sequence;  // Done with a client stop string
    Usage usage;                // Done
    std::string error;          // Failed: what went wrong (the engine died mid-stream, ...)
    bool engine_lost = false;   // Failed: the engine died or was replaced (nothing wrong with the request)
};

// Events of the engine requests of one API request (its choices), in arrival order.
class Mailbox {
public:
    // `last_phase`: the event belongs to its choice's last engine request (its done or error ends
    // the choice's work in the engine; an error of any request does).
    void push(int slot, nlohmann::json event, bool last_phase);
    // The next event and the slot it belongs to; nullopt when none came before the deadline.
    std::optional<std::pair<int, nlohmann::json>> pop(std::chrono::steady_clock::time_point deadline);
    // Calls `release` once, on whichever thread sees it first, when the last engine request of
    // each of `choices` has ended and the events not yet popped hold at most `max_bytes` (an
    // estimate of their memory).
    void release_when_done(int choices, size_t max_bytes, std::function<void()> release);
    size_t buffered_bytes();

private:
    std::function<void()> take_release();  // with mu_ held: the release, when its time has come

    struct Queued {
        int slot;
        nlohmann::json event;
        size_t bytes;
    };
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Queued> events_;
    size_t bytes_ = 0;
    std::vector<char> ended_;  // per choice: its last engine request has ended
    int choices_ = 0;          // 0: no release armed
    size_t max_bytes_ = 0;
    std::function<void()> release_;
};

class Generation {
public:
    Generation(EngineClient& engine, const tokenizer::Tokenizer& tokenizer, std::string id, GenerationSpec spec,
               int64_t max_context, std::shared_ptr<Mailbox> mailbox, int slot);
    Generation(const Generation&) = delete;
    Generation& operator=(const Generation&) = delete;

    void start();
    // Turns one engine event of this generation into an event for the client (nullopt: nothing
    // to tell yet). Throws EngineBusy from start() when the engine's queue is full.
    std::optional<GenerationEvent> handle(const nlohmann::json& event);
    void cancel();                                     // asks the engine to stop (its done event still comes)
    bool engine_idle() const { return engine_done_; }  // no engine request in flight
    bool finished() const { return finished_; }
    void note_engine_event(const nlohmann::json& event);  // while draining after a cancel

private:
    void submit_phase(const std::string& prompt_text, const std::vector<int32_t>* prompt_ids, int64_t max_tokens,
                      bool stop_at_think_end);
    void feed(const std::string& text, GenerationEvent& out);

    EngineClient& engine_;
    const tokenizer::Tokenizer& tokenizer_;
    std::string id_;
    GenerationSpec spec_;
    int64_t max_context_;
    std::shared_ptr<Mailbox> mailbox_;
    int slot_;
    std::unique_ptr<OutputParser> parser_;
    std::vector<OutputEvent> pending_outputs_;  // parsed from the forced prefix, sent with the first event

    int phase_ = 0;              // 1: thinking phase under a budget, 2: after it, 0: single phase
    std::string phase_id_;       // the engine request running now
    std::string phase1_text_;    // output of the thinking phase
    bool in_reasoning_ = false;  // the parser is inside <think>
    bool clamped_by_context_ = false;
    Usage usage_;
    bool finished_ = false;
    bool engine_done_ = true;
};

// The choices of one API request: started together, their events read in arrival order, all
// cancelled (and drained, so no engine event outlives them) when the request ends early.
class GenerationGroup {
public:
    GenerationGroup() : mailbox_(std::make_shared<Mailbox>()) {}
    ~GenerationGroup() { cancel(); }
    Generation& add(EngineClient& engine, const tokenizer::Tokenizer& tokenizer, std::string id, GenerationSpec spec,
                    int64_t max_context);
    void start();  // EngineBusy: the choices already submitted are cancelled with the group
    // Gives the request's admission slot back early (Mailbox::release_when_done) once every
    // choice's engine work has ended and at most `max_tail_bytes` wait for the client.
    void release_when_done(size_t max_tail_bytes, std::function<void()> release);
    // The next client event and the choice it belongs to; nullopt after `timeout` with none.
    std::optional<std::pair<int, GenerationEvent>> next(std::chrono::milliseconds timeout);
    bool finished() const;
    void cancel();
    size_t size() const { return gens_.size(); }

private:
    std::shared_ptr<Mailbox> mailbox_;
    std::vector<std::unique_ptr<Generation>> gens_;
};

}  // namespace strata::serve
