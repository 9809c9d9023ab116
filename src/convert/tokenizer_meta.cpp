#include "convert/tokenizer_meta.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "util/error.h"

namespace strata::convert {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Token types as GGUF numbers them.
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

// The split regexes of the Qwen tokenizers, as tokenizer.json spells them.
const char* const kQwen2Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kQwen35Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

json read_json(const fs::path& p, bool required) {
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) {
        if (required) throw Error(p.string() + ": not found");
        return json();
    }
    std::ifstream in(p);
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        throw Error(p.string() + ": not valid JSON: " + e.what());
    }
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in && !in.eof()) throw Error(p.string() + ": cannot read");
    return ss.str();
}

bool starts_ends(const std::string& s, const std::string& a, const std::string& b) {
    return s.size() >= a.size() + b.size() && s.starts_with(a) && s.ends_with(b);
}

// Added tokens some models forget to mark special but which are control tokens all the same.
bool looks_special(const std::string& t) {
    if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
    if (starts_ends(t, "<|", "|>")) return true;
    if (starts_ends(t, "<\xEF\xBD\x9C", "\xEF\xBD\x9C>")) return true;  // fullwidth bars, U+FF5C
    return starts_ends(t, "<unused", ">");
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
    return s;
}

// The split regex inside a pre_tokenizer (Sequence or a bare Split); "" when there is none.
std::string split_regex(const json& pre) {
    if (!pre.is_object()) return "";
    const std::string type = pre.value("type", "");
    if (type == "Split" && pre.contains("pattern") && pre["pattern"].is_object()) {
        const json& p = pre["pattern"];
        if (p.contains("Regex") && p["Regex"].is_string()) return p["Regex"].get<std::string>();
        return "";
    }
    if (type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array())
        for (const json& sub : pre["pretokenizers"])
            if (std::string r = split_regex(sub); !r.empty()) return r;
    return "";
}

struct AddedToken {
    int64_t id;
    std::string content;
    bool special;
};

// The normalizer flags the converter records (lowercase / strip accents), in any nesting.
void parse_normalizer(const json& n, std::optional<bool>& lowercase, std::optional<bool>& strip_accents) {
    if (!n.is_object()) return;
    const std::string type = n.value("type", "");
    if (type == "Lowercase") lowercase = true;
    else if (type == "StripAccents") strip_accents = true;
    else if (type == "BertNormalizer") {
        if (n.contains("lowercase") && n["lowercase"].is_boolean()) lowercase = n["lowercase"].get<bool>();
        if (n.contains("strip_accents") && n["strip_accents"].is_boolean()) strip_accents = n["strip_accents"].get<bool>();
    } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
        for (const json& sub : n["normalizers"]) parse_normalizer(sub, lowercase, strip_accents);
    }
}

// A *_token entry of tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> token_content(const json& cfg, const std::string& key) {
    if (!cfg.is_object() || !cfg.contains(key)) return std::nullopt;
    const json& e = cfg[key];
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object() && e.contains("content") && e["content"].is_string()) return e["content"].get<std::string>();
    return std::nullopt;
}

bool truthy_token(const json& cfg, const std::string& key) {
    if (!cfg.is_object() || !cfg.contains(key)) return false;
    const json& e = cfg[key];
    if (e.is_string()) return !e.get<std::string>().empty();
    return !e.is_null() && !(e.is_object() && e.empty());
}

}  // namespace

std::string pre_tokenizer_name_for_regex(const std::string& regex) {
    if (regex == kQwen2Regex) return "qwen2";
    if (regex == kQwen35Regex) return "qwen35";
    return "";
}

MetadataList tokenizer_metadata(const fs::path& dir, int64_t vocab_size) {
    const fs::path tok_path = dir / "tokenizer.json";
    const std::string where = tok_path.string();
    std::error_code ec;
    if (!fs::is_regular_file(tok_path, ec))
        throw Error(where + ": not found (a fast tokenizer's tokenizer.json is needed for the vocabulary)");
    const json tok = read_json(tok_path, true);
    if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object()) throw Error(where + ": has no model section");
    const json& model = tok["model"];
    if (model.value("type", "") != "BPE")
        throw Error(where + ": tokenizer model is '" + model.value("type", std::string("?")) +
                    "'; only BPE vocabularies are supported");
    if (!model.contains("vocab") || !model["vocab"].is_object()) throw Error(where + ": BPE model has no vocab");

    // id -> token text; added tokens override the model vocabulary.
    std::map<int64_t, std::string> by_id;
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
            throw Error(where + ": vocab entry '" + it.key() + "' has no valid id");
        by_id[it.value().get<int64_t>()] = it.key();
    }
    std::vector<AddedToken> added;
    std::map<std::string, size_t> added_by_content;
    if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
        for (const json& a : tok["added_tokens"]) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
                !a["content"].is_string())
                throw Error(where + ": malformed added_tokens entry");
            AddedToken t{a["id"].get<int64_t>(), a["content"].get<std::string>(), a.value("special", false)};
            if (t.id < 0) throw Error(where + ": added token '" + t.content + "' has a negative id");
            by_id[t.id] = t.content;
            added_by_content.emplace(t.content, added.size());  // the first one wins
            added.push_back(std::move(t));
        }
    }
    if (!by_id.empty() && by_id.rbegin()->first >= vocab_size)
        throw Error(where + ": token id " + std::to_string(by_id.rbegin()->first) + " is not below the model's vocab_size " +
                    std::to_string(vocab_size));

    const std::string pre = pre_tokenizer_name_for_regex(split_regex(tok.value("pre_tokenizer", json())));
    if (pre.empty())
        throw Error(where +
                    ": the pre-tokenizer is not one of the known Qwen ones (qwen2, qwen35): cannot choose tokenizer.ggml.pre");

    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    tokens.reserve(static_cast<size_t>(vocab_size));
    types.reserve(static_cast<size_t>(vocab_size));
    for (int64_t i = 0; i < vocab_size; ++i) {
        const auto it = by_id.find(i);
        if (it == by_id.end()) {
            tokens.push_back("[PAD" + std::to_string(i) + "]");
            types.push_back(kUnused);
            continue;
        }
        std::string text = it->second;
        const auto a = added_by_content.find(text);
        if (a == added_by_content.end()) {
            types.push_back(kNormal);
        } else if (added[a->second].special || looks_special(text)) {
            types.push_back(kControl);
        } else {
            text = replace_all(text, "\xE2\x96\x81", " ");  // U+2581 (sentencepiece space) -> space
            types.push_back(kUserDefined);
        }
        tokens.push_back(std::move(text));
    }

    // Merges: "a b" strings; the newer [a, b] pair form spells a space inside a part as U+0120.
    std::vector<std::string> merges;
    if (model.contains("merges") && model["merges"].is_array()) {
        for (const json& m : model["merges"]) {
            if (m.is_string()) {
                merges.push_back(m.get<std::string>());
            } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
                merges.push_back(replace_all(m[0].get<std::string>(), " ", "\xC4\xA0") + " " +
                                 replace_all(m[1].get<std::string>(), " ", "\xC4\xA0"));
            } else {
                throw Error(where + ": merges entries must be strings or pairs of strings");
            }
        }
    }

    MetadataList out;
    out.emplace_back("tokenizer.ggml.model", gguf::Value::of_string("gpt2"));
    out.emplace_back("tokenizer.ggml.pre", gguf::Value::of_string(pre));
    out.emplace_back("tokenizer.ggml.tokens", gguf::Value::of_strings(std::move(tokens)));
    out.emplace_back("tokenizer.ggml.token_type", gguf::Value::of_i32s(types));
    if (!merges.empty()) out.emplace_back("tokenizer.ggml.merges", gguf::Value::of_strings(std::move(merges)));

    // Special token ids: tokenizer_config's *_token strings (looked up among the added tokens)
    // first, then config.json's *_token_id; the first source to give a type wins.
    json tcfg = read_json(dir / "tokenizer_config.json", false);
    if (tcfg.is_object()) {
        if (!truthy_token(tcfg, "bos_token") && truthy_token(tcfg, "cls_token")) tcfg["bos_token"] = tcfg["cls_token"];
        if (!truthy_token(tcfg, "eos_token") && truthy_token(tcfg, "sep_token")) tcfg["eos_token"] = tcfg["sep_token"];
    }
    static const char* const kTypes[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    std::vector<std::pair<std::string, int64_t>> ids;  // insertion order
    std::vector<std::pair<std::string, bool>> add_flags;
    auto set_id = [&](const std::string& typ, int64_t id) {
        if (id < 0) throw Error(where + ": negative id for special token type " + typ);
        for (const auto& [t, v] : ids)
            if (t == typ) return;
        ids.emplace_back(typ, id);
    };
    const bool have_tcfg = tcfg.is_object() && !tcfg.empty();
    if (have_tcfg) {
        for (const char* typ : kTypes) {
            const std::string t = typ;
            if (tcfg.contains("add_" + t + "_token") && tcfg["add_" + t + "_token"].is_boolean())
                add_flags.emplace_back(t, tcfg["add_" + t + "_token"].get<bool>());
            const auto content = token_content(tcfg, t + "_token");
            if (!content) continue;
            const auto a = added_by_content.find(*content);
            if (a != added_by_content.end()) set_id(t, added[a->second].id);
        }
    }
    const json cfg = read_json(dir / "config.json", false);
    if (cfg.is_object()) {
        for (const char* typ : kTypes) {
            const std::string key = std::string(typ) + "_token_id";
            const json* v = cfg.contains(key) && !cfg[key].is_null() ? &cfg[key] : nullptr;
            if (v == nullptr && cfg.contains("text_config") && cfg["text_config"].is_object() && cfg["text_config"].contains(key))
                v = &cfg["text_config"][key];
            if (v != nullptr && v->is_number_integer()) set_id(typ, v->get<int64_t>());
        }
    }
    static const std::map<std::string, std::string> kIdKeys = {
        {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
        {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
        {"pad", "tokenizer.ggml.padding_token_id"}, {"mask", "tokenizer.ggml.mask_token_id"},
    };  // no key exists for cls: the converter skips it
    for (const auto& [typ, id] : ids) {
        const auto k = kIdKeys.find(typ);
        if (k == kIdKeys.end()) continue;
        if (id > static_cast<int64_t>(UINT32_MAX)) throw Error(where + ": special token id out of range");
        out.emplace_back(k->second, gguf::Value::of_u32(static_cast<uint32_t>(id)));
    }
    for (const auto& [typ, value] : add_flags)
        if (typ == "bos" || typ == "eos" || typ == "sep")
            out.emplace_back("tokenizer.ggml.add_" + typ + "_token", gguf::Value::of_bool(value));

    // Chat template: tokenizer_config.json's, else chat_template.jinja (with any named
    // additional_chat_templates/*.jinja) or chat_template.json.
    if (have_tcfg) {
        json tmpl;
        if (tcfg.contains("chat_template")) {
            tmpl = tcfg["chat_template"];
        } else if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
            const std::string text = read_text(dir / "chat_template.jinja");
            std::vector<fs::path> extra;
            if (fs::is_directory(dir / "additional_chat_templates", ec))
                for (const auto& e : fs::directory_iterator(dir / "additional_chat_templates", ec))
                    if (e.path().extension() == ".jinja") extra.push_back(e.path());
            std::sort(extra.begin(), extra.end());
            if (extra.empty()) {
                tmpl = text;
            } else {
                tmpl = json::array({json{{"name", "default"}, {"template", text}}});
                for (const auto& p : extra) tmpl.push_back(json{{"name", p.stem().string()}, {"template", read_text(p)}});
            }
        } else if (fs::is_regular_file(dir / "chat_template.json", ec)) {
            const json j = read_json(dir / "chat_template.json", true);
            if (j.is_object() && j.contains("chat_template")) tmpl = j["chat_template"];
        }
        if (tmpl.is_string()) {
            out.emplace_back("tokenizer.chat_template", gguf::Value::of_string(tmpl.get<std::string>()));
        } else if (tmpl.is_array()) {
            std::optional<std::string> default_template;
            std::vector<std::string> names;
            for (const json& choice : tmpl) {
                if (!choice.is_object() || !choice.contains("template") || !choice["template"].is_string()) continue;
                std::string name = choice.value("name", "");
                for (char& ch : name)
                    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                if (name.empty()) continue;
                if (name == "default") {
                    default_template = choice["template"].get<std::string>();
                } else {
                    out.emplace_back("tokenizer.chat_template." + name,
                                     gguf::Value::of_string(choice["template"].get<std::string>()));
                    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
                }
            }
            if (!names.empty()) out.emplace_back("tokenizer.chat_templates", gguf::Value::of_strings(names));
            if (default_template) out.emplace_back("tokenizer.chat_template", gguf::Value::of_string(*default_template));
        }
    }

    std::optional<bool> lowercase, strip_accents;
    parse_normalizer(tok.value("normalizer", json()), lowercase, strip_accents);
    if (lowercase) out.emplace_back("tokenizer.ggml.normalizer.lowercase", gguf::Value::of_bool(*lowercase));
    if (strip_accents) out.emplace_back("tokenizer.ggml.normalizer.strip_accents", gguf::Value::of_bool(*strip_accents));
    return out;
}

}  // namespace strata::convert
