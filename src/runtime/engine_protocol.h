// The line protocol of `strata engine` (version 1, docs/protocol.md): one JSON object per line
// on stdin (commands) and on stdout (events). Parsing and formatting live here, apart from the
// process loop, so tests and the fuzzer drive them directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/request.h"
#include "runtime/scheduler.h"

namespace strata::runtime {

inline constexpr int kProtocolVersion = 1;
inline constexpr size_t kMaxLineBytes = size_t{64} << 20;  // longer command lines are refused
inline constexpr int kMaxJsonDepth = 64;                   // nesting of a command (schemas included)

struct Command {
    enum class Op { Submit, Cancel, Stats, Shutdown } op = Op::Stats;
    std::string id;   // submit/cancel: the request id; stats: echoed back when given
    Request request;  // submit
};

// What a line asks for, or an error message in the client's terms (and the id, when the line
// got far enough to name one). The tokenizer turns a "text" prompt into ids; token_index gives
// the vocabulary index constrained requests need (the scheduler builds it once).
struct ParsedLine {
    std::optional<Command> command;
    std::string error;
    std::string id;
};
ParsedLine parse_command(std::string_view line, Scheduler& scheduler);

// Events, each a complete JSON line (no trailing newline).
std::string ready_event(const Scheduler& s);
std::string tokens_event(const tokenizer::Tokenizer& tok, const std::string& id, const std::vector<GeneratedToken>& toks,
                         const std::string& text, bool with_logprobs);
std::string admitted_event(const std::string& id, int64_t cached_tokens);
std::string done_event(const std::string& id, FinishReason reason, const Usage& usage, const std::string& detail);
// A prompt-only request's result (request.h, Pooling), the line before its done.
std::string pooled_event(const std::string& id, const std::vector<float>& hidden, const std::vector<float>& token_logits);
std::string error_event(const std::string& id, const std::string& message);
std::string stats_event(const SchedulerStats& s, const std::string& id);

}  // namespace strata::runtime
