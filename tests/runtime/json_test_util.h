// Shared by the JSON constraint tests: an independent reference validator for the schema
// keywords the grammar supports (with the documented choices of docs/constrained_decoding.md),
// a duplicate-key check, a small synthetic vocabulary and a random-token document generator.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/json_constraint.h"

namespace strata::test {

using OJson = nlohmann::ordered_json;

// ---- reference validator ----
//
// Plain JSON Schema with our narrowings: no "type" means the types its keywords imply (any
// when none do); "properties" without "additionalProperties" allows no other key; oneOf is
// anyOf; integers have no fraction; nullable adds null.
class ReferenceValidator {
public:
    explicit ReferenceValidator(OJson root) : root_(std::move(root)) {}

    bool valid(const nlohmann::json& v) const { return check(v, root_, 0); }

private:
    static size_t code_points(const std::string& s) {
        size_t n = 0;
        for (const char ch : s) n += (static_cast<uint8_t>(ch) & 0xC0) != 0x80;
        return n;
    }

    static bool has_type(const nlohmann::json& v, const std::string& t) {
        if (t == "null") return v.is_null();
        if (t == "boolean") return v.is_boolean();
        if (t == "object") return v.is_object();
        if (t == "array") return v.is_array();
        if (t == "string") return v.is_string();
        if (t == "number") return v.is_number();
        if (t == "integer") {
            if (v.is_number_integer()) return true;
            return v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>();
        }
        return false;
    }

    static std::vector<std::string> types_of(const OJson& s) {
        std::vector<std::string> types;
        if (s.contains("type")) {
            if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
            else
                for (const auto& t : s["type"]) types.push_back(t.get<std::string>());
        } else {
            for (const char* k : {"properties", "required", "additionalProperties"})
                if (s.contains(k)) types.push_back("object");
            for (const char* k : {"items", "prefixItems", "minItems", "maxItems", "additionalItems"})
                if (s.contains(k)) types.push_back("array");
            for (const char* k : {"minLength", "maxLength"})
                if (s.contains(k)) types.push_back("string");
            for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
                if (s.contains(k)) types.push_back("number");
            if (types.empty()) return {"null", "boolean", "object", "array", "string", "number"};
        }
        if (s.value("nullable", false)) types.push_back("null");
        return types;
    }

    bool check(const nlohmann::json& v, const OJson& s, int depth) const {
        if (depth > 200) return false;
        if (s.is_boolean()) return s.get<bool>();
        if (s.contains("$ref")) {
            const std::string ref = s["$ref"].get<std::string>();
            return check(v, root_.at(OJson::json_pointer(ref.substr(1))), depth + 1);
        }
        const bool nullable = s.value("nullable", false);
        if (s.contains("allOf")) {
            for (const auto& part : s["allOf"])
                if (!check(v, part, depth + 1)) return false;
            OJson rest = OJson::object();
            for (const auto& [k, x] : s.items())
                if (k != "allOf") rest[k] = x;
            return rest.empty() || check(v, rest, depth + 1);
        }
        for (const char* key : {"anyOf", "oneOf"}) {
            if (!s.contains(key)) continue;
            if (nullable && v.is_null()) return true;
            for (const auto& m : s[key])
                if (check(v, m, depth + 1)) return true;
            return false;
        }
        if (s.contains("enum") || s.contains("const")) {
            if (nullable && v.is_null()) return true;
            if (s.contains("type")) {
                bool typed = false;
                for (const auto& t : types_of(s)) typed = typed || has_type(v, t);
                if (!typed) return false;
            }
            if (s.contains("const") && nlohmann::json::parse(s["const"].dump()) != v) return false;
            if (s.contains("enum")) {
                bool found = false;
                for (const auto& e : s["enum"]) found = found || nlohmann::json::parse(e.dump()) == v;
                if (!found) return false;
            }
            return true;
        }
        bool typed = false;
        for (const auto& t : types_of(s)) typed = typed || has_type(v, t);
        if (!typed) return false;

        if (v.is_object()) {
            const bool has_props = s.contains("properties");
            for (const auto& [k, x] : v.items()) {
                if (has_props && s["properties"].contains(k)) {
                    if (!check(x, s["properties"][k], depth + 1)) return false;
                } else if (s.contains("additionalProperties")) {
                    if (!check(x, s["additionalProperties"], depth + 1)) return false;
                } else if (has_props) {
                    return false;
                }
            }
            if (s.contains("required"))
                for (const auto& r : s["required"])
                    if (!v.contains(r.get<std::string>())) return false;
        }
        if (v.is_array()) {
            const OJson* prefix = s.contains("prefixItems")                      ? &s["prefixItems"]
                                  : s.contains("items") && s["items"].is_array() ? &s["items"]
                                                                                 : nullptr;
            const OJson* rest = s.contains("items") && !s["items"].is_array() ? &s["items"]
                                : s.contains("additionalItems")               ? &s["additionalItems"]
                                                                              : nullptr;
            for (size_t i = 0; i < v.size(); ++i) {
                if (prefix && i < prefix->size()) {
                    if (!check(v[i], (*prefix)[i], depth + 1)) return false;
                } else if (rest && !check(v[i], *rest, depth + 1)) {
                    return false;
                }
            }
            if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
            if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
        }
        if (v.is_string()) {
            const size_t n = code_points(v.get<std::string>());
            if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
            if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
        }
        if (v.is_number()) {
            const double x = v.get<double>();
            const bool draft4_min =
                s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean() && s["exclusiveMinimum"].get<bool>();
            const bool draft4_max =
                s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean() && s["exclusiveMaximum"].get<bool>();
            if (s.contains("minimum") && (draft4_min ? x <= s["minimum"].get<double>() : x < s["minimum"].get<double>()))
                return false;
            if (s.contains("maximum") && (draft4_max ? x >= s["maximum"].get<double>() : x > s["maximum"].get<double>()))
                return false;
            if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number() && x <= s["exclusiveMinimum"].get<double>())
                return false;
            if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number() && x >= s["exclusiveMaximum"].get<double>())
                return false;
        }
        return true;
    }

    OJson root_;
};

// True when no object in the text repeats a key (nlohmann::json itself keeps the last one).
inline bool keys_unique(const std::string& text) {
    struct Handler : nlohmann::json::json_sax_t {
        std::vector<std::set<std::string>> open;
        bool duplicate = false;
        bool null() override { return true; }
        bool boolean(bool) override { return true; }
        bool number_integer(number_integer_t) override { return true; }
        bool number_unsigned(number_unsigned_t) override { return true; }
        bool number_float(number_float_t, const string_t&) override { return true; }
        bool string(string_t&) override { return true; }
        bool binary(binary_t&) override { return true; }
        bool start_object(std::size_t) override {
            open.emplace_back();
            return true;
        }
        bool key(string_t& k) override {
            duplicate = duplicate || !open.back().insert(k).second;
            return true;
        }
        bool end_object() override {
            open.pop_back();
            return true;
        }
        bool start_array(std::size_t) override { return true; }
        bool end_array() override { return true; }
        bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override { return false; }
    } handler;
    return nlohmann::json::sax_parse(text, &handler) && !handler.duplicate;
}

// ---- a small synthetic vocabulary ----
//
// Every single byte, the JSON-ish pieces below (quotes, braces, escapes, digits, literals,
// property names, partial UTF-8) and a few hundred random concatenations of them, then an
// empty token, a special token and two end tokens.
struct SyntheticVocab {
    std::vector<std::string> tokens;
    std::vector<int32_t> end_tokens, excluded;
    int32_t empty_token = -1, special_token = -1;
};

inline SyntheticVocab synthetic_vocab(uint32_t seed, size_t n_random = 400, const std::vector<std::string>& words = {}) {
    SyntheticVocab v;
    for (int b = 0; b < 256; ++b) v.tokens.emplace_back(1, static_cast<char>(b));
    std::vector<std::string> pieces = {"\"",
                                       "{",
                                       "}",
                                       "[",
                                       "]",
                                       ",",
                                       ":",
                                       " ",
                                       "\n",
                                       "\\",
                                       "\\\"",
                                       "\\u",
                                       "00",
                                       "d8",
                                       "dc",
                                       "41",
                                       "n",
                                       "t",
                                       "r",
                                       "u",
                                       "e",
                                       "a",
                                       "l",
                                       "s",
                                       "0",
                                       "1",
                                       "5",
                                       "9",
                                       "-",
                                       ".",
                                       "E",
                                       "+",
                                       "x",
                                       "\xc3\xa9",
                                       "\xe2\x82\xac",
                                       "\xf0\x9f\x98\x80",
                                       "\xe2",
                                       "\x82\xac",
                                       "\xf0\x9f",
                                       "\x98\x80",
                                       "true",
                                       "null",
                                       "false",
                                       "  ",
                                       "\": ",
                                       "\", ",
                                       "{\"",
                                       "\"}",
                                       "\":",
                                       "\",\"",
                                       "\\n",
                                       "\\\\",
                                       "12",
                                       "0.",
                                       "e+"};
    pieces.insert(pieces.end(), words.begin(), words.end());
    std::mt19937 rng(seed);
    std::set<std::string> seen(v.tokens.begin(), v.tokens.end());
    for (const auto& p : pieces)
        if (seen.insert(p).second) v.tokens.push_back(p);
    n_random += v.tokens.size() - 256;
    while (v.tokens.size() < 256 + n_random) {
        std::string t;
        const size_t k = 2 + rng() % 3;
        for (size_t i = 0; i < k; ++i) t += pieces[rng() % pieces.size()];
        if (seen.insert(t).second) v.tokens.push_back(t);
    }
    for (const auto& w : words)
        if (seen.insert(w).second) v.tokens.push_back(w);
    v.empty_token = static_cast<int32_t>(v.tokens.size());
    v.tokens.emplace_back();
    v.special_token = static_cast<int32_t>(v.tokens.size());
    v.tokens.emplace_back("<|special|>");
    v.excluded.push_back(v.special_token);
    for (int i = 0; i < 2; ++i) {
        v.end_tokens.push_back(static_cast<int32_t>(v.tokens.size()));
        v.tokens.emplace_back("<|end|>");
    }
    return v;
}

// ---- random documents ----

inline std::vector<int32_t> mask_ids(const runtime::TokenMask& mask) {
    std::vector<int32_t> ids;
    for (size_t w = 0; w < mask.words.size(); ++w)
        for (uint64_t bits = mask.words[w]; bits; bits &= bits - 1)
            ids.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits))));
    return ids;
}

// Where the fast mask and the one-token-at-a-time reference disagree (empty when they agree).
inline std::string mask_mismatch(runtime::JsonConstraint& c, const runtime::TokenIndex& index, const runtime::TokenMask& mask) {
    for (int32_t id = 0; id < index.n_vocab(); ++id) {
        const bool fast = mask.allows(id), slow = c.would_accept(id);
        if (fast != slow)
            return "token " + std::to_string(id) + " " +
                   nlohmann::json(index.bytes(id)).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) +
                   (fast ? " in the mask but refused" : " accepted but not in the mask") + " after " +
                   nlohmann::json(c.text()).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    }
    return {};
}

struct GeneratedDoc {
    std::string text;
    bool finished = false;  // ended with an end token
    std::string failure;    // an empty mask or a mask/reference mismatch
};

// Random allowed tokens until an end token (preferred once allowed; after `soft_limit` tokens
// tokens that close something are preferred). Checks that fraction of the masks against the
// one-token-at-a-time reference.
class DocumentGenerator {
public:
    explicit DocumentGenerator(const runtime::TokenIndex& index) : index_(index), closing_(static_cast<size_t>(index.n_vocab())) {
        for (int32_t id = 0; id < index.n_vocab(); ++id)
            closing_[static_cast<size_t>(id)] = index.bytes(id).find_first_of("\"}]") != std::string::npos;
    }

    GeneratedDoc generate(runtime::JsonConstraint& c, std::mt19937& rng, size_t soft_limit, size_t hard_limit,
                          double check_fraction) {
        GeneratedDoc doc;
        c.reset();
        runtime::TokenMask mask;
        std::vector<int32_t> pool;
        for (size_t step = 0; step < hard_limit; ++step) {
            c.allowed(mask);
            if (check_fraction >= 1 ||
                (check_fraction > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < check_fraction)) {
                doc.failure = mask_mismatch(c, index_, mask);
                if (!doc.failure.empty()) return doc;
            }
            const std::vector<int32_t> ids = mask_ids(mask);
            if (ids.empty()) {
                doc.failure = "empty mask (dead end) after " + c.text();
                return doc;
            }
            if (c.complete() && (step >= soft_limit || rng() % 4 == 0)) {
                c.accept(index_.end_tokens().front());
                doc.text = c.text();
                doc.finished = true;
                return doc;
            }
            const bool prefer_closing = step >= soft_limit && rng() % 3 != 0;
            pool.clear();
            for (const int32_t id : ids)
                if (!index_.is_end(id) && (!prefer_closing || closing_[static_cast<size_t>(id)])) pool.push_back(id);
            if (pool.empty())
                for (const int32_t id : ids)
                    if (!index_.is_end(id)) pool.push_back(id);
            if (pool.empty()) {  // only end tokens: must_end
                c.accept(ids.front());
                doc.text = c.text();
                doc.finished = true;
                return doc;
            }
            c.accept(pool[rng() % pool.size()]);
        }
        doc.text = c.text();
        return doc;
    }

private:
    const runtime::TokenIndex& index_;
    std::vector<uint8_t> closing_;
};

// The schemas of the property tests: (name, schema text, grammar options).
struct SchemaCase {
    const char* name;
    const char* schema;  // nullptr: json_object
    int max_depth;
};

inline const std::vector<SchemaCase>& property_schemas() {
    static const std::vector<SchemaCase> cases = {
        {"json_object", nullptr, 6},
        {"flat",
         R"({"type":"object","properties":{"title":{"type":"string","maxLength":12},"year":{"type":"integer","minimum":1800,"maximum":2100},
            "rating":{"type":"number","minimum":0,"maximum":10},"tags":{"type":"array","items":{"enum":["a","b","ab"]},"maxItems":3},
            "done":{"type":"boolean"}},"required":["title","year","done"]})",
         32},
        {"nested", R"({"type":"object","properties":{"id":{"type":"string","minLength":1,"maxLength":6},
            "status":{"enum":["new","shipped",3,null,true]},
            "items":{"type":"array","minItems":1,"maxItems":3,"items":{"type":"object","properties":{
               "sku":{"type":"string","maxLength":4},"qty":{"type":"integer","exclusiveMinimum":0,"maximum":99},
               "note":{"type":["string","null"],"maxLength":5}},"required":["sku","qty"]}},
            "meta":{"type":"object","additionalProperties":{"type":"integer"}}},
            "required":["id","status","items"]})",
         32},
        {"tool_call", R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{"anyOf":[
            {"type":"object","properties":{"kind":{"const":"city"},"city":{"type":"string","maxLength":8},"days":{"type":"integer","minimum":1,"maximum":14}},
             "required":["kind","city"]},
            {"type":"object","properties":{"kind":{"const":"coords"},"lat":{"type":"number","minimum":-90,"maximum":90},
             "lon":{"type":"number","minimum":-180,"maximum":180}},"required":["kind","lat","lon"]},
            {"type":"string","maxLength":3},{"enum":["auto","a"]}]}},"required":["name","arguments"],"additionalProperties":false})",
         32},
        {"tree",
         R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},
            "required":["v"]}},"$ref":"#/$defs/node"})",
         5},
        {"extras",
         R"({"type":"object","properties":{"a":{"type":"string","minLength":2,"maxLength":3}},"required":["a","b"],
            "additionalProperties":{"type":["number","boolean"]}})",
         32},
        {"tuple",
         R"({"type":"array","prefixItems":[{"const":{"k":[1,"x"]}},{"type":"string","maxLength":2},{"enum":[1,12,-3.5,"1"]}],
            "items":false,"minItems":2})",
         32},
        {"all_of",
         R"({"definitions":{"base":{"properties":{"id":{"type":"integer","minimum":-5,"maximum":5}},"required":["id"],"additionalProperties":true}},
            "allOf":[{"$ref":"#/definitions/base"},{"type":"object","properties":{"ok":{"type":"boolean"}},"additionalProperties":true}]})",
         32},
        {"scalar",
         R"({"anyOf":[{"type":"number"},{"type":"string","maxLength":4},{"type":"array","items":{"type":"integer"},"maxItems":3}]})",
         32},
    };
    return cases;
}

inline std::shared_ptr<const runtime::JsonGrammar> grammar_for(const SchemaCase& sc) {
    runtime::JsonGrammarOptions o;
    o.max_depth = sc.max_depth;
    return sc.schema ? runtime::JsonGrammar::from_schema_text(sc.schema, o) : runtime::JsonGrammar::any_json_object(o);
}

inline ReferenceValidator validator_for(const SchemaCase& sc) {
    return ReferenceValidator(sc.schema ? OJson::parse(sc.schema) : OJson::parse(R"({"type":"object"})"));
}

}  // namespace strata::test
