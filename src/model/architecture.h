// The architecture table and what one architecture file declares (qwen3moe.cpp, ...), all of it
// in that file: its GGUF metadata keys (a ConfigKey table, config_io.h), what follows from them
// (its layer-kind rule, fixed traits), its checks, its make-model presets, and the
// implementation that binds its tensors and runs its forward. Shared blocks (attention, MoE,
// dense FFN) live in blocks.h, Gated DeltaNet in gated_delta_net.h.
//
// Adding an architecture: its file (an ArchitectureInfo and its Architecture), its line in the
// table (architecture.cpp), its name in names.h and an Arch value (config.h).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/config_io.h"
#include "model/model.h"
#include "model/scratch.h"

namespace strata::model {

// Looks tensors up by name and checks them: present (unless optional), the expected shape
// (ne0 first, as GGUF lists it), a type the backend it binds for can compute with.
//
// Without a file it records instead: every tensor an architecture asks for, with its shape, so
// the model maker writes exactly the tensors the loader will bind (Weights it returns have no
// data).
class WeightBinder {
public:
    struct Spec {
        std::string name;
        std::vector<int64_t> shape;  // ne0 first
        bool required;
    };
    // Binds tensors of `file` for `backend` (which must support each matrix's type).
    WeightBinder(const gguf::File& file, const backend::Backend& backend) : file_(&file), backend_(&backend) {}
    WeightBinder() = default;  // recording
    Weight require(const std::string& name, std::vector<int64_t> shape);
    Weight optional(const std::string& name, std::vector<int64_t> shape);
    uint64_t bound_bytes() const { return bytes_; }
    const std::vector<Weight>& bound() const { return bound_; }  // every tensor bound, once each
    const std::vector<Spec>& recorded() const { return specs_; }

private:
    Weight bind(const std::string& name, const std::vector<int64_t>& shape, bool required);
    const gguf::File* file_ = nullptr;
    const backend::Backend* backend_ = nullptr;
    uint64_t bytes_ = 0;
    std::vector<Spec> specs_;
    std::vector<Weight> bound_;
};

// Everything a forward call needs, shared by the blocks.
struct ForwardPass {
    backend::Backend* be = nullptr;
    const ModelConfig* cfg = nullptr;
    const Batch* batch = nullptr;
    std::span<SequenceState* const> seqs;
    int64_t n_tokens = 0;
    // Per attention layer: the KV cache view of each token's sequence, [n_tokens].
    std::vector<const backend::KvCacheView*> kv_of_token;
    // Runs of consecutive tokens of one sequence: [begin, end) and the sequence index.
    struct Run {
        int64_t begin, end;
        int32_t seq;
    };
    std::vector<Run> runs;

    // Scratch in backend memory, kept by the Model across calls (a decode step must not
    // allocate): each block takes its buffers through a Scratch of its own (scratch.h).
    ScratchArena* arena = nullptr;
    // The expert store whose placements the MoE blocks pass to the backend (null: none).
    const experts::ExpertStore* experts = nullptr;

    void set_layer_kv(int64_t layer);  // fills kv_of_token for one attention layer
};

// One architecture's weights and forward, for one loaded model.
class Architecture {
public:
    virtual ~Architecture() = default;
    virtual void bind(const ModelConfig& cfg, WeightBinder& b) = 0;
    // hidden [n_tokens][n_embd] is the embedded input; on return it holds the final hidden
    // states before the output norm.
    virtual void forward(ForwardPass& fp, float* hidden) = 0;
    // The output head: norm weight and projection (token_embd when tied).
    virtual const Weight& output_norm() const = 0;
    virtual const Weight& output() const = 0;
    virtual const Weight& token_embd() const = 0;
};

// A make-model geometry.
struct ModelPreset {
    const char* name;  // "tiny", "30b-a3b"
    const char* what;  // "Qwen3-30B-A3B geometry"
    ModelConfig cfg;   // the sizes; make-model fills in the architecture, vocabulary and layer kinds
};

// Everything the rest of the program knows of an architecture, declared in its file.
struct ArchitectureInfo {
    const char* name;  // general.architecture (names.h)
    Arch arch;
    std::span<const ConfigKey> keys;  // its "{arch}.*" keys, in writing order
    // What follows from the keys: cfg.layers by the architecture's layer-kind rule, and its fixed
    // traits (attn_output_gate). The loader runs it after reading the keys, make-model on a
    // preset, the converter to learn which layers are attention.
    void (*complete)(ModelConfig& cfg);
    // Throws strata::Error("<where>: <what>") for a configuration its forward cannot run.
    void (*check)(const ModelConfig& cfg, const std::string& where);
    std::span<const ModelPreset> presets;  // the first is "tiny", the test model
    std::unique_ptr<Architecture> (*make)();
};

// The table, in a fixed order (make-model --help lists presets in it).
std::span<const ArchitectureInfo* const> architectures();
// general.architecture -> its entry. Throws strata::Error listing the supported names.
const ArchitectureInfo& architecture_info(const std::string& name);
std::unique_ptr<Architecture> make_architecture(const std::string& name);

// The configuration of a file: its architecture's keys, the vocabulary (rows of token_embd),
// checked and completed. Throws strata::Error naming the file and the key.
ModelConfig read_config(const gguf::File& f);

// Checks every architecture shares (layer count, widths, heads, RoPE, norm epsilon; with `moe`
// the expert counts and width), as ArchitectureInfo::check.
void check_common_config(const ModelConfig& cfg, const std::string& where, bool moe);

}  // namespace strata::model
