// Helpers for the converter tests: the committed transformers checkpoints, writing and rewriting
// safetensors files, running a converted model against reference.json.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "test_util.h"

namespace strata::convert::test {

namespace fs = std::filesystem;

inline fs::path hf_checkpoint(const std::string& name) { return fs::path(STRATA_SOURCE_DIR) / "tests/model/hf" / name; }

inline nlohmann::ordered_json read_json(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::ordered_json::parse(in);
}

inline void write_json(const fs::path& p, const nlohmann::ordered_json& j) {
    std::ofstream out(p);
    out << j.dump(1);
}

// One tensor to write: raw little-endian bytes of dtype.
struct StEntry {
    std::string name;
    std::string dtype;  // "F32", "BF16", ...
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

inline void write_safetensors(const fs::path& path, const std::vector<StEntry>& entries) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (const StEntry& e : entries) {
        header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
        offset += e.bytes.size();
    }
    std::string h = header.dump();
    while ((8 + h.size()) % 8 != 0) h += ' ';
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = h.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const StEntry& e : entries)
        out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
}

// Every tensor of a checkpoint directory, in file order, as writable entries.
inline std::vector<StEntry> load_entries(const fs::path& dir) {
    auto ck = Checkpoint::open(dir);
    std::vector<StEntry> out;
    for (const StTensor* t : ck->tensors())
        out.push_back({t->name, dtype_name(t->dtype), t->shape, std::vector<uint8_t>(t->data, t->data + t->n_bytes)});
    return out;
}

inline StEntry* find_entry(std::vector<StEntry>& v, const std::string& name) {
    for (StEntry& e : v)
        if (e.name == name) return &e;
    return nullptr;
}

// A copy of a committed checkpoint's side files (config, tokenizer, ...) into dir, without
// the safetensors.
inline void copy_side_files(const fs::path& from, const fs::path& dir) {
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(from)) {
        const std::string n = e.path().filename().string();
        if (n.ends_with(".safetensors") || n.ends_with(".f32") || n == "reference.json") continue;
        fs::copy_file(e.path(), dir / n, fs::copy_options::overwrite_existing);
    }
}

inline std::string read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

inline std::vector<float> read_f32_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
}

using strata::test::rel_l2;

// Logits of every position of a prompt (fresh sequence), [n_tokens][n_vocab].
inline std::vector<float> prompt_logits(model::Model& m, const std::vector<int32_t>& tokens, int64_t capacity = 256) {
    const int64_t n_vocab = m.config().n_vocab;
    auto seq = m.new_sequence(capacity);
    model::Batch b;
    for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, true);
    std::vector<float> logits(tokens.size() * static_cast<size_t>(n_vocab));
    model::SequenceState* s = seq.get();
    m.forward(b, {&s, 1}, logits.data());
    return logits;
}

struct Agreement {
    double last_rel_l2 = 0;   // last row vs last_logits_<k>.f32
    double max_top5_err = 0;  // |ours - reference| over every position's reference top 5
    int greedy_checked = 0;   // steps where our margin made the comparison meaningful
    int greedy_mismatch = 0;  // of those, steps whose argmax differs from the reference
};

// Runs reference prompt k: every position's top-5 logits, the last row, and the 16 greedy
// tokens teacher-forced along the reference continuation. The reference records no margins
// past the prompt, so a greedy step counts when our own top1 - top2 margin exceeds
// `tie_margin` (far above our numeric error): a near-tie may legitimately pick either token.

inline Agreement compare_with_reference(model::Model& m, const fs::path& ref_dir, size_t k, double tie_margin = 1e-3) {
    const auto ref = read_json(ref_dir / "reference.json");
    const auto& p = ref["prompts"][k];
    const auto tokens = p["tokens"].get<std::vector<int32_t>>();
    const int64_t n_vocab = m.config().n_vocab;
    Agreement a;
    const std::vector<float> logits = prompt_logits(m, tokens, static_cast<int64_t>(tokens.size()));
    for (size_t i = 0; i < tokens.size(); ++i)
        for (size_t j = 0; j < 5; ++j) {
            const int id = p["top5_ids"][i][j];
            const double want = p["top5_logits"][i][j];
            a.max_top5_err =
                std::max(a.max_top5_err, std::abs(logits[i * static_cast<size_t>(n_vocab) + static_cast<size_t>(id)] - want));
        }
    const auto last = read_f32_file(ref_dir / ("last_logits_" + std::to_string(k) + ".f32"));
    EXPECT_EQ(last.size(), static_cast<size_t>(n_vocab));
    a.last_rel_l2 = rel_l2(logits.data() + (tokens.size() - 1) * static_cast<size_t>(n_vocab), last.data(), last.size());

    const auto greedy = p["greedy"].get<std::vector<int32_t>>();
    auto seq = m.new_sequence(static_cast<int64_t>(tokens.size() + greedy.size()));
    model::SequenceState* s = seq.get();
    model::Batch b;
    for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, i + 1 == tokens.size());
    std::vector<float> row(static_cast<size_t>(n_vocab));
    m.forward(b, {&s, 1}, row.data());
    for (size_t step = 0; step < greedy.size(); ++step) {
        int64_t best = 0, second = -1;
        for (int64_t v = 1; v < n_vocab; ++v) {
            if (row[static_cast<size_t>(v)] > row[static_cast<size_t>(best)]) {
                second = best;
                best = v;
            } else if (second < 0 || row[static_cast<size_t>(v)] > row[static_cast<size_t>(second)]) {
                second = v;
            }
        }
        const double margin = row[static_cast<size_t>(best)] - row[static_cast<size_t>(second)];
        if (margin > tie_margin) {
            ++a.greedy_checked;
            if (best != greedy[step]) ++a.greedy_mismatch;
        }
        if (step + 1 == greedy.size()) break;
        b.clear();
        b.add(greedy[step], static_cast<int32_t>(tokens.size() + step), 0, true);
        m.forward(b, {&s, 1}, row.data());
    }
    return a;
}

}  // namespace strata::convert::test
