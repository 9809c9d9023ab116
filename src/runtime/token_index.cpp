#include "runtime/token_index.h"

#include <algorithm>
#include <deque>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::runtime {

namespace {

// The longest prefix of s that may stand inside a JSON string as it is: complete, well-formed
// UTF-8 (no overlongs, surrogates or values past U+10FFFF) without '"', '\' or bytes below
// 0x20. Returns its length in bytes; chars gets its code points.
size_t plain_prefix(std::string_view s, int32_t& chars) {
    int32_t n = 0;
    size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<uint8_t>(s[i]);
        if (b < 0x80) {
            if (b < 0x20 || b == '"' || b == '\\') break;
            ++i;
            ++n;
            continue;
        }
        int len = 0;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) len = 2;
        else if (b == 0xE0) len = 3, lo = 0xA0;
        else if (b == 0xED) len = 3, hi = 0x9F;
        else if (b >= 0xE1 && b <= 0xEF) len = 3;
        else if (b == 0xF0) len = 4, lo = 0x90;
        else if (b >= 0xF1 && b <= 0xF3) len = 4;
        else if (b == 0xF4) len = 4, hi = 0x8F;
        else break;
        if (i + static_cast<size_t>(len) > s.size()) break;
        bool whole = true;
        for (int k = 1; k < len && whole; ++k) {
            const auto c = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
            whole = c >= (k == 1 ? lo : 0x80) && c <= (k == 1 ? hi : 0xBF);
        }
        if (!whole) break;
        i += static_cast<size_t>(len);
        ++n;
    }
    chars = n;
    return i;
}

// Code points of a token that is plain string text as a whole; -1 otherwise.
int32_t plain_string_chars(std::string_view s) {
    int32_t chars = 0;
    return !s.empty() && plain_prefix(s, chars) == s.size() ? chars : -1;
}

}  // namespace

void TokenTrie::build(std::vector<std::pair<std::string_view, int32_t>> tokens) {
    std::sort(tokens.begin(), tokens.end());
    nodes_.clear();
    token_ids_.clear();
    struct Pending {
        uint32_t node;
        size_t lo, hi, depth;  // tokens[lo, hi) share their first `depth` bytes
    };
    std::deque<Pending> queue;
    nodes_.push_back(Node{0, 0, 0, 0});
    queue.push_back({0, 0, tokens.size(), 0});
    // Breadth-first: nodes are dequeued in creation order, so each node's tokens are appended
    // after those of every earlier node and first_token ascends with the node index.
    while (!queue.empty()) {
        const Pending p = queue.front();
        queue.pop_front();
        Node& n = nodes_[p.node];
        n.first_token = static_cast<uint32_t>(token_ids_.size());
        size_t i = p.lo;
        for (; i < p.hi && tokens[i].first.size() == p.depth; ++i) token_ids_.push_back(tokens[i].second);
        n.first_child = static_cast<uint32_t>(nodes_.size());
        uint16_t count = 0;
        while (i < p.hi) {
            const char b = tokens[i].first[p.depth];
            size_t j = i;
            while (j < p.hi && tokens[j].first[p.depth] == b) ++j;
            const auto child = static_cast<uint32_t>(nodes_.size());
            nodes_.push_back(Node{0, 0, 0, static_cast<uint8_t>(b)});
            queue.push_back({child, i, j, p.depth + 1});
            ++count;
            i = j;
        }
        nodes_[p.node].n_children = count;
    }
    nodes_.push_back(Node{0, static_cast<uint32_t>(token_ids_.size()), 0, 0});  // sentinel
}

TokenIndex::TokenIndex(const tokenizer::Tokenizer& tok)
    : TokenIndex(tok, [&] {
          std::vector<int32_t> ends;
          for (const int32_t id : {tok.eos(), tok.eot()})
              if (tok.valid(id)) ends.push_back(id);
          return ends;
      }()) {}

TokenIndex::TokenIndex(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& end_tokens) {
    const int32_t n = tok.n_vocab();
    bytes_.reserve(static_cast<size_t>(n));
    std::vector<int32_t> excluded;
    for (int32_t id = 0; id < n; ++id) {
        bytes_.push_back(tok.token_bytes(id));
        if (tok.is_special(id)) excluded.push_back(id);
    }
    set_end_and_excluded(end_tokens, excluded);
    build();
}

TokenIndex::TokenIndex(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens,
                       const std::vector<int32_t>& excluded)
    : bytes_(std::move(token_bytes)) {
    set_end_and_excluded(end_tokens, excluded);
    build();
}

void TokenIndex::set_end_and_excluded(const std::vector<int32_t>& end_tokens, const std::vector<int32_t>& excluded) {
    flags_.assign(bytes_.size(), 0);
    for (const int32_t id : end_tokens) {
        if (!valid(id)) throw Error("token index: end token " + std::to_string(id) + " is outside the vocabulary");
        if (std::find(end_tokens_.begin(), end_tokens_.end(), id) == end_tokens_.end()) end_tokens_.push_back(id);
    }
    for (const int32_t id : excluded) {
        if (!valid(id)) throw Error("token index: excluded token " + std::to_string(id) + " is outside the vocabulary");
        flags_[static_cast<size_t>(id)] |= kExcluded;
    }
}

void TokenIndex::build() {
    for (const int32_t id : end_tokens_) flags_[static_cast<size_t>(id)] |= kEnd;
    plain_chars_.assign(bytes_.size(), -1);
    std::vector<std::pair<std::string_view, int32_t>> all, non_plain, rests;
    for (size_t i = 0; i < bytes_.size(); ++i) {
        const auto id = static_cast<int32_t>(i);
        if ((flags_[i] & (kEnd | kExcluded)) || bytes_[i].empty()) continue;
        flags_[i] |= kCandidate;
        max_token_bytes_ = std::max(max_token_bytes_, bytes_[i].size());
        all.emplace_back(bytes_[i], id);
        plain_chars_[i] = plain_string_chars(bytes_[i]);
        if (plain_chars_[i] < 0) {
            non_plain.emplace_back(bytes_[i], id);
            int32_t prefix_chars = 0;
            rests.emplace_back(std::string_view(bytes_[i]).substr(plain_prefix(bytes_[i], prefix_chars)), id);
        }
        max_plain_chars_ = std::max(max_plain_chars_, plain_chars_[i]);
    }
    all_.build(std::move(all));
    non_plain_.build(std::move(non_plain));
    rests_.build(std::move(rests));

    plain_up_to_.assign(kPlainTable, TokenMask{});
    for (TokenMask& m : plain_up_to_) m.reset(n_vocab(), false);
    plain_all_.reset(n_vocab(), false);
    long_plain_.clear();
    for (size_t i = 0; i < bytes_.size(); ++i) {
        const int32_t chars = plain_chars_[i];
        if (chars < 0) continue;
        const auto id = static_cast<int32_t>(i);
        plain_all_.allow(id);
        if (chars < kPlainTable) plain_up_to_[static_cast<size_t>(chars)].allow(id);
        else long_plain_.emplace_back(chars, id);
    }
    for (size_t k = 1; k < plain_up_to_.size(); ++k)
        for (size_t w = 0; w < plain_all_.words.size(); ++w) plain_up_to_[k].words[w] |= plain_up_to_[k - 1].words[w];
    std::sort(long_plain_.begin(), long_plain_.end());
}

void TokenIndex::add_plain(TokenMask& mask, int64_t max_chars) const {
    if (max_chars <= 0) return;
    const TokenMask& base = max_chars >= max_plain_chars_ ? plain_all_
                            : max_chars < kPlainTable     ? plain_up_to_[static_cast<size_t>(max_chars)]
                                                          : plain_up_to_[kPlainTable - 1];
    uint64_t* out = mask.words.data();
    const uint64_t* in = base.words.data();
    const size_t n = base.words.size();
    for (size_t w = 0; w < n; ++w) out[w] |= in[w];
    if (max_chars < max_plain_chars_ && max_chars >= kPlainTable)
        for (const auto& [chars, id] : long_plain_) {
            if (chars > max_chars) break;
            mask.allow(id);
        }
}

}  // namespace strata::runtime
