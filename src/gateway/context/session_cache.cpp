#include "gateway/context/session_cache.h"

#include "gateway/context/session.h"

namespace strata::gateway {

namespace {
// What an entry costs besides its session: its list node and index entries, and per hash its
// by_hash_ node (~48 B rounded by malloc) and its copy in Entry::hashes.
constexpr int64_t kEntryBytes = 256, kHashBytes = 64 + 8;
}  // namespace

SessionCache::Found SessionCache::find(std::span<const uint64_t> chain, uint64_t space) {
    std::lock_guard lock(mutex_);
    // From the end: the first hash found is the longest shared prefix (a few lookups per message
    // at worst, and one in the usual case of a conversation's next turn).
    for (size_t k = chain.size(); k > 0; --k) {
        const auto it = by_hash_.find(chain[k - 1] ^ space);
        if (it == by_hash_.end() || it->second.index != k - 1) continue;
        const auto w = where_.find(it->second.session);
        if (w == where_.end()) continue;
        lru_.splice(lru_.begin(), lru_, w->second);
        return {w->second->session, k};
    }
    return {};
}

std::shared_ptr<Session> SessionCache::put(std::shared_ptr<Session> session, uint64_t space) {
    std::lock_guard lock(mutex_);
    if (session->id() != 0) {
        const auto id = by_id_.find({space, session->id()});
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
        lru_.push_front(Entry{session, {}, 0, space, 0, nullptr});
        w = where_.emplace(session.get(), lru_.begin()).first;
    } else {
        lru_.splice(lru_.begin(), lru_, w->second);
    }
    Entry& e = *w->second;
    if (e.id != session->id()) {  // stored for the first time, or again after the store evicted it
        const auto old = by_id_.find({e.space, e.id});
        if (old != by_id_.end() && old->second == session.get()) by_id_.erase(old);
        e.id = session->id();
        if (e.id != 0) by_id_[{e.space, e.id}] = session.get();
    }
    for (size_t i = e.hashes.size(); i < session->n_messages(); ++i) {
        const uint64_t h = session->message(i).hash ^ e.space;
        e.hashes.push_back(h);
        by_hash_[h] = {session.get(), i};
    }
    const auto now =
        static_cast<int64_t>(session->memory_bytes()) + kEntryBytes + kHashBytes * static_cast<int64_t>(e.hashes.size());
    bytes_ += now - e.bytes;
    e.bytes = now;
    if (e.base != session->base_id()) {
        hold_base(session->base_id(), static_cast<int64_t>(session->base_bytes()));
        release_base(e.base);
        e.base = session->base_id();
    }
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
        const auto id = by_id_.find({e.space, e.id});
        if (id != by_id_.end() && id->second == s) by_id_.erase(id);
        bytes_ -= e.bytes;
        release_base(e.base);
        where_.erase(s);
        lru_.pop_back();
    }
}

void SessionCache::hold_base(const void* base, int64_t bytes) {
    if (base == nullptr) return;
    Base& b = bases_[base];
    if (b.users++ == 0) {
        b.bytes = bytes;
        bytes_ += bytes;
    }
}

void SessionCache::release_base(const void* base) {
    if (base == nullptr) return;
    const auto it = bases_.find(base);
    if (it == bases_.end()) return;
    if (--it->second.users == 0) {
        bytes_ -= it->second.bytes;
        bases_.erase(it);
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
