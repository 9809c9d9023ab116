#include "runtime/json_matcher.h"

#include <algorithm>
#include <cstring>

namespace strata::runtime {

namespace {

using Alt = JsonGrammar::Alt;
using Kind = JsonGrammar::Kind;

enum ObjectPhase : uint8_t { kObjAfterOpen, kObjAfterKey, kObjAfterColon, kObjAfterValue, kObjAfterComma };
enum ArrayPhase : uint8_t { kArrAfterOpen, kArrAfterValue, kArrAfterComma };
// String: between characters, after '\', four hex digits (2..5), then for a high surrogate
// '\' (6), 'u' (7) and the low surrogate's four hex digits (8..11).
enum StringPhase : uint8_t { kStrChar = 0, kStrEscape = 1, kStrHex = 2, kStrLowBackslash = 6, kStrLowU = 7, kStrLowHex = 8 };
enum NumberPhase : uint8_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumESign, kNumExp };

constexpr uint32_t kNoName = 0xFFFFFFFFu;  // a key that has left the property-name trie
constexpr uint32_t kMaxIntDigits = JsonGrammar::kMaxBoundedDigits;
constexpr uint32_t kMaxFracDigits = 20, kMaxExpDigits = 2;

inline bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
inline bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

inline int hex_value(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// UTF-8 state in String.flags: bits 0-1 continuation bytes due, bits 2-4 the range class of
// the next one (the second byte after E0, ED, F0, F4 is narrower: no overlongs, surrogates or
// code points above U+10FFFF).
constexpr uint8_t kContLo[5] = {0x80, 0xA0, 0x80, 0x90, 0x80};
constexpr uint8_t kContHi[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};

// For a lead byte: flags and the code point bits it carries; flags 0 when it is no lead byte.
inline uint8_t lead_flags(uint8_t c) {
    if (c >= 0xC2 && c <= 0xDF) return 1;
    if (c == 0xE0) return 2 | (1 << 2);
    if (c == 0xED) return 2 | (2 << 2);
    if (c >= 0xE1 && c <= 0xEF) return 2;
    if (c == 0xF0) return 3 | (3 << 2);
    if (c >= 0xF1 && c <= 0xF3) return 3;
    if (c == 0xF4) return 3 | (4 << 2);
    return 0;
}

constexpr int64_t kPow10[19] = {1,
                                10,
                                100,
                                1000,
                                10000,
                                100000,
                                1000000,
                                10000000,
                                100000000,
                                1000000000,
                                10000000000,
                                100000000000,
                                1000000000000,
                                10000000000000,
                                100000000000000,
                                1000000000000000,
                                10000000000000000,
                                100000000000000000,
                                1000000000000000000};

// The code unit values a \u escape can still reach after `digits` of its 4 hex digits.
inline void hex_reach(uint32_t value, uint32_t digits, uint32_t& lo, uint32_t& hi) {
    const uint32_t shift = 4 * (4 - digits);
    lo = value << shift;
    hi = ((value + 1) << shift) - 1;
}

}  // namespace

bool JsonParseState::operator==(const JsonParseState& other) const {
    return ends == other.ends && frames.size() == other.frames.size() &&
           std::memcmp(frames.data(), other.frames.data(), frames.size() * sizeof(MatchFrame)) == 0;
}

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar) : g_(std::move(grammar)) {
    alts_ = g_->alts().data();
    nodes_ = g_->nodes().data();
    max_depth_ = static_cast<uint32_t>(g_->options().max_depth);
    max_ws_ = static_cast<uint8_t>(g_->options().max_whitespace_run);
    state_.frames.reserve(64);
    next_.frames.reserve(64);
    reset();
}

void JsonMatcher::reset() {
    state_.frames.assign(1, MatchFrame{});
    state_.ends.assign(1, 1);
    keys_.clear();
}

bool JsonMatcher::feed(uint8_t byte) {
    const size_t keys_before = keys_.size();
    if (!advance(state_, byte, next_)) {
        keys_.resize(keys_before);
        return false;
    }
    std::swap(state_, next_);
    return true;
}

bool JsonMatcher::feed(std::string_view bytes) {
    if (bytes.size() == 1) return feed(static_cast<uint8_t>(bytes[0]));
    const size_t keys_before = keys_.size();
    const JsonParseState* from = &state_;
    for (const char ch : bytes) {
        JsonParseState& to = from == &probe_a_ ? probe_b_ : probe_a_;
        if (!advance(*from, static_cast<uint8_t>(ch), to)) {
            keys_.resize(keys_before);
            return false;
        }
        from = &to;
    }
    if (from != &state_) std::swap(state_, from == &probe_a_ ? probe_a_ : probe_b_);
    return true;
}

bool JsonMatcher::accepts(std::string_view bytes) {
    const size_t keys_before = keys_.size();
    probe_a_ = state_;
    bool ok = true;
    for (const char ch : bytes) {
        if (!advance(probe_a_, static_cast<uint8_t>(ch), probe_b_)) {
            ok = false;
            break;
        }
        std::swap(probe_a_, probe_b_);
    }
    keys_.resize(keys_before);
    return ok;
}

bool JsonMatcher::can_continue() {
    const size_t keys_before = keys_.size();
    for (int b = 0; b < 256; ++b) {
        const bool ok = advance(state_, static_cast<uint8_t>(b), next_);
        keys_.resize(keys_before);
        if (ok) return true;
    }
    return false;
}

bool JsonMatcher::advance(const JsonParseState& src, uint8_t byte, JsonParseState& dst) {
    dst.frames.clear();
    dst.ends.clear();
    uint32_t start = 0;
    for (const uint32_t end : src.ends) {
        const size_t begin = dst.frames.size();
        dst.frames.insert(dst.frames.end(), src.frames.begin() + start, src.frames.begin() + end);
        feed_thread(dst, begin, byte);
        start = end;
    }
    if (dst.ends.size() > 1) dedup(dst);
    return !dst.ends.empty();
}

void JsonMatcher::dedup(JsonParseState& s) {
    // Keep the first of equal threads, at most kMaxThreads; compact in place.
    size_t out_frames = 0, out_threads = 0;
    for (size_t t = 0; t < s.ends.size(); ++t) {
        const uint32_t b = t == 0 ? 0 : s.ends[t - 1], e = s.ends[t];
        const size_t n = e - b;
        bool seen = out_threads >= kMaxThreads;
        for (size_t u = 0; u < out_threads && !seen; ++u) {
            const uint32_t ub = u == 0 ? 0 : s.ends[u - 1];
            seen = s.ends[u] - ub == n && std::memcmp(&s.frames[ub], &s.frames[b], n * sizeof(MatchFrame)) == 0;
        }
        if (seen) continue;
        if (out_frames != b) std::memmove(&s.frames[out_frames], &s.frames[b], n * sizeof(MatchFrame));
        out_frames += n;
        s.ends[out_threads++] = static_cast<uint32_t>(out_frames);
    }
    s.frames.resize(out_frames);
    s.ends.resize(out_threads);
}

bool JsonMatcher::can_end(const JsonParseState& s) const {
    for (size_t t = 0; t < s.threads(); ++t)
        if (thread_can_end(s.frames.data() + s.thread_begin(t), s.frames.data() + s.ends[t])) return true;
    return false;
}

bool JsonMatcher::thread_can_end(const MatchFrame* begin, const MatchFrame* end) const {
    const MatchFrame& top = end[-1];
    if (top.kind == MatchFrame::Document) return top.phase == 1;
    if (end - begin != 2) return false;  // a scalar directly under the document
    const Alt& a = alts_[top.alt];
    if (top.kind == MatchFrame::Number) {
        if (top.phase == kNumFrac || top.phase == kNumExp) return true;
        if (top.phase == kNumZero || top.phase == kNumInt)
            return !a.bounded || a.end[top.flags].contains(static_cast<int64_t>(top.h));
        return false;
    }
    if (top.kind == MatchFrame::Literal) return a.literals[top.b].size() == top.a;
    return false;
}

int64_t JsonMatcher::string_room(const MatchFrame* begin, const MatchFrame* end) const {
    const MatchFrame& top = end[-1];
    if (top.kind != MatchFrame::String || top.phase != kStrChar || (top.flags & 3)) return -1;
    constexpr int64_t kUnbounded = JsonGrammar::kUnlimited;
    if (top.d) return end - begin >= 2 && extras_allowed(end[-2]) ? kUnbounded : -1;
    const Alt& a = alts_[top.alt];
    if (a.max_length == JsonGrammar::kUnlimited) return kUnbounded;
    return static_cast<int64_t>(a.max_length) - top.a;
}

bool JsonMatcher::in_unbounded_string(const MatchFrame* begin, const MatchFrame* end) const {
    const MatchFrame& top = end[-1];
    if (end == begin || top.kind != MatchFrame::String || top.d || top.phase != kStrChar || (top.flags & 3)) return false;
    const Alt& a = alts_[top.alt];
    return a.min_length == 0 && a.max_length == JsonGrammar::kUnlimited;
}

bool JsonMatcher::fits(uint32_t depth, int32_t node) const {
    return node >= 0 && depth + static_cast<uint32_t>(nodes_[node].min_depth) <= max_depth_;
}

bool JsonMatcher::extras_allowed(const MatchFrame& obj) const {
    const Alt& a = alts_[obj.alt];
    return a.next_required[obj.a] == a.properties.size() && fits(obj.c, a.extra_node);
}

bool JsonMatcher::has_key_candidate(const MatchFrame& obj) const {
    const Alt& a = alts_[obj.alt];
    const size_t n = a.properties.size();
    const size_t last = std::min<size_t>(a.next_required[obj.a], n - (n > 0));
    for (size_t i = obj.a; i < n && i <= last; ++i)
        if (fits(obj.c, a.properties[i].node)) return true;
    return extras_allowed(obj);
}

// Some property that may come next has a name continuing from this name-trie node.
bool JsonMatcher::name_alive(const MatchFrame& obj, uint32_t name_node) const {
    if (name_node == kNoName) return false;
    const Alt& a = alts_[obj.alt];
    const auto& below = g_->name_trie()[name_node].properties_below;
    const uint32_t last = a.next_required[obj.a];  // a required property may not be skipped
    for (auto it = std::lower_bound(below.begin(), below.end(), static_cast<int32_t>(obj.a));
         it != below.end() && static_cast<uint32_t>(*it) <= last; ++it)
        if (fits(obj.c, a.properties[static_cast<size_t>(*it)].node)) return true;
    return false;
}

bool JsonMatcher::number_reachable(const Alt& a, int neg, int64_t magnitude, uint32_t digits) const {
    for (uint32_t j = 0; digits + j <= kMaxIntDigits; ++j) {
        const int64_t lo = magnitude * kPow10[j], hi = lo + kPow10[j] - 1;
        if (a.end[neg].meets(lo, hi) || a.fraction[neg].meets(lo, hi)) return true;
    }
    return false;
}

void JsonMatcher::child_done(std::vector<MatchFrame>& st) {
    MatchFrame& p = st.back();
    switch (p.kind) {
        case MatchFrame::Document: p.phase = 1; break;
        case MatchFrame::Array:
            ++p.a;
            p.phase = kArrAfterValue;
            p.ws = 0;
            break;
        case MatchFrame::Object:
            p.phase = kObjAfterValue;
            p.ws = 0;
            break;
        default: break;
    }
}

bool JsonMatcher::feed_thread(JsonParseState& dst, size_t begin, uint8_t c) {
    std::vector<MatchFrame>& st = dst.frames;
    for (;;) {
        Step r = Step::Fail;
        switch (st.back().kind) {
            case MatchFrame::Document: r = document_byte(st, c); break;
            case MatchFrame::Object: r = object_byte(st, c); break;
            case MatchFrame::Array: r = array_byte(st, c); break;
            case MatchFrame::String: r = string_byte(st, c); break;
            case MatchFrame::Number: r = number_byte(st, c); break;
            case MatchFrame::Literal: r = literal_byte(st, c); break;
        }
        switch (r) {
            case Step::Redispatch: continue;
            case Step::Done: dst.ends.push_back(static_cast<uint32_t>(st.size())); return true;
            case Step::Fail: st.resize(begin); return false;
            case Step::StartValue: return start_value(dst, begin, pending_node_, pending_depth_, c);
        }
    }
}

bool JsonMatcher::start_value(JsonParseState& dst, size_t begin, int32_t node, uint32_t depth, uint8_t c) {
    std::vector<MatchFrame>& st = dst.frames;
    candidates_.clear();
    for (const int32_t id : nodes_[node].alts) {
        const Alt& a = alts_[id];
        if (depth + static_cast<uint32_t>(a.min_depth) > max_depth_) continue;
        bool ok = false;
        switch (a.kind) {
            case Kind::Object: ok = c == '{'; break;
            case Kind::Array: ok = c == '['; break;
            case Kind::String: ok = c == '"'; break;
            case Kind::Number: ok = c == '-' || is_digit(c); break;
            case Kind::Literals: ok = (a.literal_first_bytes[c >> 6] >> (c & 63)) & 1; break;
        }
        if (ok) candidates_.push_back(id);
    }
    if (candidates_.empty()) {
        st.resize(begin);
        return false;
    }
    if (candidates_.size() == 1) {
        if (begin_alt(st, candidates_[0], depth, c)) {
            dst.ends.push_back(static_cast<uint32_t>(st.size()));
            return true;
        }
        st.resize(begin);
        return false;
    }
    // Several alternatives start with this byte: one thread each.
    fork_.assign(st.begin() + static_cast<std::ptrdiff_t>(begin), st.end());
    bool any = false;
    for (size_t i = 0; i < candidates_.size(); ++i) {
        const size_t b = i == 0 ? begin : st.size();
        if (i > 0) st.insert(st.end(), fork_.begin(), fork_.end());
        if (begin_alt(st, candidates_[i], depth, c)) {
            dst.ends.push_back(static_cast<uint32_t>(st.size()));
            any = true;
        } else {
            st.resize(b);
        }
    }
    return any;
}

bool JsonMatcher::begin_alt(std::vector<MatchFrame>& st, int32_t alt, uint32_t depth, uint8_t c) {
    MatchFrame f;
    f.alt = alt;
    switch (alts_[alt].kind) {
        case Kind::Object:
            f.kind = MatchFrame::Object;
            f.c = depth + 1;
            st.push_back(f);
            return true;
        case Kind::Array:
            f.kind = MatchFrame::Array;
            f.c = depth + 1;
            st.push_back(f);
            return true;
        case Kind::String:
            f.kind = MatchFrame::String;
            st.push_back(f);
            return true;
        case Kind::Number:
            f.kind = MatchFrame::Number;
            st.push_back(f);
            return number_byte(st, c) == Step::Done;
        case Kind::Literals:
            f.kind = MatchFrame::Literal;
            f.c = static_cast<uint32_t>(alts_[alt].literals.size());
            st.push_back(f);
            return literal_byte(st, c) == Step::Done;
    }
    return false;
}

JsonMatcher::Step JsonMatcher::document_byte(std::vector<MatchFrame>& st, uint8_t c) {
    if (st.back().phase != 0 || is_ws(c)) return Step::Fail;  // no whitespace around the document
    pending_node_ = g_->root();
    pending_depth_ = 0;
    return Step::StartValue;
}

// Whitespace between the tokens of an object or array: at most max_ws_ bytes in a row.
JsonMatcher::Step JsonMatcher::container_whitespace(MatchFrame& f) const {
    if (f.ws >= max_ws_) return Step::Fail;
    ++f.ws;
    return Step::Done;
}

JsonMatcher::Step JsonMatcher::object_byte(std::vector<MatchFrame>& st, uint8_t c) {
    MatchFrame& f = st.back();
    if (is_ws(c)) return container_whitespace(f);
    const Alt& a = alts_[f.alt];
    auto close = [&]() {
        if (a.next_required[f.a] != a.properties.size()) return Step::Fail;  // a required property is missing
        st.pop_back();
        child_done(st);
        return Step::Done;
    };
    auto open_key = [&]() {
        f.ws = 0;
        MatchFrame k;
        k.kind = MatchFrame::String;
        k.alt = f.alt;
        k.d = 1;
        k.b = a.name_root;
        k.h = JsonGrammar::key_hash_seed;
        st.push_back(k);  // f is dangling from here on
        return Step::Done;
    };
    switch (f.phase) {
        case kObjAfterOpen:
            if (c == '}') return close();
            if (c == '"' && has_key_candidate(f)) return open_key();
            return Step::Fail;
        case kObjAfterKey:
            if (c != ':') return Step::Fail;
            f.phase = kObjAfterColon;
            f.ws = 0;
            return Step::Done;
        case kObjAfterColon:
            pending_node_ = static_cast<int32_t>(f.d);
            pending_depth_ = f.c;
            f.ws = 0;
            f.phase = kObjAfterValue;
            return Step::StartValue;
        case kObjAfterValue:
            if (c == '}') return close();
            if (c == ',' && has_key_candidate(f)) {
                f.phase = kObjAfterComma;
                f.ws = 0;
                return Step::Done;
            }
            return Step::Fail;
        case kObjAfterComma:
            if (c == '"') return open_key();
            return Step::Fail;
    }
    return Step::Fail;
}

JsonMatcher::Step JsonMatcher::array_byte(std::vector<MatchFrame>& st, uint8_t c) {
    MatchFrame& f = st.back();
    if (is_ws(c)) return container_whitespace(f);
    const Alt& a = alts_[f.alt];
    auto next_item_possible = [&]() { return f.a < a.max_items && fits(f.c, a.item_node(f.a)); };
    if (c == ']' && f.phase != kArrAfterComma) {
        if (f.a < a.min_items) return Step::Fail;
        st.pop_back();
        child_done(st);
        return Step::Done;
    }
    if (f.phase == kArrAfterValue) {
        if (c != ',' || !next_item_possible()) return Step::Fail;
        f.phase = kArrAfterComma;
        f.ws = 0;
        return Step::Done;
    }
    if (!next_item_possible()) return Step::Fail;
    pending_node_ = a.item_node(f.a);
    pending_depth_ = f.c;
    f.ws = 0;
    f.phase = kArrAfterValue;
    return Step::StartValue;
}

JsonMatcher::Step JsonMatcher::string_byte(std::vector<MatchFrame>& st, uint8_t c) {
    MatchFrame& f = st.back();
    const bool key = f.d != 0;
    const uint8_t due = f.flags & 3;
    const bool closing = c == '"' && f.phase == kStrChar && due == 0;
    if (key && !closing) {
        // Follow the property-name trie over the raw bytes (names are matched in their
        // canonical encoding); once off it, the key can only be an extra property.
        const MatchFrame& obj = st[st.size() - 2];
        if (f.b != kNoName) {
            const auto& kids = g_->name_trie()[f.b].children;
            auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, uint32_t{0}));
            f.b = it != kids.end() && it->first == c ? it->second : kNoName;
        }
        if (!name_alive(obj, f.b) && !extras_allowed(obj)) return Step::Fail;
    }
    const Alt& a = alts_[f.alt];
    const bool counted = !key && (a.min_length > 0 || a.max_length != JsonGrammar::kUnlimited);
    const bool room = !counted || f.a < a.max_length;
    auto char_done = [&](uint32_t cp) {
        if (key) f.h = JsonGrammar::key_hash_step(f.h, cp);
        else if (counted) ++f.a;
        f.c = 0;
        f.phase = kStrChar;
        return Step::Done;
    };
    if (due) {
        const uint8_t cls = f.flags >> 2;
        if (c < kContLo[cls] || c > kContHi[cls]) return Step::Fail;
        if (key) f.c = (f.c << 6) | (c & 0x3F);
        f.flags = static_cast<uint8_t>(due - 1);
        return due == 1 ? char_done(f.c) : Step::Done;
    }
    switch (f.phase) {
        case kStrChar:
            if (c == '"') {
                if (key) return close_key(st);
                if (counted && f.a < a.min_length) return Step::Fail;
                st.pop_back();
                child_done(st);
                return Step::Done;
            }
            if (!room || c < 0x20) return Step::Fail;
            if (c == '\\') {
                f.phase = kStrEscape;
                return Step::Done;
            }
            if (c < 0x80) return char_done(c);
            if (const uint8_t lf = lead_flags(c)) {
                f.flags = lf;
                if (key) f.c = c & ((lf & 3) == 1 ? 0x1F : (lf & 3) == 2 ? 0x0F : 0x07);
                return Step::Done;
            }
            return Step::Fail;
        case kStrEscape:
            switch (c) {
                case '"':
                case '\\':
                case '/': return char_done(c);
                case 'b': return char_done(0x08);
                case 'f': return char_done(0x0C);
                case 'n': return char_done(0x0A);
                case 'r': return char_done(0x0D);
                case 't': return char_done(0x09);
                case 'u':
                    f.phase = kStrHex;
                    f.c = 0;
                    return Step::Done;
                default: return Step::Fail;
            }
        case kStrLowBackslash:
            if (c != '\\') return Step::Fail;
            f.phase = kStrLowU;
            return Step::Done;
        case kStrLowU:
            if (c != 'u') return Step::Fail;
            f.phase = kStrLowHex;
            return Step::Done;
        default: break;
    }
    const int v = hex_value(c);
    if (v < 0) return Step::Fail;
    uint32_t lo = 0, hi = 0;
    if (f.phase < kStrLowBackslash) {
        // First code unit: anything but a lone low surrogate.
        const uint32_t digits = f.phase - kStrHex + 1u;
        f.c = f.c * 16 + static_cast<uint32_t>(v);
        hex_reach(f.c, digits, lo, hi);
        if (lo >= 0xDC00 && hi <= 0xDFFF) return Step::Fail;
        if (digits < 4) {
            ++f.phase;
            return Step::Done;
        }
        if (f.c >= 0xD800 && f.c <= 0xDBFF) {
            f.c <<= 16;  // keep the high surrogate; the low one must follow
            f.phase = kStrLowBackslash;
            return Step::Done;
        }
        return char_done(f.c);
    }
    // Low surrogate after a high one.
    const uint32_t digits = f.phase - kStrLowHex + 1u;
    const uint32_t low = (f.c & 0xFFFF) * 16 + static_cast<uint32_t>(v);
    hex_reach(low, digits, lo, hi);
    if (hi < 0xDC00 || lo > 0xDFFF) return Step::Fail;
    f.c = (f.c & 0xFFFF0000u) | low;
    if (digits < 4) {
        ++f.phase;
        return Step::Done;
    }
    return char_done(0x10000 + (((f.c >> 16) - 0xD800) << 10) + (low - 0xDC00));
}

// The key's closing quote: a listed property that may come next, or an extra property whose
// name is none of the listed ones and not used before in this object.
JsonMatcher::Step JsonMatcher::close_key(std::vector<MatchFrame>& st) {
    const MatchFrame& k = st.back();
    MatchFrame& obj = st[st.size() - 2];
    const Alt& a = alts_[obj.alt];
    const uint32_t n = static_cast<uint32_t>(a.properties.size());
    bool ok = false;
    if (k.b != kNoName) {
        const int32_t p = g_->name_trie()[k.b].property;
        if (p >= 0 && static_cast<uint32_t>(p) >= obj.a && static_cast<uint32_t>(p) <= a.next_required[obj.a] &&
            fits(obj.c, a.properties[static_cast<size_t>(p)].node)) {
            obj.d = static_cast<uint32_t>(a.properties[static_cast<size_t>(p)].node);
            obj.a = static_cast<uint32_t>(p) + 1;
            ok = true;
        }
    }
    if (!ok) {
        if (!extras_allowed(obj) || std::binary_search(a.name_hashes.begin(), a.name_hashes.end(), k.h)) return Step::Fail;
        for (uint32_t i = obj.b; i != 0; i = keys_[i - 1].prev)
            if (keys_[i - 1].hash == k.h) return Step::Fail;
        keys_.push_back({k.h, obj.b});
        obj.b = static_cast<uint32_t>(keys_.size());
        obj.d = static_cast<uint32_t>(a.extra_node);
        obj.a = n;
    }
    st.pop_back();
    MatchFrame& o = st.back();
    o.phase = kObjAfterKey;
    o.ws = 0;
    return Step::Done;
}

JsonMatcher::Step JsonMatcher::number_byte(std::vector<MatchFrame>& st, uint8_t c) {
    MatchFrame& f = st.back();
    const Alt& a = alts_[f.alt];
    const int neg = f.flags;
    const bool digit = is_digit(c);
    const int d = c - '0';
    auto terminate = [&]() {
        st.pop_back();
        child_done(st);
        return Step::Redispatch;
    };
    switch (f.phase) {
        case kNumStart:
            if (c == '-') {
                if (a.bounded && a.end[1].empty() && a.fraction[1].empty()) return Step::Fail;
                f.flags = 1;
                f.phase = kNumMinus;
                return Step::Done;
            }
            [[fallthrough]];
        case kNumMinus:
            if (!digit) return Step::Fail;
            if (a.bounded && !number_reachable(a, neg, d, 1)) return Step::Fail;
            if (a.bounded && d == 0 && !a.end[neg].contains(0) && !a.fraction[neg].contains(0)) return Step::Fail;
            f.a = 1;
            f.h = a.bounded ? static_cast<uint64_t>(d) : 0;
            f.phase = d == 0 ? kNumZero : kNumInt;
            return Step::Done;
        case kNumZero:
        case kNumInt:
            if (digit) {
                if (f.phase == kNumZero || f.a >= kMaxIntDigits) return Step::Fail;
                if (a.bounded) {
                    const int64_t m = static_cast<int64_t>(f.h) * 10 + d;
                    if (!number_reachable(a, neg, m, f.a + 1)) return Step::Fail;
                    f.h = static_cast<uint64_t>(m);
                }
                ++f.a;
                return Step::Done;
            }
            if (c == '.') {
                if (a.integer || (a.bounded && !a.fraction[neg].contains(static_cast<int64_t>(f.h)))) return Step::Fail;
                f.phase = kNumDot;
                return Step::Done;
            }
            if (c == 'e' || c == 'E') {
                if (a.integer || a.bounded) return Step::Fail;
                f.phase = kNumE;
                return Step::Done;
            }
            if (a.bounded && !a.end[neg].contains(static_cast<int64_t>(f.h))) return Step::Fail;
            return terminate();
        case kNumDot:
            if (!digit) return Step::Fail;
            f.b = 1;
            f.phase = kNumFrac;
            return Step::Done;
        case kNumFrac:
            if (digit) {
                if (f.b >= kMaxFracDigits) return Step::Fail;
                ++f.b;
                return Step::Done;
            }
            if (c == 'e' || c == 'E') {
                if (a.bounded) return Step::Fail;
                f.phase = kNumE;
                return Step::Done;
            }
            return terminate();
        case kNumE:
            if (c == '+' || c == '-') {
                f.phase = kNumESign;
                return Step::Done;
            }
            [[fallthrough]];
        case kNumESign:
            if (!digit) return Step::Fail;
            f.c = 1;
            f.phase = kNumExp;
            return Step::Done;
        case kNumExp:
            if (digit) {
                if (f.c >= kMaxExpDigits) return Step::Fail;
                ++f.c;
                return Step::Done;
            }
            return terminate();
    }
    return Step::Fail;
}

JsonMatcher::Step JsonMatcher::literal_byte(std::vector<MatchFrame>& st, uint8_t c) {
    MatchFrame& f = st.back();
    const std::vector<std::string>& lits = alts_[f.alt].literals;
    const uint32_t pos = f.a;
    // lits[b, c) share the first pos bytes; only lits[b] can be exactly that long.
    const bool whole = lits[f.b].size() == pos;
    const auto first = lits.begin() + f.b + (whole ? 1 : 0), last = lits.begin() + f.c;
    const auto byte_at = [pos](const std::string& s) { return static_cast<uint8_t>(s[pos]); };
    const auto lo = std::partition_point(first, last, [&](const std::string& s) { return byte_at(s) < c; });
    const auto hi = std::partition_point(lo, last, [&](const std::string& s) { return byte_at(s) == c; });
    if (lo != hi) {
        f.a = pos + 1;
        f.b = static_cast<uint32_t>(lo - lits.begin());
        f.c = static_cast<uint32_t>(hi - lits.begin());
        if (hi - lo == 1 && lo->size() == pos + 1) {  // complete and nothing longer: done now
            st.pop_back();
            child_done(st);
        }
        return Step::Done;
    }
    if (!whole) return Step::Fail;
    st.pop_back();
    child_done(st);
    return Step::Redispatch;
}

}  // namespace strata::runtime
