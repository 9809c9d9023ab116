#include "gateway/context/context_assembler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "gateway/context/chunker.h"
#include "gateway/context/hash.h"
#include "gateway/context/question.h"
#include "gateway/context/session.h"
#include "gateway/context/session_store.h"

namespace strata::gateway {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

constexpr uint64_t kScopeSeed = 0x73636f7065ull;
constexpr int64_t kNoteReserve = 96;        // tokens kept free for the abridged notes and joins
constexpr int64_t kLabelCost = 16;          // "[earlier turn 37, assistant]" and its blank lines
constexpr int64_t kJoinCost = 4;            // "[…]" between two excerpts of one message
constexpr size_t kQueryTailBytes = 2000;    // no question found: the message's last paragraphs
constexpr size_t kMaterialTailBytes = 400;  // the material just before a found question, at a low weight
constexpr double kMaterialWeight = 0.15;
constexpr size_t kExtraQueryBytes = 600;  // the turn's last message, when it is not the user's

// Runs f(i) for i in [0, n) on up to `threads` threads; rethrows the first exception.
template <class F>
void parallel_for(size_t n, int threads, F&& f) {
    if (threads <= 1 || n < 2) {
        for (size_t i = 0; i < n; ++i) f(i);
        return;
    }
    std::atomic<size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto worker = [&] {
        try {
            for (size_t i; (i = next.fetch_add(1)) < n;) f(i);
        } catch (...) {
            std::lock_guard lock(error_mutex);
            if (!error) error = std::current_exception();
            next = n;
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
    if (error) std::rethrow_exception(error);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

// The query parts of a message: its last paragraph (where a question after a paste sits) at
// full weight, the paragraphs before it at halving weights, up to max_bytes in all.
void add_query_parts(std::string_view text, size_t max_bytes, double weight, std::vector<QueryPart>& out) {
    size_t end = text.size();
    while (end > 0 && is_space(text[end - 1])) --end;
    size_t used = 0;
    while (end > 0 && used < max_bytes && weight > 0.05) {
        size_t begin = text.rfind("\n\n", end - 1);
        begin = begin == std::string_view::npos ? 0 : begin + 2;
        if (end - begin > max_bytes - used) {  // a long paragraph: its last bytes, from a space
            begin = end - (max_bytes - used);
            while (begin < end && !is_space(text[begin])) ++begin;
        }
        if (begin < end) out.push_back({text.substr(begin, end - begin), weight});
        used += end - begin + 2;
        weight *= 0.5;
        end = begin >= 2 ? begin - 2 : 0;
        while (end > 0 && is_space(text[end - 1])) --end;
    }
}

// The query of the latest user message: the question find_question() separates from pasted
// material — its sentences that ask ('?') at full weight, instruction sentences around them at
// half — and, at a low weight, the material's last few hundred bytes, so a paste's tail never
// outweighs the question. No question found: the message's tail paragraphs as before.
void add_question_parts(std::string_view text, std::vector<QueryPart>& out) {
    const FoundQuestion found = find_question(text);
    if (found.spans.empty()) {
        add_query_parts(text, kQueryTailBytes, 1.0, out);
        return;
    }
    for (const QuestionSpan& span : found.spans) {
        const std::string_view q = text.substr(span.begin, span.end - span.begin);
        std::vector<std::pair<std::string_view, bool>> sentences;  // text, asks
        bool any_asks = false;
        for (const auto& [b, e] : split_sentences(q)) {
            const std::string_view sentence = trim(q.substr(b, e - b));
            if (sentence.empty()) continue;
            const bool asks =
                sentence.back() == '?' || (sentence.size() >= 3 && sentence.substr(sentence.size() - 3) == "\xEF\xBC\x9F");
            any_asks = any_asks || asks;
            sentences.emplace_back(sentence, asks);
        }
        for (const auto& [sentence, asks] : sentences)
            out.push_back({sentence, any_asks && !asks ? span.weight * 0.5 : span.weight, true});
    }
    if (!found.whole && found.material_end > 0)
        add_query_parts(text.substr(0, found.material_end), kMaterialTailBytes, kMaterialWeight, out);
}

std::string thousands(int64_t v) {
    std::string s = std::to_string(v), out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i > 0 && (s.size() - i) % 3 == 0) out.push_back(',');
        out.push_back(s[i]);
    }
    return out;
}

// A run of excerpt chunks that are contiguous in their message: [begin, end) bytes.
struct Span {
    uint32_t message, begin, end;
};

// Excerpts (whole chunks, or a fact's sentence inside one) as spans of their messages, in
// original order, overlapping and touching ones joined.
std::vector<Span> merge_spans(const Session& s, const std::vector<RankedChunk>& picks) {
    std::vector<Span> parts;
    for (const RankedChunk& p : picks) {
        const ChunkRecord& r = s.chunk(p.chunk);
        parts.push_back(p.end > p.begin ? Span{r.message, p.begin, p.end} : Span{r.message, r.offset, r.offset + r.length});
    }
    std::sort(parts.begin(), parts.end(),
              [](const Span& a, const Span& b) { return a.message != b.message ? a.message < b.message : a.begin < b.begin; });
    std::vector<Span> spans;
    for (const Span& p : parts) {
        if (!spans.empty() && spans.back().message == p.message && p.begin <= spans.back().end)
            spans.back().end = std::max(spans.back().end, p.end);
        else spans.push_back(p);
    }
    return spans;
}

}  // namespace

std::string system_with_history(std::string_view system, std::string_view history_block) {
    if (history_block.empty()) return std::string(system);
    if (system.empty()) return std::string(history_block);
    std::string out(system);
    out += "\n\n";
    out += history_block;
    return out;
}

std::vector<uint64_t> conversation_chain(std::string_view scope, const Conversation& conv) {
    std::vector<uint64_t> chain(conv.messages.size());
    uint64_t h = hash_bytes(scope, kScopeSeed);
    for (size_t i = 0; i < chain.size(); ++i) chain[i] = h = chain_hash(h, conv.messages[i].role, conv.messages[i].text);
    return chain;
}

struct ContextAssembler::Acquired {
    std::shared_ptr<Session> session;
    std::unique_lock<std::mutex> lock;
    bool hit = false;
    int64_t parent = 0;  // a fork's stored parent and the messages it shares with it
    size_t shared = 0;
};

ContextAssembler::ContextAssembler(SessionStore* store, TokenCounter count, RetrievalOptions retrieval, IndexingOptions indexing)
    : store_(store),
      count_(std::move(count)),
      retrieval_(std::move(retrieval)),
      indexing_(indexing),
      cache_(indexing.shared_cache ? indexing.shared_cache : std::make_shared<SessionCache>(indexing.cache_max_bytes)) {
    if (indexing_.count_threads <= 0)
        indexing_.count_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ContextAssembler::~ContextAssembler() = default;

ContextAssembler::Acquired ContextAssembler::acquire(std::string_view scope, const std::vector<uint64_t>& chain) {
    SessionCache::Found found = cache_->find(chain, indexing_.cache_space);
    std::shared_ptr<Session> s = found.session;
    size_t p = found.length;
    if (store_ != nullptr && (!s || (p < chain.size() && store_->contains(scope, chain[p])))) {
        if (auto m = store_->find_prefix(scope, chain); m && m->length > p) {
            if (std::unique_ptr<Session> loaded = store_->load(m->session)) {
                std::shared_ptr<Session> sp(std::move(loaded));
                std::lock_guard lock(sp->mutex);
                s = cache_->put(sp, indexing_.cache_space);
                p = m->length;
            }
        }
    }
    Acquired a;
    a.hit = s != nullptr && p > 0;
    if (!a.hit) {
        s = std::make_shared<Session>(0, std::string(scope));
        p = 0;
    }
    a.lock = std::unique_lock(s->mutex);
    // Another request may have extended the session since it was found.
    while (p < s->n_messages() && p < chain.size() && s->message(p).hash == chain[p]) ++p;
    if (p < s->n_messages() && p < chain.size()) {
        // Diverges at message p: a new session with only the shared prefix (shared, not copied:
        // s's chunks may become a frozen base of both, which the cache re-measures).
        const void* base_before = s->base_id();
        std::shared_ptr<Session> fork(s->fork(p));
        if (s->base_id() != base_before) cache_->put(s, indexing_.cache_space);
        a.parent = s->id();
        a.shared = p;
        a.lock.unlock();
        s = std::move(fork);
        a.lock = std::unique_lock(s->mutex);
    }
    a.session = std::move(s);
    return a;
}

int ContextAssembler::extend(Session& s, const Conversation& conv, const std::vector<uint64_t>& chain) {
    const size_t from = s.n_messages(), n = chain.size();
    if (from >= n) return 0;
    struct Job {
        size_t message;
        ChunkSpan span;
    };
    std::vector<Job> jobs;
    size_t bytes = 0;
    for (size_t i = from; i < n; ++i) {
        for (const ChunkSpan& c : chunk_text(conv.messages[i].text, indexing_.chunking)) jobs.push_back({i, c});
        bytes += conv.messages[i].text.size();
    }
    std::vector<NewChunk> out(jobs.size());
    const int threads = bytes < (64u << 10) ? 1 : indexing_.count_threads;
    parallel_for(jobs.size(), threads, [&](size_t j) {
        const std::string_view text =
            std::string_view(conv.messages[jobs[j].message].text).substr(jobs[j].span.offset, jobs[j].span.length);
        out[j] = {jobs[j].span.offset, jobs[j].span.length, static_cast<int32_t>(count_(text)), count_terms(text)};
    });
    size_t j = 0;
    for (size_t i = from; i < n; ++i) {
        std::vector<NewChunk> mine;
        int64_t tokens = 0;
        for (; j < jobs.size() && jobs[j].message == i; ++j) {
            tokens += out[j].tokens;
            mine.push_back(std::move(out[j]));
        }
        // One chunk is the whole text: its count is the message's. Otherwise the sum is
        // (nearly) exact and made exact when it matters.
        const bool exact = mine.size() <= 1;
        s.add_message(chain[i], tokens, exact, std::move(mine));
    }
    return static_cast<int>(jobs.size());
}

// Candidates without a vector, newest first, in the embedder's batches until the dense budget
// is spent or the embedder fails (the rest wait for a later turn). Each call is sized to the time
// the budget has left at the embedder's measured rate (a first call of kProbe when it has none;
// none when not one passage would fit, but for one passage every 30 s that measures the lane
// again), so a slow lane (a 0.6B model on two cores embeds ~1.6
// passages a second) does not overrun the budget by a whole call of 64. The lane calls run without
// the session's lock (`lock`, held on entry and on return): another request of the conversation
// need not wait for them. Chunk ids stay valid meanwhile (a session only grows; a fork copies
// the vectors it has), and the texts are the request's own; a chunk another request embedded
// meanwhile keeps its vector.
void ContextAssembler::embed_new(Session& s, std::unique_lock<std::mutex>& lock, std::span<const uint32_t> candidates,
                                 const std::function<std::string_view(uint32_t)>& text, AssembleStats& st) {
    constexpr size_t kBatch = 64, kProbe = 4;
    constexpr auto kReprobe = std::chrono::seconds(30);
    std::vector<uint32_t> todo;
    for (uint32_t c : candidates)
        if (!s.dense.has(c)) todo.push_back(c);
    std::sort(todo.begin(), todo.end(), std::greater<>());
    std::vector<std::string_view> texts(todo.size());
    for (size_t i = 0; i < todo.size(); ++i) texts[i] = text(todo[i]);
    const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(0, retrieval_.dense_budget_ms));
    std::vector<std::vector<float>> vectors;
    lock.unlock();
    while (vectors.size() < todo.size()) {
        const double left_s = std::chrono::duration<double>(deadline - Clock::now()).count();
        if (left_s <= 0) break;
        const double rate = embed_rate_.load(std::memory_order_relaxed);
        double fit = rate > 0 ? std::floor(rate * left_s) : static_cast<double>(kProbe);
        if (fit < 1) {
            // Not one passage would be back in time at the measured rate. The rate may be stale
            // (a cold lane, a queue): one passage every kReprobe measures it again, so a slow
            // stretch does not turn dense retrieval off for good.
            const int64_t now = Clock::now().time_since_epoch().count();
            int64_t last = embed_reprobe_.load(std::memory_order_relaxed);
            const auto gap = std::chrono::duration_cast<Clock::duration>(kReprobe).count();
            if (now - last < gap || !embed_reprobe_.compare_exchange_strong(last, now)) break;
            fit = 1;
        }
        const size_t n = std::min({kBatch, todo.size() - vectors.size(), static_cast<size_t>(std::min(fit, 1e6))});
        std::vector<std::vector<float>> v;
        const auto t0 = Clock::now();
        try {
            v = retrieval_.embedder->embed_passages(std::span<const std::string_view>(texts).subspan(vectors.size(), n));
        } catch (const std::exception&) {
            break;  // the lane is down or late: BM25 goes on alone for what has no vector
        }
        if (v.size() != n) break;
        const double dt = std::max(1e-6, std::chrono::duration<double>(Clock::now() - t0).count());
        const double sample = static_cast<double>(n) / dt;
        embed_rate_.store(rate > 0 ? 0.7 * rate + 0.3 * sample : sample, std::memory_order_relaxed);
        for (auto& x : v) vectors.push_back(std::move(x));
    }
    lock.lock();
    std::vector<uint32_t> stored;
    for (size_t i = 0; i < vectors.size(); ++i)
        if (!s.dense.has(todo[i])) {
            s.dense.set(todo[i], vectors[i]);
            stored.push_back(todo[i]);
        }
    if (store_ != nullptr) store_->put_vectors(s, stored);
    st.chunks_embedded = static_cast<int>(vectors.size());
    st.chunks_unembedded = static_cast<int>(todo.size() - vectors.size());
}

AssembleResult ContextAssembler::assemble(std::string_view scope, const Conversation& conv, const AssembleOptions& opt) {
    const auto t_start = Clock::now();
    AssembleResult result;
    AssembleStats& st = result.stats;
    const size_t n = conv.messages.size();
    const int64_t budget = opt.budget_tokens;

    const std::vector<uint64_t> chain = conversation_chain(scope, conv);

    auto t = Clock::now();
    Acquired a = acquire(scope, chain);
    Session& s = *a.session;
    st.session_hit = a.hit;
    st.ms_session = ms_since(t);
    const size_t stored_before = s.n_messages();
    t = Clock::now();
    st.chunks_new = extend(s, conv, chain);
    st.ms_chunk_count = ms_since(t);
    t = Clock::now();
    if (store_ != nullptr && s.n_messages() > stored_before) {
        if (s.id() == 0) store_->create(s, a.parent, a.shared);
        else store_->append(s, stored_before);
    } else if (store_ != nullptr && s.id() != 0) {
        store_->touch(s.id());
    }
    cache_->put(a.session, indexing_.cache_space);  // registers new messages' hashes (a.session is already the cached object)
    st.ms_index = ms_since(t);
    st.chunks_total = static_cast<int>(s.n_chunks());
    st.retrieval = "bm25";  // until the ranking says which it used

    // Token counts: the system prompt's is cached per conversation; a message's is exact when
    // it was one chunk, else made exact (counted whole) where the decision depends on it.
    const uint64_t system_hash = hash_bytes(conv.system);
    if (s.system_tokens < 0 || s.system_hash != system_hash) {
        s.system_tokens = count_(conv.system);
        s.system_hash = system_hash;
    }
    const int64_t system_tokens = s.system_tokens;
    auto exact = [&](size_t i) {
        if (!s.message(i).exact) s.set_exact_tokens(i, count_(conv.messages[i].text));
        return s.message(i).tokens;
    };
    auto approx = [&](size_t i) { return s.message(i).tokens; };
    auto countable = [&](size_t i) { return approx(i) <= 2 * budget + 1024; };  // worth an exact count

    int64_t total = system_tokens;
    for (size_t i = 0; i < n; ++i) total += approx(i);
    if (total <= budget + budget / 10 + 64) {
        total = system_tokens;
        for (size_t i = 0; i < n; ++i) total += exact(i);
    }
    st.tokens_in = total;
    auto finish = [&] {
        st.ms_total = ms_since(t_start);
        return std::move(result);
    };
    if (total <= budget) {
        st.tokens_out = total;
        return finish();
    }
    result.abridged = true;
    if (n == 0) {  // a system prompt alone over the budget
        result.fits = false;
        st.tokens_out = system_tokens;
        return finish();
    }

    // Turns: where a verbatim tail may begin; labels number them.
    std::vector<size_t> starts;
    for (size_t i = 0; i < n; ++i)
        if (conv.messages[i].turn_start) starts.push_back(i);
    if (starts.empty()) {  // no turns marked: the last user message, else the last message
        size_t last = n - 1;
        for (size_t i = n; i > 0; --i)
            if (conv.messages[i - 1].role == "user") {
                last = i - 1;
                break;
            }
        starts.push_back(last);
    }
    std::vector<int> turn_no(n, 1);
    for (size_t i = 0, k = 0; i < n; ++i) {
        while (k < starts.size() && starts[k] <= i) ++k;
        turn_no[i] = std::max<int>(1, static_cast<int>(k));
    }

    const size_t last_turn = starts.back();
    const int64_t avail = budget - system_tokens - kNoteReserve;
    int64_t verbatim = 0;
    bool last_fits = avail > 0;
    for (size_t i = last_turn; i < n && last_fits; ++i) {
        if (!countable(i)) last_fits = false;
        else verbatim += exact(i);
    }
    last_fits = last_fits && verbatim <= avail;

    size_t first_verbatim = last_turn;
    std::optional<size_t> split;
    uint32_t mid_begin = 0, mid_end = 0;  // the split message's chunks not kept verbatim (head before, tail after)
    int64_t excerpt_budget = 0;
    std::vector<uint32_t> candidates, visible;
    if (last_fits) {
        // Earlier whole turns while they fit the recent window.
        const auto recent = static_cast<int64_t>(opt.recent_fraction * static_cast<double>(budget));
        for (size_t k = starts.size() - 1; k > 0; --k) {
            int64_t turn = 0;
            bool ok = true;
            for (size_t i = starts[k - 1]; i < starts[k] && ok; ++i) {
                if (!countable(i)) ok = false;
                else turn += exact(i);
            }
            if (!ok || verbatim + turn > std::min(recent, avail)) break;
            verbatim += turn;
            first_verbatim = starts[k - 1];
        }
        excerpt_budget = avail - verbatim;
        for (uint32_t c = 0; c < s.chunk_range(first_verbatim).first; ++c) candidates.push_back(c);
        for (uint32_t c = s.chunk_range(first_verbatim).first; c < s.chunk_range(n - 1).second; ++c) visible.push_back(c);
    } else {
        // Split the largest message of the last turn: head and tail verbatim, middle retrieved.
        size_t big = last_turn;
        for (size_t i = last_turn; i < n; ++i)
            if (approx(i) > approx(big)) big = i;
        int64_t others = 0;
        bool ok = avail > 0;
        for (size_t i = last_turn; i < n && ok; ++i) {
            if (i == big) continue;
            if (!countable(i)) ok = false;
            else others += exact(i);
        }
        const int64_t room = avail - others;
        if (!ok || room < 64) {
            result.fits = false;
            result.first_verbatim = last_turn;
            st.tokens_out = system_tokens + others + approx(big);
            return finish();
        }
        split = big;
        int64_t head = opt.huge_message_head_tokens > 0 ? opt.huge_message_head_tokens : budget / 8;
        int64_t tail = opt.huge_message_tail_tokens > 0 ? opt.huge_message_tail_tokens : budget / 8;
        if (head + tail > room * 6 / 10) {  // keep at least 40 % of the room for excerpts
            const double f = static_cast<double>(room) * 0.6 / static_cast<double>(head + tail);
            head = static_cast<int64_t>(static_cast<double>(head) * f);
            tail = static_cast<int64_t>(static_cast<double>(tail) * f);
        }
        const auto [first, end] = s.chunk_range(big);
        uint32_t hc = first, tc = end;
        int64_t used = 0;
        while (hc < tc && used + s.chunk(hc).tokens <= head) used += s.chunk(hc++).tokens;
        int64_t used_tail = 0;
        while (tc > hc && used_tail + s.chunk(tc - 1).tokens <= tail) used_tail += s.chunk(--tc).tokens;
        mid_begin = hc;
        mid_end = tc;
        verbatim = others;
        excerpt_budget = room - used - used_tail;
        for (uint32_t c = 0; c < s.chunk_range(last_turn).first; ++c) candidates.push_back(c);
        for (uint32_t c = hc; c < tc; ++c) candidates.push_back(c);
        for (uint32_t c = s.chunk_range(last_turn).first; c < s.chunk_range(n - 1).second; ++c)
            if (c < hc || c >= tc) visible.push_back(c);
    }
    result.first_verbatim = first_verbatim;
    result.split_message = split;

    auto chunk_text = [&](uint32_t c) {
        const ChunkRecord& r = s.chunk(c);
        return std::string_view(conv.messages[r.message].text).substr(r.offset, r.length);
    };
    if (retrieval_.embedder) {
        t = Clock::now();
        embed_new(s, a.lock, candidates, chunk_text, st);
        st.ms_embed = ms_since(t);
        if (st.chunks_embedded > 0) cache_->put(a.session, indexing_.cache_space);  // re-measured with its vectors
    }

    // Retrieval: the query is the latest user turn's question (found inside a paste, question.h).
    t = Clock::now();
    std::vector<QueryPart> query;
    add_question_parts(conv.messages[last_turn].text, query);
    if (n - 1 != last_turn) add_query_parts(conv.messages[n - 1].text, kExtraQueryBytes, 0.5, query);
    int64_t candidate_tokens = 0;
    for (uint32_t c : candidates) candidate_tokens += s.chunk(c).tokens;
    const int64_t mean_chunk =
        candidates.empty() ? 1 : std::max<int64_t>(1, candidate_tokens / static_cast<int64_t>(candidates.size()));
    const size_t pool = static_cast<size_t>(std::max<int64_t>(0, 2 * excerpt_budget / mean_chunk));
    const RetrievalOutput ranked = retrieve(s, candidates, visible, query, pool, chunk_text, retrieval_);
    st.retrieval = ranked.mode;

    // Fill the excerpt budget greedily in rank order.
    // A pick's cost: a whole chunk's count, or a fact sentence's estimate (the final count checks).
    auto cost_of = [&](const RankedChunk& r) {
        return r.end > r.begin
                   ? estimate_tokens(
                         std::string_view(conv.messages[s.chunk(r.chunk).message].text).substr(r.begin, r.end - r.begin)) +
                         1
                   : static_cast<int64_t>(s.chunk(r.chunk).tokens);
    };
    std::vector<RankedChunk> chosen;  // in rank order: the last ones go first when trimming
    {
        std::vector<bool> labelled(n, false);
        int64_t used = 0;
        for (const RankedChunk& r : ranked.ranked) {
            const ChunkRecord& c = s.chunk(r.chunk);
            const int64_t cost = cost_of(r) + (labelled[c.message] ? kJoinCost : kLabelCost);
            if (used + cost > excerpt_budget) continue;
            used += cost;
            labelled[c.message] = true;
            chosen.push_back(r);
        }
    }
    st.ms_retrieve = ms_since(t);

    const int64_t older_tokens = [&] {
        int64_t v = 0;
        for (size_t i = 0; i < first_verbatim; ++i) v += approx(i);
        return v;
    }();
    auto render = [&](const std::vector<RankedChunk>& picks) {
        std::vector<RankedChunk> history, middle;
        for (const RankedChunk& r : picks) (split && s.chunk(r.chunk).message == *split ? middle : history).push_back(r);
        std::string block;
        if (first_verbatim > 0) {
            block = "[Earlier conversation abridged by the gateway: the first " +
                    thousands(static_cast<int64_t>(first_verbatim)) + " messages (about " + thousands(older_tokens) +
                    " tokens) are not shown in full. " +
                    (history.empty() ? std::string("No excerpts of them were found relevant to the latest request.]")
                                     : "Excerpts relevant to the latest request follow, in their original order.]");
            uint32_t current = UINT32_MAX;
            for (const Span& sp : merge_spans(s, history)) {
                if (sp.message != current) {
                    current = sp.message;
                    block += "\n\n[earlier turn " + std::to_string(turn_no[sp.message]) + ", " + conv.messages[sp.message].role +
                             "]\n";
                } else {
                    block += "\n[…]\n";
                }
                block += trim(std::string_view(conv.messages[sp.message].text).substr(sp.begin, sp.end - sp.begin));
            }
        }
        std::string split_out;
        if (split) {
            const std::string_view text = conv.messages[*split].text;
            const auto [first, end] = s.chunk_range(*split);
            const uint32_t head_end = mid_begin > first ? s.chunk(mid_begin - 1).offset + s.chunk(mid_begin - 1).length : 0;
            const uint32_t tail_begin = mid_end < end ? s.chunk(mid_end).offset : static_cast<uint32_t>(text.size());
            int64_t omitted = 0;
            for (uint32_t c = mid_begin; c < mid_end; ++c) omitted += s.chunk(c).tokens;
            split_out.assign(text.substr(0, head_end));
            if (!split_out.empty() && split_out.back() != '\n') split_out += '\n';
            split_out += "\n[… the gateway left out about " + thousands(omitted) + " tokens of this message here. " +
                         (middle.empty() ? std::string("None of that part was found relevant to the request.")
                                         : "Excerpts of that part relevant to the request follow, in their original order.") +
                         " …]\n";
            for (const Span& sp : merge_spans(s, middle)) {
                split_out += "\n[excerpt at " +
                             std::to_string(static_cast<int>(100.0 * sp.begin / std::max<size_t>(1, text.size()))) +
                             "% of this message]\n";
                split_out += trim(text.substr(sp.begin, sp.end - sp.begin));
                split_out += '\n';
            }
            split_out += "\n[… end of excerpts; the message ends with …]\n\n";
            split_out += text.substr(tail_begin);
        }
        return std::pair(std::move(block), std::move(split_out));
    };

    // Count the final texts; drop the lowest-ranked excerpts while they do not fit.
    for (int attempt = 0;; ++attempt) {
        auto [block, split_out] = render(chosen);
        int64_t out = count_(system_with_history(conv.system, block)) + (split ? count_(split_out) : 0);
        for (size_t i = first_verbatim; i < n; ++i)
            if (!split || i != *split) out += exact(i);
        if (out <= budget || attempt >= 12) {
            result.history_block = std::move(block);
            result.split_text = std::move(split_out);
            st.tokens_out = out;
            result.fits = out <= budget;
            break;
        }
        int64_t over = out - budget + 8;
        if (chosen.empty()) {
            // Only joins and notes are left to trim: shed verbatim text of the split message.
            const auto [first, end] = split ? s.chunk_range(*split) : std::pair<uint32_t, uint32_t>{0, 0};
            if (split && (mid_begin > first || mid_end < end)) {
                while (over > 0 && mid_begin > first) over -= s.chunk(--mid_begin).tokens;
                while (over > 0 && mid_end < end) over -= s.chunk(mid_end++).tokens;
            } else if (first_verbatim < last_turn) {
                first_verbatim = *std::upper_bound(starts.begin(), starts.end(), first_verbatim);
                result.first_verbatim = first_verbatim;
            } else {
                attempt = 12 - 1;  // nothing left to drop: report it does not fit
            }
            continue;
        }
        while (over > 0 && !chosen.empty()) {
            over -= cost_of(chosen.back()) + kJoinCost;
            chosen.pop_back();
        }
    }
    st.chunks_chosen = static_cast<int>(chosen.size());
    return finish();
}

}  // namespace strata::gateway
