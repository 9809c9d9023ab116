#include "serve/generation.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "serve/engine_client.h"
#include "tokenizer/tokenizer.h"

namespace strata::serve {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kThinkEnd = "</think>";

TokenLogprobs token_logprobs(const json& entry) {
    TokenLogprobs t;
    if (const auto it = entry.find("bytes"); it != entry.end() && it->is_array())
        for (const auto& b : *it) t.bytes += static_cast<char>(b.get<int>());
    const auto lp = entry.find("logprob");
    t.logprob = lp != entry.end() && lp->is_number() ? lp->get<double>() : std::numeric_limits<double>::quiet_NaN();
    return t;
}

// The engine's logprobs entries: {"token", "logprob", "bytes", "top": [{"token", "logprob", "bytes"}]}.
std::vector<TokenLogprobs> logprobs_of(const json& entries) {
    std::vector<TokenLogprobs> out;
    if (!entries.is_array()) return out;
    for (const auto& e : entries) {
        TokenLogprobs t = token_logprobs(e);
        for (const auto& alt : e.value("top", json::array())) t.top.push_back(token_logprobs(alt));
        out.push_back(std::move(t));
    }
    return out;
}

}  // namespace

// The memory an event takes, roughly: its nodes, strings and keys.
size_t approx_bytes(const json& j) {
    size_t n = sizeof(json);
    if (j.is_string()) n += j.get_ref<const std::string&>().size();
    else if (j.is_array())
        for (const auto& e : j) n += approx_bytes(e);
    else if (j.is_object())
        for (const auto& [k, v] : j.items()) n += 32 + k.size() + approx_bytes(v);
    return n;
}

void Mailbox::push(int slot, json event, bool last_phase) {
    std::function<void()> release;
    {
        std::lock_guard<std::mutex> lock(mu_);
        const std::string kind = event.value("event", "");
        if (kind == "error" || (last_phase && kind == "done")) {
            if (static_cast<size_t>(slot) >= ended_.size()) ended_.resize(static_cast<size_t>(slot) + 1, 0);
            ended_[static_cast<size_t>(slot)] = 1;
        }
        const size_t bytes = approx_bytes(event);
        bytes_ += bytes;
        events_.push_back(Queued{slot, std::move(event), bytes});
        release = take_release();
    }
    cv_.notify_one();
    if (release) release();
}

std::optional<std::pair<int, json>> Mailbox::pop(std::chrono::steady_clock::time_point deadline) {
    std::function<void()> release;
    std::optional<std::pair<int, json>> out;
    {
        std::unique_lock<std::mutex> lock(mu_);
        if (!cv_.wait_until(lock, deadline, [&] { return !events_.empty(); })) return std::nullopt;
        Queued& q = events_.front();
        bytes_ -= q.bytes;
        out.emplace(q.slot, std::move(q.event));
        events_.pop_front();
        release = take_release();
    }
    if (release) release();
    return out;
}

void Mailbox::release_when_done(int choices, size_t max_bytes, std::function<void()> release) {
    std::function<void()> now;
    {
        std::lock_guard<std::mutex> lock(mu_);
        choices_ = choices;
        max_bytes_ = max_bytes;
        release_ = std::move(release);
        now = take_release();
    }
    if (now) now();
}

size_t Mailbox::buffered_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
}

std::function<void()> Mailbox::take_release() {
    if (!release_ || choices_ <= 0 || bytes_ > max_bytes_ || ended_.size() < static_cast<size_t>(choices_)) return {};
    for (int i = 0; i < choices_; ++i)
        if (!ended_[static_cast<size_t>(i)]) return {};
    return std::exchange(release_, std::function<void()>());
}

Generation::Generation(EngineClient& engine, const tokenizer::Tokenizer& tokenizer, std::string id, GenerationSpec spec,
                       int64_t max_context, std::shared_ptr<Mailbox> mailbox, int slot)
    : engine_(engine),
      tokenizer_(tokenizer),
      id_(std::move(id)),
      spec_(std::move(spec)),
      max_context_(max_context),
      mailbox_(std::move(mailbox)),
      slot_(slot) {
    parser_ = make_output_parser(spec_.format, spec_.parser);
    in_reasoning_ = spec_.parser.starts_in_thinking;
    usage_.prompt_tokens = static_cast<int64_t>(spec_.prompt.size());
}

void Generation::start() {
    const bool budget = spec_.thinking_budget.has_value() && spec_.parser.parse_thinking;
    phase_ = budget ? 1 : 0;
    int64_t max_tokens = spec_.max_tokens;
    if (budget) max_tokens = max_tokens < 0 ? *spec_.thinking_budget : std::min(max_tokens, *spec_.thinking_budget);
    // The opening of a forced call is already in the prompt: the parser sees it first.
    if (!spec_.forced_prefix.empty()) {
        GenerationEvent opening;
        feed(spec_.forced_prefix, opening);
        pending_outputs_ = std::move(opening.outputs);
    }
    submit_phase(spec_.prompt_text, &spec_.prompt, max_tokens, budget);
}

void Generation::submit_phase(const std::string& prompt_text, const std::vector<int32_t>* prompt_ids, int64_t max_tokens,
                              bool stop_at_think_end) {
    std::vector<int32_t> ids = prompt_ids ? *prompt_ids : tokenizer_.encode(prompt_text, true);
    const int64_t room = max_context_ - static_cast<int64_t>(ids.size());
    if (max_tokens < 0 || max_tokens > room) {
        clamped_by_context_ = max_tokens >= 0;
        max_tokens = std::max<int64_t>(room, 0);
    }
    runtime::SamplingParams sampling = spec_.sampling;
    sampling.max_tokens = static_cast<int32_t>(max_tokens);  // at most the context's room
    sampling.stop = spec_.stop;
    if (stop_at_think_end) sampling.stop.push_back(kThinkEnd);
    ojson cmd = runtime::to_json(sampling);
    if (!spec_.response_format.is_null()) cmd["response_format"] = spec_.response_format;
    cmd["prompt"] = std::move(ids);
    phase_id_ = id_ + (phase_ == 2 ? "/answer" : "");
    // The handler holds the mailbox, not this object: events of a request that is being torn
    // down land in a mailbox that still exists.
    // Phase 1 of a thinking budget is followed by the answer's request (most often): not the last.
    engine_.submit(phase_id_, std::move(cmd), [mailbox = mailbox_, slot = slot_, last = phase_ != 1](const json& event) {
        mailbox->push(slot, event, last);
    });
    engine_done_ = false;  // after the submit: a refused one (EngineBusy) leaves nothing to wait for
}

void Generation::cancel() {
    if (!engine_done_) engine_.cancel(phase_id_);
}

void Generation::note_engine_event(const json& event) {
    const std::string kind = event.value("event", "");
    if ((kind == "done" || kind == "error") && event.value("id", "") == phase_id_) engine_done_ = true;
}

void Generation::feed(const std::string& text, GenerationEvent& out) {
    for (auto& e : parser_->push(text)) {
        if (e.kind == OutputEvent::Kind::Reasoning) in_reasoning_ = true;
        else in_reasoning_ = false;
        out.outputs.push_back(std::move(e));
    }
}

std::optional<GenerationEvent> Generation::handle(const json& event) {
    const std::string kind = event.value("event", "");
    GenerationEvent out;
    if (kind == "tokens") {
        const std::string text = event.value("text", "");
        const auto n = static_cast<int64_t>(event.contains("tokens") ? event["tokens"].size() : 0);
        out.outputs = std::move(pending_outputs_);
        pending_outputs_.clear();
        const bool was_reasoning = in_reasoning_;
        if (phase_ == 1) phase1_text_ += text;
        feed(text, out);
        if (was_reasoning || in_reasoning_) usage_.reasoning_tokens += n;
        out.kind = GenerationEvent::Kind::Output;
        out.tokens = n;
        if (event.contains("logprobs")) out.logprobs = logprobs_of(event["logprobs"]);
        return out;
    }
    if (kind == "admitted") {
        // The prefix-cache hit, known before any output (Anthropic's message_start reports it).
        if (phase_ == 2) return std::nullopt;
        usage_.cached_tokens = event.value("cached_tokens", int64_t{0});
        out.kind = GenerationEvent::Kind::Output;
        out.cached_tokens = usage_.cached_tokens;
        return out;
    }
    if (kind == "error") {
        engine_done_ = true;
        finished_ = true;
        out.kind = GenerationEvent::Kind::Failed;
        out.error = event.value("message", "the engine failed");
        out.engine_lost = event.value("engine_lost", false);
        return out;
    }
    if (kind != "done") return std::nullopt;

    engine_done_ = true;
    const auto& u = event.value("usage", json::object());
    const int64_t completion = u.value("completion_tokens", int64_t{0});
    if (phase_ != 2) usage_.cached_tokens = u.value("cached_tokens", int64_t{0});
    usage_.completion_tokens += completion;
    const std::string reason = event.value("finish_reason", "stop");
    const std::string stop = event.value("stop", "");

    if (reason == "error") {
        finished_ = true;
        out.kind = GenerationEvent::Kind::Failed;
        out.error = event.value("message", "the engine failed");
        return out;
    }

    if (phase_ == 1 && reason != "cancelled") {
        // The thinking phase ended: by "</think>", by the budget, or for good (eos, a client stop).
        const bool at_think_end = reason == "stop" && stop == kThinkEnd;
        const bool budget_cut =
            reason == "length" && (spec_.max_tokens < 0 || usage_.completion_tokens < spec_.max_tokens) && !clamped_by_context_;
        if (at_think_end || budget_cut) {
            std::string close;
            if (at_think_end) close = std::string(kThinkEnd) + "\n\n";
            else if (in_reasoning_) close = std::string(phase1_text_.ends_with("\n") ? "" : "\n") + kThinkEnd + "\n\n";
            out.kind = GenerationEvent::Kind::Output;
            feed(close, out);
            phase_ = 2;
            const int64_t left = spec_.max_tokens < 0 ? -1 : spec_.max_tokens - usage_.completion_tokens;
            if (left != 0) {
                try {
                    submit_phase(spec_.prompt_text + phase1_text_ + close, nullptr, left, false);
                } catch (const EngineBusy& e) {
                    finished_ = true;
                    out.kind = GenerationEvent::Kind::Failed;
                    out.error = e.what();
                    out.outputs.clear();
                }
                return out;
            }
            // Nothing left for the answer: a length stop.
            for (auto& e : parser_->finish()) out.outputs.push_back(std::move(e));
            out.kind = GenerationEvent::Kind::Done;
            out.finish_reason = "length";
            out.usage = usage_;
            finished_ = true;
            return out;
        }
    }

    out.kind = GenerationEvent::Kind::Done;
    out.outputs = std::move(pending_outputs_);
    pending_outputs_.clear();
    if (reason == "stop" && !spec_.forced_suffix.empty() && stop.empty()) {
        // The constrained document is complete: close the forced call.
        feed(spec_.forced_suffix, out);
    }
    for (auto& e : parser_->finish()) out.outputs.push_back(std::move(e));
    out.finish_reason = reason == "length" && clamped_by_context_ ? "context" : reason;
    // The engine names eos/eot stops too ("<|im_end|>"); only the client's own strings count.
    if (std::find(spec_.stop.begin(), spec_.stop.end(), stop) != spec_.stop.end()) out.stop_sequence = stop;
    out.usage = usage_;
    finished_ = true;
    return out;
}

}  // namespace strata::serve

namespace strata::serve {

Generation& GenerationGroup::add(EngineClient& engine, const tokenizer::Tokenizer& tokenizer, std::string id, GenerationSpec spec,
                                 int64_t max_context) {
    const int slot = static_cast<int>(gens_.size());
    gens_.push_back(std::make_unique<Generation>(engine, tokenizer, std::move(id), std::move(spec), max_context, mailbox_, slot));
    return *gens_.back();
}

void GenerationGroup::start() {
    for (auto& g : gens_) g->start();
}

void GenerationGroup::release_when_done(size_t max_tail_bytes, std::function<void()> release) {
    mailbox_->release_when_done(static_cast<int>(gens_.size()), max_tail_bytes, std::move(release));
}

bool GenerationGroup::finished() const {
    for (const auto& g : gens_)
        if (!g->finished()) return false;
    return true;
}

std::optional<std::pair<int, GenerationEvent>> GenerationGroup::next(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!finished()) {
        auto e = mailbox_->pop(deadline);
        if (!e) return std::nullopt;
        Generation& g = *gens_[static_cast<size_t>(e->first)];
        if (g.finished()) continue;
        if (auto out = g.handle(e->second)) return std::make_pair(e->first, std::move(*out));
    }
    return std::nullopt;
}

void GenerationGroup::cancel() {
    bool waiting = false;
    for (auto& g : gens_)
        if (!g->engine_idle()) {
            g->cancel();
            waiting = true;
        }
    // Every cancelled engine request still sends its done event: wait for them (bounded) so that
    // no request of ours is left running in the engine.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (waiting) {
        auto e = mailbox_->pop(deadline);
        if (!e) break;
        gens_[static_cast<size_t>(e->first)]->note_engine_event(e->second);
        waiting = false;
        for (auto& g : gens_) waiting = waiting || !g->engine_idle();
    }
}

}  // namespace strata::serve
