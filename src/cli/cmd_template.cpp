// `strata template -m MODEL [--template FILE.jinja]`: renders the chat request on stdin
// ({"messages": [...], "tools": [...], "add_generation_prompt": true, ...}) with the model's
// chat template (or the given file) and writes the prompt to stdout, nothing else.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "template/chat_template.h"
#include "util/error.h"

namespace strata::cli {

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw Error(path + ": read failed");
    return ss.str();
}

// One line on stderr even when the template's own message spans several.
void report(const std::string& message) {
    std::string line;
    for (char c : message) line += c == '\n' ? std::string("\\n") : std::string(1, c);
    std::fprintf(stderr, "strata: error: %s\n", line.c_str());
}

int run_template(const std::string& model, const std::string& template_file) {
    try {
        if (model.empty() && template_file.empty()) throw Error("give a model (-m MODEL) or a template (--template FILE)");
        std::unique_ptr<gguf::File> file;
        if (!model.empty()) file = gguf::File::open(model);
        const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
        nlohmann::ordered_json request;
        try {
            request = nlohmann::ordered_json::parse(input);
        } catch (const nlohmann::json::exception& e) {
            throw Error(std::string("stdin: invalid JSON: ") + e.what());
        }
        tmpl::ChatTemplate chat = template_file.empty()
                                      ? tmpl::ChatTemplate::from_gguf(*file)
                                      : tmpl::ChatTemplate::from_source(read_file(template_file), template_file);
        if (!template_file.empty() && file) chat.set_special_tokens_from(*file);
        const std::string prompt = chat.render(request);
        std::fwrite(prompt.data(), 1, prompt.size(), stdout);
        std::fflush(stdout);
        return 0;
    } catch (const Error& e) {
        report(e.what());
        return 1;
    }
}

}  // namespace

void add_template_command(CLI::App& app, Runner& run) {
    struct Args {
        std::string model, template_file;
    };
    auto args = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand("template", "Render a chat request (JSON on stdin) with a chat template");
    cmd->add_option("-m,--model", args->model, "GGUF model whose tokenizer.chat_template (and special tokens) to use");
    cmd->add_option("--template", args->template_file, "Jinja template file to use instead of the model's");
    cmd->callback([&run, args] { run = [args] { return run_template(args->model, args->template_file); }; });
}

}  // namespace strata::cli
