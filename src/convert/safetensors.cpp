#include "convert/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"
#include "util/fp16.h"
#include "util/mapped_file.h"

namespace strata::convert {

namespace fs = std::filesystem;

namespace {

// The format's own limit on the header (100 MB); anything larger is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DtypeEntry {
    const char* name;
    StDtype dtype;
    size_t size;
};

constexpr DtypeEntry kDtypes[] = {
    {"F64", StDtype::F64, 8},   {"F32", StDtype::F32, 4},         {"F16", StDtype::F16, 2},         {"BF16", StDtype::BF16, 2},
    {"I64", StDtype::I64, 8},   {"I32", StDtype::I32, 4},         {"I16", StDtype::I16, 2},         {"I8", StDtype::I8, 1},
    {"U64", StDtype::U64, 8},   {"U32", StDtype::U32, 4},         {"U16", StDtype::U16, 2},         {"U8", StDtype::U8, 1},
    {"BOOL", StDtype::BOOL, 1}, {"F8_E4M3", StDtype::F8_E4M3, 1}, {"F8_E5M2", StDtype::F8_E5M2, 1},
};

[[noreturn]] void fail_at(const std::string& where, const std::string& what) { throw Error(where + ": " + what); }

const DtypeEntry* find_dtype(std::string_view name) {
    for (const auto& e : kDtypes)
        if (name == e.name) return &e;
    return nullptr;
}

// Largest value a JSON integer may hold here: keeps every product below 2^63.
constexpr int64_t kMaxDim = int64_t{1} << 40;

}  // namespace

const char* dtype_name(StDtype t) {
    for (const auto& e : kDtypes)
        if (e.dtype == t) return e.name;
    return "?";
}

size_t dtype_size(StDtype t) {
    for (const auto& e : kDtypes)
        if (e.dtype == t) return e.size;
    return 0;
}

bool is_convertible(StDtype t) { return t == StDtype::F32 || t == StDtype::F16 || t == StDtype::BF16; }

int64_t StTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // bounded at open: no overflow
    return n;
}

std::string StTensor::shape_text() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

void read_f32(const StTensor& t, int64_t first, int64_t n, float* out) {
    if (first < 0 || n < 0 || first + n > t.numel())
        throw Error("safetensors: element range out of bounds for tensor '" + t.name + "'");
    const size_t sz = dtype_size(t.dtype);
    const uint8_t* p = t.data + static_cast<size_t>(first) * sz;
    switch (t.dtype) {
        case StDtype::F32: std::memcpy(out, p, static_cast<size_t>(n) * 4); return;
        case StDtype::F16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = f16_to_f32(h);
            }
            return;
        case StDtype::BF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = bf16_to_f32(h);
            }
            return;
        default:
            throw Error((t.file ? t.file->string() : std::string("safetensors")) + ": tensor '" + t.name + "' has dtype " +
                        dtype_name(t.dtype) + "; only F32, F16 and BF16 tensors can be converted");
    }
}

SafetensorsFile::~SafetensorsFile() = default;

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const fs::path& path) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    const std::string where = path.string();
    f->map_ = std::make_unique<MappedFile>(path);
    const uint8_t* base = f->map_->data();
    const uint64_t size = f->map_->size();
    if (size < 8) fail_at(where, "file is " + std::to_string(size) + " bytes, too short for a safetensors header");
    uint64_t header_len = 0;
    std::memcpy(&header_len, base, 8);  // little-endian on every host we build for
    if (header_len > kMaxHeaderBytes)
        fail_at(where, "header length " + std::to_string(header_len) + " is not plausible (corrupt file?)");
    if (header_len > size - 8)
        fail_at(where, "header of " + std::to_string(header_len) + " bytes runs past the end of the file (" +
                           std::to_string(size) + " bytes; truncated?)");
    // ordered_json keeps the header's order, which decides the order tensors are written.
    nlohmann::ordered_json header;
    try {
        header = nlohmann::ordered_json::parse(reinterpret_cast<const char*>(base + 8),
                                               reinterpret_cast<const char*>(base + 8 + header_len));
    } catch (const nlohmann::json::exception& e) {
        fail_at(where, std::string("header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) fail_at(where, "header is not a JSON object");
    const uint8_t* data = base + 8 + header_len;
    const uint64_t data_size = size - 8 - header_len;

    struct Span {
        uint64_t begin, end;
        const std::string* name;
    };
    std::vector<Span> spans;
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        const auto& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) fail_at(where, "__metadata__ is not an object");
            continue;
        }
        const std::string what = "tensor '" + name + "'";
        if (!v.is_object()) fail_at(where, what + ": entry is not an object");
        if (!v.contains("dtype") || !v["dtype"].is_string()) fail_at(where, what + ": missing dtype");
        const DtypeEntry* dt = find_dtype(v["dtype"].get<std::string>());
        if (dt == nullptr) fail_at(where, what + ": unknown dtype '" + v["dtype"].get<std::string>() + "'");
        if (!v.contains("shape") || !v["shape"].is_array()) fail_at(where, what + ": missing shape");
        if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
            fail_at(where, what + ": data_offsets must be [begin, end]");
        StTensor t;
        t.name = name;
        t.dtype = dt->dtype;
        uint64_t numel = 1;
        for (const auto& d : v["shape"]) {
            if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxDim)
                fail_at(where, what + ": shape entries must be non-negative integers");
            const auto dim = static_cast<uint64_t>(d.get<int64_t>());
            if (dim != 0 && numel > (uint64_t{1} << 50) / dim) fail_at(where, what + ": shape is implausibly large");
            numel *= dim;
            t.shape.push_back(d.get<int64_t>());
        }
        const auto& off = v["data_offsets"];
        if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            fail_at(where, what + ": data_offsets must be non-negative integers");
        const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
        if (b > e) fail_at(where, what + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + ") are reversed");
        if (e > data_size)
            fail_at(where, what + ": data [" + std::to_string(b) + ", " + std::to_string(e) +
                               ") runs past the end of the data section (" + std::to_string(data_size) +
                               " bytes; truncated file?)");
        const uint64_t want = numel * dt->size;
        if (e - b != want)
            fail_at(where, what + ": " + std::to_string(e - b) + " data bytes, but shape " + t.shape_text() + " of " + dt->name +
                               " needs " + std::to_string(want));
        t.data = data + b;
        t.n_bytes = want;
        t.file = &f->path_;
        f->tensors_.push_back(std::move(t));
    }
    for (const StTensor& t : f->tensors_)
        spans.push_back({static_cast<uint64_t>(t.data - data), static_cast<uint64_t>(t.data - data) + t.n_bytes, &t.name});
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < spans.size(); ++i)
        if (spans[i].begin < spans[i - 1].end)
            fail_at(where, "tensors '" + *spans[i - 1].name + "' and '" + *spans[i].name + "' overlap");
    return f;
}

Checkpoint::~Checkpoint() = default;

std::unique_ptr<Checkpoint> Checkpoint::open(const fs::path& dir) {
    std::unique_ptr<Checkpoint> ck(new Checkpoint());
    ck->dir_ = dir;
    const fs::path index_path = dir / "model.safetensors.index.json";
    std::vector<std::string> parts;
    std::map<std::string, std::string> weight_map;  // tensor -> part file
    std::error_code ec;
    if (fs::is_regular_file(index_path, ec)) {
        std::ifstream in(index_path);
        nlohmann::json index;
        try {
            index = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            throw Error(index_path.string() + ": not valid JSON: " + e.what());
        }
        if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
            throw Error(index_path.string() + ": has no weight_map object");
        std::set<std::string> part_set;
        for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                throw Error(index_path.string() + ": weight_map entry '" + it.key() + "' is not a file name");
            const std::string part = it.value().get<std::string>();
            if (part.empty() || part.find('/') != std::string::npos || part == "." || part == "..")
                throw Error(index_path.string() + ": weight_map names a file outside the checkpoint: '" + part + "'");
            weight_map[it.key()] = part;
            part_set.insert(part);
        }
        parts.assign(part_set.begin(), part_set.end());  // sorted
    } else {
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            const std::string name = entry.path().filename().string();
            if (name.starts_with("model") && name.ends_with(".safetensors")) parts.push_back(name);
        }
        if (ec) throw Error(dir.string() + ": cannot list: " + ec.message());
        std::sort(parts.begin(), parts.end());
    }
    if (parts.empty()) throw Error(dir.string() + ": no model*.safetensors files (and no model.safetensors.index.json)");
    for (const std::string& part : parts) {
        if (!fs::exists(dir / part, ec)) {
            throw Error((weight_map.empty() ? dir / part : index_path).string() + ": part file '" + part + "' is missing");
        }
        ck->files_.push_back(SafetensorsFile::open(dir / part));
    }
    for (const auto& f : ck->files_) {
        for (const StTensor& t : f->tensors()) {
            if (!ck->by_name_.emplace(t.name, &t).second)
                throw Error(f->path().string() + ": tensor '" + t.name + "' also appears in another part");
            ck->order_.push_back(&t);
            if (!weight_map.empty()) {
                const auto it = weight_map.find(t.name);
                if (it == weight_map.end())
                    throw Error(index_path.string() + ": tensor '" + t.name + "' of " + f->path().filename().string() +
                                " is not in the weight_map");
                if (it->second != f->path().filename().string())
                    throw Error(index_path.string() + ": weight_map puts tensor '" + t.name + "' in " + it->second +
                                ", but it is in " + f->path().filename().string());
            }
        }
    }
    for (const auto& [name, part] : weight_map)
        if (ck->by_name_.find(name) == ck->by_name_.end())
            throw Error((dir / part).string() + ": tensor '" + name + "' listed in the index is missing from the file");
    return ck;
}

const StTensor* Checkpoint::find(std::string_view name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
}

}  // namespace strata::convert
