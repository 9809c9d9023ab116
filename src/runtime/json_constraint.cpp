#include "runtime/json_constraint.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace strata::runtime {

namespace {

std::string printable(const std::string& bytes) {
    std::string out;
    for (const char ch : bytes) {
        const auto b = static_cast<uint8_t>(ch);
        if (b >= 0x20 && b < 0x7F && b != '\\') {
            out += ch;
        } else {
            static const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[b >> 4];
            out += hex[b & 15];
        }
    }
    return out;
}

}  // namespace

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenIndex> index)
    : index_(std::move(index)), matcher_(std::move(grammar)) {
    if (!index_) throw Error("json constraint: no token index");
    const size_t depth = index_->max_token_bytes() + 1;
    depth_states_.resize(depth + 1);  // grown on first use: a walk rarely goes deeper than a few bytes
    cursors_.resize(depth + 1);
    key_marks_.resize(depth + 1);
    reset();
}

void JsonConstraint::reset() {
    matcher_.reset();
    text_.clear();
    ended_ = false;
    complete_ = matcher_.complete();
    must_end_ = false;
}

void JsonConstraint::set_mask_cache_size(size_t entries) {
    cache_size_ = entries;
    if (cache_.size() > entries) cache_.resize(entries);
}

void JsonConstraint::allowed(TokenMask& mask) {
    mask.reset(index_->n_vocab(), false);
    if (ended_) {
        for (const int32_t id : index_->end_tokens()) mask.allow(id);
        return;
    }
    const JsonParseState& state = matcher_.state();
    for (CachedMask& c : cache_) {
        if (c.state == state) {
            c.last_use = ++use_clock_;
            std::memcpy(mask.words.data(), c.words.data(), c.words.size() * sizeof(uint64_t));
            return;
        }
    }

    // A token is allowed when some thread accepts it, so each thread is walked on its own.
    for (size_t t = 0; t < state.threads(); ++t) {
        const MatchFrame* begin = state.frames.data() + state.thread_begin(t);
        const MatchFrame* end = state.frames.data() + state.ends[t];
        const JsonParseState* start = &state;
        if (state.threads() > 1) {
            thread_state_.frames.assign(begin, end);
            thread_state_.ends.assign(1, static_cast<uint32_t>(end - begin));
            start = &thread_state_;
        }
        const int64_t room = matcher_.string_room(begin, end);
        if (room >= 0) {
            index_->add_plain(mask, room);
            walk(matcher_.in_unbounded_string(begin, end) ? index_->non_plain_rests() : index_->non_plain_tokens(), *start, mask);
        } else {
            walk(index_->all_tokens(), *start, mask);
        }
    }
    if (complete_)
        for (const int32_t id : index_->end_tokens()) mask.allow(id);

    if (cache_size_ == 0) return;
    CachedMask* slot = nullptr;
    if (cache_.size() < cache_size_) {
        slot = &cache_.emplace_back();
    } else {
        slot = &*std::min_element(cache_.begin(), cache_.end(),
                                  [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
    }
    slot->state = state;
    slot->words = mask.words;
    slot->last_use = ++use_clock_;
}

void JsonConstraint::walk(const TokenTrie& trie, const JsonParseState& start, TokenMask& mask) {
    std::vector<ExtraKey>& keys = matcher_.extra_keys();
    const TokenTrie::Node& root = trie.node(0);
    if (root.n_children == 0) return;
    size_t depth = 0;
    cursors_[0] = {root.first_child, root.first_child + root.n_children};
    key_marks_[0] = keys.size();
    for (;;) {
        Cursor& cur = cursors_[depth];
        if (cur.next_child == cur.end_child) {
            if (depth == 0) break;
            --depth;
            continue;
        }
        const uint32_t child = cur.next_child++;
        keys.resize(key_marks_[depth]);  // forget keys the previous sibling's subtree added
        const JsonParseState& parent = depth == 0 ? start : depth_states_[depth];
        const TokenTrie::Node& n = trie.node(child);
        if (!matcher_.advance(parent, n.byte, depth_states_[depth + 1])) continue;
        for (const int32_t* id = trie.tokens_begin(child); id != trie.tokens_end(child); ++id) mask.allow(*id);
        if (n.n_children > 0) {
            ++depth;
            cursors_[depth] = {n.first_child, n.first_child + n.n_children};
            key_marks_[depth] = keys.size();
        }
    }
    keys.resize(key_marks_[0]);
}

void JsonConstraint::accept(int32_t token) {
    if (ended_) throw Error("json constraint: token " + std::to_string(token) + " after the end of generation");
    if (index_->is_end(token)) {
        if (!complete_)
            throw Error("json constraint: end token " + std::to_string(token) + " before the JSON document is complete");
        ended_ = true;
        return;
    }
    if (!index_->is_candidate(token))
        throw Error(
            "json constraint: token " + std::to_string(token) +
            (index_->valid(token) ? " (special or empty) cannot be part of a JSON document" : " is outside the vocabulary"));
    const std::string& bytes = index_->bytes(token);
    if (!matcher_.feed(bytes))
        throw Error("json constraint: token " + std::to_string(token) + " \"" + printable(bytes) +
                    "\" does not continue the JSON document after \"" +
                    printable(text_.substr(text_.size() > 60 ? text_.size() - 60 : 0)) + "\"");
    text_ += bytes;
    complete_ = matcher_.complete();
    must_end_ = complete_ && !matcher_.can_continue();
}

bool JsonConstraint::would_accept(int32_t token) {
    if (ended_) return index_->is_end(token);
    if (index_->is_end(token)) return complete_;
    if (!index_->is_candidate(token)) return false;
    return matcher_.accepts(index_->bytes(token));
}

}  // namespace strata::runtime
