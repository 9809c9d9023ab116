// Anthropic answers: /v1/messages, whole or streamed as named server-sent events in the order
// clients check (message_start, content blocks, message_delta with cumulative usage,
// message_stop; ping while nothing else is sent). docs/api.md has the shapes. Only translation
// lives here: Server::collect and Server::stream (call_events.cpp) drive the generations.

#include <algorithm>

#include "net/http.h"
#include "serve/api_shapes.h"
#include "serve/json_scanner.h"
#include "serve/server_call.h"

namespace strata::serve {

using nlohmann::json;

namespace {

constexpr auto kPingEvery = std::chrono::seconds(5);

std::string sse(const char* event, const json& data) {
    return std::string("event: ") + event + "\ndata: " + dump_json(data) + "\n\n";
}

const char* stop_reason(const std::string& finish, bool tool_use, bool stop_sequence) {
    if (tool_use) return "tool_use";
    if (finish == "length") return "max_tokens";
    if (finish == "context") return "model_context_window_exceeded";
    return stop_sequence ? "stop_sequence" : "end_turn";
}

// A tool_use block's input: the arguments object. A call cut by max_tokens has its arguments
// closed first (JsonCloser: the partial object as far as it can be kept, or {}), the same text the
// streamed input_json_deltas add up to.
json tool_input(const ParsedOutput::Call& call) {
    try {
        json v = json::parse(call.truncated ? JsonCloser::close(call.arguments_json) : call.arguments_json);
        if (v.is_object()) return v;
    } catch (const json::exception&) {
    }
    return json::object();
}

json usage_json(const Usage& u) {
    return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", u.cached_tokens},
            {"output_tokens", u.completion_tokens}};
}

}  // namespace

void Server::answer_anthropic(std::shared_ptr<Call> call, net::Response& res) {
    const std::string id = "msg_" + call->request_id.substr(4);
    // max_tokens 0 (cache pre-warming): nothing was started, the answer is empty.
    const bool nothing_to_generate = call->chat.max_tokens == 0;

    if (!call->chat.stream) {
        ParsedOutput parsed;
        std::vector<std::string> call_ids;
        std::string finish = "length", stop_sequence;
        Usage usage = call->usage();
        if (nothing_to_generate) {
            call_finished(*call, usage);
        } else {
            const bool answered = collect(*call, res, [&](const CallEvent& e) {
                for (const auto& o : e.outputs) {
                    if (o.kind == OutputEvent::Kind::ToolCallBegin) call_ids.push_back("toolu_" + random_id(24));
                    parsed.add(o);
                }
                if (e.kind == GenerationEvent::Kind::Done) {
                    finish = e.finish_reason;
                    stop_sequence = e.stop_sequence;
                }
                if (e.last) usage = e.total;
            });
            if (!answered) return;
        }
        json content = json::array();
        if (!parsed.reasoning.empty())
            content.push_back(
                {{"type", "thinking"}, {"thinking", parsed.reasoning}, {"signature", sign_thinking(parsed.reasoning)}});
        if (!parsed.content.empty() || (parsed.tool_calls.empty() && parsed.reasoning.empty() && !nothing_to_generate))
            content.push_back({{"type", "text"}, {"text", parsed.content}});
        for (size_t c = 0; c < parsed.tool_calls.size(); ++c)
            content.push_back({{"type", "tool_use"},
                               {"id", c < call_ids.size() ? call_ids[c] : "toolu_" + random_id(24)},
                               {"name", parsed.tool_calls[c].name},
                               {"input", tool_input(parsed.tool_calls[c])}});
        // tool_use when the answer ends with whole calls; a call cut by max_tokens stops at max_tokens.
        const bool cut =
            std::any_of(parsed.tool_calls.begin(), parsed.tool_calls.end(), [](const auto& c) { return c.truncated; });
        const char* reason = stop_reason(finish, !parsed.tool_calls.empty() && !cut, !stop_sequence.empty());
        metrics_.count_request("anthropic", reason);
        res.set_content(dump_json(json{{"id", id},
                                       {"type", "message"},
                                       {"role", "assistant"},
                                       {"model", call->model},
                                       {"content", content},
                                       {"stop_reason", reason},
                                       {"stop_sequence", stop_sequence.empty() ? json() : json(stop_sequence)},
                                       {"usage", usage_json(usage)}}),
                        "application/json");
        return;
    }

    // Streamed. Blocks open lazily: the first reasoning text opens a thinking block, answer text
    // a text block, each call a tool_use block; a new kind closes the open block (a thinking
    // block gets its signature_delta first). What one event says goes out in one write.
    struct Stream {
        bool started = false;  // message_start is out
        int index = -1;        // the open block's index, -1: none
        std::string open;      // "thinking", "text", "tool_use" or ""
        std::string thinking;  // the open thinking block's text (for its signature)
        int tools = 0;         // calls that stand (one that broke off becomes text, as in a whole answer)
        bool any_cut = false;
        // The open tool_use block's arguments: input_json_delta sends what JsonCloser can close,
        // so a call cut there ends with a delta that closes it into the object a whole answer has.
        std::string args;
        JsonCloser closer;
        size_t args_sent = 0;
        std::string out;  // this event's SSE, not yet written
        std::chrono::steady_clock::time_point last_write;

        void close_block(const Server& server) {
            if (open.empty()) return;
            if (open == "thinking")
                out += sse("content_block_delta",
                           {{"type", "content_block_delta"},
                            {"index", index},
                            {"delta", {{"type", "signature_delta"}, {"signature", server.sign_thinking(thinking)}}}});
            out += sse("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
            open.clear();
            thinking.clear();
        }
        void open_block(const Server& server, const std::string& kind, json block) {
            close_block(server);
            ++index;
            open = kind;
            out += sse("content_block_start",
                       {{"type", "content_block_start"}, {"index", index}, {"content_block", std::move(block)}});
        }
        void delta(json d) {
            out += sse("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", std::move(d)}});
        }
        bool flush(SseOut& sink) {
            if (out.empty()) return true;
            last_write = std::chrono::steady_clock::now();
            const bool ok = sink.write(out);
            out.clear();
            return ok;
        }
    };
    auto st = std::make_shared<Stream>();
    // The stream's end: the open block closed, the stop reason and the cumulative usage.
    auto finish = [this, st, nothing_to_generate](const std::string& reason_in, const std::string& stop_sequence,
                                                  const Usage& usage, SseOut& out) {
        // A whole answer with nothing in it still has its (empty) text block: so does the stream.
        if (st->index < 0 && !nothing_to_generate) {
            st->open_block(*this, "text", {{"type", "text"}, {"text", ""}});
        }
        st->close_block(*this);
        const char* reason = stop_reason(reason_in, st->tools > 0 && !st->any_cut, !stop_sequence.empty());
        metrics_.count_request("anthropic", reason);
        st->out +=
            sse("message_delta",
                {{"type", "message_delta"},
                 {"delta", {{"stop_reason", reason}, {"stop_sequence", stop_sequence.empty() ? json() : json(stop_sequence)}}},
                 {"usage", usage_json(usage)}});
        st->out += sse("message_stop", {{"type", "message_stop"}});
        out.finish();
    };
    // message_start carries the prompt's split into uncached and cached tokens, as message_delta
    // does: it goes out at the engine's admission (the first event, which says the prefix-cache
    // hit), or, if the engine has not admitted the request within kPingEvery (its memory is
    // full), without the hit (all input_tokens; message_delta then has the split).
    auto start = [call, st, id](int64_t cached) {
        if (st->started) return;
        st->started = true;
        Usage u = call->usage();
        u.cached_tokens = cached;
        st->out += sse("message_start", {{"type", "message_start"},
                                         {"message",
                                          {{"id", id},
                                           {"type", "message"},
                                           {"role", "assistant"},
                                           {"model", call->model},
                                           {"content", json::array()},
                                           {"stop_reason", nullptr},
                                           {"stop_sequence", nullptr},
                                           {"usage", usage_json(u)}}}});
    };
    StreamTranslator t;
    t.begin = [this, call, st, nothing_to_generate, finish, start](SseOut& out) {
        st->last_write = std::chrono::steady_clock::now();
        if (nothing_to_generate) {
            start(0);
            call_finished(*call, call->usage());
            finish("length", "", call->usage(), out);
        }
        return st->flush(out);
    };
    // Keep the connection visibly alive during a long prefill or a long silence.
    t.idle = [st, start](SseOut& out) {
        if (std::chrono::steady_clock::now() - st->last_write < kPingEvery) return true;
        if (!st->started) start(0);
        else st->out += sse("ping", {{"type", "ping"}});
        return st->flush(out);
    };
    t.event = [this, st, finish, start](const CallEvent& e, SseOut& out) {
        start(e.cached_tokens.value_or(e.kind == GenerationEvent::Kind::Done ? e.total.cached_tokens : 0));
        for (const auto& o : e.outputs) {
            switch (o.kind) {
                case OutputEvent::Kind::Reasoning:
                    if (o.text.empty()) break;
                    if (st->open != "thinking")
                        st->open_block(*this, "thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
                    st->thinking += o.text;
                    st->delta({{"type", "thinking_delta"}, {"thinking", o.text}});
                    break;
                case OutputEvent::Kind::Content:
                    if (o.text.empty()) break;
                    if (st->open != "text") st->open_block(*this, "text", {{"type", "text"}, {"text", ""}});
                    st->delta({{"type", "text_delta"}, {"text", o.text}});
                    break;
                case OutputEvent::Kind::ToolCallBegin:
                    ++st->tools;
                    st->args.clear();
                    st->closer = JsonCloser();
                    st->args_sent = 0;
                    st->open_block(
                        *this, "tool_use",
                        {{"type", "tool_use"}, {"id", "toolu_" + random_id(24)}, {"name", o.name}, {"input", json::object()}});
                    break;
                case OutputEvent::Kind::ToolCallArguments:
                    if (o.text.empty()) break;
                    st->args += o.text;
                    st->closer.feed(o.text);
                    if (st->closer.safe_size() > st->args_sent) {
                        st->delta({{"type", "input_json_delta"},
                                   {"partial_json", st->args.substr(st->args_sent, st->closer.safe_size() - st->args_sent)}});
                        st->args_sent = st->closer.safe_size();
                    }
                    break;
                case OutputEvent::Kind::ToolCallEnd:
                    if (o.truncated) {
                        st->any_cut = true;
                        const std::string tail = st->args_sent == 0 ? "{}" : st->closer.closing();
                        if (!tail.empty()) st->delta({{"type", "input_json_delta"}, {"partial_json", tail}});
                    } else if (st->args_sent < st->args.size()) {
                        st->delta({{"type", "input_json_delta"}, {"partial_json", st->args.substr(st->args_sent)}});
                    }
                    st->close_block(*this);
                    if (!o.complete && !o.truncated) --st->tools;
                    if (!o.complete && !o.text.empty()) {
                        // The call broke off after its start: its raw text follows as text.
                        st->open_block(*this, "text", {{"type", "text"}, {"text", ""}});
                        st->delta({{"type", "text_delta"}, {"text", o.text}});
                    }
                    break;
            }
        }
        if (e.kind == GenerationEvent::Kind::Done) finish(e.finish_reason, e.stop_sequence, e.total, out);
        return st->flush(out);
    };
    stream(call, res, std::move(t));
}

}  // namespace strata::serve
