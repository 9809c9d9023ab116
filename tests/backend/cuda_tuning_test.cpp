// The CUDA backend's tuning table (src/cuda/cuda_tuning.h): how each kind of knob reads its
// variable, and that every knob is documented. Plain C++: runs in every build, GPU or not.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "cuda/cuda_tuning.h"
#include "util/error.h"

namespace strata::cuda {
namespace {

CudaTuning tuning_with(const std::map<std::string, std::string>& env) {
    return tuning_from([&](const char* variable) -> const char* {
        const auto it = env.find(variable);
        return it != env.end() ? it->second.c_str() : nullptr;
    });
}

TEST(CudaTuning, UnsetVariablesKeepTheDefaults) {
    const CudaTuning t = tuning_with({});
    EXPECT_TRUE(t.graphs);
    EXPECT_EQ(t.graph_max_tokens, 32);
    EXPECT_FALSE(t.times);
    EXPECT_TRUE(t.dependent_launch);
    EXPECT_TRUE(t.int8_products);
    EXPECT_FALSE(t.f32_kv);
    EXPECT_TRUE(t.weight_prefetch);
    EXPECT_TRUE(t.gemv_stage);
    EXPECT_EQ(t.moe_pair_major, -1);
    EXPECT_EQ(t.attention_octet_min, 48);
    EXPECT_EQ(t.attention_split_min, 4);
    EXPECT_EQ(t.moe_gate_rows, 0);
    EXPECT_EQ(t.moe_down_rows, 0);
    EXPECT_EQ(t.gemv_rows, 0);
    EXPECT_EQ(t.gemv_warps, 1);
    const CudaTuning empty = tuning_with({{"STRATA_CUDA_ATTN_SPLIT_MIN", ""}, {"STRATA_CUDA_GEMV_WARPS", ""}});
    EXPECT_EQ(empty.attention_split_min, 4);
    EXPECT_EQ(empty.gemv_warps, 1);
}

// As the factory always read them: "0" or "1" sets a switch, any other value leaves it.
TEST(CudaTuning, SwitchesReadZeroOrOneAndIgnoreTheRest) {
    const CudaTuning t = tuning_with({{"STRATA_CUDA_GRAPHS", "0"},
                                      {"STRATA_CUDA_TIMES", "1"},
                                      {"STRATA_CUDA_KV_F32", "1"},
                                      {"STRATA_CUDA_PDL", "false"},
                                      {"STRATA_CUDA_Q8", "00"},
                                      {"STRATA_CUDA_MOE_PAIR_MAJOR", "1"}});
    EXPECT_FALSE(t.graphs);
    EXPECT_TRUE(t.times);
    EXPECT_TRUE(t.f32_kv);
    EXPECT_TRUE(t.dependent_launch);
    EXPECT_TRUE(t.int8_products);
    EXPECT_EQ(t.moe_pair_major, 1);
    EXPECT_EQ(tuning_with({{"STRATA_CUDA_MOE_PAIR_MAJOR", "0"}}).moe_pair_major, 0);
    EXPECT_EQ(tuning_with({{"STRATA_CUDA_MOE_PAIR_MAJOR", "2"}}).moe_pair_major, -1);
}

TEST(CudaTuning, CountsAreCheckedAndNamed) {
    const CudaTuning t = tuning_with({{"STRATA_CUDA_ATTN_OCTET_MIN", "0"},
                                      {"STRATA_CUDA_GRAPH_MAX_TOKENS", "8"},
                                      {"STRATA_CUDA_ATTN_SPLIT_MIN", "16"},
                                      {"STRATA_CUDA_MOE_GATE_ROWS", "2"},
                                      {"STRATA_CUDA_GEMV_ROWS", "4"},
                                      {"STRATA_CUDA_GEMV_WARPS", "2"}});
    EXPECT_EQ(t.attention_octet_min, 0);
    EXPECT_EQ(t.graph_max_tokens, 8);
    EXPECT_EQ(t.attention_split_min, 16);
    EXPECT_EQ(t.moe_gate_rows, 2);
    EXPECT_EQ(t.gemv_rows, 4);
    EXPECT_EQ(t.gemv_warps, 2);
    EXPECT_EQ(tuning_with({{"STRATA_CUDA_ATTN_OCTET_MIN", "1000000000"}}).attention_octet_min, 1000000000);
    for (const auto& [variable, value] : std::map<std::string, std::string>{{"STRATA_CUDA_ATTN_OCTET_MIN", "-1"},
                                                                            {"STRATA_CUDA_GRAPH_MAX_TOKENS", "8x"},
                                                                            {"STRATA_CUDA_ATTN_SPLIT_MIN", "0"},
                                                                            {"STRATA_CUDA_MOE_DOWN_ROWS", "3"},
                                                                            {"STRATA_CUDA_GEMV_ROWS", "8"},
                                                                            {"STRATA_CUDA_GEMV_WARPS", "0"}}) {
        try {
            tuning_with({{variable, value}});
            ADD_FAILURE() << variable << "=" << value << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(variable + "=" + value), std::string::npos) << e.what();
        }
    }
}

// One row a knob, each variable once, and each named in docs/cuda.md.
TEST(CudaTuning, EveryKnobHasItsOwnVariableAndIsDocumented) {
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/docs/cuda.md");
    ASSERT_TRUE(in) << "docs/cuda.md";
    std::stringstream doc;
    doc << in.rdbuf();
    std::set<std::string> variables, fields;
    for (const TuningKnob& k : tuning_knobs()) {
        EXPECT_TRUE(variables.insert(k.variable).second) << k.variable << " twice";
        EXPECT_TRUE(fields.insert(k.field).second) << k.field << " twice";
        EXPECT_EQ(std::string(k.variable).rfind("STRATA_CUDA_", 0), 0u) << k.variable;
        EXPECT_NE(doc.str().find(std::string("`") + k.variable + "`"), std::string::npos)
            << k.variable << " is not in docs/cuda.md";
    }
}

}  // namespace
}  // namespace strata::cuda
