// `strata serve`: one lane — an HTTP server speaking the OpenAI and Anthropic APIs over one
// engine child process that it supervises (docs/api.md, docs/serve.md).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/usage.h"
#include "serve/admission.h"
#include "serve/chat_request.h"
#include "serve/metrics.h"

namespace strata::net {
class Server;
class DataSink;
struct Request;
struct Response;
}  // namespace strata::net

namespace strata::serve {

class EngineClient;
class ResponseStore;
class ServedModel;
class GenerationGroup;
struct CallEvent;
struct StreamTranslator;

struct ServeOptions {
    std::string model_path;
    std::string model_name;  // the id clients use; default: the file's stem
    std::string host = "127.0.0.1";
    int port = 8080;
    std::vector<std::string> api_keys;  // empty: no authentication
    int parallel = 16;                  // requests computed at once (the engine's --max-running)
    int max_queue = 256;                // requests waiting beyond those; more get 429 / 529
    int http_threads = 0;               // handler threads; 0: parallel + max_queue + 16
    int64_t max_body_bytes = 32ll << 20;
    // The HTTP layer's caps and deadlines (net/http_server.h): connections in total and from one
    // address; a request head, a body, an idle keep-alive, output the client does not read.
    int max_connections = 4096;
    int max_connections_per_peer = 1024;
    std::chrono::seconds head_timeout{10};
    std::chrono::seconds read_timeout{60};  // the body
    std::chrono::seconds idle_timeout{30};
    std::chrono::seconds write_timeout{60};
    int64_t responses_store_max = 1000;           // stored Responses API responses (0: none kept)
    int64_t responses_store_bytes = 256ll << 20;  // ... and their bytes
    std::string responses_db;                     // SQLite file they are also kept in (empty: memory only)
    std::vector<std::string> engine_argv;         // the engine command line (binary, "engine", -m, ...)
    RequestLimits limits;
};

class Server {
public:
    explicit Server(ServeOptions options);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Loads the tokenizer/template, starts the engine and waits for it; throws strata::Error.
    void start();
    // Binds; returns the bound port (options.port 0: any free one). Throws strata::Error.
    int bind();
    // Serves until stop() (from another thread or a signal handler thread).
    void listen();
    void stop();

    // Thinking-block signatures: HMAC-SHA256 under a key made at start.
    std::string sign_thinking(const std::string& thinking) const;
    bool verify_thinking(const std::string& thinking, const std::string& signature) const;

private:
    struct Call;  // one HTTP request being answered
    void route();
    bool authorized(const net::Request& req) const;
    std::string client_of(const net::Request& req) const;
    void reply_error(const Call& call, net::Response& res, const ApiError& e);

    void chat(const net::Request& req, net::Response& res, ApiKind api);
    void completion(const net::Request& req, net::Response& res);
    void count_tokens(const net::Request& req, net::Response& res);
    enum class Probe { Tokenize, Detokenize, ApplyTemplate, InputTokens };
    void probe(const net::Request& req, net::Response& res, Probe what);  // probe_routes.cpp
    // The Responses API (responses_routes.cpp): create, and the stored responses' GET, DELETE,
    // cancel and input_items.
    void responses(const net::Request& req, net::Response& res);
    void response_get(const net::Request& req, net::Response& res);
    void response_delete(const net::Request& req, net::Response& res);
    void response_cancel(const net::Request& req, net::Response& res);
    void response_input_items(const net::Request& req, net::Response& res);
    // encrypted_content of a reasoning item: the text, signed (reasoning_from_encrypted checks it).
    std::string encrypt_reasoning(const std::string& text) const;
    std::optional<std::string> reasoning_from_encrypted(const std::string& encrypted) const;
    // Prompt-only routes (pooling_routes.cpp): /v1/embeddings, /v1/rerank.
    void embeddings(const net::Request& req, net::Response& res);
    void rerank(const net::Request& req, net::Response& res);
    // Runs each prompt as a prompt-only engine request (embed: hidden rows; else the logits of
    // score_tokens), in prompt order; throws ApiError (499 client gone, 503 engine, 500 failed).
    std::vector<std::vector<float>> run_pooled(Call& call, const std::vector<std::vector<int32_t>>& prompts, bool embed,
                                               const std::vector<int32_t>& score_tokens);
    void models(const net::Request& req, net::Response& res);
    void health(net::Response& res);
    void metrics(net::Response& res);

    // Waits for a slot; throws ApiError 429/529 when the queue is full, 499 when the client left.
    Admission::Ticket admit(const Call& call);
    // A Call for this HTTP request (ids, connection socket, client key).
    std::shared_ptr<Call> begin_call(const net::Request& req, const net::Response& res, ApiKind api);
    // Admits the call and creates its choices' generations (started unless `start` is false).
    void run_generations(Call& call, bool start);
    // The call's choices' generations, new (again after the engine died: fresh engine ids), and
    // started; throws ApiError 503 when the engine is not reading its input.
    void make_generations(Call& call, bool start);
    // A streamed answer ended (its last chunk written, or the client went away: then its work is
    // cancelled at once); frees its admission slot either way.
    void end_stream(Call& call, bool finished);
    // Answers a request that failed before its answer began, in its API's shape.
    void fail_call(const Call& call, net::Response& res, const ApiError& e);

    // The one loop over a call's generations (call_events.cpp). next_event waits up to kPoll for
    // the next event of a choice, watching the client: Gone (its work is cancelled), Idle, or Event
    // (a Failed one has cancelled the rest). It keeps the call's usage and latency metrics.
    enum class Wait { Event, Idle, Gone };
    Wait next_event(Call& call, CallEvent& out);
    // Whole answers: every event, once all choices are done, goes to on_event. False when the
    // client left (answered 499); a failed generation throws ApiError 500. Generations lost with
    // the engine (nothing was sent yet) run again, kMaxResubmits times, then 503.
    bool collect(Call& call, net::Response& res, const std::function<void(const CallEvent&)>& on_event);
    // Streamed answers: the translator's SSE, then its end (a failed generation ends it with the
    // API's stream error).
    void stream(std::shared_ptr<Call> call, net::Response& res, StreamTranslator translator);
    // A call whose choices are all done: its end-to-end latency and cached prompt tokens.
    void call_finished(const Call& call, const runtime::Usage& usage);

    // OpenAI and Anthropic answers, streamed or whole (openai_routes.cpp, anthropic_routes.cpp):
    // translations of CallEvents into each API's shapes.
    void answer_openai_chat(std::shared_ptr<Call> call, net::Response& res);
    void answer_openai_completion(std::shared_ptr<Call> call, net::Response& res);
    void answer_anthropic(std::shared_ptr<Call> call, net::Response& res);
    void answer_responses(std::shared_ptr<Call> call, net::Response& res);

    ServeOptions options_;
    std::unique_ptr<ServedModel> model_;
    std::unique_ptr<EngineClient> engine_;
    std::unique_ptr<net::Server> http_;
    std::unique_ptr<ResponseStore> responses_;
    Admission admission_;
    Metrics metrics_;
    std::string thinking_key_;
    std::string model_info_gguf_;  // ServedModel::metadata_gguf, made at start
    std::atomic<uint64_t> next_id_{1};
    std::chrono::steady_clock::time_point started_;
};

}  // namespace strata::serve
