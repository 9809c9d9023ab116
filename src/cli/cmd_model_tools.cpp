// `strata make-model ...` and `strata quantize IN OUT TYPE`.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "model/architecture.h"
#include "model_tools/make_model.h"
#include "model_tools/quant_mix.h"
#include "model_tools/quantize_model.h"
#include "util/error.h"
#include "util/progress.h"

namespace strata::cli {

namespace {

std::string mix_list() {
    std::string s;
    for (const auto& n : model_tools::quant_mix_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
}

}  // namespace

void add_model_tool_commands(CLI::App& app, Runner& run) {
    // make-model
    struct MakeArgs {
        model_tools::MakeModelOptions o;
        std::string out;
        int64_t layers = 0, embd = 0, heads = 0, kv = 0, head_dim = 0, experts = 0, used = 0, ff = 0, shexp = 0, ctx = 0;
    };
    auto m = std::make_shared<MakeArgs>();
    std::string presets = "Presets (--arch --preset):";
    for (const auto& p : model_tools::model_presets())
        presets += std::string("\n  ") + p.arch + " " + p.preset->name + ": " + p.preset->what;
    CLI::App* mk = app.add_subcommand("make-model", "Write a random-weight model of a given architecture and geometry");
    mk->footer(presets);
    mk->add_option("OUT", m->out, "output .gguf")->required();
    std::string archs;  // "a, b or c"
    const auto table = model::architectures();
    for (size_t i = 0; i < table.size(); ++i)
        archs += std::string(i == 0 ? "" : i + 1 == table.size() ? " or " : ", ") + table[i]->name;
    mk->add_option("--arch", m->o.arch, archs)->capture_default_str();
    mk->add_option("--preset", m->o.preset, "geometry preset (see above)")->capture_default_str();
    mk->add_option("--type", m->o.type, "quantisation mix: " + mix_list())->capture_default_str();
    mk->add_option("--tokenizer", m->o.tokenizer,
                   "'builtin', a GGUF file to copy the tokenizer from, or a transformers tokenizer folder (tokenizer.json, "
                   "tokenizer_config.json)")
        ->capture_default_str();
    mk->add_option("--chat-template", m->o.chat_template_file, "a Jinja file to use as tokenizer.chat_template")
        ->check(CLI::ExistingFile);
    mk->add_option("--eos-bias", m->o.eos_bias,
                   "qwen3moe: weight of a constant feature that makes eos likely at every step, so random replies end by "
                   "themselves (test models for API clients)");
    mk->add_option("--router-skew", m->o.router_skew,
                   "MoE: Zipf exponent S >= 0 of expert popularity: every layer's router picks the expert of rank r (a "
                   "random order per layer) about in proportion to r^-S, for expert-cache measurements (0: off, the "
                   "near-uniform routing of random weights)")
        ->capture_default_str();
    mk->add_option("--layers", m->layers, "override: layers");
    mk->add_option("--embd", m->embd, "override: hidden size");
    mk->add_option("--heads", m->heads, "override: attention heads");
    mk->add_option("--kv-heads", m->kv, "override: key/value heads");
    mk->add_option("--head-dim", m->head_dim, "override: head size");
    mk->add_option("--experts", m->experts, "override: experts");
    mk->add_option("--experts-used", m->used, "override: experts per token");
    mk->add_option("--ff-exp", m->ff, "override: expert hidden size");
    mk->add_option("--ff-shexp", m->shexp, "override: shared expert hidden size");
    mk->add_option("--ctx", m->ctx, "override: context length");
    mk->add_flag("--untied", m->o.untied, "separate output head (default: tied to the embedding)");
    mk->add_option("--seed", m->o.seed, "random seed")->capture_default_str();
    mk->add_option("--init", m->o.init, "auto, quantize or blocks (random valid blocks; fast for huge models)")
        ->capture_default_str();
    mk->add_option("-t,--threads", m->o.threads, "threads")->capture_default_str();
    mk->callback([&run, m] {
        run = [m] {
            auto opt = [](int64_t v) { return v > 0 ? std::optional<int64_t>(v) : std::nullopt; };
            m->o.layers = opt(m->layers);
            m->o.embd = opt(m->embd);
            m->o.heads = opt(m->heads);
            m->o.kv_heads = opt(m->kv);
            m->o.head_dim = opt(m->head_dim);
            m->o.experts = opt(m->experts);
            m->o.experts_used = opt(m->used);
            m->o.ff_exp = opt(m->ff);
            m->o.ff_shexp = opt(m->shexp);
            m->o.ctx = opt(m->ctx);
            Progress prog("make-model " + m->out);
            m->o.progress = [&prog](uint64_t d, uint64_t t, const std::string& name) { prog.update(d, t, name); };
            const uint64_t params = model_tools::make_model(m->o, m->out);
            prog.finish("wrote " + std::to_string(params) + " parameters (" + m->o.arch + " " + m->o.preset + ", " + m->o.type +
                        ")");
            return 0;
        };
    });

    // quantize
    struct QuantArgs {
        std::string in, out, type;
        int threads = 2;
    };
    auto q = std::make_shared<QuantArgs>();
    CLI::App* qz = app.add_subcommand("quantize", "Re-encode a model's weights with a quantisation mix");
    qz->add_option("IN", q->in, "input .gguf")->required();
    qz->add_option("OUT", q->out, "output .gguf")->required();
    qz->add_option("TYPE", q->type, "mix: " + mix_list())->required();
    qz->add_option("-t,--threads", q->threads, "threads")->capture_default_str();
    qz->callback([&run, q] {
        run = [q] {
            Progress prog("quantize " + q->out);
            model_tools::QuantizeOptions o;
            o.mix = q->type;
            o.threads = q->threads;
            o.progress = [&prog](uint64_t d, uint64_t t, const std::string& name) { prog.update(d, t, name); };
            const auto r = model_tools::quantize_model(q->in, q->out, o);
            char buf[256];
            std::snprintf(buf, sizeof buf, "%zu of %zu tensors re-encoded, %.1f MiB -> %.1f MiB", r.quantized, r.tensors,
                          static_cast<double>(r.bytes_in) / (1 << 20), static_cast<double>(r.bytes_out) / (1 << 20));
            prog.finish(buf);
            return 0;
        };
    });
}

}  // namespace strata::cli
