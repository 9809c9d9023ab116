#include "gateway/context/fact_coverage.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "gateway/context/chunker.h"
#include "gateway/context/session.h"
#include "gateway/context/terms.h"

namespace strata::gateway {
namespace {

// English function words, and the words of asking ("answer", "text", "question") that say how
// to reply rather than what about.
const std::unordered_set<std::string_view>& function_words() {
    static const std::unordered_set<std::string_view> words = [] {
        std::unordered_set<std::string_view> w;
        static constexpr std::string_view list[] = {
            "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
            "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does",
            "doing", "done", "down", "during", "each", "either", "else", "ever", "every", "few", "for", "from", "further", "had",
            "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in",
            "into", "is", "it", "its", "itself", "just", "let", "me", "more", "most", "my", "myself", "no", "nor", "not", "now",
            "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own", "same", "she", "should", "so",
            "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they",
            "this", "those", "through", "to", "too", "under", "until", "up", "upon", "very", "was", "we", "were", "what", "when",
            "where", "which", "while", "who", "whom", "whose", "why", "will", "with", "would", "you", "your", "yours", "yourself",
            "shall", "may", "might", "must", "one", "ones", "s", "t", "via", "per", "etc", "yes", "don", "doesn", "isn", "wasn",
            "many", "much", "like", "get", "got", "back", "within", "without", "across", "along", "around", "among", "onto",
            "since", "still", "yet", "whether", "where's", "what's", "who's", "it's", "let's", "ago", "later", "earlier", "first",
            "last", "next", "previous",
            // asking and replying
            "answer", "answers", "question", "questions", "please", "read", "reading", "text", "texts", "document", "documents",
            "pasted", "paste", "following", "based", "tell", "explain", "describe", "summarise", "summarize", "list", "word",
            "words", "carefully", "briefly", "short", "exactly", "sentence", "sentences", "reply", "respond", "using", "use",
            "according", "given", "mentioned", "say", "says", "said", "know", "think", "find", "show", "remind", "check", "look",
            "help", "need", "want", "thanks", "thank", "ok", "okay", "sure", "hi", "hello"};
        for (std::string_view s : list) w.insert(s);
        return w;
    }();
    return words;
}

bool is_word_byte(unsigned char c) {
    return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
}

// How a word is written where it occurs: what tells a name ("Mary", "Apple Inc.") from a common
// noun ("the apple"), and a word from a part of an identifier ("TkMacOSXInitAppleEvents").
enum Form : uint8_t {
    kLower = 1,    // a whole word starting in lowercase
    kCap = 2,      // a whole word starting with a capital, not the first word
    kInitial = 4,  // the first word, capitalised (a name or just a sentence start)
    kPart = 8,     // a part of a longer identifier
};

// Calls f(term, form) for the entity-like terms of text: each raw word's terms (terms.h), minus
// function words and one-letter ASCII words.
template <class F>
void for_each_content_term(std::string_view text, F&& f) {
    size_t i = 0;
    bool first_word = true;
    while (i < text.size()) {
        while (i < text.size() && !is_word_byte(static_cast<unsigned char>(text[i]))) ++i;
        size_t j = i;
        while (j < text.size() && is_word_byte(static_cast<unsigned char>(text[j]))) ++j;
        if (j == i) break;
        const std::string_view raw = text.substr(i, j - i);
        const bool cap = raw[0] >= 'A' && raw[0] <= 'Z';
        const uint8_t whole = cap ? (first_word ? kInitial : kCap) : kLower;
        bool first_term = true;
        for_each_term(raw, [&](std::string_view t) {
            const uint8_t form = first_term ? whole : static_cast<uint8_t>(kPart);
            first_term = false;
            if (t.size() < 2 && static_cast<unsigned char>(t[0]) < 0x80) return;
            if (function_words().count(t) != 0) return;
            f(term_hash(t), form);
        });
        first_word = false;
        i = j;
    }
}

bool is_name(uint8_t form) { return (form & (kCap | kInitial)) != 0; }

// How well an occurrence written `found` matches an entity asked as a name or not: a common noun
// asked ("the apple") is matched weakly by a capitalised one ("Apple Inc.") or an identifier's part.
double form_credit(bool name, uint8_t found) {
    if (name) return (found & (kCap | kInitial)) ? 1.0 : (found & kLower) ? 0.6 : 0.35;
    return (found & (kLower | kInitial)) ? 1.0 : 0.35;
}

struct Sentence {
    uint32_t chunk;
    uint32_t begin, end;          // bytes of the chunk text: what is excerpted
    std::vector<uint64_t> terms;  // distinct content terms, ascending: what is matched
    std::vector<uint8_t> forms;   // how each is written there (Form bits)
};

struct Entity {
    double weight = 0;
    bool name = false;
};

constexpr size_t kLongSentence = 200;  // bytes: a longer "sentence" with line breaks is split into lines

bool ends_sentence(std::string_view line) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r' || line.back() == '\n'))
        line.remove_suffix(1);
    if (line.empty()) return true;
    const char c = line.back();
    return c == '.' || c == '!' || c == '?' || c == ':' || c == ';' || static_cast<unsigned char>(c) >= 0x80;
}

// The fact units of a chunk: its sentences; a long one that runs over line breaks (text without
// sentence punctuation: manuals, code, a statement inserted between lines) is split into lines,
// each excerpted with the line after it when it does not end a sentence (a hard-wrapped one).
std::vector<std::pair<uint32_t, uint32_t>> fact_units(std::string_view t, std::vector<std::pair<uint32_t, uint32_t>>& excerpts) {
    std::vector<std::pair<uint32_t, uint32_t>> units;
    excerpts.clear();
    for (const auto& [b, e] : split_sentences(t)) {
        const std::string_view sentence = t.substr(b, e - b);
        const size_t first_nl = sentence.find('\n');
        if (e - b <= kLongSentence || first_nl == std::string_view::npos || first_nl + 1 >= sentence.size()) {
            units.emplace_back(b, e);
            excerpts.emplace_back(b, e);
            continue;
        }
        std::vector<std::pair<uint32_t, uint32_t>> lines;
        for (uint32_t at = b; at < e;) {
            const size_t nl = t.find('\n', at);
            const uint32_t end = nl == std::string_view::npos || nl + 1 > e ? e : static_cast<uint32_t>(nl + 1);
            lines.emplace_back(at, end);
            at = end;
        }
        for (size_t i = 0; i < lines.size(); ++i) {
            units.push_back(lines[i]);
            const bool wraps = !ends_sentence(t.substr(lines[i].first, lines[i].second - lines[i].first)) && i + 1 < lines.size();
            excerpts.emplace_back(lines[i].first, wraps ? lines[i + 1].second : lines[i].second);
        }
    }
    return units;
}

struct Fact {
    uint32_t sentence;  // index into the sentence table
    double score;
};

double term_overlap(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
    size_t i = 0, j = 0, both = 0;
    while (i < a.size() && j < b.size()) {
        if (a[i] < b[j]) ++i;
        else if (a[i] > b[j]) ++j;
        else ++both, ++i, ++j;
    }
    const size_t either = a.size() + b.size() - both;
    return either == 0 ? 0.0 : static_cast<double>(both) / static_cast<double>(either);
}

}  // namespace

bool is_function_word(std::string_view w) { return function_words().count(w) != 0; }

CoveredFacts cover_facts(const Session& session, std::span<const uint8_t> kind, std::span<const QueryPart> question,
                         const ChunkTextFn& text, const CoverageOptions& o) {
    CoveredFacts out;
    const Bm25Index& index = session.index();
    const uint32_t n_chunks = index.n_chunks();
    if (n_chunks == 0 || question.empty()) return out;
    const uint32_t max_df = std::max(o.min_max_df, static_cast<uint32_t>(o.max_df_share * static_cast<double>(n_chunks)));
    // Names recur in real text (authors in copyright notices): a capitalised word may be commoner.
    const uint32_t max_df_name =
        std::max(o.min_max_df, static_cast<uint32_t>(o.max_df_share_names * static_cast<double>(n_chunks)));
    const double idf_rare = std::log(1.0 + (static_cast<double>(n_chunks) - 0.5) / 1.5);  // idf of a word in one chunk

    // Hop 0's entities.
    std::unordered_map<uint64_t, Entity> entities;
    std::unordered_set<uint64_t> seen;  // entities of every hop (a later hop does not repeat them)
    for (const QueryPart& p : question)
        for_each_content_term(p.text, [&](uint64_t t, uint8_t form) {
            const bool cap = is_name(form);
            const uint32_t df = index.df(t);
            if (df == 0 || df > (cap ? max_df_name : max_df)) return;
            const double w = p.weight * index.idf(t) * (cap ? 1.5 : 1.0);
            Entity& e = entities[t];
            if (w > e.weight) e = {w, cap};
        });
    out.entities = static_cast<int>(entities.size());
    if (entities.empty()) return out;

    // Sentences of the chunks holding an entity, split once and kept across hops.
    std::vector<Sentence> sentences;
    std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> split;  // chunk -> its sentences [first, end)
    auto sentences_of = [&](uint32_t c) {
        auto [it, fresh] = split.try_emplace(c);
        if (fresh) {
            const std::string_view t = text(c);
            const auto first = static_cast<uint32_t>(sentences.size());
            std::vector<std::pair<uint32_t, uint32_t>> excerpts;
            const auto units = fact_units(t, excerpts);
            for (size_t u = 0; u < units.size(); ++u) {
                const auto [b, e] = units[u];
                Sentence s{c, excerpts[u].first, excerpts[u].second, {}, {}};
                std::vector<std::pair<uint64_t, uint8_t>> found;
                for_each_content_term(t.substr(b, e - b), [&](uint64_t term, uint8_t form) { found.emplace_back(term, form); });
                std::sort(found.begin(), found.end());
                for (const auto& [term, form] : found) {
                    if (!s.terms.empty() && s.terms.back() == term) s.forms.back() |= form;
                    else {
                        s.terms.push_back(term);
                        s.forms.push_back(form);
                    }
                }
                sentences.push_back(std::move(s));
            }
            it->second = {first, static_cast<uint32_t>(sentences.size())};
        }
        return it->second;
    };

    std::unordered_map<uint32_t, double> fact_score;  // sentence -> best score over the hops
    double total = 0;
    for (const auto& [t, e] : entities) total += e.weight;
    for (int hop = 0; hop <= o.hops && !entities.empty(); ++hop) {
        // Keep the hop's strongest entities.
        std::vector<std::pair<double, uint64_t>> ranked;
        for (const auto& [t, e] : entities) ranked.emplace_back(e.weight, t);
        std::sort(ranked.begin(), ranked.end(), std::greater<>());
        if (ranked.size() > static_cast<size_t>(o.max_entities)) ranked.resize(static_cast<size_t>(o.max_entities));
        std::unordered_map<uint64_t, Entity> weight;
        for (const auto& [w, t] : ranked) {
            weight[t] = entities[t];
            seen.insert(t);
        }
        // Chunks holding them, the strongest entity's first: when the sentence bound is reached,
        // what is left out are the weakest leads, not the latest chunks.
        std::vector<uint32_t> chunks;
        size_t budget = o.max_facts > sentences.size() ? o.max_facts - sentences.size() : 0;
        std::unordered_set<uint32_t> listed;
        for (const auto& [w, t] : ranked) {
            const auto posts = index.postings(t);
            if (posts.size() > budget) break;
            for (const Bm25Index::Posting& p : posts)
                if (kind[p.chunk] != 0 && listed.insert(p.chunk).second) chunks.push_back(p.chunk);
            budget -= posts.size();
        }
        std::sort(chunks.begin(), chunks.end());
        std::vector<Fact> found;
        for (uint32_t c : chunks) {
            const auto [first, end] = sentences_of(c);
            for (uint32_t s = first; s < end; ++s) {
                double held = 0;
                const Sentence& f = sentences[s];
                for (size_t k = 0; k < f.terms.size(); ++k)
                    if (const auto it = weight.find(f.terms[k]); it != weight.end())
                        held += it->second.weight * form_credit(it->second.name, f.forms[k]);
                if (held <= 0) continue;
                // Hop 0: the share of the question held; later hops: the entity weights held, at
                // most what the hop's best entity carries.
                double score = hop == 0 ? held / total : std::min(held, ranked.front().first);
                // A fact is a statement: a long run of material naming an entity in passing ranks lower.
                const size_t n_terms = sentences[s].terms.size();
                if (n_terms > 16) score /= 1.0 + 0.02 * static_cast<double>(n_terms - 16);
                found.push_back({s, score});
            }
        }
        for (const Fact& f : found) {
            double& s = fact_score[f.sentence];
            s = std::max(s, f.score);
        }
        if (hop == o.hops) break;
        // The next hop's entities: the rare words of this hop's best facts.
        std::sort(found.begin(), found.end(), [&](const Fact& a, const Fact& b) {
            return a.score != b.score ? a.score > b.score : sentences[a.sentence].chunk > sentences[b.sentence].chunk;
        });
        if (found.size() > static_cast<size_t>(o.max_sources)) found.resize(static_cast<size_t>(o.max_sources));
        entities.clear();
        for (const Fact& f : found) {
            const Sentence& s = sentences[f.sentence];
            const std::string_view t = text(s.chunk).substr(s.begin, s.end - s.begin);
            std::vector<std::pair<uint64_t, bool>> words;
            for_each_content_term(t, [&](uint64_t term, uint8_t form) {
                const bool cap = is_name(form);
                if (form == kPart || seen.count(term) != 0) return;
                const uint32_t df = index.df(term);
                // A lead is specific: a word in more than max_df / 2 chunks leads nowhere in
                // particular. A name may be commoner (max_df_name, as in the question): real text
                // names its authors ("John" in copyright notices), and the person a fact names is
                // the lead a chain needs ("John got the milk" -> where John went).
                if (df == 0 || df > (cap ? max_df_name : max_df / 2)) return;
                words.emplace_back(term, cap);
            });
            // A fact's weight is shared among the words it leads to: a short statement ("Daniel
            // picked up the football") leads to Daniel more surely than a long sentence of the
            // material that happens to name the football leads to any of its words.
            const double share = std::min(1.0, 4.0 / static_cast<double>(std::max<size_t>(1, words.size())));
            for (const auto& [term, cap] : words) {
                const double rarity = std::sqrt(index.idf(term) / idf_rare);
                const double w = f.score * o.decay * share * rarity * (cap ? 1.0 : 0.5);
                Entity& e = entities[term];
                if (w > e.weight) e = {w, cap};
            }
        }
    }
    if (fact_score.empty()) return out;

    // The tier: facts at least tier_share of the best, later ones first among equals.
    double best = 0;
    for (const auto& [s, v] : fact_score) best = std::max(best, v);
    std::vector<Fact> tier;
    for (const auto& [s, v] : fact_score)
        if (v >= o.tier_share * best) {
            const double position = static_cast<double>(sentences[s].chunk) / static_cast<double>(n_chunks);
            tier.push_back({s, v * (0.95 + 0.05 * position)});
        }
    std::sort(tier.begin(), tier.end(),
              [&](const Fact& a, const Fact& b) { return a.score != b.score ? a.score > b.score : a.sentence > b.sentence; });
    out.facts = static_cast<int>(tier.size());

    // MMR over the best facts: a repeated or near-identical statement waits for distinct ones.
    const size_t n_mmr = std::min(tier.size(), o.max_mmr);
    std::vector<double> max_sim(n_mmr, 0.0);
    std::vector<bool> taken(n_mmr, false);
    std::vector<uint32_t> order;
    order.reserve(tier.size());
    for (size_t step = 0; step < n_mmr; ++step) {
        size_t pick = n_mmr;
        double pick_score = -1e300;
        for (size_t i = 0; i < n_mmr; ++i) {
            if (taken[i]) continue;
            const double v = o.mmr_lambda * tier[i].score - (1.0 - o.mmr_lambda) * max_sim[i];
            if (v > pick_score) {
                pick_score = v;
                pick = i;
            }
        }
        taken[pick] = true;
        order.push_back(tier[pick].sentence);
        for (size_t i = 0; i < n_mmr; ++i)
            if (!taken[i])
                max_sim[i] =
                    std::max(max_sim[i], term_overlap(sentences[tier[i].sentence].terms, sentences[tier[pick].sentence].terms));
    }
    for (size_t i = n_mmr; i < tier.size(); ++i) order.push_back(tier[i].sentence);

    for (uint32_t s : order) {
        const Sentence& f = sentences[s];
        if (kind[f.chunk] != 1) continue;
        // As bytes of the message; a sentence cut by a chunk boundary is completed from the
        // neighbouring chunk (at most kLongSentence bytes either way).
        const ChunkRecord& r = session.chunk(f.chunk);
        uint32_t begin = r.offset + f.begin, end = r.offset + f.end;
        if (f.begin == 0 && f.chunk > 0 && session.chunk(f.chunk - 1).message == r.message) {
            const std::string_view prev = text(f.chunk - 1);
            size_t k = prev.size();
            while (k > 0 && prev.size() - k < kLongSentence && prev[k - 1] != '\n' &&
                   !((prev[k - 1] == '.' || prev[k - 1] == '!' || prev[k - 1] == '?') && k < prev.size() &&
                     (prev[k] == ' ' || prev[k] == '\n')))
                --k;
            if (k > 0 && prev.size() - k < kLongSentence) begin -= static_cast<uint32_t>(prev.size() - k);
        }
        const std::string_view unit = text(f.chunk).substr(f.begin, f.end - f.begin);
        if (f.end == r.length && !ends_sentence(unit) && f.chunk + 1 < session.n_chunks() &&
            session.chunk(f.chunk + 1).message == r.message) {
            const std::string_view next = text(f.chunk + 1);
            size_t k = 0;
            while (k < next.size() && k < kLongSentence && next[k] != '\n' &&
                   !((next[k] == '.' || next[k] == '!' || next[k] == '?') &&
                     (k + 1 == next.size() || next[k + 1] == ' ' || next[k + 1] == '\n')))
                ++k;
            if (k < next.size() && k < kLongSentence) end += static_cast<uint32_t>(k + 1);
        }
        out.picks.push_back({f.chunk, 1.0, begin, end});
    }
    return out;
}

}  // namespace strata::gateway
