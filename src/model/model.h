// A loaded model: configuration, weights bound in the mmap'd file, and the forward pass of its
// architecture on a backend. Sequences carry their own state (KV caches, recurrent states).
//
//   CpuBackend be(2);
//   auto m = Model::load("model.gguf", be);
//   auto s = m->new_sequence(4096);
//   Batch b; b.add(token, pos, seq_index, want_logits) ...;
//   m->forward(b, {s.get()}, logits);   // logits: [tokens wanting logits][n_vocab]
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "experts/expert_store.h"
#include "model/config.h"
#include "model/scratch.h"

namespace strata::gguf {
class File;
}

namespace strata::model {

// Tensor views of the mapped file, as the backends compute with them.
using backend::Weight;

// Tokens of one forward call. Tokens of a sequence are contiguous and in position order.
struct Batch {
    std::vector<int32_t> tokens;       // [n]
    std::vector<int32_t> pos;          // [n] position in its sequence
    std::vector<int32_t> seq;          // [n] index into the sequence list given to forward
    std::vector<uint8_t> want_logits;  // [n]

    void add(int32_t token, int32_t position, int32_t seq_index, bool logits) {
        tokens.push_back(token);
        pos.push_back(position);
        seq.push_back(seq_index);
        want_logits.push_back(logits ? 1 : 0);
    }
    int64_t size() const { return static_cast<int64_t>(tokens.size()); }
    int64_t n_logits() const;
    void clear();
};

// Per-sequence state in backend memory: a KV cache for each attention layer, conv and
// recurrent state for each Gated DeltaNet layer. Either self-contained (Model::new_sequence:
// one contiguous block per layer, owned here) or views into pools owned elsewhere (kv::KvPool:
// paged KV through a block table shared by all attention layers, and a state slot).
class SequenceState {
public:
    explicit SequenceState(int64_t n_layer);

    int64_t capacity() const { return static_cast<int64_t>(blocks_.size()) * block_size_; }  // positions addressable now
    int64_t n_past() const { return n_past_; }                                               // positions already processed
    void set_n_past(int64_t n) { n_past_ = n; }
    const backend::KvCacheView& kv(int64_t layer) const { return kv_[static_cast<size_t>(layer)]; }
    float* conv_state(int64_t layer) const { return conv_[static_cast<size_t>(layer)]; }
    float* ssm_state(int64_t layer) const { return ssm_[static_cast<size_t>(layer)]; }
    size_t bytes() const { return bytes_; }  // memory owned by this object (0 for views into pools)

    // Wiring (used by Model::new_sequence and kv::KvPool).
    void set_layer_kv(int64_t layer, void* k_pool, void* v_pool, backend::KvType type);
    void set_layer_recurrent(int64_t layer, float* conv, float* ssm);
    void set_block_size(int64_t n) {
        block_size_ = n;
        refresh_views();
    }
    int64_t block_size() const { return block_size_; }
    const std::vector<int32_t>& blocks() const { return blocks_; }
    void set_blocks(std::vector<int32_t> blocks) {
        blocks_ = std::move(blocks);
        refresh_views();
    }
    void append_block(int32_t b) {
        blocks_.push_back(b);
        refresh_views();
    }

private:
    friend class Model;
    void refresh_views();

    int64_t n_past_ = 0, block_size_ = 0;
    size_t bytes_ = 0;
    std::vector<backend::Buffer> buffers_;  // owned memory (self-contained states only)
    std::vector<int32_t> blocks_;           // block table shared by every attention layer
    std::vector<backend::KvCacheView> kv_;  // [n_layer]; empty views for non-attention layers
    std::vector<float*> conv_, ssm_;        // [n_layer]; null for attention layers
};

// Floats of one Gated DeltaNet layer's conv state and recurrent state for one sequence.
int64_t recurrent_conv_floats(const ModelConfig& c);
int64_t recurrent_state_floats(const ModelConfig& c);

class Architecture;

struct LoadOptions {
    // Called with (done, total) tensor bytes while binding and checking weights.
    std::function<void(uint64_t, uint64_t)> progress;
    // Reproduce references whose RoPE frequencies were rounded to bf16 (a transformers model
    // moved to bfloat16 rounds its rotary inv_freq buffer too, as the shared hf-tiny fixtures'
    // references were). For comparing against such references only; never for serving.
    bool rope_freqs_bf16 = false;
    // The expert store (src/experts/, docs/design/expert_store_seat.md). Auto: one is made when
    // the weights do not fit the backend's device memory, when store.ram_budget is below the
    // experts' size, or when a statistics file is named; On: always (tests, benchmarks); Off:
    // never (weights over the budget are then an Error, as before).
    enum class ExpertStoreMode { Auto, On, Off };
    ExpertStoreMode expert_store = ExpertStoreMode::Auto;
    experts::StoreOptions store;
};

class Model {
public:
    // Opens the file, reads the configuration, binds and checks every tensor. Throws
    // strata::Error naming the file and the missing/ill-shaped/unsupported tensor or key.
    static std::unique_ptr<Model> load(const std::filesystem::path& path, backend::Backend& backend,
                                       const LoadOptions& opts = {});
    ~Model();

    const ModelConfig& config() const { return config_; }
    const gguf::File& file() const { return *file_; }
    backend::Backend& backend() const { return backend_; }
    uint64_t weight_bytes() const { return weight_bytes_; }
    // The expert store, or null when every expert is resident in the backend's copy.
    experts::ExpertStore* expert_store() const { return store_.get(); }
    // What the attention layers' caches hold on this backend (Backend::kv_type).
    backend::KvType kv_type() const { return kv_type_; }

    std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const;
    // A sequence from new_sequence back to its fresh state (no positions, zero recurrent state),
    // keeping its memory: the same cache addresses, so recorded decode graphs stay valid.
    void reset_sequence(SequenceState& s) const;

    // Runs the batch; logits (host memory, [b.n_logits()][n_vocab]) for the tokens that want
    // them, in batch order. Advances each sequence's n_past past its last token in the batch.
    // argmax (optional, host [b.n_logits()]): each logits row's greedy token, found where the
    // logits are (Backend::argmax_rows); logits may then be null, and no logits cross to the host.
    void forward(const Batch& b, std::span<SequenceState* const> seqs, float* logits, int32_t* argmax = nullptr);

    // The logits of the last forward stay where the backend computed them until the next one
    // (rows in batch order, as forward's logits). These read them there:
    // sampling summaries of some rows (Backend::sample_rows; the edits change the rows)...
    void sample_rows(std::span<const backend::RowSampleRequest> req, int32_t k, backend::RowSample* out,
                     backend::TokenLogit* top);
    // ...and whole rows, copied to host memory [n_vocab].
    void copy_logits_row(int64_t row, float* host);
    // The final-normed hidden row a logits row was computed from (the output norm applied; what
    // last-token pooling embeds), copied to host memory [n_embd].
    void copy_hidden_row(int64_t row, float* host);

private:
    Model(std::unique_ptr<gguf::File> file, backend::Backend& backend);

    std::unique_ptr<gguf::File> file_;
    backend::Backend& backend_;
    std::unique_ptr<experts::ExpertStore> store_;  // destroyed before the file its views read
    ModelConfig config_;
    std::unique_ptr<Architecture> arch_;
    uint64_t weight_bytes_ = 0;
    backend::KvType kv_type_ = backend::KvType::F32;
    ScratchArena arena_;            // forward-pass activations, reused across calls
    float* last_logits_ = nullptr;  // backend memory [last_rows_][n_vocab] of the last forward
    float* last_hidden_ = nullptr;  // backend memory [last_rows_][n_embd]: the normed rows the head read
    int64_t last_rows_ = 0;
};

}  // namespace strata::model
