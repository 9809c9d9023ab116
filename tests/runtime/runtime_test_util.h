// Shared by the runtime tests: tiny made models (one per architecture, made once per process),
// a sink that records every event, and a loop that runs a scheduler until it is idle.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model_tools/make_model.h"
#include "runtime/scheduler.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace strata::runtime::test {

// A tiny random-weight model of `arch` with the builtin byte tokenizer, loaded on a 2-thread
// CPU backend. Made once per process and shared (tests must not change it).
struct TinyModel {
    std::unique_ptr<backend::CpuBackend> be;
    std::unique_ptr<model::Model> model;
    std::unique_ptr<tokenizer::Tokenizer> tok;
};

inline TinyModel& tiny_model(const std::string& arch) {
    static strata::test::TempDir dir;
    static std::map<std::string, TinyModel> models;
    auto it = models.find(arch);
    if (it != models.end()) return it->second;
    model_tools::MakeModelOptions o;
    o.arch = arch;
    o.type = "q8_0";
    o.seed = 11;
    const auto path = dir / (arch + ".gguf");
    model_tools::make_model(o, path);
    TinyModel m;
    m.be = std::make_unique<backend::CpuBackend>(2);
    m.model = model::Model::load(path, *m.be);
    m.tok = tokenizer::Tokenizer::from_gguf(m.model->file());
    return models.emplace(arch, std::move(m)).first->second;
}

struct Outcome {
    std::vector<int32_t> tokens;
    std::vector<GeneratedToken> details;
    std::string text;
    bool done = false;
    FinishReason reason = FinishReason::Error;
    Usage usage;
    std::string detail;
    int events_after_done = 0;
    // A prompt-only request's result (on_pooled).
    bool pooled = false;
    std::vector<float> hidden, token_logits;
};

class RecordingSink : public EventSink {
public:
    void on_tokens(const std::string& id, const std::vector<GeneratedToken>& toks, const std::string& text) override {
        Outcome& o = out[id];
        if (o.done) ++o.events_after_done;
        for (const auto& g : toks) {
            o.tokens.push_back(g.id);
            o.details.push_back(g);
        }
        o.text += text;
    }
    void on_pooled(const std::string& id, const std::vector<float>& hidden, const std::vector<float>& token_logits) override {
        Outcome& o = out[id];
        if (o.done) ++o.events_after_done;
        o.pooled = true;
        o.hidden = hidden;
        o.token_logits = token_logits;
    }
    void on_done(const std::string& id, FinishReason reason, const Usage& usage, const std::string& detail) override {
        Outcome& o = out[id];
        if (o.done) ++o.events_after_done;
        o.done = true;
        o.reason = reason;
        o.usage = usage;
        o.detail = detail;
    }
    std::map<std::string, Outcome> out;
};

// A scheduler small enough for the tiny models: several prefill chunks per prompt, 16 running,
// a little KV and snapshot memory, snapshots every 128 tokens.
inline SchedulerOptions small_options() {
    SchedulerOptions o;
    o.max_running = 16;
    o.max_batched_tokens = 160;
    o.prefill_chunk = 64;
    o.kv.kv_bytes = 64 << 20;
    o.kv.block_size = 16;
    o.kv.snapshot_bytes = 64 << 20;
    o.snapshot_interval = 128;
    return o;
}

inline void run_until_idle(Scheduler& s, int max_steps = 100000) {
    for (int i = 0; i < max_steps && s.has_work(); ++i) s.step();
    ASSERT_FALSE(s.has_work()) << "scheduler did not finish within " << max_steps << " steps";
}

// Deterministic pseudo-random prompt of n tokens over the byte range of the builtin vocab.
inline std::vector<int32_t> make_prompt(size_t n, uint32_t seed) {
    std::vector<int32_t> p(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& t : p) {
        x = x * 1664525u + 1013904223u;
        t = 32 + static_cast<int32_t>((x >> 16) % 90);  // printable ASCII bytes
    }
    return p;
}

inline Request greedy_request(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens) {
    Request r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    return r;
}

}  // namespace strata::runtime::test
