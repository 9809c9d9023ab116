// The question found inside a paste (question.h) and the coverage of the facts it depends on
// (fact_coverage.h): where the question is in the shapes people paste, and which chunks a
// chain question pulls in, in what order, on a real session built by the assembler's chunker.
#include <gtest/gtest.h>

#include <string>

#include "gateway/context/chunker.h"
#include "gateway/context/fact_coverage.h"
#include "gateway/context/question.h"
#include "gateway/context/session.h"
#include "gateway/context/terms.h"

namespace strata::gateway {
namespace {

std::string material(int lines) {
    std::string s;
    for (int i = 0; i < lines; ++i)
        s += "Line " + std::to_string(i) + " of the licence says the software is provided as is, without warranty.\n";
    return s;
}

// The text of the question the finder picked (its full-weight spans, joined).
std::string asked(std::string_view text) {
    std::string out;
    for (const QuestionSpan& s : find_question(text).spans)
        if (s.weight >= 1.0) out += std::string(text.substr(s.begin, s.end - s.begin)) + "|";
    return out;
}

TEST(GatewayQuestion, FoundWherePeoplePutIt) {
    const std::string m = material(200);
    EXPECT_EQ(asked("Where is Mary?"), "Where is Mary?|");  // a question alone
    EXPECT_TRUE(find_question("Where is Mary?").whole);
    EXPECT_EQ(asked(m + "\nQuestion: Where is Mary?\n"), "Question: Where is Mary?|");
    EXPECT_EQ(asked(m + "\n\nWhere is Mary?"), "Where is Mary?|");
    EXPECT_EQ(asked(m + "\n\nRead the text above. Where is Mary? Answer in one word."),
              "Read the text above. Where is Mary? Answer in one word.|");
    // Glued to the material's last line, and glued inside one line.
    EXPECT_EQ(asked(m + "Where is Mary?"), "Where is Mary?|");
    EXPECT_EQ(asked(m.substr(0, m.size() - 1) + " Where is Mary?"), "Where is Mary?|");
    // An imperative instruction after the material.
    EXPECT_EQ(asked(m + "\n\nSummarise the warranty terms in two sentences.\n"),
              "Summarise the warranty terms in two sentences.|");
    // A marker with the question on several lines.
    EXPECT_EQ(asked(m + "\nQ: who wrote it?\nand when?"), "Q: who wrote it?\nand when?|");
    // Chinese.
    EXPECT_EQ(asked(m + "\n\n问题：王伟的密码是多少？"), "问题：王伟的密码是多少？|");
}

TEST(GatewayQuestion, CodeAndQuotesAreMaterial) {
    const std::string m = material(200);
    // A fence at the end is material; the instruction before the paste is the question.
    const std::string code = "What does this function return?\n\n```c\n" + m + "int f(void) { return 1; } /* why? */\n```\n";
    EXPECT_EQ(asked(code), "What does this function return?|");
    // A question inside the fence is not taken.
    EXPECT_EQ(asked("```\n" + m + "is this a question?\n```"), "");
    // A quoted block at the end is material.
    EXPECT_EQ(asked(m + "\n\n> is it quoted?\n> yes?"), "");
    // Nothing that asks: no question (the caller falls back to the tail).
    EXPECT_TRUE(find_question(m + m).spans.empty());
}

TEST(GatewayQuestion, LeadingInstructionWeighsLessThanTheQuestion) {
    const std::string m = material(200);
    const FoundQuestion f = find_question("Summarise the licence below:\n\n" + m + "\n\nWho owns the copyright?");
    ASSERT_EQ(f.spans.size(), 2u);
    EXPECT_LT(f.spans[0].weight, 1.0);
    EXPECT_EQ(f.spans[1].weight, 1.0);
    EXPECT_GT(f.material_end, 1000u);
}

// A session of one message, chunked as the assembler chunks it.
struct OneMessage {
    std::string text;
    Session session{0, ""};
    explicit OneMessage(std::string t) : text(std::move(t)) {
        std::vector<NewChunk> chunks;
        for (const ChunkSpan& c : chunk_text(text))
            chunks.push_back(
                {c.offset, c.length, static_cast<int32_t>(c.length / 4), count_terms(text.substr(c.offset, c.length))});
        session.add_message(1, static_cast<int64_t>(text.size() / 4), false, std::move(chunks));
    }
    std::string_view chunk(uint32_t c) const {
        const ChunkRecord& r = session.chunk(c);
        return std::string_view(text).substr(r.offset, r.length);
    }
    // A fact's sentence, without its surrounding whitespace.
    std::string fact(const RankedChunk& p) const {
        std::string_view s = std::string_view(text).substr(p.begin, p.end - p.begin);
        while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
        while (!s.empty() && (s.front() == '\n' || s.front() == ' ')) s.remove_prefix(1);
        return std::string(s);
    }
};

TEST(GatewayCoverage, ChainsLeadFromTheQuestionToTheAnswer) {
    // Filler paragraphs with the story between them, one statement a paragraph.
    std::string text;
    const std::string statements[] = {"Daniel went to the garden.",           "Sandra travelled to the office.",
                                      "Daniel picked up the football there.", "Mary went to the bathroom.",
                                      "Daniel journeyed to the kitchen.",     "Sandra moved to the hallway."};
    for (int i = 0; i < 6; ++i) text += material(30) + "\n" + statements[i] + "\n\n";
    OneMessage m(text);
    std::vector<uint8_t> kind(m.session.n_chunks(), 1);
    const std::string q = "Where is the football?";
    const QueryPart part{q, 1.0, true};
    const CoveredFacts f = cover_facts(m.session, kind, std::span(&part, 1), [&](uint32_t c) { return m.chunk(c); });
    EXPECT_EQ(f.entities, 1);  // football ("where", "is", "the" are function words)
    std::string got;
    for (const RankedChunk& p : f.picks) got += m.fact(p) + "|";
    // The statement naming the football, and (through Daniel) where Daniel went.
    EXPECT_NE(got.find(statements[2]), std::string::npos);
    EXPECT_NE(got.find(statements[4]), std::string::npos);
    EXPECT_NE(got.find(statements[0]), std::string::npos);
    // The football's statement comes first; statements about no one asked come after Daniel's or not at all.
    // Each fact is its sentence alone, not its chunk of licence text.
    ASSERT_FALSE(f.picks.empty());
    EXPECT_EQ(m.fact(f.picks[0]), statements[2]);
    const auto rank = [&](const std::string& s) {
        for (size_t i = 0; i < f.picks.size(); ++i)
            if (m.fact(f.picks[i]) == s) return i;
        return f.picks.size();
    };
    EXPECT_LT(rank(statements[4]), rank(statements[5]));
    // Chunks already in the prompt lead on but are not listed.
    for (uint32_t c = 0; c < m.session.n_chunks(); ++c)
        if (std::string(m.chunk(c)).find(statements[2]) != std::string::npos) kind[c] = 2;
    const CoveredFacts g = cover_facts(m.session, kind, std::span(&part, 1), [&](uint32_t c) { return m.chunk(c); });
    got.clear();
    for (const RankedChunk& p : g.picks) got += m.fact(p) + "|";
    EXPECT_EQ(got.find(statements[2]), std::string::npos);
    EXPECT_NE(got.find(statements[4]), std::string::npos);
}

TEST(GatewayCoverage, CommonWordsAreNotEntities) {
    // "licence" and "software" are in every chunk: they name nothing in particular.
    OneMessage m(material(400) + "\nThe Osprey archive is in Coldwater.\n");
    std::vector<uint8_t> kind(m.session.n_chunks(), 1);
    const std::string q = "What does the licence say about the software?";
    const QueryPart part{q, 1.0, true};
    const CoveredFacts f = cover_facts(m.session, kind, std::span(&part, 1), [&](uint32_t c) { return m.chunk(c); });
    EXPECT_EQ(f.entities, 0);
    EXPECT_TRUE(f.picks.empty());
    EXPECT_TRUE(is_function_word("where"));
    EXPECT_FALSE(is_function_word("football"));
}

}  // namespace
}  // namespace strata::gateway
