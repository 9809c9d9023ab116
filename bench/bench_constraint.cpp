// JSON constrained decoding overhead: bench_constraint -m MODEL [--runs N] [--random-docs N] [--seed S]
//
// Builds the TokenIndex of the model's vocabulary, then for json_object and three schemas
// (flat object, nested with arrays and enums, tool-call arguments) drives a JsonConstraint
// token by token and times each step's allowed() (the mask) and accept():
//   document  the token ids of a realistic matching document, tokenized by the vocabulary
//   random    documents of random allowed tokens (seeded; end tokens preferred once allowed,
//             closing bytes preferred after 64 tokens)
// each with the mask cache on (the default) and off. Prints medians, p90 and max per token.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "runtime/json_constraint.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace strata;
using namespace strata::runtime;

struct Case {
    const char* name;
    const char* schema;    // nullptr: json_object
    const char* document;  // matches the schema
};

const Case kCases[] = {
    {"json_object", nullptr,
     R"({"name": "Ada Lovelace", "born": 1815, "fields": ["mathematics", "computing"], "notes": "Wrote the first )"
     R"(published algorithm for Babbage's Analytical Engine; she also foresaw music made by machines.", )"
     R"("address": {"city": "London", "country": "United Kingdom"}, "score": 9.75, "alive": false})"},
    {"flat",
     R"({"type":"object","properties":{"title":{"type":"string"},"year":{"type":"integer","minimum":1800,"maximum":2100},
      "rating":{"type":"number","minimum":0,"maximum":10},"summary":{"type":"string","maxLength":400},
      "watched":{"type":"boolean"}},"required":["title","year","rating","summary","watched"],"additionalProperties":false})",
     R"({"title": "The Left Hand of Darkness", "year": 1969, "rating": 8.5, "summary": "An envoy from a galactic union )"
     R"(visits a planet whose people have no fixed sex, and learns to trust a politician who is exiled for helping him.", )"
     R"("watched": true})"},
    {"nested", R"({"type":"object","properties":{
      "order_id":{"type":"string"},
      "status":{"enum":["pending","shipped","delivered","cancelled"]},
      "items":{"type":"array","minItems":1,"items":{"type":"object","properties":{
         "sku":{"type":"string","maxLength":16},"quantity":{"type":"integer","minimum":1},
         "tags":{"type":"array","items":{"enum":["fragile","gift","perishable","oversize"]}},
         "price":{"type":"number"}},"required":["sku","quantity","price"]}},
      "customer":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":["string","null"]}},
         "required":["name","email"]}},
      "required":["order_id","status","items","customer"]})",
     R"({"order_id": "A-10023", "status": "shipped", "items": [{"sku": "KB-104", "quantity": 2, "tags": ["fragile", "gift"], )"
     R"("price": 49.99}, {"sku": "MS-22", "quantity": 1, "price": 19.5}, {"sku": "CBL-USB-C", "quantity": 3, "tags": [], )"
     R"("price": 7.25}], "customer": {"name": "Grace Hopper", "email": null}})"},
    {"tool_call", R"({"type":"object","properties":{
      "location":{"type":"string","description":"City and country"},
      "unit":{"type":"string","enum":["celsius","fahrenheit"]},
      "days":{"type":"integer","minimum":1,"maximum":14},
      "include":{"type":"array","items":{"type":"string","enum":["temperature","precipitation","wind","humidity"]},"maxItems":4},
      "options":{"anyOf":[{"type":"null"},{"type":"object","properties":{"hourly":{"type":"boolean"},"lang":{"type":"string"}},
         "required":["hourly"]}]}},
      "required":["location","unit","days","include","options"],"additionalProperties":false})",
     R"({"location": "Zürich, Switzerland", "unit": "celsius", "days": 5, "include": ["temperature", "wind"], )"
     R"("options": {"hourly": false, "lang": "de"}})"},
};

struct Stats {
    std::vector<double> mask_us, accept_us;
    void add(double m, double a) {
        mask_us.push_back(m);
        accept_us.push_back(a);
    }
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void print(const char* what, const Stats& s) {
    std::printf("  %-22s %6zu steps  mask median %8.1f us  p90 %8.1f  max %8.1f   accept median %6.2f us\n", what,
                s.mask_us.size(), percentile(s.mask_us, 0.5), percentile(s.mask_us, 0.9), percentile(s.mask_us, 1.0),
                percentile(s.accept_us, 0.5));
}

double since_us(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

void run_document(JsonConstraint& c, const std::vector<int32_t>& ids, int32_t end_token, Stats& stats) {
    TokenMask mask;
    c.reset();
    for (size_t i = 0; i <= ids.size(); ++i) {
        const int32_t id = i < ids.size() ? ids[i] : end_token;
        auto t0 = Clock::now();
        c.allowed(mask);
        const double m = since_us(t0);
        if (!mask.allows(id)) throw Error("document token " + std::to_string(i) + " is not in the mask");
        t0 = Clock::now();
        c.accept(id);
        stats.add(m, since_us(t0));
    }
}

void run_random(JsonConstraint& c, const TokenIndex& index, std::mt19937& rng, Stats& stats, size_t& total_tokens) {
    TokenMask mask;
    c.reset();
    std::vector<int32_t> allowed, closing;
    for (size_t step = 0; step < 4096; ++step) {
        auto t0 = Clock::now();
        c.allowed(mask);
        const double m = since_us(t0);
        if (c.complete()) {
            const int32_t end = index.end_tokens().front();
            t0 = Clock::now();
            c.accept(end);
            stats.add(m, since_us(t0));
            ++total_tokens;
            return;
        }
        allowed.clear();
        closing.clear();
        for (size_t w = 0; w < mask.words.size(); ++w)
            for (uint64_t bits = mask.words[w]; bits; bits &= bits - 1) {
                const auto id = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
                allowed.push_back(id);
                const std::string& b = index.bytes(id);
                if (step > 64 && b.find_first_of("\"}]") != std::string::npos) closing.push_back(id);
            }
        const std::vector<int32_t>& pool = !closing.empty() && rng() % 2 ? closing : allowed;
        const int32_t id = pool[rng() % pool.size()];
        t0 = Clock::now();
        c.accept(id);
        stats.add(m, since_us(t0));
        ++total_tokens;
    }
}

int usage() {
    std::fprintf(stderr, "usage: bench_constraint -m MODEL [--runs N] [--random-docs N] [--seed S]\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::string model;
    int runs = 5, random_docs = 20;
    uint32_t seed = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-m" && i + 1 < argc) model = argv[++i];
        else if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
        else if (a == "--random-docs" && i + 1 < argc) random_docs = std::max(0, std::atoi(argv[++i]));
        else if (a == "--seed" && i + 1 < argc) seed = static_cast<uint32_t>(std::atoi(argv[++i]));
        else return usage();
    }
    if (model.empty()) return usage();
    try {
        const auto f = gguf::File::open(model);
        const auto tok = tokenizer::Tokenizer::from_gguf(*f);
        auto t0 = Clock::now();
        const auto index = std::make_shared<TokenIndex>(*tok);
        std::printf("vocabulary %d tokens; TokenIndex built in %.0f ms (trie %u nodes, non-plain trie %u nodes)\n",
                    tok->n_vocab(), since_us(t0) / 1000, index->all_tokens().size(), index->non_plain_tokens().size());
        if (index->end_tokens().empty()) throw Error(model + ": the vocabulary has no end token");
        const int32_t end_token = index->end_tokens().front();

        for (const Case& cs : kCases) {
            t0 = Clock::now();
            const auto grammar = cs.schema ? JsonGrammar::from_schema_text(cs.schema) : JsonGrammar::any_json_object();
            const double compile_us = since_us(t0);
            const std::vector<int32_t> ids = tok->encode(cs.document, false);
            std::printf("%s: schema compiled in %.0f us; document %zu bytes, %zu tokens\n", cs.name, compile_us,
                        std::string(cs.document).size(), ids.size());
            for (const bool cached : {true, false}) {
                JsonConstraint c(grammar, index);
                if (!cached) c.set_mask_cache_size(0);
                Stats doc, rnd;
                for (int r = 0; r < runs; ++r) run_document(c, ids, end_token, doc);
                std::mt19937 rng(seed);
                size_t tokens = 0;
                for (int d = 0; d < random_docs; ++d) run_random(c, *index, rng, rnd, tokens);
                print(cached ? "document (cache on)" : "document (cache off)", doc);
                print(cached ? "random (cache on)" : "random (cache off)", rnd);
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_constraint: %s\n", e.what());
        return 1;
    }
    return 0;
}
