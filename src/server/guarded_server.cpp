#include "server/guarded_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

namespace lucid::server {
namespace {

using Clock = std::chrono::steady_clock;

// A socket stream whose reads share one deadline (the request's receive deadline); writes are
// bounded per call by the write timeout only. Reads are buffered (cpp-httplib reads the request
// line and headers one byte at a time).
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int sock, std::chrono::milliseconds write_timeout)
      : sock_(sock), write_timeout_(write_timeout) {}

  void ArmDeadline(Clock::time_point deadline) {
    deadline_ = deadline;
    timed_out_ = false;
    wrote_ = false;
  }
  bool timed_out() const { return timed_out_; }
  bool wrote() const { return wrote_; }
  bool has_buffered() const { return off_ < len_; }

  // Waits for input until the deadline; false on timeout (setting timed_out_) or error.
  bool WaitReadable() const {
    if (has_buffered()) return true;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      if (left.count() <= 0) {
        timed_out_ = true;
        return false;
      }
      pollfd p{sock_, POLLIN, 0};
      const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
  }

  bool is_readable() const override { return WaitReadable(); }
  bool is_writable() const override {
    pollfd p{sock_, POLLOUT, 0};
    return poll(&p, 1, static_cast<int>(write_timeout_.count())) > 0 &&
           (p.revents & (POLLERR | POLLHUP)) == 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (!has_buffered()) {
      if (!WaitReadable()) return -1;
      ssize_t n;
      do {
        n = recv(sock_, buf_, sizeof(buf_), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, len_ - off_);
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  // Called once, before the first byte of the current request's response is written.
  void OnFirstWrite(std::function<void()> f) { on_first_write_ = std::move(f); }

  ssize_t write(const char* ptr, size_t size) override {
    if (on_first_write_) {
      on_first_write_();
      on_first_write_ = nullptr;
    }
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n > 0) wrote_ = true;
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(/*peer=*/true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(/*peer=*/false, ip, port);
  }
  socket_t socket() const override { return sock_; }

  void Address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    auto* sa = reinterpret_cast<sockaddr*>(&a);
    if ((peer ? getpeername(sock_, sa, &len) : getsockname(sock_, sa, &len)) != 0) return;
    char text[INET6_ADDRSTRLEN] = {0};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

 private:
  const int sock_;
  const std::chrono::milliseconds write_timeout_;
  Clock::time_point deadline_{};
  mutable bool timed_out_ = false;
  bool wrote_ = false;
  std::function<void()> on_first_write_;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

// What the route handlers and hooks may ask about the connection their thread serves.
struct ConnectionContext {
  std::string refusal;     // not admitted: why
  std::string over_limit;  // the current request got the short deadline: why
  bool close_after_response = false;
  const DeadlineStream* stream = nullptr;
};
thread_local ConnectionContext* t_connection = nullptr;

// An error response written directly (cpp-httplib writes none when the request line never came).
std::string RawError(int status, const char* reason, const char* type, const char* code,
                     const std::string& message) {
  const std::string body =
      nlohmann::json{
          {"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}}
          .dump();
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace

int64_t GuardedServer::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}
int64_t GuardedServer::refused_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}
int64_t GuardedServer::timed_out_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timed_out_;
}

void GuardedServer::RaiseListenBacklog(int backlog) {
  const socket_t s = svr_sock_;
  if (s != INVALID_SOCKET) ::listen(s, backlog);
}

std::string GuardedServer::CurrentRefusal() {
  return t_connection != nullptr ? t_connection->refusal : std::string();
}
std::string GuardedServer::CurrentOverLimit() {
  return t_connection != nullptr ? t_connection->over_limit : std::string();
}
void GuardedServer::CloseCurrentAfterResponse() {
  if (t_connection != nullptr) t_connection->close_after_response = true;
}
bool GuardedServer::CurrentRequestTimedOut() {
  return t_connection != nullptr && t_connection->stream != nullptr &&
         t_connection->stream->timed_out();
}

std::string GuardedServer::Admit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_ >= limits_.max_connections) {
    ++refused_;
    return "The server has too many open connections (at most " +
           std::to_string(limits_.max_connections) +
           "); retry later. /health and /metrics still answer.";
  }
  ++open_;
  return "";
}

void GuardedServer::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  --open_;
}

bool GuardedServer::TakeSlot(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t& n = slots_[peer];
  if (n >= limits_.max_connections_per_client) {
    if (n == 0) slots_.erase(peer);
    return false;
  }
  ++n;
  return true;
}

void GuardedServer::ReleaseSlot(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(peer);
  if (it != slots_.end() && --it->second <= 0) slots_.erase(it);
}

// cpp-httplib's keep-alive loop (process_server_socket) with the deadlines and the limits.
bool GuardedServer::process_and_close_socket(socket_t sock) {
  DeadlineStream strm(sock, std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::seconds(write_timeout_sec_) +
                                std::chrono::microseconds(write_timeout_usec_)));
  std::string peer;
  int port = 0;
  strm.get_remote_ip_and_port(peer, port);
  ConnectionContext ctx;
  ctx.refusal = Admit();
  ctx.stream = &strm;
  t_connection = &ctx;
  const bool admitted = ctx.refusal.empty();
  size_t left = admitted ? std::max<size_t>(keep_alive_max_count_, 1) : 1;
  bool ret = false;
  while (svr_sock_ != INVALID_SOCKET && left > 0) {
    bool slot = admitted && TakeSlot(peer);
    ctx.over_limit =
        !admitted || slot
            ? ""
            : "Too many connections from " + peer + " are waiting on requests (at most " +
                  std::to_string(limits_.max_connections_per_client) + " per client); retry later.";
    const bool full = admitted && slot;
    strm.ArmDeadline(Clock::now() + (full ? limits_.idle_timeout : limits_.over_limit_timeout));
    strm.OnFirstWrite([&] {
      if (slot) ReleaseSlot(peer);
      slot = false;
    });
    bool request = strm.WaitReadable();  // false: idle until the deadline, or an error
    bool connection_closed = false;
    if (request) {
      strm.ArmDeadline(Clock::now() +
                       (full ? limits_.receive_timeout : limits_.over_limit_timeout));
      ret = process_request(strm, /*close_connection=*/left == 1, connection_closed, nullptr);
    }
    if (slot) ReleaseSlot(peer);
    slot = false;
    strm.OnFirstWrite(nullptr);
    if (!request) break;
    if (strm.timed_out()) {
      std::lock_guard<std::mutex> lock(mu_);
      ++timed_out_;
    }
    if (strm.timed_out() && !strm.wrote()) {
      const std::string why = !ctx.refusal.empty() ? ctx.refusal : ctx.over_limit;
      const std::string r =
          why.empty() ? RawError(408, "Request Timeout", "invalid_request_error", "request_timeout",
                                 "The request did not arrive within the receive deadline.")
                      : RawError(503, "Service Unavailable", "service_unavailable",
                                 "too_many_connections", why);
      strm.write(r.data(), r.size());
      if (!ctx.over_limit.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        ++refused_;
      }
    }
    if (!ret || connection_closed || ctx.close_after_response || strm.timed_out()) break;
    --left;
  }
  t_connection = nullptr;
  if (admitted) Release();
  shutdown(sock, SHUT_RDWR);
  close(sock);
  return ret;
}

}  // namespace lucid::server
