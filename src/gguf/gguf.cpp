// GGUF reader: parses and validates everything before anything is used. Every read is bounds
// checked and every size computation overflow checked, so a truncated, corrupted or hostile
// file ends in one strata::Error line "PATH: problem (at byte N)" and nothing else.
#include "gguf/gguf.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <limits>
#include <regex>
#include <sstream>

#include "util/error.h"
#include "util/mapped_file.h"

namespace strata::gguf {

namespace {

constexpr uint32_t kMaxDims = 4;   // ggml tensors have at most 4 dimensions
constexpr int kMaxArrayDepth = 8;  // nested arrays deeper than this are refused
constexpr uint64_t kDefaultAlignment = 32;

size_t scalar_size(ValueType t) {
    switch (t) {
        case ValueType::U8:
        case ValueType::I8:
        case ValueType::BOOL: return 1;
        case ValueType::U16:
        case ValueType::I16: return 2;
        case ValueType::U32:
        case ValueType::I32:
        case ValueType::F32: return 4;
        case ValueType::U64:
        case ValueType::I64:
        case ValueType::F64: return 8;
        case ValueType::STRING: return 8;  // at least its length field
        case ValueType::ARRAY: return 12;  // at least element type + count
    }
    return 0;
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

// Bounds-checked little-endian reader over one file image. Errors carry the byte offset.
class Cursor {
public:
    Cursor(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw Error(name_ + ": " + what + " (at byte " + std::to_string(pos_) + ")");
    }
    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }

    template <typename T>
    T read(const char* what) {
        if (remaining() < sizeof(T)) fail(std::string("file ends inside ") + what);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(const char* what) {
        const uint64_t len = read<uint64_t>(what);
        if (len > remaining())
            fail(std::string(what) + " claims " + std::to_string(len) + " bytes but only " + std::to_string(remaining()) +
                 " remain");
        std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return s;
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
    const std::string& name_;
};

Value read_value(Cursor& c, ValueType t, int depth);

Value read_array(Cursor& c, int depth) {
    if (depth >= kMaxArrayDepth) c.fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth));
    const uint32_t et = c.read<uint32_t>("array element type");
    if (!known_value_type(et)) c.fail("unknown array element type " + std::to_string(et));
    const uint64_t n = c.read<uint64_t>("array length");
    const ValueType elem = static_cast<ValueType>(et);
    // Every element needs at least scalar_size bytes: this bounds the allocation below.
    if (n > c.remaining() / scalar_size(elem)) c.fail("array of " + std::to_string(n) + " elements does not fit in the file");
    Value v;
    v.type = ValueType::ARRAY;
    v.elem_type = elem;
    const size_t count = static_cast<size_t>(n);
    switch (elem) {
        case ValueType::U8:
        case ValueType::U16:
        case ValueType::U32:
        case ValueType::U64:
        case ValueType::BOOL:
            v.arr_u.reserve(count);
            for (size_t k = 0; k < count; ++k) v.arr_u.push_back(read_value(c, elem, depth + 1).u);
            break;
        case ValueType::I8:
        case ValueType::I16:
        case ValueType::I32:
        case ValueType::I64:
            v.arr_i.reserve(count);
            for (size_t k = 0; k < count; ++k) v.arr_i.push_back(read_value(c, elem, depth + 1).i);
            break;
        case ValueType::F32:
        case ValueType::F64:
            v.arr_f.reserve(count);
            for (size_t k = 0; k < count; ++k) v.arr_f.push_back(read_value(c, elem, depth + 1).f);
            break;
        case ValueType::STRING:
            v.arr_s.reserve(count);
            for (size_t k = 0; k < count; ++k) v.arr_s.push_back(c.read_string("array string"));
            break;
        case ValueType::ARRAY:
            v.arr_v.reserve(count);
            for (size_t k = 0; k < count; ++k) v.arr_v.push_back(read_array(c, depth + 1));
            break;
    }
    return v;
}

Value read_value(Cursor& c, ValueType t, int depth) {
    switch (t) {
        case ValueType::U8: return Value::scalar_u(t, c.read<uint8_t>("u8 value"));
        case ValueType::U16: return Value::scalar_u(t, c.read<uint16_t>("u16 value"));
        case ValueType::U32: return Value::scalar_u(t, c.read<uint32_t>("u32 value"));
        case ValueType::U64: return Value::scalar_u(t, c.read<uint64_t>("u64 value"));
        case ValueType::I8: return Value::scalar_i(t, c.read<int8_t>("i8 value"));
        case ValueType::I16: return Value::scalar_i(t, c.read<int16_t>("i16 value"));
        case ValueType::I32: return Value::scalar_i(t, c.read<int32_t>("i32 value"));
        case ValueType::I64: return Value::scalar_i(t, c.read<int64_t>("i64 value"));
        case ValueType::F32: {
            Value v;
            v.type = t;
            v.f = c.read<float>("f32 value");
            return v;
        }
        case ValueType::F64: {
            Value v;
            v.type = t;
            v.f = c.read<double>("f64 value");
            return v;
        }
        case ValueType::BOOL: {
            const uint8_t b = c.read<uint8_t>("bool value");
            if (b > 1) c.fail("bool value " + std::to_string(b) + " is neither 0 nor 1");
            return Value::scalar_u(t, b);
        }
        case ValueType::STRING: return Value::of_string(c.read_string("string value"));
        case ValueType::ARRAY: return read_array(c, depth);
    }
    c.fail("unknown value type");
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
    if (a != 0 && b > UINT64_MAX / a) return false;
    *out = a * b;
    return true;
}

}  // namespace

// ---- Value ------------------------------------------------------------------------------

const char* value_type_name(ValueType t) {
    switch (t) {
        case ValueType::U8: return "u8";
        case ValueType::I8: return "i8";
        case ValueType::U16: return "u16";
        case ValueType::I16: return "i16";
        case ValueType::U32: return "u32";
        case ValueType::I32: return "i32";
        case ValueType::F32: return "f32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::U64: return "u64";
        case ValueType::I64: return "i64";
        case ValueType::F64: return "f64";
    }
    return "?";
}

bool is_integer(ValueType t) {
    switch (t) {
        case ValueType::U8:
        case ValueType::I8:
        case ValueType::U16:
        case ValueType::I16:
        case ValueType::U32:
        case ValueType::I32:
        case ValueType::U64:
        case ValueType::I64: return true;
        default: return false;
    }
}

static bool is_unsigned_kind(ValueType t) {
    return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64 || t == ValueType::BOOL;
}

size_t Value::array_size() const {
    if (type != ValueType::ARRAY) return 0;
    return arr_u.size() + arr_i.size() + arr_f.size() + arr_s.size() + arr_v.size();
}

Value Value::scalar_u(ValueType t, uint64_t v) {
    Value x;
    x.type = t;
    x.u = v;
    return x;
}

Value Value::scalar_i(ValueType t, int64_t v) {
    Value x;
    x.type = t;
    x.i = v;
    return x;
}

Value Value::of_f32(float v) {
    Value x;
    x.type = ValueType::F32;
    x.f = v;
    return x;
}

Value Value::of_string(std::string v) {
    Value x;
    x.type = ValueType::STRING;
    x.s = std::move(v);
    return x;
}

Value Value::of_strings(std::vector<std::string> v) {
    Value x;
    x.type = ValueType::ARRAY;
    x.elem_type = ValueType::STRING;
    x.arr_s = std::move(v);
    return x;
}

Value Value::of_i32s(const std::vector<int32_t>& v) {
    Value x;
    x.type = ValueType::ARRAY;
    x.elem_type = ValueType::I32;
    x.arr_i.assign(v.begin(), v.end());
    return x;
}

Value Value::of_f32s(const std::vector<float>& v) {
    Value x;
    x.type = ValueType::ARRAY;
    x.elem_type = ValueType::F32;
    x.arr_f.assign(v.begin(), v.end());
    return x;
}

static std::string quote(const std::string& s, size_t max_len = 120) {
    std::string out = "\"";
    for (size_t k = 0; k < s.size() && k < max_len; ++k) {
        const unsigned char ch = static_cast<unsigned char>(s[k]);
        if (ch == '"' || ch == '\\') {
            out += '\\';
            out += static_cast<char>(ch);
        } else if (ch == '\n') {
            out += "\\n";
        } else if (ch < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", ch);
            out += buf;
        } else {
            out += static_cast<char>(ch);
        }
    }
    if (s.size() > max_len) out += "...";
    return out + "\"";
}

static std::string format_double(double d) {
    std::ostringstream os;
    os.precision(9);
    os << d;
    return os.str();
}

std::string Value::to_display(size_t max_items) const {
    switch (type) {
        case ValueType::BOOL: return u ? "true" : "false";
        case ValueType::STRING: return quote(s);
        case ValueType::F32:
        case ValueType::F64: return format_double(f);
        case ValueType::ARRAY: {
            const size_t n = array_size();
            std::string out = "[";
            for (size_t k = 0; k < n && k < max_items; ++k) {
                if (k) out += ", ";
                if (!arr_u.empty())
                    out += elem_type == ValueType::BOOL ? (arr_u[k] ? "true" : "false") : std::to_string(arr_u[k]);
                else if (!arr_i.empty()) out += std::to_string(arr_i[k]);
                else if (!arr_f.empty()) out += format_double(arr_f[k]);
                else if (!arr_s.empty()) out += quote(arr_s[k], 40);
                else out += arr_v[k].to_display(max_items);
            }
            if (n > max_items) out += ", ... (" + std::to_string(n) + " " + value_type_name(elem_type) + ")";
            return out + "]";
        }
        default: return is_unsigned_kind(type) ? std::to_string(u) : std::to_string(i);
    }
}

// ---- TensorInfo -------------------------------------------------------------------------

uint64_t TensorInfo::n_elements() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;  // validated not to overflow at load
    return n;
}

// ---- File -------------------------------------------------------------------------------

File::~File() = default;

void File::fail(const std::string& what) const { throw Error(path_.string() + ": " + what); }

void File::parse_part(const uint8_t* base, size_t size, uint32_t file_index, const std::string& part_name) {
    Cursor c(base, size, part_name);
    if (size < 4) c.fail("not a GGUF file (too short for the magic)");
    const uint32_t magic = c.read<uint32_t>("magic");
    if (magic != kMagic) c.fail("not a GGUF file (bad magic)");
    const uint32_t version = c.read<uint32_t>("version");
    if (version == 1) c.fail("GGUF version 1 is not supported (re-convert the model)");
    if (version != 2 && version != 3) c.fail("unsupported GGUF version " + std::to_string(version));
    if (file_index == 0) version_ = version;
    const uint64_t n_tensors = c.read<uint64_t>("tensor count");
    const uint64_t n_kv = c.read<uint64_t>("metadata count");
    // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at
    // least 8 + 4 + 8 + 4 + 8. Counts beyond that cannot be honest.
    if (n_kv > c.remaining() / 13) c.fail("metadata count " + std::to_string(n_kv) + " does not fit in the file");
    if (n_tensors > c.remaining() / 32) c.fail("tensor count " + std::to_string(n_tensors) + " does not fit in the file");

    uint64_t alignment = kDefaultAlignment;
    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string key = c.read_string("metadata key");
        if (key.empty()) c.fail("empty metadata key");
        const uint32_t t = c.read<uint32_t>("metadata value type");
        if (!known_value_type(t)) c.fail("metadata key '" + key + "' has unknown value type " + std::to_string(t));
        Value v = read_value(c, static_cast<ValueType>(t), 0);
        if (key == "general.alignment") {
            if (v.type != ValueType::U32) c.fail("general.alignment must be u32, not " + std::string(value_type_name(v.type)));
            if (v.u == 0 || (v.u & (v.u - 1)) != 0) c.fail("general.alignment " + std::to_string(v.u) + " is not a power of two");
            alignment = v.u;
        }
        if (file_index == 0) {
            if (kv_index_.count(key)) c.fail("duplicate metadata key '" + key + "'");
            kv_index_.emplace(key, kv_.size());
            kv_.emplace_back(std::move(key), std::move(v));
        } else if (key.rfind("split.", 0) != 0) {
            // Secondary split parts repeat nothing but their split bookkeeping; anything else
            // would be ambiguous, and the first part is authoritative.
            continue;
        }
    }
    if (file_index == 0) alignment_ = alignment;

    const size_t first_tensor = tensors_.size();
    for (uint64_t k = 0; k < n_tensors; ++k) {
        TensorInfo ti;
        ti.name = c.read_string("tensor name");
        if (ti.name.empty()) c.fail("tensor " + std::to_string(k) + " has an empty name");
        const uint32_t n_dims = c.read<uint32_t>("tensor dimension count");
        if (n_dims == 0 || n_dims > kMaxDims)
            c.fail("tensor '" + ti.name + "' has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
        uint64_t n_el = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t ne = c.read<uint64_t>("tensor shape");
            if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || !checked_mul(n_el, ne, &n_el))
                c.fail("tensor '" + ti.name + "' shape overflows");
            ti.shape.push_back(ne);
        }
        const uint32_t type_id = c.read<uint32_t>("tensor type");
        const quant::TypeInfo* info = quant::type_info(type_id);
        if (info == nullptr) c.fail("tensor '" + ti.name + "' has unknown type id " + std::to_string(type_id));
        ti.type = info->type;
        if (ti.shape[0] % static_cast<uint64_t>(info->block_elems) != 0)
            c.fail("tensor '" + ti.name + "' row of " + std::to_string(ti.shape[0]) + " values is not a whole number of " +
                   info->name + " blocks of " + std::to_string(info->block_elems));
        const auto bytes = quant::row_bytes(ti.type, n_el);
        if (!bytes) c.fail("tensor '" + ti.name + "' byte size overflows");
        ti.n_bytes = *bytes;
        ti.offset = c.read<uint64_t>("tensor offset");
        ti.file_index = file_index;
        tensors_.push_back(std::move(ti));
    }

    // The data section starts at the next multiple of the alignment after the header.
    const uint64_t header_end = c.pos();
    const uint64_t data_start = (header_end + alignment - 1) / alignment * alignment;
    const bool has_data = n_tensors > 0;
    if (has_data && data_start > size) c.fail("file ends before its tensor data section");
    const uint64_t data_size = has_data ? size - data_start : 0;
    for (size_t k = first_tensor; k < tensors_.size(); ++k) {
        TensorInfo& ti = tensors_[k];
        if (ti.offset % alignment != 0)
            throw Error(part_name + ": tensor '" + ti.name + "' offset " + std::to_string(ti.offset) + " is not aligned to " +
                        std::to_string(alignment));
        if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset)
            throw Error(part_name + ": tensor '" + ti.name + "' (" + std::to_string(ti.n_bytes) + " bytes at offset " +
                        std::to_string(ti.offset) + ") extends past the end of the file (data section is " +
                        std::to_string(data_size) + " bytes); the file may be truncated");
        ti.data = base + data_start + ti.offset;
    }
}

void File::check_duplicates_and_index() {
    for (size_t k = 0; k < tensors_.size(); ++k) {
        if (!tensor_index_.emplace(tensors_[k].name, k).second) fail("duplicate tensor name '" + tensors_[k].name + "'");
    }
}

std::vector<std::filesystem::path> split_paths(const std::filesystem::path& path) {
    static const std::regex kSplit(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
    const std::string name = path.filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, kSplit)) return {path};
    const int count = std::stoi(m[3].str());
    if (count < 1) return {path};
    std::vector<std::filesystem::path> out;
    for (int k = 1; k <= count; ++k) {
        char suffix[32];
        std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", k, count);
        out.push_back(path.parent_path() / (m[1].str() + suffix));
    }
    return out;
}

std::unique_ptr<File> File::open(const std::filesystem::path& path) {
    std::unique_ptr<File> f(new File());
    f->path_ = path;
    const auto parts = split_paths(path);
    for (size_t k = 0; k < parts.size(); ++k) {
        if (parts.size() > 1 && !std::filesystem::exists(parts[k]))
            throw Error(path.string() + ": split part " + std::to_string(k + 1) + " of " + std::to_string(parts.size()) +
                        " is missing: " + parts[k].string());
        f->files_.push_back(std::make_unique<MappedFile>(parts[k]));
        const MappedFile& mf = *f->files_.back();
        f->parse_part(mf.data(), mf.size(), static_cast<uint32_t>(k), parts[k].string());
    }
    if (parts.size() > 1) {
        if (const auto count = f->opt_u64("split.count"); count && *count != parts.size())
            f->fail("split.count is " + std::to_string(*count) + " but the file name says " + std::to_string(parts.size()) +
                    " parts");
    }
    f->check_duplicates_and_index();
    return f;
}

void File::drop_pages(const uint8_t* p, size_t n) const {
    for (const auto& f : files_)
        if (f->contains(p)) f->drop_pages(p, n);
}

std::unique_ptr<File> File::from_memory(const uint8_t* data, size_t size, const std::string& name) {
    std::unique_ptr<File> f(new File());
    f->path_ = name;
    f->parse_part(data, size, 0, name);
    f->check_duplicates_and_index();
    return f;
}

// ---- metadata access ----------------------------------------------------------------------

const Value* File::find(std::string_view key) const {
    const auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {

const Value& need(const File& f, std::string_view key) {
    const Value* v = f.find(key);
    if (v == nullptr) throw Error(f.path().string() + ": metadata key '" + std::string(key) + "' is missing");
    return *v;
}

[[noreturn]] void wrong_type(const File& f, std::string_view key, const Value& v, const char* expected) {
    throw Error(f.path().string() + ": metadata key '" + std::string(key) + "' has type " + value_type_name(v.type) +
                ", expected " + expected);
}

// An integer value as a signed 128-bit-free pair: fits-in checks done by the callers.
bool as_u64(const Value& v, uint64_t* out) {
    if (is_unsigned_kind(v.type) && v.type != ValueType::BOOL) {
        *out = v.u;
        return true;
    }
    if (is_integer(v.type) && v.i >= 0) {
        *out = static_cast<uint64_t>(v.i);
        return true;
    }
    return false;
}

}  // namespace

uint64_t File::get_u64(std::string_view key) const {
    const Value& v = need(*this, key);
    uint64_t u;
    if (!as_u64(v, &u)) {
        if (is_integer(v.type))
            throw Error(path_.string() + ": metadata key '" + std::string(key) + "' is negative (" + std::to_string(v.i) + ")");
        wrong_type(*this, key, v, "an unsigned integer");
    }
    return u;
}

uint32_t File::get_u32(std::string_view key) const {
    const uint64_t u = get_u64(key);
    if (u > UINT32_MAX)
        throw Error(path_.string() + ": metadata key '" + std::string(key) + "' value " + std::to_string(u) + " is too large");
    return static_cast<uint32_t>(u);
}

int64_t File::get_i64(std::string_view key) const {
    const Value& v = need(*this, key);
    if (!is_integer(v.type)) wrong_type(*this, key, v, "an integer");
    if (is_unsigned_kind(v.type)) {
        if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            throw Error(path_.string() + ": metadata key '" + std::string(key) + "' value is too large");
        return static_cast<int64_t>(v.u);
    }
    return v.i;
}

float File::get_f32(std::string_view key) const {
    const Value& v = need(*this, key);
    if (v.type == ValueType::F32 || v.type == ValueType::F64) return static_cast<float>(v.f);
    if (is_integer(v.type)) return is_unsigned_kind(v.type) ? static_cast<float>(v.u) : static_cast<float>(v.i);
    wrong_type(*this, key, v, "a number");
}

bool File::get_bool(std::string_view key) const {
    const Value& v = need(*this, key);
    if (v.type != ValueType::BOOL) wrong_type(*this, key, v, "bool");
    return v.u != 0;
}

const std::string& File::get_string(std::string_view key) const {
    const Value& v = need(*this, key);
    if (v.type != ValueType::STRING) wrong_type(*this, key, v, "string");
    return v.s;
}

const Value& File::get_array(std::string_view key, std::optional<ValueType> elem) const {
    const Value& v = need(*this, key);
    if (v.type != ValueType::ARRAY) wrong_type(*this, key, v, "array");
    if (elem && v.elem_type != *elem)
        throw Error(path_.string() + ": metadata key '" + std::string(key) + "' is an array of " + value_type_name(v.elem_type) +
                    ", expected an array of " + value_type_name(*elem));
    return v;
}

std::vector<std::string> File::get_strings(std::string_view key) const { return get_array(key, ValueType::STRING).arr_s; }

std::vector<int64_t> File::get_ints(std::string_view key) const {
    const Value& v = get_array(key);
    if (!v.arr_i.empty() || (is_integer(v.elem_type) && !is_unsigned_kind(v.elem_type))) return v.arr_i;
    if (is_integer(v.elem_type)) {
        std::vector<int64_t> out;
        out.reserve(v.arr_u.size());
        for (uint64_t u : v.arr_u) {
            if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                throw Error(path_.string() + ": metadata key '" + std::string(key) + "' holds a value too large");
            out.push_back(static_cast<int64_t>(u));
        }
        return out;
    }
    throw Error(path_.string() + ": metadata key '" + std::string(key) + "' is an array of " + value_type_name(v.elem_type) +
                ", expected an array of integers");
}

std::vector<float> File::get_floats(std::string_view key) const {
    const Value& v = get_array(key);
    if (v.elem_type != ValueType::F32 && v.elem_type != ValueType::F64)
        throw Error(path_.string() + ": metadata key '" + std::string(key) + "' is an array of " + value_type_name(v.elem_type) +
                    ", expected an array of floats");
    return std::vector<float>(v.arr_f.begin(), v.arr_f.end());
}

std::optional<uint64_t> File::opt_u64(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_u64(key);
}
std::optional<uint32_t> File::opt_u32(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_u32(key);
}
std::optional<float> File::opt_f32(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_f32(key);
}
std::optional<bool> File::opt_bool(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_bool(key);
}
std::optional<std::string> File::opt_string(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_string(key);
}

std::string File::architecture() const {
    const Value* v = find("general.architecture");
    return v != nullptr && v->type == ValueType::STRING ? v->s : std::string();
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
    const TensorInfo* t = find_tensor(name);
    if (t == nullptr) fail("tensor '" + std::string(name) + "' is missing");
    return *t;
}

}  // namespace strata::gguf
