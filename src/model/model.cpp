#include "model/model.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gguf/gguf.h"
#include "model/architecture.h"
#include "model/names.h"
#include "quant/types.h"
#include "util/error.h"

namespace strata::model {

int64_t Batch::n_logits() const { return std::count(want_logits.begin(), want_logits.end(), uint8_t{1}); }

void Batch::clear() {
    tokens.clear();
    pos.clear();
    seq.clear();
    want_logits.clear();
}

void ForwardPass::set_layer_kv(int64_t layer) {
    kv_of_token.resize(static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t)
        kv_of_token[static_cast<size_t>(t)] = &seqs[static_cast<size_t>(batch->seq[static_cast<size_t>(t)])]->kv(layer);
}

Model::Model(std::unique_ptr<gguf::File> file, backend::Backend& backend)
    : file_(std::move(file)), backend_(backend), arena_(backend) {}

Model::~Model() = default;

namespace {

// What the expert statistics file is tied to: the architecture, the shape and a hash of the first
// router's bytes (two files of one geometry differ there).
std::string model_identity(const gguf::File& f, const ModelConfig& c) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (const auto& t : f.tensors()) {
        if (!t.name.ends_with(names::kFfnGateInp)) continue;
        const uint8_t* p = t.data;
        const size_t n = std::min<size_t>(t.n_bytes, 65536);
        for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
        break;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return c.arch_name + "-" + std::to_string(c.n_layer) + "x" + std::to_string(c.n_expert) + "-" + buf;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::filesystem::path& path, backend::Backend& backend, const LoadOptions& opts) {
    std::unique_ptr<Model> m(new Model(gguf::File::open(path), backend));
    const gguf::File& f = *m->file_;
    m->config_ = read_config(f);
    m->arch_ = make_architecture(m->config_.arch_name);
    m->config_.rope_freqs_bf16 = opts.rope_freqs_bf16;
    WeightBinder binder(f, backend);
    m->arch_->bind(m->config_, binder);
    m->weight_bytes_ = binder.bound_bytes();
    // f16 caches where the backend offers them, if every attention layer's q, k and v weights are
    // quantised (as the attention itself then may round to f16: AttentionArgs::f16_ok).
    bool quantised_attention = false, float_attention = false;
    for (const Weight& w : binder.bound()) {
        const std::string n = w.name();
        if (n.ends_with(names::kAttnQ) || n.ends_with(names::kAttnK) || n.ends_with(names::kAttnV))
            (quant::is_float_type(w.type) ? float_attention : quantised_attention) = true;
    }
    m->kv_type_ = backend.kv_type(quantised_attention && !float_attention);
    m->config_.tied_output = m->arch_->output().data == m->arch_->token_embd().data;
    const backend::Backend::ProgressFn progress = opts.progress ? opts.progress : backend::Backend::ProgressFn{};
    // The experts apart from the rest: an expert store keeps them (and the backend gets the rest).
    std::vector<Weight> dense;
    std::vector<experts::LayerExperts> layers(static_cast<size_t>(m->config_.n_layer));
    uint64_t expert_bytes = 0;
    for (const Weight& w : binder.bound()) {
        const std::string n = w.name();
        int layer = -1;
        if (n.starts_with("blk.")) layer = std::atoi(n.c_str() + 4);
        Weight* slot = nullptr;
        if (layer >= 0 && layer < m->config_.n_layer) {
            experts::LayerExperts& L = layers[static_cast<size_t>(layer)];
            if (n.ends_with(names::kFfnGateExps)) slot = &L.gate;
            else if (n.ends_with(names::kFfnUpExps)) slot = &L.up;
            else if (n.ends_with(names::kFfnDownExps)) slot = &L.down;
            L.layer = layer;
        }
        if (slot != nullptr) {
            *slot = w;
            expert_bytes += w.row_bytes * static_cast<uint64_t>(w.rows());
        } else {
            dense.push_back(w);
        }
    }
    std::erase_if(layers, [](const experts::LayerExperts& L) { return !L.gate || !L.up || !L.down; });
    using Mode = LoadOptions::ExpertStoreMode;
    const uint64_t device_free = backend.has_expert_slots() ? backend.expert_slot_memory(0) : 0;
    bool use_store = opts.expert_store == Mode::On;
    if (opts.expert_store == Mode::Auto)
        use_store = (backend.has_expert_slots() && m->weight_bytes_ > device_free) ||
                    (opts.store.ram_budget > 0 && opts.store.ram_budget < expert_bytes) || !opts.store.stats_file.empty();
    if (use_store && layers.empty()) {
        if (opts.expert_store == Mode::On) throw Error(path.string() + ": the expert store needs a model with expert layers");
        use_store = false;
    }
    if (use_store) {
        const uint64_t dense_bytes = m->weight_bytes_ - expert_bytes;
        if (backend.has_expert_slots() && dense_bytes > device_free)
            throw Error("--vram-budget: the weights other than the experts need " + std::to_string(dense_bytes >> 20) +
                        " MiB of GPU memory; the budget leaves " + std::to_string(device_free >> 20) +
                        " MiB. Raise --vram-budget, or run on the CPU (--device cpu)");
        backend.upload_weights(dense, progress);
        experts::StoreOptions so = opts.store;
        if (so.model_id.empty()) so.model_id = model_identity(f, m->config_);
        if (!so.drop_pages) so.drop_pages = [file = m->file_.get()](const uint8_t* p, size_t n) { file->drop_pages(p, n); };
        m->store_ = std::make_unique<experts::ExpertStore>(backend, std::move(layers), m->config_.n_layer, so);
    } else {
        backend.upload_weights(binder.bound(), progress);
    }
    if (opts.progress) opts.progress(m->weight_bytes_, m->weight_bytes_);
    return m;
}

SequenceState::SequenceState(int64_t n_layer)
    : kv_(static_cast<size_t>(n_layer)),
      conv_(static_cast<size_t>(n_layer), nullptr),
      ssm_(static_cast<size_t>(n_layer), nullptr) {}

void SequenceState::set_layer_kv(int64_t layer, void* k_pool, void* v_pool, backend::KvType type) {
    backend::KvCacheView& v = kv_.at(static_cast<size_t>(layer));
    v.k = k_pool;
    v.v = v_pool;
    v.type = type;
    refresh_views();
}

void SequenceState::set_layer_recurrent(int64_t layer, float* conv, float* ssm) {
    conv_.at(static_cast<size_t>(layer)) = conv;
    ssm_.at(static_cast<size_t>(layer)) = ssm;
}

void SequenceState::refresh_views() {
    for (backend::KvCacheView& v : kv_) {
        if (v.k == nullptr) continue;
        v.blocks = blocks_.data();
        v.n_blocks = static_cast<int64_t>(blocks_.size());
        v.block_size = block_size_;
    }
}

int64_t recurrent_conv_floats(const ModelConfig& c) {
    // conv over the q, k, v channels: [kernel - 1][channels]
    return (c.ssm_conv_kernel - 1) * (2 * c.ssm_n_group * c.ssm_d_state + c.ssm_d_inner);
}

int64_t recurrent_state_floats(const ModelConfig& c) {
    // per value head [d_k][d_v]
    return c.ssm_dt_rank * c.ssm_d_state * (c.ssm_d_inner / std::max<int64_t>(c.ssm_dt_rank, 1));
}

std::unique_ptr<SequenceState> Model::new_sequence(int64_t capacity) const {
    if (capacity <= 0) throw Error("sequence capacity must be positive");
    const ModelConfig& c = config_;
    auto s = std::make_unique<SequenceState>(c.n_layer);
    auto alloc = [&](int64_t n) {
        s->buffers_.emplace_back(&backend_, static_cast<size_t>(n));
        s->bytes_ += static_cast<size_t>(n) * sizeof(float);
        return s->buffers_.back().data();
    };
    for (int64_t il = 0; il < c.n_layer; ++il) {
        if (c.layers[static_cast<size_t>(il)] == LayerKind::Attention) {
            float* k = alloc(backend::kv_pool_floats(capacity * c.n_head_kv * c.head_dim_k, kv_type_));
            float* v = alloc(backend::kv_pool_floats(capacity * c.n_head_kv * c.head_dim_v, kv_type_));
            s->set_layer_kv(il, k, v, kv_type_);
        } else {
            float* conv = alloc(recurrent_conv_floats(c));
            s->set_layer_recurrent(il, conv, alloc(recurrent_state_floats(c)));
        }
    }
    s->set_block_size(capacity);
    s->set_blocks({0});
    return s;
}

void Model::reset_sequence(SequenceState& s) const {
    const ModelConfig& c = config_;
    std::vector<float> zeros;  // made at the first recurrent layer (attention-only models have no state sizes)
    for (int64_t il = 0; il < c.n_layer; ++il) {
        if (c.layers[static_cast<size_t>(il)] == LayerKind::Attention) continue;
        const auto conv = static_cast<size_t>(recurrent_conv_floats(c)), ssm = static_cast<size_t>(recurrent_state_floats(c));
        if (zeros.empty()) zeros.assign(std::max(conv, ssm), 0.0f);
        backend_.copy_from_host(zeros.data(), s.conv_state(il), conv);
        backend_.copy_from_host(zeros.data(), s.ssm_state(il), ssm);
    }
    s.set_n_past(0);
}

void Model::forward(const Batch& b, std::span<SequenceState* const> seqs, float* logits, int32_t* argmax) {
    const ModelConfig& c = config_;
    const int64_t n = b.size();
    if (n == 0) return;
    if (b.pos.size() != b.tokens.size() || b.seq.size() != b.tokens.size() || b.want_logits.size() != b.tokens.size())
        throw Error("batch arrays differ in length");
    ForwardPass fp;
    fp.be = &backend_;
    fp.cfg = &c;
    fp.batch = &b;
    fp.seqs = seqs;
    fp.n_tokens = n;
    fp.arena = &arena_;
    // Check the batch and find the runs of consecutive tokens of one sequence.
    for (int64_t t = 0; t < n; ++t) {
        const int32_t s = b.seq[static_cast<size_t>(t)];
        if (s < 0 || static_cast<size_t>(s) >= seqs.size())
            throw Error("batch token names sequence " + std::to_string(s) + " of " + std::to_string(seqs.size()));
        const int32_t p = b.pos[static_cast<size_t>(t)];
        if (p < 0 || p >= seqs[static_cast<size_t>(s)]->capacity())
            throw Error("position " + std::to_string(p) + " is outside the sequence's capacity " +
                        std::to_string(seqs[static_cast<size_t>(s)]->capacity()));
        if (!fp.runs.empty() && fp.runs.back().seq == s) {
            if (p != b.pos[static_cast<size_t>(t - 1)] + 1)
                throw Error("positions of a sequence must be consecutive within a batch");
            fp.runs.back().end = t + 1;
        } else {
            for (const auto& r : fp.runs)
                if (r.seq == s) throw Error("tokens of one sequence must be contiguous within a batch");
            fp.runs.push_back({t, t + 1, s});
        }
    }

    const int64_t n_out = b.n_logits();
    last_logits_ = nullptr;
    last_hidden_ = nullptr;
    last_rows_ = 0;
    // A backend that replays recorded forwards may decline one (forward_end false): run it again
    // eagerly. Nothing on the host changes until the forward is done, so a second run is safe.
    fp.experts = store_.get();
    if (store_) store_->before_forward();  // between forwards: slots mapped, copies started
    for (bool may_replay : {true, false}) {
        arena_.begin();  // before forward_begin: a grown arena allocates outside a recording
        backend_.forward_begin(n, may_replay);
        Scratch s(arena_);
        float* hidden = s.floats(n * c.n_embd);  // [n][n_embd] the residual stream
        backend_.get_rows(arch_->token_embd(), b.tokens.data(), n, hidden);
        arch_->forward(fp, hidden);

        // Output head only on the rows that want logits. The logits stay in the arena until the
        // next forward begins (sample_rows, copy_logits_row).
        if (n_out > 0) {
            float* rows = s.floats(n_out * c.n_embd);  // [n_out][n_embd]
            int64_t k = 0;
            for (int64_t t = 0; t < n; ++t)
                if (b.want_logits[static_cast<size_t>(t)])
                    backend_.copy(hidden + t * c.n_embd, rows + (k++) * c.n_embd, static_cast<size_t>(c.n_embd));
            backend_.rms_norm(rows, &arch_->output_norm(), n_out, c.n_embd, c.rms_eps, rows);
            float* out = s.floats(n_out * c.n_vocab);  // [n_out][n_vocab]
            const backend::MatmulArgs head[] = {{&arch_->output(), rows, n_out, out}};
            backend_.matmul(head);
            if (logits != nullptr) backend_.copy_to_host(out, logits, static_cast<size_t>(n_out * c.n_vocab));
            if (argmax != nullptr) backend_.argmax_rows(out, n_out, c.n_vocab, argmax);
            last_logits_ = out;
            last_hidden_ = rows;
            last_rows_ = n_out;
        }
        if (backend_.forward_end()) break;
        if (!may_replay) throw Error("the backend could not run a forward");
    }
    for (const auto& r : fp.runs) {
        SequenceState* s = seqs[static_cast<size_t>(r.seq)];
        s->set_n_past(std::max<int64_t>(s->n_past(), b.pos[static_cast<size_t>(r.end - 1)] + 1));
    }
}

void Model::sample_rows(std::span<const backend::RowSampleRequest> req, int32_t k, backend::RowSample* out,
                        backend::TokenLogit* top) {
    for (const auto& r : req) {
        if (r.row < 0 || r.row >= last_rows_)
            throw Error("sample_rows: row " + std::to_string(r.row) + " of " + std::to_string(last_rows_) + " logits rows");
        for (const auto& e : r.edits)
            if (e.id < 0 || e.id >= config_.n_vocab)
                throw Error("sample_rows: edit of token id " + std::to_string(e.id) + " outside the vocabulary");
    }
    if (k < 0 || k > backend::kMaxRowSampleTop) throw Error("sample_rows: k " + std::to_string(k) + " outside [0, 256]");
    backend_.sample_rows(last_logits_, config_.n_vocab, req, k, out, top);
}

void Model::copy_logits_row(int64_t row, float* host) {
    if (row < 0 || row >= last_rows_)
        throw Error("copy_logits_row: row " + std::to_string(row) + " of " + std::to_string(last_rows_));
    backend_.copy_to_host(last_logits_ + row * config_.n_vocab, host, static_cast<size_t>(config_.n_vocab));
}

void Model::copy_hidden_row(int64_t row, float* host) {
    if (row < 0 || row >= last_rows_)
        throw Error("copy_hidden_row: row " + std::to_string(row) + " of " + std::to_string(last_rows_));
    backend_.copy_to_host(last_hidden_ + row * config_.n_embd, host, static_cast<size_t>(config_.n_embd));
}

}  // namespace strata::model
