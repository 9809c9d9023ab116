// Retrieval's models served by lanes (lane_pooling.h).
#include "gateway/lane_pooling.h"

#include <nlohmann/json.hpp>

#include "gateway/lane.h"
#include "gateway/upstream_call.h"
#include "util/error.h"

namespace strata::gateway {

namespace {

// POSTs `body` to the lane's `path` and returns its JSON answer; throws Error with the reason.
nlohmann::json call_lane(Lane& lane, const char* path, nlohmann::json body, std::chrono::milliseconds timeout) {
    if (!lane.alive()) throw Error("the lane " + lane.name() + " is down");
    if (const auto model = lane.model()) body["model"] = model->id;
    UpstreamCall::Headers headers{{"Content-Type", "application/json"}};
    if (!lane.config().upstream_key.empty()) headers.emplace_back("x-api-key", lane.config().upstream_key);
    UpstreamDeadlines deadlines;
    deadlines.first_byte = timeout;
    deadlines.idle = timeout;
    deadlines.alive = [&lane] { return lane.alive(); };
    auto call = UpstreamCall::start(lane.host(), lane.port(), path, std::move(headers),
                                    body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), deadlines);
    const auto never = [] { return false; };
    if (call->wait_head(never) != UpstreamCall::Head::Ready) throw Error("no answer: " + call->error());
    call->wait_done(never);
    std::string text, part;
    while (call->take(part, std::chrono::milliseconds(0), false)) text += std::exchange(part, {});
    text += part;
    if (call->status() != 200) throw Error("status " + std::to_string(call->status()) + ": " + text.substr(0, 200));
    return nlohmann::json::parse(text);
}

}  // namespace

std::vector<double> LaneReranker::score(std::string_view query, std::span<const std::string_view> passages) {
    ++calls_;
    try {
        nlohmann::json docs = nlohmann::json::array();
        for (size_t i = 0; i < passages.size() && i < kMaxPassages; ++i)
            docs.push_back(std::string(passages[i].substr(0, kMaxPassageBytes)));
        const size_t n = docs.size();
        const nlohmann::json out =
            call_lane(lane_, "/v1/rerank",
                      {{"query", std::string(query.substr(0, 4 * kMaxPassageBytes))}, {"documents", std::move(docs)}}, timeout_);
        std::vector<double> scores(n, -1.0);
        size_t seen = 0;
        for (const auto& r : out.at("results")) {
            const size_t i = r.at("index").get<size_t>();
            if (i >= scores.size()) throw Error("a result's index is out of range");
            scores[i] = r.at("relevance_score").get<double>();
            ++seen;
        }
        if (seen != n) throw Error("the lane scored " + std::to_string(seen) + " of " + std::to_string(n));
        scores.resize(passages.size(), -1.0);  // passages past kMaxPassages: below every scored one
        return scores;
    } catch (const std::exception& e) {
        ++failures_;
        throw Error(std::string("rerank: ") + e.what());
    }
}

std::vector<std::vector<float>> LaneEmbedder::call(const nlohmann::json& input, bool query) {
    ++calls_;
    try {
        nlohmann::json body = {{"input", input}, {"encoding_format", "float"}};
        if (query && !instruction_.empty()) body["instruction"] = instruction_;
        if (dimensions_ > 0) body["dimensions"] = dimensions_;
        const size_t n = input.is_array() ? input.size() : 1;
        const nlohmann::json out = call_lane(lane_, "/v1/embeddings", std::move(body), timeout_);
        std::vector<std::vector<float>> v(n);
        size_t dims = 0;
        for (const auto& d : out.at("data")) {
            const size_t i = d.at("index").get<size_t>();
            if (i >= n || !v[i].empty()) throw Error("an embedding's index is out of range or repeated");
            v[i] = d.at("embedding").get<std::vector<float>>();
            if (v[i].empty() || (dims != 0 && v[i].size() != dims)) throw Error("embeddings of differing dimensions");
            dims = v[i].size();
        }
        for (const auto& x : v)
            if (x.empty()) throw Error("the lane embedded fewer inputs than it was sent");
        return v;
    } catch (const std::exception& e) {
        ++failures_;
        throw Error(std::string("embeddings: ") + e.what());
    }
}

std::vector<std::vector<float>> LaneEmbedder::embed_passages(std::span<const std::string_view> texts) {
    std::vector<std::vector<float>> out;
    out.reserve(texts.size());
    for (size_t at = 0; at < texts.size(); at += kMaxBatch) {
        nlohmann::json input = nlohmann::json::array();
        for (size_t i = at; i < texts.size() && i < at + kMaxBatch; ++i) {
            // An empty input is refused by the route; a chunk is never empty, but be safe.
            const std::string_view t = texts[i].substr(0, kMaxPassageBytes);
            input.push_back(t.empty() ? std::string(" ") : std::string(t));
        }
        for (auto& v : call(input, false)) out.push_back(std::move(v));
        passages_ += input.size();
    }
    return out;
}

std::vector<float> LaneEmbedder::embed_query(std::string_view query) {
    const std::string_view q = query.substr(0, kMaxQueryBytes);
    return std::move(call(std::string(q.empty() ? std::string_view(" ") : q), true).front());
}

}  // namespace strata::gateway
