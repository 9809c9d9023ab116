// The gateway's guards on a request body before it goes to a lane (docs/gateway.md):
// - thinking budget: a budget that leaves no room for the answer is clamped (or thinking turned
//   off when even the smallest budget would not leave room);
// - window: when prompt + max_tokens exceeds the lane's window, the conversation is abridged by
//   retrieval (gateway/context) into a prompt that fits, counted with the lane's own tokenizer
//   and template, so the lane never receives more than its window.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "gateway/gateway_config.h"
#include "serve/chat_request.h"

namespace strata::gateway {

struct LaneModel;
class ContextAssembler;
class Reranker;
class SessionCache;
class SessionStore;

struct GuardReport {
    bool thinking_clamped = false, thinking_disabled = false;
    bool abridged = false;
    bool counted = false;                             // an exact count was made
    int64_t prompt_tokens_in = 0;                     // the request as sent by the client (exact or a bound)
    int64_t prompt_tokens_out = 0;                    // what goes to the lane (exact when counted)
    int64_t max_tokens_out = -1;                      // the output limit sent (when the guard changed it)
    std::string retrieval;                            // "bm25" / "hybrid" when abridged
    nlohmann::json stats = nlohmann::json::object();  // assembler statistics
    double ms = 0;
    // Whether apply() rewrote the body (otherwise the client's bytes can go to the lane as they are).
    bool changed() const { return thinking_clamped || thinking_disabled || abridged || max_tokens_out >= 0; }
};

class WindowGuard {
public:
    // Opens the session store; throws strata::Error. reranker: reorders retrieval's pool; embedder:
    // adds dense ranks to it (null: without them).
    explicit WindowGuard(const LongContextConfig& config, std::shared_ptr<Reranker> reranker = nullptr,
                         std::shared_ptr<Embedder> embedder = nullptr);
    ~WindowGuard();

    // Applies both guards to `body` (an OpenAI chat or Anthropic messages body), rewriting it in
    // place. `body_bytes`: the size of the body as the client sent it. `scope`: the key's identity
    // (sessions never cross it). Throws serve::ApiError for a body the lane would reject anyway (so
    // the client hears it in its API's terms).
    GuardReport apply(serve::ApiKind api, serve::ojson& body, size_t body_bytes, const LaneModel& lane, const std::string& scope);

    SessionStore* store() const { return store_.get(); }
    // The in-memory sessions of every lane (one bound: long_context.cache_max_bytes).
    SessionCache& cache() const { return *cache_; }

private:
    std::unique_ptr<SessionStore> store_;
    std::shared_ptr<SessionCache> cache_;
    LongContextConfig config_;
    std::shared_ptr<Reranker> reranker_;
    std::shared_ptr<Embedder> embedder_;
    serve::RequestLimits limits_;
    // One assembler per lane tokenizer (its counter), made on first use.
    struct Assemblers;
    std::unique_ptr<Assemblers> assemblers_;
};

}  // namespace strata::gateway
