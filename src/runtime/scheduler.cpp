#include "runtime/scheduler.h"

#include <algorithm>
#include <numeric>

#include "model/gated_delta_net.h"
#include "runtime/json_constraint.h"
#include "runtime/prompt_lookup.h"
#include "runtime/stop_strings.h"
#include "runtime/xml_call_constraint.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::runtime {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Stop: return "stop";
        case FinishReason::Length: return "length";
        case FinishReason::Cancelled: return "cancelled";
        case FinishReason::Error: return "error";
    }
    return "error";
}

struct Scheduler::Sequence {
    Sequence(Request r, EventSink* s, const tokenizer::Tokenizer& tok)
        : req(std::move(r)), sink(s), sampler(req.sampling, tok.n_vocab()), decoder(tok), stops(req.sampling.stop) {}

    Request req;
    EventSink* sink;
    std::vector<int32_t> tokens;  // prompt, then every generated token
    int64_t n_prompt = 0;
    int64_t n_computed = 0;   // tokens whose KV / recurrent state is in memory
    int64_t n_committed = 0;  // leading blocks committed to the prefix cache
    enum class Phase { Waiting, Prefill, Decode, Finished } phase = Phase::Waiting;
    std::unique_ptr<model::SequenceState> state;
    int32_t slot = -1;
    uint64_t admitted = 0;
    bool ever_admitted = false;
    Usage usage;
    Sampler sampler;
    tokenizer::StreamDecoder decoder;
    StopStringMatcher stops;
    std::unique_ptr<TokenConstraint> constraint;
    TokenMask mask;
    bool stop_matched = false;  // the output ended at a stop string: nothing more is emitted
    // This step: tokens [step_begin, step_end) are in the batch; wants a logits row when
    // step_end == tokens.size().
    int64_t step_begin = 0, step_end = 0;
    // Speculation (SchedulerOptions::spec_ngram): its tokens indexed so far, and this step's
    // drafted tokens (in the batch after tokens[step_end - 1], each wanting a row).
    std::unique_ptr<PromptLookup> lookup;
    std::vector<int32_t> draft;
    int32_t spec_k = 0;  // this sequence's draft length now: halved after a wholly rejected draft, doubled after a kept one
    // After a wholly rejected single-token draft, steps without drafting: 2, 4, ... 64 while they
    // keep failing (a draft that keeps anything resets it).
    int32_t spec_backoff = 0, spec_skip = 0;
};

Scheduler::Scheduler(model::Model& model, const tokenizer::Tokenizer& tok, SchedulerOptions opts)
    : model_(model), tok_(tok), opts_(std::move(opts)) {
    const model::ModelConfig& c = model.config();
    // Token ids the tokenizer can produce (and the sampler scans) must have rows in the logits.
    if (c.n_vocab > 0 && tok.n_vocab() > c.n_vocab)
        throw Error("the tokenizer has " + std::to_string(tok.n_vocab()) + " tokens but the model's vocabulary has " +
                    std::to_string(c.n_vocab) + ": the file's tokenizer and weights do not match");
    if (opts_.max_running <= 0) throw Error("max running sequences must be positive");
    if (opts_.max_batched_tokens <= 0) throw Error("max batched tokens must be positive");
    opts_.kv.n_slots = opts_.max_running;
    mem_ = std::make_unique<kv::KvMemory>(model, opts_.kv);
    const int64_t bs = opts_.kv.block_size;
    if (mem_->has_recurrent()) align_ = std::lcm<int64_t>(model::kDeltaRuleChunk, bs);
    if (opts_.prefill_chunk < align_) opts_.prefill_chunk = static_cast<int32_t>(align_);
    opts_.prefill_chunk = static_cast<int32_t>(opts_.prefill_chunk / align_ * align_);
    if (opts_.max_batched_tokens < opts_.max_running + align_)
        throw Error("max batched tokens (" + std::to_string(opts_.max_batched_tokens) +
                    ") must be at least max running sequences + " + std::to_string(align_) + " so prompts always progress");
    if (opts_.snapshot_interval % align_ != 0)
        opts_.snapshot_interval = static_cast<int32_t>((opts_.snapshot_interval + align_ - 1) / align_ * align_);
    const int64_t pool_positions = static_cast<int64_t>(mem_->blocks().n_blocks()) * bs;
    int64_t ctx = opts_.max_context > 0 ? opts_.max_context : (c.n_ctx_train > 0 ? c.n_ctx_train : pool_positions);
    opts_.max_context = std::min(ctx, pool_positions);
    stats_.max_context = opts_.max_context;
}

Scheduler::~Scheduler() = default;

std::shared_ptr<const TokenIndex> Scheduler::token_index() {
    if (!token_index_) token_index_ = std::make_shared<const TokenIndex>(tok_);
    return token_index_;
}

void Scheduler::submit(Request req, EventSink* sink) {
    if (req.id.empty()) throw Error("request id must not be empty");
    if (by_id_.count(req.id) != 0) throw Error("a request with id '" + req.id + "' is already in flight");
    if (req.prompt.empty()) throw Error("prompt must contain at least one token");
    for (int32_t t : req.prompt)
        if (!tok_.valid(t))
            throw Error("prompt token " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(tok_.n_vocab()) +
                        ")");
    if (static_cast<int64_t>(req.prompt.size()) >= opts_.max_context)
        throw Error("prompt of " + std::to_string(req.prompt.size()) + " tokens leaves no room in the context of " +
                    std::to_string(opts_.max_context) + " tokens");
    req.sampling.validate(tok_.n_vocab());  // knobs, stop strings, stop token ids
    if (req.pooling.score_tokens.size() > Pooling::kMaxScoreTokens)
        throw Error("score_tokens: at most " + std::to_string(Pooling::kMaxScoreTokens) + " ids");
    for (int32_t t : req.pooling.score_tokens)
        if (t < 0 || t >= model_.config().n_vocab)
            throw Error("score_tokens: " + std::to_string(t) + " is outside the vocabulary (" +
                        std::to_string(model_.config().n_vocab) + ")");
    auto s = std::make_unique<Sequence>(std::move(req), sink, tok_);
    s->tokens = s->req.prompt;
    s->n_prompt = static_cast<int64_t>(s->tokens.size());
    s->usage.prompt_tokens = s->n_prompt;
    for (int32_t t : s->tokens) s->sampler.accept(t, false);
    if (s->req.grammar) s->constraint = std::make_unique<JsonConstraint>(s->req.grammar, token_index());
    else if (s->req.xml_call) s->constraint = std::make_unique<XmlCallConstraint>(s->req.xml_call, token_index());
    stats_.prompt_tokens += s->n_prompt;
    waiting_.push_back(s.get());
    by_id_.emplace(s->req.id, std::move(s));
}

bool Scheduler::cancel(const std::string& id) {
    const auto it = by_id_.find(id);
    if (it == by_id_.end() || it->second->phase == Sequence::Phase::Finished) return false;
    finish(*it->second, FinishReason::Cancelled, "");
    reap();
    return true;
}

void Scheduler::cancel_all(FinishReason reason, const std::string& detail) {
    for (auto& [id, s] : by_id_)
        if (s->phase != Sequence::Phase::Finished) finish(*s, reason, detail);
    reap();
}

void Scheduler::release_memory(Sequence& s) {
    if (s.state) {
        // Last block first: a prefix's tail becomes the least recently used part.
        const std::vector<int32_t> blocks = s.state->blocks();
        for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) mem_->blocks().release(*it);
        s.state.reset();
    }
    mem_->release_slot(s.slot);
    s.slot = -1;
    s.n_computed = 0;
    s.n_committed = 0;
}

void Scheduler::preempt(Sequence& s) {
    release_memory(s);
    running_.erase(std::find(running_.begin(), running_.end(), &s));
    s.phase = Sequence::Phase::Waiting;
    waiting_.push_front(&s);
    ++stats_.preemptions;
}

Scheduler::Sequence* Scheduler::youngest_running() {
    Sequence* y = nullptr;
    for (Sequence* s : running_)
        if (y == nullptr || s->admitted > y->admitted) y = s;
    return y;
}

bool Scheduler::try_admit(Sequence& s) {
    kv::BlockPool& pool = mem_->blocks();
    const int64_t bs = pool.block_size();
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    // The longest cached prefix, leaving at least one token to compute (its logits are needed).
    std::vector<int32_t> hit;
    if (opts_.prefix_cache) {
        ++stats_.prefix_lookups;
        hit = pool.match(s.tokens, (n - 1) / bs);
        if (mem_->has_recurrent()) {
            // A hybrid model also needs the recurrent state after the prefix: the longest
            // matched boundary with a snapshot.
            while (!hit.empty() && !(static_cast<int64_t>(hit.size()) * bs % align_ == 0 && mem_->has_snapshot(hit.back())))
                hit.pop_back();
        }
    }
    const int64_t cached = static_cast<int64_t>(hit.size()) * bs;
    // Blocks for the rest of the prompt must be free (cached blocks being reused don't count).
    const int64_t need = (n + 1 + bs - 1) / bs - static_cast<int64_t>(hit.size());
    int64_t reusable_free = 0;
    for (int32_t b : hit)
        if (pool.ref_count(b) == 0) ++reusable_free;
    if (need > pool.n_available() - reusable_free) {
        if (running_.empty() && need > pool.n_blocks()) {
            finish(s, FinishReason::Error, "the prompt needs more KV memory than the engine has");
            return true;
        }
        return false;
    }
    int32_t slot = -1;
    if (mem_->has_recurrent()) {
        slot = mem_->acquire_slot();
        if (slot < 0) return false;
    }
    for (int32_t b : hit) pool.retain(b);
    s.slot = slot;
    s.state = mem_->make_sequence(slot);
    s.state->set_blocks(hit);
    if (slot >= 0 && !hit.empty()) mem_->load_snapshot(hit.back(), slot);
    s.n_computed = cached;
    s.n_committed = static_cast<int64_t>(hit.size());
    s.state->set_n_past(cached);
    if (!hit.empty()) ++stats_.prefix_hits;
    stats_.reused_tokens += cached;
    const bool first = !s.ever_admitted;
    if (first) s.usage.cached_tokens = std::min(cached, s.n_prompt);
    s.ever_admitted = true;
    s.admitted = ++admit_counter_;
    s.phase = Sequence::Phase::Prefill;
    running_.push_back(&s);
    if (first && s.sink != nullptr) s.sink->on_admitted(s.req.id, s.usage.cached_tokens);
    return true;
}

void Scheduler::admit() {
    while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < opts_.max_running) {
        Sequence* s = waiting_.front();
        if (!try_admit(*s)) break;
        if (!waiting_.empty() && waiting_.front() == s) waiting_.pop_front();
    }
    reap();
}

bool Scheduler::ensure_blocks(Sequence& s, int64_t end) {
    const int64_t bs = mem_->blocks().block_size();
    while (static_cast<int64_t>(s.state->blocks().size()) * bs < end) {
        const int32_t b = mem_->blocks().allocate();
        if (b < 0) return false;
        s.state->append_block(b);
    }
    return true;
}

int64_t Scheduler::prefill_end(const Sequence& s, int64_t budget) const {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    int64_t end = std::min(n, s.n_computed + std::min<int64_t>(budget, opts_.prefill_chunk));
    if (align_ > 1) {
        if (end < n) end = end / align_ * align_;
        // Stop at the next snapshot boundary: the last aligned boundary before the prompt's
        // final token, and every snapshot_interval tokens.
        const int64_t last = (n - 1) / align_ * align_;
        int64_t next = last > s.n_computed ? last : n;
        if (opts_.snapshot_interval > 0) {
            const int64_t iv = opts_.snapshot_interval;
            const int64_t k = (s.n_computed / iv + 1) * iv;
            if (k < next) next = k;
        }
        end = std::min(end, std::max(next, s.n_computed));
    }
    return end;
}

void Scheduler::step() {
    admit();
    if (running_.empty()) return;
    kv::BlockPool& pool = mem_->blocks();
    const int64_t bs = pool.block_size();

    // Decodes first: one token per running sequence that has finished its prompt. A sequence
    // that needs a block when none is free preempts the youngest running sequence.
    std::vector<Sequence*> decodes, prefills;
    const std::vector<Sequence*> order = running_;
    for (Sequence* s : order) {
        if (s->phase != Sequence::Phase::Decode) continue;  // prefilling, or preempted just now
        while (!ensure_blocks(*s, s->n_computed + 1)) {
            Sequence* victim = youngest_running();
            preempt(*victim);
            if (victim == s) break;
        }
        if (s->phase == Sequence::Phase::Decode) decodes.push_back(s);
    }
    // A sequence taken earlier may have been preempted for a later one.
    decodes.erase(std::remove_if(decodes.begin(), decodes.end(), [](Sequence* s) { return s->phase != Sequence::Phase::Decode; }),
                  decodes.end());
    int64_t budget = opts_.max_batched_tokens - static_cast<int64_t>(decodes.size());
    for (Sequence* s : running_) {
        if (s->phase != Sequence::Phase::Prefill || budget <= 0) continue;
        int64_t end = prefill_end(*s, budget);
        if (end <= s->n_computed) continue;
        if (!ensure_blocks(*s, end)) {
            // Take what fits (aligned); the rest waits for memory.
            const int64_t have = static_cast<int64_t>(s->state->blocks().size()) * bs;
            end = std::min(end, have);
            if (end < static_cast<int64_t>(s->tokens.size())) end = end / align_ * align_;
            if (end <= s->n_computed) continue;
        }
        s->step_begin = s->n_computed;
        s->step_end = end;
        budget -= end - s->n_computed;
        prefills.push_back(s);
    }
    if (decodes.empty() && prefills.empty()) {
        // Every running sequence is stuck on memory held by the others: free the youngest.
        if (running_.size() > 1) preempt(*youngest_running());
        else if (running_.size() == 1) finish(*running_.front(), FinishReason::Error, "out of KV memory");
        reap();
        return;
    }

    batch_.clear();
    batch_seqs_.clear();
    for (Sequence* s : decodes) {
        s->step_begin = s->n_computed;
        s->step_end = s->n_computed + 1;
    }
    std::vector<Sequence*> in_batch = decodes;
    in_batch.insert(in_batch.end(), prefills.begin(), prefills.end());
    // Drafts, verified by sampling their rows as the sequence would without them: for greedy
    // sequences the argmax (the backend's when every sequence that samples this step is greedy),
    // for sampled ones the sampler's draw on rows that come to the host. A drafted token is kept
    // when the draw at its position picks it — with a draft that is one token, not a distribution,
    // that is the standard rejection rule (kept with probability p(token); otherwise the draw is
    // p without it), so the output's distribution is the plain one, and with one uniform number
    // per token drawn in the same order a seed gives the same tokens. Not when rows are sampled
    // where the logits are (a GPU's): then only steps whose sampling sequences are all greedy
    // draft. Budget: the batch's tokens left over.
    using RowSampling = SchedulerOptions::RowSampling;
    const bool rows_on_device = opts_.row_sampling != RowSampling::Never &&
                                (opts_.row_sampling == RowSampling::Always || model_.backend().samples_where_logits_are());
    bool all_greedy = true;
    for (Sequence* s : in_batch)
        if (s->step_end == static_cast<int64_t>(s->tokens.size()) && !may_draft(*s, true)) all_greedy = false;
    const bool drafting = opts_.spec_ngram > 0 && !mem_->has_recurrent() && !decodes.empty() && (all_greedy || !rows_on_device);
    for (Sequence* s : in_batch) s->draft.clear();
    for (Sequence* s : drafting ? decodes : std::vector<Sequence*>{}) {
        if (budget <= 0) break;
        plan_draft(*s, budget, rows_on_device);
        budget -= static_cast<int64_t>(s->draft.size());
    }
    int64_t n_logits = 0;
    for (Sequence* s : in_batch) {
        const int32_t idx = static_cast<int32_t>(batch_seqs_.size());
        batch_seqs_.push_back(s->state.get());
        const bool last = s->step_end == static_cast<int64_t>(s->tokens.size());
        for (int64_t p = s->step_begin; p < s->step_end; ++p)
            batch_.add(s->tokens[static_cast<size_t>(p)], static_cast<int32_t>(p), idx, last && p == s->step_end - 1);
        for (size_t j = 0; j < s->draft.size(); ++j)
            batch_.add(s->draft[j], static_cast<int32_t>(s->step_end + static_cast<int64_t>(j)), idx, true);
        n_logits += (last ? 1 : 0) + static_cast<int64_t>(s->draft.size());
        if (s->phase == Sequence::Phase::Prefill) stats_.prefill_tokens += s->step_end - s->step_begin;
    }
    // When every sequence that samples this step takes the argmax of its raw logits, the
    // backend finds it where the logits are and only the ids come back.
    // A prompt-only request at its prompt's end reads its row whole: every row comes to the host.
    bool argmax_only = n_logits > 0, pooled = false;
    for (Sequence* s : in_batch)
        if (s->step_end == static_cast<int64_t>(s->tokens.size())) {
            if (!s->sampler.argmax_only() || s->constraint) argmax_only = false;
            pooled = pooled || s->req.pooling.any();
        }
    argmax_only = argmax_only && !pooled;
    const bool sample_rows = n_logits > 0 && !argmax_only && !pooled && rows_on_device;
    std::vector<Outcome> outcomes(in_batch.size());
    if (argmax_only) {
        argmax_.resize(static_cast<size_t>(n_logits));
        model_.forward(batch_, batch_seqs_, nullptr, argmax_.data());
        ++stats_.argmax_steps;
    } else if (sample_rows) {
        forward_sampling_rows(in_batch, outcomes);
    } else {
        logits_.resize(static_cast<size_t>(n_logits * model_.config().n_vocab));
        model_.forward(batch_, batch_seqs_, logits_.data());
    }
    ++stats_.steps;

    int64_t row = 0;
    for (size_t i = 0; i < in_batch.size(); ++i) {
        Sequence* s = in_batch[i];
        const bool last = s->step_end == static_cast<int64_t>(s->tokens.size());
        Outcome& o = outcomes[i];
        if (last && s->req.pooling.any()) {
            after_forward(*s, Outcome{});  // the prefix cache's commits; nothing is sampled
            finish_pooled(*s, row++);
            continue;
        }
        if (!s->draft.empty()) {  // drafts imply argmax_only, or rows on the host
            const auto rows = 1 + static_cast<int64_t>(s->draft.size());
            accept_drafts(*s, row, argmax_only);
            row += rows;
            continue;
        }
        if (last && argmax_only) o.argmax = argmax_[static_cast<size_t>(row)];
        else if (last && !sample_rows) o.logits = logits_.data() + row * model_.config().n_vocab;
        if (last) ++row;
        after_forward(*s, std::move(o));
    }
    reap();
}

// This step's draft of a decode sequence (s.draft; empty: none): up to its draft length, the
// batch's budget, what the request may still generate and what the context holds, with KV
// blocks for the drafted positions.
void Scheduler::plan_draft(Sequence& s, int64_t budget, bool rows_on_device) {
    if (!s.req.sampling.speculative || !may_draft(s, rows_on_device)) return;
    if (s.spec_k == 0) s.spec_k = opts_.spec_ngram;
    if (s.spec_skip > 0) {
        --s.spec_skip;
        return;
    }
    int64_t k = std::min<int64_t>({s.spec_k, budget, opts_.max_context - static_cast<int64_t>(s.tokens.size())});
    if (s.req.sampling.max_tokens >= 0) k = std::min<int64_t>(k, s.req.sampling.max_tokens - s.usage.completion_tokens - 1);
    if (k <= 0) return;
    if (opts_.drafter) {
        s.draft = opts_.drafter(s.req.id, s.tokens, static_cast<int>(k));
        if (static_cast<int64_t>(s.draft.size()) > k) s.draft.resize(static_cast<size_t>(k));
        // Only ids the model has rows for (a drafter's mistake must not reach the embedding).
        const auto bad = std::find_if(s.draft.begin(), s.draft.end(),
                                      [&](int32_t t) { return t < 0 || t >= model_.config().n_vocab || !tok_.valid(t); });
        s.draft.erase(bad, s.draft.end());
    } else {
        if (!s.lookup) s.lookup = std::make_unique<PromptLookup>();
        s.lookup->push(std::span<const int32_t>(s.tokens).subspan(s.lookup->size()));
        s.draft = s.lookup->draft(static_cast<int>(k));
    }
    if (s.draft.empty()) return;
    // Blocks for draft positions only from a surplus: a rejected draft's blocks hold nothing,
    // and running sequences must not be preempted for them.
    kv::BlockPool& pool = mem_->blocks();
    const int64_t bs = pool.block_size();
    const int64_t end = s.step_end + static_cast<int64_t>(s.draft.size());
    const int64_t need = (end + bs - 1) / bs - static_cast<int64_t>(s.state->blocks().size());
    if ((need > 0 && pool.n_available() - need < static_cast<int64_t>(running_.size())) || !ensure_blocks(s, end))
        s.draft.clear();
}

// Greedy sequences always; sampled ones when their rows come to the host; never under a
// constraint (its state would have to roll back) or for prompt-only requests.
bool Scheduler::may_draft(const Sequence& s, bool rows_on_device) const {
    return (s.sampler.argmax_only() || !rows_on_device) && !s.constraint && !s.req.pooling.any();
}

// The token after the step's last one comes from the first row (the argmax, or the sampler's
// draw); each drafted token equal to the token just picked is then the sequence's own next token,
// computed already: its row gives the one after. The first mismatch (or the request's end) leaves the rest of the draft unused;
// its KV entries sit past n_computed, where the next step's tokens write over them before any token attends that far (attention
// is causal by position).
void Scheduler::accept_drafts(Sequence& s, int64_t row, bool ids) {
    ++stats_.spec_steps;
    stats_.drafted_tokens += static_cast<int64_t>(s.draft.size());
    // Row r's outcome: the backend's argmax, or the row itself for the (greedy) sampler.
    const auto outcome = [&](int64_t r) {
        Outcome o;
        if (ids) o.argmax = argmax_[static_cast<size_t>(r)];
        else o.logits = logits_.data() + r * model_.config().n_vocab;
        return o;
    };
    after_forward(s, outcome(row));
    size_t kept = 0;
    for (size_t j = 0; j < s.draft.size(); ++j) {
        if (s.phase != Sequence::Phase::Decode || s.tokens.back() != s.draft[j]) break;
        ++stats_.accepted_tokens;
        ++kept;
        s.step_end = s.n_computed + 1;  // the drafted token's position, computed this step
        after_forward(s, outcome(row + 1 + static_cast<int64_t>(j)));
    }
    if (s.state) s.state->set_n_past(s.n_computed);
    // Verifying costs more positions' work (on a CPU, MoE steps grow almost linearly with the
    // positions: each touches its own experts): drafts that keep failing get shorter.
    if (kept == s.draft.size()) s.spec_k = std::min(opts_.spec_ngram, 2 * s.spec_k);
    else if (kept == 0 && s.spec_k > 1) s.spec_k = s.spec_k / 2;
    else if (kept == 0) s.spec_skip = s.spec_backoff = std::min(64, std::max(2, 2 * s.spec_backoff));
    if (kept > 0) s.spec_backoff = 0;
    s.draft.clear();
}

void Scheduler::forward_sampling_rows(const std::vector<Sequence*>& in_batch, std::vector<Outcome>& out) {
    model_.forward(batch_, batch_seqs_, nullptr);
    const int64_t n_vocab = model_.config().n_vocab;
    // Summaries for the rows of sequences that can take them; whole rows for the others
    // (constraints, large top_k, long penalty histories) and for summaries that cannot decide.
    row_req_.clear();
    std::vector<size_t>& req_of = row_req_of_;
    std::vector<int64_t>& row_of = row_of_;
    req_of.assign(in_batch.size(), SIZE_MAX);
    row_of.assign(in_batch.size(), -1);
    int64_t row = 0;
    for (size_t i = 0; i < in_batch.size(); ++i) {
        Sequence* s = in_batch[i];
        if (s->step_end != static_cast<int64_t>(s->tokens.size())) continue;
        row_of[i] = row;
        if (!s->constraint) {
            if (std::optional<backend::RowSampleRequest> r = s->sampler.row_request()) {
                r->row = row;
                req_of[i] = row_req_.size();
                row_req_.push_back(*r);
            }
        }
        ++row;
    }
    constexpr int32_t k = backend::kMaxRowSampleTop;
    row_sum_.resize(row_req_.size());
    row_top_.resize(row_req_.size() * static_cast<size_t>(k));
    model_.sample_rows(row_req_, k, row_sum_.data(), row_top_.data());

    size_t whole = 0;
    for (size_t i = 0; i < in_batch.size(); ++i)
        if (row_of[i] >= 0 && req_of[i] == SIZE_MAX) ++whole;
    logits_.resize(static_cast<size_t>((whole + row_req_.size()) * n_vocab));  // room for every undecided row too
    size_t used = 0;
    for (size_t i = 0; i < in_batch.size(); ++i) {
        if (row_of[i] < 0) continue;
        Sequence* s = in_batch[i];
        Outcome& o = out[i];
        float* host = logits_.data() + (used++) * n_vocab;
        if (req_of[i] == SIZE_MAX) {
            model_.copy_logits_row(row_of[i], host);
            o.logits = host;
            ++stats_.whole_rows;
            continue;
        }
        const size_t r = req_of[i];
        const backend::RowSample& sum = row_sum_[r];
        const std::span<const backend::TokenLogit> top(row_top_.data() + r * k, static_cast<size_t>(sum.n_top));
        try {
            o.sampled = s->sampler.sample_row(sum, top);
            if (!o.sampled) {
                model_.copy_logits_row(row_of[i], host);
                o.sampled = s->sampler.sample_adjusted(host);
                ++stats_.whole_rows;
            }
            ++stats_.row_sampled_tokens;
        } catch (const Error& e) {
            o.error = e.what();
        }
    }
}

void Scheduler::commit_blocks(Sequence& s) {
    kv::BlockPool& pool = mem_->blocks();
    const int64_t bs = pool.block_size();
    // Runs every step for every sequence; a block fills only every block_size tokens.
    if ((s.n_committed + 1) * bs > s.n_computed) return;
    std::vector<int32_t> blocks = s.state->blocks();
    bool changed = false;
    while ((s.n_committed + 1) * bs <= s.n_computed) {
        const size_t i = static_cast<size_t>(s.n_committed);
        const int32_t parent = i == 0 ? -1 : blocks[i - 1];
        const std::span<const int32_t> toks(s.tokens.data() + i * static_cast<size_t>(bs), static_cast<size_t>(bs));
        const int32_t canonical = pool.commit(blocks[i], parent, toks);
        if (canonical != blocks[i]) {
            // The same prefix is cached already: share it, free ours.
            pool.retain(canonical);
            pool.release(blocks[i]);
            blocks[i] = canonical;
            changed = true;
        }
        ++s.n_committed;
    }
    if (changed) s.state->set_blocks(std::move(blocks));
}

void Scheduler::after_forward(Sequence& s, Outcome o) {
    const bool was_prefill = s.phase == Sequence::Phase::Prefill;
    s.n_computed = s.step_end;
    if (opts_.prefix_cache) {
        commit_blocks(s);
        // Hybrid models: snapshot the recurrent state at the boundaries prefill_end stops at.
        if (mem_->has_recurrent() && s.n_computed % align_ == 0 && s.n_computed > 0) {
            const int64_t n = static_cast<int64_t>(s.tokens.size());
            const bool prompt_end = was_prefill && s.n_computed == (n - 1) / align_ * align_;
            const bool interval = opts_.snapshot_interval > 0 && s.n_computed % opts_.snapshot_interval == 0;
            if (prompt_end || interval) {
                const int32_t block = s.state->blocks()[static_cast<size_t>(s.n_computed / mem_->blocks().block_size() - 1)];
                mem_->save_snapshot(s.slot, block);
            }
        }
    }
    if (o.logits == nullptr && o.argmax == -2 && !o.sampled && o.error.empty()) return;
    s.phase = Sequence::Phase::Decode;
    sample_next(s, std::move(o));
}

void Scheduler::sample_next(Sequence& s, Outcome o) {
    SampleResult r;
    float* logits = o.logits;
    if (!o.error.empty()) {
        finish(s, FinishReason::Error, o.error);
        return;
    }
    if (o.sampled) {
        r = std::move(*o.sampled);
    } else if (logits == nullptr) {
        if (o.argmax < 0) {  // as Sampler::sample says it
            finish(s, FinishReason::Error, "no token can be sampled: every allowed token has logit -inf");
            return;
        }
        r.token = o.argmax;
    } else {
        const TokenMask* mask = nullptr;
        if (s.constraint) {
            s.constraint->allowed(s.mask);
            mask = &s.mask;
        }
        try {
            r = s.sampler.sample(logits, mask);
        } catch (const Error& e) {
            finish(s, FinishReason::Error, e.what());
            return;
        }
    }
    const int32_t t = r.token;
    s.tokens.push_back(t);
    s.sampler.accept(t, true);
    ++s.usage.completion_tokens;
    ++stats_.generated_tokens;

    const bool is_end = (!s.req.sampling.ignore_eos && (t == tok_.eos() || t == tok_.eot())) ||
                        std::find(s.req.sampling.stop_token_ids.begin(), s.req.sampling.stop_token_ids.end(), t) !=
                            s.req.sampling.stop_token_ids.end();
    if (is_end) {
        finish(s, FinishReason::Stop, tok_.token_bytes(t));
        return;
    }
    if (s.constraint) s.constraint->accept(t);
    GeneratedToken g{t, r.logprob, std::move(r.top)};
    // Control tokens are not text (what a "skip special tokens" decode omits).
    std::string piece = tok_.is_special(t) ? std::string() : s.decoder.push(t);
    const StopStringMatcher::Result m = s.stops.push(piece);
    emit(s, {std::move(g)}, m.emit);
    if (m.stopped) {
        s.stop_matched = true;
        finish(s, FinishReason::Stop, s.req.sampling.stop[static_cast<size_t>(m.which)]);
        return;
    }
    if (s.constraint && s.constraint->must_end()) {
        finish(s, FinishReason::Stop, "");
        return;
    }
    if ((s.req.sampling.max_tokens >= 0 && s.usage.completion_tokens >= s.req.sampling.max_tokens) ||
        static_cast<int64_t>(s.tokens.size()) >= opts_.max_context) {
        finish(s, FinishReason::Length, "");
        return;
    }
}

void Scheduler::emit(Sequence& s, std::vector<GeneratedToken> toks, const std::string& piece) {
    if (s.sink != nullptr && (!toks.empty() || !piece.empty())) s.sink->on_tokens(s.req.id, toks, piece);
}

void Scheduler::finish_pooled(Sequence& s, int64_t row) {
    std::vector<float> hidden, token_logits;
    try {
        if (s.req.pooling.embed) {
            hidden.resize(static_cast<size_t>(model_.config().n_embd));
            model_.copy_hidden_row(row, hidden.data());
        }
        const float* logits = logits_.data() + row * model_.config().n_vocab;
        for (int32_t t : s.req.pooling.score_tokens) token_logits.push_back(logits[t]);
    } catch (const Error& e) {
        finish(s, FinishReason::Error, e.what());
        return;
    }
    if (s.sink != nullptr) s.sink->on_pooled(s.req.id, hidden, token_logits);
    finish(s, FinishReason::Stop, "");
}

void Scheduler::finish(Sequence& s, FinishReason reason, const std::string& detail) {
    if (s.phase == Sequence::Phase::Finished) return;
    if ((reason == FinishReason::Stop || reason == FinishReason::Length) && !s.stop_matched) {
        // Whatever text is still held back (no stop string followed it) belongs to the output.
        std::string tail = s.stops.push(s.decoder.flush()).emit;
        tail += s.stops.flush();
        emit(s, {}, tail);
    }
    release_memory(s);
    if (const auto it = std::find(running_.begin(), running_.end(), &s); it != running_.end()) running_.erase(it);
    if (const auto it = std::find(waiting_.begin(), waiting_.end(), &s); it != waiting_.end()) waiting_.erase(it);
    s.phase = Sequence::Phase::Finished;
    ++stats_.finished;
    if (s.sink != nullptr) s.sink->on_done(s.req.id, reason, s.usage, detail);
}

void Scheduler::reap() {
    for (auto it = by_id_.begin(); it != by_id_.end();) {
        if (it->second->phase == Sequence::Phase::Finished) it = by_id_.erase(it);
        else ++it;
    }
}

SchedulerStats Scheduler::stats() const {
    SchedulerStats s = stats_;
    s.running = static_cast<int64_t>(running_.size());
    s.waiting = static_cast<int64_t>(waiting_.size());
    const kv::BlockPool& pool = mem_->blocks();
    s.kv_blocks = pool.n_blocks();
    s.kv_blocks_in_use = pool.n_in_use();
    s.kv_blocks_cached = pool.n_cached();
    s.block_size = pool.block_size();
    s.snapshots = mem_->n_snapshots();
    s.snapshot_capacity = mem_->snapshot_capacity();
    if (const experts::ExpertStore* e = model_.expert_store()) {
        s.has_expert_store = true;
        s.experts = e->stats();
    }
    return s;
}

}  // namespace strata::runtime
