// The general.* metadata of a converted model, derived the way the ecosystem converter derives
// it: recommended sampling settings from generation_config.json; name, organization, basename,
// finetune, version and size label from the model card (README.md front matter), config.json's
// _name_or_path, and the directory name; licence, tags, languages, base models and datasets from
// the model card; a size label such as "128x3.3B" counted from the written tensors otherwise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "convert/tokenizer_meta.h"  // MetadataList

namespace strata::convert {

// Parameter counts over the written tensors. Expert tensors are the 3-D "*_exps.*" ones.
struct ParamCounts {
    int64_t total = 0;
    int64_t shared = 0;      // everything outside expert tensors
    int64_t expert = 0;      // one expert's share of the expert tensors
    int64_t expert_sum = 0;  // sum over expert tensors of their expert count
    int64_t n_expert_tensors = 0;

    // Adds one tensor (GGUF name, shape ne0 first).
    void add(const std::string& name, const std::vector<uint64_t>& shape);
    int64_t expert_count() const { return n_expert_tensors > 0 ? expert_sum / n_expert_tensors : 0; }
};

// "4.9M", "30B", "128x3.3B".
std::string rounded_count(int64_t n, int min_digits = 2);
std::string size_label(const ParamCounts& c);

// "qwen3-next-80b" -> "Qwen3 Next 80b": words title-cased unless they look like versions.
std::string id_to_title(const std::string& id);

// Splits a model id such as "Qwen/Qwen3-30B-A3B-Instruct-2507" into its parts.
struct ModelIdParts {
    std::optional<std::string> full_name, organization, basename, finetune, version, size_label;
};
ModelIdParts model_id_parts(const std::string& id, int64_t total_params);

// The general.* keys that follow general.type, in the converter's order.
MetadataList general_metadata(const std::filesystem::path& dir, const nlohmann::ordered_json& config, const ParamCounts& counts);

}  // namespace strata::convert
