// Tool calls cut by max_tokens at real token boundaries: a Hermes (Qwen3) and an XML (Qwen3.5 /
// Qwen3-Coder) call tokenized by the real Qwen3 tokenizer and decoded token by token as the engine
// does (tokenizer::StreamDecoder, flushed at the end), cut after every token. Streamed events and
// the whole answer agree at every cut, no markup reaches the text, and the call is there from the
// token that completes its name on, truncated until the last. Skipped without the fixture.
#include <gtest/gtest.h>

#include "serve/json_scanner.h"
#include "serve/output_parser.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace strata::test {
namespace {

using nlohmann::json;
using serve::OutputFormat;
using serve::ParsedOutput;
using serve::ParserOptions;

TEST(CutCallsAtTokens, EveryTokenOfAHermesAndAnXmlCall) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto& tok = qwen3_tokenizer();
    const std::string lead = "Writing it now.\n\n";
    struct Case {
        OutputFormat format;
        std::string call;
        std::string name_done;  // the call's text up to where its name is complete
    };
    ParserOptions xml_options;
    xml_options.parse_thinking = false;
    xml_options.tools = {{"write_file", json::parse(R"({"type": "object", "properties": {"path": {"type": "string"},
        "mode": {"type": "integer"}, "content": {"type": "string"}}})")}};
    const std::vector<Case> cases = {
        {OutputFormat::Qwen3Hermes,
         "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"src/é.py\", \"mode\": 420, \"content\": "
         "\"def f():\\n    return \\\"<tag>\\\"\\n\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"write_file\""},
        {OutputFormat::Qwen3CoderXml,
         "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/é.py\n</parameter>\n<parameter=mode>\n420\n</parameter>\n"
         "<parameter=content>\ndef f():\n    return \"<tag>\"\n</parameter>\n</function>\n</tool_call>",
         "<tool_call>\n<function=write_file>"},
    };
    for (const Case& c : cases) {
        const ParserOptions options = c.format == OutputFormat::Qwen3Hermes ? ParserOptions{} : xml_options;
        const std::vector<int32_t> ids = tok.encode(lead + c.call, true);  // <tool_call> is one token
        auto full_parser = serve::make_output_parser(c.format, options);
        const ParsedOutput full = serve::parse_whole(*full_parser, lead + c.call);
        ASSERT_EQ(full.tool_calls.size(), 1u);
        ASSERT_FALSE(full.tool_calls[0].truncated);
        const json full_args = json::parse(full.tool_calls[0].arguments_json);
        bool had_call = false;
        for (size_t k = 1; k <= ids.size(); ++k) {
            // The engine's pieces for the first k tokens: each token's decoded text, then the flush.
            tokenizer::StreamDecoder decoder(tok);
            std::vector<std::string> pieces;
            std::string text;
            for (size_t i = 0; i < k; ++i) pieces.push_back(decoder.push(ids[i]));
            pieces.push_back(decoder.flush());
            for (const auto& p : pieces) text += p;
            const std::string where =
                "cut after token " + std::to_string(k) + " of " + std::to_string(ids.size()) + ": " + json(text).dump();

            auto streamed = serve::make_output_parser(c.format, options);
            ParsedOutput from_events;
            for (const auto& p : pieces)
                for (const auto& e : streamed->push(p)) from_events.add(e);
            for (const auto& e : streamed->finish()) from_events.add(e);
            auto whole_parser = serve::make_output_parser(c.format, options);
            const ParsedOutput whole = serve::parse_whole(*whole_parser, text);
            ASSERT_EQ(from_events, whole) << where;

            if (text.size() <= lead.size()) continue;
            EXPECT_EQ(whole.content, "Writing it now.") << where;
            const bool name_done = text.size() >= lead.size() + c.name_done.size();
            ASSERT_EQ(whole.tool_calls.size(), name_done ? 1u : 0u) << where;
            if (!name_done) {
                EXPECT_FALSE(had_call) << where;
                continue;
            }
            had_call = true;
            const auto& call = whole.tool_calls[0];
            EXPECT_EQ(call.name, "write_file") << where;
            const bool body_done = text.size() >= lead.size() + c.call.size() - std::string("\n</tool_call>").size();
            EXPECT_EQ(call.truncated, !body_done) << where;
            if (!call.truncated) {
                EXPECT_EQ(json::parse(call.arguments_json), full_args) << where;
                continue;
            }
            // As far as it got: Hermes the model's JSON text (an object once closed), XML the
            // parameters so far closed into one object; values are the start of the whole call's.
            const json args = json::parse(c.format == OutputFormat::Qwen3Hermes ? serve::JsonCloser::close(call.arguments_json)
                                                                                : call.arguments_json);
            ASSERT_TRUE(args.is_object()) << where << " " << call.arguments_json;
            for (const auto& [key, v] : args.items()) {
                ASSERT_TRUE(full_args.contains(key)) << where;
                const std::string whole_value =
                    full_args[key].is_string() ? full_args[key].get<std::string>() : full_args[key].dump();
                if (!v.is_string()) continue;
                // A character cut between its tokens is flushed as U+FFFD, as the engine does.
                std::string got = v.get<std::string>();
                if (got.ends_with("\xEF\xBF\xBD")) got.resize(got.size() - 3);
                EXPECT_TRUE(whole_value.starts_with(got)) << where << " " << key;
            }
        }
        EXPECT_TRUE(had_call);
    }
}

}  // namespace
}  // namespace strata::test
