#include "convert/general_meta.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "model/names.h"

namespace strata::convert {

namespace fs = std::filesystem;
namespace names = model::names;
using ojson = nlohmann::ordered_json;

void ParamCounts::add(const std::string& name, const std::vector<uint64_t>& shape) {
    int64_t size = 1;
    for (uint64_t d : shape) size *= static_cast<int64_t>(d);
    if (name.find("_exps.") != std::string::npos && shape.size() >= 3) {
        // ne[2] is the expert dimension of a weight, ne[1] of a bias.
        const bool bias = name.find(".bias") != std::string::npos;
        const int64_t n_exp = static_cast<int64_t>(shape[bias ? 1 : 2]);
        if (n_exp > 0) expert += size / n_exp;
        expert_sum += n_exp;
        ++n_expert_tensors;
    } else {
        shared += size;
    }
    total += size;
}

std::string rounded_count(int64_t n, int min_digits) {
    const double v = static_cast<double>(n);
    double scaled;
    char suffix;
    if (v > 1e12) scaled = v * 1e-12, suffix = 'T';
    else if (v > 1e9) scaled = v * 1e-9, suffix = 'B';
    else if (v > 1e6) scaled = v * 1e-6, suffix = 'M';
    else scaled = v * 1e-3, suffix = 'K';
    // Decimals so that at least min_digits significant digits show (the integer part, rounded
    // half to even, counted without leading zeros).
    std::string whole = std::to_string(static_cast<long long>(std::nearbyint(scaled)));
    whole.erase(0, whole.find_first_not_of('0') == std::string::npos ? whole.size() : whole.find_first_not_of('0'));
    const int decimals = std::max(min_digits - static_cast<int>(whole.size()), 0);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f%c", decimals, scaled, suffix);
    return buf;
}

std::string size_label(const ParamCounts& c) {
    if (c.expert_count() > 0)
        return std::to_string(c.expert_count()) + "x" + rounded_count(std::llabs(c.shared) + std::llabs(c.expert));
    return rounded_count(std::llabs(c.total));
}

namespace {

bool is_lower_word(const std::string& w) {  // has a cased letter and no upper-case one
    bool cased = false;
    for (unsigned char ch : w) {
        if (std::isupper(ch)) return false;
        if (std::islower(ch)) cased = true;
    }
    return cased;
}

std::string title_case(const std::string& w) {  // letters after a non-letter go upper case
    std::string out = w;
    bool prev_letter = false;
    for (char& ch : out) {
        const unsigned char u = static_cast<unsigned char>(ch);
        if (std::isalpha(u)) {
            ch = static_cast<char>(prev_letter ? std::tolower(u) : std::toupper(u));
            prev_letter = true;
        } else {
            prev_letter = false;
        }
    }
    return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    for (char ch : s) {
        if (ch == sep) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += ch;
        }
    }
    out.push_back(cur);
    return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
    return out;
}

bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

char lower(char ch) { return static_cast<char>(std::tolower(static_cast<unsigned char>(ch))); }

// Hand-written matchers for the converter's name patterns (whole-string, case-insensitive).
// A cursor over one word; each step consumes on success.
struct Cursor {
    const std::string& s;
    size_t i = 0;
    bool done() const { return i == s.size(); }
    bool lit(const char* word) {  // case-insensitive literal
        size_t j = 0;
        while (word[j] != 0 && i + j < s.size() && lower(s[i + j]) == word[j]) ++j;
        if (word[j] != 0) return false;
        i += j;
        return true;
    }
    bool digits() {  // one or more
        const size_t start = i;
        while (i < s.size() && is_digit(s[i])) ++i;
        return i > start;
    }
    bool one_of(const char* set) {
        if (i < s.size() && s[i] != 0 && std::strchr(set, lower(s[i])) != nullptr) {
            ++i;
            return true;
        }
        return false;
    }
};

bool equals_icase(const std::string& s, std::initializer_list<const char*> words) {
    for (const char* w : words) {
        Cursor c{s};
        if (c.lit(w) && c.done()) return true;
    }
    return false;
}

// (v|iter)?\d+(\.\d+)*
bool is_version(const std::string& s) {
    Cursor c{s};
    if (!c.lit("iter")) c.lit("v");
    if (!c.digits()) return false;
    while (!c.done()) {
        if (!c.lit(".") || !c.digits()) return false;
    }
    return true;
}

// i?q\d(_\w)* | b?fp?(16|32)
bool is_quant_type(const std::string& s) {
    {
        Cursor c{s};
        c.lit("i");
        if (c.lit("q") && c.i < s.size() && is_digit(s[c.i])) {
            ++c.i;
            bool ok = true;
            while (ok && !c.done()) {
                const bool word =
                    c.i + 1 < s.size() && (std::isalnum(static_cast<unsigned char>(s[c.i + 1])) || s[c.i + 1] == '_');
                if (s[c.i] == '_' && word) c.i += 2;
                else ok = false;
            }
            if (ok) return true;
        }
    }
    for (const char* prefix : {"bfp", "bf", "fp", "f"}) {
        Cursor c{s};
        if (c.lit(prefix) && (c.lit("16") || c.lit("32")) && c.done()) return true;
    }
    return false;
}

// (([A]|\d+x)?\d+([._]\d+)?[KMBT]\d? | small|mini|medium|large|x?xl)
bool is_size(const std::string& s) {
    if (equals_icase(s, {"small", "mini", "medium", "large", "xl", "xxl"})) return true;
    Cursor c{s};
    if (!c.lit("a")) {  // "8x7B": a count of experts times a size
        Cursor p{s};
        if (p.digits() && p.lit("x")) c.i = p.i;
    }
    if (!c.digits()) return false;
    {
        Cursor f{s, c.i};
        if (f.one_of("._") && f.digits()) c.i = f.i;
    }
    if (!c.one_of("kmbt")) return false;
    if (!c.done() && is_digit(s[c.i])) ++c.i;
    return c.done();
}

// ^(v\d+(\.\d+)*|\d.*)$
bool is_version_like(const std::string& w) {
    if (w.empty()) return false;
    if (is_digit(w[0])) return true;
    if (w[0] != 'v') return false;
    Cursor c{w, 1};
    if (!c.digits()) return false;
    while (!c.done())
        if (!c.lit(".") || !c.digits()) return false;
    return true;
}

}  // namespace

std::string id_to_title(const std::string& id) {
    std::string s = id;
    std::replace(s.begin(), s.end(), '-', ' ');
    std::istringstream words(s);
    std::vector<std::string> out;
    for (std::string w; words >> w;) out.push_back(is_lower_word(w) && !is_version_like(w) ? title_case(w) : w);
    return join(out, " ");
}

ModelIdParts model_id_parts(const std::string& id, int64_t total_params) {
    ModelIdParts r;
    if (id.empty()) return r;
    if (id.find(' ') != std::string::npos) {  // a human-written name, not an id
        r.full_name = id;
        return r;
    }
    std::string full = id;
    if (const size_t slash = id.find('/'); slash != std::string::npos) {
        r.organization = id.substr(0, slash);
        full = id.substr(slash + 1);
        if (!r.organization->empty() && (*r.organization)[0] == '.') r.organization.reset();  // "./model"
    }
    r.full_name = full;

    std::vector<std::string> parts;
    for (std::string& p : split(full, '-'))
        if (!p.empty()) parts.push_back(std::move(p));
    std::vector<std::set<std::string>> kinds(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
        std::string& part = parts[i];
        auto& k = kinds[i];
        if (is_version(part)) {
            k.insert("version");
        } else if (is_quant_type(part)) {
            k.insert("type");
            for (char& ch : part) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        } else if (i > 0 && is_size(part)) {
            std::replace(part.begin(), part.end(), '_', '.');
            if (is_digit(part.back()) && part.size() >= 2)  // "7b1" -> "7.1b"
                part = part.substr(0, part.size() - 2) + "." + part.back() + part[part.size() - 2];
            if (part.size() > 1 && is_digit(part[part.size() - 2]) && std::string("kmbt").find(part.back()) != std::string::npos)
                part.back() = static_cast<char>(std::toupper(static_cast<unsigned char>(part.back())));
            if (total_params != 0) {
                // A "size" far from the real parameter count is a context length ("128k").
                const std::string number = part.substr(0, part.size() - 1);
                char* end = nullptr;
                const double value = std::strtod(number.c_str(), &end);
                const bool parsed = !number.empty() && end == number.c_str() + number.size() &&
                                    number.find_first_not_of("0123456789.+-eE") == std::string::npos;
                if (parsed) {
                    const auto scale_pos = std::string(" KMBT").find(part.back());
                    const double scale = std::pow(1000.0, scale_pos == std::string::npos ? -1.0 : static_cast<double>(scale_pos));
                    const double label = value * scale;
                    const double total = static_cast<double>(total_params);
                    const bool context_length =
                        (total_params < 0 && label < static_cast<double>(std::llabs(total_params) / 8)) ||
                        (total_params > 0 && std::abs(label - total) > static_cast<double>(7 * total_params / 8));
                    if (context_length) {
                        k.insert("finetune");
                        part.back() = static_cast<char>(std::tolower(static_cast<unsigned char>(part.back())));
                    }
                }
            }
            if (k.empty()) k.insert("size_label");
        } else if (i > 0 && equals_icase(part, {"chat", "instruct", "vision", "lora"})) {
            std::string lower = part;
            for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            k.insert(total_params < 0 && lower == "lora" ? "type" : "finetune");
        }
    }
    // A numeric size label makes word sizes ("large") ordinary words.
    bool numeric_size = false;
    for (size_t i = 0; i < parts.size(); ++i)
        if (kinds[i].count("size_label") && std::any_of(parts[i].begin(), parts[i].end(), is_digit)) numeric_size = true;
    if (numeric_size)
        for (size_t i = 0; i < parts.size(); ++i)
            if (kinds[i].count("size_label") && std::all_of(parts[i].begin(), parts[i].end(),
                                                            [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); }))
                kinds[i].erase("size_label");
    // The basename: leading plain words and versions.
    bool at_start = true;
    for (size_t i = 0; i < parts.size(); ++i) {
        auto& k = kinds[i];
        if (at_start && ((k.empty() && std::isalpha(static_cast<unsigned char>(parts[i][0]))) || k.count("version"))) {
            k.insert("basename");
        } else {
            at_start = false;
            if (k.empty()) k.insert("finetune");
        }
    }
    for (size_t i = parts.size(); i-- > 0;) {  // a trailing version is not part of the basename
        if (kinds[i].count("basename") && kinds[i].size() > 1) kinds[i].erase("basename");
        else break;
    }
    std::vector<std::string> base, sizes, finetunes, versions;
    for (size_t i = 0; i < parts.size(); ++i) {
        const auto& k = kinds[i];
        if (k.count("basename")) base.push_back(parts[i]);
        if (k.count("size_label") && std::find(sizes.begin(), sizes.end(), parts[i]) == sizes.end()) sizes.push_back(parts[i]);
        if (k.count("finetune")) finetunes.push_back(parts[i]);
        if (k.count("version") && !k.count("basename")) versions.push_back(parts[i]);
    }
    auto opt = [](const std::vector<std::string>& v) -> std::optional<std::string> {
        if (v.empty()) return std::nullopt;
        return join(v, "-");
    };
    r.basename = opt(base);
    r.size_label = opt(sizes);
    r.finetune = opt(finetunes);
    r.version = opt(versions);
    if (!r.size_label && !r.finetune && !r.version) r.basename.reset();  // too ambiguous
    return r;
}

namespace {

// The model card's YAML front matter, reduced to what is read here: top-level scalars and lists
// of scalars ("key: value", "key: [a, b]", "key:" followed by "- item" lines).
struct ModelCard {
    std::map<std::string, std::string> scalars;
    std::map<std::string, std::vector<std::string>> lists;
};

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::string unquote(std::string s) {
    s = trim(s);
    if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) return s.substr(1, s.size() - 2);
    return s;
}

ModelCard read_model_card(const fs::path& dir) {
    ModelCard card;
    std::ifstream in(dir / "README.md");
    if (!in) return card;
    std::string line;
    if (!std::getline(in, line) || trim(line) != "---") return card;
    std::string list_key;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line == "---") break;
        std::replace(line.begin(), line.end(), '\t', ' ');
        const size_t colon = line.find(':');
        const bool is_key = !line.empty() && line[0] != ' ' && colon != std::string::npos && colon > 0 &&
                            std::all_of(line.begin(), line.begin() + static_cast<long>(colon), [](char ch) {
                                return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
                            });
        if (is_key) {
            const std::string key = line.substr(0, colon), value = trim(line.substr(colon + 1));
            list_key.clear();
            if (value.empty()) {
                list_key = key;
            } else if (value.front() == '[' && value.back() == ']') {
                auto& items = card.lists[key];
                for (const std::string& item : split(value.substr(1, value.size() - 2), ','))
                    if (!trim(item).empty()) items.push_back(unquote(item));
            } else {
                card.scalars[key] = unquote(value);
            }
            continue;
        }
        const std::string t = trim(line);
        if (!list_key.empty() && t.size() >= 2 && t[0] == '-' && t[1] == ' ')
            card.lists[list_key].push_back(unquote(t.substr(2)));
    }
    return card;
}

struct Authorship {
    std::map<std::string, std::string> field;  // name, author, version, organization, ...
    std::vector<std::string> tags, languages;
    std::vector<std::map<std::string, std::string>> base_models, datasets;
    std::optional<std::string> license;
};

// A base model or dataset given as a Hugging Face id or URL.
std::map<std::string, std::string> source_entry(const std::string& id, int64_t total_params) {
    std::map<std::string, std::string> e;
    std::string hf_id = id;
    const bool url = id.starts_with("http://") || id.starts_with("https://") || id.starts_with("ssh://");
    if (url) {
        e["repo_url"] = id;
        // https://huggingface.co/ORG/NAME: the id is ORG/NAME.
        const std::string rest = id.substr(id.find("://") + 3);
        static const std::string kHost = "huggingface.co/";
        if (!rest.starts_with(kHost)) return e;
        hf_id = rest.substr(kHost.size());
        const size_t slash = hf_id.find('/');
        if (slash == std::string::npos || slash == 0 || slash + 1 == hf_id.size() ||
            hf_id.find('/', slash + 1) != std::string::npos)
            return e;
    }
    const ModelIdParts p = model_id_parts(hf_id, total_params);
    if (p.full_name) e["name"] = id_to_title(*p.full_name);
    if (p.organization) e["organization"] = id_to_title(*p.organization);
    if (p.version) e["version"] = *p.version;
    if (!url && p.organization && p.full_name) e["repo_url"] = "https://huggingface.co/" + *p.organization + "/" + *p.full_name;
    return e;
}

}  // namespace

MetadataList general_metadata(const fs::path& dir, const ojson& config, const ParamCounts& counts) {
    MetadataList out;
    // Recommended sampling from generation_config.json (unreadable files are ignored).
    ojson gen;
    {
        std::ifstream in(dir / "generation_config.json");
        if (in) {
            try {
                gen = ojson::parse(in);
            } catch (const nlohmann::json::exception&) {
                gen = ojson();
            }
        }
    }
    if (gen.is_object()) {
        struct Sampling {
            const char* hf_key;
            const char* gguf_key;
            char kind;  // 's' string, 'i' i32, 'f' f32
        };
        static const Sampling kSampling[] = {
            {"sequence", names::kSamplingSequence, 's'},
            {"top_k", names::kSamplingTopK, 'i'},
            {"top_p", names::kSamplingTopP, 'f'},
            {"min_p", names::kSamplingMinP, 'f'},
            {"xtc_probability", names::kSamplingXtcProbability, 'f'},
            {"xtc_threshold", names::kSamplingXtcThreshold, 'f'},
            {"temperature", names::kSamplingTemp, 'f'},
            {"penalty_last_n", names::kSamplingPenaltyLastN, 'i'},
            {"penalty_repeat", names::kSamplingPenaltyRepeat, 'f'},
            {"mirostat", names::kSamplingMirostat, 'i'},
            {"mirostat_tau", names::kSamplingMirostatTau, 'f'},
            {"mirostat_eta", names::kSamplingMirostatEta, 'f'},
        };
        for (const Sampling& s : kSampling) {
            const auto it = gen.find(s.hf_key);
            if (it == gen.end() || it->is_null()) continue;
            if (s.kind == 's' && it->is_string()) out.emplace_back(s.gguf_key, gguf::Value::of_string(it->get<std::string>()));
            if (s.kind == 'i' && it->is_number())
                out.emplace_back(s.gguf_key, gguf::Value::of_i32(static_cast<int32_t>(it->get<double>())));
            if (s.kind == 'f' && it->is_number())
                out.emplace_back(s.gguf_key, gguf::Value::of_f32(static_cast<float>(it->get<double>())));
        }
    }

    // Authorship: model card, then config.json's _name_or_path, then the directory name; each
    // source only fills what is still unset.
    Authorship a;
    const ModelCard card = read_model_card(dir);
    auto from_card = [&](const char* field, const char* card_key) {
        const auto it = card.scalars.find(card_key);
        if (it != card.scalars.end() && !a.field.count(field)) a.field[field] = it->second;
    };
    for (const char* prefix : {"", "model_"}) {
        for (const char* f : {"name", "author", "version", "organization", "description", "finetune", "basename", "size_label"})
            from_card(f, (std::string(prefix) + f).c_str());
        from_card("source_url", (std::string(prefix) + "url").c_str());
        from_card("source_doi", (std::string(prefix) + "doi").c_str());
        from_card("source_uuid", (std::string(prefix) + "uuid").c_str());
        from_card("source_repo_url", (std::string(prefix) + "repo_url").c_str());
    }
    from_card("author", "model_creator");
    from_card("basename", "model_type");
    auto card_list = [&](const char* key) {
        std::vector<std::string> v;
        if (const auto it = card.lists.find(key); it != card.lists.end()) v = it->second;
        else if (const auto s = card.scalars.find(key); s != card.scalars.end()) v.push_back(s->second);
        return v;
    };
    const bool has_base = card.lists.count("base_model") || card.scalars.count("base_model") || card.lists.count("base_models") ||
                          card.scalars.count("base_models") || card.lists.count("base_model_sources") ||
                          card.scalars.count("base_model_sources");
    if (has_base) {
        auto ids = card_list("base_model");
        if (ids.empty()) ids = card_list("base_models");
        if (ids.empty()) ids = card_list("base_model_sources");
        for (const auto& id : ids) a.base_models.push_back(source_entry(id, counts.total));
    }
    const bool has_datasets = card.lists.count("datasets") || card.scalars.count("datasets") || card.lists.count("dataset") ||
                              card.scalars.count("dataset") || card.lists.count("dataset_sources") ||
                              card.scalars.count("dataset_sources");
    if (has_datasets) {
        auto ids = card_list("datasets");
        if (ids.empty()) ids = card_list("dataset");
        if (ids.empty()) ids = card_list("dataset_sources");
        for (const auto& id : ids) a.datasets.push_back(source_entry(id, counts.total));
    }
    if (const auto lic = card_list("license"); !lic.empty()) a.license = join(lic, ",");
    from_card("license_name", "license_name");
    from_card("license_link", "license_link");
    for (const char* k : {"tags", "pipeline_tag"})
        for (const auto& t : card_list(k)) a.tags.push_back(t);
    for (const char* k : {"languages", "language"})
        for (const auto& t : card_list(k)) a.languages.push_back(t);

    auto from_id = [&](const std::string& id) {
        const ModelIdParts p = model_id_parts(id, counts.total);
        auto fill = [&](const char* f, const std::optional<std::string>& v) {
            if (v && !a.field.count(f)) a.field[f] = *v;
        };
        if (p.full_name && !a.field.count("name")) a.field["name"] = id_to_title(*p.full_name);
        if (p.organization && !a.field.count("organization")) a.field["organization"] = id_to_title(*p.organization);
        fill("basename", p.basename);
        fill("finetune", p.finetune);
        fill("version", p.version);
        fill("size_label", p.size_label);
    };
    if (const auto it = config.find("_name_or_path"); it != config.end() && it->is_string()) {
        const std::string id = it->get<std::string>();
        if (std::count(id.begin(), id.end(), '/') <= 1) from_id(id);
    }
    fs::path dir_name = dir;
    if (dir_name.filename().empty()) dir_name = dir_name.parent_path();  // "dir/"
    from_id(fs::absolute(dir_name).lexically_normal().filename().string());
    if (!a.field.count("name")) a.field["name"] = "model";
    if (!a.field.count("size_label") && counts.total > 0) a.field["size_label"] = size_label(counts);

    auto put = [&](const char* field, const char* key) {
        if (const auto it = a.field.find(field); it != a.field.end()) out.emplace_back(key, gguf::Value::of_string(it->second));
    };
    put("name", names::kGeneralName);
    put("author", names::kGeneralAuthor);
    put("version", names::kGeneralVersion);
    put("organization", names::kGeneralOrganization);
    put("finetune", names::kGeneralFinetune);
    put("basename", names::kGeneralBasename);
    put("description", names::kGeneralDescription);
    put("quantized_by", names::kGeneralQuantizedBy);
    put("size_label", names::kGeneralSizeLabel);
    if (a.license) out.emplace_back(names::kGeneralLicense, gguf::Value::of_string(*a.license));
    put("license_name", names::kGeneralLicenseName);
    put("license_link", names::kGeneralLicenseLink);
    put("source_url", names::kGeneralSourceUrl);
    put("source_doi", names::kGeneralSourceDoi);
    put("source_uuid", names::kGeneralSourceUuid);
    put("source_repo_url", names::kGeneralSourceRepoUrl);
    auto put_sources = [&](const std::vector<std::map<std::string, std::string>>& list, const std::string& prefix) {
        if (list.empty()) return;
        out.emplace_back(prefix + ".count", gguf::Value::of_u32(static_cast<uint32_t>(list.size())));
        for (size_t i = 0; i < list.size(); ++i)
            for (const char* f : {"name", "author", "version", "organization", "description", "url", "doi", "uuid", "repo_url"})
                if (const auto it = list[i].find(f); it != list[i].end())
                    out.emplace_back(prefix + "." + std::to_string(i) + "." + f, gguf::Value::of_string(it->second));
    };
    put_sources(a.base_models, names::kGeneralBaseModel);
    put_sources(a.datasets, names::kGeneralDataset);
    if (!a.tags.empty()) out.emplace_back(names::kGeneralTags, gguf::Value::of_strings(a.tags));
    if (!a.languages.empty()) out.emplace_back(names::kGeneralLanguages, gguf::Value::of_strings(a.languages));
    return out;
}

}  // namespace strata::convert
