// `strata gguf info FILE [--json]` and `strata gguf dequant FILE TENSOR OUT.f32`.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "quant/dequant.h"
#include "quant/quantize.h"
#include "util/error.h"

namespace strata::cli {

namespace {

using json = nlohmann::ordered_json;  // keeps metadata in file order

constexpr size_t kArrayHead = 16;  // arrays longer than this are summarised in info output

json value_to_json(const gguf::Value& v, bool summarise) {
    using gguf::ValueType;
    switch (v.type) {
        case ValueType::BOOL: return v.u != 0;
        case ValueType::STRING: return v.s;
        case ValueType::F32:
        case ValueType::F64: return v.f;
        case ValueType::ARRAY: {
            const size_t n = v.array_size();
            const size_t shown = summarise ? std::min(n, kArrayHead) : n;
            json items = json::array();
            for (size_t k = 0; k < shown; ++k) {
                if (!v.arr_u.empty()) items.push_back(v.elem_type == ValueType::BOOL ? json(v.arr_u[k] != 0) : json(v.arr_u[k]));
                else if (!v.arr_i.empty()) items.push_back(v.arr_i[k]);
                else if (!v.arr_f.empty()) items.push_back(v.arr_f[k]);
                else if (!v.arr_s.empty()) items.push_back(v.arr_s[k]);
                else items.push_back(value_to_json(v.arr_v[k], summarise));
            }
            if (shown == n) return items;
            return json{{"array_of", gguf::value_type_name(v.elem_type)}, {"count", n}, {"head", items}};
        }
        default:
            if (gguf::is_integer(v.type) &&
                (v.type == ValueType::I8 || v.type == ValueType::I16 || v.type == ValueType::I32 || v.type == ValueType::I64))
                return v.i;
            return v.u;
    }
}

std::string shape_text(const std::vector<uint64_t>& shape) {
    std::string s;
    for (size_t k = 0; k < shape.size(); ++k) s += (k ? " x " : "") + std::to_string(shape[k]);
    return s;
}

int run_info(const std::string& path, bool as_json, bool full) {
    const auto f = gguf::File::open(path);
    uint64_t total_bytes = 0;
    for (const auto& t : f->tensors()) total_bytes += t.n_bytes;
    if (as_json) {
        json meta = json::object();
        for (const auto& [key, v] : f->metadata()) meta[key] = value_to_json(v, !full);
        json tensors = json::array();
        for (const auto& t : f->tensors()) {
            tensors.push_back({{"name", t.name},
                               {"type", quant::type_name(t.type)},
                               {"shape", t.shape},
                               {"bytes", t.n_bytes},
                               {"offset", t.offset},
                               {"file", t.file_index}});
        }
        json out = {{"path", path},
                    {"version", f->version()},
                    {"alignment", f->alignment()},
                    {"files", f->n_files()},
                    {"architecture", f->architecture()},
                    {"n_tensors", f->tensors().size()},
                    {"tensor_bytes", total_bytes},
                    {"metadata", meta},
                    {"tensors", tensors}};
        // Strings in files are not guaranteed UTF-8: replace bad bytes rather than fail.
        std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
        return 0;
    }
    std::printf("%s: GGUF v%u, %zu file(s), alignment %llu, architecture %s\n", path.c_str(), f->version(), f->n_files(),
                static_cast<unsigned long long>(f->alignment()),
                f->architecture().empty() ? "(none)" : f->architecture().c_str());
    std::printf("\nmetadata (%zu keys)\n", f->metadata().size());
    for (const auto& [key, v] : f->metadata()) {
        const char* type = v.type == gguf::ValueType::ARRAY ? "array" : gguf::value_type_name(v.type);
        std::printf("  %-44s %-7s %s\n", key.c_str(), type, v.to_display(full ? SIZE_MAX : 8).c_str());
    }
    std::printf("\ntensors (%zu, %.2f MiB)\n", f->tensors().size(), static_cast<double>(total_bytes) / (1 << 20));
    std::printf("  %-48s %-8s %-26s %14s %14s\n", "name", "type", "shape", "bytes", "offset");
    for (const auto& t : f->tensors()) {
        std::printf("  %-48s %-8s %-26s %14llu %14llu\n", t.name.c_str(), quant::type_name(t.type), shape_text(t.shape).c_str(),
                    static_cast<unsigned long long>(t.n_bytes), static_cast<unsigned long long>(t.offset));
    }
    return 0;
}

int run_dequant(const std::string& path, const std::string& tensor_name, const std::string& out_path) {
    const auto f = gguf::File::open(path);
    const gguf::TensorInfo& t = f->tensor(tensor_name);
    const auto& info = quant::type_info(t.type);
    if (!info.can_dequantize)
        throw Error(path + ": tensor '" + tensor_name + "' has type " + info.name + ", which has no float dequantisation");
    const uint64_t row = t.shape[0];
    const uint64_t row_bytes = *quant::row_bytes(t.type, row);
    const std::string tmp = out_path + ".tmp";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(out_path + ": cannot create");
    std::vector<float> buf(row);
    for (uint64_t r = 0; r < t.n_rows(); ++r) {
        quant::dequantize_row(t.type, t.data + r * row_bytes, buf.data(), static_cast<int64_t>(row));
        out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(row * sizeof(float)));
    }
    out.close();
    if (!out) throw Error(out_path + ": write failed");
    std::filesystem::rename(tmp, out_path);
    std::fprintf(stderr, "%s: %llu values (%s, shape %s) written to %s\n", tensor_name.c_str(),
                 static_cast<unsigned long long>(t.n_elements()), info.name, shape_text(t.shape).c_str(), out_path.c_str());
    return 0;
}

// Writes a small GGUF made entirely by our own code: model-like metadata plus one weight matrix
// per type our quantiser supports, all from the same random source, and reports each type's
// size and round-trip error. The demo inspects the result with `gguf info`.
int run_sample(const std::string& out_path, uint64_t rows, uint64_t cols, uint32_t seed) {
    const std::vector<quant::Type> types = {quant::Type::F32,    quant::Type::F16,   quant::Type::BF16, quant::Type::Q8_0,
                                            quant::Type::Q4_0,   quant::Type::Q6_K,  quant::Type::Q5_K, quant::Type::Q4_K,
                                            quant::Type::IQ4_NL, quant::Type::IQ4_XS};
    if (cols == 0 || cols % 256 != 0) throw Error("--cols must be a positive multiple of 256");
    if (rows == 0 || rows > (1u << 16)) throw Error("--rows must be between 1 and 65536");
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> src(rows * cols);
    for (float& v : src) v = normal(rng) * (rng() % 101 == 0 ? 10.0f : 1.0f);  // weights with outliers

    gguf::Writer w;
    w.set("general.architecture", gguf::Value::of_string("strata-sample"));
    w.set("general.name", gguf::Value::of_string("Strata quantisation sample"));
    w.set("strata-sample.rows", gguf::Value::of_u64(rows));
    w.set("strata-sample.cols", gguf::Value::of_u64(cols));
    w.set("strata-sample.seed", gguf::Value::of_u32(seed));
    std::vector<std::string> names;
    for (quant::Type t : types) names.push_back(quant::type_name(t));
    w.set("strata-sample.types", gguf::Value::of_strings(names));

    std::vector<std::vector<uint8_t>> blobs;
    std::fprintf(stderr, "%-8s %12s %8s %12s\n", "type", "bytes", "bits/w", "rel. RMS err");
    double src_sq = 0;
    for (float v : src) src_sq += static_cast<double>(v) * v;
    for (quant::Type t : types) {
        const uint64_t row_bytes = *quant::row_bytes(t, cols);
        std::vector<uint8_t> blob(row_bytes * rows);
        std::vector<float> back(cols);
        double err_sq = 0;
        for (uint64_t r = 0; r < rows; ++r) {
            quant::quantize_row(t, src.data() + r * cols, blob.data() + r * row_bytes, static_cast<int64_t>(cols));
            quant::dequantize_row(t, blob.data() + r * row_bytes, back.data(), static_cast<int64_t>(cols));
            for (uint64_t c = 0; c < cols; ++c) {
                const double d = static_cast<double>(back[c]) - src[r * cols + c];
                err_sq += d * d;
            }
        }
        w.add_tensor(std::string("weight.") + quant::type_name(t), t, {cols, rows});
        std::fprintf(stderr, "%-8s %12zu %8.3f %12.5f\n", quant::type_name(t), blob.size(),
                     8.0 * static_cast<double>(blob.size()) / static_cast<double>(rows * cols), std::sqrt(err_sq / src_sq));
        blobs.push_back(std::move(blob));
    }
    std::vector<const void*> data;
    for (const auto& b : blobs) data.push_back(b.data());
    w.write_all(out_path, data);
    std::fprintf(stderr, "wrote %s\n", out_path.c_str());
    return 0;
}

}  // namespace

void add_gguf_commands(CLI::App& app, Runner& run) {
    CLI::App* gguf = app.add_subcommand("gguf", "Inspect, dequantise and write GGUF files");
    gguf->require_subcommand(1);

    struct InfoArgs {
        std::string file;
        bool json = false, full = false;
    };
    auto info_args = std::make_shared<InfoArgs>();
    CLI::App* info = gguf->add_subcommand("info", "Print metadata and the tensor table of a GGUF file");
    info->add_option("FILE", info_args->file, "GGUF file (any part of a split model)")->required();
    info->add_flag("--json", info_args->json, "Print one JSON object");
    info->add_flag("--full", info_args->full, "Do not summarise long arrays");
    info->callback(
        [&run, info_args] { run = [info_args] { return run_info(info_args->file, info_args->json, info_args->full); }; });

    struct DequantArgs {
        std::string file, tensor, out;
    };
    auto dq_args = std::make_shared<DequantArgs>();
    CLI::App* dq = gguf->add_subcommand("dequant", "Write one tensor as little-endian float32");
    dq->add_option("FILE", dq_args->file, "GGUF file")->required();
    dq->add_option("TENSOR", dq_args->tensor, "tensor name")->required();
    dq->add_option("OUT", dq_args->out, "output file (.f32)")->required();
    dq->callback([&run, dq_args] { run = [dq_args] { return run_dequant(dq_args->file, dq_args->tensor, dq_args->out); }; });
    struct SampleArgs {
        std::string out;
        uint64_t rows = 64, cols = 4096;
        uint32_t seed = 1;
    };
    auto sample_args = std::make_shared<SampleArgs>();
    CLI::App* sample = gguf->add_subcommand("sample", "Write a sample GGUF with one random matrix per quant type");
    sample->add_option("OUT", sample_args->out, "output .gguf")->required();
    sample->add_option("--rows", sample_args->rows, "matrix rows")->capture_default_str();
    sample->add_option("--cols", sample_args->cols, "matrix columns (multiple of 256)")->capture_default_str();
    sample->add_option("--seed", sample_args->seed, "random seed")->capture_default_str();
    sample->callback([&run, sample_args] {
        run = [sample_args] { return run_sample(sample_args->out, sample_args->rows, sample_args->cols, sample_args->seed); };
    });
}

}  // namespace strata::cli
