// The one place a call's generations are driven from (server.h, server_call.h): wait for the next
// event while watching the client, cancel when it leaves or a generation fails, keep the usage and
// latency metrics, and hand CallEvents to the route files' translators, whole or streamed.
//
// When the client is looked at: before each wait of up to kPoll and after it, so a client that
// left stops its work within one poll, whether or not events were coming.

#include <cstdio>

#include "net/http.h"
#include "serve/api_shapes.h"
#include "serve/server_call.h"

namespace strata::serve {

namespace {

const char* metrics_api(ApiKind api) { return api == ApiKind::Anthropic ? "anthropic" : "openai"; }

}  // namespace

bool SseOut::write(const std::string& text) { return sink_.write(text.data(), text.size()); }

Server::Wait Server::next_event(Call& call, CallEvent& out) {
    if (call.gone()) {
        call.group->cancel();
        return Wait::Gone;
    }
    auto e = call.group->next(kPoll);
    if (call.gone()) {
        call.group->cancel();
        return Wait::Gone;
    }
    if (!e) return Wait::Idle;
    out.choice = static_cast<size_t>(e->first);
    static_cast<GenerationEvent&>(out) = std::move(e->second);
    call.note_tokens(metrics_, out.tokens);
    if (out.kind == GenerationEvent::Kind::Failed) {
        call.group->cancel();
        return Wait::Event;
    }
    if (out.kind == GenerationEvent::Kind::Done) {
        call.choice_usage.at(out.choice) = out.usage;
        if (call.group->finished()) {
            out.last = true;
            out.total = call.usage();
            call_finished(call, out.total);
        }
    }
    return Wait::Event;
}

void Server::call_finished(const Call& call, const Usage& usage) {
    metrics_.e2e.observe(call.seconds_since_arrival());
    metrics_.cached_prompt_tokens += static_cast<uint64_t>(usage.cached_tokens);
}

// Events are kept until every choice is done, so that a run lost with the engine can start again
// from nothing: the client has seen none of it.
bool Server::collect(Call& call, net::Response& res, const std::function<void(const CallEvent&)>& on_event) {
    std::vector<CallEvent> events;
    while (!call.group->finished()) {
        CallEvent e;
        switch (next_event(call, e)) {
            case Wait::Gone:
                metrics_.count_request(metrics_api(call.api), "cancelled");
                res.status = 499;
                return false;
            case Wait::Idle: continue;
            case Wait::Event: break;
        }
        if (e.kind == GenerationEvent::Kind::Failed) {
            if (e.engine_lost && call.resubmits < kMaxResubmits) {
                ++call.resubmits;
                std::fprintf(stderr, "serve: %s: %s; running it again (%d of %d)\n", call.request_id.c_str(), e.error.c_str(),
                             call.resubmits, kMaxResubmits);
                events.clear();
                make_generations(call, true);
                continue;
            }
            // Counted by fail_call, by its status.
            if (e.engine_lost) {
                ApiError lost(503, "generation failed: " + e.error + " (" + std::to_string(call.resubmits + 1) + " times)");
                lost.retry_after_s = 1;
                throw lost;
            }
            throw ApiError(500, "generation failed: " + e.error);
        }
        events.push_back(std::move(e));
    }
    for (const CallEvent& e : events) on_event(e);
    return true;
}

void Server::stream(std::shared_ptr<Call> call, net::Response& res, StreamTranslator translator) {
    struct State {
        bool started = false, finished = false;
    };
    auto st = std::make_shared<State>();
    // The slot goes back when the engine's work is done and the tail is small, however slowly
    // the client reads the rest.
    if (call->ticket) call->group->release_when_done(kMaxStreamTailBytes, [ticket = call->ticket] { ticket->release(); });
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, call, st, t = std::move(translator)](size_t, net::DataSink& sink) {
            SseOut out(sink, st->finished);
            if (!st->started) {
                st->started = true;
                if (!t.begin(out)) return false;
            }
            if (st->finished) {
                sink.done();
                return true;
            }
            CallEvent e;
            switch (next_event(*call, e)) {
                case Wait::Gone: return false;  // end_stream counts it cancelled
                case Wait::Idle: return t.idle(out);
                case Wait::Event: break;
            }
            if (e.kind == GenerationEvent::Kind::Failed) {
                metrics_.count_request(metrics_api(call->api), "error");
                const std::string message = "generation failed: " + e.error;
                out.write(t.failed ? t.failed(message) : api_stream_error(call->api, message));
                st->finished = true;
                sink.done();
                return true;
            }
            if (e.last && call->ticket) call->ticket->release();  // a tail over the bound: once it is read
            if (!t.event(e, out)) return false;
            if (st->finished) sink.done();
            return true;
        },
        [this, call, st](bool) { end_stream(*call, st->finished); });
}

}  // namespace strata::serve
