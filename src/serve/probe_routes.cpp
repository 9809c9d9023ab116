// The probe endpoints other servers have (llama.cpp's names and shapes; docs/api.md, "Probes"):
//   POST /tokenize        {content, add_special?, parse_special?, with_pieces?} -> {tokens}
//   POST /detokenize      {tokens}                                              -> {content}
//   POST /apply-template  a chat completions body                              -> {prompt}
//   POST /v1/chat/completions/input_tokens  a chat completions body
//                         -> {object: "response.input_tokens", input_tokens}
// Authenticated like the other routes (the pre-routing handler), errors in OpenAI's shape, every
// size bounded (the body limit, RequestLimits::max_text_bytes for the text, kMaxProbeTokens ids).
#include "net/http.h"

#include "serve/api_shapes.h"
#include "serve/server_call.h"
#include "tokenizer/tokenizer.h"

namespace strata::serve {

using nlohmann::json;

namespace {

constexpr size_t kMaxProbeTokens = size_t{1} << 22;  // ids in one /detokenize body

bool optional_bool(const ojson& body, const char* key, bool fallback) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw ApiError(400, std::string(key) + ": expected a boolean", key);
    return it->get<bool>();
}

// A token's text for with_pieces: the string when its bytes are valid UTF-8, else the bytes.
json piece_of(const std::string& bytes) {
    const json as_text = bytes;
    try {
        (void)as_text.dump();
        return as_text;
    } catch (const json::exception&) {
        json list = json::array();
        for (unsigned char c : bytes) list.push_back(static_cast<int>(c));
        return list;
    }
}

}  // namespace

void Server::probe(const net::Request& req, net::Response& res, Probe what) {
    Call call;
    call.request_id = res.get_header_value("x-request-id");
    try {
        const ojson body = parse_json_body(req.body);
        if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
        const tokenizer::Tokenizer& tok = model_->tokenizer();
        switch (what) {
            case Probe::Tokenize: {
                const auto it = body.find("content");
                if (it == body.end()) throw ApiError(400, "content: missing", "content");
                if (!it->is_string()) throw ApiError(400, "content: expected a string", "content");
                const std::string& text = it->get_ref<const std::string&>();
                if (static_cast<int64_t>(text.size()) > options_.limits.max_text_bytes)
                    throw ApiError(413, "content: longer than " + std::to_string(options_.limits.max_text_bytes) + " bytes",
                                   "content");
                std::vector<int32_t> ids;
                if (optional_bool(body, "add_special", false) && tok.add_bos() && tok.bos() >= 0) ids.push_back(tok.bos());
                tok.encode_append(text, ids, optional_bool(body, "parse_special", true));
                json tokens = json::array();
                const bool pieces = optional_bool(body, "with_pieces", false);
                for (const int32_t id : ids)
                    tokens.push_back(pieces ? json{{"id", id}, {"piece", piece_of(tok.token_bytes(id))}} : json(id));
                res.set_content(dump_json(json{{"tokens", std::move(tokens)}}), "application/json");
                return;
            }
            case Probe::Detokenize: {
                const auto it = body.find("tokens");
                if (it == body.end()) throw ApiError(400, "tokens: missing", "tokens");
                if (!it->is_array()) throw ApiError(400, "tokens: expected an array of token ids", "tokens");
                if (it->size() > kMaxProbeTokens)
                    throw ApiError(400, "tokens: more than " + std::to_string(kMaxProbeTokens) + " ids", "tokens");
                std::vector<int32_t> ids;
                ids.reserve(it->size());
                for (size_t i = 0; i < it->size(); ++i) {
                    const ojson& v = (*it)[i];
                    const std::string p = "tokens[" + std::to_string(i) + "]";
                    if (!v.is_number_integer()) throw ApiError(400, p + ": expected a token id", "tokens");
                    const int64_t id = v.get<int64_t>();
                    if (id < 0 || id >= tok.n_vocab())
                        throw ApiError(400,
                                       p + ": " + std::to_string(id) + " is not in the vocabulary (0 to " +
                                           std::to_string(tok.n_vocab() - 1) + ")",
                                       "tokens");
                    ids.push_back(static_cast<int32_t>(id));
                }
                res.set_content(dump_json(json{{"content", tok.decode(ids)}}), "application/json");
                return;
            }
            case Probe::ApplyTemplate:
            case Probe::InputTokens: {
                const ChatRequest r = parse_openai_chat(body, options_.limits);
                if (what == Probe::ApplyTemplate) {
                    res.set_content(dump_json(json{{"prompt", model_->prompt_text(r)}}), "application/json");
                } else {
                    res.set_content(
                        dump_json(json{{"object", "response.input_tokens"}, {"input_tokens", model_->count_tokens(r)}}),
                        "application/json");
                }
                return;
            }
        }
    } catch (const ApiError& e) {
        reply_error(call, res, e);
    }
}

}  // namespace strata::serve
