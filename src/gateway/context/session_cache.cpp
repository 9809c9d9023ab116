#include "gateway/context/session_cache.h"

#include "gateway/context/session.h"

namespace strata::gateway {

SessionCache::Found SessionCache::find(std::span<const uint64_t> chain) {
    std::lock_guard lock(mutex_);
    // From the end: the first hash found is the longest shared prefix (a few lookups per message
    // at worst, and one in the usual case of a conversation's next turn).
    for (size_t k = chain.size(); k > 0; --k) {
        const auto it = by_hash_.find(chain[k - 1]);
        if (it == by_hash_.end() || it->second.index != k - 1) continue;
        const auto w = where_.find(it->second.session);
        if (w == where_.end()) continue;
        lru_.splice(lru_.begin(), lru_, w->second);
        return {w->second->session, k};
    }
    return {};
}

std::shared_ptr<Session> SessionCache::put(std::shared_ptr<Session> session) {
    std::lock_guard lock(mutex_);
    if (session->id() != 0) {
        const auto id = by_id_.find(session->id());
        if (id != by_id_.end() && id->second != session.get()) {
            const auto w = where_.find(id->second);
            if (w != where_.end()) {
                lru_.splice(lru_.begin(), lru_, w->second);
                return w->second->session;
            }
        }
    }
    auto w = where_.find(session.get());
    if (w == where_.end()) {
        lru_.push_front(Entry{session, {}, 0, 0});
        w = where_.emplace(session.get(), lru_.begin()).first;
    } else {
        lru_.splice(lru_.begin(), lru_, w->second);
    }
    Entry& e = *w->second;
    if (e.id != session->id()) {  // stored for the first time, or again after the store evicted it
        const auto old = by_id_.find(e.id);
        if (old != by_id_.end() && old->second == session.get()) by_id_.erase(old);
        e.id = session->id();
        if (e.id != 0) by_id_[e.id] = session.get();
    }
    for (size_t i = e.hashes.size(); i < session->n_messages(); ++i) {
        const uint64_t h = session->message(i).hash;
        e.hashes.push_back(h);
        by_hash_[h] = {session.get(), i};
    }
    const auto now = static_cast<int64_t>(session->memory_bytes());
    bytes_ += now - e.bytes;
    e.bytes = now;
    evict_locked(session.get());
    return session;
}

void SessionCache::evict_locked(const Session* keep) {
    while (bytes_ > max_bytes_ && !lru_.empty() && lru_.back().session.get() != keep) {
        Entry& e = lru_.back();
        const Session* s = e.session.get();
        for (size_t i = 0; i < e.hashes.size(); ++i) {
            const auto it = by_hash_.find(e.hashes[i]);
            if (it != by_hash_.end() && it->second.session == s) by_hash_.erase(it);
        }
        const auto id = by_id_.find(e.id);
        if (id != by_id_.end() && id->second == s) by_id_.erase(id);
        bytes_ -= e.bytes;
        where_.erase(s);
        lru_.pop_back();
    }
}

size_t SessionCache::size() {
    std::lock_guard lock(mutex_);
    return lru_.size();
}

int64_t SessionCache::bytes() {
    std::lock_guard lock(mutex_);
    return bytes_;
}

}  // namespace strata::gateway
