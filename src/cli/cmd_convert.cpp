// `strata convert HF_DIR OUT.gguf [--outtype f32|f16|bf16|q8_0|auto] [--no-mtp] [--quiet]`:
// a transformers checkpoint of Qwen3-MoE / Qwen3-Next / Qwen3.5-MoE -> GGUF (src/convert/).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "convert/convert.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct ConvertArgs {
    std::string hf_dir, out, outtype = "auto";
    bool no_mtp = false;
    bool quiet = false;
};

int run_convert(const ConvertArgs& a) {
    const auto type = convert::parse_outtype(a.outtype);
    if (!type) throw Error("--outtype: '" + a.outtype + "' is not one of f32, f16, bf16, q8_0, auto");
    convert::ConvertOptions opts;
    opts.outtype = *type;
    opts.include_mtp = !a.no_mtp;
    if (!a.quiet)
        opts.log = [](const std::string& line) {
            std::fprintf(stderr, "convert: %s\n", line.c_str());
            std::fflush(stderr);
        };
    convert::convert_checkpoint(a.hf_dir, a.out, opts);
    return 0;
}

}  // namespace

void add_convert_command(CLI::App& app, Runner& run) {
    auto a = std::make_shared<ConvertArgs>();
    CLI::App* cmd = app.add_subcommand(
        "convert", "Convert a transformers checkpoint (Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE; safetensors) to GGUF");
    cmd->add_option("hf_dir", a->hf_dir, "checkpoint directory (config.json, *.safetensors, tokenizer.json)")->required();
    cmd->add_option("out", a->out, "output .gguf file (written as OUT.tmp, renamed when complete)")->required();
    cmd->add_option("--outtype", a->outtype,
                    "tensor type for matrices: f32, f16, bf16, q8_0, or auto (the checkpoint's bf16/f16)")
        ->capture_default_str();
    cmd->add_flag("--no-mtp", a->no_mtp, "leave out multi-token-prediction (MTP) tensors");
    cmd->add_flag("-q,--quiet", a->quiet, "no progress on stderr");
    cmd->callback([a, &run]() { run = [a]() { return run_convert(*a); }; });
}

}  // namespace strata::cli
