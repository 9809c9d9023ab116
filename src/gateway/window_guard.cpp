#include "gateway/window_guard.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include "gateway/context/context_assembler.h"
#include "gateway/context/session_store.h"
#include "gateway/lane.h"
#include "serve/served_model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::gateway {

using serve::ApiError;
using serve::ApiKind;
using serve::ojson;

namespace {

// Text of an OpenAI content value (string or parts) or an Anthropic one (string or blocks), with
// tool calls, tool results and images rendered as short text so they can be indexed and counted.
std::string flatten_content(const ojson& content) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) return {};
    std::string out;
    auto add = [&out](const std::string& s) {
        if (s.empty()) return;
        if (!out.empty()) out += "\n";
        out += s;
    };
    for (const auto& part : content) {
        if (part.is_string()) {
            add(part.get<std::string>());
            continue;
        }
        if (!part.is_object()) continue;
        const std::string type = part.value("type", "");
        if (type == "text" && part.contains("text") && part["text"].is_string()) add(part["text"].get<std::string>());
        else if (type == "tool_use")
            add("[tool call " + part.value("name", "") + " " + (part.contains("input") ? part["input"].dump() : "{}") + "]");
        else if (type == "tool_result")
            add("[tool result] " + (part.contains("content") ? flatten_content(part["content"]) : ""));
        else if (type == "thinking" && part.contains("thinking") && part["thinking"].is_string())
            add(part["thinking"].get<std::string>());
        else if (type == "image" || type == "image_url") add("[image]");
    }
    return out;
}

bool has_tool_result(const ojson& content) {
    if (!content.is_array()) return false;
    for (const auto& part : content)
        if (part.is_object() && part.value("type", "") == "tool_result") return true;
    return false;
}

// System instructions in either API's spelling (OpenAI's developer role is a system message).
bool is_system_role(const std::string& role) { return role == "system" || role == "developer"; }

// A request body as the assembler sees it, and where each of its messages came from.
struct Flattened {
    Conversation conversation;
    std::vector<size_t> source;  // conversation.messages[i] is body.messages[source[i]]
    size_t leading_system = 0;   // OpenAI: body.messages[0..leading_system) are system messages
};

Flattened flatten(ApiKind api, const ojson& body) {
    Flattened f;
    const ojson& messages = body.at("messages");
    if (api == ApiKind::Anthropic) {
        if (body.contains("system")) f.conversation.system = flatten_content(body["system"]);
    } else {
        while (f.leading_system < messages.size() && messages[f.leading_system].is_object()) {
            const std::string role = messages[f.leading_system].value("role", "");
            if (!is_system_role(role)) break;
            if (!f.conversation.system.empty()) f.conversation.system += "\n\n";
            f.conversation.system += flatten_content(messages[f.leading_system].value("content", ojson()));
            ++f.leading_system;
        }
    }
    for (size_t i = f.leading_system; i < messages.size(); ++i) {
        const ojson& m = messages[i];
        if (!m.is_object()) continue;
        Message out;
        out.role = m.value("role", "user");
        // A system entry between turns (Claude Code's agent list, Codex's developer notes) is an
        // instruction, not history: it counts with the system prompt and is never abridged away
        // (rebuild keeps it; the lane merges every system message into the leading one).
        if (is_system_role(out.role)) {
            if (!f.conversation.system.empty()) f.conversation.system += "\n\n";
            f.conversation.system += flatten_content(m.value("content", ojson()));
            continue;
        }
        const ojson content = m.contains("content") ? m["content"] : ojson();
        out.text = flatten_content(content);
        if (api == ApiKind::OpenAI && m.contains("tool_calls") && m["tool_calls"].is_array())
            for (const auto& call : m["tool_calls"])
                if (call.contains("function") && call["function"].is_object())
                    out.text += "\n[tool call " + call["function"].value("name", "") + " " +
                                call["function"].value("arguments", "") + "]";
        out.turn_start = out.role == "user" && !has_tool_result(content);
        f.conversation.messages.push_back(std::move(out));
        f.source.push_back(i);
    }
    return f;
}

// The body that goes to the lane: the system prompt with the history block appended, the
// verbatim tail of the conversation, and the huge message (if any) replaced by its split text.
ojson rebuild(ApiKind api, const ojson& body, const Flattened& f, const AssembleResult& r) {
    ojson out = body;
    const ojson& messages = body.at("messages");
    ojson kept = ojson::array();
    if (api == ApiKind::OpenAI)
        for (size_t i = 0; i < f.leading_system; ++i) kept.push_back(messages[i]);
    const size_t from = r.first_verbatim < f.source.size() ? f.source[r.first_verbatim] : messages.size();
    // Anthropic: text appended to the top-level system prompt (a string or text blocks).
    auto append_system = [&out](const std::string& text) {
        if (!out.contains("system") || out["system"].is_null()) out["system"] = text;
        else if (out["system"].is_string()) out["system"] = out["system"].get<std::string>() + "\n\n" + text;
        else if (out["system"].is_array()) out["system"].push_back(ojson{{"type", "text"}, {"text", text}});
    };
    // System entries among the abridged turns stay (flatten counted them with the system prompt):
    // OpenAI keeps them as messages after the leading ones, Anthropic moves their text into the
    // system prompt, where the lane would merge them anyway.
    size_t moved = 0;
    for (size_t i = f.leading_system; i < from; ++i) {
        if (!messages[i].is_object()) continue;
        const std::string role = messages[i].value("role", "");
        if (!is_system_role(role)) continue;
        if (api == ApiKind::Anthropic) {
            append_system(flatten_content(messages[i].value("content", ojson())));
        } else {
            kept.push_back(messages[i]);
            ++moved;
        }
    }
    for (size_t i = from; i < messages.size(); ++i) kept.push_back(messages[i]);
    if (r.split_message && *r.split_message < f.source.size()) {
        const size_t body_index = f.source[*r.split_message];
        const size_t kept_index =
            body_index >= from ? (api == ApiKind::OpenAI ? f.leading_system : 0) + moved + (body_index - from) : SIZE_MAX;
        if (kept_index < kept.size()) kept[kept_index]["content"] = r.split_text;
    }
    if (!r.history_block.empty()) {
        if (api == ApiKind::Anthropic) {
            append_system(r.history_block);
        } else if (f.leading_system > 0) {
            ojson& sys = kept[f.leading_system - 1]["content"];
            if (sys.is_array()) sys.push_back(ojson{{"type", "text"}, {"text", r.history_block}});
            else sys = (sys.is_string() ? sys.get<std::string>() + "\n\n" : std::string()) + r.history_block;
        } else {
            kept.insert(kept.begin(), ojson{{"role", "system"}, {"content", r.history_block}});
        }
    }
    out["messages"] = std::move(kept);
    return out;
}

bool accept_any_signature(const void*, const std::string&, const std::string&) { return true; }

// Prompt tokens of a body exactly as the lane will count them.
int64_t exact_tokens(ApiKind api, const ojson& body, const serve::ServedModel& counter, const serve::RequestLimits& limits) {
    const serve::ChatRequest r = api == ApiKind::Anthropic
                                     ? serve::parse_anthropic_messages(body, limits, accept_any_signature, nullptr, true)
                                     : serve::parse_openai_chat(body, limits);
    return counter.count_tokens(r);
}

// The output limit a body asks for (-1: none named).
// The output limit a body asks for (-1: none named, or not a count the lane would accept). Whole
// numbers written as floats count, as the lane reads them.
int64_t requested_output(ApiKind api, const ojson& body) {
    for (const char* key : {"max_completion_tokens", "max_tokens"}) {
        if (api == ApiKind::Anthropic && std::string(key) != "max_tokens") continue;
        if (!body.contains(key)) continue;
        const ojson& v = body[key];
        if (v.is_number_integer()) return std::clamp<int64_t>(v.get<int64_t>(), -1, int64_t{1} << 40);
        if (v.is_number_float()) {
            const double d = v.get<double>();
            if (d >= 0 && d <= 1e12 && d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
        }
        return -1;
    }
    return -1;
}

void set_output(ApiKind api, ojson& body, int64_t n) {
    if (api == ApiKind::OpenAI && body.contains("max_completion_tokens")) body["max_completion_tokens"] = n;
    else body["max_tokens"] = n;
}

}  // namespace

struct WindowGuard::Assemblers {
    std::mutex mu;
    uint64_t made = 0;
    std::map<std::string, std::pair<std::shared_ptr<const serve::ServedModel>, std::shared_ptr<ContextAssembler>>> by_lane;
};

WindowGuard::WindowGuard(const LongContextConfig& config, std::shared_ptr<Reranker> reranker, std::shared_ptr<Embedder> embedder)
    : cache_(std::make_shared<SessionCache>(config.cache_max_bytes)),
      config_(config),
      reranker_(std::move(reranker)),
      embedder_(std::move(embedder)),
      assemblers_(std::make_unique<Assemblers>()) {
    if (config_.enabled && !config_.store_path.empty())
        store_ = std::make_unique<SessionStore>(SessionStoreOptions{config_.store_path, config_.store_max_bytes, log_line});
    limits_.max_messages = 1 << 20;
    limits_.max_text_bytes = 1ll << 30;
}

WindowGuard::~WindowGuard() = default;

GuardReport WindowGuard::apply(ApiKind api, ojson& body, size_t body_bytes, const LaneModel& lane, const std::string& scope) {
    const auto t0 = std::chrono::steady_clock::now();
    GuardReport report;
    if (!body.is_object() || !body.contains("messages") || !body["messages"].is_array()) return report;  // the lane words the 400
    const int64_t window = lane.window;
    int64_t output = requested_output(api, body);

    // Thinking budget (Anthropic's field, and the thinking_budget extension on OpenAI bodies):
    // leave the answer at least a quarter of max_tokens (256 to 4096 tokens).
    auto clamp_thinking = [&](int64_t max_out) {
        ojson* budget = nullptr;
        if (api == ApiKind::Anthropic && body.contains("thinking") && body["thinking"].is_object() &&
            body["thinking"].value("type", "") == "enabled" && body["thinking"].contains("budget_tokens") &&
            body["thinking"]["budget_tokens"].is_number_integer())
            budget = &body["thinking"]["budget_tokens"];
        else if (api == ApiKind::OpenAI && body.contains("thinking_budget") && body["thinking_budget"].is_number_integer())
            budget = &body["thinking_budget"];
        if (!budget || max_out <= 0) return;
        const int64_t room = std::clamp<int64_t>(max_out / 4, 256, 4096);
        const int64_t limit = max_out - room;
        if (budget->get<int64_t>() <= limit) return;
        const int64_t minimum = api == ApiKind::Anthropic ? 1024 : 1;
        if (limit >= minimum) {
            *budget = limit;
            report.thinking_clamped = true;
        } else if (api == ApiKind::Anthropic) {
            body["thinking"] = ojson{{"type", "disabled"}};
            report.thinking_disabled = true;
        } else {
            body.erase("thinking_budget");
            report.thinking_disabled = true;
        }
    };
    clamp_thinking(output);

    if (!config_.enabled || !lane.counter || window <= 0) return report;
    // Room for the answer: what the client asked, at most half the window; a request that names
    // no limit gets the configured default (at most a quarter of the window) reserved.
    int64_t reserve = output > 0 ? std::min(output, window / 2) : std::min(config_.default_output_tokens, window / 4);
    const int64_t prompt_room = window - reserve;
    const size_t n_messages = body["messages"].size();
    // Byte-level BPE: a token is at least one byte, so bytes (plus the template's few special
    // tokens per message) bound the count from above — most requests need no counting at all.
    // (A request that names no output limit keeps the default reserve free for its answer.)
    const int64_t output_room = output > 0 ? output : reserve;
    if (static_cast<int64_t>(body_bytes + 8 * n_messages + 256) <= window - output_room) return report;

    auto finish = [&] {
        report.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return report;
    };
    // Small enough to count exactly and cheaply: maybe it fits after all.
    if (static_cast<int64_t>(body_bytes) <= 8 * window) {
        report.prompt_tokens_in = exact_tokens(api, body, *lane.counter, limits_);
        report.counted = true;
        report.prompt_tokens_out = report.prompt_tokens_in;
        if (report.prompt_tokens_in + output_room <= window) return finish();
        if (report.prompt_tokens_in <= prompt_room) {
            // The prompt fits; only the output limit does not: lower it to what is left (a
            // request without a limit already gets at most what is left from the lane).
            if (output > 0) {
                set_output(api, body, window - report.prompt_tokens_in);
                report.max_tokens_out = window - report.prompt_tokens_in;
                clamp_thinking(report.max_tokens_out);
            }
            return finish();
        }
    }

    std::shared_ptr<ContextAssembler> assembler;  // kept alive by this request if the lane is replaced meanwhile
    {
        std::lock_guard lock(assemblers_->mu);
        // One per lane, replaced when the lane restarts with a new tokenizer (its sessions were
        // counted with the old one).
        auto& slot = assemblers_->by_lane[lane.lane];
        if (!slot.second || slot.first != lane.counter) {
            std::shared_ptr<const serve::ServedModel> counter = lane.counter;
            // Called on several threads at once (the assembler counts new chunks in parallel).
            TokenCounter count = [counter](std::string_view s) -> int64_t {
                return static_cast<int64_t>(counter->tokenizer().encode(s, false).size());
            };
            slot.first = lane.counter;
            // Its own keys in the shared cache: a replaced assembler's sessions (another
            // tokenizer's counts) are never found again, only aged out.
            IndexingOptions indexing;
            indexing.shared_cache = cache_;
            indexing.cache_space = std::hash<std::string>()(lane.lane) * 0x9e3779b97f4a7c15ull + ++assemblers_->made;
            RetrievalOptions retrieval;
            retrieval.reranker = reranker_;
            retrieval.embedder = embedder_;
            retrieval.dense_budget_ms = static_cast<int>(config_.embed_budget_ms);
            slot.second = std::make_shared<ContextAssembler>(store_.get(), std::move(count), retrieval, indexing);
        }
        assembler = slot.second;
    }

    const Flattened flat = flatten(api, body);
    if (flat.conversation.messages.empty()) return finish();
    int64_t tools = 0;
    if (body.contains("tools"))
        tools = static_cast<int64_t>(body["tools"].dump().size()) / 3;  // a rough share; the exact count below corrects it
    int64_t budget = prompt_room - tools - 16 * 4 - 64;
    const ojson original = body;
    for (int attempt = 0; attempt < 5 && budget > 0; ++attempt) {
        AssembleOptions options;
        options.budget_tokens = budget;
        options.recent_fraction = config_.recent_fraction;
        const AssembleResult r = assembler->assemble(scope, flat.conversation, options);
        if (!r.fits) break;
        if (!report.counted) report.prompt_tokens_in = r.stats.tokens_in;
        report.stats = {{"tokens_in", r.stats.tokens_in},
                        {"tokens_out", r.stats.tokens_out},
                        {"chunks_total", r.stats.chunks_total},
                        {"chunks_new", r.stats.chunks_new},
                        {"chunks_chosen", r.stats.chunks_chosen},
                        {"session_hit", r.stats.session_hit},
                        {"ms_total", r.stats.ms_total},
                        {"ms_chunk_count", r.stats.ms_chunk_count},
                        {"ms_index", r.stats.ms_index},
                        {"ms_retrieve", r.stats.ms_retrieve},
                        {"chunks_embedded", r.stats.chunks_embedded},
                        {"chunks_unembedded", r.stats.chunks_unembedded},
                        {"ms_embed", r.stats.ms_embed},
                        {"retrieval", r.stats.retrieval},
                        {"first_verbatim_message", r.first_verbatim},
                        {"budget_tokens", budget}};
        ojson candidate = r.abridged ? rebuild(api, original, flat, r) : original;
        if (output > reserve) set_output(api, candidate, reserve);
        const int64_t n = exact_tokens(api, candidate, *lane.counter, limits_);
        if (n <= prompt_room) {
            body = std::move(candidate);
            report.abridged = r.abridged;
            report.retrieval = r.abridged ? r.stats.retrieval : "";
            report.prompt_tokens_out = n;
            report.counted = true;
            if (output > reserve) {
                report.max_tokens_out = reserve;
                clamp_thinking(reserve);
            }
            return finish();
        }
        budget -= (n - prompt_room) + 32 + budget / 20;  // the template and joins cost more than counted: shrink and retry
    }
    // Worded exactly as the lane (and Anthropic's API) word it, with the lane's numbers: the
    // whole prompt's tokens against the most the lane takes. Clients such as Claude Code read
    // "prompt is too long: N tokens > M maximum" and compact the conversation themselves.
    const int64_t whole = report.counted ? report.prompt_tokens_in : exact_tokens(api, original, *lane.counter, limits_);
    if (whole <= prompt_room) {
        // Never counted before (its bytes suggested more tokens than it has): it fits as it is.
        body = original;
        if (output > reserve) {
            set_output(api, body, reserve);
            report.max_tokens_out = reserve;
            clamp_thinking(reserve);
        }
        report.prompt_tokens_in = report.prompt_tokens_out = whole;
        report.counted = true;
        return finish();
    }
    // (A prompt under the window that still cannot fit beside its answer's room: that room is the maximum.)
    throw serve::prompt_too_long(whole, whole > window - 1 ? window - 1 : prompt_room);
}

}  // namespace strata::gateway
