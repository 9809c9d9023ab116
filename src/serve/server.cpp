#include "serve/server.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdio>
#include <ctime>
#include <filesystem>

#include "net/http_server.h"
#include "serve/api_shapes.h"
#include "serve/engine_client.h"
#include "serve/generation.h"
#include "serve/responses_store.h"
#include "serve/served_model.h"
#include "serve/server_call.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::serve {

using nlohmann::json;

namespace {

bool is_anthropic_path(const std::string& path) { return api_of_path(path) == ApiKind::Anthropic; }

void log_line(const std::string& line) {
    std::fprintf(stderr, "serve: %s\n", line.c_str());
    std::fflush(stderr);
}

}  // namespace

std::string random_id(size_t n) {
    static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string bytes(n, '\0');
    RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n));
    std::string out;
    for (unsigned char c : bytes) out += alphabet[c % 62];
    return out;
}

Server::Server(ServeOptions options)
    : options_(std::move(options)),
      responses_(std::make_unique<ResponseStore>(
          ResponseStoreOptions{options_.responses_store_max, options_.responses_store_bytes, options_.responses_db, {}})),
      admission_(options_.parallel, options_.max_queue),
      started_(std::chrono::steady_clock::now()) {
    // Keys are kept only as SHA-256 digests; a presented key is hashed and compared in constant time.
    for (auto& k : options_.api_keys) k = sha256_digest(k);
    thinking_key_ = std::string(32, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char*>(thinking_key_.data()), 32) != 1)
        throw Error("cannot make a signing key (RAND_bytes failed)");
}

Server::~Server() {
    if (http_) http_->stop();
}

void Server::start() {
    if (options_.model_name.empty()) options_.model_name = std::filesystem::path(options_.model_path).stem().string();
    model_ = std::make_unique<ServedModel>(options_.model_path, options_.model_name);
    options_.limits.n_vocab = model_->tokenizer().n_vocab();  // logit_bias ids outside it: a 400 at parse time
    try {
        model_info_gguf_ = model_->metadata_gguf();
    } catch (const std::exception& e) {
        // Only a gateway's window guard needs it: serve without (the route answers 404).
        log_line(std::string("cannot make the model-info file for a gateway: ") + e.what());
    }
    engine_ = std::make_unique<EngineClient>(options_.engine_argv);
    log_line("starting the engine: " + options_.engine_argv[0] + " engine -m " + options_.model_path);
    engine_->start();
    const json ready = engine_->ready_info();
    if (ready.contains("limits") && ready["limits"].contains("max_context"))
        model_->set_max_context(ready["limits"]["max_context"].get<int64_t>());
    log_line("engine ready: " + options_.model_name + " (" + model_->architecture() + "), context " +
             std::to_string(model_->max_context()) + ", output format " + to_string(model_->output_format()));
}

int Server::bind() {
    net::ServerLimits limits;
    limits.worker_threads = options_.http_threads > 0 ? options_.http_threads : options_.parallel + options_.max_queue + 16;
    limits.max_body_bytes = options_.max_body_bytes;
    limits.max_connections = options_.max_connections;
    limits.max_connections_per_peer = options_.max_connections_per_peer;
    limits.head_timeout = options_.head_timeout;
    limits.body_timeout = options_.read_timeout;
    limits.idle_timeout = options_.idle_timeout;
    limits.write_timeout = options_.write_timeout;
    http_ = std::make_unique<net::Server>(limits);
    route();
    const int port = http_->bind(options_.host, options_.port);
    if (port < 0)
        throw Error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                    " (in use, or not an address of this machine)");
    log_line("listening on http://" + options_.host + ":" + std::to_string(port) +
             (options_.api_keys.empty() ? " (no API key required)" : "") + "; at most " +
             std::to_string(http_->limits().max_connections) + " connections, " +
             std::to_string(http_->limits().max_connections_per_peer) + " from one address");
    return port;
}

void Server::listen() { http_->listen(); }

void Server::stop() {
    if (http_) http_->stop();
}

std::string Server::sign_thinking(const std::string& thinking) const {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    HMAC(EVP_sha256(), thinking_key_.data(), static_cast<int>(thinking_key_.size()),
         reinterpret_cast<const unsigned char*>(thinking.data()), thinking.size(), mac, &len);
    return base64_encode(std::string(reinterpret_cast<char*>(mac), len));
}

bool Server::verify_thinking(const std::string& thinking, const std::string& signature) const {
    const std::string expected = sign_thinking(thinking);
    return digest_equal(signature, expected);
}

bool Server::authorized(const net::Request& req) const {
    if (options_.api_keys.empty()) return true;
    const std::string key = presented_key(req.get_header_value("x-api-key"), req.get_header_value("Authorization"));
    if (key.empty()) return false;
    const std::string digest = sha256_digest(key);
    bool ok = false;
    for (const auto& k : options_.api_keys) ok |= digest_equal(k, digest);
    return ok;
}

// The fairness key of a request: the identity a gateway in front names (x-strata-client: a key's
// name, never its secret), else the presented key's digest, else the peer address.
std::string Server::client_of(const net::Request& req) const {
    if (const std::string via = req.get_header_value("x-strata-client"); !via.empty() && via.size() <= 256) return "via:" + via;
    const std::string key = presented_key(req.get_header_value("x-api-key"), req.get_header_value("Authorization"));
    if (!key.empty()) return "key:" + hex_of(sha256_digest(key)).substr(0, 16);
    return "addr:" + req.remote_addr;
}

void Server::reply_error(const Call& call, net::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
    res.set_content(dump_json(api_error_body(call.api, e, call.request_id)), "application/json");
}

void Server::route() {
    auto& h = *http_;
    // Authentication and request ids before any handler; errors in the shape of the path's API.
    h.set_pre_routing_handler([this](const net::Request& req, net::Response& res) {
        const bool anthropic = is_anthropic_path(req.path);
        const std::string rid = "req_" + random_id(24);
        res.set_header(anthropic ? "request-id" : "x-request-id", rid);
        const bool open = req.path == "/" || req.path == "/health" || req.path == "/metrics" || req.path == "/api/hello";
        if (!open && !authorized(req)) {
            Call call;
            call.api = anthropic ? ApiKind::Anthropic : ApiKind::OpenAI;
            call.request_id = rid;
            reply_error(call, res, ApiError(401, anthropic ? "invalid x-api-key" : "Incorrect API key provided"));
            metrics_.count_request(anthropic ? "anthropic" : "openai", "unauthorized");
            return net::Server::HandlerResponse::Handled;
        }
        return net::Server::HandlerResponse::Unhandled;
    });
    h.Post("/v1/chat/completions", [this](const net::Request& req, net::Response& res) { chat(req, res, ApiKind::OpenAI); });
    h.Post("/v1/completions", [this](const net::Request& req, net::Response& res) { completion(req, res); });
    h.Post("/v1/messages", [this](const net::Request& req, net::Response& res) { chat(req, res, ApiKind::Anthropic); });
    h.Post("/v1/messages/count_tokens", [this](const net::Request& req, net::Response& res) { count_tokens(req, res); });
    h.Post("/v1/responses", [this](const net::Request& req, net::Response& res) { responses(req, res); });
    h.Get(R"(/v1/responses/([^/]+))", [this](const net::Request& req, net::Response& res) { response_get(req, res); });
    h.Delete(R"(/v1/responses/([^/]+))", [this](const net::Request& req, net::Response& res) { response_delete(req, res); });
    h.Post(R"(/v1/responses/([^/]+)/cancel)", [this](const net::Request& req, net::Response& res) { response_cancel(req, res); });
    h.Get(R"(/v1/responses/([^/]+)/input_items)",
          [this](const net::Request& req, net::Response& res) { response_input_items(req, res); });
    h.Post("/v1/chat/completions/input_tokens",
           [this](const net::Request& req, net::Response& res) { probe(req, res, Probe::InputTokens); });
    h.Post("/tokenize", [this](const net::Request& req, net::Response& res) { probe(req, res, Probe::Tokenize); });
    h.Post("/detokenize", [this](const net::Request& req, net::Response& res) { probe(req, res, Probe::Detokenize); });
    h.Post("/apply-template", [this](const net::Request& req, net::Response& res) { probe(req, res, Probe::ApplyTemplate); });
    h.Post("/v1/embeddings", [this](const net::Request& req, net::Response& res) { embeddings(req, res); });
    h.Post("/v1/rerank", [this](const net::Request& req, net::Response& res) { rerank(req, res); });
    h.Post("/rerank", [this](const net::Request& req, net::Response& res) { rerank(req, res); });
    h.Get("/v1/models", [this](const net::Request& req, net::Response& res) { models(req, res); });
    h.Get(R"(/v1/models/(.+))", [this](const net::Request& req, net::Response& res) { models(req, res); });
    h.Get("/health", [this](const net::Request&, net::Response& res) { health(res); });
    h.Get("/metrics", [this](const net::Request&, net::Response& res) { metrics(res); });
    // The tokenizer and template of this lane for a gateway in front (docs/gateway.md).
    h.Get("/strata/v1/model-info.gguf", [this](const net::Request&, net::Response& res) {
        if (model_info_gguf_.empty()) {
            Call call;
            reply_error(call, res, ApiError(404, "this lane has no model-info file (see its log)"));
            return;
        }
        res.set_content(model_info_gguf_, "application/octet-stream");
    });
    // Claude Code's warm-up probe.
    h.Get("/api/hello", [](const net::Request&, net::Response& res) { res.set_content("{}", "application/json"); });
    // Clients probe the root for reachability (Claude Code sends HEAD / at start): answered
    // without a key, saying nothing but what this is.
    h.Get("/", [](const net::Request&, net::Response& res) { res.set_content(R"({"server":"strata"})", "application/json"); });
    install_api_error_handlers(h, options_.max_body_bytes, log_line);
    h.set_logger([](const net::Request& req, const net::Response& res) {
        if (req.path == "/health" || req.path == "/metrics") return;
        log_line(req.method + " " + req.path + " " + std::to_string(res.status) + " from " + req.remote_addr);
    });
}

Admission::Ticket Server::admit(const Call& call) {
    Admission::Ticket ticket;
    const auto queued = std::chrono::steady_clock::now();
    switch (admission_.acquire(
        call.client, [&call] { return call.gone(); }, ticket)) {
        case Admission::Outcome::Admitted:
            metrics_.queue_time.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - queued).count());
            return ticket;
        case Admission::Outcome::QueueFull: {
            ApiError e(call.api == ApiKind::Anthropic ? 529 : 429,
                       call.api == ApiKind::Anthropic ? "Overloaded" : "the server is at capacity (queue full); retry later");
            e.retry_after_s = std::max(1, admission_.waiting() / std::max(1, admission_.slots()));
            throw e;
        }
        case Admission::Outcome::Gone: break;
    }
    throw ApiError(499, "client closed the connection");
}

std::shared_ptr<Server::Call> Server::begin_call(const net::Request& req, const net::Response& res, ApiKind api) {
    auto call = std::make_shared<Call>();
    call->api = api;
    call->request_id = res.get_header_value(api == ApiKind::Anthropic ? "request-id" : "x-request-id");
    call->created = static_cast<int64_t>(std::time(nullptr));
    call->closed = req.is_connection_closed;
    call->client = client_of(req);
    return call;
}

void Server::run_generations(Call& call, bool start) {
    call.ticket = std::make_shared<Admission::SharedTicket>(admit(call));
    metrics_.prompt_tokens += static_cast<uint64_t>(call.prepared.prompt_tokens) * call.prepared.choices.size();
    make_generations(call, start);
}

void Server::make_generations(Call& call, bool start) {
    call.group.reset();  // a previous run's requests end first (cancelled, drained)
    call.group = std::make_unique<GenerationGroup>();
    call.choice_usage.assign(call.prepared.choices.size(), Usage{});
    const std::string again = call.resubmits > 0 ? "~" + std::to_string(call.resubmits) : "";
    for (size_t i = 0; i < call.prepared.choices.size(); ++i)
        call.group->add(*engine_, model_->tokenizer(), call.request_id + "/" + std::to_string(i) + again,
                        call.prepared.choices[i], model_->max_context());
    if (!start) return;
    try {
        call.group->start();
    } catch (const EngineBusy& e) {
        ApiError busy(503, e.what());
        busy.retry_after_s = 1;
        throw busy;
    }
}

void Server::end_stream(Call& call, bool finished) {
    if (!finished) {
        call.group->cancel();
        metrics_.count_request(call.api == ApiKind::Anthropic ? "anthropic" : "openai", "cancelled");
    }
    if (call.ticket) call.ticket->release();
}

void Server::fail_call(const Call& call, net::Response& res, const ApiError& e) {
    const char* api_name = call.api == ApiKind::Anthropic ? "anthropic" : "openai";
    if (e.status == 499) {  // the client left while its request waited: nobody to answer
        metrics_.count_request(api_name, "cancelled");
        res.status = 499;
        return;
    }
    metrics_.count_request(api_name, e.status == 429 || e.status == 529 ? "overloaded" : e.status >= 500 ? "error" : "rejected");
    reply_error(call, res, e);
}

void Server::chat(const net::Request& req, net::Response& res, ApiKind api) {
    auto call = begin_call(req, res, api);
    try {
        const ojson body = parse_json_body(req.body);
        if (api == ApiKind::Anthropic) {
            call->chat = parse_anthropic_messages(
                body, options_.limits,
                [](const void* self, const std::string& t, const std::string& s) {
                    return static_cast<const Server*>(self)->verify_thinking(t, s);
                },
                this);
        } else {
            call->chat = parse_openai_chat(body, options_.limits);
        }
        call->model = call->chat.model.empty() ? options_.model_name : call->chat.model;
        call->prepared = model_->prepare(call->chat);
        // Anthropic's max_tokens 0 (cache pre-warming) generates nothing: the answer is empty.
        run_generations(*call, !(api == ApiKind::Anthropic && call->chat.max_tokens == 0));
        if (api == ApiKind::Anthropic) answer_anthropic(call, res);
        else answer_openai_chat(call, res);
    } catch (const ApiError& e) {
        fail_call(*call, res, e);
    }
}

void Server::completion(const net::Request& req, net::Response& res) {
    auto call = begin_call(req, res, ApiKind::OpenAI);
    try {
        call->completion = parse_openai_completion(parse_json_body(req.body), options_.limits);
        call->model = call->completion.model.empty() ? options_.model_name : call->completion.model;
        call->prepared = model_->prepare_completion(call->completion);
        run_generations(*call, call->completion.max_tokens > 0);
        answer_openai_completion(call, res);
    } catch (const ApiError& e) {
        fail_call(*call, res, e);
    }
}

void Server::count_tokens(const net::Request& req, net::Response& res) {
    Call call;
    call.api = ApiKind::Anthropic;
    call.request_id = res.get_header_value("request-id");
    try {
        const ChatRequest r = parse_anthropic_messages(
            parse_json_body(req.body), options_.limits,
            [](const void* self, const std::string& t, const std::string& s) {
                return static_cast<const Server*>(self)->verify_thinking(t, s);
            },
            this, true);
        res.set_content(dump_json(json{{"input_tokens", model_->count_tokens(r)}}), "application/json");
    } catch (const ApiError& e) {
        reply_error(call, res, e);
    }
}

void Server::models(const net::Request& req, net::Response& res) {
    const json entry = {{"id", options_.model_name},
                        {"object", "model"},
                        {"type", "model"},
                        {"created", 0},
                        {"created_at", "1970-01-01T00:00:00Z"},
                        {"display_name", options_.model_name},
                        {"owned_by", "strata"},
                        {"context_length", model_->max_context()},
                        {"max_model_len", model_->max_context()},
                        {"architecture", model_->architecture()}};
    if (req.matches.size() > 1) {
        if (req.matches[1] != options_.model_name) {
            Call call;
            reply_error(
                call, res,
                ApiError(404,
                         "no model named '" + std::string(req.matches[1]) + "' (this server has '" + options_.model_name + "')",
                         "model"));
            return;
        }
        res.set_content(dump_json(entry), "application/json");
        return;
    }
    res.set_content(dump_json(json{{"object", "list"},
                                   {"data", json::array({entry})},
                                   {"has_more", false},
                                   {"first_id", options_.model_name},
                                   {"last_id", options_.model_name}}),
                    "application/json");
}

void Server::health(net::Response& res) {
    const bool up = engine_ && engine_->healthy();
    res.status = up ? 200 : 503;
    if (!up) res.set_header("Retry-After", "1");
    res.set_content(
        dump_json(json{{"status", up ? "ok" : "engine unavailable"},
                       {"model", options_.model_name},
                       {"engine_restarts", engine_ ? engine_->restarts() : 0},
                       {"running", admission_.running()},
                       {"waiting", admission_.waiting()},
                       {"uptime_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()}}),
        "application/json");
}

void Server::metrics(net::Response& res) {
    std::string extra;
    auto gauge = [&](const std::string& name, const std::string& help, double v, const char* type = "gauge") {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9g", v);
        extra += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + buf + "\n";
    };
    gauge("strata_requests_running", "Requests admitted to the engine.", admission_.running());
    gauge("strata_requests_waiting", "Requests waiting for admission (the queue).", admission_.waiting());
    gauge("strata_engine_up", "1 while the engine is ready.", engine_ && engine_->healthy() ? 1 : 0);
    gauge("strata_engine_restarts_total", "Times the engine was restarted after dying.", engine_ ? engine_->restarts() : 0,
          "counter");
    const json s = engine_ ? engine_->stats(std::chrono::seconds(2)) : json::object();
    if (s.contains("kv")) {
        const double blocks = s["kv"].value("blocks", 0.0), used = s["kv"].value("in_use", 0.0);
        gauge("strata_kv_cache_usage_ratio", "Share of KV blocks in use.", blocks > 0 ? used / blocks : 0);
        gauge("strata_kv_cache_blocks", "KV blocks in the pool.", blocks);
    }
    if (s.contains("prefix_cache")) {
        gauge("strata_prefix_cache_queries_total", "Prefix-cache lookups.", s["prefix_cache"].value("lookups", 0.0), "counter");
        gauge("strata_prefix_cache_hits_total", "Prefix-cache lookups that reused blocks.", s["prefix_cache"].value("hits", 0.0),
              "counter");
        gauge("strata_prefix_cache_reused_tokens_total", "Prompt tokens reused from the prefix cache.",
              s["prefix_cache"].value("reused_tokens", 0.0), "counter");
    }
    if (s.contains("preemptions"))
        gauge("strata_preemptions_total", "Sequences preempted (recomputed later).", s.value("preemptions", 0.0), "counter");
    if (s.contains("speculation")) {
        const auto& sp = s["speculation"];
        gauge("strata_spec_drafted_tokens_total", "Tokens drafted by prompt lookup and verified.", sp.value("drafted", 0.0),
              "counter");
        gauge("strata_spec_accepted_tokens_total", "Drafted tokens the model's own choice confirmed (kept).",
              sp.value("accepted", 0.0), "counter");
    }
    if (s.contains("experts")) {
        const auto& e = s["experts"];
        gauge("strata_expert_slots_per_layer", "VRAM expert slots per MoE layer.", e.value("slots_per_layer", 0.0));
        gauge("strata_expert_vram_bytes", "VRAM the expert slots hold.", e.value("vram_bytes", 0.0));
        gauge("strata_expert_pairs_vram_total", "(token, expert) pairs run from VRAM slots.", e.value("pairs_vram", 0.0),
              "counter");
        gauge("strata_expert_pairs_host_total", "(token, expert) pairs run by the host executor.", e.value("pairs_host", 0.0),
              "counter");
        gauge("strata_expert_pairs_far_total", "(token, expert) pairs the GPU ran reading the expert from host memory.",
              e.value("pairs_far", 0.0), "counter");
        gauge("strata_expert_host_bytes_total", "Expert bytes the host executor read.", e.value("host_bytes", 0.0), "counter");
        gauge("strata_expert_host_busy_seconds_total", "Time the host executor computed experts.",
              e.value("host_busy_seconds", 0.0), "counter");
        gauge("strata_expert_replacements_total", "Experts copied into VRAM slots after the first fill.",
              e.value("replacements", 0.0), "counter");
        gauge("strata_expert_file_reads_total", "Experts read back from the file (RAM budget below the experts).",
              e.value("file_reads", 0.0), "counter");
    }
    if (s.contains("running")) gauge("strata_engine_running", "Sequences the engine is computing.", s.value("running", 0.0));
    if (s.contains("waiting")) gauge("strata_engine_waiting", "Sequences queued inside the engine.", s.value("waiting", 0.0));
    res.set_content(metrics_.render(extra), "text/plain; version=0.0.4");
}

}  // namespace strata::serve
