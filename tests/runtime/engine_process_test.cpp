// `strata engine` as a process: the line protocol end to end over real pipes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "model_tools/make_model.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using nlohmann::json;
using strata::test::run_strata;
using strata::test::TempDir;

const std::filesystem::path& tiny_gguf() {
    static TempDir dir;
    static const std::filesystem::path p = [] {
        model_tools::MakeModelOptions o;
        o.type = "q8_0";
        o.seed = 3;
        const auto path = dir / "tiny.gguf";
        model_tools::make_model(o, path);
        return path;
    }();
    return p;
}

std::vector<json> events(const std::string& out) {
    std::vector<json> ev;
    std::stringstream ss(out);
    std::string line;
    while (std::getline(ss, line)) ev.push_back(json::parse(line));  // every line must be JSON
    return ev;
}

std::vector<json> of(const std::vector<json>& ev, const std::string& kind, const std::string& id = "") {
    std::vector<json> out;
    for (const auto& e : ev)
        if (e["event"] == kind && (id.empty() || e.value("id", "") == id)) out.push_back(e);
    return out;
}

std::string text_of(const std::vector<json>& ev, const std::string& id) {
    std::string t;
    for (const auto& e : of(ev, "tokens", id)) t += e["text"].get<std::string>();
    return t;
}

TEST(EngineProcess, AnswersEveryRequestAndSurvivesMalformedLines) {
    const std::string in =
        R"({"op":"submit","id":"a","text":"Hello, engine","max_tokens":12,"temperature":0,"ignore_eos":true})"
        "\n"
        "this is not json\n"
        R"({"op":"frobnicate"})"
        "\n"
        R"({"op":"submit","id":"b","prompt":[72,105],"max_tokens":5,"temperature":0.8,"seed":7,"logprobs":true,"top_logprobs":2,"ignore_eos":true})"
        "\n"
        R"({"op":"submit","id":"bad","prompt":[1,2],"top_p":5})"
        "\n"
        R"({"op":"submit","id":"huge","prompt":[99999999]})"
        "\n"
        R"({"op":"cancel","id":"nobody"})"
        "\n"
        R"({"op":"stats","id":"s1"})"
        "\n"
        R"([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])"
        "\n";
    const auto r = run_strata("engine -m '" + tiny_gguf().string() + "'", in);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto ev = events(r.out);
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.front()["event"], "ready");
    EXPECT_EQ(ev.front()["protocol"], 1);
    EXPECT_EQ(ev.back()["event"], "bye");

    const auto done_a = of(ev, "done", "a");
    ASSERT_EQ(done_a.size(), 1u);
    EXPECT_EQ(done_a[0]["finish_reason"], "length");
    EXPECT_EQ(done_a[0]["usage"]["completion_tokens"], 12);
    const auto done_b = of(ev, "done", "b");
    ASSERT_EQ(done_b.size(), 1u);
    for (const auto& e : of(ev, "tokens", "b")) {
        ASSERT_TRUE(e.contains("logprobs"));
        for (const auto& lp : e["logprobs"]) {
            EXPECT_LE(lp["logprob"].get<double>(), 0.0);
            EXPECT_EQ(lp["top"].size(), 2u);
        }
    }
    EXPECT_EQ(of(ev, "tokens", "a").front().count("logprobs"), 0u);

    // Errors: the garbage line, the unknown op, the two bad submits (named), the unknown cancel,
    // the over-deep line.
    const auto errors = of(ev, "error");
    EXPECT_EQ(errors.size(), 6u) << r.out;
    EXPECT_EQ(of(ev, "error", "bad").size(), 1u);
    EXPECT_NE(of(ev, "error", "bad")[0]["message"].get<std::string>().find("top_p"), std::string::npos);
    EXPECT_NE(of(ev, "error", "huge")[0]["message"].get<std::string>().find("vocabulary"), std::string::npos);
    EXPECT_EQ(of(ev, "done", "bad").size(), 0u);
    ASSERT_EQ(of(ev, "stats", "s1").size(), 1u);

    // The same greedy request through generate gives the same text.
    const auto g = run_strata("generate -m '" + tiny_gguf().string() + "' --prompt 'Hello, engine' -n 12 --temp 0 --json");
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_EQ(text_of(ev, "a"), json::parse(g.out)["text"].get<std::string>());
}

TEST(EngineProcess, ShutdownCancelsWorkInFlight) {
    const std::string in = R"({"op":"submit","id":"long","prompt":[65,66,67],"max_tokens":100000,"ignore_eos":true})"
                           "\n"
                           R"({"op":"shutdown"})"
                           "\n";
    const auto r = run_strata("engine -m '" + tiny_gguf().string() + "'", in);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto ev = events(r.out);
    const auto done = of(ev, "done", "long");
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0]["finish_reason"], "cancelled");
    EXPECT_EQ(ev.back()["event"], "bye");
}

TEST(EngineProcess, BadModelFailsWithAMessage) {
    TempDir dir;
    const auto r = run_strata("engine -m '" + (dir / "missing.gguf").string() + "'", "");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("missing.gguf"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata::runtime
