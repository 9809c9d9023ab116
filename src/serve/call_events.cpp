// The one place a call's generations are driven from (server.h, server_call.h): wait for the next
// event while watching the client, cancel when it leaves or a generation fails, keep the usage and
// latency metrics, and hand CallEvents to the route files' translators, whole or streamed.
//
// When the client is looked at: before each wait of up to kPoll and after it, so a client that
// left stops its work within one poll, whether or not events were coming.
#include <httplib.h>

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

bool Server::collect(Call& call, httplib::Response& res, const std::function<void(const CallEvent&)>& on_event) {
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
            metrics_.count_request(metrics_api(call.api), "error");
            throw ApiError(500, "generation failed: " + e.error);
        }
        on_event(e);
    }
    return true;
}

void Server::stream(std::shared_ptr<Call> call, httplib::Response& res, StreamTranslator translator) {
    struct State {
        bool started = false, finished = false;
    };
    auto st = std::make_shared<State>();
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, call, st, t = std::move(translator)](size_t, httplib::DataSink& sink) {
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
            if (!t.event(e, out)) return false;
            if (st->finished) sink.done();
            return true;
        },
        [this, call, st](bool) { end_stream(*call, st->finished); });
}

}  // namespace strata::serve
