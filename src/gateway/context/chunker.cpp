#include "gateway/context/chunker.h"

#include <algorithm>

namespace strata::gateway {
namespace {

// std::isspace in the C locale.
bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// A piece that is never split further; block_start marks the first piece of a structural block.
struct Piece {
    uint32_t begin, end;
    int64_t tokens;
    bool block_start;
};

enum class BlockKind { Prose, Code };

struct Block {
    uint32_t begin, end;
    BlockKind kind;
};

std::string_view trim_left(std::string_view s) {
    size_t i = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    return s.substr(i);
}

// "```lang" / "~~~": returns the marker run ("```", "````", "~~~") or "".
std::string_view fence_marker(std::string_view line) {
    const std::string_view t = trim_left(line);
    if (line.size() - t.size() > 3 || t.size() < 3 || (t[0] != '`' && t[0] != '~')) return {};
    size_t n = 0;
    while (n < t.size() && t[n] == t[0]) ++n;
    return n >= 3 ? t.substr(0, n) : std::string_view{};
}

bool is_blank(std::string_view line) {
    return std::all_of(line.begin(), line.end(), [](char c) { return is_ascii_space(c); });
}

bool is_list_item(std::string_view line) {
    const std::string_view t = trim_left(line);
    if (t.size() >= 2 && (t[0] == '-' || t[0] == '*' || t[0] == '+') && (t[1] == ' ' || t[1] == '\t')) return true;
    size_t d = 0;
    while (d < t.size() && d < 9 && t[d] >= '0' && t[d] <= '9') ++d;
    return d > 0 && d + 1 < t.size() && (t[d] == '.' || t[d] == ')') && t[d + 1] == ' ';
}

bool is_heading(std::string_view line) {
    const std::string_view t = trim_left(line);
    size_t h = 0;
    while (h < t.size() && t[h] == '#') ++h;
    return h >= 1 && h <= 6 && h < t.size() && t[h] == ' ';
}

// Lines (each with its '\n') grouped into blocks: fenced code, headings, list items, paragraphs.
// Blank lines stay with the block before them, so blocks cover the text.
std::vector<Block> split_blocks(std::string_view text) {
    std::vector<Block> blocks;
    std::string_view fence;   // open fence marker, "" outside one
    bool after_blank = true;  // the next non-blank line starts a new block
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        const size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
        const std::string_view line = text.substr(pos, end - pos);
        const auto b = static_cast<uint32_t>(pos), e = static_cast<uint32_t>(end);
        pos = end;
        if (!fence.empty()) {
            blocks.back().end = e;
            const std::string_view m = fence_marker(line);
            if (!m.empty() && m[0] == fence[0] && m.size() >= fence.size() && is_blank(trim_left(line).substr(m.size()))) {
                fence = {};
                after_blank = true;
            }
            continue;
        }
        if (is_blank(line)) {
            if (blocks.empty()) blocks.push_back({b, e, BlockKind::Prose});
            else blocks.back().end = e;
            after_blank = true;
            continue;
        }
        if (const std::string_view m = fence_marker(line); !m.empty()) {
            blocks.push_back({b, e, BlockKind::Code});
            fence = m;
            continue;
        }
        const bool starts =
            after_blank || blocks.empty() || is_list_item(line) || is_heading(line) || blocks.back().kind == BlockKind::Code;
        if (starts) blocks.push_back({b, e, BlockKind::Prose});
        else blocks.back().end = e;
        // A heading is a block of its own; the packer joins it to what follows.
        after_blank = is_heading(line);
    }
    return blocks;
}

// Cut [begin, end) at whitespace into pieces of about max_tokens; a run with no whitespace is
// cut at UTF-8 character boundaries.
void split_words(std::string_view text, uint32_t begin, uint32_t end, int max_tokens, std::vector<Piece>& out, bool block_start) {
    const uint32_t max_bytes = static_cast<uint32_t>(std::max(16, max_tokens * 3));
    uint32_t at = begin;
    while (at < end) {
        uint32_t cut = end;
        if (end - at > max_bytes) {
            cut = at + max_bytes;
            uint32_t ws = cut;
            while (ws > at + max_bytes / 2 && !is_ascii_space(text[ws])) --ws;
            if (ws > at + max_bytes / 2) cut = ws;  // before the space
            else
                while (cut > at + 1 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;  // char boundary
        }
        out.push_back({at, cut, estimate_tokens(text.substr(at, cut - at)), block_start && at == begin});
        at = cut;
    }
}

void split_lines(std::string_view text, const Block& block, const ChunkOptions& o, std::vector<Piece>& out) {
    uint32_t at = block.begin;
    while (at < block.end) {
        const size_t nl = text.find('\n', at);
        const uint32_t e = nl == std::string_view::npos || nl >= block.end ? block.end : static_cast<uint32_t>(nl + 1);
        const int64_t t = estimate_tokens(text.substr(at, e - at));
        if (t > o.max_tokens) split_words(text, at, e, o.target_tokens, out, at == block.begin);
        else out.push_back({at, e, t, at == block.begin});
        at = e;
    }
}

void split_prose(std::string_view text, const Block& block, const ChunkOptions& o, std::vector<Piece>& out) {
    const std::string_view body = text.substr(block.begin, block.end - block.begin);
    bool first = true;
    for (const auto& [sb, se] : split_sentences(body)) {
        const uint32_t b = block.begin + sb, e = block.begin + se;
        const int64_t t = estimate_tokens(text.substr(b, e - b));
        if (t > o.max_tokens) split_words(text, b, e, o.target_tokens, out, first);
        else out.push_back({b, e, t, first});
        first = false;
    }
}

bool is_sentence_end_ascii(char c) { return c == '.' || c == '!' || c == '?'; }

bool is_closer(char c) { return c == '"' || c == '\'' || c == ')' || c == ']'; }

// 。！？ and their fullwidth kin end a sentence with no space after them.
size_t cjk_sentence_end(std::string_view s, size_t i) {
    static constexpr std::string_view enders[] = {"\xE3\x80\x82", "\xEF\xBC\x81", "\xEF\xBC\x9F", "\xEF\xBC\x8E"};
    for (std::string_view e : enders)
        if (s.substr(i, e.size()) == e) return e.size();
    return 0;
}

}  // namespace

int64_t estimate_tokens(std::string_view text) {
    int64_t ascii = 0, other = 0;
    for (char ch : text) {
        const auto c = static_cast<uint8_t>(ch);
        if (c < 0x80) ++ascii;
        else if ((c & 0xC0) != 0x80) ++other;  // a lead byte: one code point
    }
    return (ascii * 2 + 6) / 7 + other;
}

std::vector<std::pair<uint32_t, uint32_t>> split_sentences(std::string_view text) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    uint32_t begin = 0;
    size_t i = 0;
    while (i < text.size()) {
        size_t end = 0;  // just past the sentence's closing punctuation
        if (is_sentence_end_ascii(text[i])) {
            size_t j = i + 1;
            while (j < text.size() && is_sentence_end_ascii(text[j])) ++j;
            while (j < text.size() && is_closer(text[j])) ++j;
            if (j == text.size() || is_ascii_space(text[j])) end = j;
            i = j;
        } else if (const size_t n = cjk_sentence_end(text, i)) {
            end = i + n;
            i = end;
        } else if (text[i] == '\n' && i + 1 < text.size() && text[i + 1] == '\n') {
            end = i;  // a paragraph break inside a block (blank lines are kept with the text before)
            ++i;
        } else {
            ++i;
            continue;
        }
        if (end == 0 || end >= text.size()) continue;
        // Keep trailing whitespace up to and including the last newline; otherwise the space
        // goes with the next sentence (" Word" is one pre-token).
        size_t cut = end, k = end;
        while (k < text.size() && is_ascii_space(text[k])) {
            if (text[k] == '\n') cut = k + 1;
            ++k;
        }
        if (k == text.size()) cut = text.size();
        if (cut > begin && cut < text.size()) {
            out.emplace_back(begin, static_cast<uint32_t>(cut));
            begin = static_cast<uint32_t>(cut);
        }
        i = std::max(i, cut);
    }
    if (begin < text.size() || out.empty()) out.emplace_back(begin, static_cast<uint32_t>(text.size()));
    return out;
}

std::vector<ChunkSpan> chunk_text(std::string_view text, const ChunkOptions& o) {
    std::vector<ChunkSpan> chunks;
    if (text.empty()) return chunks;
    std::vector<Piece> pieces;
    for (const Block& block : split_blocks(text)) {
        const int64_t t = estimate_tokens(text.substr(block.begin, block.end - block.begin));
        if (t <= o.max_tokens) pieces.push_back({block.begin, block.end, t, true});
        else if (block.kind == BlockKind::Code) split_lines(text, block, o, pieces);
        else split_prose(text, block, o, pieces);
    }
    // Pack: a chunk takes pieces while it stays within target; a block boundary ends a chunk
    // that is already half full, so small blocks share chunks but big ones start fresh.
    uint32_t begin = 0, end = 0;
    int64_t tokens = 0;
    for (const Piece& p : pieces) {
        const bool full = tokens > 0 && (tokens + p.tokens > o.target_tokens || (p.block_start && tokens * 2 >= o.target_tokens));
        if (full) {
            chunks.push_back({begin, end - begin});
            begin = p.begin;
            tokens = 0;
        }
        end = p.end;
        tokens += p.tokens;
    }
    if (end > begin) chunks.push_back({begin, end - begin});
    // Whitespace-only chunks carry no terms: fold them into a neighbour.
    std::vector<ChunkSpan> merged;
    bool first_blank = false;
    for (const ChunkSpan& c : chunks) {
        const std::string_view s = text.substr(c.offset, c.length);
        const bool blank = std::all_of(s.begin(), s.end(), [](char ch) { return is_ascii_space(ch); });
        if (merged.empty()) {
            merged.push_back(c);
            first_blank = blank;
        } else if (blank || first_blank) {
            merged.back().length += c.length;
            first_blank = first_blank && blank;
        } else {
            merged.push_back(c);
        }
    }
    return merged;
}

}  // namespace strata::gateway
