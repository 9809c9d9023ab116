// Safetensors checkpoints: an mmap'd, validated reader for one file and for a checkpoint
// directory (one model.safetensors, or shards listed by model.safetensors.index.json).
//
// File layout: u64 little-endian header length N, N bytes of JSON, then the data section.
// The JSON maps tensor name -> {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [b, e]}
// (offsets relative to the data section, e - b = numel * dtype size), plus an optional
// "__metadata__" object of strings. Shapes are PyTorch order: the outermost dimension first.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata {
class MappedFile;
}

namespace strata::convert {

enum class StDtype : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2 };

const char* dtype_name(StDtype t);
size_t dtype_size(StDtype t);

struct StTensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<int64_t> shape;     // PyTorch order, outermost first
    const uint8_t* data = nullptr;  // into the mmap; not aligned
    uint64_t n_bytes = 0;
    const std::filesystem::path* file = nullptr;  // the file holding it (for messages)

    int64_t numel() const;
    // The tensor viewed as rows: the last dimension is the row (1 row for a scalar).
    int64_t row_len() const { return shape.empty() ? 1 : shape.back(); }
    int64_t n_rows() const { return row_len() == 0 ? 0 : numel() / row_len(); }
    std::string shape_text() const;  // "[2048, 64]"
};

// Whether the dtype is a float type we convert (F32, F16, BF16).
bool is_convertible(StDtype t);

// Converts n elements starting at element `first` to f32. Throws strata::Error naming the file
// and tensor for a dtype we don't convert.
void read_f32(const StTensor& t, int64_t first, int64_t n, float* out);

class SafetensorsFile {
public:
    // Maps and validates; throws strata::Error "PATH: problem" (one line) on any defect.
    static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
    ~SafetensorsFile();

    const std::filesystem::path& path() const { return path_; }
    // In the header's order (the order the ecosystem converter walks them).
    const std::vector<StTensor>& tensors() const { return tensors_; }

private:
    SafetensorsFile() = default;
    std::filesystem::path path_;
    std::unique_ptr<MappedFile> map_;
    std::vector<StTensor> tensors_;
};

// All tensors of a checkpoint directory, in the converter's walking order: parts sorted by file
// name, each part in header order.
class Checkpoint {
public:
    // Parts: the files named by model.safetensors.index.json's weight_map when present (every
    // name in the index must be in its part and vice versa), else every model*.safetensors.
    static std::unique_ptr<Checkpoint> open(const std::filesystem::path& dir);
    ~Checkpoint();

    const std::filesystem::path& dir() const { return dir_; }
    const std::vector<const StTensor*>& tensors() const { return order_; }
    const StTensor* find(std::string_view name) const;
    size_t n_files() const { return files_.size(); }

private:
    Checkpoint() = default;
    std::filesystem::path dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::vector<const StTensor*> order_;
    std::map<std::string, const StTensor*, std::less<>> by_name_;
};

}  // namespace strata::convert
