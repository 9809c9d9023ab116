// What one architecture file provides: read its hyper-parameters, bind its tensors, run its
// forward. Shared blocks (attention, MoE, Gated DeltaNet) live in blocks.h; the name table of
// architectures is in architecture.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/model.h"

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

    // Scratch in backend memory, grown as needed and kept by the Model across calls (a decode
    // step must not allocate). Slots: blocks 0..15, architectures 16..31, Gated DeltaNet 32..47,
    // Model::forward 48 and up.
    backend::Buffer& scratch(size_t slot, size_t n_floats);
    std::vector<backend::Buffer>* buffers = nullptr;

    void set_layer_kv(int64_t layer);  // fills kv_of_token for one attention layer
};

class Architecture {
public:
    virtual ~Architecture() = default;
    virtual void load_config(const gguf::File& f, ModelConfig& cfg) = 0;
    virtual void bind(const ModelConfig& cfg, WeightBinder& b) = 0;
    // hidden [n_tokens][n_embd] is the embedded input; on return it holds the final hidden
    // states before the output norm.
    virtual void forward(ForwardPass& fp, float* hidden) = 0;
    // The output head: norm weight and projection (token_embd when tied).
    virtual const Weight& output_norm() const = 0;
    virtual const Weight& output() const = 0;
    virtual const Weight& token_embd() const = 0;
};

// The central table: general.architecture -> implementation. Throws strata::Error listing the
// supported names for anything else.
std::unique_ptr<Architecture> make_architecture(const std::string& name);
std::vector<std::string> supported_architectures();

// Reads the keys every architecture shares (sizes, heads, rope, experts) into cfg.
void load_common_config(const gguf::File& f, ModelConfig& cfg);

}  // namespace strata::model
