// Helpers for the chat-template tests: the committed fixtures under tests/template and a
// readable report of where two renderings first differ.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace strata::test {

inline std::filesystem::path template_dir() { return std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "template"; }

inline std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Files in `dir` ending in `suffix`, sorted by name.
inline std::vector<std::filesystem::path> files_with_suffix(const std::filesystem::path& dir, const std::string& suffix) {
    std::vector<std::filesystem::path> out;
    if (!std::filesystem::exists(dir)) return out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
            out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

// Control characters made visible so a diff of prompts can be read.
inline std::string visible(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else out += c;
    }
    return out;
}

// "" when equal, else the first differing byte with its line and some context of each side.
inline std::string first_difference(const std::string& want, const std::string& got) {
    if (want == got) return "";
    size_t k = 0;
    while (k < want.size() && k < got.size() && want[k] == got[k]) ++k;
    const size_t line = 1 + static_cast<size_t>(std::count(want.begin(), want.begin() + static_cast<long>(k), '\n'));
    const size_t from = k > 60 ? k - 60 : 0;
    std::ostringstream os;
    os << "first difference at byte " << k << " (line " << line << "); lengths " << want.size() << " (want) vs " << got.size()
       << " (got)\n"
       << "  want: ..." << visible(want.substr(from, 120)) << "\n"
       << "  got:  ..." << visible(got.substr(from, 120)) << "\n"
       << "  " << std::string(11 + visible(want.substr(from, k - from)).size(), ' ') << "^";
    return os.str();
}

}  // namespace strata::test
