// JsonConstraint and TokenIndex on small vocabularies: the fast mask equals the one-token-at-a-
// time reference, random documents drawn under the constraint parse and validate, end and
// special tokens are handled as documented.
#include "runtime/json_constraint.h"

#include <gtest/gtest.h>

#include <random>

#include "json_test_util.h"
#include "tokenizer/tokenizer_test_util.h"
#include "util/error.h"

namespace strata::test {
namespace {

using runtime::JsonConstraint;
using runtime::JsonGrammar;
using runtime::TokenIndex;
using runtime::TokenMask;

std::shared_ptr<const TokenIndex> index_of(const SyntheticVocab& v) {
    return std::make_shared<TokenIndex>(v.tokens, v.end_tokens, v.excluded);
}

// Token ids of text, longest match first (every single byte is a token).
std::vector<int32_t> greedy_tokens(const SyntheticVocab& v, const std::string& text) {
    std::vector<int32_t> ids;
    for (size_t pos = 0; pos < text.size();) {
        int32_t best = static_cast<uint8_t>(text[pos]);
        size_t best_len = 1;
        for (size_t id = 256; id < v.tokens.size(); ++id) {
            const std::string& t = v.tokens[id];
            if (t.size() > best_len && text.compare(pos, t.size(), t) == 0 && v.tokens[id] != "<|end|>" &&
                v.tokens[id] != "<|special|>")
                best = static_cast<int32_t>(id), best_len = t.size();
        }
        ids.push_back(best);
        pos += best_len;
    }
    return ids;
}

TEST(TokenIndex, FromTokenizerKnowsEndAndSpecialTokens) {
    TempDir dir;
    const auto tok = TinyVocab().load(dir);
    const TokenIndex index(*tok);
    EXPECT_EQ(index.n_vocab(), tok->n_vocab());
    ASSERT_EQ(index.end_tokens(), std::vector<int32_t>{TinyVocab::kEnd});
    EXPECT_TRUE(index.is_end(TinyVocab::kEnd));
    EXPECT_FALSE(index.is_candidate(TinyVocab::kEnd));
    EXPECT_TRUE(index.is_candidate(TinyVocab::kThink));  // user-defined: plain text "<think>"
    EXPECT_FALSE(index.is_candidate(TinyVocab::kPad));   // unused: decodes to nothing
    EXPECT_TRUE(index.is_candidate(TinyVocab::kHello));
    EXPECT_EQ(index.plain_chars(TinyVocab::kHello), 5);
    EXPECT_EQ(index.plain_chars('"'), -1);
    EXPECT_EQ(index.plain_chars(0xC3), -1);  // half a character
    const TokenIndex explicit_ends(*tok, {TinyVocab::kEnd, TinyVocab::kHello, TinyVocab::kEnd});
    EXPECT_EQ(explicit_ends.end_tokens(), (std::vector<int32_t>{TinyVocab::kEnd, TinyVocab::kHello}));
    EXPECT_TRUE(explicit_ends.is_end(TinyVocab::kHello));
    EXPECT_FALSE(explicit_ends.is_candidate(TinyVocab::kHello));
    EXPECT_THROW(TokenIndex(*tok, {tok->n_vocab()}), Error);
}

TEST(TokenIndex, TrieHoldsEveryCandidateOnce) {
    const SyntheticVocab v = synthetic_vocab(7);
    const auto index = index_of(v);
    std::vector<int> seen(v.tokens.size(), 0), seen_non_plain(v.tokens.size(), 0);
    const auto& trie = index->all_tokens();
    for (uint32_t n = 0; n < trie.size(); ++n)
        for (const int32_t* id = trie.tokens_begin(n); id != trie.tokens_end(n); ++id) ++seen[static_cast<size_t>(*id)];
    const auto& np = index->non_plain_tokens();
    for (uint32_t n = 0; n < np.size(); ++n)
        for (const int32_t* id = np.tokens_begin(n); id != np.tokens_end(n); ++id) ++seen_non_plain[static_cast<size_t>(*id)];
    for (int32_t id = 0; id < index->n_vocab(); ++id) {
        EXPECT_EQ(seen[static_cast<size_t>(id)], index->is_candidate(id) ? 1 : 0) << id;
        EXPECT_EQ(seen_non_plain[static_cast<size_t>(id)], index->is_candidate(id) && index->plain_chars(id) < 0 ? 1 : 0) << id;
    }
    EXPECT_FALSE(index->is_candidate(v.empty_token));
    EXPECT_FALSE(index->is_candidate(v.special_token));
    EXPECT_TRUE(index->is_end(v.end_tokens[1]));
    EXPECT_EQ(index->plain_chars(static_cast<int32_t>(std::find(v.tokens.begin(), v.tokens.end(), std::string("\xe2\x82\xac")) -
                                                      v.tokens.begin())),
              1);
}

TEST(TokenIndex, TokenMaskResetClearsTheTail) {
    TokenMask m;
    m.reset(70, true);
    ASSERT_EQ(m.words.size(), 2u);
    EXPECT_EQ(m.words[1], (uint64_t{1} << 6) - 1);
    EXPECT_TRUE(m.allows(69));
    m.reset(70, false);
    EXPECT_FALSE(m.allows(3));
    m.allow(3);
    EXPECT_TRUE(m.allows(3));
}

TEST(JsonConstraint, EndTokensOnlyWhenComplete) {
    const SyntheticVocab v = synthetic_vocab(1);
    const auto index = index_of(v);
    JsonConstraint c(JsonGrammar::any_json_object(), index);
    TokenMask mask;
    c.allowed(mask);
    EXPECT_FALSE(mask.allows(v.end_tokens[0]));
    EXPECT_FALSE(c.complete());
    EXPECT_THROW(c.accept(v.end_tokens[0]), Error);
    c.accept('{');
    c.accept('}');
    EXPECT_TRUE(c.complete());
    EXPECT_TRUE(c.must_end());
    c.allowed(mask);
    EXPECT_EQ(mask_ids(mask), v.end_tokens);
    c.accept(v.end_tokens[1]);
    EXPECT_TRUE(c.ended());
    EXPECT_THROW(c.accept('{'), Error);
    c.allowed(mask);
    EXPECT_EQ(mask_ids(mask), v.end_tokens);
}

TEST(JsonConstraint, NumberAtTopLevelMayGoOn) {
    const SyntheticVocab v = synthetic_vocab(1);
    JsonConstraint c(JsonGrammar::from_schema_text(R"({"type":"integer"})"), index_of(v));
    c.accept('4');
    EXPECT_TRUE(c.complete());
    EXPECT_FALSE(c.must_end());
    TokenMask mask;
    c.allowed(mask);
    EXPECT_TRUE(mask.allows('2'));
    EXPECT_TRUE(mask.allows(v.end_tokens[0]));
    EXPECT_FALSE(mask.allows('.'));
}

TEST(JsonConstraint, RefusedTokensChangeNothing) {
    const SyntheticVocab v = synthetic_vocab(1);
    const auto index = index_of(v);
    JsonConstraint c(JsonGrammar::any_json_object(), index);
    c.accept('{');
    TokenMask mask;
    c.allowed(mask);
    EXPECT_FALSE(mask.allows('x'));
    EXPECT_THROW(c.accept('x'), Error);
    EXPECT_THROW(c.accept(v.special_token), Error);
    EXPECT_THROW(c.accept(v.empty_token), Error);
    EXPECT_THROW(c.accept(index->n_vocab()), Error);
    EXPECT_EQ(c.text(), "{");
    for (int32_t id = 0; id < index->n_vocab(); ++id)
        if (!index->is_candidate(id) && !index->is_end(id)) {
            EXPECT_FALSE(mask.allows(id)) << id;
        }
    c.accept('"');
    c.accept('k');
    c.allowed(mask);
    EXPECT_FALSE(mask.allows(v.special_token));
    EXPECT_FALSE(mask.allows(v.empty_token));
    EXPECT_TRUE(mask.allows(
        static_cast<int32_t>(std::find(v.tokens.begin(), v.tokens.end(), std::string("\xe2\x82\xac")) - v.tokens.begin())));
}

TEST(JsonConstraint, MaskEqualsReferenceOnSyntheticVocab) {
    for (const uint32_t vocab_seed : {11u, 12u}) {
        const SyntheticVocab v = synthetic_vocab(vocab_seed, 400, {"title", "year", "kind", "city", "\"kind\"", "sku", "qty"});
        const auto index = index_of(v);
        DocumentGenerator gen(*index);
        for (const SchemaCase& sc : property_schemas()) {
            JsonConstraint c(grammar_for(sc), index);
            std::mt19937 rng(vocab_seed * 100 + 1);
            for (int d = 0; d < 25; ++d) {
                const GeneratedDoc doc = gen.generate(c, rng, 40, 400, 1.0);
                ASSERT_TRUE(doc.failure.empty()) << sc.name << ": " << doc.failure;
            }
        }
    }
}

TEST(JsonConstraint, RandomDocumentsMatchTheirSchema) {
    const SyntheticVocab v =
        synthetic_vocab(21, 400, {"title", "year", "rating", "tags", "done", "kind", "city", "coords", "lat"});
    const auto index = index_of(v);
    DocumentGenerator gen(*index);
    for (const SchemaCase& sc : property_schemas()) {
        const auto grammar = grammar_for(sc);
        const ReferenceValidator validator = validator_for(sc);
        JsonConstraint c(grammar, index);
        std::mt19937 rng(5);
        int finished = 0;
        const int kDocs = static_cast<int>(strata::test::scaled(400, 40));
        for (int d = 0; d < kDocs; ++d) {
            const GeneratedDoc doc = gen.generate(c, rng, 60, 3000, 0.0);
            ASSERT_TRUE(doc.failure.empty()) << sc.name << ": " << doc.failure;
            if (!doc.finished) continue;
            ++finished;
            nlohmann::json parsed;
            ASSERT_NO_THROW(parsed = nlohmann::json::parse(doc.text)) << sc.name << ": " << escaped(doc.text);
            EXPECT_TRUE(keys_unique(doc.text)) << sc.name << ": " << escaped(doc.text);
            EXPECT_TRUE(validator.valid(parsed)) << sc.name << ": " << escaped(doc.text);
            if (sc.schema == nullptr) {
                EXPECT_TRUE(parsed.is_object());
            }
        }
        // Strings have no length bound unless the schema gives one, so a document may run to
        // the cap; with the bias toward closing tokens almost none do.
        EXPECT_GE(finished, kDocs * 95 / 100) << sc.name;
    }
}

TEST(JsonConstraint, MaskCacheChangesNothing) {
    const SyntheticVocab v = synthetic_vocab(3);
    const auto index = index_of(v);
    DocumentGenerator gen(*index);
    for (const SchemaCase& sc : property_schemas()) {
        const auto grammar = grammar_for(sc);
        JsonConstraint cached(grammar, index), uncached(grammar, index);
        uncached.set_mask_cache_size(0);
        std::mt19937 rng(9);
        for (int d = 0; d < 20; ++d) {
            const GeneratedDoc doc = gen.generate(cached, rng, 40, 400, 0.0);
            ASSERT_TRUE(doc.failure.empty());
            // Replay the document's tokens (greedy re-tokenisation) on both.
            cached.reset();
            uncached.reset();
            TokenMask a, b;
            for (const int32_t id : greedy_tokens(v, doc.text)) {
                cached.allowed(a);
                uncached.allowed(b);
                ASSERT_EQ(a.words, b.words) << sc.name << " after " << escaped(cached.text());
                ASSERT_TRUE(a.allows(id)) << sc.name << " after " << escaped(cached.text());
                cached.accept(id);
                uncached.accept(id);
            }
        }
    }
}

TEST(JsonConstraint, AnyTokenizationOfAValidDocumentIsAllowed) {
    const SyntheticVocab v = synthetic_vocab(4, 400, {"name", "\"name\": ", "age", "tags"});
    const auto index = index_of(v);
    const auto grammar = JsonGrammar::from_schema_text(R"({"type":"object","properties":{"name":{"type":"string"},
        "age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"}}},"required":["name"]})");
    const std::string doc =
        "{\"name\": \"Zo\xc3\xab \\\"Z\\\" \\u00e9\xf0\x9f\x98\x80\", \"age\": 31, \"tags\": [\"a\", "
        "\"b\\n\"]}";
    for (const bool greedy : {true, false}) {
        JsonConstraint c(grammar, index);
        const std::vector<int32_t> ids = greedy ? greedy_tokens(v, doc) : [&] {
            std::vector<int32_t> bytes;
            for (const char ch : doc) bytes.push_back(static_cast<uint8_t>(ch));
            return bytes;
        }();
        TokenMask mask;
        for (const int32_t id : ids) {
            c.allowed(mask);
            ASSERT_TRUE(mask.allows(id)) << escaped(v.tokens[static_cast<size_t>(id)]) << " after " << escaped(c.text());
            c.accept(id);
        }
        EXPECT_EQ(c.text(), doc);
        EXPECT_TRUE(c.complete());
        EXPECT_TRUE(c.must_end());
    }
}

}  // namespace
}  // namespace strata::test
