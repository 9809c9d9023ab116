// One HTTP request being answered by the Server (shared by server.cpp, call_events.cpp and the API
// route files), and what its answer is made of: CallEvents, which Server::collect (whole answers)
// and Server::stream (SSE), both in call_events.cpp, hand to the route files' translators.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "serve/generation.h"
#include "serve/responses_request.h"
#include "serve/responses_store.h"
#include "serve/served_model.h"
#include "serve/server.h"

namespace strata::serve {

// How long a route waits for its next generation event before it looks again whether the client
// is still there.
constexpr auto kPoll = std::chrono::milliseconds(250);
// A stream gives its admission slot back when its generation has ended in the engine and at most
// this much of its output (the Mailbox's estimate of memory) waits for the client to read it.
constexpr size_t kMaxStreamTailBytes = size_t{1} << 20;
// A whole (not streamed) answer whose engine died is run again from its start this many times:
// nothing of it had reached the client.
constexpr int kMaxResubmits = 2;

struct Server::Call {
    ApiKind api = ApiKind::OpenAI;
    std::string request_id;
    std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
    int64_t created = 0;           // unix seconds
    std::function<bool()> closed;  // the connection's: true once the client has gone
    std::string client;            // admission fairness key
    std::string model;             // echoed to the client
    ChatRequest chat;
    CompletionRequest completion;
    // Responses API calls (responses_routes.cpp): the request, the items a continuation of this
    // response starts from (previous ones and this input), its id and its in-flight entry.
    ResponsesRequest responses;
    ojson response_context = ojson::array();
    std::string response_id;
    std::shared_ptr<ResponseStore::InFlight> flight;
    std::shared_ptr<void> flight_token;
    PreparedChat prepared;
    std::unique_ptr<GenerationGroup> group;
    std::shared_ptr<Admission::SharedTicket> ticket;  // released with the call, or earlier (a stream's tail)
    int resubmits = 0;                                // times a whole answer's generations were run again after the engine died
    std::vector<Usage> choice_usage;                  // each choice's, from its Done event (zeros until then)

    // What both APIs report: the prompt once, the first choice's cached tokens, the completion and
    // reasoning tokens of every choice.
    Usage usage() const {
        Usage total;
        total.prompt_tokens = prepared.prompt_tokens;
        if (!choice_usage.empty()) total.cached_tokens = choice_usage[0].cached_tokens;
        for (const Usage& u : choice_usage) {
            total.completion_tokens += u.completion_tokens;
            total.reasoning_tokens += u.reasoning_tokens;
        }
        return total;
    }

    // Latency bookkeeping (metrics).
    bool saw_token = false;
    std::chrono::steady_clock::time_point last_token;
    int64_t generated = 0;

    bool gone() const { return closed && closed(); }
    // Latency metrics of an event that brought `tokens` tokens (TTFT, inter-token gaps, counts).
    void note_tokens(Metrics& m, int64_t tokens) {
        if (tokens <= 0) return;
        const auto now = std::chrono::steady_clock::now();
        if (!saw_token) m.ttft.observe(seconds_since_arrival());
        else m.inter_token.observe(std::chrono::duration<double>(now - last_token).count());
        saw_token = true;
        last_token = now;
        generated += tokens;
        m.generation_tokens += static_cast<uint64_t>(tokens);
    }
    double seconds_since_arrival() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count();
    }
};

// One event of a call's generations as the API translators see it: what one choice produced (its
// text, reasoning and tool-call deltas and logprobs; at its Done the finish reason, stop sequence
// and usage) and whether it was the call's last. Failed events and a client that left are handled
// by collect / stream, never by a translator.
struct CallEvent : GenerationEvent {
    size_t choice = 0;
    bool last = false;  // the Done of the call's last choice; `total` is then Call::usage()
    Usage total;
};

// Where a stream translator writes: each write() is one chunk on the wire (false: the client is
// gone); finish() says the stream's last bytes are written, so it ends after this step.
class SseOut {
public:
    SseOut(net::DataSink& sink, bool& finished) : sink_(sink), finished_(finished) {}
    bool write(const std::string& text);
    void finish() { finished_ = true; }

private:
    net::DataSink& sink_;
    bool& finished_;
};

// A streamed answer in its API's wire format. begin: the first bytes (role chunks, the echoed
// prompt, message_start); event: one CallEvent; idle: nothing came within kPoll (pings). Each
// returns false when a write failed.
struct StreamTranslator {
    std::function<bool(SseOut&)> begin;
    std::function<bool(const CallEvent&, SseOut&)> event;
    std::function<bool(SseOut&)> idle = [](SseOut&) { return true; };
    // A generation failed mid-stream: the SSE that ends the stream (unset: api_stream_error).
    std::function<std::string(const std::string& message)> failed;
};

// n random characters from [A-Za-z0-9] (ids of requests, messages, tool calls).
std::string random_id(size_t n);

}  // namespace strata::serve
