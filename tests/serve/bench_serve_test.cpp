// `strata bench serve`: the stream reader and statistics on made-up chunks, ignore_eos through the
// request parser, and the whole command against a real `strata serve` (and the engine baseline)
// on a tiny model.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "bench/serve_bench.h"
#include "model_tools/make_model.h"
#include "serve/chat_request.h"
#include "test_util.h"

namespace strata::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string chat_chunk(const json& delta) {
    return "data: " +
           json{{"object", "chat.completion.chunk"}, {"choices", {{{"index", 0}, {"delta", delta}, {"finish_reason", nullptr}}}}}
               .dump() +
           "\n\n";
}

TEST(BenchServe, StreamRecorderTimesContentChunksOnly) {
    const Clock::time_point t0 = Clock::now();
    StreamRecorder rec(Endpoint::Chat, t0);
    // The role chunk comes at once and does not count; the first content chunk is split across reads.
    rec.feed(chat_chunk({{"role", "assistant"}, {"content", ""}}), t0 + 1ms);
    const std::string first = chat_chunk({{"content", "Hel"}});
    rec.feed(first.substr(0, 10), t0 + 100ms);
    rec.feed(first.substr(10) + ": a comment\n\n", t0 + 110ms);
    rec.feed(chat_chunk({{"reasoning_content", "lo"}}) + chat_chunk({{"content", ""}}), t0 + 130ms);
    rec.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\r\n\r\n", t0 + 170ms);
    rec.feed(chat_chunk(json::object()), t0 + 180ms);  // the finish chunk
    rec.feed(
        "data: " +
            json{{"choices", json::array()},
                 {"usage", {{"prompt_tokens", 12}, {"completion_tokens", 4}, {"prompt_tokens_details", {{"cached_tokens", 8}}}}}}
                .dump() +
            "\n\ndata: [DONE]\n\n",
        t0 + 200ms);
    const RequestResult r = rec.finish();
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NEAR(r.ttft_s, 0.110, 1e-9);
    ASSERT_EQ(r.itl_s.size(), 2u);
    EXPECT_NEAR(r.itl_s[0], 0.020, 1e-9);
    EXPECT_NEAR(r.itl_s[1], 0.040, 1e-9);
    EXPECT_NEAR(r.e2e_s, 0.170, 1e-9);
    EXPECT_EQ(r.content_chunks, 3);
    EXPECT_EQ(r.output_tokens, 4);
    EXPECT_EQ(r.prompt_tokens, 12);
    EXPECT_EQ(r.cached_tokens, 8);
    // TPOT = (E2E − TTFT) / (tokens − 1)
    const Summary s = summarize({r}, 1.0);
    EXPECT_NEAR(s.tpot.median, (170.0 - 110.0) / 3, 1e-6);
    EXPECT_DOUBLE_EQ(s.output_throughput, 4);
    EXPECT_DOUBLE_EQ(s.total_throughput, 16);
}

TEST(BenchServe, StreamRecorderFailures) {
    const Clock::time_point t0 = Clock::now();
    {
        StreamRecorder rec(Endpoint::Completions, t0);
        rec.feed("data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n", t0 + 1ms);
        rec.feed("data: {\"error\":{\"message\":\"generation failed: boom\"}}\n\ndata: [DONE]\n\n", t0 + 2ms);
        const RequestResult r = rec.finish();
        EXPECT_FALSE(r.ok);
        EXPECT_NE(r.error.find("boom"), std::string::npos) << r.error;
    }
    {
        StreamRecorder rec(Endpoint::Completions, t0);
        rec.feed("data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n", t0 + 1ms);  // cut off: no [DONE]
        EXPECT_FALSE(rec.finish().ok);
    }
    {
        StreamRecorder rec(Endpoint::Completions, t0);
        rec.feed("data: {\"choices\":[{\"index\":0,\"text\":\"\"}]}\n\ndata: [DONE]\n\n", t0 + 1ms);
        const RequestResult r = rec.finish();
        EXPECT_FALSE(r.ok);
        EXPECT_EQ(r.error, "no content chunk in the stream");
        const Summary s = summarize({r, r}, 1.0);
        EXPECT_EQ(s.failed, 2);
        EXPECT_EQ(s.completed, 0);
        EXPECT_EQ(s.errors.size(), 1u);
    }
}

TEST(BenchServe, PercentilesInterpolateLikeNumpy) {
    EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
    EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 99), 3.97);
    EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
    EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

TEST(BenchServe, RequestsAreDistinctAndReproducible) {
    WorkloadOptions o;
    o.input_tokens = 40;
    o.shared_prefix = 16;
    o.seed = 3;
    const PromptMaker maker;
    const auto a = make_requests(o, maker, 0, 4);
    const auto b = make_requests(o, maker, 2, 2);
    EXPECT_EQ(a[2].body_text, b[0].body_text);  // request i does not depend on what came before
    const std::string p0 = a[0].body["messages"][0]["content"], p1 = a[1].body["messages"][0]["content"];
    EXPECT_NE(p0, p1);
    EXPECT_EQ(std::count(p0.begin(), p0.end(), ' '), 56);  // 16 + 40 one-token words
    size_t common = 0;
    while (common < p0.size() && p0[common] == p1[common]) ++common;
    EXPECT_GE(std::count(p0.begin(), p0.begin() + static_cast<long>(common), ' '), 16);
    // After the prefix, the first two words differ between any two of 69,696 consecutive requests.
    auto head = [](const std::string& p) {
        size_t at = 0;
        for (int spaces = 0; spaces < 19 && at != std::string::npos; ++spaces) at = p.find(' ', at + 1);
        return p.substr(0, at);
    };
    std::set<std::string> heads;
    for (const auto& r : make_requests(o, maker, 1000, 2000)) heads.insert(head(r.body["messages"][0]["content"]));
    EXPECT_EQ(heads.size(), 2000u);
    EXPECT_EQ(a[0].body["ignore_eos"], true);
    EXPECT_EQ(a[0].body["stream_options"]["include_usage"], true);
}

TEST(BenchServe, IgnoreEosReachesTheEngineSubmit) {
    const auto body = serve::ojson::parse(R"({"messages":[{"role":"user","content":"hi"}],"ignore_eos":true})");
    EXPECT_EQ(serve::parse_openai_chat(body, {}).sampling.ignore_eos, true);
    const auto completion = serve::ojson::parse(R"({"prompt":"hi","ignore_eos":false})");
    EXPECT_EQ(serve::parse_openai_completion(completion, {}).sampling.ignore_eos, false);
    try {
        serve::parse_openai_chat(serve::ojson::parse(R"({"messages":[{"role":"user","content":"hi"}],"ignore_eos":1})"), {});
        FAIL() << "a number was accepted as ignore_eos";
    } catch (const serve::ApiError& e) {
        EXPECT_EQ(e.status, 400);
        EXPECT_EQ(e.param, "ignore_eos");
    }
}

// `strata serve` on a tiny model, on a free port; stopped with SIGTERM.
class ServeProcess {
public:
    explicit ServeProcess(const std::filesystem::path& model) {
        const std::string log = (dir_ / "serve.log").string();
        pid_ = ::fork();
        if (pid_ == 0) {
            const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            ::dup2(fd, 2);
            ::execl(STRATA_BINARY, STRATA_BINARY, "serve", "-m", model.c_str(), "--port", "0", "--parallel", "4",
                    static_cast<char*>(nullptr));
            ::_exit(127);
        }
        // serve: listening on http://HOST:PORT
        const std::regex listening("listening on (http://[^ \n:]+:([0-9]+))");
        for (auto deadline = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < deadline;) {
            std::ifstream in(log);
            std::stringstream ss;
            ss << in.rdbuf();
            log_ = ss.str();
            std::smatch m;
            if (std::regex_search(log_, m, listening)) {
                url_ = m[1];
                return;
            }
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(50ms);
        }
    }
    ~ServeProcess() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        int status = 0;
        ::waitpid(pid_, &status, 0);
    }
    const std::string& url() const { return url_; }
    const std::string& log() const { return log_; }

private:
    strata::test::TempDir dir_;
    pid_t pid_ = -1;
    std::string url_, log_;
};

json read_json(const std::filesystem::path& p) {
    std::ifstream in(p);
    return json::parse(in);
}

TEST(BenchServe, RunsAgainstARealServerAndTheEngineAlone) {
    strata::test::TempDir dir;
    const auto model = dir / "tiny.gguf";
    model_tools::MakeModelOptions mo;
    mo.seed = 7;
    model_tools::make_model(mo, model);
    ServeProcess serve(model);
    ASSERT_FALSE(serve.url().empty()) << "serve did not start:\n" << serve.log();

    // 64 clients connecting at once: more than a listen backlog of 5 (cpp-httplib's) would take.
    const auto out = dir / "chat.json";
    auto r = strata::test::run_strata(
        "bench serve --url " + serve.url() + " --concurrency 1,64 --requests 64 --input-tokens 24 --output-tokens 6" +
        " --temperature 1 --engine-baseline " + model.string() + " --parallel 4 --json " + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_NE(r.out.find("Serve vs engine"), std::string::npos) << r.out;
    const json j = read_json(out);
    ASSERT_EQ(j["levels"].size(), 2u);
    for (const auto& level : j["levels"]) {
        for (const char* target : {"serve", "engine"}) {
            const json& s = level[target];
            EXPECT_EQ(s["completed"], 64) << target << " " << s;
            EXPECT_EQ(s["failed"], 0) << target << " " << s;
            EXPECT_EQ(s["total_output_tokens"], 64 * 6) << target << ": ignore_eos did not give exact lengths";
            EXPECT_GT(s["ttft"]["median_ms"].get<double>(), 0) << target;
            EXPECT_GT(s["tpot"]["median_ms"].get<double>(), 0) << target;
            EXPECT_EQ(s["tpot"]["n"], 64) << target;
            EXPECT_GT(s["output_throughput"].get<double>(), 0) << target;
        }
        // The same prompts, the same template: the same prompt lengths on both sides.
        EXPECT_EQ(level["serve"]["total_input_tokens"], level["engine"]["total_input_tokens"]);
        EXPECT_EQ(level["serve"]["total_cached_tokens"], 0);
        EXPECT_GT(level["serve_vs_engine"]["tpot_ratio"].get<double>(), 0);
    }

    // /v1/completions with Poisson arrivals and a shared prefix (which the prefix cache then reuses).
    const auto out2 = dir / "completions.json";
    r = strata::test::run_strata(
        "bench serve --url " + serve.url() + " --endpoint completions --concurrency 2 --requests 6 --input-tokens 16" +
        " --shared-prefix 64 --output-tokens 4 --temperature 1 --request-rate 40 --seed 9 --json " + out2.string());
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    const json s = read_json(out2)["levels"][0]["serve"];
    EXPECT_EQ(s["completed"], 6) << s;
    EXPECT_EQ(s["total_output_tokens"], 6 * 4);
    EXPECT_GT(s["total_cached_tokens"].get<int64_t>(), 0) << s;

    // A server that is not there: a clear error, not a table of failures.
    r = strata::test::run_strata("bench serve --url http://127.0.0.1:1 --requests 1 --concurrency 1");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("cannot reach"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata::bench
