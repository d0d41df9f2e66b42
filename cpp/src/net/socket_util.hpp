// Small POSIX socket helpers shared by the TCP bootstrap and the socket
// transport: RAII file descriptors, listening/connecting with deadlines,
// whole-buffer send/recv through poll() that watch an abort check, interface
// address lookup (NCCLZ_SOCKET_IFNAME syntax) and random bytes.
//
// Every blocking helper waits with poll() in slices of at most kPollSliceMs,
// so a deadline or an abort is noticed within that time. Errors:
//   - deadline passed            -> ncclz::Timeout
//   - peer closed / reset        -> ncclz::RemoteError
//   - local system call failure  -> ncclz::SystemError
// and each message starts with the caller's `who` ("bootstrap rank 2 <- rank 0").
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ncclz::net {

using Clock = std::chrono::steady_clock;
/// Called between poll slices; throws (usually ncclz::Aborted) to stop waiting.
using AbortCheck = std::function<void()>;

constexpr int kPollSliceMs = 20;

/// Owning file descriptor (move-only; closes on destruction).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// A TCP endpoint as text: host is a numeric IPv4/IPv6 address or a name.
struct Endpoint {
  std::string host;
  int port = 0;
  /// "1.2.3.4:5" or "[::1]:5".
  std::string str() const;
};

/// Binds and listens (SO_REUSEADDR, non-blocking). host "" or "0.0.0.0" = all
/// IPv4 interfaces, "::" = all; port 0 = the kernel picks. `bufbytes` > 0 sets
/// SO_SNDBUF/SO_RCVBUF (inherited by accepted sockets). When bind fails,
/// *bind_errno (if given) receives its errno before the SystemError is thrown.
Fd listen_tcp(const std::string& host, int port, int bufbytes = 0, int backlog = 1024, int* bind_errno = nullptr);
Endpoint local_endpoint(int fd);
Endpoint peer_endpoint(int fd);
/// True for 0.0.0.0 / :: (an address peers cannot connect to).
bool is_wildcard(const std::string& host);

/// Connects (non-blocking socket, TCP_NODELAY). With retry_refused, a refused
/// or unreachable connection is retried with backoff until the deadline (the
/// listener may start later). Throws Timeout naming `who` and the endpoint.
/// `last_error`, when given, holds the last attempt's failure ("connect:
/// Connection refused") while it retries, for progress reports from check_abort.
Fd connect_tcp(const Endpoint& ep, Clock::time_point deadline, const AbortCheck& check_abort, bool retry_refused,
               const std::string& who, int bufbytes = 0, std::string* last_error = nullptr);
/// Accepts one connection (non-blocking, TCP_NODELAY), or returns an empty Fd
/// when the deadline passes (the caller words the Timeout).
Fd accept_tcp(int listen_fd, Clock::time_point deadline, const AbortCheck& check_abort);

/// One non-blocking accept for servers that must survive floods.
enum class AcceptResult {
  Accepted,  ///< *out holds the new connection (non-blocking, TCP_NODELAY)
  Empty,     ///< nothing is waiting
  Shed,      ///< out of file descriptors: one waiting connection was accepted
             ///< and closed at once (through a reserved descriptor), so the
             ///< backlog drains instead of waking poll() forever; the caller
             ///< should close idle connections of its own to make room
};
AcceptResult accept_or_shed(int listen_fd, Fd* out);

/// Raises this process's soft RLIMIT_NOFILE to its hard limit (at most 65536),
/// once; returns the soft limit in force. Servers hold one descriptor per
/// pending connection, and a low soft limit (1024 is common) is the easiest
/// way to starve them.
long raise_fd_limit();

/// Writes/reads exactly n bytes. EOF or reset -> RemoteError(who + ...).
void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const AbortCheck& check_abort,
              const std::string& who);
void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const AbortCheck& check_abort,
              const std::string& who);

void set_nonblocking(int fd);
void set_nodelay(int fd);
void set_buffers(int fd, int bytes);

/// The address of the first interface matching an NCCL-style spec:
/// "eth" (prefix), "=eth0" (exact), "^docker,lo" (anything but these
/// prefixes), comma-separated lists. IPv4 preferred over IPv6; loopback only
/// when it is named. nullopt when nothing matches.
std::optional<std::string> interface_address(const std::string& spec);

/// Constant-time comparison of two byte strings (the length is not secret).
bool equal_ct(const void* a, size_t na, const void* b, size_t nb);
/// Cryptographic random bytes (getrandom / /dev/urandom); throws SystemError.
void random_bytes(void* out, size_t n);
/// n random bytes as 2n lowercase hex digits.
std::string random_hex(size_t n);

/// "errno text" helper: "connect: Connection refused".
std::string errno_text(const char* call, int err);

}  // namespace ncclz::net
