#include "runtime/engine_protocol.h"

#include <cmath>

#include "runtime/json_constraint.h"
#include "runtime/sampling_params.h"
#include "runtime/xml_call_constraint.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::runtime {

// Ordered: a schema's properties keep the order the client wrote them in (the constraint emits
// them in that order).
using json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxIdBytes = 256;

const json* field(const json& j, const char* name) {
    const auto it = j.find(name);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string get_string(const json& j, const char* name) {
    const json* f = field(j, name);
    if (f == nullptr) return {};
    if (!f->is_string()) throw Error(std::string("'") + name + "' must be a string");
    return f->get<std::string>();
}

// An integer JSON value as int64 (huge unsigned values saturate, so range checks still refuse them).
int64_t as_int64(const json& v) {
    return v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX)) : v.get<int64_t>();
}

bool get_bool(const json& j, const char* name, bool def) {
    const json* f = field(j, name);
    if (f == nullptr) return def;
    if (!f->is_boolean()) throw Error(std::string("'") + name + "' must be true or false");
    return f->get<bool>();
}

std::vector<int32_t> get_ids(const json& j, const char* name, size_t max_count, int32_t n_vocab) {
    const json* f = field(j, name);
    if (f == nullptr) return {};
    if (!f->is_array()) throw Error(std::string("'") + name + "' must be an array of token ids");
    if (f->size() > max_count) throw Error(std::string("'") + name + "' has more than " + std::to_string(max_count) + " entries");
    std::vector<int32_t> out;
    out.reserve(f->size());
    for (const json& e : *f) {
        if (!e.is_number_integer()) throw Error(std::string("'") + name + "' must contain integer token ids");
        const int64_t v = as_int64(e);
        if (v < 0 || v >= n_vocab)
            throw Error("token id " + std::to_string(v) + " in '" + name + "' is outside the vocabulary (" +
                        std::to_string(n_vocab) + ")");
        out.push_back(static_cast<int32_t>(v));
    }
    return out;
}

Request parse_submit(const json& j, Scheduler& sched) {
    const tokenizer::Tokenizer& tok = sched.tokenizer();
    Request r;
    r.id = get_string(j, "id");
    const json* prompt = field(j, "prompt");
    const json* text = field(j, "text");
    if ((prompt == nullptr) == (text == nullptr)) throw Error("submit needs exactly one of 'prompt' (token ids) or 'text'");
    const size_t max_prompt = static_cast<size_t>(sched.options().max_context);
    if (prompt != nullptr) {
        r.prompt = get_ids(j, "prompt", max_prompt, tok.n_vocab());
    } else {
        if (!text->is_string()) throw Error("'text' must be a string");
        const std::string& t = text->get_ref<const std::string&>();
        if (t.size() > 8 * max_prompt + 1024) throw Error("'text' is longer than the context can hold");
        r.prompt = tok.encode(t, get_bool(j, "parse_special", true));
    }
    // The sampling fields, max_tokens, stops, logprobs: one reader and one check (sampling_params.h).
    r.sampling = sampling_from_json(j, tok.n_vocab());
    // A prompt-only request (request.h, Pooling): the scheduler checks the ids against the model.
    r.pooling.embed = get_bool(j, "embed", false);
    if (field(j, "score_tokens") != nullptr)
        r.pooling.score_tokens = get_ids(j, "score_tokens", Pooling::kMaxScoreTokens, INT32_MAX);
    if (const json* f = field(j, "response_format")) {
        if (!f->is_object()) throw Error("'response_format' must be an object");
        const std::string type = get_string(*f, "type");
        if (type == "json_object") {
            r.grammar = JsonGrammar::any_json_object();
        } else if (type == "json_schema") {
            const json* schema = field(*f, "schema");
            if (schema == nullptr) throw Error("'response_format' of type json_schema needs 'schema'");
            r.grammar = JsonGrammar::from_ordered_schema(*schema);
        } else if (type == "xml_tool_call") {
            const json* tools = field(*f, "tools");
            if (tools == nullptr) throw Error("'response_format' of type xml_tool_call needs 'tools'");
            const json* written = field(*f, "name_written");
            if (written != nullptr && !written->is_boolean()) throw Error("'response_format.name_written' must be a boolean");
            r.xml_call = XmlCallGrammar::from_tools(*tools, written != nullptr && written->get<bool>());
        } else if (type != "text" && !type.empty()) {
            throw Error("'response_format.type' must be text, json_object, json_schema or xml_tool_call");
        }
    }
    return r;
}

}  // namespace

ParsedLine parse_command(std::string_view line, Scheduler& sched) {
    ParsedLine out;
    if (line.size() > kMaxLineBytes) {
        out.error = "command line longer than " + std::to_string(kMaxLineBytes >> 20) + " MiB";
        return out;
    }
    json j;
    try {
        // Depth is bounded before anything recursive touches the value.
        j = json::parse(line, [](int depth, json::parse_event_t, json&) {
            if (depth > kMaxJsonDepth) throw Error("command nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
            return true;
        });
    } catch (const Error& e) {
        out.error = e.what();
        return out;
    } catch (const json::exception& e) {
        out.error = std::string("not valid JSON: ") + e.what();
        return out;
    }
    try {
        if (!j.is_object()) throw Error("a command must be a JSON object");
        if (const json* id = field(j, "id"); id != nullptr && id->is_string()) {
            out.id = id->get<std::string>();
            if (out.id.size() > kMaxIdBytes) {
                out.id.clear();
                throw Error("'id' is longer than " + std::to_string(kMaxIdBytes) + " bytes");
            }
        }
        const std::string op = get_string(j, "op");
        Command c;
        c.id = out.id;
        if (op == "submit") {
            if (out.id.empty()) throw Error("submit needs a non-empty string 'id'");
            c.op = Command::Op::Submit;
            c.request = parse_submit(j, sched);
        } else if (op == "cancel") {
            if (out.id.empty()) throw Error("cancel needs the 'id' of a request");
            c.op = Command::Op::Cancel;
        } else if (op == "stats") {
            c.op = Command::Op::Stats;
        } else if (op == "shutdown") {
            c.op = Command::Op::Shutdown;
        } else {
            throw Error(op.empty() ? "a command needs 'op'"
                                   : "unknown op '" + op.substr(0, 64) + "' (submit, cancel, stats, shutdown)");
        }
        out.command = std::move(c);
    } catch (const Error& e) {
        out.error = e.what();
    } catch (const json::exception& e) {
        out.error = std::string("bad command: ") + e.what();
    }
    return out;
}

namespace {

json token_bytes_json(const tokenizer::Tokenizer& tok, int32_t id) {
    json b = json::array();
    for (unsigned char c : tok.token_bytes(id)) b.push_back(static_cast<int>(c));
    return b;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string ready_event(const Scheduler& s) {
    const model::ModelConfig& c = s.model().config();
    const tokenizer::Tokenizer& tok = s.tokenizer();
    const SchedulerOptions& o = s.options();
    json j = {{"event", "ready"},
              {"protocol", kProtocolVersion},
              {"model",
               {{"architecture", c.arch_name},
                {"n_vocab", c.n_vocab},
                {"n_ctx_train", c.n_ctx_train},
                {"bos", tok.bos()},
                {"eos", tok.eos()},
                {"eot", tok.eot()}}},
              {"limits",
               {{"max_context", o.max_context},
                {"max_running", o.max_running},
                {"max_batched_tokens", o.max_batched_tokens},
                {"prefill_chunk", o.prefill_chunk},
                {"spec_ngram", o.spec_ngram},
                {"block_size", o.kv.block_size}}}};
    return dump(j);
}

std::string tokens_event(const tokenizer::Tokenizer& tok, const std::string& id, const std::vector<GeneratedToken>& toks,
                         const std::string& text, bool with_logprobs) {
    json ids = json::array();
    for (const GeneratedToken& g : toks) ids.push_back(g.id);
    json j = {{"event", "tokens"}, {"id", id}, {"text", text}, {"tokens", ids}};
    if (with_logprobs) {
        json lp = json::array();
        for (const GeneratedToken& g : toks) {
            json top = json::array();
            for (const TokenLogprob& t : g.top)
                top.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", token_bytes_json(tok, t.token)}});
            lp.push_back({{"token", g.id}, {"logprob", g.logprob}, {"bytes", token_bytes_json(tok, g.id)}, {"top", top}});
        }
        j["logprobs"] = lp;
    }
    return dump(j);
}

std::string admitted_event(const std::string& id, int64_t cached_tokens) {
    return dump(json{{"event", "admitted"}, {"id", id}, {"cached_tokens", cached_tokens}});
}

std::string done_event(const std::string& id, FinishReason reason, const Usage& usage, const std::string& detail) {
    json j = {{"event", "done"},
              {"id", id},
              {"finish_reason", finish_reason_name(reason)},
              {"usage",
               {{"prompt_tokens", usage.prompt_tokens},
                {"cached_tokens", usage.cached_tokens},
                {"completion_tokens", usage.completion_tokens}}}};
    if (reason == FinishReason::Stop && !detail.empty()) j["stop"] = detail;
    if (reason == FinishReason::Error) j["message"] = detail;
    return dump(j);
}

std::string pooled_event(const std::string& id, const std::vector<float>& hidden, const std::vector<float>& token_logits) {
    json j = {{"event", "pooled"}, {"id", id}};
    if (!hidden.empty()) j["hidden"] = hidden;
    if (!token_logits.empty()) j["token_logits"] = token_logits;
    return dump(j);
}

std::string error_event(const std::string& id, const std::string& message) {
    json j = {{"event", "error"}, {"message", message}};
    if (!id.empty()) j["id"] = id;
    return dump(j);
}

std::string stats_event(const SchedulerStats& s, const std::string& id) {
    json j = {{"event", "stats"},
              {"running", s.running},
              {"waiting", s.waiting},
              {"finished", s.finished},
              {"steps", s.steps},
              {"prompt_tokens", s.prompt_tokens},
              {"prefill_tokens", s.prefill_tokens},
              {"generated_tokens", s.generated_tokens},
              {"prefix_cache",
               {{"lookups", s.prefix_lookups},
                {"hits", s.prefix_hits},
                {"reused_tokens", s.reused_tokens},
                {"cached_blocks", s.kv_blocks_cached},
                {"snapshots", s.snapshots},
                {"snapshot_capacity", s.snapshot_capacity}}},
              {"kv", {{"blocks", s.kv_blocks}, {"in_use", s.kv_blocks_in_use}, {"block_size", s.block_size}}},
              {"preemptions", s.preemptions},
              {"speculation", {{"steps", s.spec_steps}, {"drafted", s.drafted_tokens}, {"accepted", s.accepted_tokens}}}};
    if (s.has_expert_store) {
        const experts::StoreStats& e = s.experts;
        j["experts"] = {{"slots_per_layer", e.slots_per_layer}, {"vram_bytes", e.vram_bytes},     {"pairs_vram", e.pairs_vram},
                        {"pairs_host", e.pairs_host},           {"pairs_far", e.pairs_far},       {"host_bytes", e.host_bytes},
                        {"host_busy_seconds", e.host_busy_s},   {"replacements", e.replacements}, {"file_reads", e.file_reads}};
    }
    if (!id.empty()) j["id"] = id;
    return dump(j);
}

}  // namespace strata::runtime
