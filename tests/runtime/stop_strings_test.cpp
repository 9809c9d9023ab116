// StopStringMatcher: stops split over pieces, overlapping stops, released prefixes, UTF-8, and a
// property test over random texts and splits against a plain search of the whole text.
#include "runtime/stop_strings.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/error.h"

namespace strata::runtime {
namespace {

struct Outcome {
    std::string text;  // everything emitted, flush included
    bool stopped = false;
    int which = -1;
};

// Feeds the pieces in order; checks after every push that the emitted text plus what is held
// is the text so far and that nothing emitted contains a stop.
Outcome feed(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
    StopStringMatcher m(stops);
    Outcome out;
    std::string so_far;
    for (const std::string& piece : pieces) {
        so_far += piece;
        const StopStringMatcher::Result r = m.push(piece);
        out.text += r.emit;
        if (r.stopped) {
            out.stopped = true;
            out.which = r.which;
            EXPECT_TRUE(m.empty());
            EXPECT_EQ(m.flush(), "");
            return out;
        }
        EXPECT_EQ(out.text + std::string(so_far.substr(out.text.size())), so_far);
        EXPECT_EQ(out.text.size() + m.held_bytes(), so_far.size());
        for (const std::string& s : stops) EXPECT_EQ(out.text.find(s), std::string::npos) << "emitted a stop: " << s;
    }
    out.text += m.flush();
    return out;
}

std::vector<std::string> bytes_of(const std::string& text) {
    std::vector<std::string> pieces;
    for (char c : text) pieces.emplace_back(1, c);
    return pieces;
}

TEST(StopStrings, NoStopsPassThrough) {
    StopStringMatcher m({});
    EXPECT_EQ(m.push("hello").emit, "hello");
    EXPECT_EQ(m.push("</s>").emit, "</s>");
    EXPECT_TRUE(m.empty());
    EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, SplitAcrossTwoPieces) {
    StopStringMatcher m({"</s>"});
    StopStringMatcher::Result r = m.push("Hello </");
    EXPECT_EQ(r.emit, "Hello ");
    EXPECT_FALSE(r.stopped);
    EXPECT_EQ(m.held_bytes(), 2u);
    r = m.push("s> and more");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.which, 0);
    EXPECT_EQ(r.emit, "");
    EXPECT_THROW(m.push("x"), std::logic_error);
}

TEST(StopStrings, SplitAcrossThreePieces) {
    const Outcome o = feed({"<|end|>", "\n\n"}, {"answer: 42 <", "|en", "d|> trailing"});
    EXPECT_TRUE(o.stopped);
    EXPECT_EQ(o.which, 0);
    EXPECT_EQ(o.text, "answer: 42 ");
}

TEST(StopStrings, OneBytePerPiece) {
    const std::string text = "The answer is 42.\nUser: and then?";
    const Outcome o = feed({"\nUser:"}, bytes_of(text));
    EXPECT_TRUE(o.stopped);
    EXPECT_EQ(o.text, "The answer is 42.");
    const Outcome none = feed({"\nUser:"}, bytes_of("no stop in here\nUse it"));
    EXPECT_FALSE(none.stopped);
    EXPECT_EQ(none.text, "no stop in here\nUse it");
}

TEST(StopStrings, OverlappingStops) {
    const std::vector<std::string> stops = {"ab", "abc", "bca"};
    struct Case {
        std::string text, emitted;
        int which;
    };
    const std::vector<Case> cases = {
        {"xxbca", "xx", 2},  // only "bca"
        {"xabc", "x", 0},    // "ab" completes first (same start as "abc")
        {"xbcab", "x", 2},   // "bca" ends at 4, "ab" at 5
        {"bcab", "", 2},    {"aab", "a", 0}, {"cbcbca", "cbc", 2}, {"xyz", "xyz", -1},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.text);
        for (const auto& pieces : {std::vector<std::string>{c.text}, bytes_of(c.text)}) {
            const Outcome o = feed(stops, pieces);
            EXPECT_EQ(o.text, c.emitted);
            EXPECT_EQ(o.stopped, c.which >= 0);
            EXPECT_EQ(o.which, c.which);
        }
    }
    // Same end: the longer stop (it starts earlier) wins; equal strings: the first listed.
    EXPECT_EQ(feed({"c", "bc"}, {"abc"}).which, 1);
    EXPECT_EQ(feed({"c", "bc"}, {"abc"}).text, "a");
    EXPECT_EQ(feed({"bc", "bc"}, {"abc"}).which, 0);
    // One stop strictly inside another: the inner one completes first and wins.
    const Outcome inner = feed({"abcd", "bc"}, bytes_of("xabcd"));
    EXPECT_EQ(inner.which, 1);
    EXPECT_EQ(inner.text, "xa");
}

TEST(StopStrings, PrefixThatIsNotAStopIsReleased) {
    StopStringMatcher m({"STOP"});
    StopStringMatcher::Result r = m.push("ST");
    EXPECT_EQ(r.emit, "");
    EXPECT_EQ(m.held_bytes(), 2u);
    r = m.push("ARS");  // "STARS": only the final "S" could still start "STOP"
    EXPECT_EQ(r.emit, "STAR");
    EXPECT_EQ(m.held_bytes(), 1u);
    r = m.push(" shine");
    EXPECT_EQ(r.emit, "S shine");
    r = m.push(" STO");
    EXPECT_EQ(r.emit, " ");
    EXPECT_EQ(m.flush(), "STO");  // generation ended without the stop: the held text goes out
}

TEST(StopStrings, HoldsOnlyWhatCouldStartAStop) {
    StopStringMatcher m({"abcd", "xy"});
    EXPECT_EQ(m.push("zzab").emit, "zz");
    EXPECT_EQ(m.held_bytes(), 2u);
    EXPECT_EQ(m.push("cx").emit, "abc");  // "abcx" cannot become "abcd"; "x" may become "xy"
    EXPECT_EQ(m.held_bytes(), 1u);
    EXPECT_EQ(m.push("q").emit, "xq");
    EXPECT_TRUE(m.empty());
}

TEST(StopStrings, MultiByteUtf8) {
    // "終わり" is three 3-byte characters; the pieces are whole characters, as StreamDecoder gives.
    const Outcome o = feed({"終わり", "🛑"}, {"これで", "終", "わ", "り！次"});
    EXPECT_TRUE(o.stopped);
    EXPECT_EQ(o.which, 0);
    EXPECT_EQ(o.text, "これで");

    StopStringMatcher m({"終わり"});
    EXPECT_EQ(m.push("これで終").emit, "これで");
    EXPECT_EQ(m.held_bytes(), 3u);  // one whole character
    EXPECT_EQ(m.push("了").emit, "終了");

    const Outcome emoji = feed({"🛑"}, {"go go ", "🛑", " after"});
    EXPECT_EQ(emoji.text, "go go ");
    // A stop sharing a lead byte with the text but not its character: released whole.
    const Outcome near = feed({"é!"}, {"café", "s"});
    EXPECT_FALSE(near.stopped);
    EXPECT_EQ(near.text, "cafés");
}

TEST(StopStrings, Validate) {
    auto message = [](const std::vector<std::string>& stops) -> std::string {
        try {
            StopStringMatcher::validate(stops);
        } catch (const Error& e) {
            EXPECT_THROW(StopStringMatcher m(stops), Error);
            return e.what();
        }
        return "";
    };
    EXPECT_EQ(message({"a", "</s>", std::string(256, 'x')}), "");
    EXPECT_NE(message({"a", ""}).find("stop[1] is empty"), std::string::npos);
    EXPECT_NE(message({std::string(257, 'x')}).find("stop[0]"), std::string::npos);
    EXPECT_EQ(message(std::vector<std::string>(17, "x")), "");
    EXPECT_NE(message(std::vector<std::string>(18, "x")).find("at most 17"), std::string::npos);
    EXPECT_NE(message({"ok", "\xE7\xB5"}).find("stop[1] is not valid UTF-8"), std::string::npos);
}

// The reference: search the whole text. The first stop to complete wins (earliest end); at the
// same end the longer one; then the first listed.
Outcome reference(const std::vector<std::string>& stops, const std::string& text) {
    Outcome r;
    size_t best_end = std::string::npos, best_start = 0;
    for (size_t k = 0; k < stops.size(); ++k) {
        const size_t at = text.find(stops[k]);
        if (at == std::string::npos) continue;
        const size_t end = at + stops[k].size();
        if (end < best_end || (end == best_end && at < best_start)) {
            best_end = end;
            best_start = at;
            r.which = static_cast<int>(k);
        }
    }
    r.stopped = r.which >= 0;
    r.text = r.stopped ? text.substr(0, best_start) : text;
    return r;
}

// "Earliest start" as a second reference: the same as above unless a stop lies strictly inside another.
size_t earliest_start(const std::vector<std::string>& stops, const std::string& text) {
    size_t best = std::string::npos;
    for (const std::string& s : stops) best = std::min(best, text.find(s));
    return best;
}

bool some_stop_strictly_inside_another(const std::vector<std::string>& stops) {
    for (const std::string& outer : stops)
        for (const std::string& inner : stops)
            for (size_t at = 1; at + inner.size() < outer.size(); ++at)
                if (outer.compare(at, inner.size(), inner) == 0) return true;
    return false;
}

// Longest suffix of text that is a proper prefix of some stop, by brute force.
size_t reference_held(const std::vector<std::string>& stops, const std::string& text) {
    for (size_t len = text.size(); len > 0; --len)
        for (const std::string& s : stops)
            if (s.size() > len && s.compare(0, len, text, text.size() - len, len) == 0) return len;
    return 0;
}

TEST(StopStrings, RandomPiecesMatchWholeTextSearch) {
    std::mt19937 rng(20240611);
    const std::vector<std::string> alphabet = {"a", "b", "c", "é"};
    auto random_string = [&](size_t len) {
        std::string s;
        for (size_t i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
        return s;
    };
    int stopped = 0, compared_with_earliest_start = 0;
    for (int iter = 0; iter < 20000; ++iter) {
        std::vector<std::string> stops;
        const size_t n_stops = 1 + rng() % 4;
        for (size_t k = 0; k < n_stops; ++k) stops.push_back(random_string(1 + rng() % 4));
        const std::string text = random_string(rng() % 40);
        // Split into pieces of 0-4 characters (never inside a character).
        std::vector<std::string> pieces;
        for (size_t pos = 0; pos < text.size();) {
            size_t len = 0;
            for (size_t chars = rng() % 5, i = pos; chars > 0 && i < text.size(); --chars) {
                const size_t char_len = (static_cast<unsigned char>(text[i]) & 0x80) ? 2 : 1;
                i += char_len;
                len += char_len;
            }
            pieces.push_back(text.substr(pos, len));
            pos += len;
        }

        const Outcome expected = reference(stops, text);
        StopStringMatcher m(stops);
        std::string emitted, so_far;
        Outcome got;
        for (const std::string& piece : pieces) {
            so_far += piece;
            const StopStringMatcher::Result r = m.push(piece);
            emitted += r.emit;
            // Never emits what a later piece would take back.
            ASSERT_EQ(expected.text.compare(0, emitted.size(), emitted), 0) << text;
            if (r.stopped) {
                got.stopped = true;
                got.which = r.which;
                break;
            }
            // Holds exactly the longest suffix that could still start a stop.
            ASSERT_EQ(m.held_bytes(), reference_held(stops, so_far)) << so_far;
        }
        if (!got.stopped) emitted += m.flush();
        ASSERT_EQ(emitted, expected.text) << "text " << text;
        ASSERT_EQ(got.stopped, expected.stopped) << text;
        ASSERT_EQ(got.which, expected.which) << text;
        for (const std::string& s : stops) ASSERT_EQ(emitted.find(s), std::string::npos);
        if (expected.stopped) ++stopped;
        if (expected.stopped && !some_stop_strictly_inside_another(stops)) {
            ++compared_with_earliest_start;
            ASSERT_EQ(emitted.size(), earliest_start(stops, text)) << text;
        }
    }
    EXPECT_GT(stopped, 5000);  // the generator does produce matches
    EXPECT_GT(compared_with_earliest_start, 4000);
}

}  // namespace
}  // namespace strata::runtime
