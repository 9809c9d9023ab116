// The lane reranker (lane_reranker.h).
#include "gateway/lane_reranker.h"

#include <nlohmann/json.hpp>

#include "gateway/lane.h"
#include "gateway/upstream_call.h"
#include "util/error.h"

namespace strata::gateway {

std::vector<double> LaneReranker::score(std::string_view query, std::span<const std::string_view> passages) {
    ++calls_;
    try {
        if (!lane_.alive()) throw Error("the rerank lane " + lane_.name() + " is down");
        const auto model = lane_.model();
        nlohmann::json docs = nlohmann::json::array();
        for (size_t i = 0; i < passages.size() && i < kMaxPassages; ++i)
            docs.push_back(std::string(passages[i].substr(0, kMaxPassageBytes)));
        nlohmann::json body = {{"query", std::string(query.substr(0, 4 * kMaxPassageBytes))}, {"documents", docs}};
        if (model) body["model"] = model->id;
        UpstreamCall::Headers headers{{"Content-Type", "application/json"}};
        if (!lane_.config().upstream_key.empty()) headers.emplace_back("x-api-key", lane_.config().upstream_key);
        UpstreamDeadlines deadlines;
        deadlines.first_byte = timeout_;
        deadlines.idle = timeout_;
        deadlines.alive = [this] { return lane_.alive(); };
        auto call = UpstreamCall::start(lane_.host(), lane_.port(), "/v1/rerank", std::move(headers),
                                        body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), deadlines);
        const auto never = [] { return false; };
        if (call->wait_head(never) != UpstreamCall::Head::Ready) throw Error("no answer: " + call->error());
        call->wait_done(never);
        std::string text, part;
        while (call->take(part, std::chrono::milliseconds(0), false)) text += std::exchange(part, {});
        text += part;
        if (call->status() != 200) throw Error("status " + std::to_string(call->status()) + ": " + text.substr(0, 200));
        const nlohmann::json out = nlohmann::json::parse(text);
        std::vector<double> scores(docs.size(), -1.0);
        size_t seen = 0;
        for (const auto& r : out.at("results")) {
            const size_t i = r.at("index").get<size_t>();
            if (i >= scores.size()) throw Error("a result's index is out of range");
            scores[i] = r.at("relevance_score").get<double>();
            ++seen;
        }
        if (seen != docs.size()) throw Error("the lane scored " + std::to_string(seen) + " of " + std::to_string(docs.size()));
        scores.resize(passages.size(), -1.0);  // passages past kMaxPassages: below every scored one
        return scores;
    } catch (const std::exception& e) {
        ++failures_;
        throw Error(std::string("rerank: ") + e.what());
    }
}

}  // namespace strata::gateway
