#include "gguf/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace strata::gguf {

namespace {
constexpr uint32_t kVersion = 3;
}  // namespace

Writer::~Writer() {
    if (out_ != nullptr) {
        std::fclose(out_);
        std::error_code ec;
        std::filesystem::remove(tmp_path_, ec);
    }
}

void Writer::set(const std::string& key, Value v) {
    if (out_ != nullptr) throw Error("gguf writer: metadata set after the header was written");
    for (auto& [k, val] : kv_) {
        if (k == key) {
            val = std::move(v);
            return;
        }
    }
    kv_.emplace_back(key, std::move(v));
}

void Writer::set_alignment(uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        throw Error("gguf writer: alignment " + std::to_string(alignment) + " is not a power of two");
    alignment_ = alignment;
    set("general.alignment", Value::of_u32(alignment));
}

size_t Writer::add_tensor(const std::string& name, quant::Type type, const std::vector<uint64_t>& shape) {
    if (out_ != nullptr) throw Error("gguf writer: tensor added after the header was written");
    if (name.empty()) throw Error("gguf writer: empty tensor name");
    for (const auto& t : tensors_)
        if (t.name == name) throw Error("gguf writer: duplicate tensor '" + name + "'");
    if (shape.empty() || shape.size() > 4) throw Error("gguf writer: tensor '" + name + "' needs 1 to 4 dimensions");
    const auto& info = quant::type_info(type);
    if (shape[0] % static_cast<uint64_t>(info.block_elems) != 0)
        throw Error("gguf writer: tensor '" + name + "' row of " + std::to_string(shape[0]) +
                    " values is not a whole number of " + info.name + " blocks");
    uint64_t n = 1;
    for (uint64_t d : shape) {
        if (d != 0 && n > UINT64_MAX / d) throw Error("gguf writer: tensor '" + name + "' shape overflows");
        n *= d;
    }
    const auto bytes = quant::row_bytes(type, n);
    if (!bytes) throw Error("gguf writer: tensor '" + name + "' size overflows");
    TensorInfo ti;
    ti.name = name;
    ti.type = type;
    ti.shape = shape;
    ti.n_bytes = *bytes;
    uint64_t offset = 0;
    if (!tensors_.empty()) {
        const TensorInfo& last = tensors_.back();
        offset = (last.offset + last.n_bytes + alignment_ - 1) / alignment_ * alignment_;
    }
    ti.offset = offset;
    tensors_.push_back(std::move(ti));
    return tensors_.size() - 1;
}

void Writer::write_raw(const void* p, size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, out_) != n) throw Error(tmp_path_.string() + ": write failed: " + std::strerror(errno));
    pos_ += n;
}

void Writer::write_string(const std::string& s) {
    const uint64_t len = s.size();
    write_raw(&len, 8);
    write_raw(s.data(), s.size());
}

void Writer::write_value(const Value& v) {
    auto put = [&](auto x) { write_raw(&x, sizeof x); };
    switch (v.type) {
        case ValueType::U8: put(static_cast<uint8_t>(v.u)); break;
        case ValueType::U16: put(static_cast<uint16_t>(v.u)); break;
        case ValueType::U32: put(static_cast<uint32_t>(v.u)); break;
        case ValueType::U64: put(static_cast<uint64_t>(v.u)); break;
        case ValueType::BOOL: put(static_cast<uint8_t>(v.u ? 1 : 0)); break;
        case ValueType::I8: put(static_cast<int8_t>(v.i)); break;
        case ValueType::I16: put(static_cast<int16_t>(v.i)); break;
        case ValueType::I32: put(static_cast<int32_t>(v.i)); break;
        case ValueType::I64: put(static_cast<int64_t>(v.i)); break;
        case ValueType::F32: put(static_cast<float>(v.f)); break;
        case ValueType::F64: put(static_cast<double>(v.f)); break;
        case ValueType::STRING: write_string(v.s); break;
        case ValueType::ARRAY: {
            put(static_cast<uint32_t>(v.elem_type));
            put(static_cast<uint64_t>(v.array_size()));
            auto element = [&](ValueType t) {
                Value e;
                e.type = t;
                return e;
            };
            for (uint64_t u : v.arr_u) {
                Value e = element(v.elem_type);
                e.u = u;
                write_value(e);
            }
            for (int64_t i : v.arr_i) {
                Value e = element(v.elem_type);
                e.i = i;
                write_value(e);
            }
            for (double f : v.arr_f) {
                Value e = element(v.elem_type);
                e.f = f;
                write_value(e);
            }
            for (const std::string& s : v.arr_s) write_string(s);
            for (const Value& nested : v.arr_v) write_value(nested);
            break;
        }
    }
}

void Writer::pad_to_alignment() {
    static const uint8_t zeros[256] = {};
    uint64_t pad = (alignment_ - pos_ % alignment_) % alignment_;
    while (pad > 0) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof zeros));
        write_raw(zeros, n);
        pad -= n;
    }
}

void Writer::begin(const std::filesystem::path& path) {
    if (out_ != nullptr) throw Error("gguf writer: begin called twice");
    path_ = path;
    tmp_path_ = path;
    tmp_path_ += ".tmp";
    out_ = std::fopen(tmp_path_.c_str(), "wb");
    if (out_ == nullptr) throw Error(tmp_path_.string() + ": cannot create: " + std::strerror(errno));
    pos_ = 0;
    write_raw(&kMagic, 4);
    write_raw(&kVersion, 4);
    const uint64_t n_tensors = tensors_.size(), n_kv = kv_.size();
    write_raw(&n_tensors, 8);
    write_raw(&n_kv, 8);
    for (const auto& [key, v] : kv_) {
        write_string(key);
        const uint32_t t = static_cast<uint32_t>(v.type);
        write_raw(&t, 4);
        write_value(v);
    }
    for (const TensorInfo& ti : tensors_) {
        write_string(ti.name);
        const uint32_t n_dims = static_cast<uint32_t>(ti.shape.size());
        write_raw(&n_dims, 4);
        for (uint64_t d : ti.shape) write_raw(&d, 8);
        const uint32_t type = static_cast<uint32_t>(ti.type);
        write_raw(&type, 4);
        write_raw(&ti.offset, 8);
    }
    pad_to_alignment();
    data_start_ = pos_;
    current_ = 0;
    current_done_ = 0;
}

void Writer::write_data(const void* data, size_t n) {
    if (out_ == nullptr) throw Error("gguf writer: write_data before begin");
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        if (current_ >= tensors_.size()) throw Error(tmp_path_.string() + ": more tensor data than declared");
        const TensorInfo& ti = tensors_[current_];
        if (current_done_ == 0) {
            pad_to_alignment();
            if (pos_ - data_start_ != ti.offset) throw Error(tmp_path_.string() + ": internal offset mismatch");
        }
        const size_t take = static_cast<size_t>(std::min<uint64_t>(n, ti.n_bytes - current_done_));
        write_raw(p, take);
        p += take;
        n -= take;
        current_done_ += take;
        if (current_done_ == ti.n_bytes) {
            ++current_;
            current_done_ = 0;
        }
    }
}

void Writer::finish() {
    if (out_ == nullptr) throw Error("gguf writer: finish before begin");
    // Zero-byte tensors never see write_data; step over them.
    while (current_ < tensors_.size() && tensors_[current_].n_bytes == 0 && current_done_ == 0) ++current_;
    if (current_ != tensors_.size())
        throw Error(tmp_path_.string() + ": tensor '" + tensors_[current_].name + "' is missing data");
    if (std::fflush(out_) != 0 || std::ferror(out_)) throw Error(tmp_path_.string() + ": write failed");
    std::fclose(out_);
    out_ = nullptr;
    std::error_code ec;
    std::filesystem::rename(tmp_path_, path_, ec);
    if (ec) throw Error(path_.string() + ": cannot rename from " + tmp_path_.string() + ": " + ec.message());
}

void Writer::write_all(const std::filesystem::path& path, const std::vector<const void*>& data) {
    if (data.size() != tensors_.size())
        throw Error("gguf writer: data for " + std::to_string(data.size()) + " of " + std::to_string(tensors_.size()) +
                    " tensors");
    begin(path);
    for (size_t k = 0; k < data.size(); ++k) write_data(data[k], static_cast<size_t>(tensors_[k].n_bytes));
    finish();
}

}  // namespace strata::gguf
