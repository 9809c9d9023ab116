// The byte-level recogniser (runtime/json_matcher.h): whole documents accepted byte by byte,
// bad ones refused at the first byte that cannot be completed.
#include "runtime/json_matcher.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "json_test_util.h"
#include "runtime/json_grammar.h"
#include "util/error.h"

namespace strata::runtime {
namespace {

constexpr size_t kAll = std::string::npos;

// Index of the first byte refused; kAll when every byte is taken. `complete` says whether
// the accepted bytes form a whole document.
size_t refused_at(const std::shared_ptr<const JsonGrammar>& g, const std::string& text, bool* complete = nullptr) {
    JsonMatcher m(g);
    for (size_t i = 0; i < text.size(); ++i)
        if (!m.feed(static_cast<uint8_t>(text[i]))) return i;
    if (complete) *complete = m.complete();
    return kAll;
}

bool matcher_accepts(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
    bool complete = false;
    return refused_at(g, text, &complete) == kAll && complete;
}

std::shared_ptr<const JsonGrammar> schema(const char* text, JsonGrammarOptions o = {}) {
    return JsonGrammar::from_schema_text(text, o);
}

TEST(JsonMatcher, AnyObjectAcceptsObjects) {
    const auto g = JsonGrammar::any_json_object();
    for (const char* doc : {R"({})", R"({"a":1})", R"({"a": [1, 2.5, -0, 1e5, {"b": null}], "c": "x\u00e9\n\"", "d": true})",
                            R"({"":false,"e":{"f":{"g":[]}},"h":-12.25E-3})", "{\"k\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}",
                            R"({"s":"\ud83d\ude00 \/ \b\f\r\t"})", R"({"a":"x","A":"y"})"}) {
        EXPECT_TRUE(matcher_accepts(g, doc)) << doc;
    }
}

TEST(JsonMatcher, AnyObjectRefusesAtTheRightByte) {
    const auto g = JsonGrammar::any_json_object();
    EXPECT_EQ(refused_at(g, "[1]"), 0u);
    EXPECT_EQ(refused_at(g, " {}"), 0u);  // no whitespace before the document
    EXPECT_EQ(refused_at(g, "{} "), 2u);  // nor after it
    EXPECT_EQ(refused_at(g, "{}{}"), 2u);
    EXPECT_EQ(refused_at(g, R"({"a":01})"), 6u);  // leading zero
    EXPECT_EQ(refused_at(g, R"({"a":1.})"), 7u);
    EXPECT_EQ(refused_at(g, R"({"a":-})"), 6u);
    EXPECT_EQ(refused_at(g, R"({"a":1e123})"), 9u);  // exponent of at most 2 digits
    EXPECT_EQ(refused_at(g, R"({"a":tru})"), 8u);
    EXPECT_EQ(refused_at(g, R"({"a":1,})"), 7u);
    EXPECT_EQ(refused_at(g, R"({"a":1,"a":2})"), 9u);        // duplicate key refused at its closing quote
    EXPECT_EQ(refused_at(g, R"({"a":1,"\u0061":2})"), 14u);  // the same key written with an escape
    EXPECT_EQ(refused_at(g, R"({"a":"\x"})"), 7u);
    EXPECT_EQ(refused_at(g, R"({"a":"\udc00"})"),
              9u);                                        // a lone low surrogate: refused once "\udc" is certain
    EXPECT_EQ(refused_at(g, R"({"a":"\ud800x"})"), 12u);  // a high surrogate needs a low one
    EXPECT_EQ(refused_at(g, R"({"a":"\ud800\u0041"})"), 14u);
    EXPECT_EQ(refused_at(g, "{\"a\":\"\x01\"}"), 6u);              // control byte
    EXPECT_EQ(refused_at(g, "{\"a\":\"\xc0\xaf\"}"), 6u);          // overlong
    EXPECT_EQ(refused_at(g, "{\"a\":\"\xed\xa0\x80\"}"), 7u);      // UTF-8 surrogate
    EXPECT_EQ(refused_at(g, "{\"a\":\"\xe2\x82\"}"), 8u);          // truncated character
    EXPECT_EQ(refused_at(g, "{\"a\":\"\xf4\x90\x80\x80\"}"), 7u);  // past U+10FFFF
    EXPECT_EQ(refused_at(g, R"({"a":1 ,"b":2})"), kAll);
    EXPECT_EQ(refused_at(g, "{\"a\":   1}"), 7u);  // at most 2 whitespace bytes in a gap
}

TEST(JsonMatcher, NumberLengthsAreBounded) {
    const auto g = schema(R"({"type":"number"})");
    EXPECT_TRUE(matcher_accepts(g, "123456789012345678"));
    EXPECT_EQ(refused_at(g, "1234567890123456789"), 18u);
    EXPECT_TRUE(matcher_accepts(g, "0.12345678901234567890"));
    EXPECT_EQ(refused_at(g, "0.123456789012345678901"), 22u);
    EXPECT_TRUE(matcher_accepts(g, "-1.5e-07"));
    bool complete = true;
    EXPECT_EQ(refused_at(g, "-1.5e", &complete), kAll);
    EXPECT_FALSE(complete);
}

TEST(JsonMatcher, WhitespaceRunIsAnOption) {
    JsonGrammarOptions compact;
    compact.max_whitespace_run = 0;
    const auto g = JsonGrammar::any_json_object(compact);
    EXPECT_TRUE(matcher_accepts(g, R"({"a":[1,2]})"));
    EXPECT_EQ(refused_at(g, R"({"a": 1})"), 5u);
}

TEST(JsonMatcher, DepthIsBounded) {
    JsonGrammarOptions o;
    o.max_depth = 3;
    const auto g = JsonGrammar::any_json_object(o);
    EXPECT_TRUE(matcher_accepts(g, R"({"a":[{"b":1}]})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"a":[[1]]})"));
    EXPECT_EQ(refused_at(g, R"({"a":[[[1]]]})"), 7u);
    EXPECT_EQ(refused_at(g, R"({"a":[{"b":{}}]})"), 11u);
}

TEST(JsonMatcher, PropertiesInSchemaOrder) {
    const auto g = schema(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
        "email":{"type":"string"}},"required":["name","email"]})");
    EXPECT_TRUE(matcher_accepts(g, R"({"name":"x","age":3,"email":"y"})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"name":"x","email":"y"})"));
    EXPECT_EQ(refused_at(g, R"({"age":3})"), 2u);  // name is required first
    EXPECT_EQ(refused_at(g, R"({"name":"x","email":"y","age":3})"),
              23u);                                               // age comes before email: no key may follow
    EXPECT_EQ(refused_at(g, R"({"name":"x"})"), 11u);             // email is missing
    EXPECT_EQ(refused_at(g, R"({"name":"x","nick":"y"})"), 13u);  // no extra properties
    EXPECT_EQ(refused_at(g, R"({"name":1})"), 8u);
    EXPECT_EQ(refused_at(g, R"({"name":"x","age":3.5})"), 19u);
}

TEST(JsonMatcher, AdditionalPropertiesComeLast) {
    const auto g = schema(R"({"type":"object","properties":{"a":{"type":"integer"}},
        "additionalProperties":{"type":"boolean"}})");
    EXPECT_TRUE(matcher_accepts(g, R"({"a":1,"x":true,"y":false})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"x":true})"));
    EXPECT_EQ(refused_at(g, R"({"x":true,"a":1})"), 12u);  // "a" is listed: not an extra, and too late
    EXPECT_EQ(refused_at(g, R"({"x":1})"), 5u);
    EXPECT_EQ(refused_at(g, R"({"x":true,"x":false})"), 12u);
}

TEST(JsonMatcher, EnumConstAndLiterals) {
    const auto g = schema(R"({"type":"object","properties":{
        "color":{"enum":["red","green",1,12,null,{"k":[1,"x"]}]},
        "fixed":{"const":"v"},
        "flag":{"type":"boolean"}},"required":["color","fixed","flag"]})");
    EXPECT_TRUE(matcher_accepts(g, R"({"color":"red","fixed":"v","flag":true})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"color":12,"fixed":"v","flag":false})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"color":1,"fixed":"v","flag":false})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"color":null,"fixed":"v","flag":false})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"color":{"k":[1,"x"]},"fixed":"v","flag":false})"));
    EXPECT_EQ(refused_at(g, R"({"color":"blue")"), 10u);
    EXPECT_EQ(refused_at(g, R"({"color":13)"), 10u);
    EXPECT_EQ(refused_at(g, R"({"color":"red","fixed":"w")"), 24u);
}

TEST(JsonMatcher, StringLengths) {
    const auto g = schema(R"({"type":"string","minLength":2,"maxLength":3})");
    EXPECT_TRUE(matcher_accepts(g, R"("ab")"));
    EXPECT_TRUE(matcher_accepts(g, "\"\xc3\xa9\xe2\x82\xac\\n\""));  // three code points
    EXPECT_TRUE(matcher_accepts(g, R"("\ud83d\ude00a")"));           // a surrogate pair is one
    EXPECT_EQ(refused_at(g, R"("a")"), 2u);
    EXPECT_EQ(refused_at(g, R"("abcd")"), 4u);
    EXPECT_EQ(refused_at(g, "\"abc\xc3\xa9\""), 4u);
}

TEST(JsonMatcher, IntegerBounds) {
    const auto g = schema(R"({"type":"integer","minimum":10,"maximum":20})");
    for (int v = -5; v < 40; ++v) EXPECT_EQ(matcher_accepts(g, std::to_string(v)), v >= 10 && v <= 20) << v;
    EXPECT_EQ(refused_at(g, "3"), 0u);  // no completion of "3" lies in [10, 20]
    EXPECT_EQ(refused_at(g, "-"), 0u);
    EXPECT_EQ(refused_at(g, "10.0"), 2u);
    const auto neg = schema(R"({"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":0})");
    for (int v = -5; v < 3; ++v) EXPECT_EQ(matcher_accepts(neg, std::to_string(v)), v > -3 && v < 0) << v;
    const auto big = schema(R"({"type":"integer","minimum":1000000})");
    EXPECT_TRUE(matcher_accepts(big, "999999999999999999"));
    EXPECT_FALSE(matcher_accepts(big, "999999"));
}

TEST(JsonMatcher, NumberBounds) {
    const auto g = schema(R"({"type":"number","minimum":0,"maximum":1})");
    for (const char* ok : {"0", "1", "0.5", "0.999", "0.0"}) EXPECT_TRUE(matcher_accepts(g, ok)) << ok;
    for (const char* bad : {"-0.5", "1.5", "2", "1e0", "-1"}) EXPECT_FALSE(matcher_accepts(g, bad)) << bad;
    const auto neg = schema(R"({"type":"number","minimum":-2.5,"maximum":-1})");
    for (const char* ok : {"-2", "-1", "-1.5", "-1.0"}) EXPECT_TRUE(matcher_accepts(neg, ok)) << ok;
    for (const char* bad : {"-3", "-0.5", "0", "-2.6"}) EXPECT_FALSE(matcher_accepts(neg, bad)) << bad;
}

TEST(JsonMatcher, Arrays) {
    const auto g = schema(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],
        "items":{"type":"boolean"},"minItems":2,"maxItems":3})");
    EXPECT_TRUE(matcher_accepts(g, R"(["a",1])"));
    EXPECT_TRUE(matcher_accepts(g, R"(["a", 1, true])"));
    EXPECT_EQ(refused_at(g, R"(["a"])"), 4u);
    EXPECT_EQ(refused_at(g, R"(["a",1,true,false])"), 11u);
    EXPECT_EQ(refused_at(g, R"([1])"), 1u);
    EXPECT_EQ(refused_at(g, R"(["a",1,2])"), 7u);
    EXPECT_EQ(refused_at(g, R"([])"), 1u);
}

TEST(JsonMatcher, AnyOfForksAndMerges) {
    const auto g = schema(R"({"anyOf":[
        {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},
        {"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"number"},"h":{"type":"number"}},"required":["kind","w","h"]},
        {"type":"string","maxLength":2},
        {"enum":["long enum string"]}]})");
    EXPECT_TRUE(matcher_accepts(g, R"({"kind":"circle","r":1})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"kind":"rect","w":1,"h":2})"));
    EXPECT_TRUE(matcher_accepts(g, R"("ab")"));
    EXPECT_TRUE(matcher_accepts(g, R"("long enum string")"));
    EXPECT_EQ(refused_at(g, R"({"kind":"circle","w":1})"), 18u);
    EXPECT_EQ(refused_at(g, R"("abc")"), 3u);
    EXPECT_EQ(refused_at(g, R"("lonx")"), 4u);
}

TEST(JsonMatcher, RecursiveRef) {
    JsonGrammarOptions o;
    o.max_depth = 4;
    const auto g = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
        "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})",
                          o);
    EXPECT_TRUE(matcher_accepts(g, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
    // Depth 4 is the limit: the object at depth 5 cannot be opened, so the array must stay empty.
    EXPECT_TRUE(matcher_accepts(g, R"({"v":1,"kids":[{"v":2,"kids":[]}]})"));
    EXPECT_EQ(refused_at(g, R"({"v":1,"kids":[{"v":2,"kids":[{)"), 30u);
}

TEST(JsonMatcher, NullableAndTypeArrays) {
    const auto g = schema(
        R"({"type":"object","properties":{"a":{"type":["string","null"]},"b":{"type":"integer","nullable":true}},
        "required":["a","b"]})");
    EXPECT_TRUE(matcher_accepts(g, R"({"a":null,"b":null})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"a":"x","b":3})"));
    EXPECT_EQ(refused_at(g, R"({"a":1)"), 5u);
}

TEST(JsonMatcher, AllOfMergesObjects) {
    // Every part must accept every property (our additionalProperties rule applies per part).
    const auto g = schema(R"({"$defs":{"base":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
        "additionalProperties":true}},
        "allOf":[{"$ref":"#/$defs/base"},{"properties":{"name":{"type":"string"}},"required":["name"],
        "additionalProperties":{"type":"integer"}}]})");
    EXPECT_TRUE(matcher_accepts(g, R"({"id":1,"name":"x"})"));
    EXPECT_TRUE(matcher_accepts(g, R"({"id":1,"name":"x","z":1})"));
    EXPECT_EQ(refused_at(g, R"({"name":"x"})"), 2u);
    EXPECT_EQ(refused_at(g, R"({"id":1,"name":"x","z":"s"})"), 23u);
    // A part that lists no property and allows no extras accepts only {}.
    EXPECT_THROW(schema(R"({"allOf":[{"$ref":"#/$defs/base"}],"additionalProperties":false,
        "$defs":{"base":{"properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":true}}})"),
                 Error);
}

TEST(JsonMatcher, CompleteAndContinue) {
    const auto g = schema(R"({"type":"integer"})");
    JsonMatcher m(g);
    EXPECT_FALSE(m.complete());
    ASSERT_TRUE(m.feed(std::string_view("12")));
    EXPECT_TRUE(m.complete());
    EXPECT_TRUE(m.can_continue());
    const auto obj = JsonGrammar::any_json_object();
    JsonMatcher o(obj);
    ASSERT_TRUE(o.feed(std::string_view("{}")));
    EXPECT_TRUE(o.complete());
    EXPECT_FALSE(o.can_continue());
    EXPECT_FALSE(o.feed(std::string_view("x")));
    EXPECT_TRUE(o.complete());  // a refused feed changes nothing
}

// ---- differential checks against nlohmann::json ----

nlohmann::json random_value(std::mt19937& rng, int depth) {
    const int kind = static_cast<int>(rng() % (depth > 0 ? 8 : 6));
    switch (kind) {
        case 0: return nullptr;
        case 1: return rng() % 2 == 0;
        case 2: return static_cast<int64_t>(rng() % 2000001) - 1000000;
        case 3: return std::ldexp(static_cast<double>(static_cast<int32_t>(rng())), static_cast<int>(rng() % 80) - 60);
        case 4:
        case 5: {
            static const char* const pieces[] = {"a",
                                                 "Z",
                                                 " ",
                                                 "\"",
                                                 "\\",
                                                 "/",
                                                 "\n",
                                                 "\t",
                                                 "\x01",
                                                 "\x1f",
                                                 "\x7f",
                                                 "\xc3\xa9",
                                                 "\xe2\x82\xac",
                                                 "\xf0\x9f\x98\x80",
                                                 "\xed\x9f\xbf",
                                                 "\xef\xbf\xbf"};
            std::string s;
            for (size_t n = rng() % 6; n > 0; --n) s += pieces[rng() % std::size(pieces)];
            return s;
        }
        case 6: {
            nlohmann::json a = nlohmann::json::array();
            for (size_t n = rng() % 4; n > 0; --n) a.push_back(random_value(rng, depth - 1));
            return a;
        }
        default: {
            nlohmann::json o = nlohmann::json::object();
            for (size_t n = rng() % 4; n > 0; --n) o[random_value(rng, 0).dump()] = random_value(rng, depth - 1);
            return o;
        }
    }
}

TEST(JsonMatcher, AcceptsWhatADumpOfRandomObjectsGives) {
    const auto g = JsonGrammar::any_json_object();
    std::mt19937 rng(3);
    for (int i = 0; i < 3000; ++i) {
        nlohmann::json o = nlohmann::json::object();
        for (size_t n = rng() % 5; n > 0; --n) o[random_value(rng, 0).dump()] = random_value(rng, 4);
        const std::string compact = o.dump();
        EXPECT_TRUE(matcher_accepts(g, compact)) << compact;
        // json.dumps style: ", " and ": " (a one-byte whitespace run).
        std::string spaced;
        bool in_string = false;
        for (size_t k = 0; k < compact.size(); ++k) {
            const char ch = compact[k];
            spaced += ch;
            if (ch == '"' && (k == 0 || compact[k - 1] != '\\' || (k >= 2 && compact[k - 2] == '\\'))) in_string = !in_string;
            if (!in_string && (ch == ',' || ch == ':')) spaced += ' ';
        }
        EXPECT_TRUE(matcher_accepts(g, spaced)) << spaced;
    }
}

TEST(JsonMatcher, WhatItCompletesParsesWithUniqueKeys) {
    // Single-byte mutations of valid documents: whatever the recogniser takes as a complete
    // document, nlohmann::json must parse as an object with unique keys.
    const auto g = JsonGrammar::any_json_object();
    std::mt19937 rng(4);
    const std::string alphabet = "{}[]\",:0123456789-+.eE \n\\/tunrfalsebu\x01\xc3\xa9\x80\xff";
    int completed = 0;
    for (int i = 0; i < 3000; ++i) {
        nlohmann::json o = nlohmann::json::object();
        for (size_t n = 1 + rng() % 4; n > 0; --n) o[random_value(rng, 0).dump()] = random_value(rng, 3);
        std::string doc = o.dump();
        const size_t pos = rng() % doc.size();
        switch (rng() % 3) {
            case 0: doc[pos] = alphabet[rng() % alphabet.size()]; break;
            case 1: doc.erase(pos, 1); break;
            default: doc.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        }
        if (!matcher_accepts(g, doc)) continue;
        ++completed;
        nlohmann::json parsed;
        ASSERT_NO_THROW(parsed = nlohmann::json::parse(doc)) << doc;
        EXPECT_TRUE(parsed.is_object()) << doc;
        EXPECT_TRUE(test::keys_unique(doc)) << doc;
    }
    EXPECT_GT(completed, 300);
}

}  // namespace
}  // namespace strata::runtime
