#include "serve/responses_output.h"

namespace strata::serve {

ResponseOutput::ResponseOutput(Options options) : options_(std::move(options)) {}

void ResponseOutput::open_item(Open kind, ojson item, std::vector<ojson>& events) {
    close(false, events);
    items_.push_back(std::move(item));
    open_ = kind;
    text_.clear();
    const std::string id = current()["id"];
    events.push_back({{"type", "response.output_item.added"}, {"output_index", index()}, {"item", current()}});
    if (kind == Open::Reasoning) {
        if (options_.summary)
            events.push_back({{"type", "response.reasoning_summary_part.added"},
                              {"item_id", id},
                              {"output_index", index()},
                              {"summary_index", 0},
                              {"part", {{"type", "summary_text"}, {"text", ""}}}});
        events.push_back({{"type", "response.content_part.added"},
                          {"item_id", id},
                          {"output_index", index()},
                          {"content_index", 0},
                          {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
    } else if (kind == Open::Message) {
        events.push_back(
            {{"type", "response.content_part.added"},
             {"item_id", id},
             {"output_index", index()},
             {"content_index", 0},
             {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}}}});
    }
}

void ResponseOutput::close(bool cut, std::vector<ojson>& events) {
    if (open_ == Open::None) return;
    ojson& item = current();
    const std::string id = item["id"];
    const char* status = cut ? "incomplete" : "completed";
    if (open_ == Open::Reasoning) {
        if (options_.summary) {
            events.push_back({{"type", "response.reasoning_summary_text.done"},
                              {"item_id", id},
                              {"output_index", index()},
                              {"summary_index", 0},
                              {"text", text_}});
            events.push_back({{"type", "response.reasoning_summary_part.done"},
                              {"item_id", id},
                              {"output_index", index()},
                              {"summary_index", 0},
                              {"part", {{"type", "summary_text"}, {"text", text_}}}});
            item["summary"] = ojson::array({{{"type", "summary_text"}, {"text", text_}}});
        }
        const ojson part = {{"type", "reasoning_text"}, {"text", text_}};
        events.push_back({{"type", "response.reasoning_text.done"},
                          {"item_id", id},
                          {"output_index", index()},
                          {"content_index", 0},
                          {"text", text_}});
        events.push_back({{"type", "response.content_part.done"},
                          {"item_id", id},
                          {"output_index", index()},
                          {"content_index", 0},
                          {"part", part}});
        item["content"] = ojson::array({part});
        if (options_.encrypt) item["encrypted_content"] = options_.encrypt(text_);
    } else if (open_ == Open::Message) {
        const ojson part = {
            {"type", "output_text"}, {"text", text_}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}};
        events.push_back({{"type", "response.output_text.done"},
                          {"item_id", id},
                          {"output_index", index()},
                          {"content_index", 0},
                          {"text", text_},
                          {"logprobs", ojson::array()}});
        events.push_back({{"type", "response.content_part.done"},
                          {"item_id", id},
                          {"output_index", index()},
                          {"content_index", 0},
                          {"part", part}});
        item["content"] = ojson::array({part});
    } else {
        item["arguments"] = text_;
        events.push_back({{"type", "response.function_call_arguments.done"},
                          {"item_id", id},
                          {"output_index", index()},
                          {"name", item["name"]},
                          {"arguments", text_}});
    }
    item["status"] = status;
    events.push_back({{"type", "response.output_item.done"}, {"output_index", index()}, {"item", item}});
    open_ = Open::None;
    text_.clear();
}

void ResponseOutput::add(const OutputEvent& e, std::vector<ojson>& events) {
    switch (e.kind) {
        case OutputEvent::Kind::Reasoning: {
            if (e.text.empty()) return;
            if (open_ != Open::Reasoning) {
                ojson item = {{"id", options_.make_id("rs_")}, {"type", "reasoning"}, {"summary", ojson::array()}};
                if (options_.encrypt) item["encrypted_content"] = nullptr;
                open_item(Open::Reasoning, std::move(item), events);
            }
            text_ += e.text;
            const std::string id = current()["id"];
            if (options_.summary)
                events.push_back({{"type", "response.reasoning_summary_text.delta"},
                                  {"item_id", id},
                                  {"output_index", index()},
                                  {"summary_index", 0},
                                  {"delta", e.text}});
            events.push_back({{"type", "response.reasoning_text.delta"},
                              {"item_id", id},
                              {"output_index", index()},
                              {"content_index", 0},
                              {"delta", e.text}});
            return;
        }
        case OutputEvent::Kind::Content: {
            if (e.text.empty()) return;
            if (open_ != Open::Message)
                open_item(Open::Message,
                          {{"id", options_.make_id("msg_")},
                           {"type", "message"},
                           {"status", "in_progress"},
                           {"role", "assistant"},
                           {"content", ojson::array()}},
                          events);
            text_ += e.text;
            events.push_back({{"type", "response.output_text.delta"},
                              {"item_id", current()["id"]},
                              {"output_index", index()},
                              {"content_index", 0},
                              {"delta", e.text},
                              {"logprobs", ojson::array()}});
            return;
        }
        case OutputEvent::Kind::ToolCallBegin:
            ++calls_;
            open_item(Open::Call,
                      {{"id", options_.make_id("fc_")},
                       {"type", "function_call"},
                       {"status", "in_progress"},
                       {"arguments", ""},
                       {"call_id", options_.make_id("call_")},
                       {"name", e.name}},
                      events);
            return;
        case OutputEvent::Kind::ToolCallArguments:
            if (e.text.empty() || open_ != Open::Call) return;
            text_ += e.text;
            events.push_back({{"type", "response.function_call_arguments.delta"},
                              {"item_id", current()["id"]},
                              {"output_index", index()},
                              {"delta", e.text}});
            return;
        case OutputEvent::Kind::ToolCallEnd:
            if (open_ != Open::Call) return;
            close(!e.complete, events);
            if (!e.complete && !e.truncated && !e.text.empty()) {
                // The call broke off: its raw text follows as answer text.
                OutputEvent text;
                text.kind = OutputEvent::Kind::Content;
                text.text = e.text;
                add(text, events);
            }
            return;
    }
}

void ResponseOutput::finish(bool cut, std::vector<ojson>& events) { close(cut, events); }

ojson responses_usage(const runtime::Usage& u) {
    return {{"input_tokens", u.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
            {"output_tokens", u.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

}  // namespace strata::serve
