// Anthropic answers: /v1/messages, whole or streamed as named server-sent events in the order
// clients check (message_start, content blocks, message_delta with cumulative usage,
// message_stop; ping while nothing else is sent). docs/api.md has the shapes.
#include <httplib.h>

#include "serve/api_shapes.h"
#include "serve/server_call.h"

namespace strata::serve {

using nlohmann::json;

namespace {

constexpr auto kPingEvery = std::chrono::seconds(5);

std::string sse(const char* event, const json& data) { return std::string("event: ") + event + "\ndata: " + dump_json(data) + "\n\n"; }

const char* stop_reason(const std::string& finish, bool tool_use, bool stop_sequence) {
    if (tool_use) return "tool_use";
    if (finish == "length") return "max_tokens";
    if (finish == "context") return "model_context_window_exceeded";
    return stop_sequence ? "stop_sequence" : "end_turn";
}

json tool_input(const std::string& arguments_json) {
    try {
        json v = json::parse(arguments_json);
        if (v.is_object()) return v;
    } catch (const json::exception&) {
    }
    return json::object();
}

json usage_json(const Usage& u, int64_t prompt_tokens) {
    return {{"input_tokens", prompt_tokens - u.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", u.cached_tokens},
            {"output_tokens", u.completion_tokens}};
}

}  // namespace


void Server::answer_anthropic(std::shared_ptr<Call> call, httplib::Response& res) {
    const std::string id = "msg_" + call->request_id.substr(4);
    const bool nothing_to_generate = call->chat.max_tokens == 0;

    if (!call->chat.stream) {
        ParsedOutput parsed;
        std::vector<std::string> call_ids;
        std::string finish = "length", stop_sequence;
        Usage usage;
        usage.prompt_tokens = call->prepared.prompt_tokens;
        while (!nothing_to_generate && !call->group->finished()) {
            auto e = call->group->next(kPoll);
            // Checked at every event too: a client that left stops its work now.
            if (call->gone()) {
                call->group->cancel();
                metrics_.count_request("anthropic", "cancelled");
                res.status = 499;
                return;
            }
            if (!e) continue;
            auto& ev = e->second;
            call->note_tokens(metrics_, ev.tokens);
            for (const auto& o : ev.outputs) {
                if (o.kind == OutputEvent::Kind::ToolCallBegin) call_ids.push_back("toolu_" + random_id(24));
                parsed.add(o);
            }
            if (ev.kind == GenerationEvent::Kind::Failed) {
                call->group->cancel();
                metrics_.count_request("anthropic", "error");
                throw ApiError(500, "generation failed: " + ev.error);
            }
            if (ev.kind == GenerationEvent::Kind::Done) {
                finish = ev.finish_reason;
                stop_sequence = ev.stop_sequence;
                usage = ev.usage;
            }
        }
        metrics_.e2e.observe(call->seconds_since_arrival());
        metrics_.cached_prompt_tokens += static_cast<uint64_t>(usage.cached_tokens);
        json content = json::array();
        if (!parsed.reasoning.empty())
            content.push_back({{"type", "thinking"}, {"thinking", parsed.reasoning}, {"signature", sign_thinking(parsed.reasoning)}});
        if (!parsed.content.empty() || (parsed.tool_calls.empty() && parsed.reasoning.empty() && !nothing_to_generate))
            content.push_back({{"type", "text"}, {"text", parsed.content}});
        for (size_t c = 0; c < parsed.tool_calls.size(); ++c)
            content.push_back({{"type", "tool_use"},
                               {"id", c < call_ids.size() ? call_ids[c] : "toolu_" + random_id(24)},
                               {"name", parsed.tool_calls[c].name},
                               {"input", tool_input(parsed.tool_calls[c].arguments_json)}});
        const char* reason = stop_reason(finish, !parsed.tool_calls.empty(), !stop_sequence.empty());
        metrics_.count_request("anthropic", reason);
        res.set_content(dump_json(json{{"id", id},
                                       {"type", "message"},
                                       {"role", "assistant"},
                                       {"model", call->model},
                                       {"content", content},
                                       {"stop_reason", reason},
                                       {"stop_sequence", stop_sequence.empty() ? json() : json(stop_sequence)},
                                       {"usage", usage_json(usage, call->prepared.prompt_tokens)}}),
                        "application/json");
        return;
    }

    // Streamed. Blocks open lazily: the first reasoning text opens a thinking block, answer text
    // a text block, each call a tool_use block; a new kind closes the open block (a thinking
    // block gets its signature_delta first).
    struct Stream {
        bool started = false, finished = false;
        int index = -1;        // the open block's index, -1: none
        std::string open;      // "thinking", "text", "tool_use" or ""
        std::string thinking;  // the open thinking block's text (for its signature)
        bool any_tool = false;
        std::chrono::steady_clock::time_point last_write;
    };
    auto st = std::make_shared<Stream>();
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, call, st, id, nothing_to_generate](size_t, httplib::DataSink& sink) {
            std::string out;
            auto close_block = [&] {
                if (st->open.empty()) return;
                if (st->open == "thinking")
                    out += sse("content_block_delta", {{"type", "content_block_delta"}, {"index", st->index},
                                                       {"delta", {{"type", "signature_delta"}, {"signature", sign_thinking(st->thinking)}}}});
                out += sse("content_block_stop", {{"type", "content_block_stop"}, {"index", st->index}});
                st->open.clear();
                st->thinking.clear();
            };
            auto open_block = [&](const std::string& kind, json block) {
                close_block();
                ++st->index;
                st->open = kind;
                out += sse("content_block_start", {{"type", "content_block_start"}, {"index", st->index}, {"content_block", std::move(block)}});
            };
            auto flush = [&] {
                if (out.empty()) return true;
                st->last_write = std::chrono::steady_clock::now();
                const bool ok = sink.write(out.data(), out.size());
                out.clear();
                return ok;
            };
            auto finish = [&](const std::string& reason_in, const std::string& stop_sequence, const Usage& usage) {
                close_block();
                const char* reason = stop_reason(reason_in, st->any_tool, !stop_sequence.empty());
                metrics_.count_request("anthropic", reason);
                metrics_.e2e.observe(call->seconds_since_arrival());
                metrics_.cached_prompt_tokens += static_cast<uint64_t>(usage.cached_tokens);
                out += sse("message_delta", {{"type", "message_delta"},
                                             {"delta", {{"stop_reason", reason}, {"stop_sequence", stop_sequence.empty() ? json() : json(stop_sequence)}}},
                                             {"usage", usage_json(usage, call->prepared.prompt_tokens)}});
                out += sse("message_stop", {{"type", "message_stop"}});
                st->finished = true;
            };

            if (!st->started) {
                st->started = true;
                Usage start;
                out += sse("message_start", {{"type", "message_start"},
                                             {"message", {{"id", id},
                                                          {"type", "message"},
                                                          {"role", "assistant"},
                                                          {"model", call->model},
                                                          {"content", json::array()},
                                                          {"stop_reason", nullptr},
                                                          {"stop_sequence", nullptr},
                                                          {"usage", usage_json(start, call->prepared.prompt_tokens)}}}});
                if (nothing_to_generate) {
                    Usage none;
                    finish("length", "", none);
                }
                if (!flush()) return false;
            }
            if (st->finished) {
                sink.done();
                return true;
            }
            if (call->gone()) return false;
            auto e = call->group->next(kPoll);
            if (!e) {
                // Keep the connection visibly alive during a long prefill or a long silence.
                if (std::chrono::steady_clock::now() - st->last_write >= kPingEvery) {
                    out += sse("ping", {{"type", "ping"}});
                    return flush();
                }
                return true;
            }
            auto& ev = e->second;
            call->note_tokens(metrics_, ev.tokens);
            for (const auto& o : ev.outputs) {
                switch (o.kind) {
                    case OutputEvent::Kind::Reasoning:
                        if (o.text.empty()) break;
                        if (st->open != "thinking") open_block("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
                        st->thinking += o.text;
                        out += sse("content_block_delta", {{"type", "content_block_delta"}, {"index", st->index},
                                                           {"delta", {{"type", "thinking_delta"}, {"thinking", o.text}}}});
                        break;
                    case OutputEvent::Kind::Content:
                        if (o.text.empty()) break;
                        if (st->open != "text") open_block("text", {{"type", "text"}, {"text", ""}});
                        out += sse("content_block_delta", {{"type", "content_block_delta"}, {"index", st->index},
                                                           {"delta", {{"type", "text_delta"}, {"text", o.text}}}});
                        break;
                    case OutputEvent::Kind::ToolCallBegin:
                        st->any_tool = true;
                        open_block("tool_use", {{"type", "tool_use"}, {"id", "toolu_" + random_id(24)}, {"name", o.name}, {"input", json::object()}});
                        break;
                    case OutputEvent::Kind::ToolCallArguments:
                        if (o.text.empty()) break;
                        out += sse("content_block_delta", {{"type", "content_block_delta"}, {"index", st->index},
                                                           {"delta", {{"type", "input_json_delta"}, {"partial_json", o.text}}}});
                        break;
                    case OutputEvent::Kind::ToolCallEnd:
                        close_block();
                        if (!o.complete && !o.text.empty()) {
                            // The call broke off after its start: its raw text follows as text.
                            open_block("text", {{"type", "text"}, {"text", ""}});
                            out += sse("content_block_delta", {{"type", "content_block_delta"}, {"index", st->index},
                                                               {"delta", {{"type", "text_delta"}, {"text", o.text}}}});
                        }
                        break;
                }
            }
            if (ev.kind == GenerationEvent::Kind::Failed) {
                metrics_.count_request("anthropic", "error");
                out += sse("error", {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", "generation failed: " + ev.error}}}});
                flush();
                call->group->cancel();
                st->finished = true;
                sink.done();
                return true;
            }
            if (ev.kind == GenerationEvent::Kind::Done) finish(ev.finish_reason, ev.stop_sequence, ev.usage);
            if (!flush()) return false;
            if (st->finished) sink.done();
            return true;
        },
        [this, call, st](bool) { end_stream(*call, st->finished); });
}

}  // namespace strata::serve
