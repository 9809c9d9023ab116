#include "gateway/gateway.h"

#include <httplib.h>

#include <cstdio>

#include "gateway/context/session_cache.h"
#include "gateway/context/session_store.h"
#include "gateway/lane.h"
#include "gateway/lane_pooling.h"
#include "gateway/upstream_call.h"
#include "gateway/window_guard.h"
#include "net/http_server.h"
#include "serve/api_shapes.h"
#include "serve/server_call.h"
#include "util/error.h"

namespace strata::gateway {

using nlohmann::json;
using serve::ApiError;
using serve::ApiKind;
using serve::ojson;

// Where a request in flight is (GET /concurrency shows it). Not in the anonymous namespace:
// Gateway::Flight has a member of this type, which g++ reports (-Wsubobject-linkage) once this file
// is compiled inside a unity unit.
enum class FlightState { Queued, Guarding, WaitingLane, Upstream, Streaming };

namespace {

const char* state_name(FlightState s) {
    switch (s) {
        case FlightState::Queued: return "queued";
        case FlightState::Guarding: return "assembling";
        case FlightState::WaitingLane: return "waiting_for_lane";
        case FlightState::Upstream: return "upstream";
        case FlightState::Streaming: return "streaming";
    }
    return "?";
}

// Token events in a piece of a lane's SSE stream (a content or tool-argument delta each).
int64_t count_delta_events(const std::string& text) {
    int64_t n = 0;
    for (const char* marker :
         {"\"delta\":{\"content\"", "\"delta\":{\"reasoning_content\"", "\"arguments\":", "content_block_delta",
          "event: response.output_text.delta", "event: response.reasoning_text.delta"})
        for (size_t pos = text.find(marker); pos != std::string::npos; pos = text.find(marker, pos + 1)) ++n;
    if (n == 0 && text.find("\"object\":\"text_completion\"") != std::string::npos)
        for (size_t pos = text.find("data: {"); pos != std::string::npos; pos = text.find("data: {", pos + 1)) ++n;
    return n;
}

bool stream_finished(ApiKind api, const std::string& tail) {
    return api == ApiKind::Anthropic ? tail.find("message_stop") != std::string::npos
                                     : tail.find("data: [DONE]") != std::string::npos;
}

// Whether a piece of a Responses stream (whole events) holds its terminal event. The tail is not
// enough: the terminal event carries the whole response object.
bool responses_stream_ended(const std::string& piece) {
    for (const char* marker : {"event: response.completed\n", "event: response.incomplete\n", "event: response.failed\n"})
        if (piece.find(marker) != std::string::npos) return true;
    return false;
}

}  // namespace

struct Gateway::Flight {
    std::string id, key, model, lane, path;
    ApiKind api = ApiKind::OpenAI;
    bool stream = false;
    std::function<bool()> closed;  // the client's connection: true once it has gone
    std::atomic<FlightState> state{FlightState::Queued};
    std::atomic<int> queue_position{0};
    std::atomic<int64_t> token_events{0}, prompt_tokens{0};
    std::atomic<bool> abridged{false}, saw_end{false}, first_byte{false};
    std::atomic<bool> responses_ended{false};  // a Responses stream's terminal event went through
    bool registered = false, ended = false;    // under flights_mu_
    std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
    std::string tail;  // the last bytes streamed (to see whether the lane ended the stream)
    bool gone() const { return closed && closed(); }
    double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count(); }
};

Gateway::Gateway(GatewayConfig config) : config_(std::move(config)), limiter_(config_.keys, config_.limits) {
    validate(config_);
    for (const auto& l : config_.lanes) {
        lanes_.push_back(std::make_unique<Lane>(l, std::chrono::seconds(config_.limits.lane_dead_s)));
        for (const auto& m : l.models) {
            if (m == "*") any_model_ = lanes_.back().get();
            else by_model_[m] = lanes_.back().get();
        }
    }
}

Gateway::~Gateway() {
    stop();
    for (auto& l : lanes_) l->stop();
}

void Gateway::start() {
    const LongContextConfig& lc = config_.long_context;
    for (auto& l : lanes_) {
        if (l->name() == lc.rerank_lane)
            reranker_ = std::make_shared<LaneReranker>(*l, std::chrono::milliseconds(lc.rerank_timeout_ms));
        if (l->name() == lc.embed_lane)
            embedder_ = std::make_shared<LaneEmbedder>(*l, std::chrono::milliseconds(lc.embed_timeout_ms), lc.embed_instruction,
                                                       static_cast<int>(lc.embed_dimensions));
    }
    guard_ = std::make_unique<WindowGuard>(lc, reranker_, embedder_);
    for (auto& l : lanes_) {
        log_line("starting lane " + l->name() + (l->supervised() ? " (supervised)" : " at " + l->config().upstream));
        l->start(l->supervised() ? std::chrono::minutes(10) : std::chrono::seconds(3));
    }
}

int Gateway::bind() {
    const LimitsConfig& l = config_.limits;
    net::ServerLimits limits;
    limits.worker_threads = l.http_threads > 0 ? l.http_threads : 512;
    limits.max_body_bytes = l.max_body_bytes;
    limits.max_connections = l.max_connections;
    limits.max_connections_per_peer = l.max_connections_per_peer;
    limits.head_timeout = std::chrono::seconds(l.header_timeout_s);
    limits.body_timeout = std::chrono::seconds(l.body_timeout_s);
    limits.idle_timeout = std::chrono::seconds(l.keepalive_timeout_s);
    limits.write_timeout = std::chrono::seconds(l.write_timeout_s);
    limits.max_header_bytes = static_cast<size_t>(l.max_header_kib) << 10;
    limits.max_headers = l.max_headers;
    http_ = std::make_unique<net::Server>(limits);
    if (!config_.tls_cert.empty()) {
        std::string why;
        if (!http_->use_tls(config_.tls_cert, config_.tls_key, why))
            throw Error("cannot use TLS certificate '" + config_.tls_cert + "' with key '" + config_.tls_key +
                        "' (unreadable or not a matching PEM pair: " + why + ")");
    }
    route();
    const int port = http_->bind(config_.host, config_.port);
    if (port < 0)
        throw Error("cannot listen on " + config_.host + ":" + std::to_string(config_.port) +
                    " (in use, or not an address of this machine)");
    log_line("listening on " + std::string(config_.tls_cert.empty() ? "http" : "https") + "://" + config_.host + ":" +
             std::to_string(port) + (limiter_.auth_required() ? "" : " (no API key required)") + "; at most " +
             std::to_string(http_->limits().max_connections) + " connections, " +
             std::to_string(http_->limits().max_connections_per_peer) + " from one address");
    return port;
}

void Gateway::listen() { http_->listen(); }

void Gateway::stop() {
    if (http_) http_->stop();
}

bool Gateway::trusted_peer(const net::Request& req) const {
    return req.remote_addr == "127.0.0.1" || req.remote_addr == "::1" || req.remote_addr == "::ffff:127.0.0.1";
}

std::optional<std::string> Gateway::authenticate(const net::Request& req, net::Response& res, ApiKind api) {
    auto name = limiter_.identify(serve::presented_key(req.get_header_value("x-api-key"), req.get_header_value("Authorization")));
    if (!name) {
        reply_error(res, api, ApiError(401, api == ApiKind::Anthropic ? "invalid x-api-key" : "Incorrect API key provided"), "");
        metrics_.count_request(api == ApiKind::Anthropic ? "anthropic" : "openai", "unauthorized");
    }
    return name;
}

void Gateway::reply_error(net::Response& res, ApiKind api, const ApiError& e, const std::string& request_id) {
    res.status = e.status;
    if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
    res.set_content(serve::dump_json(serve::api_error_body(api, e, request_id)), "application/json");
}

Lane* Gateway::lane_for(const std::string& model) const {
    if (auto it = by_model_.find(model); it != by_model_.end()) return it->second;
    return any_model_;
}

std::shared_ptr<Gateway::Flight> Gateway::begin_flight(const net::Request& req, ApiKind api, const std::string& key) {
    auto f = std::make_shared<Flight>();
    f->id = "gw_" + serve::random_id(24);
    f->api = api;
    f->key = key;
    f->path = req.path;
    f->closed = req.is_connection_closed;
    return f;
}

// Publishes a flight to /concurrency once its model, stream flag and lane are set (they are read
// there under flights_mu_; the lane may change later only through set_lane).
void Gateway::register_flight(const std::shared_ptr<Flight>& f) {
    std::lock_guard lock(flights_mu_);
    flights_[f->id] = f;
    f->registered = true;
}

void Gateway::set_lane(Flight& f, const std::string& lane) {
    std::lock_guard lock(flights_mu_);
    f.lane = lane;
}

void Gateway::end_flight(const std::shared_ptr<Flight>& f, const std::string& outcome) {
    {
        std::lock_guard lock(flights_mu_);
        if (f->ended) return;
        f->ended = true;
        flights_.erase(f->id);
    }
    metrics_.count_request(f->api == ApiKind::Anthropic ? "anthropic" : "openai", outcome);
    if (outcome == "ok") metrics_.e2e.observe(f->seconds());
}

void Gateway::route() {
    auto& h = *http_;
    auto post = [this](ApiKind api, bool guard) {
        return [this, api, guard](const net::Request& req, net::Response& res) { forward(req, res, api, guard); };
    };
    // Keys are checked before a body is read (the pre-routing handler runs after the head), so an
    // unauthenticated client cannot make the gateway hold max_body_mib per connection.
    h.set_pre_routing_handler([this](const net::Request& req, net::Response& res) {
        if (req.path == "/" || req.path == "/health" || req.path == "/api/hello") return net::Server::HandlerResponse::Unhandled;
        if ((req.path == "/metrics" || req.path == "/concurrency") && trusted_peer(req))
            return net::Server::HandlerResponse::Unhandled;
        if (!limiter_.auth_required() || authenticate(req, res, serve::api_of_path(req.path)))
            return net::Server::HandlerResponse::Unhandled;
        return net::Server::HandlerResponse::Handled;
    });
    h.Post("/v1/chat/completions", post(ApiKind::OpenAI, true));
    h.Post("/v1/completions", post(ApiKind::OpenAI, false));
    h.Post("/v1/messages", post(ApiKind::Anthropic, true));
    h.Post("/v1/messages/count_tokens", post(ApiKind::Anthropic, false));
    h.Post("/v1/embeddings", post(ApiKind::OpenAI, false));
    h.Post("/v1/rerank", post(ApiKind::OpenAI, false));
    h.Post("/rerank", post(ApiKind::OpenAI, false));
    // The probes (docs/api.md): answered by the model's lane, like count_tokens.
    for (const char* path : {"/v1/chat/completions/input_tokens", "/tokenize", "/detokenize", "/apply-template"})
        h.Post(path, post(ApiKind::OpenAI, false));
    // The Responses API goes to the model's lane as it is (no window guard: the lane answers a
    // prompt that does not fit with its own 400); stored responses live on the lane that made them.
    h.Post("/v1/responses", post(ApiKind::Responses, false));
    auto stored = [this](const net::Request& req, net::Response& res) { stored_response(req, res); };
    h.Get(R"(/v1/responses/([^/]+))", stored);
    h.Delete(R"(/v1/responses/([^/]+))", stored);
    h.Post(R"(/v1/responses/([^/]+)/cancel)", stored);
    h.Get(R"(/v1/responses/([^/]+)/input_items)", stored);
    h.Post("/v1/gateway/assemble", [this](const net::Request& req, net::Response& res) { assemble_debug(req, res); });
    h.Get("/v1/models", [this](const net::Request& req, net::Response& res) { models(req, res); });
    h.Get(R"(/v1/models/(.+))", [this](const net::Request& req, net::Response& res) { models(req, res); });
    h.Get("/health", [this](const net::Request&, net::Response& res) { health(res); });
    h.Get("/concurrency", [this](const net::Request& req, net::Response& res) {
        if (trusted_peer(req) || authenticate(req, res, ApiKind::OpenAI)) concurrency(res);
    });
    h.Get("/metrics", [this](const net::Request& req, net::Response& res) {
        if (trusted_peer(req) || authenticate(req, res, ApiKind::OpenAI)) metrics(res);
    });
    h.Get("/api/hello", [](const net::Request&, net::Response& res) { res.set_content("{}", "application/json"); });
    h.Get("/",
          [](const net::Request&, net::Response& res) { res.set_content(R"({"server":"strata gateway"})", "application/json"); });
    serve::install_api_error_handlers(h, config_.limits.max_body_bytes, log_line);
    h.set_logger([](const net::Request& req, const net::Response& res) {
        if (req.path == "/health" || req.path == "/metrics" || req.path == "/concurrency") return;
        log_line(req.method + " " + req.path + " " + std::to_string(res.status) + " from " + req.remote_addr);
    });
}

void Gateway::forward(const net::Request& req, net::Response& res, ApiKind api, bool guard_window) {
    const auto key = authenticate(req, res, api);
    if (!key) return;
    std::shared_ptr<Flight> flight;
    try {
        forward_authenticated(req, res, api, guard_window, *key, flight);
    } catch (const std::exception& e) {
        // Anything unexpected (a store error, memory): the client still gets an answer and the
        // flight ends.
        log_line("internal error on " + req.path + ": " + e.what());
        reply_error(res, api, ApiError(500, std::string("internal error: ") + e.what()), flight ? flight->id : "");
        if (flight) end_flight(flight, "error");
    }
}

void Gateway::forward_authenticated(const net::Request& req, net::Response& res, ApiKind api, bool guard_window,
                                    const std::string& key_name, std::shared_ptr<Flight>& flight_out) {
    const std::optional<std::string> key = key_name;
    const std::string identity = limiter_.auth_required() ? *key : "addr:" + req.remote_addr;
    auto flight = begin_flight(req, api, identity);
    flight_out = flight;
    res.set_header(api == ApiKind::Anthropic ? "request-id" : "x-request-id", flight->id);
    auto fail = [&](const ApiError& e, const std::string& outcome) {
        if (e.status == 499) res.status = 499;  // the client left: nobody to answer
        else reply_error(res, api, e, flight->id);
        end_flight(flight, outcome);
    };
    ojson body;
    try {
        body = serve::parse_json_body(req.body);
        if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
        if (body.contains("model") && !body["model"].is_string()) throw ApiError(400, "model: must be a string", "model");
        if (body.contains("stream") && body["stream"].is_boolean()) flight->stream = body["stream"].get<bool>();
    } catch (const ApiError& e) {
        return fail(e, "rejected");
    }
    flight->model = body.value("model", "");
    Lane* lane = lane_for(flight->model);
    // A probe names no model (llama.cpp's shapes have none): with one lane, it is that lane's.
    const bool probe = req.path == "/tokenize" || req.path == "/detokenize" || req.path == "/apply-template";
    if (!lane && probe && flight->model.empty() && lanes_.size() == 1) lane = lanes_.front().get();
    if (!lane) {
        std::string ids;
        for (const auto& [id, l] : by_model_) ids += (ids.empty() ? "" : ", ") + id;
        return fail(
            ApiError(404,
                     flight->model.empty() ? "a model is required (served here: " + ids + ")"
                                           : "the model '" + flight->model + "' does not exist (served here: " + ids + ")",
                     "model"),
            "rejected");
    }
    flight->lane = lane->name();
    register_flight(flight);

    // The key's share: its rate, then one of its concurrency slots (FIFO queue in front).
    auto slot = std::make_shared<KeyLimiter::Slot>();
    const auto admitted = limiter_.acquire(
        identity, [&] { return flight->gone(); }, [&](int pos) { flight->queue_position = pos; }, *slot);
    if (admitted.outcome != KeyLimiter::Outcome::Admitted) {
        if (admitted.outcome == KeyLimiter::Outcome::Gone)
            return fail(ApiError(499, "client closed the connection"), "cancelled");
        const bool rate = admitted.outcome == KeyLimiter::Outcome::RateLimited;
        ApiError e(rate || api != ApiKind::Anthropic ? 429 : 529,
                   rate ? "rate limit exceeded for this key; retry after " + std::to_string(admitted.retry_after_s) + " s"
                        : (api == ApiKind::Anthropic ? "Overloaded" : "too many requests of this key are waiting; retry later"));
        e.retry_after_s = admitted.retry_after_s;
        return fail(e, "overloaded");
    }

    // A live lane (this one, its fallback, or this one once it is back), guarded, then the call.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(config_.limits.lane_wait_s);
    int answer_failures = 0;
    std::shared_ptr<UpstreamCall> call;
    GuardReport report;
    Lane* target = lane;
    for (;;) {
        target = lane;
        if (!lane->healthy() && !lane->config().fallback.empty()) {
            for (auto& l : lanes_)
                if (l->name() == lane->config().fallback && l->healthy()) target = l.get();
        }
        if (!target->healthy()) {
            flight->state = FlightState::WaitingLane;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (!target->wait_healthy(std::max(left, std::chrono::milliseconds(0)), [&] { return flight->gone(); })) {
                if (flight->gone()) return fail(ApiError(499, "client closed the connection"), "cancelled");
                ApiError e(503, "the lane '" + lane->name() + "' serving '" + flight->model + "' is unavailable; retry later");
                e.retry_after_s = std::max(1, config_.limits.lane_wait_s / 4);
                return fail(e, "unavailable");
            }
        }
        set_lane(*flight, target->name());
        report = GuardReport();
        ojson out = body;
        if (guard_window) {
            flight->state = FlightState::Guarding;
            try {
                const auto model = target->model();
                if (model) report = guard_->apply(api, out, req.body.size(), *model, identity);
            } catch (const ApiError& e) {
                return fail(e, "rejected");
            }
            if (report.ms > 0) assemble_seconds_.observe(report.ms / 1000.0);
            if (report.abridged)
                for (size_t m = 0; m < std::size(kRetrievalModes); ++m)
                    if (report.retrieval == kRetrievalModes[m]) ++abridged_[m];
            if (report.thinking_clamped || report.thinking_disabled) ++thinking_clamped_;
            flight->abridged = report.abridged;
            flight->prompt_tokens = report.prompt_tokens_out;
        }
        UpstreamCall::Headers headers{{"Content-Type", "application/json"}, {"x-strata-client", identity}};
        for (const char* h : {"anthropic-version", "anthropic-beta", "x-strata-tool-choice"})
            if (req.has_header(h)) headers.emplace_back(h, req.get_header_value(h));
        if (!target->config().upstream_key.empty()) headers.emplace_back("x-api-key", target->config().upstream_key);
        flight->state = FlightState::Upstream;
        UpstreamDeadlines deadlines;
        deadlines.first_byte = std::chrono::seconds(config_.limits.upstream_first_byte_s);
        deadlines.idle = std::chrono::seconds(config_.limits.upstream_idle_s);
        deadlines.alive = [target] { return target->alive(); };
        call = UpstreamCall::start(target->host(), target->port(), req.path, std::move(headers),
                                   report.changed() ? serve::dump_json(out) : req.body, std::move(deadlines));
        ++target->in_flight;
        const auto head = call->wait_head([&] { return flight->gone(); });
        if (head == UpstreamCall::Head::Ready && !flight->stream) {
            // A whole answer: a lane that dies before finishing it produced nothing the client saw.
            if (!call->wait_done([&] { return flight->gone(); })) {
                --target->in_flight;
                return fail(ApiError(499, "client closed the connection"), "cancelled");
            }
            if (!call->broken()) break;
        } else if (head == UpstreamCall::Head::Ready) {
            // A stream: nothing goes to the client before the lane's first bytes, so a lane that
            // dies before sending any is retried like a whole answer.
            if (!call->wait_body([&] { return flight->gone(); })) {
                --target->in_flight;
                return fail(ApiError(499, "client closed the connection"), "cancelled");
            }
            if (call->got_body() || !call->broken()) break;
        }
        --target->in_flight;
        if (head == UpstreamCall::Head::Gone) return fail(ApiError(499, "client closed the connection"), "cancelled");
        if (call->expired() && !call->lane_lost()) {
            // Alive (it answers /health) but no answer within the deadline: waiting longer or
            // elsewhere would hold the key's slot for nothing.
            log_line("request " + flight->id + ": lane " + target->name() + ": " + call->error());
            ApiError e(504, "the lane '" + target->name() + "' did not answer in time: " + call->error());
            e.retry_after_s = 1;
            return fail(e, "error");
        }
        // Unreachable, or lost before the answer was complete: wait for the lane again (a fresh
        // lane_wait_s) and retry — unreachable lanes any number of times within that wait, a
        // request whose lane died while answering it once (it may be what kills the lane).
        target->report_failure();
        ++lane_retries_;
        log_line("request " + flight->id + ": lane " + target->name() + " failed (" + call->error() + "); retrying");
        const bool died_answering = head != UpstreamCall::Head::Unreachable;
        if (died_answering) deadline = std::chrono::steady_clock::now() + std::chrono::seconds(config_.limits.lane_wait_s);
        if ((died_answering && ++answer_failures > 1) || std::chrono::steady_clock::now() >= deadline) {
            ApiError e(503, "the lane '" + target->name() + "' failed while answering; retry later");
            e.retry_after_s = 1;
            return fail(e, "unavailable");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }

    if (report.abridged)
        res.set_header("x-strata-context", "abridged; retrieval=" + report.retrieval +
                                               "; tokens_in=" + std::to_string(report.prompt_tokens_in) +
                                               "; tokens_out=" + std::to_string(report.prompt_tokens_out));
    if (report.thinking_clamped || report.thinking_disabled)
        res.set_header("x-strata-thinking", report.thinking_disabled ? "disabled" : "clamped");
    if (const std::string ra = call->header("Retry-After"); !ra.empty()) res.set_header("Retry-After", ra);
    const int status = call->status();
    // The lane refused the gateway's own credentials: the client's key is fine (it passed here),
    // so a 401 would mislead; the operator's lane key is what is wrong.
    if (status == 401 || status == 403) {
        call->cancel();
        --target->in_flight;
        return fail(
            ApiError(502, "the lane '" + target->name() + "' refused the gateway (HTTP " + std::to_string(status) +
                              "): give the lane's key as upstream_key in its [[lanes]] entry (--upstream-key with --upstream)"),
            "error");
    }
    const std::string type = call->header("Content-Type");
    if (!flight->stream || status != 200 || type.rfind("text/event-stream", 0) != 0) {
        std::string whole;
        call->wait_done(nullptr);
        while (call->take(whole, std::chrono::milliseconds(0), false)) {
        }
        --target->in_flight;
        res.status = status;
        res.set_content(whole, type.empty() ? "application/json" : type);
        metrics_.ttft.observe(flight->seconds());
        return end_flight(flight, status == 200 ? "ok" : status >= 500 ? "error" : "rejected");
    }

    // A stream: whole events passed through as they come; a lane that dies mid-answer ends it
    // with an error in the API's shape.
    flight->state = FlightState::Streaming;
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        type,
        [this, call, flight, api](size_t, net::DataSink& sink) {
            std::string out;
            const bool more = call->take(out, std::chrono::milliseconds(100), true);
            if (!out.empty()) {
                if (!flight->first_byte.exchange(true)) metrics_.ttft.observe(flight->seconds());
                flight->token_events += count_delta_events(out);
                flight->tail = out.size() > 256 ? out.substr(out.size() - 256) : out;
                if (api == ApiKind::Responses && responses_stream_ended(out)) flight->responses_ended = true;
                if (!sink.write(out.data(), out.size())) {
                    call->cancel();
                    return false;
                }
            }
            if (!more) {
                if (api == ApiKind::Responses ? !flight->responses_ended.load() : !stream_finished(api, flight->tail)) {
                    const std::string why = call->broken() ? call->error() : std::string("the stream ended early");
                    log_line("request " + flight->id + ": lane " + flight->lane + " failed mid-stream (" + why + ")");
                    const std::string err =
                        serve::api_stream_error(api, "the model's lane failed mid-answer (" + why + "); retry the request");
                    sink.write(err.data(), err.size());
                    flight->saw_end = false;
                } else {
                    flight->saw_end = true;
                }
                sink.done();
                return true;
            }
            if (out.empty() && flight->gone()) {
                call->cancel();
                return false;
            }
            return true;
        },
        [this, call, flight, slot, target](bool success) {
            call->cancel();  // no-op once the lane's answer is complete; stops it otherwise (client gone, shutdown)
            --target->in_flight;
            end_flight(flight, !success ? "cancelled" : flight->saw_end ? "ok" : "error");
            (void)slot;  // the key's slot is held until the stream ends
        });
}

void Gateway::stored_response(const net::Request& req, net::Response& res) {
    const auto key = authenticate(req, res, ApiKind::Responses);
    if (!key) return;
    // The identity the lane stored the response under (forward_authenticated sends the same).
    const std::string identity = limiter_.auth_required() ? *key : "addr:" + req.remote_addr;
    const std::string id = "gw_" + serve::random_id(24);
    res.set_header("x-request-id", id);
    httplib::Headers headers{{"x-strata-client", identity}};
    // The response lives on the lane that made it: each lane is asked in turn (a response id is
    // random, so at most one has it); the first answer other than 404 is the answer.
    bool any_reached = false;
    for (const auto& lane : lanes_) {
        if (!lane->healthy()) continue;
        httplib::Client cli(lane->host(), lane->port());
        cli.set_connection_timeout(std::chrono::seconds(5));
        cli.set_read_timeout(std::chrono::seconds(30));
        httplib::Headers h = headers;
        if (!lane->config().upstream_key.empty()) h.emplace("x-api-key", lane->config().upstream_key);
        const std::string target = req.target.empty() ? req.path : req.target;
        httplib::Result r = req.method == "DELETE" ? cli.Delete(target, h)
                            : req.method == "POST" ? cli.Post(target, h, req.body, "application/json")
                                                   : cli.Get(target, h);
        if (!r) continue;
        any_reached = true;
        if (r->status == 404) continue;
        if (r->status == 401 || r->status == 403)
            return reply_error(
                res, ApiKind::Responses,
                ApiError(502, "the lane '" + lane->name() + "' refused the gateway (HTTP " + std::to_string(r->status) +
                                  "): give the lane's key as upstream_key in its [[lanes]] entry"),
                id);
        res.status = r->status;
        const std::string type = r->get_header_value("Content-Type");
        return res.set_content(r->body, type.empty() ? "application/json" : type);
    }
    if (!any_reached) {
        ApiError e(503, "no lane is available to look the response up; retry later");
        e.retry_after_s = 1;
        return reply_error(res, ApiKind::Responses, e, id);
    }
    reply_error(res, ApiKind::Responses,
                ApiError(404, "No response found with id '" + req.matches[1].str() + "'.", "response_id"), id);
}

void Gateway::assemble_debug(const net::Request& req, net::Response& res) {
    if (!config_.debug_endpoints || !trusted_peer(req)) {
        reply_error(
            res, ApiKind::OpenAI,
            ApiError(
                404,
                "no such endpoint: POST /v1/gateway/assemble (start the gateway with --debug-endpoints; loopback clients only)"),
            "");
        return;
    }
    const ApiKind api =
        req.get_param_value("api") == "anthropic" || req.has_header("anthropic-version") ? ApiKind::Anthropic : ApiKind::OpenAI;
    const auto key = authenticate(req, res, api);
    if (!key) return;
    try {
        ojson body = serve::parse_json_body(req.body);
        if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
        Lane* lane = lane_for(body.value("model", ""));
        if (!lane) throw ApiError(404, "no lane serves the model '" + body.value("model", "") + "'", "model");
        const auto model = lane->model();
        if (!model) throw ApiError(503, "the lane '" + lane->name() + "' has not reported its model yet");
        const auto report =
            guard_->apply(api, body, req.body.size(), *model, limiter_.auth_required() ? *key : "addr:" + req.remote_addr);
        ojson out = {{"lane", lane->name()},
                     {"window", model->window},
                     {"abridged", report.abridged},
                     {"retrieval", report.retrieval},
                     {"prompt_tokens_in", report.prompt_tokens_in},
                     {"prompt_tokens_out", report.prompt_tokens_out},
                     {"counted", report.counted},
                     {"thinking_clamped", report.thinking_clamped},
                     {"thinking_disabled", report.thinking_disabled},
                     {"ms", report.ms},
                     {"stats", report.stats},
                     {"body", std::move(body)}};
        res.set_content(serve::dump_json(out), "application/json");
    } catch (const ApiError& e) {
        reply_error(res, api, e, "");
    }
}

void Gateway::models(const net::Request& req, net::Response& res) {
    if (!authenticate(req, res, ApiKind::OpenAI)) return;
    json data = json::array();
    auto entry = [](const std::string& id, const Lane& lane) {
        const auto m = lane.model();
        json e = {{"id", id},
                  {"object", "model"},
                  {"type", "model"},
                  {"created", 0},
                  {"created_at", "1970-01-01T00:00:00Z"},
                  {"display_name", id},
                  {"owned_by", "strata"},
                  {"lane", lane.name()}};
        if (m && m->window > 0) {
            e["context_length"] = m->window;
            e["max_model_len"] = m->window;
        }
        return e;
    };
    for (const auto& lane : lanes_)
        for (const auto& id : lane->config().models) {
            if (id != "*") data.push_back(entry(id, *lane));
            else if (const auto m = lane->model()) data.push_back(entry(m->id, *lane));
        }
    if (req.matches.size() > 1) {
        for (const auto& e : data)
            if (e["id"] == req.matches[1].str()) return res.set_content(serve::dump_json(e), "application/json");
        if (Lane* l = lane_for(req.matches[1].str()))
            return res.set_content(serve::dump_json(entry(req.matches[1].str(), *l)), "application/json");
        return reply_error(res, ApiKind::OpenAI,
                           ApiError(404, "the model '" + req.matches[1].str() + "' does not exist", "model"), "");
    }
    json list = {{"object", "list"}, {"data", data}, {"has_more", false}};
    if (!data.empty()) {
        list["first_id"] = data.front()["id"];
        list["last_id"] = data.back()["id"];
    }
    res.set_content(serve::dump_json(list), "application/json");
}

void Gateway::health(net::Response& res) {
    json lanes = json::array();
    bool any = false;
    for (const auto& l : lanes_) {
        any = any || l->healthy();
        lanes.push_back(
            {{"name", l->name()}, {"healthy", l->healthy()}, {"restarts", l->restarts()}, {"in_flight", l->in_flight.load()}});
    }
    res.status = any ? 200 : 503;
    if (!any) res.set_header("Retry-After", "1");
    res.set_content(serve::dump_json(json{{"status", any ? "ok" : "no lane available"}, {"lanes", lanes}}), "application/json");
}

void Gateway::concurrency(net::Response& res) {
    json lanes = json::array(), keys = json::array(), requests = json::array();
    for (const auto& l : lanes_) {
        const auto m = l->model();
        lanes.push_back({{"name", l->name()},
                         {"healthy", l->healthy()},
                         {"in_flight", l->in_flight.load()},
                         {"restarts", l->restarts()},
                         {"model", m ? m->id : ""},
                         {"window", m ? m->window : 0}});
    }
    for (const auto& k : limiter_.snapshot())
        if (k.running > 0 || k.queued > 0)
            keys.push_back({{"key", k.name}, {"running", k.running}, {"queued", k.queued}, {"limit", k.limit}});
    {
        std::lock_guard lock(flights_mu_);
        for (const auto& [id, f] : flights_) {
            json r = {{"id", id},
                      {"key", f->key},
                      {"lane", f->lane},
                      {"model", f->model},
                      {"api", f->api == ApiKind::Anthropic ? "anthropic" : "openai"},
                      {"path", f->path},
                      {"stream", f->stream},
                      {"state", state_name(f->state.load())},
                      {"token_events", f->token_events.load()},
                      {"prompt_tokens", f->prompt_tokens.load()},
                      {"abridged", f->abridged.load()},
                      {"elapsed_s", f->seconds()}};
            if (f->state.load() == FlightState::Queued && f->queue_position.load() > 0)
                r["queue_position"] = f->queue_position.load();
            requests.push_back(std::move(r));
        }
    }
    res.set_content(serve::dump_json(json{{"lanes", lanes}, {"keys", keys}, {"requests", requests}}), "application/json");
}

void Gateway::metrics(net::Response& res) {
    std::string extra;
    auto line = [&](const std::string& name, const std::string& help, const std::string& type,
                    const std::vector<std::pair<std::string, double>>& samples) {
        extra += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
        for (const auto& [labels, v] : samples) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%.9g", v);
            extra += name + labels + " " + buf + "\n";
        }
    };
    std::vector<std::pair<std::string, double>> up, inflight, restarts;
    for (const auto& l : lanes_) {
        const std::string label = "{lane=\"" + l->name() + "\"}";
        up.emplace_back(label, l->healthy() ? 1 : 0);
        inflight.emplace_back(label, l->in_flight.load());
        restarts.emplace_back(label, l->restarts());
    }
    line("strata_gateway_lane_up", "1 while the lane answers /health.", "gauge", up);
    line("strata_gateway_lane_in_flight", "Requests at the lane.", "gauge", inflight);
    line("strata_gateway_lane_restarts_total", "Times a supervised lane was restarted.", "counter", restarts);
    int running = 0, queued = 0;
    for (const auto& k : limiter_.snapshot()) {
        running += k.running;
        queued += k.queued;
    }
    line("strata_gateway_requests_running", "Requests holding a key's concurrency slot.", "gauge", {{"", running}});
    line("strata_gateway_requests_queued", "Requests waiting for a key's concurrency slot.", "gauge", {{"", queued}});
    line("strata_gateway_abridged_total", "Requests whose conversation was abridged to fit the lane's window, by retrieval mode.",
         "counter", [&] {
             std::vector<std::pair<std::string, double>> v;
             for (size_t m = 0; m < std::size(kRetrievalModes); ++m)
                 v.emplace_back(std::string("{retrieval=\"") + kRetrievalModes[m] + "\"}",
                                static_cast<double>(abridged_[m].load()));
             return v;
         }());
    if (reranker_)
        line("strata_gateway_rerank_failures_total",
             "Retrievals whose rerank lane failed or was late (their pool kept the BM25 order), of all rerank calls.", "counter",
             {{"{result=\"failed\"}", static_cast<double>(reranker_->failures())},
              {"{result=\"all\"}", static_cast<double>(reranker_->calls())}});
    if (embedder_) {
        line("strata_gateway_embed_failures_total",
             "Embedding calls to the embed lane that failed or were late (retrieval went on without them), of all.", "counter",
             {{"{result=\"failed\"}", static_cast<double>(embedder_->failures())},
              {"{result=\"all\"}", static_cast<double>(embedder_->calls())}});
        line("strata_gateway_chunks_embedded_total",
             "Conversation chunks the embed lane embedded for dense retrieval (a chunk once, barring two requests of one "
             "conversation at once).",
             "counter", {{"", static_cast<double>(embedder_->passages())}});
    }
    line("strata_gateway_thinking_clamped_total", "Requests whose thinking budget was clamped or turned off.", "counter",
         {{"", static_cast<double>(thinking_clamped_.load())}});
    line("strata_gateway_lane_retries_total", "Requests retried because a lane failed before answering.", "counter",
         {{"", static_cast<double>(lane_retries_.load())}});
    if (guard_) {
        SessionCache& cache = guard_->cache();
        line("strata_gateway_session_cache_bytes", "Bytes of the in-memory sessions (all lanes; bounded by cache_max_mib).",
             "gauge", {{"", static_cast<double>(cache.bytes())}});
        line("strata_gateway_session_cache_max_bytes", "The in-memory sessions' bound.", "gauge",
             {{"", static_cast<double>(cache.max_bytes())}});
        line("strata_gateway_session_cache_sessions", "Sessions in memory.", "gauge", {{"", static_cast<double>(cache.size())}});
        if (SessionStore* store = guard_->store())
            line("strata_gateway_session_store_up", "1 while the session store is in use; 0 once it turned off (memory only).",
                 "gauge", {{"", store->available() ? 1.0 : 0.0}});
    }
    assemble_seconds_.render(extra, "strata_gateway_window_guard_seconds",
                             "Time spent guarding the window (counting and assembling).");
    res.set_content(metrics_.render(extra), "text/plain; version=0.0.4");
}

}  // namespace strata::gateway
