// `strata generate -m MODEL (--prompt TEXT | --tokens a,b,c) -n N [--temp T] [--seed S]
//  [--dump-logits OUT.f32] [--json] [--threads N] [--device cpu|cuda] [--vram-budget SIZE]
//  [--ram-budget SIZE] [--expert-stats FILE] [--experts auto|on|off] [--expert-slots N] [--expert-far F]`: one
//  sequence, prefill then decode.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/expert_flags.h"
#include "devices/backend_factory.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct GenerateArgs {
    std::string model, prompt, tokens, dump_logits;
    int n_predict = 16;
    float temp = 0.0f;
    uint64_t seed = 0;
    bool json = false;
    bool chat = false;
    bool think = false;
    int threads = 2;
    int64_t ctx = 0;
    std::string device = "cpu", vram_budget;
    ExpertFlags experts;
};

std::vector<int32_t> parse_token_list(const std::string& s) {
    std::vector<int32_t> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        try {
            size_t used = 0;
            const long v = std::stol(item, &used);
            if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
            out.push_back(static_cast<int32_t>(v));
        } catch (const std::exception&) {
            throw Error("--tokens: '" + item + "' is not a token id");
        }
    }
    if (out.empty()) throw Error("--tokens: no token ids given");
    return out;
}

// Greedy at temperature 0 (ties to the lower id); otherwise softmax(logits / temp) sampling.
int32_t pick_token(const float* logits, int64_t n_vocab, float temp, std::mt19937_64& rng) {
    int64_t best = 0;
    for (int64_t i = 1; i < n_vocab; ++i)
        if (logits[i] > logits[best]) best = i;
    if (temp <= 0.0f) return static_cast<int32_t>(best);
    std::vector<double> p(static_cast<size_t>(n_vocab));
    double sum = 0;
    for (int64_t i = 0; i < n_vocab; ++i) sum += (p[static_cast<size_t>(i)] = std::exp((logits[i] - logits[best]) / temp));
    std::uniform_real_distribution<double> u(0.0, sum);
    double r = u(rng);
    for (int64_t i = 0; i < n_vocab; ++i) {
        r -= p[static_cast<size_t>(i)];
        if (r <= 0) return static_cast<int32_t>(i);
    }
    return static_cast<int32_t>(best);
}

int run_generate(const GenerateArgs& a) {
    using clock = std::chrono::steady_clock;
    if (a.prompt.empty() == a.tokens.empty()) throw Error("give exactly one of --prompt and --tokens");
    if (a.n_predict < 0) throw Error("-n must not be negative");
    devices::BackendOptions bo;
    bo.device = a.device;
    bo.threads = a.threads;
    if (!a.vram_budget.empty()) bo.vram_budget = devices::parse_byte_size(a.vram_budget);
    const auto be = devices::make_backend(bo);
    const auto t_load = clock::now();
    model::LoadOptions lo;
    apply_expert_flags(a.experts, a.threads, lo);
    auto model = model::Model::load(a.model, *be, lo);
    const auto& cfg = model->config();
    std::fprintf(stderr, "loaded %s: %s, %lld layers, %lld experts (top %lld), %.1f MiB of weights, %.0f ms\n", a.model.c_str(),
                 cfg.arch_name.c_str(), static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_expert),
                 static_cast<long long>(cfg.n_expert_used), static_cast<double>(model->weight_bytes()) / (1 << 20),
                 std::chrono::duration<double, std::milli>(clock::now() - t_load).count());
    const auto tok = tokenizer::Tokenizer::from_gguf(model->file());
    if (a.chat && a.prompt.empty()) throw Error("--chat needs --prompt");
    std::string text_in = a.prompt;
    if (a.chat) {
        // The prompt becomes one user message rendered by the model's own chat template.
        const auto tmpl = tmpl::ChatTemplate::from_gguf(model->file());
        nlohmann::ordered_json request = {{"messages", {{{"role", "user"}, {"content", a.prompt}}}},
                                          {"add_generation_prompt", true},
                                          {"enable_thinking", a.think}};
        text_in = tmpl.render(request);
    }
    std::vector<int32_t> prompt = a.tokens.empty() ? tok->encode(text_in) : parse_token_list(a.tokens);
    if (prompt.empty()) throw Error("the prompt encodes to no tokens");
    for (int32_t t : prompt)
        if (t >= cfg.n_vocab)
            throw Error("token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(cfg.n_vocab) + ")");
    const int64_t ctx = a.ctx > 0 ? a.ctx : static_cast<int64_t>(prompt.size()) + a.n_predict;
    if (static_cast<int64_t>(prompt.size()) + a.n_predict > ctx)
        throw Error("prompt (" + std::to_string(prompt.size()) + " tokens) + -n " + std::to_string(a.n_predict) +
                    " exceeds --ctx " + std::to_string(ctx));
    auto seq = model->new_sequence(ctx);
    std::fprintf(stderr, "sequence state: %.2f MiB for %lld positions\n", static_cast<double>(seq->bytes()) / (1 << 20),
                 static_cast<long long>(ctx));
    model::SequenceState* s = seq.get();

    std::vector<float> logits(static_cast<size_t>(cfg.n_vocab));
    model::Batch b;
    for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
    const auto t_prefill = clock::now();
    model->forward(b, {&s, 1}, logits.data());
    const double prefill_ms = std::chrono::duration<double, std::milli>(clock::now() - t_prefill).count();
    if (!a.dump_logits.empty()) {
        std::ofstream out(a.dump_logits, std::ios::binary);
        out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
        if (!out) throw Error(a.dump_logits + ": write failed");
    }

    std::mt19937_64 rng(a.seed);
    std::vector<int32_t> generated;
    tokenizer::StreamDecoder dec(*tok);
    std::string text;
    const auto t_decode = clock::now();
    for (int i = 0; i < a.n_predict; ++i) {
        const int32_t next = pick_token(logits.data(), cfg.n_vocab, a.temp, rng);
        generated.push_back(next);
        const std::string piece = dec.push(next);
        text += piece;
        if (!a.json) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        }
        if (i + 1 == a.n_predict) break;
        b.clear();
        b.add(next, static_cast<int32_t>(prompt.size() + generated.size() - 1), 0, true);
        model->forward(b, {&s, 1}, logits.data());
    }
    const std::string tail = dec.flush();
    text += tail;
    const double decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t_decode).count();
    if (a.json) {
        nlohmann::json out = {{"tokens", generated}, {"text", text}, {"prompt_tokens", prompt.size()}};
        std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::fwrite(tail.data(), 1, tail.size(), stdout);
        std::printf("\n");
    }
    std::fprintf(stderr, "prefill: %zu tokens in %.1f ms (%.1f t/s); decode: %zu tokens in %.1f ms (%.1f t/s)\n", prompt.size(),
                 prefill_ms, 1000.0 * static_cast<double>(prompt.size()) / prefill_ms, generated.size(), decode_ms,
                 generated.size() > 1 ? 1000.0 * static_cast<double>(generated.size() - 1) / decode_ms : 0.0);
    if (const std::string s = expert_store_summary(*model); !s.empty()) std::fprintf(stderr, "%s\n", s.c_str());
    return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, Runner& run) {
    auto a = std::make_shared<GenerateArgs>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text with a model (one sequence; --device cpu or cuda)");
    cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
    cmd->add_option("-p,--prompt", a->prompt, "prompt text (tokenised as-is, no template)");
    cmd->add_option("--tokens", a->tokens, "prompt as comma-separated token ids");
    cmd->add_option("-n,--n-predict", a->n_predict, "tokens to generate")->capture_default_str();
    cmd->add_option("--temp", a->temp, "sampling temperature (0: greedy)")->capture_default_str();
    cmd->add_option("--seed", a->seed, "random seed for sampling")->capture_default_str();
    cmd->add_option("--dump-logits", a->dump_logits, "write the last prompt position's logits (f32 LE)");
    cmd->add_flag("--json", a->json, "print {\"tokens\", \"text\"} as one JSON object");
    cmd->add_flag("--chat", a->chat, "wrap --prompt as a user message in the model's chat template");
    cmd->add_flag("--think", a->think, "with --chat: enable_thinking=true (default false)");
    cmd->add_option("-t,--threads", a->threads, "CPU threads")->capture_default_str();
    cmd->add_option("--ctx", a->ctx, "sequence capacity (default: prompt + n)");
    cmd->add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--vram-budget", a->vram_budget, "GPU memory the CUDA backend may use, e.g. 20G (default: free less 1 GiB)");
    add_expert_flags(cmd, &a->experts);
    cmd->callback([&run, a] { run = [a] { return run_generate(*a); }; });
}

}  // namespace strata::cli
