#include "model_tools/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace strata::model_tools {

namespace {

using quant::Type;

const QuantMix kMixes[] = {
    {"f32", Type::F32, false, 0},
    {"f16", Type::F16, false, 1},
    {"bf16", Type::BF16, false, 32},
    {"q8_0", Type::Q8_0, false, 7},
    {"q4_0", Type::Q4_0, false, 2},
    {"q6_k", Type::Q6_K, false, 18},
    {"q5_k_m", Type::Q5_K, true, 17},
    {"q5_k_s", Type::Q5_K, false, 16},
    {"q4_k_m", Type::Q4_K, true, 15},
    {"q4_k_s", Type::Q4_K, false, 14},
    {"iq4_xs", Type::IQ4_XS, false, 30},
    {"iq4_nl", Type::IQ4_NL, false, 25},
    {"q4_1", Type::Q4_1, false, 3},
    {"q5_0", Type::Q5_0, false, 8},
    {"q5_1", Type::Q5_1, false, 9},
    // No quantiser of ours writes IQ3_XXS yet: the mix is for made models with --init blocks.
    {"iq3_xxs", Type::IQ3_XXS, true, 23},
};

bool ends_with(const std::string& s, const char* suffix) {
    const std::string x = suffix;
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Layer index of "blk.N.xxx", -1 otherwise.
int64_t layer_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    return std::strtoll(name.c_str() + 4, nullptr, 10);
}

// The layers where *_M mixes spend more bits: first and last eighth, every third in between.
bool more_bits_layer(int64_t il, int64_t n_layer) {
    return il < n_layer / 8 || il >= 7 * n_layer / 8 || (il - n_layer / 8) % 3 == 2;
}

Type fits(Type t, int64_t ne0) {
    auto ok = [&](Type x) { return ne0 % quant::type_info(x).block_elems == 0; };
    if (ok(t)) return t;
    Type fallback = Type::F16;
    switch (t) {
        case Type::Q4_K:
        case Type::IQ3_XXS:
        case Type::IQ4_XS: fallback = Type::IQ4_NL; break;
        case Type::Q5_K:
        case Type::Q6_K: fallback = Type::Q8_0; break;
        default: break;
    }
    return ok(fallback) ? fallback : Type::F16;
}

}  // namespace

std::optional<QuantMix> quant_mix_from_name(const std::string& name) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    for (const auto& m : kMixes)
        if (lower == m.name) return m;
    return std::nullopt;
}

std::vector<std::string> quant_mix_names() {
    std::vector<std::string> out;
    for (const auto& m : kMixes) out.push_back(m.name);
    return out;
}

Type tensor_type_for(const QuantMix& mix, const std::string& name, const std::vector<int64_t>& shape, int64_t n_layer,
                     bool tied_output, Type src_type) {
    std::vector<int64_t> s = shape;
    while (s.size() > 1 && s.back() == 1) s.pop_back();
    const bool keep = s.size() < 2 || !ends_with(name, ".weight") || contains(name, "_norm") || contains(name, "ffn_gate_inp") ||
                      contains(name, "ssm_conv1d");
    if (keep) return src_type;
    const int64_t ne0 = s[0];
    const bool float_mix = !quant::type_info(mix.base).quantized;
    const bool is_head = name == "output.weight" || (tied_output && name == "token_embd.weight");
    Type t = mix.base;
    if (!float_mix && mix.base != Type::Q8_0 && mix.base != Type::Q6_K && is_head) {
        t = Type::Q6_K;
    } else if (mix.more_bits_mid) {
        const int64_t il = layer_of(name);
        const bool sensitive = contains(name, "attn_v.weight") || contains(name, "ffn_down");
        if (sensitive && il >= 0 && more_bits_layer(il, n_layer)) t = Type::Q6_K;
    }
    return fits(t, ne0);
}

}  // namespace strata::model_tools
