#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>

#include "gguf/gguf.h"
#include "tokenizer/normalize.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/utf8.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace strata::tokenizer {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) { return std::make_unique<Tokenizer>(load_vocab(file)); }

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)), bpe_(vocab_) {
    for (int32_t id = 0; id < vocab_.size(); ++id) {
        const std::string& t = vocab_.bytes[id];
        if (!vocab_.is_added(id) || t.empty()) continue;
        const auto first = static_cast<uint8_t>(t[0]);
        added_by_first_byte_[first].push_back(id);
        added_first_byte_[first] = true;
        if (t.find('\n') != std::string::npos) added_contain_newline_ = true;
    }
    for (auto& ids : added_by_first_byte_) {
        // Longest first; equal text keeps the lower id (what a dictionary of added tokens would).
        std::stable_sort(ids.begin(), ids.end(),
                         [&](int32_t a, int32_t b) { return vocab_.bytes[a].size() > vocab_.bytes[b].size(); });
    }
}

void Tokenizer::check_id(int32_t id) const {
    if (!valid(id))
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(vocab_.size() - 1) +
                    ")");
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    check_id(id);
    return vocab_.bytes[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
    check_id(id);
    return vocab_.types[id];
}

std::pair<size_t, int32_t> Tokenizer::find_added(std::string_view text, size_t from) const {
    for (size_t i = from; i < text.size(); ++i) {
        const auto b = static_cast<uint8_t>(text[i]);
        if (!added_first_byte_[b]) continue;
        for (const int32_t id : added_by_first_byte_[b]) {
            const std::string& t = vocab_.bytes[id];
            if (text.size() - i >= t.size() && std::memcmp(text.data() + i, t.data(), t.size()) == 0) return {i, id};
        }
    }
    return {text.size(), -1};
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out, BpeScratch& scratch,
                             std::string& nfc_storage) const {
    if (text.empty()) return;
    const std::string_view normalized = pre_tokenizer_uses_nfc(vocab_.pre) ? nfc(text, nfc_storage) : text;
    PieceScanner scanner(vocab_.pre, normalized);
    for (std::string_view piece; scanner.next(piece);) bpe_.encode(piece, out, scratch);
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out, bool parse_special) const {
    BpeScratch scratch;
    std::string nfc_storage;
    if (!parse_special) {
        encode_plain(text, out, scratch, nfc_storage);
        return;
    }
    size_t pos = 0;
    while (pos < text.size()) {
        const auto [start, id] = find_added(text, pos);
        encode_plain(text.substr(pos, start - pos), out, scratch, nfc_storage);
        if (id < 0) break;
        out.push_back(id);
        pos = start + vocab_.bytes[id].size();
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 8);
    encode_append(text, out, parse_special);
    return out;
}

std::vector<int32_t> Tokenizer::encode_parallel(std::string_view text, int n_threads, bool parse_special) const {
    constexpr size_t kMinPart = 16 * 1024;  // below this, thread start-up costs more than it saves
    if (n_threads <= 1 || text.size() < 2 * kMinPart || (parse_special && added_contain_newline_))
        return encode(text, parse_special);

    // A few parts per thread so that uneven parts (dense CJK next to ASCII) still balance.
    const size_t n_wanted = static_cast<size_t>(n_threads) * 4;
    const size_t target = std::max(kMinPart, text.size() / n_wanted);
    std::vector<size_t> cuts{0};
    for (size_t from = target; from < text.size();) {
        const void* nl = std::memchr(text.data() + from, '\n', text.size() - from);
        if (!nl) break;
        const size_t pos = static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1;
        if (!is_safe_cut(text, pos)) {
            from = pos;
            continue;
        }
        cuts.push_back(pos);
        from = pos + target;
    }
    cuts.push_back(text.size());
    const size_t n_parts = cuts.size() - 1;
    if (n_parts == 1) return encode(text, parse_special);

    std::vector<std::vector<int32_t>> parts(n_parts);
    util::ThreadPool pool(std::min<int>(n_threads, static_cast<int>(n_parts)), /*spin_us=*/0);
    pool.parallel_for(static_cast<int64_t>(n_parts), [&](int64_t k, int) {
        const auto i = static_cast<size_t>(k);
        parts[i] = encode(text.substr(cuts[i], cuts[i + 1] - cuts[i]), parse_special);
    });
    size_t total = 0;
    for (const auto& p : parts) total += p.size();
    std::vector<int32_t> out;
    out.reserve(total);
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string raw;
    for (const int32_t id : ids) {
        check_id(id);
        raw += vocab_.bytes[id];
    }
    std::string out;
    out.reserve(raw.size());
    utf8::append_lossy(out, raw);
    return out;
}

std::string StreamDecoder::push(int32_t id) {
    pending_ += tok_.token_bytes(id);
    std::string out;
    const size_t held = utf8::append_lossy(out, pending_, /*hold_back_tail=*/true);
    pending_.erase(0, pending_.size() - held);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out;
    utf8::append_lossy(out, pending_);
    pending_.clear();
    return out;
}

}  // namespace strata::tokenizer
