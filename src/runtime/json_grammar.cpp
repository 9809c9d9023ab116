// Schema compiler: JSON schema -> node graph (json_grammar.h). Choices are documented in
// docs/constrained_decoding.md; each place that narrows JSON Schema's meaning says so.
#include "runtime/json_grammar.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "util/error.h"

namespace strata::runtime {

namespace {

using OJson = nlohmann::ordered_json;
using Alt = JsonGrammar::Alt;
using Kind = JsonGrammar::Kind;

// JSON types as a bit set.
enum TypeBit : uint32_t {
    kNull = 1,
    kBoolean = 2,
    kObject = 4,
    kArray = 8,
    kString = 16,
    kNumber = 32,
    kInteger = 64,
    kAllTypes = 127,
};

const std::set<std::string, std::less<>> kAnnotationKeywords = {
    "description", "title",      "default",  "examples",  "$schema", "$id",         "$comment",
    "format",      "deprecated", "readOnly", "writeOnly", "$defs",   "definitions",
};
const std::set<std::string, std::less<>> kObjectKeywords = {"properties", "required", "additionalProperties"};
const std::set<std::string, std::less<>> kArrayKeywords = {"items",    "prefixItems", "additionalItems",
                                                           "minItems", "maxItems",    "uniqueItems"};
const std::set<std::string, std::less<>> kStringKeywords = {"minLength", "maxLength"};
const std::set<std::string, std::less<>> kNumberKeywords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const std::set<std::string, std::less<>> kOtherKeywords = {"type",  "nullable", "enum",  "const",
                                                           "anyOf", "oneOf",    "allOf", "$ref"};

bool is_annotation(const std::string& k) { return kAnnotationKeywords.count(k) != 0; }

std::string pointer_token(const std::string& key) {
    std::string out;
    for (char ch : key) {
        if (ch == '~') out += "~0";
        else if (ch == '/') out += "~1";
        else out += ch;
    }
    return out;
}

std::string where(const std::string& path) { return "schema at " + (path.empty() ? std::string("/") : path) + ": "; }

uint32_t value_types(const OJson& v) {
    switch (v.type()) {
        case OJson::value_t::null: return kNull;
        case OJson::value_t::boolean: return kBoolean;
        case OJson::value_t::object: return kObject;
        case OJson::value_t::array: return kArray;
        case OJson::value_t::string: return kString;
        case OJson::value_t::number_integer:
        case OJson::value_t::number_unsigned: return kNumber | kInteger;
        case OJson::value_t::number_float: {
            const double d = v.get<double>();
            return std::isfinite(d) && std::trunc(d) == d ? (kNumber | kInteger) : kNumber;
        }
        default: return 0;
    }
}

uint32_t count_limit(const OJson& s, const char* key, const std::string& path) {
    const OJson& v = s.at(key);
    if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0))
        return static_cast<uint32_t>(std::min<uint64_t>(v.get<uint64_t>(), JsonGrammar::kUnlimited - 1));
    if (v.is_number_float() && v.get<double>() >= 0 && std::trunc(v.get<double>()) == v.get<double>())
        return static_cast<uint32_t>(std::min<double>(v.get<double>(), JsonGrammar::kUnlimited - 1));
    throw Error(where(path) + "'" + key + "' must be a non-negative integer");
}

// Clamps to the magnitudes a bounded number may have.
int64_t clamp_magnitude(long double x) {
    if (!(x > 0)) return 0;  // also NaN
    if (x >= static_cast<long double>(JsonGrammar::kMaxMagnitude)) return JsonGrammar::kMaxMagnitude;
    return static_cast<int64_t>(x);
}

JsonGrammar::MagnitudeRange magnitude_range(long double lo, long double hi) {
    JsonGrammar::MagnitudeRange r;
    if (lo > hi || hi < 0 || lo > static_cast<long double>(JsonGrammar::kMaxMagnitude)) return r;  // empty
    r.lo = clamp_magnitude(lo);
    r.hi = clamp_magnitude(hi);
    return r;
}

std::string dump_compact(const OJson& v, const std::string& path) {
    try {
        return v.dump();
    } catch (const nlohmann::json::exception&) {
        throw Error(where(path) + "contains a string that is not valid UTF-8");
    }
}

}  // namespace

uint64_t JsonGrammar::key_hash(std::string_view utf8) {
    uint64_t h = key_hash_seed;
    for (size_t i = 0; i < utf8.size();) {
        const auto b = static_cast<uint8_t>(utf8[i]);
        const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
        for (int k = 1; k < len && i + k < utf8.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(utf8[i + k]) & 0x3F);
        h = key_hash_step(h, cp);
        i += static_cast<size_t>(len);
    }
    return h;
}

class SchemaCompiler {
public:
    SchemaCompiler(JsonGrammar& g, const OJson& root) : g_(g), root_(root) {}

    // The node of the schema at JSON pointer `pointer` (memoised, so $ref cycles close).
    int32_t compile_pointer(const std::string& pointer, const std::string& from_path) {
        if (const auto it = by_pointer_.find(pointer); it != by_pointer_.end()) return it->second;
        const OJson* target = nullptr;
        try {
            const OJson::json_pointer jp(pointer);
            if (root_.contains(jp)) target = &root_.at(jp);
        } catch (const nlohmann::json::exception&) {
        }
        if (!target) throw Error(where(from_path) + "'$ref' target #" + pointer + " does not exist");
        const int32_t node = new_node(pointer);
        by_pointer_[pointer] = node;
        const int32_t body = compile(*target, pointer);
        includes_[static_cast<size_t>(node)].push_back(body);
        return node;
    }

    int32_t compile(const OJson& s, const std::string& path) {
        if (s.is_boolean()) return s.get<bool>() ? any_node() : never_node();
        if (!s.is_object()) throw Error(where(path) + "expected a schema (an object, true or false), got " + s.type_name());
        check_keywords(s, path);

        if (s.contains("$ref")) {
            for (const auto& [k, v] : s.items())
                if (k != "$ref" && k != "nullable" && !is_annotation(k))
                    throw Error(where(path) + "'$ref' next to '" + k + "' is not supported");
            const int32_t target = compile_ref(s["$ref"], path);
            if (!s.value("nullable", false)) return target;
            const int32_t node = new_node(path);  // the target or null
            includes_[static_cast<size_t>(node)].push_back(target);
            Alt null;
            null.kind = Kind::Literals;
            null.literals = {"null"};
            add_alt(node, std::move(null));
            return node;
        }
        if (s.contains("allOf")) return compile_all_of(s, path);
        if (s.contains("anyOf") || s.contains("oneOf")) return compile_any_of(s, path);

        uint32_t types = declared_types(s, path);
        const bool typed = s.contains("type");
        if (!typed) types = inferred_types(s);
        if (s.contains("nullable") && s["nullable"].get<bool>()) types |= kNull;

        const int32_t node = new_node(path);
        if (s.contains("enum") || s.contains("const")) {
            for (const auto& [k, v] : s.items())
                if (kObjectKeywords.count(k) || kArrayKeywords.count(k) || kStringKeywords.count(k) || kNumberKeywords.count(k))
                    throw Error(where(path) + "'" + std::string(s.contains("enum") ? "enum" : "const") + "' next to '" + k +
                                "' is not supported");
            std::vector<const OJson*> values;
            if (s.contains("enum")) {
                if (!s["enum"].is_array()) throw Error(where(path) + "'enum' must be an array");
                for (const OJson& v : s["enum"])
                    if (!s.contains("const") || v == s["const"]) values.push_back(&v);
            } else {
                values.push_back(&s["const"]);
            }
            Alt a;
            a.kind = Kind::Literals;
            for (const OJson* v : values)
                if (!typed || (value_types(*v) & types)) a.literals.push_back(dump_compact(*v, path));
            if (s.contains("nullable") && s["nullable"].get<bool>()) a.literals.push_back("null");
            add_alt(node, std::move(a));
            return node;
        }

        if (types & (kNull | kBoolean)) {
            Alt a;
            a.kind = Kind::Literals;
            if (types & kNull) a.literals.push_back("null");
            if (types & kBoolean) a.literals.insert(a.literals.end(), {"false", "true"});
            add_alt(node, std::move(a));
        }
        if (types & kObject) add_alt(node, build_object(s, path));
        if (types & kArray) add_alt(node, build_array(s, path));
        if (types & kString) add_alt(node, build_string(s, path));
        if (types & (kNumber | kInteger)) add_alt(node, build_number(s, path, !(types & kNumber)));
        return node;
    }

    // The grammar's "any JSON value" node.
    int32_t any_node() {
        if (any_node_ >= 0) return any_node_;
        any_node_ = new_node("(any value)");
        Alt obj;
        obj.kind = Kind::Object;
        obj.extra_node = any_node_;
        add_alt(any_node_, std::move(obj));
        Alt arr;
        arr.kind = Kind::Array;
        arr.items = any_node_;
        add_alt(any_node_, std::move(arr));
        Alt str;
        str.kind = Kind::String;
        add_alt(any_node_, std::move(str));
        Alt num;
        num.kind = Kind::Number;
        add_alt(any_node_, std::move(num));
        Alt lit;
        lit.kind = Kind::Literals;
        lit.literals = {"false", "null", "true"};
        add_alt(any_node_, std::move(lit));
        return any_node_;
    }

    int32_t any_object_node() {
        const int32_t node = new_node("");
        Alt obj;
        obj.kind = Kind::Object;
        obj.extra_node = any_node();
        add_alt(node, std::move(obj));
        return node;
    }

    // Links unions, computes min_depth, drops what can never be completed, builds the key tries.
    void finish(int32_t root) {
        link();
        compute_min_depth();
        prune();
        build_key_tables();
        g_.root_ = root;
        const int32_t need = g_.nodes_[static_cast<size_t>(root)].min_depth;
        if (need == JsonGrammar::kUnreachable) throw Error(where("") + "no JSON document matches this schema");
        if (need > g_.options_.max_depth)
            throw Error(where("") + "every matching document nests deeper than the limit of " +
                        std::to_string(g_.options_.max_depth));
    }

private:
    int32_t new_node(const std::string& path) {
        g_.nodes_.emplace_back();
        includes_.emplace_back();
        node_paths_.push_back(path);
        return static_cast<int32_t>(g_.nodes_.size() - 1);
    }

    void add_alt(int32_t node, Alt a) {
        g_.alts_.push_back(std::move(a));
        g_.nodes_[static_cast<size_t>(node)].alts.push_back(static_cast<int32_t>(g_.alts_.size() - 1));
    }

    int32_t never_node() {
        if (never_node_ < 0) never_node_ = new_node("(false)");
        return never_node_;
    }

    void check_keywords(const OJson& s, const std::string& path) {
        for (const auto& [k, v] : s.items()) {
            if (k == "uniqueItems") {
                if (v.is_boolean() && !v.get<bool>()) continue;
                throw Error(where(path) + "unsupported keyword 'uniqueItems'");
            }
            if (k == "nullable" && !v.is_boolean()) throw Error(where(path) + "'nullable' must be true or false");
            if (!is_annotation(k) && !kObjectKeywords.count(k) && !kArrayKeywords.count(k) && !kStringKeywords.count(k) &&
                !kNumberKeywords.count(k) && !kOtherKeywords.count(k))
                throw Error(where(path) + "unsupported keyword '" + k + "'");
        }
    }

    uint32_t declared_types(const OJson& s, const std::string& path) {
        if (!s.contains("type")) return kAllTypes;
        auto one = [&](const OJson& t) -> uint32_t {
            if (!t.is_string()) throw Error(where(path) + "'type' must be a string or an array of strings");
            static const std::map<std::string, uint32_t, std::less<>> names = {
                {"null", kNull},     {"boolean", kBoolean}, {"object", kObject},   {"array", kArray},
                {"string", kString}, {"number", kNumber},   {"integer", kInteger},
            };
            const auto it = names.find(t.get<std::string>());
            if (it == names.end()) throw Error(where(path) + "unknown type '" + t.get<std::string>() + "'");
            return it->second;
        };
        const OJson& t = s["type"];
        if (!t.is_array()) return one(t);
        if (t.empty()) throw Error(where(path) + "'type' is an empty array");
        uint32_t types = 0;
        for (const OJson& e : t) types |= one(e);
        return types;
    }

    // Without "type", the type-specific keywords say which types are meant (a narrowing of
    // JSON Schema, where they would only constrain values of their type); none: any type.
    static uint32_t inferred_types(const OJson& s) {
        if (s.contains("enum") || s.contains("const")) return kAllTypes;
        uint32_t types = 0;
        for (const auto& [k, v] : s.items()) {
            if (kObjectKeywords.count(k)) types |= kObject;
            if (kArrayKeywords.count(k) && k != "uniqueItems") types |= kArray;
            if (kStringKeywords.count(k)) types |= kString;
            if (kNumberKeywords.count(k)) types |= kNumber;
        }
        return types ? types : kAllTypes;
    }

    int32_t compile_ref(const OJson& ref, const std::string& path) {
        if (!ref.is_string()) throw Error(where(path) + "'$ref' must be a string");
        const std::string r = ref.get<std::string>();
        if (r == "#") return compile_pointer("", path);
        if (r.rfind("#/", 0) != 0) throw Error(where(path) + "only local references ('#/...') are supported, not '" + r + "'");
        return compile_pointer(r.substr(1), path);
    }

    int32_t compile_any_of(const OJson& s, const std::string& path) {
        if (s.contains("anyOf") && s.contains("oneOf")) throw Error(where(path) + "'anyOf' next to 'oneOf' is not supported");
        const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
        for (const auto& [k, v] : s.items())
            if (k != key && k != "nullable" && !is_annotation(k))
                throw Error(where(path) + "'" + key + "' next to '" + k + "' is not supported");
        const OJson& members = s[key];
        if (!members.is_array() || members.empty()) throw Error(where(path) + "'" + key + "' must be a non-empty array");
        const int32_t node = new_node(path);
        for (size_t i = 0; i < members.size(); ++i) {
            const int32_t m = compile(members[i], path + "/" + key + "/" + std::to_string(i));
            includes_[static_cast<size_t>(node)].push_back(m);
        }
        if (s.contains("nullable") && s["nullable"].get<bool>()) {
            Alt a;
            a.kind = Kind::Literals;
            a.literals = {"null"};
            add_alt(node, std::move(a));
        }
        return node;
    }

    // allOf: one part (plus annotations) is that part; several must all be object schemas,
    // merged so that the result accepts exactly what every part accepts.
    int32_t compile_all_of(const OJson& s, const std::string& path) {
        const OJson& parts = s["allOf"];
        if (!parts.is_array() || parts.empty()) throw Error(where(path) + "'allOf' must be a non-empty array");
        OJson siblings = OJson::object();
        for (const auto& [k, v] : s.items())
            if (k != "allOf" && !is_annotation(k)) siblings[k] = v;
        if (parts.size() == 1 && siblings.empty()) return compile(parts[0], path + "/allOf/0");

        std::vector<std::pair<const OJson*, std::string>> flat;
        for (size_t i = 0; i < parts.size(); ++i) flatten_all_of(parts[i], path + "/allOf/" + std::to_string(i), flat, 0);
        if (!siblings.empty()) flatten_all_of(siblings, path, flat, 0);

        struct PartInfo {
            const OJson* props = nullptr;  // "properties" or null
            int extras = 0;                // 0 none, 1 any, 2 schema
            const OJson* extra_schema = nullptr;
        };
        std::vector<PartInfo> infos;
        std::vector<std::string> names, required;
        for (const auto& [part, part_path] : flat) {
            for (const auto& [k, v] : part->items()) {
                if (k == "type" && v == "object") continue;
                if (!kObjectKeywords.count(k) && !is_annotation(k))
                    throw Error(where(part_path) +
                                "allOf can merge object schemas only (properties, required, "
                                "additionalProperties); '" +
                                k + "' is not supported here");
            }
            PartInfo info;
            if (part->contains("properties")) {
                info.props = &(*part)["properties"];
                if (!info.props->is_object()) throw Error(where(part_path) + "'properties' must be an object");
                for (const auto& [name, sub] : info.props->items())
                    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
            }
            const OJson* ap = part->contains("additionalProperties") ? &(*part)["additionalProperties"] : nullptr;
            if (!ap) info.extras = info.props ? 0 : 1;
            else if (ap->is_boolean()) info.extras = ap->get<bool>() ? 1 : 0;
            else info.extras = 2, info.extra_schema = ap;
            if (part->contains("required")) {
                if (!(*part)["required"].is_array()) throw Error(where(part_path) + "'required' must be an array of strings");
                for (const OJson& r : (*part)["required"]) {
                    if (!r.is_string()) throw Error(where(part_path) + "'required' must be an array of strings");
                    if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end())
                        required.push_back(r.get<std::string>());
                }
            }
            infos.push_back(info);
        }

        auto single = [&](const std::vector<const OJson*>& constraints, const std::string& what) -> OJson {
            std::vector<const OJson*> distinct;
            for (const OJson* c : constraints)
                if (std::none_of(distinct.begin(), distinct.end(), [&](const OJson* d) { return *d == *c; }))
                    distinct.push_back(c);
            if (distinct.empty()) return OJson(true);
            if (distinct.size() > 1) throw Error(where(path) + "allOf: " + what + " is constrained by more than one part");
            return *distinct[0];
        };

        OJson merged = OJson::object();
        merged["type"] = "object";
        OJson props = OJson::object();
        for (const std::string& name : names) {
            bool allowed = true;
            std::vector<const OJson*> constraints;
            for (const PartInfo& info : infos) {
                if (info.props && info.props->contains(name)) constraints.push_back(&(*info.props)[name]);
                else if (info.extras == 0) allowed = false;
                else if (info.extras == 2) constraints.push_back(info.extra_schema);
            }
            if (allowed) props[name] = single(constraints, "property '" + name + "'");
            else if (std::find(required.begin(), required.end(), name) != required.end()) props[name] = false;
        }
        merged["properties"] = std::move(props);
        merged["required"] = required;
        bool extras_allowed = true;
        std::vector<const OJson*> extra_constraints;
        for (const PartInfo& info : infos) {
            if (info.extras == 0) extras_allowed = false;
            if (info.extras == 2) extra_constraints.push_back(info.extra_schema);
        }
        merged["additionalProperties"] = extras_allowed ? single(extra_constraints, "additionalProperties") : OJson(false);
        merged_.push_back(std::make_unique<OJson>(std::move(merged)));
        return compile(*merged_.back(), path);
    }

    void flatten_all_of(const OJson& part, const std::string& path, std::vector<std::pair<const OJson*, std::string>>& out,
                        int hops) {
        if (hops > 32) throw Error(where(path) + "allOf/$ref chain too deep");
        if (part.is_boolean() && part.get<bool>()) return;
        if (!part.is_object()) throw Error(where(path) + "allOf can merge object schemas only");
        if (part.contains("$ref")) {
            const OJson& ref = part["$ref"];
            for (const auto& [k, v] : part.items())
                if (k != "$ref" && !is_annotation(k)) throw Error(where(path) + "'$ref' next to '" + k + "' is not supported");
            if (!ref.is_string() || ref.get<std::string>().rfind("#", 0) != 0)
                throw Error(where(path) + "only local references ('#/...') are supported");
            const std::string pointer = ref.get<std::string>().substr(1);
            const OJson* target = nullptr;
            try {
                const OJson::json_pointer jp(pointer);
                if (root_.contains(jp)) target = &root_.at(jp);
            } catch (const nlohmann::json::exception&) {
            }
            if (!target) throw Error(where(path) + "'$ref' target #" + pointer + " does not exist");
            flatten_all_of(*target, pointer, out, hops + 1);
            return;
        }
        if (part.contains("allOf")) {
            const OJson& parts = part["allOf"];
            if (!parts.is_array()) throw Error(where(path) + "'allOf' must be a non-empty array");
            OJson rest = OJson::object();
            for (const auto& [k, v] : part.items())
                if (k != "allOf" && !is_annotation(k)) rest[k] = v;
            for (size_t i = 0; i < parts.size(); ++i)
                flatten_all_of(parts[i], path + "/allOf/" + std::to_string(i), out, hops + 1);
            if (!rest.empty()) {
                merged_.push_back(std::make_unique<OJson>(std::move(rest)));
                out.emplace_back(merged_.back().get(), path);
            }
            return;
        }
        check_keywords(part, path);
        out.emplace_back(&part, path);
    }

    Alt build_object(const OJson& s, const std::string& path) {
        Alt a;
        a.kind = Kind::Object;
        const bool has_props = s.contains("properties");
        if (has_props) {
            const OJson& props = s["properties"];
            if (!props.is_object()) throw Error(where(path) + "'properties' must be an object");
            for (const auto& [name, sub] : props.items()) {
                JsonGrammar::Property p;
                p.name = name;
                p.node = compile(sub, path + "/properties/" + pointer_token(name));
                a.properties.push_back(std::move(p));
            }
        }
        // additionalProperties absent: JSON Schema allows any extra key; like OpenAI's
        // structured outputs we allow none when properties are listed.
        if (!s.contains("additionalProperties")) {
            a.extra_node = has_props ? -1 : any_node();
        } else {
            const OJson& ap = s["additionalProperties"];
            if (ap.is_boolean()) a.extra_node = ap.get<bool>() ? any_node() : -1;
            else a.extra_node = compile(ap, path + "/additionalProperties");
        }
        if (s.contains("required")) {
            const OJson& req = s["required"];
            if (!req.is_array()) throw Error(where(path) + "'required' must be an array of strings");
            for (const OJson& r : req) {
                if (!r.is_string()) throw Error(where(path) + "'required' must be an array of strings");
                const std::string name = r.get<std::string>();
                auto it = std::find_if(a.properties.begin(), a.properties.end(), [&](const auto& p) { return p.name == name; });
                if (it != a.properties.end()) {
                    it->required = true;
                } else {
                    // Required but not listed: an extra property that must appear (after the listed ones).
                    JsonGrammar::Property p;
                    p.name = name;
                    p.node = a.extra_node >= 0 ? a.extra_node : never_node();
                    p.required = true;
                    a.properties.push_back(std::move(p));
                }
            }
        }
        for (const auto& p : a.properties) dump_compact(OJson(p.name), path);  // names must be UTF-8
        return a;
    }

    Alt build_array(const OJson& s, const std::string& path) {
        Alt a;
        a.kind = Kind::Array;
        a.items = any_node();
        const bool tuple_items = s.contains("items") && s["items"].is_array();
        if (s.contains("prefixItems")) {
            if (tuple_items) throw Error(where(path) + "'prefixItems' next to an 'items' array is not supported");
            const OJson& pi = s["prefixItems"];
            if (!pi.is_array()) throw Error(where(path) + "'prefixItems' must be an array of schemas");
            for (size_t i = 0; i < pi.size(); ++i)
                a.prefix_items.push_back(compile(pi[i], path + "/prefixItems/" + std::to_string(i)));
        }
        if (tuple_items) {
            const OJson& it = s["items"];
            for (size_t i = 0; i < it.size(); ++i) a.prefix_items.push_back(compile(it[i], path + "/items/" + std::to_string(i)));
            if (s.contains("additionalItems")) a.items = compile(s["additionalItems"], path + "/additionalItems");
        } else {
            if (s.contains("additionalItems"))
                throw Error(where(path) + "'additionalItems' without an 'items' array is not supported");
            if (s.contains("items")) a.items = compile(s["items"], path + "/items");
        }
        if (s.contains("minItems")) a.min_items = count_limit(s, "minItems", path);
        if (s.contains("maxItems")) a.max_items = count_limit(s, "maxItems", path);
        return a;
    }

    Alt build_string(const OJson& s, const std::string& path) {
        Alt a;
        a.kind = Kind::String;
        if (s.contains("minLength")) a.min_length = count_limit(s, "minLength", path);
        if (s.contains("maxLength")) a.max_length = count_limit(s, "maxLength", path);
        return a;
    }

    // minimum/maximum/exclusive*: integers exactly; other numbers with no exponent, an integer
    // part whose whole [n, n+1) range lies within the bounds when a fraction follows.
    Alt build_number(const OJson& s, const std::string& path, bool integer) {
        Alt a;
        a.kind = Kind::Number;
        a.integer = integer;
        const long double inf = std::numeric_limits<long double>::infinity();
        long double lo = -inf, hi = inf;
        bool lo_excl = false, hi_excl = false;
        auto number = [&](const char* key) -> long double {
            const OJson& v = s[key];
            if (!v.is_number()) throw Error(where(path) + "'" + key + "' must be a number");
            if (v.is_number_integer()) return static_cast<long double>(v.get<int64_t>());
            if (v.is_number_unsigned()) return static_cast<long double>(v.get<uint64_t>());
            return static_cast<long double>(v.get<double>());
        };
        auto tighten_lo = [&](long double x, bool excl) {
            if (x > lo || (x == lo && excl)) lo = x, lo_excl = excl;
        };
        auto tighten_hi = [&](long double x, bool excl) {
            if (x < hi || (x == hi && excl)) hi = x, hi_excl = excl;
        };
        bool draft4_lo = false, draft4_hi = false;
        for (const char* key : {"exclusiveMinimum", "exclusiveMaximum"}) {
            if (!s.contains(key)) continue;
            const OJson& v = s[key];
            const bool is_min = key[10] == 'i';                                    // exclusiveM[i]nimum
            if (v.is_boolean()) (is_min ? draft4_lo : draft4_hi) = v.get<bool>();  // draft 4: qualifies minimum/maximum
            else if (is_min) tighten_lo(number(key), true);
            else tighten_hi(number(key), true);
        }
        if (s.contains("minimum")) tighten_lo(number("minimum"), draft4_lo);
        if (s.contains("maximum")) tighten_hi(number("maximum"), draft4_hi);
        a.bounded = lo != -inf || hi != inf;
        if (!a.bounded) return a;
        // Smallest and largest allowed integer values.
        const long double ilo = lo == -inf ? -inf : lo_excl ? std::floor(lo) + 1 : std::ceil(lo);
        const long double ihi = hi == inf ? inf : hi_excl ? std::ceil(hi) - 1 : std::floor(hi);
        a.end[0] = magnitude_range(std::max<long double>(ilo, 0), ihi);
        a.end[1] = magnitude_range(std::max<long double>(-ihi, 0), -ilo);
        if (!integer) {
            // n.ddd lies in [n, n+1); -n.ddd in (-(n+1), -n].
            a.fraction[0] = magnitude_range(std::max<long double>(ilo, 0), hi == inf ? inf : std::floor(hi) - 1);
            a.fraction[1] = magnitude_range(std::max<long double>(-ihi, 0), lo == -inf ? inf : -std::ceil(lo) - 1);
        }
        return a;
    }

    // ---- finishing ----

    void link() {
        std::vector<uint8_t> state(g_.nodes_.size(), 0);  // 0 new, 1 on the stack, 2 done
        std::function<void(int32_t)> visit = [&](int32_t n) {
            const auto ni = static_cast<size_t>(n);
            if (state[ni] == 2) return;
            if (state[ni] == 1)
                throw Error(where(node_paths_[ni]) + "'$ref'/anyOf cycle that nests no object or array (it would never end)");
            state[ni] = 1;
            for (int32_t inc : includes_[ni]) {
                visit(inc);
                for (int32_t alt : g_.nodes_[static_cast<size_t>(inc)].alts) g_.nodes_[ni].alts.push_back(alt);
            }
            state[ni] = 2;
            merge_alts(g_.nodes_[ni].alts);
        };
        for (size_t n = 0; n < g_.nodes_.size(); ++n) visit(static_cast<int32_t>(n));
    }

    // One literal alternative per node (a union of literal sets); duplicate strings and numbers dropped.
    void merge_alts(std::vector<int32_t>& alts) {
        std::vector<int32_t> out, literal_alts;
        for (int32_t id : alts) {
            if (std::find(out.begin(), out.end(), id) != out.end()) continue;
            const Alt& a = g_.alts_[static_cast<size_t>(id)];
            if (a.kind == Kind::Literals) {
                literal_alts.push_back(id);
                continue;
            }
            const bool duplicate = std::any_of(out.begin(), out.end(), [&](int32_t o) {
                const Alt& b = g_.alts_[static_cast<size_t>(o)];
                if (a.kind != b.kind) return false;
                if (a.kind == Kind::String) return a.min_length == b.min_length && a.max_length == b.max_length;
                if (a.kind == Kind::Number)
                    return !a.bounded && !b.bounded && (a.integer == b.integer || !b.integer);  // number covers integer
                return false;
            });
            if (!duplicate) out.push_back(id);
        }
        // An unbounded number covers an unbounded integer.
        const bool any_number = std::any_of(out.begin(), out.end(), [&](int32_t o) {
            const Alt& b = g_.alts_[static_cast<size_t>(o)];
            return b.kind == Kind::Number && !b.bounded && !b.integer;
        });
        if (any_number)
            std::erase_if(out, [&](int32_t o) {
                const Alt& b = g_.alts_[static_cast<size_t>(o)];
                return b.kind == Kind::Number && !b.bounded && b.integer;
            });
        if (literal_alts.size() == 1) {
            out.push_back(literal_alts[0]);
        } else if (literal_alts.size() > 1) {
            Alt merged;
            merged.kind = Kind::Literals;
            for (int32_t id : literal_alts)
                for (const std::string& l : g_.alts_[static_cast<size_t>(id)].literals) merged.literals.push_back(l);
            g_.alts_.push_back(std::move(merged));
            out.push_back(static_cast<int32_t>(g_.alts_.size() - 1));
        }
        alts = std::move(out);
    }

    int32_t alt_min_depth(const Alt& a) const {
        constexpr int32_t kInf = JsonGrammar::kUnreachable;
        auto node_depth = [&](int32_t n) { return n < 0 ? kInf : g_.nodes_[static_cast<size_t>(n)].min_depth; };
        switch (a.kind) {
            case Kind::Object: {
                int32_t m = 1;
                for (const auto& p : a.properties)
                    if (p.required) m = std::max(m, node_depth(p.node) == kInf ? kInf : 1 + node_depth(p.node));
                return m;
            }
            case Kind::Array: {
                if (a.min_items > a.max_items) return kInf;
                int32_t m = 1;
                const uint32_t checked = std::min<uint32_t>(a.min_items, static_cast<uint32_t>(a.prefix_items.size()) + 1);
                for (uint32_t i = 0; i < checked; ++i) {
                    const int32_t d = node_depth(a.item_node(i));
                    m = std::max(m, d == kInf ? kInf : 1 + d);
                }
                return m;
            }
            case Kind::String: return a.min_length <= a.max_length ? 0 : kInf;
            case Kind::Number:
                return !a.bounded || !a.end[0].empty() || !a.end[1].empty() || !a.fraction[0].empty() || !a.fraction[1].empty()
                           ? 0
                           : kInf;
            case Kind::Literals: return a.literals.empty() ? kInf : 0;
        }
        return kInf;
    }

    void compute_min_depth() {
        for (bool changed = true; changed;) {
            changed = false;
            for (Alt& a : g_.alts_) {
                const int32_t d = alt_min_depth(a);
                if (d < a.min_depth) a.min_depth = d, changed = true;
            }
            for (JsonGrammar::Node& n : g_.nodes_) {
                int32_t d = JsonGrammar::kUnreachable;
                for (int32_t id : n.alts) d = std::min(d, g_.alts_[static_cast<size_t>(id)].min_depth);
                if (d < n.min_depth) n.min_depth = d, changed = true;
            }
        }
    }

    bool reachable(int32_t node) const {
        return node >= 0 && g_.nodes_[static_cast<size_t>(node)].min_depth < JsonGrammar::kUnreachable;
    }

    void prune() {
        for (JsonGrammar::Node& n : g_.nodes_)
            std::erase_if(n.alts,
                          [&](int32_t id) { return g_.alts_[static_cast<size_t>(id)].min_depth > g_.options_.max_depth; });
        for (Alt& a : g_.alts_) {
            if (a.kind == Kind::Object) {
                std::erase_if(a.properties, [&](const auto& p) { return !p.required && !reachable(p.node); });
                if (!reachable(a.extra_node)) a.extra_node = -1;
            } else if (a.kind == Kind::Array) {
                for (size_t i = 0; i < a.prefix_items.size(); ++i) {
                    if (!reachable(a.prefix_items[i])) {
                        a.prefix_items.resize(i);
                        a.items = -1;
                        break;
                    }
                }
                if (!reachable(a.items)) {
                    a.items = -1;
                    a.max_items = std::min<uint32_t>(a.max_items, static_cast<uint32_t>(a.prefix_items.size()));
                }
            } else if (a.kind == Kind::Literals) {
                std::sort(a.literals.begin(), a.literals.end());
                a.literals.erase(std::unique(a.literals.begin(), a.literals.end()), a.literals.end());
                for (const std::string& l : a.literals) {
                    const auto b = static_cast<uint8_t>(l[0]);
                    a.literal_first_bytes[b >> 6] |= uint64_t{1} << (b & 63);
                }
            }
        }
    }

    void build_key_tables() {
        g_.name_trie_.clear();
        for (Alt& a : g_.alts_) {
            if (a.kind != Kind::Object) continue;
            const size_t n = a.properties.size();
            a.next_required.assign(n + 1, static_cast<uint32_t>(n));
            for (size_t i = n; i-- > 0;)
                a.next_required[i] = a.properties[i].required ? static_cast<uint32_t>(i) : a.next_required[i + 1];
            a.name_root = static_cast<uint32_t>(g_.name_trie_.size());
            g_.name_trie_.emplace_back();
            a.name_hashes.clear();
            for (size_t i = 0; i < n; ++i) {
                const std::string quoted = OJson(a.properties[i].name).dump();
                const std::string_view encoded(quoted.data() + 1, quoted.size() - 2);
                uint32_t at = a.name_root;
                g_.name_trie_[at].properties_below.push_back(static_cast<int32_t>(i));
                for (const char ch : encoded) {
                    const auto byte = static_cast<uint8_t>(ch);
                    auto& kids = g_.name_trie_[at].children;
                    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, uint32_t{0}));
                    if (it == kids.end() || it->first != byte) {
                        const auto child = static_cast<uint32_t>(g_.name_trie_.size());
                        kids.insert(it, {byte, child});
                        g_.name_trie_.emplace_back();
                        at = child;
                    } else {
                        at = it->second;
                    }
                    g_.name_trie_[at].properties_below.push_back(static_cast<int32_t>(i));
                }
                g_.name_trie_[at].property = static_cast<int32_t>(i);
                a.name_hashes.push_back(JsonGrammar::key_hash(a.properties[i].name));
            }
            std::sort(a.name_hashes.begin(), a.name_hashes.end());
        }
    }

    JsonGrammar& g_;
    const OJson& root_;
    std::vector<std::vector<int32_t>> includes_;  // per node: nodes whose alternatives join it
    std::vector<std::string> node_paths_;
    std::map<std::string, int32_t> by_pointer_;
    std::vector<std::unique_ptr<OJson>> merged_;  // schemas made by allOf merging (compiled in place)
    int32_t any_node_ = -1, never_node_ = -1;
};

namespace {
void check_options(const JsonGrammarOptions& options) {
    if (options.max_depth < 1 || options.max_depth > 200) throw Error("json grammar: max_depth must be 1..200");
    if (options.max_whitespace_run < 0 || options.max_whitespace_run > 64)
        throw Error("json grammar: max_whitespace_run must be 0..64");
}
}  // namespace

std::shared_ptr<const JsonGrammar> JsonGrammar::any_json_object(const JsonGrammarOptions& options) {
    check_options(options);
    std::shared_ptr<JsonGrammar> g(new JsonGrammar());
    g->options_ = options;
    const OJson empty = OJson::object();
    SchemaCompiler c(*g, empty);
    const int32_t root = c.any_object_node();
    c.finish(root);
    return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_ordered_schema(const nlohmann::ordered_json& schema,
                                                                    const JsonGrammarOptions& options) {
    check_options(options);
    std::shared_ptr<JsonGrammar> g(new JsonGrammar());
    g->options_ = options;
    SchemaCompiler c(*g, schema);
    const int32_t root = c.compile_pointer("", "");
    c.finish(root);
    return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema(const nlohmann::json& schema, const JsonGrammarOptions& options) {
    std::string text;
    try {
        text = schema.dump();
    } catch (const nlohmann::json::exception&) {
        throw Error(where("") + "contains a string that is not valid UTF-8");
    }
    return from_ordered_schema(nlohmann::ordered_json::parse(text), options);
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema_text(std::string_view text, const JsonGrammarOptions& options) {
    nlohmann::ordered_json schema;
    try {
        schema = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(std::string("schema is not valid JSON: ") + e.what());
    }
    return from_ordered_schema(schema, options);
}

}  // namespace strata::runtime
