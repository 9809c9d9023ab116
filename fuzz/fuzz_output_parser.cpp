// libFuzzer target over the model-output parsers: any text, cut into pieces anywhere, must parse
// without crashing into a well-formed event stream (calls numbered in order, arguments only inside
// a call, a completed call's arguments one JSON object), and the merged events must not depend on
// the cuts: one piece, one-byte pieces and random pieces all agree, or the target aborts.
//
// Input: the first byte picks the options (bits 0-1 the format: 0 Plain, 1 Hermes, 2-3 XML;
// 4 starts_in_thinking; 8 no thinking; 16 no tools; 32 a tools list with schemas), the rest is the
// model's output. The cuts come from a generator seeded by the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "serve/json_scanner.h"
#include "serve/output_parser.h"

namespace {

using namespace strata::serve;
using Kind = OutputEvent::Kind;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_output_parser: %s\n", what);
    std::abort();
}

const std::vector<ToolSpec>& tools() {
    static const std::vector<ToolSpec> specs = {
        {"get_weather", nlohmann::json::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
            "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}, "v": {"type": ["number", "null"]}}})")},
        {"f", nlohmann::json::parse(R"({"type": "object", "properties": {"a": {"type": "object"}, "v": {"type": "string"}}})")}};
    return specs;
}

std::vector<OutputEvent> run(OutputFormat format, const ParserOptions& options, const std::vector<std::string_view>& pieces) {
    auto parser = make_output_parser(format, options);
    std::vector<OutputEvent> events;
    for (std::string_view piece : pieces)
        for (OutputEvent& e : parser->push(piece)) events.push_back(std::move(e));
    for (OutputEvent& e : parser->finish()) events.push_back(std::move(e));
    return events;
}

// Adjacent text events of one kind and call joined: what must not depend on the cuts.
std::vector<OutputEvent> merged(const std::vector<OutputEvent>& events) {
    std::vector<OutputEvent> out;
    for (const OutputEvent& e : events) {
        const bool text = e.kind == Kind::Reasoning || e.kind == Kind::Content || e.kind == Kind::ToolCallArguments;
        if (text && !out.empty() && out.back().kind == e.kind && out.back().index == e.index) out.back().text += e.text;
        else out.push_back(e);
    }
    return out;
}

void check_shape(const std::vector<OutputEvent>& events) {
    int open = -1, next = 0;
    std::string args;
    for (const OutputEvent& e : events) {
        switch (e.kind) {
            case Kind::Reasoning:
            case Kind::Content:
                if (open != -1) fail("text inside a call");
                if (e.text.empty()) fail("empty text event");
                break;
            case Kind::ToolCallBegin:
                if (open != -1 || e.index != next || e.name.empty()) fail("bad ToolCallBegin");
                open = next++;
                args.clear();
                break;
            case Kind::ToolCallArguments:
                if (e.index != open || e.text.empty()) fail("arguments outside their call");
                args += e.text;
                break;
            case Kind::ToolCallEnd: {
                if (e.index != open) fail("ToolCallEnd without its Begin");
                open = -1;
                if (e.truncated) {
                    if (!e.text.empty() || e.complete) fail("a truncated call with raw text");
                    break;
                }
                if (!e.complete) {
                    if (e.text.empty()) fail("failed call without its raw text");
                    break;
                }
                strata::serve::JsonScanner check;
                if (args.empty() || args.front() != '{' || !check.feed(args) || !check.complete())
                    fail("a complete call's arguments are not one JSON object");
                break;
            }
        }
    }
    if (open != -1) fail("a call left open");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t flags = data[0];
    const OutputFormat format = (flags & 3) == 0   ? OutputFormat::Plain
                                : (flags & 3) == 1 ? OutputFormat::Qwen3Hermes
                                                   : OutputFormat::Qwen3CoderXml;
    ParserOptions options;
    options.starts_in_thinking = flags & 4;
    options.parse_thinking = !(flags & 8);
    options.parse_tools = !(flags & 16);
    if (flags & 32) options.tools = tools();
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

    const std::vector<OutputEvent> whole = run(format, options, {text});
    check_shape(whole);
    const std::vector<OutputEvent> expected = merged(whole);

    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
    std::vector<OutputEvent> events = run(format, options, bytes);
    check_shape(events);
    if (merged(events) != expected) fail("one-byte pieces differ from one piece");

    uint64_t state = 0x9e3779b97f4a7c15ull;  // FNV-style hash of the input seeds the cuts
    for (size_t i = 0; i < size; ++i) state = (state ^ data[i]) * 0x100000001b3ull;
    for (int round = 0; round < 2; ++round) {
        std::vector<std::string_view> pieces;
        for (size_t at = 0; at < text.size();) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            const size_t n = 1 + state % (round == 0 ? 4 : 32);
            pieces.push_back(text.substr(at, n));
            at += std::min(n, text.size() - at);
        }
        events = run(format, options, pieces);
        check_shape(events);
        if (merged(events) != expected) fail("random pieces differ from one piece");
    }
    return 0;
}
