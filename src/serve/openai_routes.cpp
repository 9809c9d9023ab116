// OpenAI answers: /v1/chat/completions and /v1/completions, whole or streamed as server-sent
// events (docs/api.md has the shapes). Only translation lives here: Server::collect and
// Server::stream (call_events.cpp) drive the generations and hand over CallEvents.

#include <algorithm>

#include "net/http.h"
#include "serve/api_shapes.h"
#include "serve/server_call.h"

namespace strata::serve {

using nlohmann::json;

namespace {

json bytes_json(const std::string& bytes) {
    json out = json::array();
    for (unsigned char c : bytes) out.push_back(static_cast<int>(c));
    return out;
}

// A token's logprobs in OpenAI's chat form.
json chat_logprob(const TokenLogprobs& t) {
    json top = json::array();
    for (const auto& alt : t.top)
        top.push_back({{"token", alt.bytes}, {"logprob", alt.logprob}, {"bytes", bytes_json(alt.bytes)}});
    return {{"token", t.bytes}, {"logprob", t.logprob}, {"bytes", bytes_json(t.bytes)}, {"top_logprobs", top}};
}

json chat_usage(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
            {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
}

json completion_usage(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

// "tool_calls" when the answer ends with whole calls; a call cut by max_tokens is "length".
const char* chat_finish_reason(const std::string& reason, const ParsedOutput& parsed) {
    const bool cut = std::any_of(parsed.tool_calls.begin(), parsed.tool_calls.end(), [](const auto& c) { return c.truncated; });
    if (!parsed.tool_calls.empty() && !cut) return "tool_calls";
    if (reason == "length" || reason == "context") return "length";
    return "stop";
}

const char* completion_finish_reason(const std::string& reason) { return reason == "stop" ? "stop" : "length"; }

// Legacy logprobs: tokens, token_logprobs, top_logprobs (token → logprob), text_offset.
json empty_legacy_logprobs() {
    return json{{"tokens", json::array()},
                {"token_logprobs", json::array()},
                {"top_logprobs", json::array()},
                {"text_offset", json::array()}};
}

void add_legacy_logprobs(const std::vector<TokenLogprobs>& tokens, json& into, size_t& offset) {
    for (const auto& t : tokens) {
        into["tokens"].push_back(t.bytes);
        into["token_logprobs"].push_back(t.logprob);
        json top = json::object();
        for (const auto& alt : t.top) top[alt.bytes] = alt.logprob;
        into["top_logprobs"].push_back(top);
        into["text_offset"].push_back(offset);
        offset += t.bytes.size();
    }
}

// One choice of a chat answer, assembled from its events.
struct ChoiceAnswer {
    ParsedOutput parsed;
    std::vector<std::string> call_ids;
    json logprobs = json::array();
    std::string finish_reason;
};

}  // namespace

void Server::answer_openai_chat(std::shared_ptr<Call> call, net::Response& res) {
    const std::string id = "chatcmpl-" + call->request_id.substr(4);
    const size_t n = call->prepared.choices.size();

    if (!call->chat.stream) {
        std::vector<ChoiceAnswer> answers(n);
        Usage usage;
        const bool answered = collect(*call, res, [&](const CallEvent& e) {
            ChoiceAnswer& a = answers[e.choice];
            for (const auto& o : e.outputs) {
                if (o.kind == OutputEvent::Kind::ToolCallBegin) a.call_ids.push_back("call_" + random_id(24));
                a.parsed.add(o);
            }
            if (e.logprobs)
                for (const auto& l : *e.logprobs) a.logprobs.push_back(chat_logprob(l));
            if (e.kind == GenerationEvent::Kind::Done) a.finish_reason = e.finish_reason;
            if (e.last) usage = e.total;
        });
        if (!answered) return;
        json choices = json::array();
        for (size_t i = 0; i < n; ++i) {
            const auto& a = answers[i];
            json msg = {{"role", "assistant"},
                        {"content", a.parsed.content.empty() && !a.parsed.tool_calls.empty() ? json() : json(a.parsed.content)}};
            if (!a.parsed.reasoning.empty()) {
                msg["reasoning_content"] = a.parsed.reasoning;
                msg["reasoning"] = a.parsed.reasoning;
            }
            if (!a.parsed.tool_calls.empty()) {
                json calls = json::array();
                for (size_t c = 0; c < a.parsed.tool_calls.size(); ++c)
                    calls.push_back(
                        {{"id", c < a.call_ids.size() ? a.call_ids[c] : "call_" + random_id(24)},
                         {"type", "function"},
                         {"function",
                          {{"name", a.parsed.tool_calls[c].name}, {"arguments", a.parsed.tool_calls[c].arguments_json}}}});
                msg["tool_calls"] = calls;
            }
            json choice = {{"index", i},
                           {"message", msg},
                           {"finish_reason", chat_finish_reason(a.finish_reason, a.parsed)},
                           {"logprobs", call->chat.logprobs ? json{{"content", a.logprobs}} : json()}};
            choices.push_back(std::move(choice));
            metrics_.count_request("openai", choices.back()["finish_reason"]);
        }
        const json body = {{"id", id},
                           {"object", "chat.completion"},
                           {"created", call->created},
                           {"model", call->model},
                           {"system_fingerprint", "strata"},
                           {"choices", choices},
                           {"usage", chat_usage(usage)}};
        res.set_content(dump_json(body), "application/json");
        return;
    }

    // Streamed: a role chunk per choice, then deltas as they come, a finish chunk per choice, the
    // usage chunk (stream_options.include_usage), [DONE].
    struct Stream {
        std::vector<ChoiceAnswer> answers;
        std::vector<json> pending_logprobs;
    };
    auto st = std::make_shared<Stream>();
    st->answers.resize(n);
    st->pending_logprobs.assign(n, json::array());
    auto chunk = [call, id](SseOut& out, size_t index, json delta, json finish, json logprobs) {
        json c = {{"id", id},
                  {"object", "chat.completion.chunk"},
                  {"created", call->created},
                  {"model", call->model},
                  {"system_fingerprint", "strata"},
                  {"choices", json::array({{{"index", index},
                                            {"delta", std::move(delta)},
                                            {"logprobs", std::move(logprobs)},
                                            {"finish_reason", std::move(finish)}}})}};
        if (call->chat.include_usage) c["usage"] = nullptr;
        return out.write("data: " + dump_json(c) + "\n\n");
    };
    StreamTranslator t;
    t.begin = [chunk, n](SseOut& out) {
        for (size_t i = 0; i < n; ++i)
            if (!chunk(out, i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)) return false;
        return true;
    };
    t.event = [this, call, st, id, chunk](const CallEvent& e, SseOut& out) {
        const size_t i = e.choice;
        ChoiceAnswer& a = st->answers[i];
        if (call->chat.logprobs && e.logprobs)
            for (const auto& l : *e.logprobs) st->pending_logprobs[i].push_back(chat_logprob(l));
        auto take_logprobs = [&]() -> json {
            if (!call->chat.logprobs || st->pending_logprobs[i].empty()) return nullptr;
            json l = {{"content", std::move(st->pending_logprobs[i])}};
            st->pending_logprobs[i] = json::array();
            return l;
        };
        for (const auto& o : e.outputs) {
            a.parsed.add(o);
            bool ok = true;
            switch (o.kind) {
                case OutputEvent::Kind::Content:
                    if (!o.text.empty()) ok = chunk(out, i, {{"content", o.text}}, nullptr, take_logprobs());
                    break;
                case OutputEvent::Kind::Reasoning:
                    if (!o.text.empty())
                        ok = chunk(out, i, {{"reasoning_content", o.text}, {"reasoning", o.text}}, nullptr, take_logprobs());
                    break;
                case OutputEvent::Kind::ToolCallBegin:
                    a.call_ids.push_back("call_" + random_id(24));
                    ok = chunk(out, i,
                               {{"tool_calls", json::array({{{"index", o.index},
                                                             {"id", a.call_ids.back()},
                                                             {"type", "function"},
                                                             {"function", {{"name", o.name}, {"arguments", ""}}}}})}},
                               nullptr, take_logprobs());
                    break;
                case OutputEvent::Kind::ToolCallArguments:
                    if (!o.text.empty())
                        ok = chunk(out, i,
                                   {{"tool_calls", json::array({{{"index", o.index}, {"function", {{"arguments", o.text}}}}})}},
                                   nullptr, take_logprobs());
                    break;
                case OutputEvent::Kind::ToolCallEnd:
                    // A call that broke off after its start: its raw text follows as content. (A
                    // truncated one has no text: it stands, with the arguments sent so far.)
                    if (!o.complete && !o.text.empty()) ok = chunk(out, i, {{"content", o.text}}, nullptr, take_logprobs());
                    break;
            }
            if (!ok) return false;
        }
        if (e.kind != GenerationEvent::Kind::Done) return true;
        const char* finish = chat_finish_reason(e.finish_reason, a.parsed);
        metrics_.count_request("openai", finish);
        if (!chunk(out, i, json::object(), finish, take_logprobs())) return false;
        if (!e.last) return true;
        std::string tail;
        if (call->chat.include_usage)
            tail += "data: " +
                    dump_json(json{{"id", id},
                                   {"object", "chat.completion.chunk"},
                                   {"created", call->created},
                                   {"model", call->model},
                                   {"system_fingerprint", "strata"},
                                   {"choices", json::array()},
                                   {"usage", chat_usage(e.total)}}) +
                    "\n\n";
        tail += "data: [DONE]\n\n";
        if (!out.write(tail)) return false;
        out.finish();
        return true;
    };
    stream(call, res, std::move(t));
}

void Server::answer_openai_completion(std::shared_ptr<Call> call, net::Response& res) {
    const std::string id = "cmpl-" + call->request_id.substr(4);
    const auto& c = call->completion;
    const size_t n = call->prepared.choices.size();
    const std::string echo = c.echo ? call->prepared.choices[0].prompt_text : std::string();

    if (c.max_tokens == 0) {
        json choices = json::array();
        for (size_t i = 0; i < n; ++i)
            choices.push_back({{"index", i}, {"text", echo}, {"logprobs", nullptr}, {"finish_reason", "length"}});
        res.set_content(dump_json(json{{"id", id},
                                       {"object", "text_completion"},
                                       {"created", call->created},
                                       {"model", call->model},
                                       {"choices", choices},
                                       {"usage", completion_usage(call->usage())}}),
                        "application/json");
        return;
    }

    if (!c.stream) {
        std::vector<std::string> texts(n, echo);
        std::vector<json> logprobs(n, empty_legacy_logprobs());
        std::vector<size_t> offsets(n, echo.size());
        std::vector<std::string> finish(n);
        Usage usage;
        const bool answered = collect(*call, res, [&](const CallEvent& e) {
            const size_t i = e.choice;
            for (const auto& o : e.outputs) texts[i] += o.text;
            if (e.logprobs) add_legacy_logprobs(*e.logprobs, logprobs[i], offsets[i]);
            if (e.kind == GenerationEvent::Kind::Done) {
                finish[i] = completion_finish_reason(e.finish_reason);
                metrics_.count_request("openai", finish[i]);
            }
            if (e.last) usage = e.total;
        });
        if (!answered) return;
        json choices = json::array();
        for (size_t i = 0; i < n; ++i)
            choices.push_back({{"index", i},
                               {"text", texts[i]},
                               {"logprobs", c.logprobs >= 0 ? logprobs[i] : json()},
                               {"finish_reason", finish[i]}});
        res.set_content(dump_json(json{{"id", id},
                                       {"object", "text_completion"},
                                       {"created", call->created},
                                       {"model", call->model},
                                       {"system_fingerprint", "strata"},
                                       {"choices", choices},
                                       {"usage", completion_usage(usage)}}),
                        "application/json");
        return;
    }

    auto offsets = std::make_shared<std::vector<size_t>>(n, echo.size());
    auto chunk = [call, id](SseOut& out, size_t index, const std::string& text, json logprobs, json finish) {
        json c = {
            {"id", id},
            {"object", "text_completion"},
            {"created", call->created},
            {"model", call->model},
            {"choices",
             json::array(
                 {{{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish)}}})}};
        if (call->completion.include_usage) c["usage"] = nullptr;
        return out.write("data: " + dump_json(c) + "\n\n");
    };
    StreamTranslator t;
    t.begin = [chunk, n, echo](SseOut& out) {
        if (!echo.empty())
            for (size_t i = 0; i < n; ++i)
                if (!chunk(out, i, echo, nullptr, nullptr)) return false;
        return true;
    };
    t.event = [this, call, id, offsets, chunk](const CallEvent& e, SseOut& out) {
        const size_t i = e.choice;
        std::string text;
        for (const auto& o : e.outputs) text += o.text;
        json lp = nullptr;
        if (call->completion.logprobs >= 0 && e.logprobs) {
            lp = empty_legacy_logprobs();
            add_legacy_logprobs(*e.logprobs, lp, (*offsets)[i]);
        }
        const bool done = e.kind == GenerationEvent::Kind::Done;
        if (!text.empty() || !lp.is_null() || done) {
            json finish = done ? json(completion_finish_reason(e.finish_reason)) : json();
            if (!chunk(out, i, text, lp, finish)) return false;
        }
        if (!done) return true;
        metrics_.count_request("openai", completion_finish_reason(e.finish_reason));
        if (!e.last) return true;
        std::string tail;
        if (call->completion.include_usage)
            tail += "data: " +
                    dump_json(json{{"id", id},
                                   {"object", "text_completion"},
                                   {"created", call->created},
                                   {"model", call->model},
                                   {"choices", json::array()},
                                   {"usage", completion_usage(e.total)}}) +
                    "\n\n";
        tail += "data: [DONE]\n\n";
        if (!out.write(tail)) return false;
        out.finish();
        return true;
    };
    stream(call, res, std::move(t));
}

}  // namespace strata::serve
