// Shared by the tokenizer tests: the Qwen3 vocabulary from the GGUF fixture, corpus files and
// the reference ids in tests/tokenizer/ref (written by tools/ref/tokenizer_refs.{mjs,py}).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace strata::test {

inline std::filesystem::path qwen3_gguf() { return fixture("hf-tiny/qwen3moe/qwen3moe-bf16.gguf"); }

// Loaded once per test binary (151,936 tokens take a moment).
inline const tokenizer::Tokenizer& qwen3_tokenizer() {
    static const std::unique_ptr<tokenizer::Tokenizer> tok = [] {
        const auto f = gguf::File::open(qwen3_gguf());
        return tokenizer::Tokenizer::from_gguf(*f);
    }();
    return *tok;
}

inline std::filesystem::path tokenizer_test_dir() { return std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "tokenizer"; }

inline std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + p.string());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Lines split on '\n' only (a final empty piece dropped), as the reference scripts split them.
inline std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        lines.push_back(text.substr(pos, end - pos));
        pos = end + 1;
    }
    return lines;
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p) {
    std::vector<nlohmann::json> out;
    for (const std::string& line : split_lines(read_file(p)))
        if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    return out;
}

inline std::string ids_text(const std::vector<int32_t>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(ids[i]);
    }
    s += ']';
    return s;
}

// Text with control characters and non-ASCII shown as escapes, for failure messages.
inline std::string escaped(const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

}  // namespace strata::test

#include "gguf/gguf_writer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace strata::test {

// A tiny byte-level vocabulary that every test machine can build:
//   0..255  one token per byte, in byte order ("Ġ" for 0x20, ...)
//   256..264 he, ll, hell, hello, Ġw, or, Ġwor, ld, Ġworld   (merges in this rank order)
//   265 <|end|> (control, eos)   266 <think> (user-defined)   267 [PAD267] (unused)   268 <|e (user-defined)
struct TinyVocab {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    std::vector<std::string> merges;
    std::string model = "gpt2", pre = "qwen2";

    TinyVocab() {
        for (int b = 0; b < 256; ++b) {
            std::string s;
            tokenizer::utf8::append_code_point(s, tokenizer::byte_to_code_point(static_cast<uint8_t>(b)));
            tokens.push_back(s);
        }
        merges = {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"};
        for (const char* t : {"he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld"}) tokens.push_back(t);
        types.assign(tokens.size(), 1);
        for (const auto& [t, type] :
             std::vector<std::pair<std::string, int32_t>>{{"<|end|>", 3}, {"<think>", 4}, {"[PAD267]", 5}, {"<|e", 4}}) {
            tokens.push_back(t);
            types.push_back(type);
        }
    }

    static constexpr int32_t kHello = 259, kWorld = 264, kEnd = 265, kThink = 266, kPad = 267, kEndPrefix = 268;

    // Writes the vocabulary as a GGUF file (no tensors); `extra` sets or replaces keys.
    void write(const std::filesystem::path& path, const std::vector<std::pair<std::string, gguf::Value>>& extra = {}) const {
        gguf::Writer w;
        w.set("general.architecture", gguf::Value::of_string("qwen3moe"));
        w.set("tokenizer.ggml.model", gguf::Value::of_string(model));
        w.set("tokenizer.ggml.pre", gguf::Value::of_string(pre));
        w.set("tokenizer.ggml.tokens", gguf::Value::of_strings(tokens));
        w.set("tokenizer.ggml.token_type", gguf::Value::of_i32s(types));
        w.set("tokenizer.ggml.merges", gguf::Value::of_strings(merges));
        w.set("tokenizer.ggml.eos_token_id", gguf::Value::of_u32(kEnd));
        w.set("tokenizer.ggml.add_bos_token", gguf::Value::of_bool(false));
        for (const auto& [k, v] : extra) w.set(k, v);
        w.write_all(path, {});
    }

    std::unique_ptr<tokenizer::Tokenizer> load(const TempDir& dir) const {
        const auto path = dir / "tiny.gguf";
        write(path);
        const auto f = gguf::File::open(path);
        return tokenizer::Tokenizer::from_gguf(*f);
    }
};

}  // namespace strata::test
