// GuardedServer: cpp-httplib's Server with the connection handling that keeps slow or greedy
// clients from denying service (issue 26, item 1). cpp-httplib serves one connection per pool
// thread and bounds each read (read_timeout), not a whole request, so a client that sent one byte
// every few seconds held a thread for as long as it liked. This class replaces cpp-httplib's
// per-connection loop (Server::process_and_close_socket, a virtual it provides for SSLServer) and
// keeps the rest of cpp-httplib (parsing, routing, writing):
//   - Idle and receive deadlines: a connection waits at most `idle_timeout` for the first byte of
//     its next request; from that byte the whole request (request line, headers, body) must
//     arrive within `receive_timeout`, else it gets 408 "request_timeout" and is closed. Writing
//     a response (streams included) is bounded per write by the write timeout only.
//   - Per client: at most `max_connections_per_client` connections of one peer address may be
//     waiting for or receiving a request, or waiting for its response, with those deadlines. One
//     more gets `over_limit_timeout` for both: a request sent at once (any ordinary client) is
//     served as usual; a slow one gets 503 "too_many_connections".
//   - In total: at most `max_connections` connections are admitted. One more may send a single
//     request within `over_limit_timeout`: /health and /metrics are answered as usual (probes keep
//     working under load), every other route gets 503 "too_many_connections"; then it is closed.
// The thread pool (new_task_queue) must have more threads than max_connections, so that refused
// connections find one. Thread-safety: all public methods; the Current* functions describe the
// connection that the calling HTTP thread serves (meant for route handlers and hooks).
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace lucid::server {

struct ConnectionLimits {
  std::chrono::milliseconds idle_timeout{5000};
  std::chrono::milliseconds receive_timeout{10000};
  std::chrono::milliseconds over_limit_timeout{250};
  int64_t max_connections = 272;
  int64_t max_connections_per_client = 136;
};

class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(ConnectionLimits limits) : limits_(limits) {}

  const ConnectionLimits& limits() const { return limits_; }
  // After bind_to_port: raises the listen backlog from cpp-httplib's 5 (a burst of connections
  // beyond it waited for SYN retransmits, a second or more each).
  void RaiseListenBacklog(int backlog);
  int64_t open_connections() const;
  int64_t refused_connections() const;  // since start: refused at admission
  int64_t timed_out_requests() const;   // since start: past the receive deadline

  // Why the calling thread's connection was refused admission ("" when it was admitted, or when
  // the caller is no HTTP thread).
  static std::string CurrentRefusal();
  // Why the calling thread's request got the short deadline ("" when it did not).
  static std::string CurrentOverLimit();
  // Closes the calling thread's connection after the response being prepared (for a request whose
  // body is left unread).
  static void CloseCurrentAfterResponse();
  // True when the calling thread's request ran past its receive deadline.
  static bool CurrentRequestTimedOut();

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Counts the connection in, or returns why it is refused.
  std::string Admit();
  void Release();
  // Takes one of the peer's slots (true), or returns false when it has none left.
  bool TakeSlot(const std::string& peer);
  void ReleaseSlot(const std::string& peer);

  const ConnectionLimits limits_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, int64_t> slots_;  // per peer address
  int64_t open_ = 0;
  int64_t refused_ = 0;
  int64_t timed_out_ = 0;
};

}  // namespace lucid::server
