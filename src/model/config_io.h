// An architecture's GGUF metadata keys as a table, and the one routine that reads a ModelConfig
// from them (Model::load) and the one that writes a ModelConfig as them (make-model). Each
// architecture declares its table once, in its own file (qwen3moe.cpp, ...): which "{arch}.*"
// keys it has, in the order they are written, the ModelConfig field each fills, whether a file
// must have it and what it stands for when missing. Reading and writing go through the same
// entries, so the two cannot drift apart.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <variant>

#include "model/config.h"

namespace strata::gguf {
class File;
class Writer;
}  // namespace strata::gguf

namespace strata::model {

// One "{arch}.{name}" key. Integer fields are u32 in the file (any integer type is read), float
// fields f32, flags bool, the RoPE sections an i32 array.
struct ConfigKey {
    using Field = std::variant<std::monostate, int64_t ModelConfig::*, float ModelConfig::*, bool ModelConfig::*,
                               std::array<int32_t, 4> ModelConfig::*>;
    // An optional key's value when the file has none, from the fields read before it (table
    // order); a derived key's written value. Array fields default to zeros.
    using Value = double (*)(const ModelConfig&);

    enum class Need : uint8_t {
        Required,  // a file without it is refused
        Optional,  // missing: `value`
        Derived,   // written only, as `value`: what other tools expect there; never read
    };
    enum class Write : uint8_t {
        Always,
        UnlessDefault,  // left out while the field holds its default (as the converter leaves it out)
    };

    const char* name;  // relative to "{arch}." (names.h)
    Field field;
    Need need = Need::Required;
    Value value = nullptr;
    Write write = Write::Always;
    // The key holds field + this field (block_count counts the MTP blocks after the trunk);
    // subtracted once every key is read. (A named member-pointer type: nvcc's host code writes
    // a bare `int64_t ModelConfig::*x` back with parentheses, which -Wparentheses rejects.)
    using IntMember = int64_t ModelConfig::*;
    IntMember plus = nullptr;
};

constexpr ConfigKey required_key(const char* name, ConfigKey::Field field, ConfigKey::IntMember plus = nullptr) {
    return {name, field, ConfigKey::Need::Required, nullptr, ConfigKey::Write::Always, plus};
}
constexpr ConfigKey optional_key(const char* name, ConfigKey::Field field, ConfigKey::Value when_missing,
                                 ConfigKey::Write write = ConfigKey::Write::Always) {
    return {name, field, ConfigKey::Need::Optional, when_missing, write, nullptr};
}
constexpr ConfigKey derived_key(const char* name, ConfigKey::Value value) {
    return {name, std::monostate{}, ConfigKey::Need::Derived, value, ConfigKey::Write::Always, nullptr};
}

// Defaults the architectures share (the ecosystem's loader assumes the same).
namespace key_defaults {
inline double zero(const ModelConfig&) { return 0; }
inline double yes(const ModelConfig&) { return 1; }
inline double rope_theta(const ModelConfig&) { return 10000.0; }
inline double kv_heads(const ModelConfig& c) { return static_cast<double>(c.n_head); }  // no grouping
inline double head_dim(const ModelConfig& c) { return c.n_head > 0 ? static_cast<double>(c.n_embd / c.n_head) : 0; }
inline double value_dim(const ModelConfig& c) { return static_cast<double>(c.head_dim_k); }
inline double n_rot(const ModelConfig& c) { return static_cast<double>(c.head_dim_k); }  // RoPE over the whole head
}  // namespace key_defaults

// Fills cfg's fields from f's "{cfg.arch_name}.*" keys of the table. Throws strata::Error
// ("PATH: metadata key '...' is missing", or has the wrong type).
void read_config_keys(std::span<const ConfigKey> keys, const gguf::File& f, ModelConfig& cfg);
// Writes the table's keys from cfg, in table order.
void write_config_keys(std::span<const ConfigKey> keys, const ModelConfig& cfg, gguf::Writer& w);

// general.architecture, then the architecture's keys (its table, found by cfg.arch_name).
void write_config(const ModelConfig& cfg, gguf::Writer& w);

}  // namespace strata::model
