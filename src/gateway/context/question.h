// Finds the question in the latest user message: what the query should be built from when that
// message is a paste with a question (or an instruction) at its end, at its head, or is the
// question alone. Heuristics, in order, on the message's last 4 KiB:
//   - a short message (<= 2,000 bytes) is all question;
//   - a line opening with a marker ("Question:", "Q:", "Task:", "Instruction:", "Query:", "问题：")
//     starts the question, which runs to the end;
//   - the last blank-line-separated paragraph, when it is short (<= 1,000 bytes) and is neither a
//     fenced code block nor a quote ("> ..."), is the question or instruction; short paragraphs
//     just before it that ask something ('?') join it;
//   - otherwise (the question glued to the material's last line) the trailing sentence that ends
//     in '?' within the last 600 bytes, with any short text after it ("Answer in one word.").
// The message's first paragraph joins as an instruction when it is short and ends in ':' or '?'
// ("Summarise the licence below:"), with a lower weight: pasted material starts right after it.
// Code fences and quoted blocks are material, never the question. Nothing found: `spans` empty
// (the caller falls back to the message's tail).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::gateway {

struct QuestionSpan {
    uint32_t begin, end;  // bytes of the message
    double weight;        // 1 for the question, less for a leading instruction
};

struct FoundQuestion {
    std::vector<QuestionSpan> spans;  // in text order
    uint32_t material_end = 0;        // where the material before the question ends (its tail may help a little)
    bool whole = false;               // the message is the question (short)
};

FoundQuestion find_question(std::string_view text);

}  // namespace strata::gateway
