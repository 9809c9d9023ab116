// Splits one message's text into retrieval chunks by its structure, never across messages:
// paragraphs, fenced code blocks (a small fence stays whole, a big one is split by lines),
// list items, headings; a block too big for one chunk is split by lines (code) or sentences
// (prose), and a sentence too big by words, then bytes. The pieces are then packed in order
// into chunks of about `target_tokens`, preferring to end a chunk where a block ends.
//
// BABILong found that retrieval works only when chunks are about the size of the facts sought
// (sentences, not 512-token windows), so chunks are small: a few sentences.
//
// Chunks cover the text exactly, in order, without gaps. A cut falls before the whitespace that
// precedes a sentence or word, or after a newline, where byte-level BPE pre-tokenizers (almost)
// never join pieces, so the chunks' token counts add up to (about) the message's.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::gateway {

struct ChunkOptions {
    int target_tokens = 96;  // pack pieces up to this many (estimated) tokens
    int max_tokens = 192;    // a block up to this size is never split (small code fences)
};

struct ChunkSpan {
    uint32_t offset;  // bytes into the message text
    uint32_t length;
};

std::vector<ChunkSpan> chunk_text(std::string_view text, const ChunkOptions& options = {});

// A cheap token estimate used only to size chunks (the real counts come from the lane's
// tokenizer): ~3.5 bytes per ASCII token, one token per other code point.
int64_t estimate_tokens(std::string_view text);

// Sentence pieces of a text ([begin, end) byte ranges covering it), the unit the chunker uses for
// prose; retrieval uses it to find the sentence in a chunk that matched a query.
std::vector<std::pair<uint32_t, uint32_t>> split_sentences(std::string_view text);

}  // namespace strata::gateway
