// Prompt-only routes: embeddings and reranking, on the engine's prompt-only requests (Request::
// pooling, docs/protocol.md "pooled"). Shapes (docs/api.md, "Embeddings and reranking"):
//   POST /v1/embeddings  OpenAI's: {input: string | [string] | [id] | [[id]], model,
//                        encoding_format?: "float" | "base64", dimensions?, instruction?}
//                        -> {object: "list", data: [{object: "embedding", index, embedding}], model, usage}
//   POST /v1/rerank, /rerank  llama.cpp's and Jina's: {query, documents: [string | {text}], top_n?,
//                        return_documents?, instruction?} -> {object: "list", model, results:
//                        [{index, relevance_score, document?}], usage}
// Embeddings pool the last token's final-normed hidden row and L2-normalise it, as Qwen3-Embedding
// does (its input ends with <|endoftext|>, appended here when missing; `instruction` makes the
// input "Instruct: {instruction}\nQuery:{input}", its documented query form; `dimensions` keeps
// the leading ones and normalises again, as its Matryoshka training allows). A rerank score is
// Qwen3-Reranker's: its judging prompt, then P(yes) = sigmoid(logit("yes") - logit("no")) at the
// answer's first position. Any model answers both (a generative model's vectors are its own).
// Every count and size bounded; one admission slot per call; a client that leaves cancels its work.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "net/http.h"
#include "serve/api_shapes.h"
#include "serve/engine_client.h"
#include "serve/server_call.h"
#include "tokenizer/tokenizer.h"

namespace strata::serve {

using nlohmann::json;

namespace {

constexpr size_t kMaxPooledInputs = 2048;      // inputs of one embeddings call (OpenAI's limit)
constexpr size_t kMaxRerankDocuments = 1024;   // documents of one rerank call
constexpr int64_t kMaxPooledTokens = 1 << 20;  // prompt tokens of one call, all inputs
constexpr size_t kPooledInFlight = 64;         // engine requests of one call at a time
constexpr const char* kRerankInstruction = "Given a web search query, retrieve relevant passages that answer the query";

// One engine request's result.
struct Pooled {
    std::vector<float> hidden, token_logits;
    std::string error;
    bool done = false;
};

std::vector<int32_t> ids_of(const ojson& v, int32_t n_vocab, const char* param) {
    std::vector<int32_t> ids;
    for (const ojson& e : v) {
        if (!e.is_number_integer()) throw ApiError(400, std::string(param) + ": token ids must be integers", param);
        const auto id = e.get<int64_t>();
        if (id < 0 || id >= n_vocab)
            throw ApiError(400, std::string(param) + ": token id " + std::to_string(id) + " is outside the vocabulary", param);
        ids.push_back(static_cast<int32_t>(id));
    }
    if (ids.empty()) throw ApiError(400, std::string(param) + ": an input must not be empty", param);
    return ids;
}

const std::string& text_of(const ojson& v, const char* param, int64_t max_bytes) {
    if (!v.is_string()) throw ApiError(400, std::string(param) + ": expected a string", param);
    const std::string& s = v.get_ref<const std::string&>();
    if (s.empty()) throw ApiError(400, std::string(param) + ": an input must not be empty", param);
    if (static_cast<int64_t>(s.size()) > max_bytes)
        throw ApiError(413, std::string(param) + ": longer than " + std::to_string(max_bytes) + " bytes", param);
    return s;
}

// A single token for `text`, or -1.
int32_t single_token(const tokenizer::Tokenizer& tok, const std::string& text) {
    const std::vector<int32_t> ids = tok.encode(text, true);
    return ids.size() == 1 ? ids[0] : -1;
}

std::string optional_string(const ojson& body, const char* key, int64_t max_bytes) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return {};
    return text_of(*it, key, max_bytes);
}

}  // namespace

// Runs every prompt as a prompt-only engine request, at most kPooledInFlight at a time; the
// results in prompt order. Throws ApiError: 499 when the client left (its requests cancelled),
// 503 when the engine is not reading or was lost, 500 when a request failed.
std::vector<std::vector<float>> Server::run_pooled(Call& call, const std::vector<std::vector<int32_t>>& prompts, bool embed,
                                                   const std::vector<int32_t>& score_tokens) {
    const Admission::Ticket ticket = admit(call);
    // Shared with the handlers, which may still run after this returns (a cancelled request's
    // done event comes later).
    struct State {
        std::mutex mu;
        std::condition_variable cv;
        std::vector<Pooled> results;
    };
    const auto st = std::make_shared<State>();
    st->results.resize(prompts.size());
    const size_t n_logits = score_tokens.size();
    std::vector<std::string> ids(prompts.size());
    std::vector<uint8_t> counted(prompts.size(), 0);
    size_t next = 0, finished = 0, in_flight = 0;
    auto cancel_all = [&] {
        for (size_t i = 0; i < next; ++i)
            if (!counted[i]) engine_->cancel(ids[i]);
    };
    while (finished < prompts.size()) {
        while (next < prompts.size() && in_flight < kPooledInFlight) {
            const size_t i = next++;
            ids[i] = call.request_id + "/e" + std::to_string(i);
            ojson cmd;
            cmd["prompt"] = prompts[i];
            if (embed) cmd["embed"] = true;
            if (n_logits > 0) cmd["score_tokens"] = score_tokens;
            ++in_flight;
            try {
                engine_->submit(ids[i], std::move(cmd), [st, i, embed, n_logits](const json& ev) {
                    std::lock_guard<std::mutex> g(st->mu);
                    const std::string kind = ev.value("event", "");
                    Pooled& r = st->results[i];
                    if (kind == "pooled") {
                        if (const auto h = ev.find("hidden"); h != ev.end()) r.hidden = h->get<std::vector<float>>();
                        if (const auto l = ev.find("token_logits"); l != ev.end()) r.token_logits = l->get<std::vector<float>>();
                        return;
                    }
                    if (kind != "done" && kind != "error") return;
                    const std::string reason = ev.value("finish_reason", "");
                    if (kind == "error" || reason == "error" || reason == "cancelled")
                        r.error = ev.value("message", reason.empty() ? std::string("the engine failed") : reason);
                    else if ((embed && r.hidden.empty()) || r.token_logits.size() != n_logits)
                        r.error = "the engine sent no result";
                    r.done = true;
                    st->cv.notify_all();
                });
            } catch (const EngineBusy&) {
                counted[i] = 1;  // never in flight
                cancel_all();
                throw ApiError(503, "the engine is not reading its input; retry later");
            }
        }
        std::unique_lock<std::mutex> lock(st->mu);
        st->cv.wait_for(lock, kPoll);
        for (size_t i = 0; i < next; ++i) {
            if (counted[i] || !st->results[i].done) continue;
            counted[i] = 1;
            ++finished;
            --in_flight;
            if (!st->results[i].error.empty()) {
                const std::string e = st->results[i].error;
                lock.unlock();
                cancel_all();
                throw ApiError(e.find("engine") != std::string::npos ? 503 : 500, "input " + std::to_string(i) + ": " + e);
            }
        }
        lock.unlock();
        if (call.gone()) {
            cancel_all();
            throw ApiError(499, "client closed the connection");
        }
    }
    // Every handler has had its done event: the results are ours alone now.
    std::lock_guard<std::mutex> g(st->mu);
    std::vector<std::vector<float>> out(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i)
        out[i] = embed ? std::move(st->results[i].hidden) : std::move(st->results[i].token_logits);
    metrics_.count_request("openai", "ok");
    return out;
}

void Server::embeddings(const net::Request& req, net::Response& res) {
    auto call = begin_call(req, res, ApiKind::OpenAI);
    try {
        const ojson body = parse_json_body(req.body);
        if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
        const tokenizer::Tokenizer& tok = model_->tokenizer();
        const int64_t max_bytes = options_.limits.max_text_bytes;
        const auto input = body.find("input");
        if (input == body.end() || input->is_null()) throw ApiError(400, "input: missing", "input");
        const std::string instruction = optional_string(body, "instruction", 1 << 16);
        std::string format = "float";
        if (const auto f = body.find("encoding_format"); f != body.end() && !f->is_null()) {
            format = text_of(*f, "encoding_format", 16);
            if (format != "float" && format != "base64")
                throw ApiError(400, "encoding_format: 'float' or 'base64'", "encoding_format");
        }
        int64_t dims = 0;
        if (const auto d = body.find("dimensions"); d != body.end() && !d->is_null()) {
            if (!d->is_number_integer() || d->get<int64_t>() < 1)
                throw ApiError(400, "dimensions: a positive integer", "dimensions");
            dims = d->get<int64_t>();
        }
        // The inputs as token lists: texts encoded (instruction first, <|endoftext|> last), ids as given.
        std::vector<std::vector<int32_t>> prompts;
        const int32_t end = [&] {
            const int32_t e = single_token(tok, "<|endoftext|>");
            return e >= 0 ? e : tok.eos();
        }();
        auto add_text = [&](const std::string& text) {
            std::vector<int32_t> ids =
                tok.encode(instruction.empty() ? text : "Instruct: " + instruction + "\nQuery:" + text, false);
            if (end >= 0 && (ids.empty() || ids.back() != end)) ids.push_back(end);
            prompts.push_back(std::move(ids));
        };
        if (input->is_string()) {
            add_text(text_of(*input, "input", max_bytes));
        } else if (input->is_array() && !input->empty()) {
            if (input->size() > kMaxPooledInputs)
                throw ApiError(400, "input: at most " + std::to_string(kMaxPooledInputs) + " inputs", "input");
            if (input->front().is_number_integer()) {
                prompts.push_back(ids_of(*input, tok.n_vocab(), "input"));
            } else {
                for (const ojson& e : *input) {
                    if (e.is_array()) prompts.push_back(ids_of(e, tok.n_vocab(), "input"));
                    else add_text(text_of(e, "input", max_bytes));
                }
            }
        } else {
            throw ApiError(400, "input: a string, an array of strings, or token ids", "input");
        }
        int64_t total = 0;
        for (const auto& p : prompts) {
            if (static_cast<int64_t>(p.size()) >= model_->max_context())
                throw ApiError(400,
                               "input of " + std::to_string(p.size()) + " tokens is longer than the context of " +
                                   std::to_string(model_->max_context()),
                               "input");
            total += static_cast<int64_t>(p.size());
        }
        if (total > kMaxPooledTokens)
            throw ApiError(400, "input: more than " + std::to_string(kMaxPooledTokens) + " tokens in one call", "input");
        call->model = body.value("model", options_.model_name);

        std::vector<std::vector<float>> rows = run_pooled(*call, prompts, true, {});
        ojson data = ojson::array();
        for (size_t i = 0; i < rows.size(); ++i) {
            std::vector<float>& v = rows[i];
            if (dims > 0 && dims < static_cast<int64_t>(v.size())) v.resize(static_cast<size_t>(dims));
            double norm = 0;
            for (float x : v) norm += static_cast<double>(x) * x;
            const double scale = norm > 0 ? 1.0 / std::sqrt(norm) : 0.0;
            for (float& x : v) x = static_cast<float>(x * scale);
            ojson item = {{"object", "embedding"}, {"index", static_cast<int64_t>(i)}};
            if (format == "base64")
                item["embedding"] = base64_encode(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
            else item["embedding"] = v;
            data.push_back(std::move(item));
        }
        const ojson out = {{"object", "list"},
                           {"data", std::move(data)},
                           {"model", call->model},
                           {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}};
        res.set_content(out.dump(), "application/json");
    } catch (const ApiError& e) {
        reply_error(*call, res, e);
    }
}

void Server::rerank(const net::Request& req, net::Response& res) {
    auto call = begin_call(req, res, ApiKind::OpenAI);
    try {
        const ojson body = parse_json_body(req.body);
        if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
        const tokenizer::Tokenizer& tok = model_->tokenizer();
        const int64_t max_bytes = options_.limits.max_text_bytes;
        const auto q = body.find("query");
        if (q == body.end()) throw ApiError(400, "query: missing", "query");
        const std::string& query = text_of(*q, "query", max_bytes);
        const auto docs = body.find("documents");
        if (docs == body.end() || !docs->is_array() || docs->empty())
            throw ApiError(400, "documents: a non-empty array of strings", "documents");
        if (docs->size() > kMaxRerankDocuments)
            throw ApiError(400, "documents: at most " + std::to_string(kMaxRerankDocuments), "documents");
        std::vector<std::string> texts;
        for (const ojson& d : *docs) {
            if (d.is_object()) {
                const auto t = d.find("text");
                if (t == d.end()) throw ApiError(400, "documents: an object needs 'text'", "documents");
                texts.push_back(text_of(*t, "documents", max_bytes));
            } else {
                texts.push_back(text_of(d, "documents", max_bytes));
            }
        }
        int64_t top_n = static_cast<int64_t>(texts.size());
        if (const auto t = body.find("top_n"); t != body.end() && !t->is_null()) {
            if (!t->is_number_integer() || t->get<int64_t>() < 1) throw ApiError(400, "top_n: a positive integer", "top_n");
            top_n = std::min(top_n, t->get<int64_t>());
        }
        bool return_documents = false;
        if (const auto r = body.find("return_documents"); r != body.end() && !r->is_null()) {
            if (!r->is_boolean()) throw ApiError(400, "return_documents: expected a boolean", "return_documents");
            return_documents = r->get<bool>();
        }
        std::string instruction = optional_string(body, "instruction", 1 << 16);
        if (instruction.empty()) instruction = kRerankInstruction;
        const int32_t yes = single_token(tok, "yes"), no = single_token(tok, "no");
        if (yes < 0 || no < 0)
            throw ApiError(400, "this model's vocabulary has no single tokens for \"yes\" and \"no\": it cannot rerank", "model");
        // Qwen3-Reranker's prompt (its model card), one per document.
        const std::string head =
            "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
            "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: " +
            instruction + "\n<Query>: " + query + "\n<Document>: ";
        const std::string tail = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
        std::vector<std::vector<int32_t>> prompts;
        int64_t total = 0;
        for (const std::string& d : texts) {
            std::vector<int32_t> ids = tok.encode(head, true);
            tok.encode_append(d, ids, false);  // the document's text is never markup
            tok.encode_append(tail, ids, true);
            if (static_cast<int64_t>(ids.size()) >= model_->max_context())
                throw ApiError(400,
                               "a document of " + std::to_string(ids.size()) + " prompt tokens is longer than the context of " +
                                   std::to_string(model_->max_context()),
                               "documents");
            total += static_cast<int64_t>(ids.size());
            prompts.push_back(std::move(ids));
        }
        if (total > kMaxPooledTokens)
            throw ApiError(400, "documents: more than " + std::to_string(kMaxPooledTokens) + " tokens in one call", "documents");
        call->model = body.value("model", options_.model_name);

        const std::vector<std::vector<float>> logits = run_pooled(*call, prompts, false, {yes, no});
        std::vector<std::pair<double, size_t>> scored;
        for (size_t i = 0; i < logits.size(); ++i)
            scored.push_back({1.0 / (1.0 + std::exp(static_cast<double>(logits[i][1]) - logits[i][0])), i});
        std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        ojson results = ojson::array();
        for (int64_t r = 0; r < top_n; ++r) {
            const auto [score, i] = scored[static_cast<size_t>(r)];
            ojson item = {{"index", static_cast<int64_t>(i)}, {"relevance_score", score}};
            if (return_documents) item["document"] = {{"text", texts[i]}};
            results.push_back(std::move(item));
        }
        const ojson out = {{"object", "list"},
                           {"model", call->model},
                           {"results", std::move(results)},
                           {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}};
        res.set_content(out.dump(), "application/json");
    } catch (const ApiError& e) {
        reply_error(*call, res, e);
    }
}

}  // namespace strata::serve
