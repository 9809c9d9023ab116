// XmlCallConstraint (runtime/xml_call_constraint.h) against the output parser that reads its
// calls back: on a synthetic vocabulary and on the real Qwen3 one, the mask equals the
// one-token-at-a-time reference at every step of random calls, and every finished call parses
// (serve/output_parser.h, the XML format) into an allowed tool with arguments valid for its schema;
// what the form cannot carry is refused at compile time.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "runtime/xml_call_constraint.h"
#include "serve/output_parser.h"
#include "tokenizer/tokenizer_test_util.h"
#include "util/error.h"

namespace strata::test {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;
using runtime::TokenIndex;
using runtime::TokenMask;
using runtime::XmlCallConstraint;
using runtime::XmlCallGrammar;

// Two tools: strings (bounded, unbounded, enum), numbers, booleans, an array, optional ones.
ojson test_tools() {
    return ojson::parse(R"([
      {"name": "write_file", "parameters": {"type": "object", "properties": {
          "path": {"type": "string", "maxLength": 5},
          "content": {"type": "string"},
          "mode": {"type": "integer", "minimum": 0, "maximum": 777},
          "append": {"type": "boolean"}},
        "required": ["path", "content"]}},
      {"name": "write", "parameters": {"type": "object", "properties": {
          "unit": {"type": "string", "enum": ["c", "celsius", "f"]},
          "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
          "note": {"type": "string", "minLength": 2, "maxLength": 4}},
        "required": ["unit", "note"]}}
    ])");
}

// The arguments a finished call must have: an allowed tool, required keys, valid values.
std::string check_call(const ojson& tools, const std::string& output) {
    std::vector<serve::ToolSpec> specs;
    for (const auto& t : tools) specs.push_back({t["name"].get<std::string>(), json::parse(t["parameters"].dump())});
    auto parser = serve::make_output_parser(serve::OutputFormat::Qwen3CoderXml,
                                            serve::ParserOptions{.parse_thinking = false, .tools = specs});
    const std::string text = "<tool_call>\n<function=" + output + "\n</tool_call>";
    const serve::ParsedOutput p = serve::parse_whole(*parser, text);
    if (p.tool_calls.size() != 1 || !p.content.empty()) return "not one call: " + text;
    const auto& call = p.tool_calls[0];
    if (call.truncated) return "truncated: " + text;
    const json args = json::parse(call.arguments_json, nullptr, false);
    if (!args.is_object()) return "arguments not an object: " + call.arguments_json;
    const ojson* schema = nullptr;
    for (const auto& t : tools)
        if (t["name"] == call.name) schema = &t["parameters"];
    if (!schema) return "not an allowed tool: " + call.name;
    for (const auto& r : (*schema)["required"])
        if (!args.contains(r.get<std::string>())) return "required " + r.get<std::string>() + " missing: " + text;
    auto chars = [](const std::string& s) {
        size_t n = 0;
        for (unsigned char c : s) n += (c & 0xC0) != 0x80;
        return n;
    };
    for (const auto& [k, v] : args.items()) {
        if (!(*schema)["properties"].contains(k)) return "unknown key " + k;
        const ojson& ps = (*schema)["properties"][k];
        const std::string type = ps.value("type", "");
        const bool ok = type == "string"    ? v.is_string()
                        : type == "integer" ? v.is_number_integer()
                        : type == "boolean" ? v.is_boolean()
                        : type == "array"   ? v.is_array()
                                            : false;
        if (!ok) return "bad type for " + k + ": " + v.dump() + " in " + text;
        if (v.is_string()) {
            const size_t n = chars(v.get<std::string>());
            if (n > ps.value("maxLength", size_t{1} << 40) || n < ps.value("minLength", size_t{0}))
                return "bad length of " + k + ": " + v.dump();
            if (ps.contains("enum")) {
                bool found = false;
                for (const auto& c : ps["enum"]) found = found || c == ojson(v.get<std::string>());
                if (!found) return "not an enum choice: " + v.dump();
            }
        }
        if (v.is_number_integer() && (v.get<int64_t>() < 0 || v.get<int64_t>() > 777)) return "out of range: " + v.dump();
        if (v.is_array()) {
            if (v.size() > 2) return "too many items";
            for (const auto& item : v)
                if (!item.is_string() || chars(item.get<std::string>()) > 3) return "bad item " + item.dump();
        }
    }
    return "";
}

// Draws random calls under the constraint: at every step the mask must equal the reference
// (would_accept for every token, or for `sample` random ones on a large vocabulary), and a
// finished call must read back valid. Longer runs lean toward closing tokens.
void draw_calls(const std::shared_ptr<const TokenIndex>& index, const ojson& tools, int calls, uint32_t seed, int reference_every,
                const std::vector<int32_t>& closers) {
    const auto grammar = XmlCallGrammar::from_tools(tools);
    std::mt19937 rng(seed);
    std::map<std::string, int32_t> id_of;
    for (int32_t id = 0; id < index->n_vocab(); ++id) id_of.emplace(index->bytes(id), id);
    // The piece that makes progress toward the end of the form from where the text stands.
    auto preferred = [&](const std::string& text, const TokenMask& mask) -> int32_t {
        std::vector<std::string> order;
        if (text.ends_with("</parameter") || text.ends_with("</function")) order = {">\n", ">"};
        else if (text.ends_with("</")) order = {"parameter", "function", "param", "p"};
        else if (text.ends_with("\n")) order = {"</", "<"};
        else order = {"\n", "1", "true", "\"]", ">\n", ">"};
        for (const auto& piece : order)
            if (const auto it = id_of.find(piece); it != id_of.end() && mask.allows(it->second)) return it->second;
        return -1;
    };
    for (int n = 0; n < calls; ++n) {
        XmlCallConstraint c(grammar, index);
        TokenMask mask;
        int step = 0;
        while (!c.must_end()) {
            ASSERT_LT(step, 4000) << "no end after 4000 tokens: " << c.text();
            c.allowed(mask);
            std::vector<int32_t> allowed;
            for (int32_t id = 0; id < index->n_vocab(); ++id)
                if (mask.allows(id)) allowed.push_back(id);
            ASSERT_FALSE(allowed.empty()) << "a dead end after " << json(c.text()).dump();
            if (step % reference_every == 0) {
                for (int32_t id = 0; id < index->n_vocab(); ++id)
                    ASSERT_EQ(mask.allows(id), c.would_accept(id))
                        << "token " << id << " " << json(index->bytes(id)).dump() << " after " << json(c.text()).dump();
            }
            int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
            if (step > 12 && std::uniform_int_distribution<int>(0, 2)(rng) > 0) {
                // Lean toward the form's closing pieces, so that calls finish.
                std::vector<int32_t> closing;
                for (const int32_t id : closers)
                    if (mask.allows(id)) closing.push_back(id);
                if (!closing.empty()) pick = closing[std::uniform_int_distribution<size_t>(0, closing.size() - 1)(rng)];
                if (const int32_t p = preferred(c.text(), mask); p >= 0 && std::uniform_int_distribution<int>(0, 1)(rng))
                    pick = p;
            }
            c.accept(pick);
            ++step;
        }
        c.allowed(mask);
        for (int32_t id = 0; id < index->n_vocab(); ++id) ASSERT_EQ(mask.allows(id), index->is_end(id)) << id;
        EXPECT_EQ(check_call(tools, c.text()), "") << json(c.text()).dump();
    }
}

// Every byte, the form's pieces, UTF-8 text, and an end token.
struct SmallVocab {
    std::vector<std::string> tokens;
    std::vector<int32_t> closers;
    int32_t end = -1;
};
SmallVocab small_vocab() {
    SmallVocab v;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* piece : {"<parameter=",
                              "</parameter>",
                              "\n</parameter>\n",
                              ">\n",
                              "\n",
                              "</function>",
                              "write",
                              "_file",
                              "path",
                              "content",
                              "mode",
                              "append",
                              "unit",
                              "tags",
                              "note",
                              "celsius",
                              "true",
                              "false",
                              "12",
                              "[\"",
                              "\"]",
                              "\",\"",
                              "h\xC3\xA9",
                              "\xE2\x82",
                              "\xAC",
                              "</",
                              "<p",
                              "param",
                              "eter>",
                              "\n<",
                              "abc",
                              " x"}) {
        v.tokens.push_back(piece);
        const std::string p = piece;
        if (p.find('<') != std::string::npos || p.find('>') != std::string::npos || p == "\n" || p.find(']') != std::string::npos)
            v.closers.push_back(static_cast<int32_t>(v.tokens.size() - 1));
    }
    for (const char* closer : {">", "\"", "1"}) v.closers.push_back(static_cast<uint8_t>(closer[0]));
    v.end = static_cast<int32_t>(v.tokens.size());
    v.tokens.push_back("<|end|>");
    return v;
}

TEST(XmlCallConstraint, MaskEqualsReferenceAndCallsReadBackValid) {
    const SmallVocab v = small_vocab();
    const auto index = std::make_shared<TokenIndex>(v.tokens, std::vector<int32_t>{v.end});
    draw_calls(index, test_tools(), static_cast<int>(scaled(150)), 11, 1, v.closers);
    // One tool only (a named choice): its name is forced.
    ojson one = ojson::array({test_tools()[1]});
    draw_calls(index, one, static_cast<int>(scaled(60)), 12, 1, v.closers);
}

// A named choice whose "<function=NAME>\n" the prompt already holds: the output starts at the
// parameters.
TEST(XmlCallConstraint, NameWritten) {
    const SmallVocab v = small_vocab();
    const auto index = std::make_shared<TokenIndex>(v.tokens, std::vector<int32_t>{v.end});
    const ojson one = ojson::array({test_tools()[1]});
    EXPECT_THROW(XmlCallGrammar::from_tools(test_tools(), true), Error);
    XmlCallConstraint c(XmlCallGrammar::from_tools(one, true), index);
    EXPECT_FALSE(c.would_accept('w'));
    const std::string rest = "<parameter=unit>\nf\n</parameter>\n<parameter=note>\nok\n</parameter>\n</function>";
    for (const char ch : rest) {
        ASSERT_TRUE(c.would_accept(static_cast<uint8_t>(ch))) << rest;
        c.accept(static_cast<uint8_t>(ch));
    }
    EXPECT_TRUE(c.must_end());
}

TEST(XmlCallConstraint, KnownCallsAndRefusals) {
    const SmallVocab v = small_vocab();
    const auto index = std::make_shared<TokenIndex>(v.tokens, std::vector<int32_t>{v.end});
    const auto grammar = XmlCallGrammar::from_tools(test_tools());
    auto accepts = [&](const std::string& text) {
        XmlCallConstraint c(grammar, index);
        for (const char ch : text)
            if (!c.would_accept(static_cast<uint8_t>(ch))) return false;
            else c.accept(static_cast<uint8_t>(ch));
        return c.must_end();
    };
    EXPECT_TRUE(
        accepts("write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=content>\nif a < b:\n\n  x\n"
                "</parameter>\n</function>"));
    EXPECT_TRUE(
        accepts("write_file>\n<parameter=path>\n\n</parameter>\n<parameter=content>\n\n</parameter>\n<parameter=mode>\n"
                "420\n</parameter>\n<parameter=append>\ntrue\n</parameter>\n</function>"));
    EXPECT_TRUE(
        accepts("write>\n<parameter=unit>\nc\n</parameter>\n<parameter=tags>\n[\"ab\"]\n</parameter>\n"
                "<parameter=note>\nh\xC3\xA9!\n</parameter>\n</function>"));
    EXPECT_FALSE(accepts("writ>\n"));                                                           // not a tool
    EXPECT_FALSE(accepts("write_file>\n</function>"));                                          // required path missing
    EXPECT_FALSE(accepts("write_file>\n<parameter=content>\nx\n</parameter>\n"));               // content before path
    EXPECT_FALSE(accepts("write_file>\n<parameter=path>\nabcdef\n</parameter>\n"));             // maxLength 5
    EXPECT_FALSE(accepts("write_file>\n<parameter=path>\nab</parameter>\n"));                   // no '\n' before the close
    EXPECT_FALSE(accepts("write>\n<parameter=unit>\ncel\n</parameter>\n"));                     // not a choice
    EXPECT_FALSE(accepts("write>\n<parameter=unit>\nc\n</parameter>\n<parameter=note>\nx\n"));  // minLength 2
    EXPECT_FALSE(
        accepts("write_file>\n<parameter=path>\na\n</parameter>\n<parameter=content>\nb\n</parameter>\n"
                "<parameter=mode>\n778\n"));  // maximum 777
    EXPECT_FALSE(
        accepts("write_file>\n<parameter=path>\na\n</parameter>\n<parameter=content>\nb\n</parameter>\n"
                "<parameter=mode>\n1 \n"));  // no whitespace after a JSON value
    for (
        const char* bad :
        {R"([{"name": "a>b", "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}])",
         R"([{"name": "f", "parameters": {"type": "object"}}])",
         R"([{"name": "f", "parameters": {"type": "object", "properties": {"a\nb": {"type": "string"}}}}])",
         R"([{"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "a+"}}}}])",
         R"([{"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "object", "patternProperties": {}}}}}])",
         R"([{"name": "f", "parameters": {"type": "object", "properties": {"x": {"enum": ["a\nb"]}}}}])",
         R"([{"name": "f", "parameters": {"type": "object", "properties": {"x": {}}, "required": ["y"]}}])"})
        EXPECT_THROW(XmlCallGrammar::from_tools(ojson::parse(bad)), Error) << bad;
}

TEST(XmlCallConstraintQwen3, RealVocabulary) {
    STRATA_REQUIRE_FIXTURE(qwen3_gguf());
    const auto& tok = qwen3_tokenizer();
    const auto index = std::make_shared<TokenIndex>(tok);
    std::vector<int32_t> closers;
    for (const char* piece : {"</", "parameter", ">\n", "\n", "function", ">", "<", "\"]", "1", "true"}) {
        const auto ids = tok.encode(piece, false);
        if (ids.size() == 1) closers.push_back(ids[0]);
    }
    // The full reference (every one of 151,936 tokens tried) at one step in seven.
    draw_calls(index, test_tools(), static_cast<int>(scaled(6)), 21, 7, closers);
    // The template's own rendering of a call is allowed token by token.
    const auto grammar = XmlCallGrammar::from_tools(test_tools());
    XmlCallConstraint c(grammar, index);
    const std::string call =
        "write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=content>\nprint(\"hé\")\n</parameter>\n"
        "<parameter=mode>\n420\n</parameter>\n</function>";
    TokenMask mask;
    for (const int32_t id : tok.encode(call, false)) {
        c.allowed(mask);
        ASSERT_TRUE(mask.allows(id)) << id << " " << json(tok.token_bytes(id)).dump() << " after " << json(c.text()).dump();
        c.accept(id);
    }
    EXPECT_TRUE(c.must_end());

    // Mask time (reported, not asserted: speed is for docs/constrained_decoding.md) in a bounded
    // string value, an unbounded one (the plain-text shortcut) and a JSON value.
    auto median_us = [&](const std::string& prefix) {
        XmlCallConstraint t(grammar, index);
        for (const int32_t id : tok.encode(prefix, false)) t.accept(id);
        std::vector<double> us;
        for (int i = 0; i < 15; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            t.allowed(mask);
            us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(us.begin(), us.end());
        return us[us.size() / 2];
    };
    const std::string head = "write_file>\n<parameter=path>\na.py\n</parameter>\n";
    std::printf("xml call mask, median of 15: bounded string %.0f us, unbounded string %.0f us, JSON integer %.0f us\n",
                median_us("write_file>\n<parameter=path>\nab"), median_us(head + "<parameter=content>\nsome text"),
                median_us(head + "<parameter=content>\nx\n</parameter>\n<parameter=mode>\n4"));
}

}  // namespace
}  // namespace strata::test
