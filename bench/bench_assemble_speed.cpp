// Speed of the gateway's long-context assembly on a 1M-token conversation:
//   bench_assemble_speed [--tokens N] [--runs R] [--budget B] [--tokenizer DIR] [--work DIR]
// with the Qwen3 tokenizer counting (on all cores through IndexingOptions::count_threads):
//   first    a conversation never seen: chunk, count, index, persist, retrieve (fresh store each run)
//   next     its next turn, session in memory: only the new messages are indexed
//   restart  its next turn after reopening the store file (session loaded from SQLite)
//   paste    one N-token user message (a paste with a question at its end), first time
// Prints medians of R runs with the stage breakdown, and the tokenizer alone for reference.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "gateway/context/session_store.h"
#include "gateway_needles.h"

namespace {

using namespace strata;
using namespace strata::bench::needles;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// A long chat: user turns of prose or code pastes, assistant answers, ~tokens in all.
gateway::Conversation long_chat(uint64_t seed, int64_t tokens) {
    Gen g(seed);
    gateway::Conversation c;
    c.system = "You are a helpful assistant for a software team. Answer precisely and cite earlier turns.";
    int64_t bytes = 0;
    for (int t = 0; bytes < tokens * 42 / 10; ++t) {
        std::string user;
        if (t % 7 == 3)
            user = "Here is the module we discussed:\n```python\n" + join(code_blocks(g, 1500), "\n") + "```\nWhat does it do?";
        else user = join(prose_paragraphs(g, g.uniform(200, 2500)), "\n\n") + "\n\nWhat do you think?";
        c.messages.push_back({"user", std::move(user), true});
        c.messages.push_back({"assistant", join(prose_paragraphs(g, g.uniform(300, 1500)), "\n\n"), false});
        bytes += static_cast<int64_t>(c.messages[c.messages.size() - 2].text.size() + c.messages.back().text.size());
    }
    c.messages.push_back({"user", "Remind me what we said about the quiet orchard in Millbrook?", true});
    return c;
}

void add_turn(gateway::Conversation& c, Gen& g, int i) {
    c.messages.push_back({"assistant", join(prose_paragraphs(g, 400), "\n\n"), false});
    c.messages.push_back({"user",
                          "Follow-up " + std::to_string(i) + ": and what about the " + std::string(g.pick(pools().noun)) +
                              " of " + std::string(g.pick(pools().place)) + "?",
                          true});
}

struct Series {
    std::vector<double> total, session, chunk_count, index, retrieve;
    int64_t tokens_in = 0, tokens_out = 0;
    int chunks_new = 0, chunks_total = 0;
    bool hit = false;
    void add(const gateway::AssembleResult& r, double wall) {
        total.push_back(wall);
        session.push_back(r.stats.ms_session);
        chunk_count.push_back(r.stats.ms_chunk_count);
        index.push_back(r.stats.ms_index);
        retrieve.push_back(r.stats.ms_retrieve);
        tokens_in = r.stats.tokens_in;
        tokens_out = r.stats.tokens_out;
        chunks_new = r.stats.chunks_new;
        chunks_total = r.stats.chunks_total;
        hit = r.stats.session_hit;
    }
    void print(const char* name) const {
        using strata::bench::median;
        std::printf("%-8s %9.1f %9.1f %12.1f %9.1f %9.1f %11lld %10lld %7d/%-7d %s\n", name, median(total), median(session),
                    median(chunk_count), median(index), median(retrieve), static_cast<long long>(tokens_in),
                    static_cast<long long>(tokens_out), chunks_new, chunks_total, hit ? "hit" : "miss");
    }
};

}  // namespace

int main(int argc, char** argv) {
    int64_t tokens = 1'000'000, budget = 28'000;
    int runs = 5;
    std::filesystem::path tok_dir = qwen3_tokenizer_dir(std::filesystem::current_path());
    std::filesystem::path work = std::filesystem::temp_directory_path() / "strata-assemble-speed";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--tokens" && i + 1 < argc) tokens = std::stoll(argv[++i]);
        else if (a == "--runs" && i + 1 < argc) runs = std::stoi(argv[++i]);
        else if (a == "--budget" && i + 1 < argc) budget = std::stoll(argv[++i]);
        else if (a == "--tokenizer" && i + 1 < argc) tok_dir = argv[++i];
        else if (a == "--work" && i + 1 < argc) work = argv[++i];
        else {
            std::fprintf(stderr,
                         "usage: bench_assemble_speed [--tokens N] [--runs R] [--budget B] [--tokenizer DIR] [--work DIR]\n");
            return 2;
        }
    }
    try {
        std::filesystem::create_directories(work);
        auto tok = load_qwen3_tokenizer(tok_dir, work / "qwen3-tokenizer.gguf");
        const gateway::TokenCounter count = counter_for(*tok);
        gateway::Conversation chat = long_chat(1, tokens);
        std::string all;
        for (const auto& m : chat.messages) all += m.text;
        {
            const auto t0 = Clock::now();
            const size_t n = tok->encode_parallel(all, 2, false).size();
            const double ms = ms_since(t0);
            std::printf(
                "conversation: %zu messages, %.1f MB, %zu tokens; tokenizer alone (encode_parallel, 2 threads) %.0f ms = %.1f "
                "MB/s\n",
                chat.messages.size(), all.size() / 1e6, n, ms, all.size() / 1e3 / ms);
        }
        const gateway::AssembleOptions opt{.budget_tokens = budget};
        std::printf("%-8s %9s %9s %12s %9s %9s %11s %10s %15s\n", "case", "total ms", "session", "chunk+count", "index",
                    "retrieve", "tokens in", "tokens out", "chunks new/all");

        Series first, next, restart, paste;
        const auto db = work / "sessions.db";
        Gen g(99);
        int turn = 0;
        for (int r = 0; r < runs; ++r) {
            for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db.string() + suffix);
            gateway::SessionStore store({.path = db});
            gateway::ContextAssembler a(&store, count);
            auto t0 = Clock::now();
            {
                const auto res = a.assemble("bench", chat, opt);
                first.add(res, ms_since(t0));
            }
            add_turn(chat, g, ++turn);
            t0 = Clock::now();
            {
                const auto res = a.assemble("bench", chat, opt);
                next.add(res, ms_since(t0));
            }
            chat.messages.resize(chat.messages.size() - 2);
        }
        {  // Restart: the store file holds the conversation; each run reopens it and asks a new next turn.
            for (int r = 0; r < runs; ++r) {
                gateway::SessionStore store({.path = db});
                gateway::ContextAssembler a(&store, count);
                add_turn(chat, g, ++turn);
                const auto t0 = Clock::now();
                {
                    const auto res = a.assemble("bench", chat, opt);
                    restart.add(res, ms_since(t0));
                }
            }
        }
        {
            gateway::Conversation p = paste_conversation(join(prose_paragraphs(g, tokens), "\n\n"),
                                                         "What is the secret passphrase for the quiet orchard project?");
            for (int r = 0; r < runs; ++r) {
                gateway::ContextAssembler a(nullptr, count);
                const auto t0 = Clock::now();
                {
                    const auto res = a.assemble("bench", p, opt);
                    paste.add(res, ms_since(t0));
                }
            }
        }
        first.print("first");
        next.print("next");
        restart.print("restart");
        paste.print("paste");
        std::printf("store file: %.1f MB (%s)\n", std::filesystem::file_size(db) / 1e6, db.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_assemble_speed: %s\n", e.what());
        return 1;
    }
    return 0;
}
