#include "bench/serve_bench.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "serve/chat_request.h"
#include "serve/engine_client.h"
#include "serve/served_model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::bench {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// 264 common English words; with a leading space each is one token in Qwen's vocabulary.
constexpr const char* kWords[] = {
    "the",     "of",      "and",   "to",      "in",     "is",       "it",     "that",    "was",      "for",    "on",     "are",
    "with",    "as",      "his",   "they",    "be",     "at",       "one",    "have",    "this",     "from",   "or",     "had",
    "by",      "not",     "word",  "but",     "what",   "some",     "we",     "can",     "out",      "other",  "were",   "all",
    "there",   "when",    "up",    "use",     "your",   "how",      "said",   "an",      "each",     "she",    "which",  "do",
    "their",   "time",    "if",    "will",    "way",    "about",    "many",   "then",    "them",     "write",  "would",  "like",
    "so",      "these",   "her",   "long",    "make",   "thing",    "see",    "him",     "two",      "has",    "look",   "more",
    "day",     "could",   "go",    "come",    "did",    "number",   "sound",  "no",      "most",     "people", "my",     "over",
    "know",    "water",   "than",  "call",    "first",  "who",      "may",    "down",    "side",     "been",   "now",    "find",
    "any",     "new",     "work",  "part",    "take",   "get",      "place",  "made",    "live",     "where",  "after",  "back",
    "little",  "only",    "round", "man",     "year",   "came",     "show",   "every",   "good",     "me",     "give",   "our",
    "under",   "name",    "very",  "through", "just",   "form",     "great",  "think",   "say",      "help",   "low",    "line",
    "before",  "turn",    "cause", "same",    "mean",   "differ",   "move",   "right",   "boy",      "old",    "too",    "does",
    "tell",    "set",     "three", "want",    "air",    "well",     "also",   "play",    "small",    "end",    "put",    "home",
    "read",    "hand",    "port",  "large",   "spell",  "add",      "even",   "land",    "here",     "must",   "big",    "high",
    "such",    "follow",  "act",   "why",     "ask",    "men",      "change", "went",    "light",    "kind",   "off",    "need",
    "house",   "picture", "try",   "us",      "again",  "animal",   "point",  "mother",  "world",    "near",   "build",  "self",
    "earth",   "father",  "head",  "stand",   "own",    "page",     "should", "country", "found",    "answer", "school", "grow",
    "study",   "still",   "learn", "plant",   "cover",  "food",     "sun",    "four",    "thought",  "let",    "keep",   "eye",
    "never",   "last",    "door",  "between", "city",   "tree",     "cross",  "since",   "hard",     "start",  "might",  "story",
    "saw",     "far",     "sea",   "draw",    "left",   "late",     "run",    "while",   "press",    "close",  "night",  "real",
    "life",    "few",     "stop",  "open",    "seem",   "together", "next",   "white",   "children", "begin",  "got",    "walk",
    "example", "ease",    "paper", "often",   "always", "music",    "those",  "both",    "mark",     "book",   "letter", "until",
};

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The shared prefix's RNG stream: apart from every request's (index < 2^63).
constexpr uint64_t kPrefixStream = ~uint64_t{0};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// The workload

PromptMaker::PromptMaker(const tokenizer::Tokenizer* tokenizer) {
    for (const char* w : kWords) {
        words_.push_back(std::string(" ") + w);
        word_tokens_.push_back(tokenizer ? static_cast<int64_t>(tokenizer->encode(words_.back(), false).size()) : 1);
        if (word_tokens_.back() == 1) single_.push_back(words_.size() - 1);
    }
}

void PromptMaker::fill(std::string& s, int64_t have, int64_t tokens, std::mt19937_64& rng) const {
    while (have < tokens) {
        size_t w = rng() % words_.size();
        if (have + word_tokens_[w] > tokens && !single_.empty()) w = single_[rng() % single_.size()];
        s += words_[w];
        have += word_tokens_[w];
    }
}

std::string PromptMaker::make(int64_t tokens, std::mt19937_64& rng) const {
    std::string s;
    fill(s, 0, tokens, rng);
    return s;
}

std::string PromptMaker::make_numbered(uint64_t index, int64_t tokens, std::mt19937_64& rng) const {
    const size_t lo = index % words_.size(), hi = index / words_.size() % words_.size();
    std::string s = words_[lo] + words_[hi];
    fill(s, word_tokens_[lo] + word_tokens_[hi], tokens, rng);
    return s;
}

std::vector<BenchRequest> make_requests(const WorkloadOptions& o, const PromptMaker& maker, uint64_t first, size_t n) {
    std::mt19937_64 prefix_rng(splitmix64(o.seed ^ splitmix64(kPrefixStream)));
    const std::string prefix = maker.make(o.shared_prefix, prefix_rng);
    std::vector<BenchRequest> out;
    out.reserve(n);
    for (uint64_t i = first; i < first + n; ++i) {
        std::mt19937_64 rng(splitmix64(o.seed ^ splitmix64(i)));
        const std::string prompt = prefix + maker.make_numbered(i, o.input_tokens, rng);
        ojson body = ojson::object();
        if (!o.model.empty()) body["model"] = o.model;
        if (o.endpoint == Endpoint::Chat) body["messages"] = ojson::array({{{"role", "user"}, {"content", prompt}}});
        else body["prompt"] = prompt;
        body["max_tokens"] = o.output_tokens;
        body["temperature"] = o.temperature;
        body["seed"] = static_cast<int64_t>(splitmix64(o.seed ^ splitmix64(i)) >> 1);  // sampled answers are reproducible too
        if (o.ignore_eos) body["ignore_eos"] = true;
        body["stream"] = true;
        body["stream_options"] = {{"include_usage", true}};
        BenchRequest r;
        r.body_text = body.dump();
        r.body = std::move(body);
        out.push_back(std::move(r));
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Reading a stream

bool chunk_has_content(const json& chunk, Endpoint endpoint) {
    auto it = chunk.find("choices");
    if (it == chunk.end() || !it->is_array() || it->empty()) return false;
    const json& choice = (*it)[0];
    auto nonempty_string = [](const json& obj, const char* key) {
        auto f = obj.find(key);
        return f != obj.end() && f->is_string() && !f->get_ref<const std::string&>().empty();
    };
    if (!choice.is_object()) return false;
    if (endpoint == Endpoint::Completions) return nonempty_string(choice, "text");
    auto d = choice.find("delta");
    if (d == choice.end() || !d->is_object()) return false;
    if (nonempty_string(*d, "content") || nonempty_string(*d, "reasoning_content") || nonempty_string(*d, "reasoning"))
        return true;
    auto calls = d->find("tool_calls");
    return calls != d->end() && calls->is_array() && !calls->empty();
}

void StreamRecorder::feed(std::string_view bytes, Clock::time_point at) {
    // SSE: events end with a blank line; "data:" lines carry the payload. JSON payloads hold no
    // raw CR, so dropping CRs turns CRLF framing into LF framing.
    for (char c : bytes)
        if (c != '\r') buffer_ += c;
    for (size_t end; (end = buffer_.find("\n\n")) != std::string::npos;) {
        std::string data;
        bool has_data = false;
        for (size_t line = 0; line < end;) {
            size_t eol = buffer_.find('\n', line);
            if (eol == std::string::npos || eol > end) eol = end;
            const std::string_view l(buffer_.data() + line, eol - line);
            if (l.starts_with("data:")) {
                std::string_view v = l.substr(5);
                if (v.starts_with(' ')) v.remove_prefix(1);
                if (has_data) data += '\n';
                data += v;
                has_data = true;
            }
            line = eol + 1;
        }
        buffer_.erase(0, end + 2);
        if (has_data) on_data(data, at);
    }
}

void StreamRecorder::on_data(std::string_view data, Clock::time_point at) {
    if (data == "[DONE]") {
        saw_done_ = true;
        return;
    }
    const json chunk = json::parse(data, nullptr, false);
    if (chunk.is_discarded() || !chunk.is_object()) {
        if (result_.error.empty()) result_.error = "a stream chunk is not a JSON object: " + std::string(data.substr(0, 200));
        return;
    }
    if (auto e = chunk.find("error"); e != chunk.end()) {
        if (result_.error.empty())
            result_.error = "error in the stream: " + (e->is_object() && e->contains("message") && (*e)["message"].is_string()
                                                           ? (*e)["message"].get<std::string>()
                                                           : e->dump());
        return;
    }
    if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
        result_.usage_reported = true;
        result_.output_tokens = u->value("completion_tokens", int64_t{0});
        result_.prompt_tokens = u->value("prompt_tokens", int64_t{0});
        if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
            result_.cached_tokens = d->value("cached_tokens", int64_t{0});
    }
    if (!chunk_has_content(chunk, endpoint_)) return;
    if (result_.content_chunks == 0) result_.ttft_s = seconds(at - sent_);
    else result_.itl_s.push_back(seconds(at - last_content_));
    last_content_ = at;
    ++result_.content_chunks;
}

RequestResult StreamRecorder::finish() {
    RequestResult r = std::move(result_);
    // (A random-weight model sampled greedily with ignore_eos tends to repeat end-of-text tokens,
    // which have no text: sample it with a temperature.)
    if (r.error.empty() && r.content_chunks == 0) r.error = "no content chunk in the stream";
    if (r.error.empty() && !saw_done_) r.error = "the stream ended before data: [DONE]";
    r.ok = r.error.empty();
    if (!r.ok) return r;
    r.e2e_s = seconds(last_content_ - sent_);
    if (!r.usage_reported) r.output_tokens = r.content_chunks;
    return r;
}

// ---------------------------------------------------------------------------------------------
// Statistics

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(rank));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

Stat stat_ms(const std::vector<double>& s) {
    Stat out;
    out.n = s.size();
    if (s.empty()) return out;
    double sum = 0;
    for (double x : s) sum += x;
    out.mean = sum / static_cast<double>(s.size()) * 1e3;
    out.median = percentile(s, 50) * 1e3;
    out.p99 = percentile(s, 99) * 1e3;
    return out;
}

Summary summarize(const std::vector<RequestResult>& results, double duration_s) {
    Summary s;
    s.duration_s = duration_s;
    std::vector<double> ttft, tpot, itl, e2e;
    for (const auto& r : results) {
        if (!r.ok) {
            ++s.failed;
            if (s.errors.size() < 5 && std::find(s.errors.begin(), s.errors.end(), r.error) == s.errors.end())
                s.errors.push_back(r.error);
            continue;
        }
        ++s.completed;
        s.input_tokens += r.prompt_tokens;
        s.cached_tokens += r.cached_tokens;
        s.output_tokens += r.output_tokens;
        ttft.push_back(r.ttft_s);
        e2e.push_back(r.e2e_s);
        itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
        if (r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
    }
    if (duration_s > 0) {
        s.request_throughput = static_cast<double>(s.completed) / duration_s;
        s.output_throughput = static_cast<double>(s.output_tokens) / duration_s;
        s.total_throughput = static_cast<double>(s.input_tokens + s.output_tokens) / duration_s;
    }
    s.ttft = stat_ms(ttft);
    s.tpot = stat_ms(tpot);
    s.itl = stat_ms(itl);
    s.e2e = stat_ms(e2e);
    return s;
}

ojson to_json(const Summary& s) {
    auto stat = [](const Stat& x) { return ojson{{"median_ms", x.median}, {"mean_ms", x.mean}, {"p99_ms", x.p99}, {"n", x.n}}; };
    return ojson{{"completed", s.completed},
                 {"failed", s.failed},
                 {"duration_s", s.duration_s},
                 {"request_throughput", s.request_throughput},
                 {"output_throughput", s.output_throughput},
                 {"total_token_throughput", s.total_throughput},
                 {"total_input_tokens", s.input_tokens},
                 {"total_cached_tokens", s.cached_tokens},
                 {"total_output_tokens", s.output_tokens},
                 {"ttft", stat(s.ttft)},
                 {"tpot", stat(s.tpot)},
                 {"itl", stat(s.itl)},
                 {"e2e_latency", stat(s.e2e)},
                 {"errors", s.errors}};
}

// ---------------------------------------------------------------------------------------------
// HTTP

namespace {

struct Url {
    std::string host, prefix;
    int port = 80;
};

Url parse_url(const std::string& url) {
    std::string rest = url;
    if (rest.starts_with("https://"))
        throw Error("--url " + url + ": https is not supported (run the benchmark where it can reach the server over http)");
    if (rest.starts_with("http://")) rest = rest.substr(7);
    else if (rest.find("://") != std::string::npos) throw Error("--url " + url + ": expected http://HOST[:PORT][/PREFIX]");
    Url u;
    const size_t slash = rest.find('/');
    std::string hostport = rest.substr(0, slash);
    if (slash != std::string::npos) u.prefix = rest.substr(slash);
    while (u.prefix.ends_with('/')) u.prefix.pop_back();
    size_t colon = hostport.rfind(':');
    if (!hostport.empty() && hostport[0] == '[') {  // [IPv6]:port
        const size_t close = hostport.find(']');
        if (close == std::string::npos) throw Error("--url " + url + ": unclosed [ in the host");
        u.host = hostport.substr(1, close - 1);
        colon = hostport.find(':', close);
    } else {
        u.host = hostport.substr(0, colon);
    }
    if (colon != std::string::npos) {
        const std::string p = hostport.substr(colon + 1);
        char* end = nullptr;
        const long port = std::strtol(p.c_str(), &end, 10);
        if (p.empty() || *end != '\0' || port < 1 || port > 65535) throw Error("--url " + url + ": bad port '" + p + "'");
        u.port = static_cast<int>(port);
    }
    if (u.host.empty()) throw Error("--url " + url + ": no host");
    return u;
}

std::unique_ptr<httplib::Client> make_client(const Url& u, std::chrono::seconds timeout) {
    auto c = std::make_unique<httplib::Client>(u.host, u.port);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);  // a request's headers and body go out at once (Nagle would hold the body for an ACK)
    c->set_connection_timeout(std::chrono::seconds(10));
    c->set_read_timeout(timeout);
    c->set_write_timeout(std::chrono::seconds(60));
    return c;
}

httplib::Headers auth_headers(const std::string& api_key) {
    httplib::Headers h;
    if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
    return h;
}

class HttpTarget : public Target {
public:
    HttpTarget(Url url, const std::string& api_key, Endpoint endpoint, std::chrono::seconds timeout)
        : url_(std::move(url)), headers_(auth_headers(api_key)), endpoint_(endpoint), timeout_(timeout) {
        path_ = url_.prefix + (endpoint == Endpoint::Chat ? "/v1/chat/completions" : "/v1/completions");
    }
    std::string name() const override { return "serve"; }

    void connect(int workers) override {
        while (clients_.size() < static_cast<size_t>(workers)) clients_.push_back(make_client(url_, timeout_));
    }

    RequestResult send(int worker, const BenchRequest& request) override {
        httplib::Request req;
        req.method = "POST";
        req.path = path_;
        req.headers = headers_;
        req.set_header("Content-Type", "application/json");
        req.set_header("Accept", "text/event-stream");
        req.body = request.body_text;
        int status = 0;
        std::string error_body;
        const Clock::time_point sent = Clock::now();
        StreamRecorder rec(endpoint_, sent);
        req.response_handler = [&](const httplib::Response& res) {
            status = res.status;
            return true;
        };
        req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
            const Clock::time_point at = Clock::now();
            if (status != 200) error_body.append(data, std::min(n, size_t{4096} - std::min(size_t{4096}, error_body.size())));
            else rec.feed(std::string_view(data, n), at);
            return true;
        };
        httplib::Response res;
        httplib::Error err = httplib::Error::Success;
        const bool ok = clients_[static_cast<size_t>(worker)]->send(req, res, err);
        if (!ok) {
            RequestResult r;
            r.error = "HTTP request failed: " + httplib::to_string(err);
            return r;
        }
        if (res.status != 200) {
            RequestResult r;
            if (error_body.empty()) error_body = res.body.substr(0, 4096);
            r.error = "HTTP " + std::to_string(res.status) + ": " + error_body;
            return r;
        }
        return rec.finish();
    }

private:
    Url url_;
    httplib::Headers headers_;
    Endpoint endpoint_;
    std::chrono::seconds timeout_;
    std::string path_;
    std::vector<std::unique_ptr<httplib::Client>> clients_;
};

}  // namespace

std::unique_ptr<Target> http_target(const std::string& url, const std::string& api_key, Endpoint endpoint,
                                    std::chrono::seconds timeout) {
    return std::make_unique<HttpTarget>(parse_url(url), api_key, endpoint, timeout);
}

std::string first_model_id(const std::string& url, const std::string& api_key) {
    const Url u = parse_url(url);
    auto c = make_client(u, std::chrono::seconds(30));
    c->set_keep_alive(false);
    const auto res = c->Get(u.prefix + "/v1/models", auth_headers(api_key));
    if (!res) throw Error("cannot reach " + url + ": " + httplib::to_string(res.error()));
    if (res->status != 200) return {};
    const json j = json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() || !j["data"][0].is_object())
        return {};
    return j["data"][0].value("id", "");
}

// ---------------------------------------------------------------------------------------------
// The engine alone

namespace {

class EngineTarget : public Target {
public:
    EngineTarget(const std::string& model_path, std::vector<std::string> argv, Endpoint endpoint)
        : model_(model_path, std::filesystem::path(model_path).stem().string()), engine_(std::move(argv)), endpoint_(endpoint) {
        limits_.n_vocab = model_.tokenizer().n_vocab();  // as strata serve: logit_bias ids outside it are refused at parse time
        engine_.start();
        const json ready = engine_.ready_info();
        if (ready.contains("limits") && ready["limits"].contains("max_context"))
            model_.set_max_context(ready["limits"]["max_context"].get<int64_t>());
    }
    std::string name() const override { return "engine"; }
    void connect(int) override {}

    RequestResult send(int, const BenchRequest& request) override {
        RequestResult r;
        ojson cmd;
        try {
            cmd = submit_command(request.body);
        } catch (const serve::ApiError& e) {
            r.error = std::string("the request body is invalid: ") + e.what();
            return r;
        }
        // Events arrive on the engine client's reader thread.
        struct Progress {
            std::mutex mu;
            std::condition_variable cv;
            bool over = false;
            Clock::time_point last_content;
            RequestResult result;
        };
        auto p = std::make_shared<Progress>();
        const std::string id = "bench-" + std::to_string(next_id_.fetch_add(1));
        const Clock::time_point sent = Clock::now();
        engine_.submit(id, std::move(cmd), [p, sent](const json& ev) {
            const Clock::time_point at = Clock::now();
            const std::string kind = ev.value("event", "");
            std::lock_guard<std::mutex> lock(p->mu);
            RequestResult& res = p->result;
            if (kind == "tokens") {
                if (ev.value("text", "").empty()) return;
                if (res.content_chunks == 0) res.ttft_s = seconds(at - sent);
                else res.itl_s.push_back(seconds(at - p->last_content));
                p->last_content = at;
                ++res.content_chunks;
                return;
            }
            if (kind == "done") {
                const json u = ev.value("usage", json::object());
                res.usage_reported = true;
                res.prompt_tokens = u.value("prompt_tokens", int64_t{0});
                res.cached_tokens = u.value("cached_tokens", int64_t{0});
                res.output_tokens = u.value("completion_tokens", int64_t{0});
                if (ev.value("finish_reason", "") == "error") res.error = "the engine failed: " + ev.value("message", "");
                if (ev.value("finish_reason", "") == "cancelled") res.error = "cancelled by the engine";
            } else if (kind == "error") {
                res.error = "the engine failed: " + ev.value("message", "");
            } else {
                return;
            }
            p->over = true;
            p->cv.notify_all();
        });
        std::unique_lock<std::mutex> lock(p->mu);
        p->cv.wait(lock, [&] { return p->over; });
        r = std::move(p->result);
        if (r.error.empty() && r.content_chunks == 0) r.error = "no content chunk from the engine";
        r.ok = r.error.empty();
        if (r.ok) r.e2e_s = seconds(p->last_content - sent);
        return r;
    }

private:
    // The submit `strata serve` makes of this body (server.cpp's completion(), ServedModel::prepare
    // and Generation::submit_phase for chat).
    ojson submit_command(const ojson& body) const {
        runtime::SamplingParams sampling;
        ojson response_format;
        std::vector<int32_t> prompt;
        int64_t max_tokens = -1;
        std::vector<std::string> stop;
        if (endpoint_ == Endpoint::Chat) {
            const serve::ChatRequest c = serve::parse_openai_chat(body, limits_);
            serve::PreparedChat prepared = model_.prepare(c);
            serve::GenerationSpec& spec = prepared.choices.at(0);
            sampling = std::move(spec.sampling);
            response_format = std::move(spec.response_format);
            prompt = std::move(spec.prompt);
            max_tokens = spec.max_tokens;
            stop = spec.stop;
        } else {
            const serve::CompletionRequest c = serve::parse_openai_completion(body, limits_);
            sampling = c.sampling;
            prompt = model_.tokenizer().encode(c.prompt_text, true);
            max_tokens = c.max_tokens;
            stop = c.stop;
        }
        const int64_t room = model_.max_context() - static_cast<int64_t>(prompt.size());
        if (max_tokens < 0 || max_tokens > room) max_tokens = std::max<int64_t>(room, 0);
        sampling.max_tokens = static_cast<int32_t>(max_tokens);
        sampling.stop = std::move(stop);
        ojson cmd = runtime::to_json(sampling);
        if (!response_format.is_null()) cmd["response_format"] = std::move(response_format);
        cmd["prompt"] = std::move(prompt);
        return cmd;
    }

    serve::ServedModel model_;
    serve::EngineClient engine_;
    Endpoint endpoint_;
    serve::RequestLimits limits_;
    std::atomic<uint64_t> next_id_{0};
};

}  // namespace

std::unique_ptr<Target> engine_target(const std::string& model_path, std::vector<std::string> engine_argv, Endpoint endpoint) {
    return std::make_unique<EngineTarget>(model_path, std::move(engine_argv), endpoint);
}

// ---------------------------------------------------------------------------------------------
// The load

RunResult run_load(Target& target, const std::vector<BenchRequest>& requests, int concurrency, double request_rate,
                   uint64_t seed) {
    RunResult out;
    out.requests.resize(requests.size());
    if (requests.empty()) return out;
    const int workers = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(concurrency, 1)), requests.size()));
    target.connect(workers);

    // Arrival offsets: the first request at once, then exponential gaps (a Poisson process).
    std::vector<double> arrival(requests.size(), 0.0);
    if (std::isfinite(request_rate) && request_rate > 0) {
        std::mt19937_64 rng(splitmix64(seed ^ 0xA5A5A5A5ull));
        std::exponential_distribution<double> gap(request_rate);
        for (size_t i = 1; i < arrival.size(); ++i) arrival[i] = arrival[i - 1] + gap(rng);
    }

    std::atomic<size_t> next{0};
    const Clock::time_point start = Clock::now();
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w)
        threads.emplace_back([&, w] {
            for (size_t i; (i = next.fetch_add(1)) < requests.size();) {
                std::this_thread::sleep_until(
                    start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival[i])));
                try {
                    out.requests[i] = target.send(w, requests[i]);
                } catch (const std::exception& e) {
                    out.requests[i] = RequestResult();
                    out.requests[i].error = e.what();
                }
            }
        });
    for (auto& t : threads) t.join();
    out.duration_s = seconds(Clock::now() - start);
    return out;
}

}  // namespace strata::bench
