// strata: one binary, subcommands. Dispatch only; each command lives in src/cli/.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
    CLI::App app{"strata: serves Mixture-of-Experts language models from GGUF files", "strata"};
    app.require_subcommand(1);
    strata::cli::Runner run;
    strata::cli::add_gguf_commands(app, run);
    strata::cli::add_convert_command(app, run);
    strata::cli::add_template_command(app, run);
    strata::cli::add_tokenize_commands(app, run);
    strata::cli::add_generate_command(app, run);
    strata::cli::add_model_tool_commands(app, run);
    strata::cli::add_engine_command(app, run);
    strata::cli::add_serve_command(app, run);
    strata::cli::add_gateway_command(app, run);
    strata::cli::add_bench_commands(app, run);
    strata::cli::keep_process_args(argc, argv);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        return run ? run() : 0;
    } catch (const strata::Error& e) {
        std::fprintf(stderr, "strata: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "strata: internal error: %s\n", e.what());
        return 2;
    }
}
