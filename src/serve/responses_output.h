// A Responses API answer built from one generation's parsed output (OutputEvents): its output
// items (reasoning, message, function_call) and the stream events that announce them, in the
// order the API publishes. The whole answer and the stream are made by the same builder, so a
// streamed response's items are the whole one's.
//
// Events per item (without sequence_number; the writer numbers them):
//   reasoning      output_item.added, [reasoning_summary_part.added], content_part.added
//                  (reasoning_text), {[reasoning_summary_text.delta], reasoning_text.delta}...,
//                  [reasoning_summary_text.done, reasoning_summary_part.done], reasoning_text.done,
//                  content_part.done, output_item.done     ([...]: when a summary was asked for;
//                  the summary is the reasoning itself: there is no summarizer)
//   message        output_item.added, content_part.added (output_text), output_text.delta...,
//                  output_text.done, content_part.done, output_item.done
//   function_call  output_item.added, function_call_arguments.delta..., function_call_arguments.done,
//                  output_item.done
// An item cut by the end of generation (max_output_tokens) ends with status "incomplete". A call
// whose markup broke off after its name had gone out ends "incomplete" too, and its raw text
// follows as a message (it cannot be taken back from a stream).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/usage.h"
#include "serve/output_parser.h"

namespace strata::serve {

using ojson = nlohmann::ordered_json;

class ResponseOutput {
public:
    struct Options {
        bool summary = false;  // reasoning goes out as summary_text too
        // Set: reasoning items carry encrypted_content = encrypt(reasoning text).
        std::function<std::string(const std::string&)> encrypt;
        // A fresh id with the prefix ("rs_", "msg_", "fc_", "call_").
        std::function<std::string(const std::string& prefix)> make_id;
    };
    explicit ResponseOutput(Options options);

    // The events of one parsed output event, appended to `events`.
    void add(const OutputEvent& e, std::vector<ojson>& events);
    // The end of generation: the open item closes (`cut`: it was cut by max_output_tokens).
    void finish(bool cut, std::vector<ojson>& events);

    const ojson& items() const { return items_; }
    bool any_call() const { return calls_ > 0; }

private:
    enum class Open { None, Reasoning, Message, Call };
    void close(bool cut, std::vector<ojson>& events);
    void open_item(Open kind, ojson item, std::vector<ojson>& events);
    ojson& current() { return items_.back(); }
    size_t index() const { return items_.size() - 1; }

    Options options_;
    ojson items_ = ojson::array();
    Open open_ = Open::None;
    std::string text_;  // the open item's text (reasoning, message) or arguments (call)
    int calls_ = 0;
};

// The usage object of a response.
ojson responses_usage(const runtime::Usage& u);

}  // namespace strata::serve
