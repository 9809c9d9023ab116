// The OpenAI Responses API: POST /v1/responses, whole or streamed as the published event sequence
// (response.created, response.in_progress, the items' events, then response.completed,
// response.incomplete or response.failed, each with its sequence_number), and the stored
// responses: GET, DELETE, POST .../cancel, GET .../input_items (docs/api.md, "Responses"). The
// request becomes a ChatRequest (responses_request.h) and runs on the chat machinery; the output
// items are ResponseOutput's (responses_output.h).
#include "net/http.h"

#include <ctime>

#include "serve/api_shapes.h"
#include "serve/responses_output.h"
#include "serve/served_model.h"
#include "serve/server_call.h"

namespace strata::serve {

namespace {

constexpr const char* kEncryptedPrefix = "strata1:";

// The id prefix of an input item without one (input_items lists every item by id).
const char* item_id_prefix(const std::string& type) {
    if (type == "message") return "msg_";
    if (type == "reasoning") return "rs_";
    if (type == "function_call") return "fc_";
    if (type.ends_with("_output")) return "fco_";
    return "item_";
}

// Why a Response ended, from its generation's finish reason.
struct Ending {
    std::string status = "completed";  // completed, incomplete, cancelled, failed
    ojson incomplete_details = nullptr;
    ojson error = nullptr;
};

Ending ending_of(const std::string& finish_reason) {
    Ending e;
    if (finish_reason == "length" || finish_reason == "context") {
        e.status = "incomplete";
        e.incomplete_details = {{"reason", "max_output_tokens"}};
    }
    return e;
}

// Thrown out of collect() when the response is cancelled while it is generated.
struct CancelledWhileCollecting {};

}  // namespace

std::string Server::encrypt_reasoning(const std::string& text) const {
    return kEncryptedPrefix + base64_encode(text) + "." + sign_thinking(text);
}

std::optional<std::string> Server::reasoning_from_encrypted(const std::string& encrypted) const {
    if (!encrypted.starts_with(kEncryptedPrefix)) return std::nullopt;
    const size_t dot = encrypted.rfind('.');
    if (dot == std::string::npos || dot < std::char_traits<char>::length(kEncryptedPrefix)) return std::nullopt;
    const size_t from = std::char_traits<char>::length(kEncryptedPrefix);
    auto text = base64_decode(encrypted.substr(from, dot - from));
    if (!text || !verify_thinking(*text, encrypted.substr(dot + 1))) return std::nullopt;
    return text;
}

void Server::responses(const net::Request& req, net::Response& res) {
    auto call = begin_call(req, res, ApiKind::Responses);
    try {
        call->responses = parse_openai_responses(parse_json_body(req.body), options_.limits);
        ResponsesRequest& r = call->responses;
        // x-strata-tool-choice: the tool choice of a turn that starts from the user's message, for
        // clients that cannot send tool_choice (Codex CLI: its provider's http_headers). A request
        // that carries tool results is the model's own to answer, so a forced call is not repeated.
        if (const std::string forced = req.get_header_value("x-strata-tool-choice");
            !forced.empty() && !r.input.empty() && r.input.back().value("type", "") == "message" &&
            r.input.back().value("role", "") == "user") {
            try {
                const bool keyword = forced == "auto" || forced == "none" || forced == "required";
                set_responses_tool_choice(r, keyword ? ojson(forced) : ojson{{"type", "function"}, {"name", forced}},
                                          options_.limits);
            } catch (const ApiError& e) {
                throw ApiError(400, std::string("x-strata-tool-choice: ") + e.what(), "tool_choice");
            }
        }
        ojson items = ojson::array();
        if (!r.previous_response_id.empty()) {
            const auto prev = responses_->get(r.previous_response_id, call->client);
            if (!prev)
                throw ApiError(400, "Previous response with id '" + r.previous_response_id + "' not found.",
                               "previous_response_id");
            items = prev->context;
        }
        for (auto& item : r.input) {
            if (!item.contains("id")) item["id"] = item_id_prefix(item.value("type", "")) + random_id(24);
            items.push_back(item);
        }
        if (static_cast<int64_t>(items.size()) > options_.limits.max_messages)
            throw ApiError(400,
                           "input: the conversation has " + std::to_string(items.size()) + " items, more than the limit of " +
                               std::to_string(options_.limits.max_messages),
                           "input");
        call->chat = r.chat;
        call->chat.messages = responses_messages(
            r.instructions, items, [this](const std::string& e) { return reasoning_from_encrypted(e); }, call->chat.has_images);
        call->response_context = std::move(items);
        call->model = call->chat.model.empty() ? options_.model_name : call->chat.model;
        try {
            call->prepared = model_->prepare(call->chat);
        } catch (const ApiError& e) {
            if (e.param != "messages" && e.param != "response_format") throw;
            ApiError renamed(e.status, e.what(), e.param == "messages" ? "input" : "text.format");
            throw renamed;
        }
        run_generations(*call, true);
        answer_responses(call, res);
    } catch (const ApiError& e) {
        fail_call(*call, res, e);
    }
}

void Server::answer_responses(std::shared_ptr<Call> call, net::Response& res) {
    const ResponsesRequest& r = call->responses;
    call->response_id = "resp_" + call->request_id.substr(4);
    res.set_header("x-strata-response-id", call->response_id);

    // The response object: the request's settings echoed, then what this response produced.
    ojson base = ojson::object();
    base["id"] = call->response_id;
    base["object"] = "response";
    base["created_at"] = call->created;
    base["status"] = "in_progress";
    base["background"] = false;
    base["error"] = nullptr;
    base["incomplete_details"] = nullptr;
    base["instructions"] = r.instructions ? ojson(*r.instructions) : ojson();
    base["model"] = call->model;
    base["output"] = ojson::array();
    base["previous_response_id"] = r.previous_response_id.empty() ? ojson() : ojson(r.previous_response_id);
    base["store"] = r.store;
    for (const auto& [key, value] : r.echo.items()) base[key] = value;
    base["usage"] = nullptr;
    auto finished = [this, call](ojson response, const Ending& end, const ojson& output, const Usage& usage) {
        response["status"] = end.status;
        response["incomplete_details"] = end.incomplete_details;
        response["error"] = end.error;
        response["output"] = output;
        response["usage"] = responses_usage(usage);
        response["completed_at"] = end.status == "completed" ? ojson(static_cast<int64_t>(std::time(nullptr))) : ojson();
        if (call->responses.store && end.status != "failed") {
            StoredResponse s;
            s.id = call->response_id;
            s.owner = call->client;
            s.response = response;
            s.input = call->responses.input;
            s.context = call->response_context;
            for (const auto& item : output) s.context.push_back(item);
            responses_->put(std::move(s));
        }
        // A failed one is counted where the failure is handled (collect / stream).
        if (end.status != "failed")
            metrics_.count_request("openai", end.status == "completed"    ? "stop"
                                             : end.status == "incomplete" ? "length"
                                                                          : end.status);
        return response;
    };

    call->flight = std::make_shared<ResponseStore::InFlight>();
    call->flight->owner = call->client;
    call->flight->skeleton = base;
    call->flight_token = responses_->begin(call->response_id, call->flight);

    ResponseOutput::Options options;
    options.summary = r.reasoning_summary;
    if (r.include_encrypted_reasoning) options.encrypt = [this](const std::string& text) { return encrypt_reasoning(text); };
    options.make_id = [](const std::string& prefix) { return prefix + random_id(24); };

    if (!call->chat.stream) {
        ResponseOutput out(options);
        std::vector<ojson> events;  // not sent: the whole answer is the items
        std::string finish = "stop";
        Usage usage = call->usage();
        bool cancelled = false;
        try {
            const bool answered = collect(*call, res, [&](const CallEvent& e) {
                if (call->flight->cancel) throw CancelledWhileCollecting{};
                for (const auto& o : e.outputs) out.add(o, events);
                if (e.kind == GenerationEvent::Kind::Done) finish = e.finish_reason;
                if (e.last) usage = e.total;
            });
            if (!answered) return;
        } catch (const CancelledWhileCollecting&) {
            cancelled = true;
            call->group->cancel();
        }
        Ending end = ending_of(finish);
        if (cancelled) end = Ending{"cancelled", nullptr, nullptr};
        out.finish(end.status != "completed", events);
        res.set_content(dump_json(finished(base, end, out.items(), usage)), "application/json");
        return;
    }

    // Streamed: every event numbered; the items' events as the output comes.
    struct Stream {
        explicit Stream(ResponseOutput::Options o) : out(std::move(o)) {}
        ResponseOutput out;
        int64_t sequence = 0;
        std::vector<ojson> events;
        std::string take() {
            std::string text;
            for (auto& e : events) {
                e["sequence_number"] = sequence++;
                text += "event: " + e["type"].get<std::string>() + "\ndata: " + dump_json(e) + "\n\n";
            }
            events.clear();
            return text;
        }
    };
    auto st = std::make_shared<Stream>(options);
    auto end_stream_with = [st, base, finished](const Ending& end, const Usage& usage, SseOut& out) {
        st->out.finish(end.status != "completed", st->events);
        const ojson response = finished(base, end, st->out.items(), usage);
        const char* type = end.status == "completed" ? "response.completed"
                           : end.status == "failed"  ? "response.failed"
                                                     : "response.incomplete";
        st->events.push_back({{"type", type}, {"response", response}});
        const bool ok = out.write(st->take());
        out.finish();
        return ok;
    };
    StreamTranslator t;
    t.begin = [st, base](SseOut& out) {
        st->events.push_back({{"type", "response.created"}, {"response", base}});
        st->events.push_back({{"type", "response.in_progress"}, {"response", base}});
        return out.write(st->take());
    };
    t.idle = [call, end_stream_with](SseOut& out) {
        if (!call->flight->cancel) return true;
        return end_stream_with(Ending{"cancelled", nullptr, nullptr}, call->usage(), out);
    };
    t.event = [call, st, end_stream_with](const CallEvent& e, SseOut& out) {
        for (const auto& o : e.outputs) st->out.add(o, st->events);
        if (e.kind == GenerationEvent::Kind::Done) return end_stream_with(ending_of(e.finish_reason), e.total, out);
        if (call->flight->cancel) return end_stream_with(Ending{"cancelled", nullptr, nullptr}, call->usage(), out);
        return st->events.empty() || out.write(st->take());
    };
    t.failed = [st, base, finished, call](const std::string& message) {
        st->out.finish(true, st->events);
        st->events.push_back(
            {{"type", "error"},
             {"code", "server_error"},
             {"message", message},
             {"param", nullptr},
             {"error", {{"type", "server_error"}, {"code", "server_error"}, {"message", message}, {"param", nullptr}}}});
        const Ending end{"failed", nullptr, {{"code", "server_error"}, {"message", message}}};
        st->events.push_back({{"type", "response.failed"}, {"response", finished(base, end, st->out.items(), call->usage())}});
        return st->take();
    };
    stream(call, res, std::move(t));
}

// ---------------------------------------------------------------------------------------------
// Stored responses

namespace {

ApiError response_not_found(const std::string& id) {
    return ApiError(404, "No response found with id '" + id + "'.", "response_id");
}

}  // namespace

void Server::response_get(const net::Request& req, net::Response& res) {
    auto call = begin_call(req, res, ApiKind::Responses);
    const std::string id = req.matches[1];
    try {
        if (req.get_param_value("stream") == "true")
            throw ApiError(
                400, "stream: replaying a response's events is only for background responses, which this server does not run",
                "stream");
        if (const auto stored = responses_->get(id, call->client))
            return res.set_content(dump_json(stored->response), "application/json");
        if (const auto flight = responses_->in_flight(id, call->client))
            return res.set_content(dump_json(flight->skeleton), "application/json");
        throw response_not_found(id);
    } catch (const ApiError& e) {
        reply_error(*call, res, e);
    }
}

void Server::response_delete(const net::Request& req, net::Response& res) {
    auto call = begin_call(req, res, ApiKind::Responses);
    const std::string id = req.matches[1];
    if (!responses_->erase(id, call->client)) return reply_error(*call, res, response_not_found(id));
    res.set_content(dump_json(ojson{{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
}

void Server::response_cancel(const net::Request& req, net::Response& res) {
    auto call = begin_call(req, res, ApiKind::Responses);
    const std::string id = req.matches[1];
    if (const auto flight = responses_->in_flight(id, call->client)) {
        flight->cancel = true;
        ojson response = flight->skeleton;
        response["status"] = "cancelled";
        return res.set_content(dump_json(response), "application/json");
    }
    if (const auto stored = responses_->get(id, call->client))
        return reply_error(*call, res,
                           ApiError(400,
                                    "Cannot cancel a response that is not in progress: '" + id + "' is " +
                                        stored->response.value("status", std::string("completed")) + ".",
                                    "response_id"));
    reply_error(*call, res, response_not_found(id));
}

void Server::response_input_items(const net::Request& req, net::Response& res) {
    auto call = begin_call(req, res, ApiKind::Responses);
    const std::string id = req.matches[1];
    try {
        const auto stored = responses_->get(id, call->client);
        if (!stored) throw response_not_found(id);
        int64_t limit = 20;
        if (req.has_param("limit")) {
            const std::string v = req.get_param_value("limit");
            char* end = nullptr;
            limit = std::strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || limit < 1 || limit > 100)
                throw ApiError(400, "limit: expected an integer from 1 to 100", "limit");
        }
        const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
        if (order != "asc" && order != "desc") throw ApiError(400, "order: expected asc or desc", "order");
        const std::string after = req.get_param_value("after");
        std::vector<const ojson*> items;
        for (const auto& item : stored->input) items.push_back(&item);
        if (order == "desc") std::reverse(items.begin(), items.end());
        size_t from = 0;
        if (!after.empty()) {
            while (from < items.size() && items[from]->value("id", std::string()) != after) ++from;
            if (from == items.size()) throw ApiError(400, "after: no input item with id '" + after + "'", "after");
            ++from;
        }
        ojson data = ojson::array();
        for (size_t i = from; i < items.size() && static_cast<int64_t>(data.size()) < limit; ++i) data.push_back(*items[i]);
        const bool more = from + data.size() < items.size();
        res.set_content(dump_json(ojson{{"object", "list"},
                                        {"data", data},
                                        {"first_id", data.empty() ? ojson() : data.front()["id"]},
                                        {"last_id", data.empty() ? ojson() : data.back()["id"]},
                                        {"has_more", more}}),
                        "application/json");
    } catch (const ApiError& e) {
        reply_error(*call, res, e);
    }
}

}  // namespace strata::serve
