#include "cli/expert_flags.h"

#include <cstdio>

#include "devices/backend_factory.h"
#include "util/error.h"

namespace strata::cli {

void add_expert_flags(CLI::App* cmd, ExpertFlags* f) {
    cmd->add_option("--ram-budget", f->ram_budget,
                    "host RAM the experts may hold, e.g. 32G (default: all of them); below their size the rest is read "
                    "from the file on demand");
    cmd->add_option("--expert-stats", f->stats_file,
                    "expert hit statistics: read at start for the first placement (if the file exists), written at exit");
    cmd->add_option("--experts", f->mode,
                    "expert store: auto (when the weights exceed the VRAM budget, or with --ram-budget/--expert-stats), "
                    "on, off")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    cmd->add_option("--expert-slots", f->slots, "VRAM expert slots per layer (default: what the budget leaves)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
    cmd->add_option("--expert-far", f->far,
                    "share of the missing experts the GPU reads in place from host RAM in decode; the rest run on the CPU "
                    "(default: tuned from the decode steps' times, starting from the measured speeds)")
        ->check(CLI::Range(0.0, 1.0));
}

void apply_expert_flags(const ExpertFlags& f, int threads, model::LoadOptions& lo) {
    using Mode = model::LoadOptions::ExpertStoreMode;
    if (f.mode != "auto" && f.mode != "on" && f.mode != "off") throw Error("--experts must be auto, on or off");
    if (f.far > 1.0) throw Error("--expert-far must be between 0 and 1 (or negative: the default)");
    lo.expert_store = f.mode == "on" ? Mode::On : f.mode == "off" ? Mode::Off : Mode::Auto;
    if (!f.ram_budget.empty()) {
        try {
            lo.store.ram_budget = devices::parse_byte_size(f.ram_budget);
        } catch (const Error& e) {
            throw Error(std::string("--ram-budget: ") + e.what());
        }
        if (lo.store.ram_budget == 0) throw Error("--ram-budget must be positive");
    }
    lo.store.stats_file = f.stats_file;
    lo.store.slots_per_layer = f.slots;
    lo.store.n_threads = threads;
    lo.store.far_fraction = f.far;
    if (lo.expert_store == Mode::Off && (!f.ram_budget.empty() || !f.stats_file.empty() || f.slots >= 0 || f.far >= 0))
        throw Error("--experts off contradicts --ram-budget, --expert-stats, --expert-slots and --expert-far");
}

std::vector<std::string> expert_flag_args(const ExpertFlags& f) {
    std::vector<std::string> out;
    if (!f.ram_budget.empty()) out.insert(out.end(), {"--ram-budget", f.ram_budget});
    if (!f.stats_file.empty()) out.insert(out.end(), {"--expert-stats", f.stats_file});
    if (f.mode != "auto") out.insert(out.end(), {"--experts", f.mode});
    if (f.slots >= 0) out.insert(out.end(), {"--expert-slots", std::to_string(f.slots)});
    if (f.far >= 0) out.insert(out.end(), {"--expert-far", std::to_string(f.far)});
    return out;
}

std::string expert_store_summary(const model::Model& m) {
    const experts::ExpertStore* s = m.expert_store();
    if (s == nullptr) return {};
    const experts::StoreStats st = s->stats();
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "experts: %.1f %% of %llu pairs from VRAM, %llu read in place from host memory, %llu on the host executor "
                  "(%.1f MiB read, %.2f s busy), %llu re-placed, %llu brought back from the file",
                  100.0 * st.hit_rate(), static_cast<unsigned long long>(st.pairs_vram + st.pairs_host + st.pairs_far),
                  static_cast<unsigned long long>(st.pairs_far), static_cast<unsigned long long>(st.pairs_host),
                  static_cast<double>(st.host_bytes) / (1 << 20), st.host_busy_s,
                  static_cast<unsigned long long>(st.replacements), static_cast<unsigned long long>(st.file_reads));
    return buf;
}

}  // namespace strata::cli
