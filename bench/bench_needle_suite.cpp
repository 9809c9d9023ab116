// Needle recall of the gateway's long-context assembly:
//   bench_needle_suite [--quick] [--tokenizer DIR] [--work DIR] [--budgets 28000,8000]
// Builds seeded haystacks (prose, code, Chinese, a long chat) with needles at many depths,
// assembles each conversation for each budget with the Qwen3 tokenizer's counts, and prints per
// kind the recall of needle sentences (all present verbatim in the assembled prompt), the share
// of cases with every needle found, and the median assembly time. The full run holds 1M-token
// haystacks; --quick is the size of the unit test (tests/gateway/needle_test.cpp).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "gateway_needles.h"
#include "util/error.h"

namespace {

using namespace strata;
using namespace strata::bench::needles;

struct Tally {
    int cases = 0, needles = 0;
    std::map<int64_t, int> found, all_found;  // by budget
    std::map<int64_t, std::vector<double>> ms;
    int64_t tokens = 0;
};

std::vector<Case> make_cases(bool quick) {
    std::vector<Case> cases;
    const int64_t big = quick ? 48'000 : 1'000'000, mid = quick ? 32'000 : 256'000;
    for (int d = 0; d <= 10; ++d) {
        cases.push_back(single_needle(100 + d, big, d / 10.0));
        if (!quick) cases.push_back(single_needle(200 + d, 128'000, d / 10.0));
    }
    for (int i = 0; i < (quick ? 3 : 6); ++i) cases.push_back(multi_needle(300 + i, mid, 4));
    for (int d = 0; d <= 10; ++d) cases.push_back(two_hop(400 + d, mid, d / 10.0));
    if (!quick)
        for (int d = 0; d <= 10; ++d) cases.push_back(two_hop(420 + d, mid, d / 10.0));
    if (!quick)
        for (int d = 0; d < 3; ++d) cases.push_back(two_hop(450 + d, 1'000'000, 0.15 + d * 0.35));
    for (int d = 0; d < 10; ++d) cases.push_back(chat_needle(500 + d, quick ? 80 : 300, quick ? 300 : 800, d / 10.0));
    for (int d = 0; d < 10; ++d) cases.push_back(code_needle(600 + d, quick ? 24'000 : 200'000, d / 10.0));
    for (int d = 0; d < 10; ++d) cases.push_back(cjk_needle(700 + d, quick ? 24'000 : 200'000, d / 10.0));
    return cases;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    std::filesystem::path tok_dir = qwen3_tokenizer_dir(std::filesystem::current_path());
    std::filesystem::path work = std::filesystem::temp_directory_path() / "strata-needles";
    std::vector<int64_t> budgets{28'000, 8'000};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") quick = true;
        else if (a == "--tokenizer" && i + 1 < argc) tok_dir = argv[++i];
        else if (a == "--work" && i + 1 < argc) work = argv[++i];
        else if (a == "--budgets" && i + 1 < argc) {
            budgets.clear();
            for (std::string_view s = argv[++i]; !s.empty();) {
                const size_t c = s.find(',');
                budgets.push_back(std::stoll(std::string(s.substr(0, c))));
                s = c == std::string_view::npos ? std::string_view{} : s.substr(c + 1);
            }
        } else {
            std::fprintf(stderr, "usage: bench_needle_suite [--quick] [--tokenizer DIR] [--work DIR] [--budgets 28000,8000]\n");
            return 2;
        }
    }
    try {
        std::filesystem::create_directories(work);
        auto tok = load_qwen3_tokenizer(tok_dir, work / "qwen3-tokenizer.gguf");
        gateway::ContextAssembler assembler(nullptr, counter_for(*tok));
        std::map<std::string, Tally> by_kind;
        std::vector<std::string> order;
        for (Case& k : make_cases(quick)) {
            if (!by_kind.count(k.kind)) order.push_back(k.kind);
            Tally& t = by_kind[k.kind];
            ++t.cases;
            t.needles += static_cast<int>(k.needles.size());
            for (int64_t budget : budgets) {
                gateway::AssembleOptions o;
                o.budget_tokens = budget;
                const auto t0 = std::chrono::steady_clock::now();
                const gateway::AssembleResult r = assembler.assemble("needles", k.conversation, o);
                t.ms[budget].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
                if (r.stats.tokens_out > budget)
                    std::printf("!! %s over budget: %lld > %lld\n", k.kind.c_str(), static_cast<long long>(r.stats.tokens_out),
                                static_cast<long long>(budget));
                const int f = needles_found(k, r);
                t.found[budget] += f;
                t.all_found[budget] += f == static_cast<int>(k.needles.size()) ? 1 : 0;
                if (budget == budgets.front()) t.tokens = std::max(t.tokens, r.stats.tokens_in);
                if (f < static_cast<int>(k.needles.size()) && std::getenv("NEEDLE_VERBOSE"))
                    std::printf("miss: %s depth %.2f budget %lld found %d/%zu\n", k.kind.c_str(), k.depth,
                                static_cast<long long>(budget), f, k.needles.size());
            }
        }
        std::printf("%-8s %6s %8s %10s", "kind", "cases", "needles", "max tokens");
        for (int64_t b : budgets)
            std::printf("   recall@%-6lld all@%-6lld  ms", static_cast<long long>(b), static_cast<long long>(b));
        std::printf("\n");
        for (const std::string& kind : order) {
            const Tally& t = by_kind[kind];
            std::printf("%-8s %6d %8d %10lld", kind.c_str(), t.cases, t.needles, static_cast<long long>(t.tokens));
            for (int64_t b : budgets)
                std::printf("   %7.1f%%      %5.1f%%  %5.0f", 100.0 * t.found.at(b) / t.needles,
                            100.0 * t.all_found.at(b) / t.cases, strata::bench::median(t.ms.at(b)));
            std::printf("\n");
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_needle_suite: %s\n", e.what());
        return 1;
    }
    return 0;
}
