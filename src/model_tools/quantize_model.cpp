#include "model_tools/quantize_model.h"

#include <algorithm>
#include <cstring>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model_tools/quant_mix.h"
#include "quant/dequant.h"
#include "quant/quantize.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace strata::model_tools {

QuantizeReport quantize_model(const std::filesystem::path& in, const std::filesystem::path& out, const QuantizeOptions& o) {
    const auto mix = quant_mix_from_name(o.mix);
    if (!mix) {
        std::string names;
        for (const auto& n : quant_mix_names()) names += (names.empty() ? "" : ", ") + n;
        throw Error("unknown quantisation type '" + o.mix + "' (known: " + names + ")");
    }
    if (std::filesystem::exists(out) && std::filesystem::exists(in) && std::filesystem::equivalent(in, out))
        throw Error(out.string() + ": output would overwrite the input");
    const auto f = gguf::File::open(in);
    const std::string arch = f->architecture();
    const int64_t n_layer = static_cast<int64_t>(f->opt_u64(arch + ".block_count").value_or(0));
    const bool tied = f->find_tensor("output.weight") == nullptr;

    gguf::Writer w;
    for (const auto& [key, v] : f->metadata()) {
        if (key == "general.alignment") continue;
        w.set(key, v);
    }
    w.set("general.file_type", gguf::Value::of_u32(mix->file_type));
    w.set("general.quantization_version", gguf::Value::of_u32(2));
    QuantizeReport rep;
    std::vector<quant::Type> types;
    for (const auto& t : f->tensors()) {
        std::vector<int64_t> shape(t.shape.begin(), t.shape.end());
        quant::Type target = tensor_type_for(*mix, t.name, shape, n_layer, tied, t.type);
        if (target != t.type && !quant::type_info(t.type).can_dequantize) target = t.type;  // integer tensors: keep
        if (target != t.type && !quant::can_quantize(target))
            throw Error("no quantiser for type " + std::string(quant::type_name(target)) + " (tensor " + t.name + ")");
        w.add_tensor(t.name, target, t.shape);
        types.push_back(target);
        rep.bytes_in += t.n_bytes;
        rep.quantized += target != t.type;
    }
    rep.tensors = f->tensors().size();

    w.begin(out);
    util::ThreadPool pool(o.threads);
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < types.size(); ++i) total += w.tensor_bytes(i);
    std::vector<uint8_t> chunk;
    std::vector<float> scratch;
    for (size_t ti = 0; ti < f->tensors().size(); ++ti) {
        const gguf::TensorInfo& t = f->tensors()[ti];
        const quant::Type target = types[ti];
        if (target == t.type) {
            w.write_data(t.data, static_cast<size_t>(t.n_bytes));  // unchanged: copied as is
            done += t.n_bytes;
        } else {
            const int64_t ne0 = static_cast<int64_t>(t.shape[0]);
            const int64_t n_rows = static_cast<int64_t>(t.n_rows());
            const size_t in_row = static_cast<size_t>(*quant::row_bytes(t.type, t.shape[0]));
            const size_t out_row = static_cast<size_t>(*quant::row_bytes(target, t.shape[0]));
            const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>((8u << 20) / out_row));
            scratch.resize(static_cast<size_t>(pool.size()) * static_cast<size_t>(ne0));
            for (int64_t r0 = 0; r0 < n_rows; r0 += per_chunk) {
                const int64_t nr = std::min(per_chunk, n_rows - r0);
                chunk.resize(static_cast<size_t>(nr) * out_row);
                pool.parallel_for(nr, [&](int64_t r, int thread) {
                    float* x = scratch.data() + static_cast<size_t>(thread) * static_cast<size_t>(ne0);
                    quant::dequantize_row(t.type, t.data + static_cast<size_t>(r0 + r) * in_row, x, ne0);
                    quant::quantize_row(target, x, chunk.data() + static_cast<size_t>(r) * out_row, ne0);
                });
                w.write_data(chunk.data(), chunk.size());
                done += chunk.size();
                if (o.progress) o.progress(done, total, t.name);
            }
        }
        rep.bytes_out += w.tensor_bytes(ti);
        if (o.progress) o.progress(done, total, t.name);
    }
    w.finish();
    return rep;
}

}  // namespace strata::model_tools
