#include "model/config_io.h"

#include <optional>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/architecture.h"
#include "model/names.h"

namespace strata::model {

namespace {

using IntField = int64_t ModelConfig::*;
using FloatField = float ModelConfig::*;
using FlagField = bool ModelConfig::*;
using SectionsField = std::array<int32_t, 4> ModelConfig::*;

double value_of(const ConfigKey& k, const ModelConfig& cfg) { return k.value != nullptr ? k.value(cfg) : 0.0; }

}  // namespace

void read_config_keys(std::span<const ConfigKey> keys, const gguf::File& f, ModelConfig& cfg) {
    for (const ConfigKey& k : keys) {
        if (k.need == ConfigKey::Need::Derived) continue;
        const std::string key = names::key(cfg.arch_name, k.name);
        const bool required = k.need == ConfigKey::Need::Required;
        if (const IntField* p = std::get_if<IntField>(&k.field)) {
            const std::optional<uint64_t> v = required ? std::optional<uint64_t>(f.get_u64(key)) : f.opt_u64(key);
            cfg.*(*p) = v ? static_cast<int64_t>(*v) : static_cast<int64_t>(value_of(k, cfg));
        } else if (const FloatField* p = std::get_if<FloatField>(&k.field)) {
            const std::optional<float> v = required ? std::optional<float>(f.get_f32(key)) : f.opt_f32(key);
            cfg.*(*p) = v ? *v : static_cast<float>(value_of(k, cfg));
        } else if (const FlagField* p = std::get_if<FlagField>(&k.field)) {
            const std::optional<bool> v = required ? std::optional<bool>(f.get_bool(key)) : f.opt_bool(key);
            cfg.*(*p) = v ? *v : value_of(k, cfg) != 0;
        } else if (const SectionsField* p = std::get_if<SectionsField>(&k.field)) {
            if (!required && !f.has(key)) continue;  // stays zeros: plain RoPE
            const auto s = f.get_ints(key);
            for (size_t i = 0; i < s.size() && i < (cfg.*(*p)).size(); ++i) (cfg.*(*p))[i] = static_cast<int32_t>(s[i]);
        }
    }
    for (const ConfigKey& k : keys)
        if (k.plus != nullptr)
            if (const IntField* p = std::get_if<IntField>(&k.field)) cfg.*(*p) -= cfg.*k.plus;
}

void write_config_keys(std::span<const ConfigKey> keys, const ModelConfig& cfg, gguf::Writer& w) {
    using gguf::Value;
    for (const ConfigKey& k : keys) {
        const std::string key = names::key(cfg.arch_name, k.name);
        const bool unless_default = k.write == ConfigKey::Write::UnlessDefault;
        if (k.need == ConfigKey::Need::Derived) {
            w.set(key, Value::of_u32(static_cast<uint32_t>(static_cast<int64_t>(value_of(k, cfg)))));
        } else if (const IntField* p = std::get_if<IntField>(&k.field)) {
            const int64_t v = cfg.*(*p);
            if (unless_default && v == static_cast<int64_t>(value_of(k, cfg))) continue;
            w.set(key, Value::of_u32(static_cast<uint32_t>(v + (k.plus != nullptr ? cfg.*k.plus : 0))));
        } else if (const FloatField* p = std::get_if<FloatField>(&k.field)) {
            if (unless_default && cfg.*(*p) == static_cast<float>(value_of(k, cfg))) continue;
            w.set(key, Value::of_f32(cfg.*(*p)));
        } else if (const FlagField* p = std::get_if<FlagField>(&k.field)) {
            if (unless_default && cfg.*(*p) == (value_of(k, cfg) != 0)) continue;
            w.set(key, Value::of_bool(cfg.*(*p)));
        } else if (const SectionsField* p = std::get_if<SectionsField>(&k.field)) {
            const std::array<int32_t, 4>& s = cfg.*(*p);
            if (unless_default && s == std::array<int32_t, 4>{}) continue;
            w.set(key, Value::of_i32s({s[0], s[1], s[2], s[3]}));
        }
    }
}

void write_config(const ModelConfig& cfg, gguf::Writer& w) {
    w.set(names::kGeneralArchitecture, gguf::Value::of_string(cfg.arch_name));
    write_config_keys(architecture_info(cfg.arch_name).keys, cfg, w);
}

}  // namespace strata::model
