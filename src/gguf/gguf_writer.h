// GGUF writer: metadata and tensor infos first, then tensor data streamed in order, so a model
// far larger than RAM can be written. Output goes to PATH.tmp and is renamed into place only
// when complete: a failed write never leaves a half file under the real name.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace strata::gguf {

class Writer {
public:
    Writer() = default;
    ~Writer();  // an unfinished file is removed
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    // Metadata in insertion order; setting an existing key replaces its value in place.
    void set(const std::string& key, Value v);
    void set_alignment(uint32_t alignment);  // also written as general.alignment when not 32

    // Declares a tensor; returns its index. Shape is ne[0] first. Throws on a duplicate name,
    // a bad shape, or a row that is not a whole number of blocks.
    size_t add_tensor(const std::string& name, quant::Type type, const std::vector<uint64_t>& shape);
    uint64_t tensor_bytes(size_t index) const { return tensors_.at(index).n_bytes; }
    size_t n_tensors() const { return tensors_.size(); }

    // Writes the header. After this, only write_data and finish.
    void begin(const std::filesystem::path& path);
    // Appends bytes of the current tensor (in declaration order); a tensor may arrive in
    // several calls. Padding between tensors is inserted automatically.
    void write_data(const void* data, size_t n);
    // Checks every tensor received all its bytes, flushes, and renames PATH.tmp to PATH.
    void finish();

    // Convenience for small files: all tensors given as (pointer) in declaration order.
    void write_all(const std::filesystem::path& path, const std::vector<const void*>& data);

private:
    void write_raw(const void* p, size_t n);
    void write_string(const std::string& s);
    void write_value(const Value& v);
    void pad_to_alignment();

    std::vector<std::pair<std::string, Value>> kv_;
    std::vector<TensorInfo> tensors_;
    uint64_t alignment_ = 32;
    std::filesystem::path path_, tmp_path_;
    std::FILE* out_ = nullptr;
    uint64_t pos_ = 0;           // bytes written to out_
    uint64_t data_start_ = 0;    // file offset of the data section
    size_t current_ = 0;         // tensor being written
    uint64_t current_done_ = 0;  // bytes of it written
};

}  // namespace strata::gguf
