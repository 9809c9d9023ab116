// GGUF files: an mmap'd, fully validated reader (v2 and v3, split models opened as one) and the
// metadata/tensor model shared with the writer (gguf_writer.h).
//
// File layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv
// key/value pairs, then n_tensors tensor infos (name, u32 n_dims, u64 ne[n_dims], u32 type,
// u64 offset), padding to general.alignment (default 32), then the tensor data; each tensor's
// offset is relative to the start of the data section and aligned.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "quant/types.h"

namespace strata::gguf {

// The first four bytes of every GGUF file: "GGUF" read as a little-endian u32.
constexpr uint32_t kMagic = 0x46554747;

enum class ValueType : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
};

const char* value_type_name(ValueType t);
bool is_integer(ValueType t);

// One metadata value. Scalars are held by value, strings own their bytes. Arrays keep their
// element type and store elements packed by kind: integers as u64/i64 (no precision lost),
// floats as double, strings, or (for arrays of arrays) nested Values.
struct Value {
    ValueType type = ValueType::U8;
    uint64_t u = 0;  // U8/U16/U32/U64, BOOL (0/1)
    int64_t i = 0;   // I8/I16/I32/I64
    double f = 0.0;  // F32/F64
    std::string s;   // STRING
    // ARRAY: exactly one of these is used, chosen by elem_type.
    ValueType elem_type = ValueType::U8;
    std::vector<uint64_t> arr_u;     // unsigned integers and bools
    std::vector<int64_t> arr_i;      // signed integers
    std::vector<double> arr_f;       // F32/F64
    std::vector<std::string> arr_s;  // STRING
    std::vector<Value> arr_v;        // ARRAY (nested)

    size_t array_size() const;

    static Value scalar_u(ValueType t, uint64_t v);
    static Value scalar_i(ValueType t, int64_t v);
    static Value of_u32(uint32_t v) { return scalar_u(ValueType::U32, v); }
    static Value of_u64(uint64_t v) { return scalar_u(ValueType::U64, v); }
    static Value of_bool(bool v) { return scalar_u(ValueType::BOOL, v ? 1 : 0); }
    static Value of_i32(int32_t v) { return scalar_i(ValueType::I32, v); }
    static Value of_f32(float v);
    static Value of_string(std::string v);
    static Value of_strings(std::vector<std::string> v);
    static Value of_i32s(const std::vector<int32_t>& v);
    static Value of_f32s(const std::vector<float>& v);

    // Short human form: numbers, quoted strings, arrays summarised past max_items.
    std::string to_display(size_t max_items = 8) const;
};

struct TensorInfo {
    std::string name;
    quant::Type type = quant::Type::F32;
    std::vector<uint64_t> shape;    // ne[0] (the contiguous row length) first
    uint64_t offset = 0;            // from the start of its file's data section
    uint64_t n_bytes = 0;           // validated against shape and type
    const uint8_t* data = nullptr;  // into the mmap (reader only)
    uint32_t file_index = 0;        // which split file holds it

    uint64_t n_elements() const;
    uint64_t n_rows() const { return shape.empty() ? 1 : n_elements() / shape[0]; }
};

}  // namespace strata::gguf
namespace strata {
class MappedFile;
}
namespace strata::gguf {

// A GGUF model: one file or a set of split files opened as one. Immutable after open.
class File {
public:
    // Opens and validates. Throws strata::Error with one line "PATH: problem" on any defect.
    // A path named *-0000K-of-0000N.gguf opens all N parts.
    static std::unique_ptr<File> open(const std::filesystem::path& path);
    // Validates an in-memory image (used by the fuzzer); `name` stands in for the path.
    static std::unique_ptr<File> from_memory(const uint8_t* data, size_t size, const std::string& name);
    ~File();

    const std::filesystem::path& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    size_t n_files() const { return files_.size(); }
    // MappedFile::drop_pages on the part that holds p (nothing when none does).
    void drop_pages(const uint8_t* p, size_t n) const;

    // Metadata, in file order (the split bookkeeping keys of secondary parts are dropped).
    const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
    const Value* find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }

    // Typed accessors: throw "PATH: metadata key 'k' is missing" or "... has type X, expected Y".
    // Integer getters accept any integer type whose value fits.
    uint64_t get_u64(std::string_view key) const;
    uint32_t get_u32(std::string_view key) const;
    int64_t get_i64(std::string_view key) const;
    float get_f32(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    const std::string& get_string(std::string_view key) const;
    const Value& get_array(std::string_view key, std::optional<ValueType> elem = std::nullopt) const;
    std::vector<std::string> get_strings(std::string_view key) const;
    std::vector<int64_t> get_ints(std::string_view key) const;
    std::vector<float> get_floats(std::string_view key) const;
    // Optional forms: nullopt when missing, still throw on a wrong type.
    std::optional<uint64_t> opt_u64(std::string_view key) const;
    std::optional<uint32_t> opt_u32(std::string_view key) const;
    std::optional<float> opt_f32(std::string_view key) const;
    std::optional<bool> opt_bool(std::string_view key) const;
    std::optional<std::string> opt_string(std::string_view key) const;

    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(std::string_view name) const;
    const TensorInfo& tensor(std::string_view name) const;  // throws naming the tensor

    // The architecture (general.architecture) or "" when absent.
    std::string architecture() const;

private:
    File() = default;
    [[noreturn]] void fail(const std::string& what) const;
    void parse_part(const uint8_t* base, size_t size, uint32_t file_index, const std::string& part_name);
    void check_duplicates_and_index();

    std::filesystem::path path_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    std::vector<std::unique_ptr<MappedFile>> files_;
    std::vector<std::pair<std::string, Value>> kv_;
    std::map<std::string, size_t, std::less<>> kv_index_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Path of every part of a split model given any one of them (or {path} for a plain file).
std::vector<std::filesystem::path> split_paths(const std::filesystem::path& path);

}  // namespace strata::gguf
