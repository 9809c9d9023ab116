// Output parsers: Qwen3 (Hermes) and Qwen3-Coder / Qwen3.5 (XML) outputs with thinking, written the
// way the chat templates write them (and rendered by the real templates), held-back text,
// streamed arguments, XML parameter typing, malformed output, and the property that the merged
// events do not depend on how the text is split into pieces.
#include "serve/output_parser.h"

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/json_scanner.h"
#include "template/chat_template.h"

namespace strata::serve {
namespace {

using Kind = OutputEvent::Kind;
using nlohmann::json;

std::string read_template(const std::string& name) {
    std::ifstream in(std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "template" / "templates" / name, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<ToolSpec> weather_tools() {
    return {{"get_weather", json::parse(R"({"type": "object", "properties": {
                 "city": {"type": "string"}, "days": {"type": "integer"},
                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]})")},
            {"write_file", json::parse(R"({"type": "object", "properties": {
                 "path": {"type": "string"}, "content": {"type": "string"}}})")}};
}

ParserOptions qwen3_options() { return {}; }
ParserOptions qwen35_options() {
    ParserOptions o;
    o.starts_in_thinking = true;
    o.tools = weather_tools();
    return o;
}
ParserOptions coder_options() {
    ParserOptions o;
    o.parse_thinking = false;
    o.tools = weather_tools();
    return o;
}

std::vector<OutputEvent> feed(OutputParser& p, const std::vector<std::string>& pieces) {
    std::vector<OutputEvent> all;
    for (const std::string& piece : pieces)
        for (OutputEvent& e : p.push(piece)) all.push_back(std::move(e));
    for (OutputEvent& e : p.finish()) all.push_back(std::move(e));
    return all;
}

// Adjacent text events of one kind (and call) joined: the form that must not depend on the split.
std::vector<OutputEvent> merged(const std::vector<OutputEvent>& events) {
    std::vector<OutputEvent> out;
    for (const OutputEvent& e : events) {
        const bool text = e.kind == Kind::Reasoning || e.kind == Kind::Content || e.kind == Kind::ToolCallArguments;
        if (text && !out.empty() && out.back().kind == e.kind && out.back().index == e.index) out.back().text += e.text;
        else out.push_back(e);
    }
    return out;
}

ParsedOutput to_parsed(const std::vector<OutputEvent>& events) {
    ParsedOutput p;
    for (const OutputEvent& e : events) p.add(e);
    return p;
}

std::string describe(const std::vector<OutputEvent>& events) {
    static const char* kNames[] = {"Reasoning", "Content", "Begin", "Args", "End"};
    std::string s;
    for (const OutputEvent& e : events) {
        s += kNames[static_cast<int>(e.kind)];
        if (e.index >= 0) s += "#" + std::to_string(e.index);
        if (!e.name.empty()) s += "(" + e.name + ")";
        if (e.truncated) s += "!truncated";
        else if (!e.complete) s += "!incomplete";
        if (!e.text.empty()) s += " " + json(e.text).dump(-1, ' ', false, json::error_handler_t::replace);
        s += "\n";
    }
    return s;
}

// The stream's shape: calls numbered 0, 1, ... and ended in order, arguments only inside the open
// call, text only outside calls, an ended call's arguments one JSON object.
void expect_well_formed(const std::vector<OutputEvent>& events) {
    int open = -1, next = 0;
    std::string args;
    for (const OutputEvent& e : events) {
        switch (e.kind) {
            case Kind::Reasoning:
            case Kind::Content:
                EXPECT_EQ(open, -1) << "text inside a call:\n" << describe(events);
                EXPECT_FALSE(e.text.empty());
                break;
            case Kind::ToolCallBegin:
                EXPECT_EQ(open, -1) << describe(events);
                EXPECT_EQ(e.index, next) << describe(events);
                EXPECT_FALSE(e.name.empty());
                open = next++;
                args.clear();
                break;
            case Kind::ToolCallArguments:
                EXPECT_EQ(e.index, open) << describe(events);
                EXPECT_FALSE(e.text.empty());
                args += e.text;
                break;
            case Kind::ToolCallEnd: {
                EXPECT_EQ(e.index, open) << describe(events);
                open = -1;
                if (e.truncated) {
                    EXPECT_FALSE(e.complete);
                    EXPECT_TRUE(e.text.empty());
                    break;
                }
                if (!e.complete) {
                    EXPECT_FALSE(e.text.empty());
                    break;
                }
                JsonScanner check;
                EXPECT_TRUE(check.feed(args) && check.complete() && args.front() == '{')
                    << "arguments are not one JSON object: " << args;
                break;
            }
        }
    }
    EXPECT_EQ(open, -1) << "a call was left open:\n" << describe(events);
}

std::vector<std::string> split_random(std::string_view text, std::mt19937& rng, size_t max_piece) {
    std::vector<std::string> pieces;
    std::uniform_int_distribution<size_t> len(1, max_piece);
    while (!text.empty()) {
        const size_t n = std::min(text.size(), len(rng));
        pieces.emplace_back(text.substr(0, n));
        text.remove_prefix(n);
    }
    return pieces;
}

std::vector<std::string> split_bytes(std::string_view text) {
    std::vector<std::string> pieces;
    for (char c : text) pieces.emplace_back(1, c);
    return pieces;
}

std::vector<OutputEvent> events_of(OutputFormat format, const ParserOptions& options, const std::vector<std::string>& pieces) {
    auto p = make_output_parser(format, options);
    return feed(*p, pieces);
}

ParsedOutput parse(OutputFormat format, const ParserOptions& options, std::string_view text) {
    auto p = make_output_parser(format, options);
    return parse_whole(*p, text);
}

json arguments(const ParsedOutput::Call& call) { return json::parse(call.arguments_json); }

OutputEvent ev(Kind kind, std::string text, int index = -1, std::string name = "") {
    OutputEvent e;
    e.kind = kind;
    e.text = std::move(text);
    e.index = index;
    e.name = std::move(name);
    return e;
}

// ---- realistic outputs, as the templates write assistant turns ----

struct Sample {
    const char* name;
    OutputFormat format;
    ParserOptions options;
    std::string text;
};

std::vector<Sample> samples() {
    const auto H = OutputFormat::Qwen3Hermes;
    const auto X = OutputFormat::Qwen3CoderXml;
    return {
        {"qwen3_think_answer", H, qwen3_options(), "<think>\nThe user asks for 2+2. That is 4.\n</think>\n\n2 + 2 = **4**."},
        {"qwen3_empty_think", H, qwen3_options(), "<think>\n\n</think>\n\nHello! How can I help you today?"},
        {"qwen3_no_think", H, qwen3_options(), "Paris is the capital of France.\n\nIt has about 2.1 million people."},
        {"qwen3_think_call", H, qwen3_options(),
         "<think>\nThe user wants the weather in Paris, so I call get_weather.\n</think>\n\n<tool_call>\n"
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
         "\"celsius\"}}\n</tool_call>"},
        {"qwen3_parallel", H, qwen3_options(),
         "<think>\nTwo cities: two calls.\n</think>\n\nLet me check both cities.\n<tool_call>\n"
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\", \"days\": 3}}\n</tool_call>"},
        {"qwen3_tricky_args", H, qwen3_options(),
         "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.c\", \"content\": "
         "\"int main() { return 0; }\\n/* \\\"}\\\" */\", \"meta\": {\"tags\": [\"x\", {\"y\": null}], "
         "\"n\": -1.5e3}}}\n</tool_call>"},
        {"qwen3_args_first", H, qwen3_options(),
         "<tool_call>\n{\"arguments\": {\"city\": \"Oslo\"}, \"name\": \"get_weather\"}\n</tool_call>"},
        {"qwen35_call", X, qwen35_options(),
         "The user asks for the weather. I'll call the "
         "tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
         "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</"
         "tool_call>"},
        {"qwen35_content_parallel", X, qwen35_options(),
         "Two lookups needed.\n</think>\n\nI'll look both up.\n\n<tool_call>\n<function=get_weather>\n"
         "<parameter=city>\nNaples\n</parameter>\n</function>\n</"
         "tool_call>\n<tool_call>\n<function=get_weather>\n"
         "<parameter=city>\nRome\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</"
         "tool_call>"},
        {"qwen35_answer", X, qwen35_options(), "Simple.\n</think>\n\nThe answer is 42."},
        {"coder_write_file", X, coder_options(),
         "I'll create the "
         "file.\n\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/main.py\n</parameter>\n"
         "<parameter=content>\ndef main():\n    print(\"hello </world>\")\n    return {\"a\": 1}\n\n\nif "
         "__name__ == "
         "\"__main__\":\n    main()\n</parameter>\n</function>\n</tool_call>"},
        {"coder_untyped", X, ParserOptions{.parse_thinking = false},
         "<tool_call>\n<function=configure>\n<parameter=retries>\n5\n</"
         "parameter>\n<parameter=verbose>\ntrue\n</parameter>\n"
         "<parameter=name>\nmy service\n</parameter>\n<parameter=limits>\n{\"cpu\": 2, \"mem\": "
         "\"1G\"}\n</parameter>\n"
         "</function>\n</tool_call>"},
        {"unicode", H, qwen3_options(),
         "<think>\nLa météo à Zürich — 東京 too 🌧.\n</think>\n\n<tool_call>\n"
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich 東京 🌧\"}}\n</tool_call>"},
    };
}

// ---- detection ----

TEST(OutputFormatDetect, FromTheTemplates) {
    EXPECT_EQ(detect_output_format(read_template("qwen3.jinja")), OutputFormat::Qwen3Hermes);
    EXPECT_EQ(detect_output_format(read_template("qwen3-coder.jinja")), OutputFormat::Qwen3CoderXml);
    EXPECT_EQ(detect_output_format(read_template("qwen3.5.jinja")), OutputFormat::Qwen3CoderXml);
    EXPECT_EQ(detect_output_format("{% for m in messages %}{{ m.content }}{% endfor %}"), OutputFormat::Plain);
    EXPECT_TRUE(template_has_thinking(read_template("qwen3.jinja")));
    EXPECT_TRUE(template_has_thinking(read_template("qwen3.5.jinja")));
    EXPECT_FALSE(template_has_thinking(read_template("qwen3-coder.jinja")));
    EXPECT_STREQ(to_string(OutputFormat::Qwen3CoderXml), "qwen3-coder-xml");
}

TEST(OutputFormatDetect, PromptOpensThinking) {
    EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
    EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>"));
    EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
    EXPECT_FALSE(prompt_opens_thinking(""));
}

// The generation prompts the templates write, with and without thinking.
TEST(OutputFormatDetect, GenerationPrompts) {
    const json user = json::parse(R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true})");
    auto render = [&](const std::string& tmpl, json request) {
        return tmpl::ChatTemplate::from_source(read_template(tmpl)).render(nlohmann::ordered_json::parse(request.dump()));
    };
    json off = user;
    off["enable_thinking"] = false;
    EXPECT_FALSE(prompt_opens_thinking(render("qwen3.jinja", user)));  // the model writes <think> itself
    EXPECT_FALSE(prompt_opens_thinking(render("qwen3.jinja", off)));
    EXPECT_TRUE(prompt_opens_thinking(render("qwen3.5.jinja", user)));
    EXPECT_FALSE(prompt_opens_thinking(render("qwen3.5.jinja", off)));
    EXPECT_FALSE(prompt_opens_thinking(render("qwen3-coder.jinja", user)));
}

// ---- Qwen3: thinking and Hermes calls ----

TEST(Qwen3Output, ThinkingThenAnswer) {
    const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(), samples()[0].text);
    EXPECT_EQ(p.reasoning, "The user asks for 2+2. That is 4.");
    EXPECT_EQ(p.content, "2 + 2 = **4**.");
    EXPECT_TRUE(p.tool_calls.empty());
}

TEST(Qwen3Output, EmptyThinkBlockGivesNoReasoning) {
    const auto events = events_of(OutputFormat::Qwen3Hermes, qwen3_options(), {samples()[1].text});
    ASSERT_EQ(events.size(), 1u) << describe(events);
    EXPECT_EQ(events[0], ev(Kind::Content, "Hello! How can I help you today?"));
}

TEST(Qwen3Output, AnswerWithoutThinking) {
    const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(), samples()[2].text);
    EXPECT_EQ(p.reasoning, "");
    EXPECT_EQ(p.content, samples()[2].text);
}

TEST(Qwen3Output, ToolCallAfterThinking) {
    const auto events = merged(events_of(OutputFormat::Qwen3Hermes, qwen3_options(), {samples()[3].text}));
    ASSERT_EQ(events.size(), 4u) << describe(events);
    EXPECT_EQ(events[0], ev(Kind::Reasoning, "The user wants the weather in Paris, so I call get_weather."));
    EXPECT_EQ(events[1], ev(Kind::ToolCallBegin, "", 0, "get_weather"));
    EXPECT_EQ(events[2], ev(Kind::ToolCallArguments, R"({"city": "Paris", "unit": "celsius"})", 0));
    EXPECT_EQ(events[3], ev(Kind::ToolCallEnd, "", 0));
}

TEST(Qwen3Output, ParallelCallsAfterContent) {
    const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(), samples()[4].text);
    EXPECT_EQ(p.reasoning, "Two cities: two calls.");
    EXPECT_EQ(p.content, "Let me check both cities.");
    ASSERT_EQ(p.tool_calls.size(), 2u);
    EXPECT_EQ(p.tool_calls[0].name, "get_weather");
    EXPECT_EQ(arguments(p.tool_calls[0]), json::parse(R"({"city": "Paris"})"));
    EXPECT_EQ(arguments(p.tool_calls[1]), json::parse(R"({"city": "Tokyo", "days": 3})"));
}

TEST(Qwen3Output, BracesAndQuotesInsideStringsDoNotEndArguments) {
    const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(), samples()[5].text);
    ASSERT_EQ(p.tool_calls.size(), 1u) << p.content;
    EXPECT_EQ(p.content, "");
    const json a = arguments(p.tool_calls[0]);
    EXPECT_EQ(a["content"], "int main() { return 0; }\n/* \"}\" */");
    EXPECT_EQ(a["meta"]["n"], -1500.0);
}

// Arguments go out as they arrive: Begin as soon as the name is complete, fragments before the
// object ends.
TEST(Qwen3Output, ArgumentsStream) {
    auto p = make_output_parser(OutputFormat::Qwen3Hermes, qwen3_options());
    EXPECT_EQ(p->push("<tool_call>\n{\"name\": \"get_wea"), std::vector<OutputEvent>{});
    EXPECT_EQ(p->push("ther\""), std::vector<OutputEvent>{ev(Kind::ToolCallBegin, "", 0, "get_weather")});
    EXPECT_EQ(p->push(", \"arguments\": {\"city\": \"Par"),
              std::vector<OutputEvent>{ev(Kind::ToolCallArguments, "{\"city\": \"Par", 0)});
    EXPECT_EQ(p->push("is\"}"), std::vector<OutputEvent>{ev(Kind::ToolCallArguments, "is\"}", 0)});
    EXPECT_EQ(p->push("}\n</tool_"), std::vector<OutputEvent>{ev(Kind::ToolCallEnd, "", 0)});
    EXPECT_EQ(p->push("call>"), std::vector<OutputEvent>{});
    EXPECT_EQ(p->finish(), std::vector<OutputEvent>{});
}

TEST(Qwen3Output, ArgumentsBeforeName) {
    const auto events = merged(events_of(OutputFormat::Qwen3Hermes, qwen3_options(), split_bytes(samples()[6].text)));
    ASSERT_EQ(events.size(), 3u) << describe(events);
    EXPECT_EQ(events[0], ev(Kind::ToolCallBegin, "", 0, "get_weather"));
    EXPECT_EQ(events[1], ev(Kind::ToolCallArguments, R"({"city": "Oslo"})", 0));
    EXPECT_EQ(events[2], ev(Kind::ToolCallEnd, "", 0));
}

TEST(Qwen3Output, ArgumentsVariants) {
    auto call = [](const std::string& body) {
        const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(), "<tool_call>\n" + body + "\n</tool_call>");
        EXPECT_EQ(p.content, "") << body;
        return p.tool_calls.size() == 1 ? p.tool_calls[0].arguments_json : "<no call>";
    };
    EXPECT_EQ(call(R"({"name": "f", "arguments": "{\"a\": [1, 2]}"})"),
              R"({"a": [1, 2]})");  // encoded as a string
    EXPECT_EQ(call(R"({"name": "f"})"), "{}");
    EXPECT_EQ(call(R"({"name": "f", "arguments": null})"), "{}");
    EXPECT_EQ(call(R"({"name": "f", "parameters": {"a": 1}})"), R"({"a": 1})");
    EXPECT_EQ(call(R"({"id": 7, "name": "f", "extra": [true, {"x": "}"}], "arguments": {}})"), "{}");
    EXPECT_EQ(call(R"({"name": "f", "arguments": {"a": 1}, "name": "g", "arguments": {"b": 2}})"), R"({"a": 1})");
    EXPECT_EQ(call("{\"name\":\"f\",\"arguments\":{\"a\":1}}"), R"({"a":1})");
}

// Names are not checked against the tools list: the caller decides what an unknown one means.
TEST(Qwen3Output, UnknownFunctionIsStillACall) {
    ParserOptions o;
    o.tools = weather_tools();
    const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, o, R"(<tool_call>
{"name": "launch_rocket", "arguments": {"target": "moon"}}
</tool_call>)");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].name, "launch_rocket");
}

// ---- Qwen3.5 and Qwen3-Coder: XML calls ----

TEST(XmlOutput, Qwen35StartsInThinking) {
    const auto events = merged(events_of(OutputFormat::Qwen3CoderXml, qwen35_options(), {samples()[7].text}));
    ASSERT_EQ(events.size(), 4u) << describe(events);
    EXPECT_EQ(events[0], ev(Kind::Reasoning, "The user asks for the weather. I'll call the tool."));
    EXPECT_EQ(events[1], ev(Kind::ToolCallBegin, "", 0, "get_weather"));
    EXPECT_EQ(events[2], ev(Kind::ToolCallArguments, R"({"city": "Paris", "days": 3})", 0));
    EXPECT_EQ(events[3], ev(Kind::ToolCallEnd, "", 0));
}

TEST(XmlOutput, Qwen35ContentThenParallelCalls) {
    const ParsedOutput p = parse(OutputFormat::Qwen3CoderXml, qwen35_options(), samples()[8].text);
    EXPECT_EQ(p.reasoning, "Two lookups needed.");
    EXPECT_EQ(p.content, "I'll look both up.");
    ASSERT_EQ(p.tool_calls.size(), 2u);
    EXPECT_EQ(arguments(p.tool_calls[0]), json::parse(R"({"city": "Naples"})"));
    EXPECT_EQ(arguments(p.tool_calls[1]), json::parse(R"({"city": "Rome", "unit": "fahrenheit"})"));
}

// A model that re-opens <think> although the prompt did: the tag is dropped, not reasoning text.
TEST(XmlOutput, Qwen35RepeatedThinkTag) {
    const ParsedOutput p = parse(OutputFormat::Qwen3CoderXml, qwen35_options(), "<think>\nHmm.\n</think>\n\nOK.");
    EXPECT_EQ(p.reasoning, "Hmm.");
    EXPECT_EQ(p.content, "OK.");
}

TEST(XmlOutput, CoderMultilineStringValue) {
    const ParsedOutput p = parse(OutputFormat::Qwen3CoderXml, coder_options(), samples()[10].text);
    EXPECT_EQ(p.content, "I'll create the file.");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].name, "write_file");
    EXPECT_EQ(arguments(p.tool_calls[0]),
              json({{"path", "src/main.py"},
                    {"content",
                     "def main():\n    print(\"hello </world>\")\n    return {\"a\": 1}\n\n\nif __name__ == "
                     "\"__main__\":\n    main()"}}));
}

TEST(XmlOutput, ParametersTypedBySchema) {
    ParserOptions o;
    o.tools = {{"run_query", json::parse(R"({"type": "object", "properties": {
        "name": {"type": "string"}, "limit": {"type": "integer"}, "verbose": {"type": "boolean"},
        "filters": {"type": "object"}, "tags": {"type": "array"}, "ratio": {"type": "number"},
        "note": {"type": ["string", "null"]}, "mode": {"enum": ["fast", "slow"]}, "any": {"anyOf": [{"type": "integer"}]}}})")}};
    auto value = [&](const std::string& param, const std::string& raw) {
        const ParsedOutput p = parse(
            OutputFormat::Qwen3CoderXml, o,
            "<tool_call>\n<function=run_query>\n<parameter=" + param + ">\n" + raw + "\n</parameter>\n</function>\n</tool_call>");
        EXPECT_EQ(p.tool_calls.size(), 1u) << p.content;
        return p.tool_calls.empty() ? json() : arguments(p.tool_calls[0])[param];
    };
    EXPECT_EQ(value("name", "123"), "123");
    EXPECT_EQ(value("name", "true"), "true");
    EXPECT_EQ(value("name", "{\"a\": 1}"), "{\"a\": 1}");
    EXPECT_EQ(value("limit", "10"), 10);
    EXPECT_EQ(value("limit", " 10 "), 10);
    EXPECT_EQ(value("verbose", "false"), false);
    EXPECT_EQ(value("filters", "{\"status\": \"open\",\n \"age\": {\"gt\": 3}}"),
              json::parse(R"({"status": "open", "age": {"gt": 3}})"));
    EXPECT_EQ(value("tags", "[\"a\", \"b\"]"), json::parse(R"(["a", "b"])"));
    EXPECT_EQ(value("ratio", "0.5"), 0.5);
    EXPECT_EQ(value("ratio", "\"0.5\""), "0.5");  // JSON typed: a quoted value is a JSON string
    EXPECT_EQ(value("note", "null"), "null");
    EXPECT_EQ(value("mode", "fast"), "fast");
    EXPECT_EQ(value("any", "7"), 7);
    // Not JSON: a string after all.
    EXPECT_EQ(value("limit", "ten"), "ten");
    EXPECT_EQ(value("limit", "10 rows"), "10 rows");
    EXPECT_EQ(value("verbose", "True"), "True");
    EXPECT_EQ(value("filters", "{\"status\": \"open\""), "{\"status\": \"open\"");
    EXPECT_EQ(value("limit", ""), "");
}

TEST(XmlOutput, ParametersWithoutSchema) {
    auto value = [](const std::string& raw) {
        const ParsedOutput p =
            parse(OutputFormat::Qwen3CoderXml, ParserOptions{},
                  "<tool_call>\n<function=f>\n<parameter=v>\n" + raw + "\n</parameter>\n</function>\n</tool_call>");
        EXPECT_EQ(p.tool_calls.size(), 1u) << p.content;
        return p.tool_calls.empty() ? json() : arguments(p.tool_calls[0])["v"];
    };
    EXPECT_EQ(value("5"), 5);
    EXPECT_EQ(value("-2.5e3"), -2500.0);
    EXPECT_EQ(value("true"), true);
    EXPECT_EQ(value("null"), nullptr);
    EXPECT_EQ(value("[1, 2]"), json::parse("[1, 2]"));
    EXPECT_EQ(value("{\"k\": \"v\"}"), json::parse(R"({"k": "v"})"));
    EXPECT_EQ(value("hello world"), "hello world");
    EXPECT_EQ(value("\"quoted\""), "\"quoted\"");  // strings keep their quotes without a schema
    EXPECT_EQ(value("0123"), "0123");              // not a JSON number: a zip code stays a string
    EXPECT_EQ(value("5 apples"), "5 apples");
    EXPECT_EQ(value("tru"), "tru");
    EXPECT_EQ(value("truely"), "truely");
    EXPECT_EQ(value(""), "");
    EXPECT_EQ(value("\n"), "\n");  // only the format's own newlines are trimmed
    EXPECT_EQ(value("line\twith \\ and \"quotes\"\x01"), "line\twith \\ and \"quotes\"\x01");
    EXPECT_EQ(value("[" + std::string(1000, '[')), "[" + std::string(1000, '['));  // deeper than the bound
}

TEST(XmlOutput, TypedParameterNamesAreEscaped) {
    const ParsedOutput p = parse(OutputFormat::Qwen3CoderXml, ParserOptions{},
                                 "<tool_call>\n<function=f>\n<parameter=a\"b\\c>\nx\n</parameter>\n</function>\n</tool_call>");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(arguments(p.tool_calls[0]), json({{"a\"b\\c", "x"}}));
}

// String values stream as they arrive; the newline before </parameter> is held until known.
TEST(XmlOutput, StringValueStreams) {
    auto p = make_output_parser(OutputFormat::Qwen3CoderXml, coder_options());
    EXPECT_EQ(p->push("<tool_call>\n<function=write_file>\n<parameter=content>\nline one\n"),
              (std::vector<OutputEvent>{ev(Kind::ToolCallBegin, "", 0, "write_file"),
                                        ev(Kind::ToolCallArguments, "{\"content\": \"line one", 0)}));
    EXPECT_EQ(p->push("line \"two\"\n</param"), std::vector<OutputEvent>{ev(Kind::ToolCallArguments, "\\nline \\\"two\\\"", 0)});
    EXPECT_EQ(p->push("eter>\n</function>\n"),
              (std::vector<OutputEvent>{ev(Kind::ToolCallArguments, "\"}", 0), ev(Kind::ToolCallEnd, "", 0)}));
    EXPECT_EQ(p->push("</tool_call>"), std::vector<OutputEvent>{});
    EXPECT_EQ(p->finish(), std::vector<OutputEvent>{});
}

// Untyped values are kept while they may still be JSON, then streamed as a string.
TEST(XmlOutput, UntypedValueStreamsOnceNotJson) {
    auto p = make_output_parser(OutputFormat::Qwen3CoderXml, ParserOptions{});
    EXPECT_EQ(p->push("<tool_call>\n<function=f>\n<parameter=v>\n12"),
              (std::vector<OutputEvent>{ev(Kind::ToolCallBegin, "", 0, "f"), ev(Kind::ToolCallArguments, "{\"v\": ", 0)}));
    EXPECT_EQ(p->push("3 is"), std::vector<OutputEvent>{ev(Kind::ToolCallArguments, "\"123 is", 0)});
    EXPECT_EQ(p->push(" a number\n</parameter>\n</function>\n</tool_call>"),
              (std::vector<OutputEvent>{ev(Kind::ToolCallArguments, " a number\"}", 0), ev(Kind::ToolCallEnd, "", 0)}));
}

TEST(XmlOutput, EitherBodyInEitherFormat) {
    const std::string hermes = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
    const std::string xml = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>";
    for (OutputFormat f : {OutputFormat::Qwen3Hermes, OutputFormat::Qwen3CoderXml})
        for (const std::string& text : {hermes, xml}) {
            const ParsedOutput p = parse(f, ParserOptions{}, text);
            ASSERT_EQ(p.tool_calls.size(), 1u) << text;
            EXPECT_EQ(arguments(p.tool_calls[0]), json({{"a", 1}}));
        }
}

TEST(XmlOutput, MissingFunctionCloseTolerated) {
    const ParsedOutput p = parse(OutputFormat::Qwen3CoderXml, ParserOptions{},
                                 "<tool_call>\n<function=f>\n<parameter=a>\nx\n</parameter>\n</tool_call>\nDone.");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(arguments(p.tool_calls[0]), json({{"a", "x"}}));
    EXPECT_EQ(p.content, "Done.");
}

TEST(XmlOutput, NoParameters) {
    const ParsedOutput p =
        parse(OutputFormat::Qwen3CoderXml, ParserOptions{}, "<tool_call>\n<function=now>\n</function>\n</tool_call>");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].arguments_json, "{}");
}

// ---- outputs rendered by the real templates come back as the message they came from ----

TEST(OutputRoundTrip, AssistantTurnsRenderedByTemplates) {
    const nlohmann::ordered_json request = nlohmann::ordered_json::parse(R"({
        "messages": [
            {"role": "user", "content": "Weather in Paris and Tokyo?"},
            {"role": "assistant", "reasoning_content": "Two cities, so two calls.", "content": "Let me check both.",
             "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}},
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Tokyo \"東京\"", "days": 1}}}]}
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Forecast",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}],
        "add_generation_prompt": false
    })");
    struct Case {
        const char* file;
        OutputFormat format;
        bool thinking;      // the template keeps reasoning
        bool prompt_opens;  // its generation prompt ends with <think>\n
    };
    for (const Case c : {Case{"qwen3.jinja", OutputFormat::Qwen3Hermes, true, false},
                         Case{"qwen3.5.jinja", OutputFormat::Qwen3CoderXml, true, true},
                         Case{"qwen3-coder.jinja", OutputFormat::Qwen3CoderXml, false, false}}) {
        SCOPED_TRACE(c.file);
        const std::string source = read_template(c.file);
        ASSERT_EQ(detect_output_format(source), c.format);
        ASSERT_EQ(template_has_thinking(source), c.thinking);
        const std::string rendered = tmpl::ChatTemplate::from_source(source).render(request);
        const std::string head = "<|im_start|>assistant\n";
        const size_t from = rendered.rfind(head);
        ASSERT_NE(from, std::string::npos) << rendered;
        std::string output = rendered.substr(from + head.size());
        output = output.substr(0, output.find("<|im_end|>"));
        if (c.prompt_opens) {
            ASSERT_TRUE(output.starts_with("<think>\n")) << output;
            output.erase(0, 8);  // in the generation prompt, not in the output
        }
        ParserOptions o;
        o.parse_thinking = c.thinking;
        o.starts_in_thinking = c.prompt_opens;
        o.tools = weather_tools();
        for (const auto& pieces : {std::vector<std::string>{output}, split_bytes(output)}) {
            const ParsedOutput p = to_parsed(events_of(c.format, o, pieces));
            EXPECT_EQ(p.reasoning, c.thinking ? "Two cities, so two calls." : "") << output;
            EXPECT_EQ(p.content, "Let me check both.") << output;
            ASSERT_EQ(p.tool_calls.size(), 2u) << output;
            EXPECT_EQ(p.tool_calls[0].name, "get_weather");
            EXPECT_EQ(arguments(p.tool_calls[0]), json::parse(R"({"city": "Paris", "days": 3})"));
            EXPECT_EQ(arguments(p.tool_calls[1]), json::parse(R"({"city": "Tokyo \"東京\"", "days": 1})"));
        }
    }
}

// ---- what is held back ----

TEST(OutputHoldBack, PartialTagReleasedWhenItCannotBeATag) {
    auto p = make_output_parser(OutputFormat::Qwen3Hermes, qwen3_options());
    EXPECT_EQ(p->push("Hello <tool"), std::vector<OutputEvent>{ev(Kind::Content, "Hello ")});
    EXPECT_EQ(p->push("bar> and <"), std::vector<OutputEvent>{ev(Kind::Content, "<toolbar> and ")});
    EXPECT_EQ(p->push("b>"), std::vector<OutputEvent>{ev(Kind::Content, "<b>")});
    EXPECT_EQ(p->push("<tool_cal"), std::vector<OutputEvent>{});
    EXPECT_EQ(p->finish(), std::vector<OutputEvent>{ev(Kind::Content, "<tool_cal")});
}

TEST(OutputHoldBack, FormattingNewlines) {
    auto p = make_output_parser(OutputFormat::Qwen3Hermes, qwen3_options());
    EXPECT_EQ(p->push("<"), std::vector<OutputEvent>{});
    EXPECT_EQ(p->push("think>\nStep one.\n"), std::vector<OutputEvent>{ev(Kind::Reasoning, "Step one.")});
    EXPECT_EQ(p->push("Step two.\n"), std::vector<OutputEvent>{ev(Kind::Reasoning, "\nStep two.")});
    EXPECT_EQ(p->push("</think>\n"), std::vector<OutputEvent>{});
    EXPECT_EQ(p->push("\nSure.\n"), std::vector<OutputEvent>{ev(Kind::Content, "Sure.")});
    EXPECT_EQ(p->push("\n"), std::vector<OutputEvent>{});
    EXPECT_EQ(p->push("\n"), std::vector<OutputEvent>{ev(Kind::Content, "\n")});  // three: one is text
    EXPECT_EQ(p->push("<tool_call>\n{\"name\": \"f\"}\n</tool_call>\n"),
              (std::vector<OutputEvent>{ev(Kind::ToolCallBegin, "", 0, "f"), ev(Kind::ToolCallArguments, "{}", 0),
                                        ev(Kind::ToolCallEnd, "", 0)}));
    EXPECT_EQ(p->finish(), std::vector<OutputEvent>{});
}

TEST(OutputHoldBack, NothingHeldWithoutTags) {
    ParserOptions o;
    o.parse_thinking = false;
    for (OutputFormat f : {OutputFormat::Plain, OutputFormat::Qwen3Hermes}) {
        ParserOptions oo = o;
        oo.parse_tools = f != OutputFormat::Qwen3Hermes;
        auto p = make_output_parser(f, oo);
        EXPECT_EQ(p->push("<think>\nx\n"), std::vector<OutputEvent>{ev(Kind::Content, "<think>\nx\n")});
        EXPECT_EQ(p->push("<tool_call"), std::vector<OutputEvent>{ev(Kind::Content, "<tool_call")});
        EXPECT_EQ(p->finish(), std::vector<OutputEvent>{});
    }
}

TEST(OutputOptions, TagsAsTextWhenNotParsed) {
    const std::string text = "<think>\nr\n</think>\n\nA<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    ParserOptions no_tools;
    no_tools.parse_tools = false;
    ParsedOutput p = parse(OutputFormat::Qwen3Hermes, no_tools, text);
    EXPECT_EQ(p.reasoning, "r");
    EXPECT_EQ(p.content, "A<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
    p = parse(OutputFormat::Plain, ParserOptions{}, text);
    EXPECT_EQ(p.content, "A<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
    ParserOptions no_thinking;
    no_thinking.parse_thinking = false;
    no_thinking.starts_in_thinking = true;  // ignored without parse_thinking
    p = parse(OutputFormat::Qwen3Hermes, no_thinking, text);
    EXPECT_EQ(p.reasoning, "");
    EXPECT_EQ(p.content, "<think>\nr\n</think>\n\nA");
    EXPECT_EQ(p.tool_calls.size(), 1u);
}

// ---- malformed output: never lost, never thrown ----

TEST(MalformedOutput, BrokenJsonBeforeNameIsContent) {
    const std::string text = "Hi\n<tool_call>\n{\"nme\" oops}\n</tool_call>";
    const auto events = merged(events_of(OutputFormat::Qwen3Hermes, qwen3_options(), {text}));
    ASSERT_EQ(events.size(), 1u) << describe(events);
    EXPECT_EQ(events[0], ev(Kind::Content, text));
    for (const std::string body : {"{\"name\": 42, \"arguments\": {}}", "{\"arguments\": {}}", "[1]", "{'name': 'f'}",
                                   "{\"name\": \"f\", \"arguments\": [1]}", "{\"name\": \"f\", \"arguments\": \"not json\"}",
                                   "{\"name\": \"\", \"arguments\": {}}"}) {
        const std::string t = "<tool_call>\n" + body + "\n</tool_call>";
        const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(), t);
        EXPECT_EQ(p.content, t);  // the last two fail after their Begin: content all the same
        EXPECT_TRUE(p.tool_calls.empty()) << body;
    }
}

TEST(MalformedOutput, BrokenArgumentsAfterBegin) {
    const std::string head = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru";
    const std::string text = "Ok.\n" + head + "th}}\n</tool_call>\nBye.";
    const auto events = merged(events_of(OutputFormat::Qwen3Hermes, qwen3_options(), {text}));
    ASSERT_EQ(events.size(), 5u) << describe(events);
    EXPECT_EQ(events[0], ev(Kind::Content, "Ok."));
    EXPECT_EQ(events[1], ev(Kind::ToolCallBegin, "", 0, "f"));
    EXPECT_EQ(events[2], ev(Kind::ToolCallArguments, "{\"a\": tru", 0));
    OutputEvent end = ev(Kind::ToolCallEnd, "\n" + head, 0);
    end.complete = false;
    EXPECT_EQ(events[3], end);
    EXPECT_EQ(events[4], ev(Kind::Content, "th}}\n</tool_call>\nBye."));
    const ParsedOutput p = to_parsed(events);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.tool_calls.empty());
}

// A call cut by the end of the output (max_tokens) is not text: dropped before its name is complete,
// kept truncated with its arguments so far after.
TEST(CutCalls, Stages) {
    struct Case {
        OutputFormat format;
        std::string text;
        bool call;         // a call is kept
        std::string args;  // its arguments
    };
    const auto H = OutputFormat::Qwen3Hermes;
    const auto X = OutputFormat::Qwen3CoderXml;
    for (const Case& c : std::vector<Case>{
             {H, "Text\n\n<tool_call>\n", false, ""},
             {H, "Text\n\n<tool_call>\n{\"na", false, ""},
             {H, "Text\n\n<tool_call>\n{\"name\": \"f", false, ""},
             {H, "Text\n\n<tool_call>\n{\"name\": \"f\"", true, ""},
             {H, "Text\n\n<tool_call>\n{\n\n\"name\"\r\n:\r\n\"f\"\r\n,\"", true, ""},
             {H, "Text\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1", true, "{\"a\": 1"},
             {H, "Text\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}", true, "{\"a\": 1}"},
             {X, "Text\n\n<tool_call>\n<funct", false, ""},
             {X, "Text\n\n<tool_call>\n<function=f", false, ""},
             {X, "Text\n\n<tool_call>\n<function=f>", true, "{}"},
             {X, "Text\n\n<tool_call>\n<function=f>\n<parameter=a>\nhel", true, "{\"a\": \"hel\"}"},
             {X, "Text\n\n<tool_call>\n<function=f>\n<parameter=a>\nhello\n</param", true, "{\"a\": \"hello\"}"},
             {X, "Text\n\n<tool_call>\n<function=f>\n<parameter=a>\nhello\n</parameter>\n", true, "{\"a\": \"hello\"}"},
             {X, "Text\n\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n", true,
              "{\"a\": 1, \"b\": \"\"}"},
             {X, "Text\n\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<param", true, "{\"a\": 1}"},
             {X, "Text\n\n<tool_call>\n<function=f>\n</function>\n</tool", false, ""}}) {
        for (const auto& pieces : {std::vector<std::string>{c.text}, split_bytes(c.text)}) {
            const auto events = events_of(c.format, ParserOptions{}, pieces);
            expect_well_formed(events);
            const ParsedOutput p = to_parsed(events);
            EXPECT_EQ(p.content, "Text") << c.text << "\n" << describe(events);
            if (c.text.ends_with("</tool")) {  // whole, then cut in the closing tag
                ASSERT_EQ(p.tool_calls.size(), 1u) << c.text;
                EXPECT_FALSE(p.tool_calls[0].truncated);
                continue;
            }
            ASSERT_EQ(p.tool_calls.size(), c.call ? 1u : 0u) << c.text << "\n" << describe(events);
            if (!c.call) continue;
            EXPECT_EQ(p.tool_calls[0].name, "f");
            EXPECT_TRUE(p.tool_calls[0].truncated);
            EXPECT_EQ(p.tool_calls[0].arguments_json, c.args) << c.text;
        }
    }
}

// Every cut of a Hermes and an XML call, at each byte and streamed in random pieces: no markup in
// the text, the call once its name is complete (truncated until its body is, which is what makes
// the APIs' finish reason "length"), the streamed events adding up to the whole answer.
TEST(CutCalls, EveryCutOfACall) {
    const std::string lead = "I'll write it.\n\n";
    struct Case {
        OutputFormat format;
        ParserOptions options;
        std::string call;
        std::string name_done;  // the call's text up to where its name is complete
        std::string body_done;  // ... and its body
    };
    const std::string hermes_body =
        "{\"name\": \"write_file\", \"arguments\": {\"path\": \"src/a.py\", \"content\": \"print(\\\"h\u00e9\\\")\\n\", "
        "\"mode\": 420, \"flags\": [true, null]}}";
    const std::string xml_body =
        "<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n<parameter=days>\n12\n</parameter>\n"
        "<parameter=unit>\ncelsius\n</parameter>\n</function>";
    const std::string xml_untyped =
        "<function=write_file>\n<parameter=path>\nsrc/a.py\n</parameter>\n<parameter=content>\nif a < b:\n    "
        "x = {\"k\": [1]}\n</parameter>\n</function>";
    const std::vector<Case> cases = {
        {OutputFormat::Qwen3Hermes, qwen3_options(), "<tool_call>\n" + hermes_body + "\n</tool_call>",
         "<tool_call>\n{\"name\": \"write_file\"", "<tool_call>\n" + hermes_body},
        {OutputFormat::Qwen3CoderXml, coder_options(), "<tool_call>\n" + xml_body + "\n</tool_call>",
         "<tool_call>\n<function=get_weather>", "<tool_call>\n" + xml_body},
        {OutputFormat::Qwen3CoderXml, ParserOptions{.parse_thinking = false}, "<tool_call>\n" + xml_untyped + "\n</tool_call>",
         "<tool_call>\n<function=write_file>", "<tool_call>\n" + xml_untyped},
    };
    std::mt19937 rng(7);
    for (const Case& c : cases) {
        const std::string full = lead + c.call;
        const ParsedOutput whole_call = parse(c.format, c.options, full);
        ASSERT_EQ(whole_call.tool_calls.size(), 1u);
        const json full_args = arguments(whole_call.tool_calls[0]);
        for (size_t cut = lead.size() + 1; cut <= full.size(); ++cut) {
            // The parser is fed whole UTF-8 characters (tokenizer::StreamDecoder): no cut inside one.
            if (cut < full.size() && (static_cast<unsigned char>(full[cut]) & 0xC0) == 0x80) continue;
            const std::string text = full.substr(0, cut);
            const size_t in_call = cut - lead.size();
            const ParsedOutput whole = parse(c.format, c.options, text);
            const std::string where = "cut at " + std::to_string(in_call) + ": " + json(text).dump();
            for (int round = 0; round < 4; ++round) {
                const auto pieces = round == 0 ? split_bytes(text) : split_random(text, rng, round * 5);
                const auto events = events_of(c.format, c.options, pieces);
                expect_well_formed(events);
                EXPECT_EQ(to_parsed(events), whole) << where << "\n" << describe(events);
            }
            if (in_call < std::string_view("<tool_call>").size()) {
                // Inside the opening tag: cannot be told from text (one token in the Qwen vocabularies).
                EXPECT_EQ(whole.content, text) << where;
                EXPECT_TRUE(whole.tool_calls.empty()) << where;
                continue;
            }
            EXPECT_EQ(whole.content, "I'll write it.") << where;
            if (in_call < c.name_done.size()) {
                EXPECT_TRUE(whole.tool_calls.empty()) << where;
                continue;
            }
            ASSERT_EQ(whole.tool_calls.size(), 1u) << where;
            const auto& call = whole.tool_calls[0];
            EXPECT_EQ(call.name, whole_call.tool_calls[0].name);
            EXPECT_EQ(call.truncated, in_call < c.body_done.size()) << where;
            if (!call.truncated) {
                EXPECT_EQ(call, whole_call.tool_calls[0]) << where;
                continue;
            }
            if (c.format == OutputFormat::Qwen3Hermes) {
                // The model's JSON as far as it got, and an object once closed.
                EXPECT_TRUE(whole_call.tool_calls[0].arguments_json.starts_with(call.arguments_json)) << where;
                const json closed = json::parse(JsonCloser::close(call.arguments_json));
                ASSERT_TRUE(closed.is_object()) << where;
                for (const auto& [k, v] : closed.items()) {
                    ASSERT_TRUE(full_args.contains(k)) << where;
                    if (v.is_string()) {
                        EXPECT_TRUE(full_args[k].get<std::string>().starts_with(v.get<std::string>())) << where;
                    }
                }
            } else {
                // One object: the parameters so far, the last as far as it got.
                const json args = json::parse(call.arguments_json);
                ASSERT_TRUE(args.is_object()) << where;
                for (const auto& [k, v] : args.items()) {
                    ASSERT_TRUE(full_args.contains(k)) << where << " " << call.arguments_json;
                    if (v.is_string() && full_args[k].is_string()) {
                        EXPECT_TRUE(full_args[k].get<std::string>().starts_with(v.get<std::string>()))
                            << where << " " << call.arguments_json;
                    }
                }
            }
        }
    }
}

TEST(JsonCloser, ClosesWhatCanBeKept) {
    for (const auto& [text, closed] :
         std::vector<std::pair<std::string, std::string>>{{"", "{}"},
                                                          {"  ", "{}"},
                                                          {"{", "{}"},
                                                          {"{\"pa", "{}"},
                                                          {"{\"path\"", "{}"},
                                                          {"{\"path\": ", "{}"},
                                                          {"{\"path\": \"", "{\"path\": \"\"}"},
                                                          {"{\"path\": \"a\\", "{\"path\": \"a\"}"},
                                                          {"{\"path\": \"a\\u00", "{\"path\": \"a\"}"},
                                                          {"{\"path\": \"a.py\", ", "{\"path\": \"a.py\"}"},
                                                          {"{\"n\": 12", "{\"n\": 12}"},
                                                          {"{\"n\": 1.", "{\"n\": 1}"},
                                                          {"{\"n\": -", "{}"},
                                                          {"{\"a\": [1, tr", "{\"a\": [1]}"},
                                                          {"{\"a\": [1, {\"b\": [", "{\"a\": [1, {\"b\": []}]}"},
                                                          {"{\"a\": 1}", "{\"a\": 1}"},
                                                          {"{\"s\": \"\xc3", "{\"s\": \"\"}"},
                                                          {"{\"s\": \"\xc3\xa9", "{\"s\": \"\xc3\xa9\"}"}}) {
        EXPECT_EQ(JsonCloser::close(text), closed) << text;
    }
}

TEST(JsonCloser, EveryPrefixClosesToJson) {
    const std::string text =
        R"({"path": "src/a.py", "content": "print(\"h\u00e9\")\n", "n": -12.5e3, "f": [true, false, null, {"x": []}]})";
    std::string last = "{}";
    for (size_t cut = 0; cut <= text.size(); ++cut) {
        const std::string closed = JsonCloser::close(text.substr(0, cut));
        EXPECT_TRUE(json::accept(closed)) << closed;
        // Incremental feeding agrees with the whole.
        JsonCloser inc;
        inc.feed(text.substr(0, cut / 2));
        inc.feed(text.substr(cut / 2, cut - cut / 2));
        EXPECT_EQ(inc.safe_size() == 0 ? "{}" : text.substr(0, inc.safe_size()) + inc.closing(), closed);
    }
    EXPECT_EQ(JsonCloser::close(text), text);
}

TEST(MalformedOutput, UnclosedThinkIsAllReasoning) {
    ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(), "<think>\nI am thinking and never st");
    EXPECT_EQ(p.reasoning, "I am thinking and never st");
    EXPECT_EQ(p.content, "");
    p = parse(OutputFormat::Qwen3CoderXml, qwen35_options(), "Still thinking\n</thi");
    EXPECT_EQ(p.reasoning, "Still thinking\n</thi");
}

TEST(MalformedOutput, CloseThinkWithoutOpenIsContent) {
    const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(), "Hello\n</think>\n\nworld <think>");
    EXPECT_EQ(p.reasoning, "");
    EXPECT_EQ(p.content, "Hello\n</think>\n\nworld <think>");
}

TEST(MalformedOutput, TextAfterCallsIsContent) {
    const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(),
                                 "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n\nI called f.\n"
                                 "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>\nDone.\n");
    EXPECT_EQ(p.content, "I called f.Done.\n");
    ASSERT_EQ(p.tool_calls.size(), 2u);
    EXPECT_EQ(p.tool_calls[1].name, "g");
}

TEST(MalformedOutput, JunkAfterBodyBeforeCloseTag) {
    const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(),
                                 "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} trailing\n</tool_call>");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.content, "trailing\n</tool_call>");
}

TEST(MalformedOutput, NewToolCallInsideABrokenOne) {
    const ParsedOutput p = parse(OutputFormat::Qwen3Hermes, qwen3_options(),
                                 "<tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
    EXPECT_EQ(p.content, "<tool_call>\n");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].name, "f");
}

TEST(MalformedOutput, EmptyAndOddCalls) {
    for (const std::string text :
         {"<tool_call>\n</tool_call>", "<tool_call></tool_call>", "<tool_call>x</tool_call>",
          "<tool_call>\n<function=>\n</function>\n</tool_call>", "<tool_call>\n<function=f\ng>\n</function>\n</tool_call>"}) {
        const ParsedOutput p = parse(OutputFormat::Qwen3CoderXml, ParserOptions{}, text);
        EXPECT_EQ(p.content, text);
        EXPECT_TRUE(p.tool_calls.empty());
    }
}

TEST(MalformedOutput, XmlJunkBetweenParameters) {
    const std::string text =
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\nnote: "
        "more\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>";
    const auto events = events_of(OutputFormat::Qwen3CoderXml, ParserOptions{}, {text});
    expect_well_formed(events);
    ASSERT_GE(events.size(), 3u);
    EXPECT_FALSE(merged(events)[2].complete) << describe(events);
    const ParsedOutput p = to_parsed(events);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.tool_calls.empty());
}

TEST(MalformedOutput, DeepNestingIsBounded) {
    const std::string deep(200000, '[');
    const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": " + deep + "\n</tool_call>";
    const auto events = events_of(OutputFormat::Qwen3Hermes, ParserOptions{}, {text});
    expect_well_formed(events);
    EXPECT_EQ(to_parsed(events).content, text);
}

// Byte-by-byte pushes over a long output stay linear.
TEST(MalformedOutput, LongOutputsAreLinear) {
    std::string text = "<think>\n";
    while (text.size() < 300000) text += "Some reasoning <b>with</b> tags and newlines\n\n";
    text += "</think>\n\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"content\": \"";
    while (text.size() < 600000) text += "x = {\\\"a\\\": [1, 2]}\\n";
    text += "\"}}\n</tool_call>\n<tool_call>\n<function=write_file>\n<parameter=content>\n";
    while (text.size() < 900000) text += "<p>\n</para>\n";
    text += "\n</parameter>\n</function>\n</tool_call>";
    const auto start = std::chrono::steady_clock::now();
    ParserOptions o;
    o.tools = weather_tools();
    const auto events = events_of(OutputFormat::Qwen3CoderXml, o, split_bytes(text));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 10.0);
    const ParsedOutput p = to_parsed(events);
    EXPECT_GT(p.reasoning.size(), 290000u);
    ASSERT_EQ(p.tool_calls.size(), 2u);
    EXPECT_EQ(to_parsed(events_of(OutputFormat::Qwen3CoderXml, o, {text})), p);
}

TEST(OutputParserApi, PushAfterFinishThrows) {
    auto p = make_output_parser(OutputFormat::Qwen3Hermes, ParserOptions{});
    EXPECT_EQ(p->push("a"), std::vector<OutputEvent>{ev(Kind::Content, "a")});
    EXPECT_EQ(p->finish(), std::vector<OutputEvent>{});
    EXPECT_EQ(p->finish(), std::vector<OutputEvent>{});
    EXPECT_THROW(p->push("b"), std::logic_error);
}

// ---- split invariance ----

void expect_split_invariant(OutputFormat format, const ParserOptions& options, const std::string& text, uint32_t seed,
                            int rounds) {
    const std::vector<OutputEvent> whole = merged(events_of(format, options, {text}));
    expect_well_formed(whole);
    ASSERT_EQ(whole, merged(events_of(format, options, split_bytes(text)))) << "byte pieces of:\n" << text;
    std::mt19937 rng(seed);
    for (int round = 0; round < rounds; ++round) {
        const size_t max_piece = size_t{1} << (round % 6);
        const auto pieces = split_random(text, rng, max_piece);
        const auto events = events_of(format, options, pieces);
        expect_well_formed(events);
        ASSERT_EQ(whole, merged(events)) << "seed " << seed << " round " << round << " text:\n"
                                         << text << "\nwhole:\n"
                                         << describe(whole) << "split:\n"
                                         << describe(merged(events));
    }
}

TEST(OutputSplitInvariance, Samples) {
    uint32_t seed = 1;
    for (const Sample& s : samples()) {
        SCOPED_TRACE(s.name);
        expect_split_invariant(s.format, s.options, s.text, seed++, 40);
        // The same text under the other format and options: different events, still invariant.
        expect_split_invariant(OutputFormat::Qwen3Hermes, qwen35_options(), s.text, seed++, 5);
        expect_split_invariant(OutputFormat::Plain, qwen3_options(), s.text, seed++, 5);
    }
}

// Tags, partial tags, JSON bits and text, for soups and for mutations.
const std::vector<std::string>& soup_bits() {
    static const std::vector<std::string> kBits = {"<think>",
                                                   "</think>",
                                                   "<tool_call>",
                                                   "</tool_call>",
                                                   "<function=f>",
                                                   "<function=get_weather>",
                                                   "</function>",
                                                   "<parameter=city>",
                                                   "<parameter=days>",
                                                   "<parameter=v>",
                                                   "</parameter>",
                                                   "\n",
                                                   "\n",
                                                   "\n\n",
                                                   " ",
                                                   "{",
                                                   "}",
                                                   "[",
                                                   "]",
                                                   "\"",
                                                   "\\",
                                                   ":",
                                                   ",",
                                                   "\"name\"",
                                                   "\"arguments\"",
                                                   ": ",
                                                   "\"get_weather\"",
                                                   "\"f\"",
                                                   "1",
                                                   "-",
                                                   "0",
                                                   ".5",
                                                   "true",
                                                   "null",
                                                   "hello",
                                                   "é",
                                                   "中文",
                                                   "🌧",
                                                   "<",
                                                   ">",
                                                   "/",
                                                   "=",
                                                   "x",
                                                   "<tool",
                                                   "</think",
                                                   "</param",
                                                   "<think",
                                                   "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
                                                   "{\"arguments\": {}, \"name\": \"g\"}",
                                                   "\t",
                                                   "\r\n"};
    return kBits;
}

std::string random_words(std::mt19937& rng) {
    static const std::vector<std::string> kWords = {"the", "weather", "is",   "{",    "}",  "\"q\"", "é",    "\n",     "\n\n",
                                                    "<b>", "<",       "x=1;", "東京", "\\", "42",    "true", "- item", "  "};
    std::string s;
    for (int n = 1 + static_cast<int>(rng() % 8); n > 0; --n) s += kWords[rng() % kWords.size()] + (rng() % 2 ? " " : "");
    return s;
}

std::string random_json(std::mt19937& rng, int depth) {
    switch (rng() % (depth > 2 ? 4 : 6)) {
        case 0: return std::to_string(static_cast<int>(rng() % 2000) - 1000);
        case 1: return rng() % 2 ? "true" : "null";
        case 2: return json(random_words(rng)).dump();
        case 3: return "-1.5e3";
        case 4: {
            std::string s = "[";
            for (int n = static_cast<int>(rng() % 3); n > 0; --n) s += random_json(rng, depth + 1) + (n > 1 ? ", " : "");
            return s + "]";
        }
        default: {
            std::string s = "{";
            for (int n = static_cast<int>(rng() % 3); n > 0; --n)
                s += "\"k" + std::to_string(n) + "\": " + random_json(rng, depth + 1) + (n > 1 ? ", " : "");
            return s + "}";
        }
    }
}

struct RandomOutput {
    std::string text;
    int calls = 0;
    bool damaged = false;
};

// A plausible output (thinking, text, calls in either body), then maybe damaged.
RandomOutput random_output(std::mt19937& rng, bool starts_in_thinking) {
    RandomOutput out;
    std::string& s = out.text;
    // A prompt that opened <think> is always answered with reasoning and </think>.
    if (starts_in_thinking || rng() % 3) s += (starts_in_thinking ? "" : "<think>\n") + random_words(rng) + "\n</think>\n\n";
    if (rng() % 2) s += random_words(rng);
    out.calls = static_cast<int>(rng() % 4);
    for (int calls = out.calls; calls > 0; --calls) {
        s += rng() % 2 ? "\n\n<tool_call>\n" : "\n<tool_call>\n";
        const std::string name = rng() % 2 ? "get_weather" : "f";
        if (rng() % 2) {
            std::string args = "{";
            for (int n = static_cast<int>(rng() % 3); n > 0; --n)
                args += "\"a" + std::to_string(n) + "\": " + random_json(rng, 1) + (n > 1 ? ", " : "");
            args += "}";
            s += rng() % 4 ? "{\"name\": \"" + name + "\", \"arguments\": " + args + "}"
                           : "{\"arguments\": " + args + ", \"name\": \"" + name + "\"}";
        } else {
            s += "<function=" + name + ">\n";
            static const std::vector<std::string> kParams = {"city", "days", "unit", "v"};
            for (int n = static_cast<int>(rng() % 4); n > 0; --n)
                s += "<parameter=" + kParams[rng() % kParams.size()] + ">\n" +
                     (rng() % 2 ? random_words(rng) : random_json(rng, 1)) + "\n</parameter>\n";
            s += "</function>";
        }
        s += "\n</tool_call>";
    }
    if (rng() % 4 == 0) s += "\n" + random_words(rng);
    for (int damage = static_cast<int>(rng() % 3); damage > 0; --damage) {
        if (s.empty()) break;
        out.damaged = true;
        const size_t at = rng() % s.size();
        switch (rng() % 3) {
            case 0: s.resize(at); break;
            case 1: s.insert(at, soup_bits()[rng() % soup_bits().size()]); break;
            default: s.erase(at, 1 + rng() % 6); break;
        }
    }
    return out;
}

std::vector<std::pair<OutputFormat, ParserOptions>> all_configs() {
    std::vector<std::pair<OutputFormat, ParserOptions>> configs;
    for (OutputFormat f : {OutputFormat::Plain, OutputFormat::Qwen3Hermes, OutputFormat::Qwen3CoderXml})
        for (int bits = 0; bits < 16; ++bits) {
            ParserOptions o;
            o.starts_in_thinking = bits & 1;
            o.parse_thinking = !(bits & 2);
            o.parse_tools = !(bits & 4);
            if (bits & 8) o.tools = weather_tools();
            configs.emplace_back(f, o);
        }
    return configs;
}

// Plausible outputs, damaged or not, and soups of bits: every path, including the malformed ones.
TEST(OutputSplitInvariance, RandomOutputs) {
    const auto configs = all_configs();
    std::mt19937 rng(20240607);
    int complete = 0, incomplete = 0, reasoning = 0;  // the texts must reach the interesting paths
    for (int i = 0; i < 4000; ++i) {
        const auto& [format, options] = configs[rng() % configs.size()];
        RandomOutput out;
        if (i % 4 == 0) {
            for (int n = static_cast<int>(rng() % 40); n > 0; --n) out.text += soup_bits()[rng() % soup_bits().size()];
            out.damaged = true;
        } else {
            out = random_output(rng, options.starts_in_thinking);
        }
        expect_split_invariant(format, options, out.text, static_cast<uint32_t>(i), 4);
        if (HasFatalFailure()) return;
        int calls = 0;
        for (const OutputEvent& e : events_of(format, options, {out.text})) {
            if (e.kind == Kind::ToolCallEnd) ++(e.complete ? complete : incomplete);
            if (e.kind == Kind::ToolCallEnd && e.complete) ++calls;
            if (e.kind == Kind::Reasoning) ++reasoning;
        }
        if (!out.damaged && options.parse_tools && format != OutputFormat::Plain) {
            EXPECT_EQ(calls, out.calls) << out.text;
        }
    }
    EXPECT_GT(complete, 800);
    EXPECT_GT(incomplete, 100);
    EXPECT_GT(reasoning, 1000);
    std::printf("random outputs: %d complete calls, %d broken after Begin, %d with reasoning\n", complete, incomplete, reasoning);
}

// ---- the JSON scanner ----

// nlohmann rejects numbers beyond double range ("1E999"); they are valid JSON syntax.
bool has_huge_exponent(const std::string& s) {
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != 'e' && s[i] != 'E') continue;
        size_t j = i + 1;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        size_t digits = 0;
        while (j + digits < s.size() && std::isdigit(static_cast<unsigned char>(s[j + digits]))) ++digits;
        if (digits >= 3) return true;
    }
    return false;
}

TEST(JsonScanner, AgreesWithNlohmann) {
    static const std::string kAlphabet = "{}[]\",:0123456789-+.eEtrufalsn \\u/ab\n";
    std::mt19937 rng(7);
    int complete = 0;
    for (int i = 0; i < 200000; ++i) {
        std::string s;
        const size_t n = 1 + rng() % 10;
        for (size_t k = 0; k < n; ++k) s += kAlphabet[rng() % kAlphabet.size()];
        if (has_huge_exponent(s)) continue;
        JsonScanner scanner;
        const bool all = scanner.feed(s);
        const bool accept = json::accept(s);
        if (accept) {
            ASSERT_TRUE(all && scanner.complete()) << s;
            ++complete;
        } else {
            ASSERT_FALSE(all && scanner.complete()) << s;
        }
    }
    EXPECT_GT(complete, 1000);
}

// Every prefix of a valid text is accepted; mutations agree with nlohmann once complete.
TEST(JsonScanner, ValidTextsAndMutations) {
    std::mt19937 rng(11);
    const std::vector<std::string> docs = {
        R"({"a": [1, -2.5e+3, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9"], "b": {"c": {}}, "d": []})",
        R"([0, 0.0, 1E5, -0, "", {"": ""}])",
        "  \"s\"  ",
        "123",
        "-0.5e-7",
        "[[[[[]]]]]",
        "{\"k\":\"}\"}"};
    for (const std::string& d : docs) {
        JsonScanner scanner;
        for (size_t i = 0; i < d.size(); ++i) ASSERT_TRUE(scanner.feed(d[i])) << d << " at " << i;
        EXPECT_TRUE(scanner.complete()) << d;
        for (int m = 0; m < 2000; ++m) {
            std::string s = d;
            s[rng() % s.size()] = "{}[]\",:0-.etn \\x"[rng() % 16];
            JsonScanner t;
            EXPECT_EQ(t.feed(s) && t.complete(), json::accept(s)) << s;
        }
    }
}

TEST(JsonScanner, ClosedAndDepth) {
    JsonScanner s;
    ASSERT_TRUE(s.feed("{\"a\": \"}\""));
    EXPECT_FALSE(s.closed());
    ASSERT_TRUE(s.feed('}'));
    EXPECT_TRUE(s.closed());
    EXPECT_FALSE(s.feed('x'));
    EXPECT_TRUE(s.feed(" \n"));

    JsonScanner n;
    ASSERT_TRUE(n.feed("12"));
    EXPECT_TRUE(n.complete());
    EXPECT_FALSE(n.closed());
    EXPECT_FALSE(n.feed('}'));
    EXPECT_TRUE(n.complete());  // unchanged by the rejected byte
    ASSERT_TRUE(n.feed(' '));
    EXPECT_TRUE(n.closed());

    JsonScanner d;
    EXPECT_TRUE(d.feed(std::string(JsonScanner::kMaxDepth, '[')));
    EXPECT_FALSE(d.feed('['));
    EXPECT_FALSE(d.feed('{'));
    EXPECT_TRUE(d.feed(']'));
    EXPECT_EQ(d.depth(), JsonScanner::kMaxDepth - 1);
}

}  // namespace
}  // namespace strata::serve
