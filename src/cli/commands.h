// Subcommands of the strata binary. Each registers its flags on the CLI11 app and returns the
// callback that runs it; main.cpp only dispatches.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace strata::cli {

using Runner = std::function<int()>;

// `strata gguf info|dequant ...`
void add_gguf_commands(CLI::App& app, Runner& run);

}  // namespace strata::cli
