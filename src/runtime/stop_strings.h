// Stop strings over streamed text. Text that could still be the start of a stop string is held
// back, so no part of a stop string ever reaches the client.
//
// Which stop wins: the first one to be complete in the text. If several complete at the same
// byte (one is a suffix of the other), the longer one, which starts earlier; equal strings: the
// one listed first. Generation therefore ends the moment a stop string is complete, and the
// result does not depend on how the text was split into pieces. This is the same as "the
// occurrence that starts earliest" except when one stop lies strictly inside another: with
// stops "abcd" and "bc", the text "abcd" stops at "bc" (it completes first) and emits "a".
//
// Held back: only the longest suffix of the text that is a proper prefix of some stop string,
// never a fixed window. Pieces are valid UTF-8 (tokenizer::StreamDecoder) and stops must be, so
// both the emitted and the held text are cut on character boundaries.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata::runtime {

class StopStringMatcher {
public:
    // A server's clients may send 16 (serve::RequestLimits); the 17th is the server's own: a
    // thinking budget's phase stops at "</think>" besides every stop the client asked for.
    static constexpr size_t kMaxStops = 17;
    static constexpr size_t kMaxStopBytes = 256;

    // Throws strata::Error (validate's message) for a bad list. No stops: everything passes through.
    explicit StopStringMatcher(std::vector<std::string> stops);
    // At most kMaxStops stops, each non-empty, at most kMaxStopBytes bytes, valid UTF-8; the
    // message is in the client's terms ("stop[2] is empty").
    static void validate(const std::vector<std::string>& stops);

    struct Result {
        std::string emit;      // safe to send now
        bool stopped = false;  // a stop string completed: emit holds the text before it
        int which = -1;        // index of that stop in the list
    };
    // Feeds the next decoded piece. After a stop, further pushes throw std::logic_error.
    Result push(std::string_view piece);
    // End of generation without a stop: the held-back text (empty after a stop).
    std::string flush();

    bool empty() const { return held_.empty(); }  // nothing held back
    bool stopped() const { return stopped_; }
    size_t held_bytes() const { return held_.size(); }
    const std::vector<std::string>& stops() const { return stops_; }

private:
    // Length of the longest suffix of text that is a proper prefix of a stop.
    size_t longest_pending_prefix(std::string_view text) const;

    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
    size_t max_stop_bytes_ = 0;
    std::array<bool, 256> starts_a_stop_{};  // by first byte: a cheap filter for the suffix search
};

}  // namespace strata::runtime
