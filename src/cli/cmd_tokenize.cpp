// `strata tokenize -m MODEL [--no-special] [--jsonl] [--threads N]`: UTF-8 text on stdin -> a JSON
// array of token ids on stdout; with --jsonl, each stdin line is a JSON string and each output
// line is its array. `strata detokenize -m MODEL`: a JSON array of ids on stdin -> the text.
#include <charconv>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::cli {

namespace {

std::string read_stdin() {
    std::string all;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) all.append(buf, n);
    if (std::ferror(stdin)) throw Error("cannot read standard input");
    return all;
}

void write_stdout(const std::string& s) {
    if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
        throw Error("cannot write standard output");
}

void append_ids_json(std::string& out, const std::vector<int32_t>& ids) {
    out += '[';
    char buf[16];
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ',';
        const auto r = std::to_chars(buf, buf + sizeof buf, ids[i]);
        out.append(buf, r.ptr);
    }
    out += "]\n";
}

std::unique_ptr<tokenizer::Tokenizer> load(const std::string& model) {
    const auto file = gguf::File::open(model);
    return tokenizer::Tokenizer::from_gguf(*file);
}

int run_tokenize(const std::string& model, bool no_special, bool jsonl, int threads) {
    const auto tok = load(model);
    const std::string input = read_stdin();
    const bool parse_special = !no_special;
    std::string out;
    if (!jsonl) {
        append_ids_json(out,
                        threads > 1 ? tok->encode_parallel(input, threads, parse_special) : tok->encode(input, parse_special));
        write_stdout(out);
        return 0;
    }
    size_t line_no = 0;
    for (size_t pos = 0; pos < input.size();) {
        size_t end = input.find('\n', pos);
        if (end == std::string::npos) end = input.size();
        const std::string_view line(input.data() + pos, end - pos);
        pos = end + 1;
        ++line_no;
        nlohmann::json value;
        try {
            value = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            throw Error("stdin line " + std::to_string(line_no) + ": not JSON (" + e.what() + ")");
        }
        if (!value.is_string())
            throw Error("stdin line " + std::to_string(line_no) + ": expected a JSON string, got " + value.type_name());
        const std::string& text = value.get_ref<const std::string&>();
        append_ids_json(out, threads > 1 ? tok->encode_parallel(text, threads, parse_special) : tok->encode(text, parse_special));
        if (out.size() > (1 << 20)) {
            write_stdout(out);
            out.clear();
        }
    }
    write_stdout(out);
    return 0;
}

int run_detokenize(const std::string& model) {
    const auto tok = load(model);
    const std::string input = read_stdin();
    nlohmann::json value;
    try {
        value = nlohmann::json::parse(input);
    } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("stdin: not JSON (") + e.what() + ")");
    }
    if (!value.is_array()) throw Error(std::string("stdin: expected a JSON array of token ids, got ") + value.type_name());
    std::vector<int32_t> ids;
    ids.reserve(value.size());
    for (size_t i = 0; i < value.size(); ++i) {
        const auto& v = value[i];
        if (!v.is_number_integer()) throw Error("stdin: element " + std::to_string(i) + " is not an integer token id");
        const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() < static_cast<uint64_t>(tok->n_vocab())
                                                     : (v.get<int64_t>() >= 0 && v.get<int64_t>() < tok->n_vocab());
        if (!in_range)
            throw Error("stdin: element " + std::to_string(i) + " (" + v.dump() + ") is outside the vocabulary (0.." +
                        std::to_string(tok->n_vocab() - 1) + ")");
        ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    write_stdout(tok->decode(ids));
    return 0;
}

}  // namespace

void add_tokenize_commands(CLI::App& app, Runner& run) {
    struct TokenizeArgs {
        std::string model;
        bool no_special = false, jsonl = false;
        int threads = 1;
    };
    auto targs = std::make_shared<TokenizeArgs>();
    CLI::App* tok = app.add_subcommand("tokenize", "Text on stdin -> JSON array of token ids on stdout");
    tok->add_option("-m,--model", targs->model, "GGUF model whose vocabulary to use")->required();
    tok->add_flag("--no-special", targs->no_special, "Treat special and added tokens in the text as plain text");
    tok->add_flag("--jsonl", targs->jsonl, "Each stdin line is a JSON string; print one id array per line");
    tok->add_option("--threads", targs->threads, "Encode long texts on N threads (same ids)")->check(CLI::Range(1, 256));
    tok->callback(
        [&run, targs] { run = [targs] { return run_tokenize(targs->model, targs->no_special, targs->jsonl, targs->threads); }; });

    auto dmodel = std::make_shared<std::string>();
    CLI::App* detok = app.add_subcommand("detokenize", "JSON array of token ids on stdin -> text on stdout");
    detok->add_option("-m,--model", *dmodel, "GGUF model whose vocabulary to use")->required();
    detok->callback([&run, dmodel] { run = [dmodel] { return run_detokenize(*dmodel); }; });
}

}  // namespace strata::cli
