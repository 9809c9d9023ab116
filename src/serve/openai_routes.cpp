// OpenAI answers: /v1/chat/completions and /v1/completions, whole or streamed as server-sent
// events (docs/api.md has the shapes).
#include <httplib.h>

#include "serve/engine_client.h"
#include "serve/api_shapes.h"
#include "serve/server_call.h"
#include "tokenizer/tokenizer.h"

namespace strata::serve {

using nlohmann::json;

namespace {


std::string bytes_text(const json& bytes) {
    std::string s;
    if (bytes.is_array())
        for (const auto& b : bytes) s += static_cast<char>(b.get<int>());
    return s;
}

// The engine's logprobs entries in OpenAI's chat form.
json chat_logprobs(const json& entries) {
    json out = json::array();
    if (!entries.is_array()) return out;
    for (const auto& e : entries) {
        json top = json::array();
        for (const auto& t : e.value("top", json::array()))
            top.push_back({{"token", bytes_text(t["bytes"])}, {"logprob", t["logprob"]}, {"bytes", t["bytes"]}});
        out.push_back({{"token", bytes_text(e["bytes"])}, {"logprob", e["logprob"]}, {"bytes", e["bytes"]}, {"top_logprobs", top}});
    }
    return out;
}

json chat_usage(int64_t prompt, int64_t completion, int64_t cached, int64_t reasoning) {
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}},
            {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}};
}

// The end of a stream that failed after it started: an error chunk (the SDKs raise APIError on
// it), then [DONE].
std::string stream_error(const std::string& message) {
    return "data: " + dump_json(json{{"error", {{"message", "generation failed: " + message}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}}) +
           "\n\ndata: [DONE]\n\n";
}

const char* chat_finish_reason(const std::string& reason, bool tool_calls) {
    if (tool_calls) return "tool_calls";
    if (reason == "length" || reason == "context") return "length";
    return "stop";
}

// One choice of a chat answer, assembled from its events.
struct ChoiceAnswer {
    ParsedOutput parsed;
    std::vector<std::string> call_ids;
    json logprobs = json::array();
    std::string finish_reason;
    Usage usage;
    bool done = false;
};

}  // namespace

// Metrics of one event (time to first token, inter-token gaps, token counts).

void Server::answer_openai_chat(std::shared_ptr<Call> call, httplib::Response& res) {
    const std::string id = "chatcmpl-" + call->request_id.substr(4);
    const size_t n = call->prepared.choices.size();

    if (!call->chat.stream) {
        std::vector<ChoiceAnswer> answers(n);
        while (!call->group->finished()) {
            auto e = call->group->next(kPoll);
            // Checked at every event too: a client that left stops its work now.
            if (call->gone()) {
                call->group->cancel();
                metrics_.count_request("openai", "cancelled");
                res.status = 499;
                return;
            }
            if (!e) continue;
            auto& [index, ev] = *e;
            ChoiceAnswer& a = answers[static_cast<size_t>(index)];
            call->note_tokens(metrics_, ev.tokens);
            for (const auto& o : ev.outputs) {
                if (o.kind == OutputEvent::Kind::ToolCallBegin) a.call_ids.push_back("call_" + random_id(24));
                a.parsed.add(o);
            }
            if (!ev.logprobs.is_null()) for (auto& l : chat_logprobs(ev.logprobs)) a.logprobs.push_back(std::move(l));
            if (ev.kind == GenerationEvent::Kind::Failed) {
                call->group->cancel();
                metrics_.count_request("openai", "error");
                throw ApiError(500, "generation failed: " + ev.error);
            }
            if (ev.kind == GenerationEvent::Kind::Done) {
                a.done = true;
                a.finish_reason = ev.finish_reason;
                a.usage = ev.usage;
            }
        }
        metrics_.e2e.observe(call->seconds_since_arrival());
        json choices = json::array();
        int64_t completion = 0, reasoning = 0;
        for (size_t i = 0; i < n; ++i) {
            const auto& a = answers[i];
            json msg = {{"role", "assistant"}, {"content", a.parsed.content.empty() && !a.parsed.tool_calls.empty() ? json() : json(a.parsed.content)}};
            if (!a.parsed.reasoning.empty()) {
                msg["reasoning_content"] = a.parsed.reasoning;
                msg["reasoning"] = a.parsed.reasoning;
            }
            if (!a.parsed.tool_calls.empty()) {
                json calls = json::array();
                for (size_t c = 0; c < a.parsed.tool_calls.size(); ++c)
                    calls.push_back({{"id", c < a.call_ids.size() ? a.call_ids[c] : "call_" + random_id(24)},
                                     {"type", "function"},
                                     {"function", {{"name", a.parsed.tool_calls[c].name}, {"arguments", a.parsed.tool_calls[c].arguments_json}}}});
                msg["tool_calls"] = calls;
            }
            json choice = {{"index", i}, {"message", msg}, {"finish_reason", chat_finish_reason(a.finish_reason, !a.parsed.tool_calls.empty())},
                           {"logprobs", call->chat.logprobs ? json{{"content", a.logprobs}} : json()}};
            choices.push_back(std::move(choice));
            completion += a.usage.completion_tokens;
            reasoning += a.usage.reasoning_tokens;
            metrics_.count_request("openai", choices.back()["finish_reason"]);
        }
        const int64_t cached = answers.empty() ? 0 : answers[0].usage.cached_tokens;
        metrics_.cached_prompt_tokens += static_cast<uint64_t>(cached);
        const json body = {{"id", id},
                           {"object", "chat.completion"},
                           {"created", call->created},
                           {"model", call->model},
                           {"system_fingerprint", "strata"},
                           {"choices", choices},
                           {"usage", chat_usage(call->prepared.prompt_tokens, completion, cached, reasoning)}};
        res.set_content(dump_json(body), "application/json");
        return;
    }

    // Streamed: a role chunk per choice, then deltas as they come, a finish chunk per choice, the
    // usage chunk (stream_options.include_usage), [DONE].
    struct Stream {
        std::vector<ChoiceAnswer> answers;
        std::vector<json> pending_logprobs;
        bool started = false, finished = false;
    };
    auto st = std::make_shared<Stream>();
    st->answers.resize(n);
    st->pending_logprobs.assign(n, json::array());
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, call, st, id, n](size_t, httplib::DataSink& sink) {
            auto chunk = [&](size_t index, json delta, json finish, json logprobs) {
                json c = {{"id", id},
                          {"object", "chat.completion.chunk"},
                          {"created", call->created},
                          {"model", call->model},
                          {"system_fingerprint", "strata"},
                          {"choices", json::array({{{"index", index}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish)}}})}};
                if (call->chat.include_usage) c["usage"] = nullptr;
                const std::string line = "data: " + dump_json(c) + "\n\n";
                return sink.write(line.data(), line.size());
            };
            if (!st->started) {
                st->started = true;
                for (size_t i = 0; i < n; ++i)
                    if (!chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)) return false;
            }
            if (st->finished) {
                sink.done();
                return true;
            }
            // A client that went away stops its work now, not when a write finally fails.
            if (call->gone()) return false;
            auto e = call->group->next(kPoll);
            if (!e) return true;
            auto& [index, ev] = *e;
            const auto i = static_cast<size_t>(index);
            ChoiceAnswer& a = st->answers[i];
            call->note_tokens(metrics_, ev.tokens);
            if (call->chat.logprobs && !ev.logprobs.is_null())
                for (auto& l : chat_logprobs(ev.logprobs)) st->pending_logprobs[i].push_back(std::move(l));
            auto take_logprobs = [&]() -> json {
                if (!call->chat.logprobs || st->pending_logprobs[i].empty()) return nullptr;
                json l = {{"content", std::move(st->pending_logprobs[i])}};
                st->pending_logprobs[i] = json::array();
                return l;
            };
            for (const auto& o : ev.outputs) {
                a.parsed.add(o);
                bool ok = true;
                switch (o.kind) {
                    case OutputEvent::Kind::Content:
                        if (!o.text.empty()) ok = chunk(i, {{"content", o.text}}, nullptr, take_logprobs());
                        break;
                    case OutputEvent::Kind::Reasoning:
                        if (!o.text.empty()) ok = chunk(i, {{"reasoning_content", o.text}, {"reasoning", o.text}}, nullptr, take_logprobs());
                        break;
                    case OutputEvent::Kind::ToolCallBegin:
                        a.call_ids.push_back("call_" + random_id(24));
                        ok = chunk(i, {{"tool_calls", json::array({{{"index", o.index}, {"id", a.call_ids.back()}, {"type", "function"},
                                                                     {"function", {{"name", o.name}, {"arguments", ""}}}}})}},
                                   nullptr, take_logprobs());
                        break;
                    case OutputEvent::Kind::ToolCallArguments:
                        if (!o.text.empty())
                            ok = chunk(i, {{"tool_calls", json::array({{{"index", o.index}, {"function", {{"arguments", o.text}}}}})}}, nullptr, take_logprobs());
                        break;
                    case OutputEvent::Kind::ToolCallEnd:
                        // A call that broke off after its start: its raw text follows as content.
                        if (!o.complete && !o.text.empty()) ok = chunk(i, {{"content", o.text}}, nullptr, take_logprobs());
                        break;
                }
                if (!ok) return false;
            }
            if (ev.kind == GenerationEvent::Kind::Failed) {
                metrics_.count_request("openai", "error");
                const std::string line = stream_error(ev.error);
                sink.write(line.data(), line.size());
                call->group->cancel();
                st->finished = true;
                sink.done();
                return true;
            }
            if (ev.kind == GenerationEvent::Kind::Done) {
                a.done = true;
                a.finish_reason = ev.finish_reason;
                a.usage = ev.usage;
                const char* finish = chat_finish_reason(ev.finish_reason, !a.parsed.tool_calls.empty());
                metrics_.count_request("openai", finish);
                if (!chunk(i, json::object(), finish, take_logprobs())) return false;
                if (call->group->finished()) {
                    metrics_.e2e.observe(call->seconds_since_arrival());
                    std::string tail;
                    if (call->chat.include_usage) {
                        int64_t completion = 0, reasoning = 0;
                        for (const auto& x : st->answers) {
                            completion += x.usage.completion_tokens;
                            reasoning += x.usage.reasoning_tokens;
                        }
                        const int64_t cached = st->answers[0].usage.cached_tokens;
                        metrics_.cached_prompt_tokens += static_cast<uint64_t>(cached);
                        tail += "data: " +
                                dump_json(json{{"id", id},
                                               {"object", "chat.completion.chunk"},
                                               {"created", call->created},
                                               {"model", call->model},
                                               {"system_fingerprint", "strata"},
                                               {"choices", json::array()},
                                               {"usage", chat_usage(call->prepared.prompt_tokens, completion, cached, reasoning)}}) +
                                "\n\n";
                    }
                    tail += "data: [DONE]\n\n";
                    if (!sink.write(tail.data(), tail.size())) return false;
                    st->finished = true;
                    sink.done();
                }
            }
            return true;
        },
        [this, call, st](bool) { end_stream(*call, st->finished); });
}

void Server::answer_openai_completion(std::shared_ptr<Call> call, httplib::Response& res) {
    const std::string id = "cmpl-" + call->request_id.substr(4);
    const auto& c = call->completion;
    const size_t n = call->prepared.choices.size();
    const std::string echo = c.echo ? call->prepared.choices[0].prompt_text : std::string();

    // Legacy logprobs: tokens, token_logprobs, top_logprobs (token → logprob), text_offset.
    auto legacy_logprobs = [](const json& entries, json& into, size_t& offset) {
        if (!entries.is_array()) return;
        for (const auto& e : entries) {
            const std::string t = bytes_text(e["bytes"]);
            into["tokens"].push_back(t);
            into["token_logprobs"].push_back(e["logprob"]);
            json top = json::object();
            for (const auto& x : e.value("top", json::array())) top[bytes_text(x["bytes"])] = x["logprob"];
            into["top_logprobs"].push_back(top);
            into["text_offset"].push_back(offset);
            offset += t.size();
        }
    };
    auto empty_logprobs = [] { return json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}}; };
    auto usage_json = [call](int64_t completion, int64_t cached) {  // outlives this function (in the stream)
        return json{{"prompt_tokens", call->prepared.prompt_tokens},
                    {"completion_tokens", completion},
                    {"total_tokens", call->prepared.prompt_tokens + completion},
                    {"prompt_tokens_details", {{"cached_tokens", cached}}}};
    };

    if (c.max_tokens == 0) {
        json choices = json::array();
        for (size_t i = 0; i < n; ++i) choices.push_back({{"index", i}, {"text", echo}, {"logprobs", nullptr}, {"finish_reason", "length"}});
        res.set_content(dump_json(json{{"id", id}, {"object", "text_completion"}, {"created", call->created}, {"model", call->model},
                                       {"choices", choices}, {"usage", usage_json(0, 0)}}),
                        "application/json");
        return;
    }

    if (!c.stream) {
        std::vector<std::string> texts(n, echo);
        std::vector<json> logprobs(n, empty_logprobs());
        std::vector<size_t> offsets(n, echo.size());
        std::vector<std::string> finish(n);
        int64_t completion = 0, cached = 0;
        while (!call->group->finished()) {
            auto e = call->group->next(kPoll);
            // Checked at every event too: a client that left stops its work now.
            if (call->gone()) {
                call->group->cancel();
                metrics_.count_request("openai", "cancelled");
                res.status = 499;
                return;
            }
            if (!e) continue;
            auto& [index, ev] = *e;
            const auto i = static_cast<size_t>(index);
            call->note_tokens(metrics_, ev.tokens);
            for (const auto& o : ev.outputs) texts[i] += o.text;
            legacy_logprobs(ev.logprobs, logprobs[i], offsets[i]);
            if (ev.kind == GenerationEvent::Kind::Failed) {
                call->group->cancel();
                metrics_.count_request("openai", "error");
                throw ApiError(500, "generation failed: " + ev.error);
            }
            if (ev.kind == GenerationEvent::Kind::Done) {
                finish[i] = ev.finish_reason == "stop" ? "stop" : "length";
                completion += ev.usage.completion_tokens;
                if (i == 0) cached = ev.usage.cached_tokens;
                metrics_.count_request("openai", finish[i]);
            }
        }
        metrics_.e2e.observe(call->seconds_since_arrival());
        json choices = json::array();
        for (size_t i = 0; i < n; ++i)
            choices.push_back({{"index", i}, {"text", texts[i]}, {"logprobs", c.logprobs >= 0 ? logprobs[i] : json()}, {"finish_reason", finish[i]}});
        res.set_content(dump_json(json{{"id", id}, {"object", "text_completion"}, {"created", call->created}, {"model", call->model},
                                       {"system_fingerprint", "strata"}, {"choices", choices}, {"usage", usage_json(completion, cached)}}),
                        "application/json");
        return;
    }

    struct Stream {
        std::vector<size_t> offsets;
        int64_t completion = 0, cached = 0;
        bool started = false, finished = false;
    };
    auto st = std::make_shared<Stream>();
    st->offsets.assign(n, echo.size());
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, call, st, id, n, echo, legacy_logprobs, empty_logprobs, usage_json](size_t, httplib::DataSink& sink) {
            auto chunk = [&](size_t index, const std::string& text, json logprobs, json finish) {
                json c = {{"id", id}, {"object", "text_completion"}, {"created", call->created}, {"model", call->model},
                          {"choices", json::array({{{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish)}}})}};
                if (call->completion.include_usage) c["usage"] = nullptr;
                const std::string line = "data: " + dump_json(c) + "\n\n";
                return sink.write(line.data(), line.size());
            };
            if (!st->started) {
                st->started = true;
                if (!echo.empty())
                    for (size_t i = 0; i < n; ++i)
                        if (!chunk(i, echo, nullptr, nullptr)) return false;
            }
            if (st->finished) {
                sink.done();
                return true;
            }
            // A client that went away stops its work now, not when a write finally fails.
            if (call->gone()) return false;
            auto e = call->group->next(kPoll);
            if (!e) return true;
            auto& [index, ev] = *e;
            const auto i = static_cast<size_t>(index);
            call->note_tokens(metrics_, ev.tokens);
            std::string text;
            for (const auto& o : ev.outputs) text += o.text;
            json lp = nullptr;
            if (call->completion.logprobs >= 0 && !ev.logprobs.is_null()) {
                lp = empty_logprobs();
                legacy_logprobs(ev.logprobs, lp, st->offsets[i]);
            }
            if (ev.kind == GenerationEvent::Kind::Failed) {
                metrics_.count_request("openai", "error");
                const std::string line = stream_error(ev.error);
                sink.write(line.data(), line.size());
                call->group->cancel();
                st->finished = true;
                sink.done();
                return true;
            }
            const bool done = ev.kind == GenerationEvent::Kind::Done;
            if (!text.empty() || !lp.is_null() || done) {
                json finish = done ? json(ev.finish_reason == "stop" ? "stop" : "length") : json();
                if (!chunk(i, text, lp, finish)) return false;
            }
            if (done) {
                st->completion += ev.usage.completion_tokens;
                if (i == 0) st->cached = ev.usage.cached_tokens;
                metrics_.count_request("openai", ev.finish_reason == "stop" ? "stop" : "length");
                if (call->group->finished()) {
                    metrics_.e2e.observe(call->seconds_since_arrival());
                    std::string tail;
                    if (call->completion.include_usage)
                        tail += "data: " + dump_json(json{{"id", id}, {"object", "text_completion"}, {"created", call->created}, {"model", call->model},
                                                          {"choices", json::array()}, {"usage", usage_json(st->completion, st->cached)}}) + "\n\n";
                    tail += "data: [DONE]\n\n";
                    if (!sink.write(tail.data(), tail.size())) return false;
                    st->finished = true;
                    sink.done();
                }
            }
            return true;
        },
        [this, call, st](bool) { end_stream(*call, st->finished); });
}

}  // namespace strata::serve
