#include "gateway/context/question.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace strata::gateway {
namespace {

constexpr size_t kShortMessage = 2000;    // a message this short is the question itself
constexpr size_t kTailScan = 4096;        // where a question at the end is looked for
constexpr size_t kShortParagraph = 1000;  // a final paragraph this short is the question / instruction
constexpr size_t kQuestionScan = 600;     // a '?' sentence glued to the material: within the last bytes
constexpr size_t kAfterQuestion = 200;    // text after the '?' still part of it ("Answer in one word.")
constexpr size_t kMaxSentence = 400;      // a question sentence longer than this starts at the cap
constexpr size_t kHeadInstruction = 600;  // a leading instruction paragraph at most this long

bool is_blank_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim_blank(std::string_view s) {
    while (!s.empty() && is_blank_byte(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_blank_byte(s.back())) s.remove_suffix(1);
    return s;
}

// A Markdown fence: 3-5 backticks or tildes, then nothing or an info string ("```c"). Longer
// runs are underlines of headings ("~~~~~~~~~~~" in reStructuredText), not fences.
bool is_fence(std::string_view line) {
    const std::string_view t = trim_blank(line);
    if (t.size() < 3 || (t[0] != '`' && t[0] != '~')) return false;
    size_t n = 0;
    while (n < t.size() && t[n] == t[0]) ++n;
    if (n < 3 || n > 5) return false;
    for (size_t i = n; i < t.size(); ++i)
        if (t[i] == ' ' || t[i] == '\t' || t[i] == t[0]) return false;
    return true;
}

bool is_quote(std::string_view line) {
    const std::string_view t = trim_blank(line);
    return !t.empty() && t.front() == '>';
}

// "Question:", "Q:", "问题：" … at the start of a line (case-insensitive, ASCII markers).
bool is_marker(std::string_view line) {
    const std::string_view t = trim_blank(line);
    static constexpr std::string_view ascii[] = {
        "question:", "questions:", "q:", "task:", "instruction:", "instructions:", "query:"};
    std::string lower(t.substr(0, std::min<size_t>(t.size(), 16)));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (std::string_view m : ascii)
        if (std::string_view(lower).substr(0, m.size()) == m) return true;
    static constexpr std::string_view cjk[] = {"\xE9\x97\xAE\xE9\xA2\x98\xEF\xBC\x9A", "\xE9\x97\xAE\xE9\xA2\x98:",
                                               "\xE8\xB3\xAA\xE5\x95\x8F\xEF\xBC\x9A"};  // 问题： 问题: 質問：
    for (std::string_view m : cjk)
        if (t.substr(0, m.size()) == m) return true;
    return false;
}

struct Line {
    uint32_t begin, end;  // without its '\n'
    bool blank;
    bool in_fence;  // inside a fenced code block (or a fence line itself)
};

// Lines of text[from, size), `open` telling whether a fence is open at `from`.
std::vector<Line> lines_from(std::string_view text, size_t from, bool open) {
    std::vector<Line> out;
    size_t at = from;
    while (at < text.size()) {
        size_t nl = text.find('\n', at);
        if (nl == std::string_view::npos) nl = text.size();
        const std::string_view l = text.substr(at, nl - at);
        const bool fence = is_fence(l);
        out.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(nl), trim_blank(l).empty(), open || fence});
        if (fence) open = !open;
        at = nl + 1;
    }
    return out;
}

// The line holding byte `at`.
const Line* line_at(const std::vector<Line>& lines, size_t at) {
    for (const Line& l : lines)
        if (at >= l.begin && at <= l.end) return &l;
    return nullptr;
}

// Fence lines (``` / ~~~) in text[0, at): an odd count means `at` is inside a code block.
int fences_before(std::string_view text, size_t at) {
    int fences = 0;
    size_t pos = 0;
    while (pos < at) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        if (is_fence(text.substr(pos, std::min(nl, at) - pos))) ++fences;
        pos = nl + 1;
    }
    return fences;
}

bool is_question_end(std::string_view text, size_t i) {
    if (text[i] == '?') return true;
    return i + 3 <= text.size() && text.substr(i, 3) == "\xEF\xBC\x9F";  // ？
}

// The trailing sentence ending in '?' (and the short text after it): [begin, end) or {0, 0}.
std::pair<uint32_t, uint32_t> trailing_question(std::string_view text, size_t end) {
    const size_t lo = end > kQuestionScan ? end - kQuestionScan : 0;
    size_t q = std::string_view::npos;
    for (size_t i = end; i > lo; --i)
        if (is_question_end(text, i - 1)) {
            q = i - 1;
            break;
        }
    if (q == std::string_view::npos || end - q > kAfterQuestion) return {0, 0};
    size_t b = q;
    const size_t floor = q > kMaxSentence ? q - kMaxSentence : 0;
    while (b > floor) {
        const char c = text[b - 1];
        if (c == '\n' || ((c == '.' || c == '!' || c == '?') && b < text.size() && is_blank_byte(text[b]))) break;
        // 。！？ end a sentence with no space after them.
        if (b >= 3 && (text.substr(b - 3, 3) == "\xE3\x80\x82" || text.substr(b - 3, 3) == "\xEF\xBC\x81" ||
                       text.substr(b - 3, 3) == "\xEF\xBC\x9F"))
            break;
        --b;
    }
    while (b < q && is_blank_byte(text[b])) ++b;
    return {static_cast<uint32_t>(b), static_cast<uint32_t>(end)};
}

}  // namespace

FoundQuestion find_question(std::string_view text) {
    FoundQuestion found;
    size_t end = text.size();
    while (end > 0 && is_blank_byte(text[end - 1])) --end;
    if (end == 0) return found;
    if (end <= kShortMessage) {
        size_t b = 0;
        while (b < end && is_blank_byte(text[b])) ++b;
        found.spans.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(end), 1.0});
        found.whole = true;
        return found;
    }

    size_t from = end > kTailScan ? end - kTailScan : 0;
    if (from > 0) from = text.find('\n', from) + 1;  // a line start (there is a '\n': end - from < kTailScan)
    const std::vector<Line> lines = lines_from(text.substr(0, end), from, fences_before(text, from) % 2 == 1);
    auto in_fence = [&](size_t at) {
        const Line* l = line_at(lines, at);
        return l != nullptr && l->in_fence;
    };

    // A marker line: the question runs from it to the end.
    std::pair<uint32_t, uint32_t> question{0, 0};
    for (size_t i = lines.size(); i > 0 && question.second == 0; --i) {
        const Line& l = lines[i - 1];
        if (!l.blank && is_marker(text.substr(l.begin, l.end - l.begin)) && end - l.begin <= kShortMessage && !l.in_fence)
            question = {l.begin, static_cast<uint32_t>(end)};
    }

    if (question.second == 0 && !lines.empty()) {
        // The last paragraph: lines after the last blank line.
        size_t first = lines.size();
        while (first > 0 && !lines[first - 1].blank) --first;
        const bool cut_off = first == 0 && from > 0;  // the paragraph runs on before the scanned tail
        const uint32_t p_begin = lines[first].begin;
        bool material = lines[first].in_fence;
        bool all_quote = true;
        for (size_t i = first; i < lines.size(); ++i) {
            const std::string_view l = text.substr(lines[i].begin, lines[i].end - lines[i].begin);
            material = material || is_fence(l);
            all_quote = all_quote && is_quote(l);
        }
        material = material || all_quote;
        const auto q = trailing_question(text, end);
        const Line* q_line = q.second != 0 ? line_at(lines, q.first) : nullptr;
        const bool q_in_fence =
            q.second != 0 && (in_fence(q.first) || (q_line && is_quote(text.substr(q_line->begin, q_line->end - q_line->begin))));
        if (!material && !cut_off && end - p_begin <= kShortParagraph) {
            question = {p_begin, static_cast<uint32_t>(end)};
            // A '?' sentence on its own line after material lines of the same paragraph: only it.
            if (q.second != 0 && q.first > p_begin && (text[q.first - 1] == '\n') && !q_in_fence)
                for (size_t i = first + 1; i < lines.size(); ++i)
                    if (lines[i].begin == q.first) question.first = q.first;
            // A short paragraph just before it that asks something joins it.
            if (question.first == p_begin && first > 0) {
                size_t j = first - 1;
                while (j > 0 && lines[j].blank) --j;
                size_t k = j;
                while (k > 0 && !lines[k - 1].blank) --k;
                const std::string_view para = trim_blank(text.substr(lines[k].begin, lines[j].end - lines[k].begin));
                const bool whole = k > 0 || from == 0;
                if (whole && !lines[j].blank && !lines[k].in_fence && !lines[j].in_fence &&
                    end - lines[k].begin <= kShortParagraph && para.find('?') != std::string_view::npos)
                    question.first = lines[k].begin;
            }
        } else if (q.second != 0 && !q_in_fence) {
            question = q;
        }
    }

    // A leading instruction: the first paragraph, short, ending in ':' or '?'.
    {
        size_t b = 0;
        while (b < text.size() && is_blank_byte(text[b])) ++b;
        size_t e = text.find("\n\n", b);
        const size_t limit = question.second != 0 ? question.first : end;
        if (e != std::string_view::npos && e - b <= kHeadInstruction && e < limit) {
            const std::string_view head = trim_blank(text.substr(b, e - b));
            const bool asks =
                !head.empty() && (head.back() == ':' || head.back() == '?' || is_question_end(head, head.size() - 1));
            if (asks && !is_fence(head) && head.find('\n') == std::string_view::npos)
                found.spans.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(b + head.size()), 0.6});
        }
    }
    if (question.second != 0) {
        found.spans.push_back({question.first, question.second, 1.0});
        found.material_end = question.first;
    } else {
        for (QuestionSpan& s : found.spans) s.weight = 1.0;  // the leading instruction is all there is
        found.material_end = static_cast<uint32_t>(end);
    }
    return found;
}

}  // namespace strata::gateway
