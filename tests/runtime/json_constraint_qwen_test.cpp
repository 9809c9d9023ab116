// JsonConstraint with the real Qwen3 vocabulary (151,936 tokens) from the GGUF fixture;
// skipped when the fixture is absent.
#include <gtest/gtest.h>

#include <random>

#include "json_test_util.h"
#include "runtime/json_constraint.h"
#include "tokenizer/tokenizer_test_util.h"

namespace strata::test {
namespace {

using runtime::JsonConstraint;
using runtime::JsonGrammar;
using runtime::TokenIndex;
using runtime::TokenMask;

std::shared_ptr<const TokenIndex> qwen3_index() {
    static const std::shared_ptr<const TokenIndex> index = std::make_shared<TokenIndex>(qwen3_tokenizer());
    return index;
}

TEST(JsonConstraintQwen3, IndexOfTheRealVocabulary) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto& tok = qwen3_tokenizer();
    const auto index = qwen3_index();
    EXPECT_EQ(index->n_vocab(), tok.n_vocab());
    ASSERT_FALSE(index->end_tokens().empty());
    for (const int32_t id : index->end_tokens()) EXPECT_TRUE(id == tok.eos() || id == tok.eot());
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        if (tok.is_special(id) || tok.token_bytes(id).empty()) {
            EXPECT_FALSE(index->is_candidate(id)) << id;
        }
    }
}

TEST(JsonConstraintQwen3, MaskEqualsReference) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto index = qwen3_index();
    DocumentGenerator gen(*index);
    std::mt19937 rng(17);
    for (const SchemaCase& sc : property_schemas()) {
        JsonConstraint c(grammar_for(sc), index);
        for (int d = 0; d < static_cast<int>(strata::test::scaled(2)); ++d) {
            // About one mask in ten (≈100 in all) compared with all 151,936 tokens tried one by one.
            const GeneratedDoc doc = gen.generate(c, rng, 30, 300, 0.1);
            ASSERT_TRUE(doc.failure.empty()) << sc.name << ": " << doc.failure;
        }
    }
}

TEST(JsonConstraintQwen3, RandomDocumentsMatchTheirSchema) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto index = qwen3_index();
    DocumentGenerator gen(*index);
    for (const SchemaCase& sc : property_schemas()) {
        const ReferenceValidator validator = validator_for(sc);
        JsonConstraint c(grammar_for(sc), index);
        std::mt19937 rng(23);
        int finished = 0;
        const int kDocs = static_cast<int>(strata::test::scaled(25, 5));
        for (int d = 0; d < kDocs; ++d) {
            const GeneratedDoc doc = gen.generate(c, rng, 40, 2000, 0.0);
            ASSERT_TRUE(doc.failure.empty()) << sc.name << ": " << doc.failure;
            if (!doc.finished) continue;
            ++finished;
            nlohmann::json parsed;
            ASSERT_NO_THROW(parsed = nlohmann::json::parse(doc.text)) << sc.name << ": " << escaped(doc.text);
            EXPECT_TRUE(keys_unique(doc.text)) << sc.name << ": " << escaped(doc.text);
            EXPECT_TRUE(validator.valid(parsed)) << sc.name << ": " << escaped(doc.text);
        }
        EXPECT_GE(finished, kDocs * 9 / 10) << sc.name;
    }
}

TEST(JsonConstraintQwen3, TokenizedDocumentsAreAllowed) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto& tok = qwen3_tokenizer();
    const auto index = qwen3_index();
    const std::vector<std::pair<const char*, std::string>> cases = {
        {nullptr,
         R"({"name": "Ada", "langs": ["en", "fr"], "nested": {"a": [1, 2.5e-3, -0, true, null]}, "note": "line\nnext \"q\" é 😀"})"},
        {R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},
            "days":{"type":"integer","minimum":1,"maximum":14}},"required":["city","unit"],"additionalProperties":false})",
         R"({"city": "Zürich", "unit": "celsius", "days": 5})"},
    };
    for (const auto& [schema, doc] : cases) {
        JsonConstraint c(schema ? JsonGrammar::from_schema_text(schema) : JsonGrammar::any_json_object(), index);
        TokenMask mask;
        for (const int32_t id : tok.encode(doc, false)) {
            c.allowed(mask);
            ASSERT_TRUE(mask.allows(id)) << escaped(tok.token_bytes(id)) << " after " << escaped(c.text());
            c.accept(id);
        }
        EXPECT_TRUE(c.complete());
        EXPECT_TRUE(c.must_end());
        c.allowed(mask);
        EXPECT_EQ(mask_ids(mask), index->end_tokens());
    }
}

}  // namespace
}  // namespace strata::test
