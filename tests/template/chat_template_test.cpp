// The chat layer (request → template variables, transformers' conventions), the GGUF source of
// templates and special tokens, the `strata template` command, and render speed.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "template/chat_template.h"
#include "template/jinja_error.h"
#include "template_test_util.h"
#include "test_util.h"

namespace strata::test {
namespace {

using json = nlohmann::ordered_json;
using tmpl::ChatTemplate;

json request(const std::string& text) { return json::parse(text); }

std::filesystem::path qwen3_gguf() { return fixture("hf-tiny/qwen3moe/qwen3moe-bf16.gguf"); }

TEST(ChatTemplate, RequestKeysBecomeTemplateVariables) {
    auto t = ChatTemplate::from_source(
        "{{ messages|length }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ enable_thinking is defined }}|"
        "{{ custom }}|{{ eos_token }}|{{ bos_token is defined }}");
    t.set_special_token("eos_token", "<eos>");
    // tools and documents are None when absent (not undefined), as transformers passes them.
    EXPECT_EQ(t.render(request(R"({"messages": [{"role": "user", "content": "x"}]})")), "1|None|None|False|False||<eos>|False");
    EXPECT_EQ(t.render(request(R"({"messages": [], "tools": [], "add_generation_prompt": true, "enable_thinking": false,
                                   "custom": {"k": 1}, "eos_token": "override"})")),
              "0|[]|None|True|True|{'k': 1}|override|False");
}

TEST(ChatTemplate, MalformedRequestsAreErrors) {
    const auto t = ChatTemplate::from_source("{{ messages }}");
    EXPECT_THROW(t.render(request(R"([])")), Error);
    EXPECT_THROW(t.render(request(R"({"tools": []})")), Error);
    EXPECT_THROW(t.render(request(R"({"messages": {}})")), Error);
    EXPECT_THROW(t.render(request(R"({"messages": [], "add_generation_prompt": "yes"})")), Error);
    EXPECT_THROW(t.render(request(R"({"messages": [{"role": "user", "content": "a"}], "add_generation_prompt": true,
                                      "continue_final_message": true})")),
                 Error);
}

TEST(ChatTemplate, ContinueFinalMessageCutsAfterItsText) {
    const auto qwen3 = ChatTemplate::from_source(read_text(template_dir() / "templates" / "qwen3.jinja"));
    EXPECT_EQ(
        qwen3.render(request(R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am"}],
                                       "continue_final_message": true})")),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello, I am");
    // A template that trims the message: the cut keeps only the stripped text (transformers' rule).
    const auto trims = ChatTemplate::from_source("[{{ messages[-1].content|trim }}]<end>");
    EXPECT_EQ(
        trims.render(request(R"({"messages": [{"role": "assistant", "content": "  abc  "}], "continue_final_message": true})")),
        "[abc");
    // List content continues its last text block.
    const auto parts = ChatTemplate::from_source("{% for p in messages[-1].content %}{{ p.text }}{% endfor %}<end>");
    EXPECT_EQ(parts.render(request(R"({"messages": [{"role": "assistant", "content": [{"type": "text", "text": "one "},
                                       {"type": "text", "text": "two"}]}], "continue_final_message": true})")),
              "one two");
    EXPECT_THROW(ChatTemplate::from_source("dropped").render(request(R"({"messages": [{"role": "assistant", "content": "zzz"}],
                                                                           "continue_final_message": true})")),
                 Error);
}

TEST(ChatTemplate, RaisedMessageIsExactlyTheTemplates) {
    const auto qwen35 = ChatTemplate::from_source(read_text(template_dir() / "templates" / "qwen3.5.jinja"));
    try {
        qwen35.render(request(R"({"messages": []})"));
        FAIL() << "expected the template to raise";
    } catch (const tmpl::TemplateError& e) {
        EXPECT_EQ(e.kind(), tmpl::TemplateError::Kind::Raised);
        EXPECT_STREQ(e.what(), "No messages provided.");
    }
}

TEST(ChatTemplate, FromGgufUsesItsTemplateAndSpecialTokens) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto file = gguf::File::open(qwen3_gguf());
    const auto t = ChatTemplate::from_gguf(*file);
    EXPECT_EQ(t.source(), read_text(template_dir() / "templates" / "qwen3.jinja"));
    auto probe = ChatTemplate::from_source("{{ eos_token }}|{{ pad_token }}|{{ bos_token is defined }}");
    probe.set_special_tokens_from(*file);
    EXPECT_EQ(probe.render(request(R"({"messages": []})")), "<|im_end|>|<|endoftext|>|False");
    const json chat = request(
        R"({"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": true, "enable_thinking": false})");
    EXPECT_EQ(t.render(chat), "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

// ---- CLI --------------------------------------------------------------------------------------

std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

TEST(TemplateCli, RendersStdinWithATemplateFile) {
    const auto case_file = template_dir() / "cases" / "12_parallel_tool_calls.json";
    const auto r =
        run_strata("template --template " + quoted(template_dir() / "templates" / "qwen3.5.jinja"), read_text(case_file));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    const std::string want = read_text(template_dir() / "ref" / "qwen3.5" / "12_parallel_tool_calls.txt");
    EXPECT_EQ(r.out, want) << first_difference(want, r.out);
}

TEST(TemplateCli, RendersWithTheModelsTemplate) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto case_file = template_dir() / "cases" / "14_multi_step_reasoning_tools.json";
    const auto r = run_strata("template -m " + quoted(qwen3_gguf()), read_text(case_file));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::string want = read_text(template_dir() / "ref" / "qwen3" / "14_multi_step_reasoning_tools.txt");
    EXPECT_EQ(r.out, want) << first_difference(want, r.out);
}

TEST(TemplateCli, ErrorsAreOneLineAndExitOne) {
    const std::string tpl = "--template " + quoted(template_dir() / "templates" / "qwen3.5.jinja");
    auto r = run_strata("template " + tpl, "{not json");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("invalid JSON"), std::string::npos) << r.err;

    r = run_strata("template " + tpl, R"({"messages": [{"role": "system", "content": "only system"}]})");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "strata: error: No user query found in messages.\n");

    TempDir dir;
    { std::ofstream(dir / "bad.jinja") << "ok\n{% if %}"; }
    r = run_strata("template --template " + quoted(dir / "bad.jinja"), R"({"messages": []})");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(":2:"), std::string::npos) << r.err;  // names the line
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

    r = run_strata("template", "{}");
    EXPECT_EQ(r.exit_code, 1);
}

// ---- speed ------------------------------------------------------------------------------------

TEST(ChatTemplateSpeed, FiftyMessageConversationWithTools) {
    const json chat = json::parse(read_text(template_dir() / "cases" / "35_long_conversation.json"));
    ASSERT_EQ(chat["messages"].size(), 50u);
    for (const char* name : {"qwen3", "qwen3-coder", "qwen3.5"}) {
        const auto t = ChatTemplate::from_source(read_text(template_dir() / "templates" / (std::string(name) + ".jinja")));
        t.render(chat);  // warm up
        const int runs = 50;
        const auto start = std::chrono::steady_clock::now();
        size_t bytes = 0;
        for (int k = 0; k < runs; ++k) bytes += t.render(chat).size();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / runs;
        std::cout << "[ render ] " << name << ": " << ms << " ms per 50-message render (" << bytes / runs << " bytes)\n";
        // Generous enough for sanitizer builds; a release build takes well under 2 ms.
        EXPECT_LT(ms, 50.0) << name;
    }
}

}  // namespace
}  // namespace strata::test
