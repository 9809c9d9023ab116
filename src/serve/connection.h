// What cpp-httplib does not tell a handler: whether the client is still there. A handler that
// waits (in the admission queue, for a non-streamed answer, during a long prefill) checks it so
// that a client that went away cancels its work at once rather than at the next write.
#pragma once

#include <string>

namespace strata::serve {

// The socket of the connection with these endpoints (from httplib::Request's local/remote
// address and port), or -1. Found by matching the process's sockets: a TCP connection is the
// only one with its four-tuple.
int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

// True when the peer has closed (or reset) the connection. Pipelined bytes waiting to be read
// are not a close. `fd` < 0: never closed (unknown).
bool peer_closed(int fd);

// cpp-httplib 0.11 listens with a backlog of 5 (built into Debian's library): a burst of new
// connections (64 clients at once) overflows it and the kernel drops some of them. listen() again
// on the bound socket raises the backlog. Returns false when no listening socket on `port` was found.
bool raise_listen_backlog(int port, int backlog);

}  // namespace strata::serve
