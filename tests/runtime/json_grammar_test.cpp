// Schema compilation (runtime/json_grammar.h): what compiles to what, and bad or unsupported
// schemas refused with the place named.
#include "runtime/json_grammar.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/json_matcher.h"
#include "util/error.h"

namespace strata::runtime {
namespace {

// The message of the Error the schema raises ("" when it compiles).
std::string error_of(const std::string& schema, JsonGrammarOptions o = {}) {
    try {
        JsonGrammar::from_schema_text(schema, o);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

bool matches(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
    JsonMatcher m(g);
    return m.feed(text) && m.complete();
}

TEST(JsonGrammar, UnsupportedKeywordsNameThePlace) {
    EXPECT_EQ(error_of(R"({"type":"object","properties":{"x":{"type":"object","patternProperties":{"a":{}}}}})"),
              "schema at /properties/x: unsupported keyword 'patternProperties'");
    EXPECT_EQ(error_of(R"({"type":"string","pattern":"^a+$"})"), "schema at /: unsupported keyword 'pattern'");
    EXPECT_EQ(error_of(R"({"type":"array","items":{"type":"integer","multipleOf":3}})"),
              "schema at /items: unsupported keyword 'multipleOf'");
    EXPECT_EQ(error_of(R"({"type":"array","uniqueItems":true})"), "schema at /: unsupported keyword 'uniqueItems'");
    EXPECT_EQ(error_of(R"({"type":"array","uniqueItems":false})"), "");
    EXPECT_EQ(error_of(R"({"$defs":{"a":{"not":{}}},"$ref":"#/$defs/a"})"), "schema at /$defs/a: unsupported keyword 'not'");
    EXPECT_EQ(error_of(R"({"properties":{"a/b":{"if":{}}}})"), "schema at /properties/a~1b: unsupported keyword 'if'");
    EXPECT_EQ(error_of(R"({"anyOf":[{"type":"string"},{"type":"object","minProperties":1}]})"),
              "schema at /anyOf/1: unsupported keyword 'minProperties'");
}

TEST(JsonGrammar, InvalidSchemasNameThePlace) {
    EXPECT_EQ(error_of(R"({"type":"strin"})"), "schema at /: unknown type 'strin'");
    EXPECT_EQ(error_of(R"({"type":"string","minLength":-1})"), "schema at /: 'minLength' must be a non-negative integer");
    EXPECT_EQ(error_of(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}})"),
              "schema at /properties/a: '$ref' target #/$defs/missing does not exist");
    EXPECT_EQ(error_of(R"({"$ref":"http://example.com/s.json"})"),
              "schema at /: only local references ('#/...') are supported, not 'http://example.com/s.json'");
    EXPECT_EQ(error_of(R"({"properties":{"a":3}})"),
              "schema at /properties/a: expected a schema (an object, true or false), got number");
    EXPECT_EQ(error_of(R"({"required":"a"})"), "schema at /: 'required' must be an array of strings");
    EXPECT_EQ(error_of(R"({"enum":3})"), "schema at /: 'enum' must be an array");
    EXPECT_EQ(error_of(R"({"type":"string","enum":["a"],"maxLength":3})"),
              "schema at /: 'enum' next to 'maxLength' is not supported");
    EXPECT_EQ(error_of(R"({"$ref":"#/$defs/a","type":"object","$defs":{"a":{}}})"),
              "schema at /: '$ref' next to 'type' is not supported");
    EXPECT_EQ(error_of(R"({"anyOf":[{"type":"string"}],"maxLength":3})"),
              "schema at /: 'anyOf' next to 'maxLength' is not supported");
    EXPECT_EQ(error_of(R"({"allOf":[{"type":"string"},{"type":"object"}]})"),
              "schema at /allOf/0: allOf can merge object schemas only (properties, required, "
              "additionalProperties); 'type' is not supported here");
    EXPECT_EQ(error_of(R"({"allOf":[{"properties":{"a":{"type":"string"}}},{"properties":{"a":{"type":"integer"}}}]})"),
              "schema at /: allOf: property 'a' is constrained by more than one part");
    EXPECT_NE(error_of("{\"type\":"), "");
}

TEST(JsonGrammar, CyclesThatNeverNestAreRefused) {
    EXPECT_EQ(error_of(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})"),
              "schema at /$defs/a: '$ref'/anyOf cycle that nests no object or array (it would never end)");
}

TEST(JsonGrammar, UnsatisfiableSchemasAreRefused) {
    EXPECT_EQ(error_of("false"), "schema at /: no JSON document matches this schema");
    EXPECT_EQ(error_of(R"({"enum":[]})"), "schema at /: no JSON document matches this schema");
    EXPECT_EQ(error_of(R"({"type":"string","minLength":3,"maxLength":2})"), "schema at /: no JSON document matches this schema");
    EXPECT_EQ(error_of(R"({"type":"integer","minimum":1.5,"maximum":1.9})"), "schema at /: no JSON document matches this schema");
    EXPECT_EQ(error_of(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a","b"]})"),
              "schema at /: no JSON document matches this schema");  // b is required but no extra key is allowed
    // Every document needs an endless chain of required objects.
    EXPECT_EQ(
        error_of(
            R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"required":["next"]}},"$ref":"#/$defs/n"})"),
        "schema at /: no JSON document matches this schema");
    JsonGrammarOptions shallow;
    shallow.max_depth = 2;
    EXPECT_EQ(
        error_of(R"({"type":"array","minItems":1,"items":{"type":"array","minItems":1,"items":{"type":"object"}}})", shallow),
        "schema at /: every matching document nests deeper than the limit of 2");
}

TEST(JsonGrammar, ImpossibleOptionsAreDropped) {
    // An optional property that can never be written is left out; a required one that can is kept.
    const auto g = JsonGrammar::from_schema_text(
        R"({"type":"object","properties":{"a":{"enum":[]},"b":{"type":"integer"}},"required":["b"]})");
    EXPECT_TRUE(matches(g, R"({"b":1})"));
    EXPECT_FALSE(matches(g, R"({"a":1,"b":1})"));
    // Items that can never be written leave only the empty array.
    const auto e = JsonGrammar::from_schema_text(R"({"type":"array","items":false})");
    EXPECT_TRUE(matches(e, "[]"));
    EXPECT_FALSE(matches(e, "[1]"));
}

TEST(JsonGrammar, TypeInferenceAndAnnotations) {
    // No "type": the keywords say which type is meant; annotations and format change nothing.
    const auto g = JsonGrammar::from_schema_text(
        R"({"$schema":"https://json-schema.org/draft/2020-12/schema","title":"t",
        "description":"d","properties":{"when":{"format":"date-time","minLength":1,"examples":["x"],"default":"y"}},"required":["when"]})");
    EXPECT_TRUE(matches(g, R"({"when":"2024"})"));
    EXPECT_FALSE(matches(g, R"({"when":5})"));
    EXPECT_FALSE(matches(g, R"("x")"));
    const auto any = JsonGrammar::from_schema_text("{}");
    for (const char* doc : {"1", "\"s\"", "null", "[true]", R"({"a":{}})"}) EXPECT_TRUE(matches(any, doc)) << doc;
    const auto t = JsonGrammar::from_schema_text("true");
    EXPECT_TRUE(matches(t, "[]"));
}

TEST(JsonGrammar, SchemaOrderOrAlphabeticalOrder) {
    const char* text = R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"integer"}},"required":["a","b"]})";
    EXPECT_TRUE(matches(JsonGrammar::from_schema_text(text), R"({"b":1,"a":2})"));
    EXPECT_FALSE(matches(JsonGrammar::from_schema_text(text), R"({"a":2,"b":1})"));
    // nlohmann::json sorts keys: the order written is lost.
    EXPECT_TRUE(matches(JsonGrammar::from_schema(nlohmann::json::parse(text)), R"({"a":2,"b":1})"));
    EXPECT_TRUE(matches(JsonGrammar::from_ordered_schema(nlohmann::ordered_json::parse(text)), R"({"b":1,"a":2})"));
}

TEST(JsonGrammar, DefinitionsAndDraft4Keywords) {
    const auto g = JsonGrammar::from_schema_text(
        R"({"definitions":{"pos":{"type":"integer","minimum":0,"exclusiveMinimum":true}},
        "type":"array","items":[{"$ref":"#/definitions/pos"},{"type":"string"}],"additionalItems":false})");
    EXPECT_TRUE(matches(g, R"([1,"a"])"));
    EXPECT_FALSE(matches(g, R"([0,"a"])"));
    EXPECT_FALSE(matches(g, R"([1,"a",2])"));
}

TEST(JsonGrammar, NullableReference) {
    const auto g = JsonGrammar::from_schema_text(
        R"({"$defs":{"p":{"type":"object","properties":{"x":{"type":"integer"}}}},
        "type":"object","properties":{"p":{"$ref":"#/$defs/p","nullable":true}},"required":["p"]})");
    EXPECT_TRUE(matches(g, R"({"p":null})"));
    EXPECT_TRUE(matches(g, R"({"p":{"x":1}})"));
    EXPECT_FALSE(matches(g, R"({"p":1})"));
}

TEST(JsonGrammar, OptionsAreChecked) {
    JsonGrammarOptions o;
    o.max_depth = 0;
    EXPECT_THROW(JsonGrammar::any_json_object(o), Error);
    o.max_depth = 8;
    o.max_whitespace_run = -1;
    EXPECT_THROW(JsonGrammar::from_schema_text("{}", o), Error);
}

}  // namespace
}  // namespace strata::runtime
