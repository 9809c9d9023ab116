// The expert store's flags, shared by generate, engine and serve (serve passes them on to its
// engine): --ram-budget, --expert-stats, --experts auto|on|off, --expert-slots, --expert-far.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "model/model.h"

namespace strata::cli {

struct ExpertFlags {
    std::string ram_budget, stats_file, mode = "auto";
    int64_t slots = -1;
    double far = -1;  // --expert-far; -1: the store's default
};

void add_expert_flags(CLI::App* cmd, ExpertFlags* f);
// Fills the load options (threads: the host executor's); throws an Error naming a bad flag.
void apply_expert_flags(const ExpertFlags& f, int threads, model::LoadOptions& lo);
// The same flags as engine arguments (for serve).
std::vector<std::string> expert_flag_args(const ExpertFlags& f);
// One line of the store's counters for the end of a run (empty without a store).
std::string expert_store_summary(const model::Model& m);

}  // namespace strata::cli
