// Continuous batching over one model: every step() runs one forward pass holding a decode token
// of every running sequence plus chunks of prompts still being prefilled, under named limits.
//
// Lifecycle of a request: waiting (FIFO queue; nothing is refused for being busy) -> admitted
// when a running slot, a recurrent-state slot (hybrid models) and KV blocks for its uncached
// prompt are free; the longest cached prefix is reused -> prefill in chunks -> decode one token
// per step -> finished (stop, length, cancelled, error), its blocks released to the prefix cache.
//
// Memory pressure: when a running sequence needs a KV block and none is free, the most recently
// admitted sequence is preempted: its blocks are released (they stay in the prefix cache while
// memory allows), and it goes back to the head of the queue with its prompt and the tokens it
// has generated; on readmission it recomputes (mostly from the prefix cache) and continues.
// Nothing already sent to the client changes; its sampler keeps its random stream.
//
// Batch invariance: a sequence's logits do not depend on its batch companions (every kernel
// computes a token's row the same way whatever else is in the batch), and for hybrid models
// prefill chunks end only at multiples of the Gated DeltaNet chunk (64 tokens), so the chunked
// delta rule sees the same chunks however the prompt was split across steps.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "experts/expert_store.h"
#include "kv/kv_memory.h"
#include "model/model.h"
#include "runtime/request.h"
#include "runtime/sampler.h"

namespace strata::tokenizer {
class Tokenizer;
}

namespace strata::runtime {

class TokenIndex;

struct SchedulerOptions {
    int32_t max_batched_tokens = 512;  // tokens in one forward pass (decodes + prefill chunks)
    int32_t max_running = 16;          // sequences admitted at once
    int32_t prefill_chunk = 256;       // most prompt tokens of one sequence per step
    int64_t max_context = 0;           // positions per sequence; 0: the model's, capped by the KV pool
    // Hybrid models: besides the end of each prompt, snapshot the recurrent state every this
    // many tokens (a multiple of 64 and of the block size), so requests sharing only part of a
    // prompt (a system prompt, earlier turns) reuse it. 0: only at prompt ends.
    int32_t snapshot_interval = 1024;
    bool prefix_cache = true;
    // Speculative decoding by prompt lookup (prompt_lookup.h): up to this many drafted tokens a
    // step for each greedy sequence, verified in the same forward (0: off). Exact: a draft is
    // kept only where it equals the token the model picks, so the output is the same as without.
    // Taken for greedy sequences (argmax, no constraint) — beside sampled ones too, unless their
    // rows are sampled where the logits are (a GPU) — on models without recurrent layers (a
    // hybrid's Gated DeltaNet state cannot be rolled back yet).
    int32_t spec_ngram = 0;
    // Where drafts come from instead of prompt lookup (benchmarks replaying a known continuation,
    // tests): up to k tokens to follow `tokens` (the sequence's prompt and output so far).
    std::function<std::vector<int32_t>(const std::string& id, std::span<const int32_t> tokens, int k)> drafter;
    // Sampling where the logits are (Backend::sample_rows, docs/sampling.md): Auto where the
    // backend does it there (a GPU), Always also elsewhere (tests), Never: rows to the host.
    enum class RowSampling : uint8_t { Auto, Always, Never };
    RowSampling row_sampling = RowSampling::Auto;
    kv::KvMemoryOptions kv;
};

struct SchedulerStats {
    int64_t steps = 0, running = 0, waiting = 0, finished = 0;
    int64_t prompt_tokens = 0, prefill_tokens = 0, generated_tokens = 0;
    int64_t prefix_lookups = 0, prefix_hits = 0, reused_tokens = 0;
    int64_t preemptions = 0;
    int64_t argmax_steps = 0;                         // steps whose tokens the backend picked (no logits to the host)
    int64_t row_sampled_tokens = 0;                   // tokens sampled from the backend's row summaries
    int64_t whole_rows = 0;                           // ... and rows copied to the host (constraints, undecided summaries)
    int64_t spec_steps = 0;                           // steps that verified drafted tokens
    int64_t drafted_tokens = 0, accepted_tokens = 0;  // prompt-lookup drafts verified, and kept
    int32_t kv_blocks = 0, kv_blocks_in_use = 0, kv_blocks_cached = 0, block_size = 0;
    int32_t snapshots = 0, snapshot_capacity = 0;
    int64_t max_context = 0;
    bool has_expert_store = false;
    experts::StoreStats experts;  // the expert store's counters (has_expert_store)
};

class Scheduler {
public:
    Scheduler(model::Model& model, const tokenizer::Tokenizer& tok, SchedulerOptions opts);
    ~Scheduler();

    // Queues a request. Throws strata::Error (in the client's terms) for an invalid one: empty
    // prompt, duplicate id, token outside the vocabulary, prompt longer than the context.
    void submit(Request req, EventSink* sink);
    // Ends a request at once (memory freed now, done event "cancelled"). False if unknown.
    bool cancel(const std::string& id);
    // Ends every request in flight with done events of `reason` (shutdown).
    void cancel_all(FinishReason reason, const std::string& detail);
    bool has_work() const { return !running_.empty() || !waiting_.empty(); }
    // One forward pass and the sampling after it. No-op without work.
    void step();
    SchedulerStats stats() const;
    const SchedulerOptions& options() const { return opts_; }
    const tokenizer::Tokenizer& tokenizer() const { return tok_; }
    const model::Model& model() const { return model_; }
    std::shared_ptr<const TokenIndex> token_index();  // built on first use

private:
    struct Sequence;
    void admit();
    bool try_admit(Sequence& s);
    bool ensure_blocks(Sequence& s, int64_t end);  // blocks for positions [0, end)
    void release_memory(Sequence& s);
    void preempt(Sequence& s);
    Sequence* youngest_running();
    int64_t prefill_end(const Sequence& s, int64_t budget) const;
    void commit_blocks(Sequence& s);
    // What a step left for a sequence: its logits row on the host; or the token the backend
    // picked (argmax >= -1, Sampler::argmax_only sequences); or a token sampled already (from
    // the backend's row summary); or an error; or nothing (argmax -2: mid-prompt).
    struct Outcome {
        float* logits = nullptr;
        int32_t argmax = -2;
        std::optional<SampleResult> sampled;
        std::string error;
    };
    void after_forward(Sequence& s, Outcome o);
    // A greedy sequence's drafted tokens verified: rows [row, row + draft] of argmax_ (ids) or
    // of logits_ (through its sampler).
    void accept_drafts(Sequence& s, int64_t row, bool ids);
    bool may_draft(const Sequence& s, bool rows_on_device) const;
    void plan_draft(Sequence& s, int64_t budget, bool rows_on_device);
    void sample_next(Sequence& s, Outcome o);
    // The forward and each sequence's outcome when sampling through Backend::sample_rows.
    void forward_sampling_rows(const std::vector<Sequence*>& in_batch, std::vector<Outcome>& out);
    void finish(Sequence& s, FinishReason reason, const std::string& detail);
    void finish_pooled(Sequence& s, int64_t row);  // a prompt-only request at its prompt's end: row of the last forward
    void emit(Sequence& s, std::vector<GeneratedToken> toks, const std::string& piece);
    void reap();

    model::Model& model_;
    const tokenizer::Tokenizer& tok_;
    SchedulerOptions opts_;
    std::unique_ptr<kv::KvMemory> mem_;
    int64_t align_ = 1;  // prefill split granularity (hybrid: multiple of the delta-rule chunk and block)
    std::unordered_map<std::string, std::unique_ptr<Sequence>> by_id_;
    std::deque<Sequence*> waiting_;
    std::vector<Sequence*> running_;  // admission order
    uint64_t admit_counter_ = 0;
    SchedulerStats stats_;
    std::shared_ptr<const TokenIndex> token_index_;
    model::Batch batch_;
    std::vector<model::SequenceState*> batch_seqs_;
    std::vector<float> logits_;
    std::vector<int32_t> argmax_;
    std::vector<backend::RowSampleRequest> row_req_;
    std::vector<size_t> row_req_of_;  // per batch sequence: its index in row_req_, SIZE_MAX for a whole row
    std::vector<int64_t> row_of_;     // per batch sequence: its logits row, -1 mid-prompt
    std::vector<backend::RowSample> row_sum_;
    std::vector<backend::TokenLogit> row_top_;
};

}  // namespace strata::runtime
