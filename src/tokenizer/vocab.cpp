#include "tokenizer/vocab.h"

#include <string_view>

#include "gguf/gguf.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace strata::tokenizer {

namespace {

// Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space, DEL, NBSP,
// soft hyphen, ...) take the code points 256, 257, ... in byte order.
struct ByteAlphabet {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 324> to_byte{};  // code point -> byte, -1 when not in the alphabet

    ByteAlphabet() {
        to_byte.fill(-1);
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            to_cp[b] = printable ? b : next++;
            to_byte[to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const ByteAlphabet& alphabet() {
    static const ByteAlphabet a;
    return a;
}

// Token string in the byte alphabet -> raw bytes. A character outside the alphabet (which no
// byte-level tokenizer produces) is kept as its own UTF-8 bytes.
std::string decode_byte_level(std::string_view token) {
    const ByteAlphabet& a = alphabet();
    std::string out;
    out.reserve(token.size());
    const auto* p = reinterpret_cast<const uint8_t*>(token.data());
    const auto* end = p + token.size();
    while (p < end) {
        const utf8::Step s = utf8::step(p, end);
        if (s.status == utf8::Status::Ok && s.cp < a.to_byte.size() && a.to_byte[s.cp] >= 0) {
            out += static_cast<char>(a.to_byte[s.cp]);
        } else {
            out.append(reinterpret_cast<const char*>(p), s.len);
        }
        p += s.len;
    }
    return out;
}

// Token string -> id over the strings as stored, for resolving merges: open addressing on a
// 64-bit FNV-1a hash (std::unordered_map spends most of a 151k-token load chasing nodes).
class StringIds {
public:
    explicit StringIds(const std::vector<std::string>& strings) : strings_(strings) {
        size_t capacity = 16;
        while (capacity < strings.size() * 2) capacity <<= 1;
        slots_.assign(capacity, Slot{0, -1});
        mask_ = capacity - 1;
        for (size_t id = 0; id < strings.size(); ++id) {
            const uint64_t h = hash(strings[id]);
            size_t i = h & mask_;
            for (; slots_[i].id >= 0; i = (i + 1) & mask_) {
                if (slots_[i].hash == h && strings_[slots_[i].id] == strings[id]) break;  // a repeat keeps the first id
            }
            if (slots_[i].id < 0) slots_[i] = Slot{h, static_cast<int32_t>(id)};
        }
    }

    int32_t find(std::string_view s) const {
        const uint64_t h = hash(s);
        for (size_t i = h & mask_; slots_[i].id >= 0; i = (i + 1) & mask_)
            if (slots_[i].hash == h && strings_[slots_[i].id] == s) return slots_[i].id;
        return -1;
    }

private:
    struct Slot {
        uint64_t hash;
        int32_t id;  // -1: free
    };
    static uint64_t hash(std::string_view s) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
        return h ^ (h >> 29);
    }
    const std::vector<std::string>& strings_;
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

int32_t optional_id(const gguf::File& f, std::string_view key, int32_t n_vocab) {
    const auto v = f.opt_u32(key);
    if (!v) return -1;
    if (*v >= static_cast<uint32_t>(n_vocab))
        throw Error(f.path().string() + ": metadata key '" + std::string(key) + "' is " + std::to_string(*v) +
                    ", outside the vocabulary of " + std::to_string(n_vocab) + " tokens");
    return static_cast<int32_t>(*v);
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) { return alphabet().to_cp[b]; }

Vocab load_vocab(const gguf::File& f) {
    const std::string path = f.path().string();
    const std::string& model = f.get_string("tokenizer.ggml.model");
    if (model != "gpt2")
        throw Error(path + ": metadata key 'tokenizer.ggml.model' is '" + model + "'; only byte-level BPE ('gpt2') is supported");
    const auto pre_name = f.opt_string("tokenizer.ggml.pre");
    if (!pre_name)
        throw Error(path + ": metadata key 'tokenizer.ggml.pre' is missing (which pre-tokenizer the vocabulary needs)");
    const auto pre = pre_tokenizer_from_name(*pre_name);
    if (!pre)
        throw Error(path + ": metadata key 'tokenizer.ggml.pre' is '" + *pre_name +
                    "', a pre-tokenizer we do not implement (supported: qwen2, qwen35 and their aliases)");

    Vocab v;
    v.pre = *pre;
    const std::vector<std::string>& tokens = f.get_array("tokenizer.ggml.tokens", gguf::ValueType::STRING).arr_s;
    if (tokens.empty()) throw Error(path + ": metadata key 'tokenizer.ggml.tokens' is an empty array");
    if (tokens.size() > static_cast<size_t>(kMaxVocabSize))
        throw Error(path + ": metadata key 'tokenizer.ggml.tokens' has " + std::to_string(tokens.size()) +
                    " entries, more than the " + std::to_string(kMaxVocabSize) + " we support");
    const auto n_vocab = static_cast<int32_t>(tokens.size());

    v.types.assign(tokens.size(), TokenType::Normal);
    if (f.has("tokenizer.ggml.token_type")) {
        const std::vector<int64_t> types = f.get_ints("tokenizer.ggml.token_type");
        if (types.size() != tokens.size())
            throw Error(path + ": metadata key 'tokenizer.ggml.token_type' has " + std::to_string(types.size()) +
                        " entries for " + std::to_string(tokens.size()) + " tokens");
        for (size_t i = 0; i < types.size(); ++i) {
            if (types[i] < 0 || types[i] > 6)
                throw Error(path + ": metadata key 'tokenizer.ggml.token_type' has type " + std::to_string(types[i]) +
                            " for token " + std::to_string(i) + " (expected 0..6)");
            v.types[i] = static_cast<TokenType>(types[i]);
        }
    }

    v.bytes.resize(tokens.size());
    for (int32_t id = 0; id < n_vocab; ++id) {
        const std::string& t = tokens[id];
        switch (v.types[id]) {
            case TokenType::Control:
            case TokenType::UserDefined: v.bytes[id] = t; break;
            case TokenType::Unused: break;
            default: v.bytes[id] = decode_byte_level(t); break;
        }
    }
    const StringIds by_string(tokens);

    v.byte_token.fill(-1);
    for (uint32_t b = 0; b < 256; ++b) {
        std::string s;
        utf8::append_code_point(s, byte_to_code_point(static_cast<uint8_t>(b)));
        const int32_t id = by_string.find(s);
        if (id >= 0 && !v.is_added(id)) v.byte_token[b] = id;
    }

    if (f.has("tokenizer.ggml.merges")) {
        const std::vector<std::string>& merges = f.get_array("tokenizer.ggml.merges", gguf::ValueType::STRING).arr_s;
        v.merges.reserve(merges.size());
        std::string joined;
        for (size_t rank = 0; rank < merges.size(); ++rank) {
            const std::string& m = merges[rank];
            const size_t space = m.find(' ');
            const auto bad = [&](const std::string& why) {
                return Error(path + ": metadata key 'tokenizer.ggml.merges' entry " + std::to_string(rank) + " ('" + m + "') " +
                             why);
            };
            if (space == std::string::npos || space == 0 || space + 1 == m.size()) throw bad("is not 'LEFT RIGHT'");
            const std::string_view left(m.data(), space), right(m.data() + space + 1, m.size() - space - 1);
            const int32_t l = by_string.find(left), r = by_string.find(right);
            if (l < 0 || r < 0) throw bad("names a token that is not in the vocabulary");
            joined.assign(left);
            joined.append(right);
            const int32_t result = by_string.find(joined);
            if (result < 0) throw bad("makes a token that is not in the vocabulary");
            v.merges.push_back({l, r, result});
        }
    }

    v.bos = optional_id(f, "tokenizer.ggml.bos_token_id", n_vocab);
    v.eos = optional_id(f, "tokenizer.ggml.eos_token_id", n_vocab);
    v.pad = optional_id(f, "tokenizer.ggml.padding_token_id", n_vocab);
    v.eot = optional_id(f, "tokenizer.ggml.eot_token_id", n_vocab);
    v.unk = optional_id(f, "tokenizer.ggml.unknown_token_id", n_vocab);
    v.add_bos = f.opt_bool("tokenizer.ggml.add_bos_token").value_or(false);
    v.add_eos = f.opt_bool("tokenizer.ggml.add_eos_token").value_or(false);
    if (v.add_bos && v.bos < 0)
        throw Error(path + ": metadata key 'tokenizer.ggml.add_bos_token' is true but 'tokenizer.ggml.bos_token_id' is missing");
    if (v.add_eos && v.eos < 0)
        throw Error(path + ": metadata key 'tokenizer.ggml.add_eos_token' is true but 'tokenizer.ggml.eos_token_id' is missing");
    return v;
}

}  // namespace strata::tokenizer
