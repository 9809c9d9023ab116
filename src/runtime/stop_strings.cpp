#include "runtime/stop_strings.h"

#include <algorithm>
#include <stdexcept>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace strata::runtime {

void StopStringMatcher::validate(const std::vector<std::string>& stops) {
    if (stops.size() > kMaxStops)
        throw Error("stop: at most " + std::to_string(kMaxStops) + " stop strings are allowed (got " +
                    std::to_string(stops.size()) + ")");
    for (size_t i = 0; i < stops.size(); ++i) {
        const std::string name = "stop[" + std::to_string(i) + "]";
        if (stops[i].empty()) throw Error(name + " is empty");
        if (stops[i].size() > kMaxStopBytes)
            throw Error(name + " is " + std::to_string(stops[i].size()) + " bytes long; at most " +
                        std::to_string(kMaxStopBytes) + " are allowed");
        if (!tokenizer::utf8::is_valid(stops[i])) throw Error(name + " is not valid UTF-8");
    }
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
    validate(stops_);
    for (const std::string& s : stops_) {
        max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
        starts_a_stop_[static_cast<unsigned char>(s[0])] = true;
    }
}

size_t StopStringMatcher::longest_pending_prefix(std::string_view text) const {
    const size_t longest = std::min(text.size(), max_stop_bytes_ - 1);
    for (size_t len = longest; len > 0; --len) {
        const size_t start = text.size() - len;
        if (!starts_a_stop_[static_cast<unsigned char>(text[start])]) continue;
        const std::string_view suffix = text.substr(start);
        for (const std::string& s : stops_)
            if (s.size() > len && std::string_view(s).starts_with(suffix)) return len;
    }
    return 0;
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view piece) {
    if (stopped_) throw std::logic_error("StopStringMatcher::push after a stop string matched");
    Result result;
    if (stops_.empty()) {
        result.emit = piece;
        return result;
    }
    // held_ never contains a whole stop (it would have matched when it completed), so only
    // occurrences ending inside the new piece can be there; for each stop, the first such one.
    const size_t old_size = held_.size();
    held_.append(piece);
    const std::string_view text = held_;
    size_t best_end = std::string_view::npos, best_start = 0;
    for (size_t k = 0; k < stops_.size(); ++k) {
        const std::string& s = stops_[k];
        const size_t from = old_size >= s.size() ? old_size - s.size() + 1 : 0;
        const size_t at = text.find(s, from);
        if (at == std::string_view::npos) continue;
        const size_t end = at + s.size();
        if (end < best_end || (end == best_end && at < best_start)) {
            best_end = end;
            best_start = at;
            result.which = static_cast<int>(k);
        }
    }
    if (result.which >= 0) {
        result.emit.assign(text.substr(0, best_start));
        result.stopped = true;
        stopped_ = true;
        held_.clear();
        return result;
    }
    const size_t keep = longest_pending_prefix(text);
    result.emit.assign(text.substr(0, text.size() - keep));
    held_.erase(0, text.size() - keep);
    return result;
}

std::string StopStringMatcher::flush() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace strata::runtime
