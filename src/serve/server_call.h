// One HTTP request being answered by the Server (shared by server.cpp and the API route files).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "serve/connection.h"
#include "serve/generation.h"
#include "serve/server.h"
#include "serve/served_model.h"

namespace strata::serve {

// How long a route waits for its next generation event before it looks again whether the client
// is still there.
constexpr auto kPoll = std::chrono::milliseconds(250);

struct Server::Call {
    ApiKind api = ApiKind::OpenAI;
    std::string request_id;
    std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
    int64_t created = 0;  // unix seconds
    int fd = -1;          // the connection's socket, for peer_closed
    std::string client;   // admission fairness key
    std::string model;    // echoed to the client
    ChatRequest chat;
    CompletionRequest completion;
    PreparedChat prepared;
    std::unique_ptr<GenerationGroup> group;
    Admission::Ticket ticket;

    // Latency bookkeeping (metrics).
    bool saw_token = false;
    std::chrono::steady_clock::time_point last_token;
    int64_t generated = 0;

    bool gone() const { return peer_closed(fd); }
    // Latency metrics of an event that brought `tokens` tokens (TTFT, inter-token gaps, counts).
    void note_tokens(Metrics& m, int64_t tokens) {
        if (tokens <= 0) return;
        const auto now = std::chrono::steady_clock::now();
        if (!saw_token) m.ttft.observe(seconds_since_arrival());
        else m.inter_token.observe(std::chrono::duration<double>(now - last_token).count());
        saw_token = true;
        last_token = now;
        generated += tokens;
        m.generation_tokens += static_cast<uint64_t>(tokens);
    }
    double seconds_since_arrival() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count();
    }
};

// n random characters from [A-Za-z0-9] (ids of requests, messages, tool calls).
std::string random_id(size_t n);

}  // namespace strata::serve
