// libFuzzer target over the engine's line protocol: any line must be parsed into a command or an
// error message — and a submit that parses must run to its done event on a real (tiny) model
// without crashing, hanging or leaking KV memory.
#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "backend/cpu_backend.h"
#include "model/model.h"
#include "model_tools/make_model.h"
#include "runtime/engine_protocol.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using namespace strata;

struct World {
    std::unique_ptr<backend::CpuBackend> be;
    std::unique_ptr<model::Model> model;
    std::unique_ptr<tokenizer::Tokenizer> tok;
    std::unique_ptr<runtime::Scheduler> sched;
};

class CountingSink : public runtime::EventSink {
public:
    void on_tokens(const std::string&, const std::vector<runtime::GeneratedToken>&, const std::string&) override {}
    void on_done(const std::string&, runtime::FinishReason, const runtime::Usage&, const std::string&) override { ++done; }
    int done = 0;
};

World& world() {
    static World w = [] {
        World x;
        const auto path = std::filesystem::temp_directory_path() / ("strata-fuzz-engine-" + std::to_string(getpid()) + ".gguf");
        model_tools::MakeModelOptions o;
        o.type = "q8_0";
        o.layers = 2;
        model_tools::make_model(o, path);
        x.be = std::make_unique<backend::CpuBackend>(1);
        x.model = model::Model::load(path, *x.be);
        std::filesystem::remove(path);  // mapped already
        x.tok = tokenizer::Tokenizer::from_gguf(x.model->file());
        runtime::SchedulerOptions so;
        so.max_running = 4;
        so.max_batched_tokens = 128;
        so.max_context = 256;
        so.kv.kv_bytes = 8 << 20;
        x.sched = std::make_unique<runtime::Scheduler>(*x.model, *x.tok, so);
        return x;
    }();
    return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    World& w = world();
    const std::string line(reinterpret_cast<const char*>(data), size);
    runtime::ParsedLine p = runtime::parse_command(line, *w.sched);
    if (!p.command) {
        if (p.error.empty()) __builtin_trap();  // a refused line must say why
        return 0;
    }
    if (p.command->op != runtime::Command::Op::Submit) return 0;
    runtime::Request r = std::move(p.command->request);
    // Keep each run short: a few tokens.
    if (r.sampling.max_tokens < 0 || r.sampling.max_tokens > 4) r.sampling.max_tokens = 4;
    CountingSink sink;
    try {
        w.sched->submit(std::move(r), &sink);
    } catch (const strata::Error&) {
        return 0;
    }
    for (int i = 0; i < 64 && w.sched->has_work(); ++i) w.sched->step();
    if (w.sched->has_work() || sink.done != 1) __builtin_trap();   // every request ends exactly once
    if (w.sched->stats().kv_blocks_in_use != 0) __builtin_trap();  // and frees its memory
    return 0;
}
