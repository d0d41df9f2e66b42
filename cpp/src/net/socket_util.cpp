#include "net/socket_util.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "ncclz/error.hpp"

namespace ncclz::net {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errno_text(const char* call, int err) { return std::string(call) + ": " + std::strerror(err); }

std::string Endpoint::str() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

namespace {

int poll_slice_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left + 1, kPollSliceMs));
}

Endpoint endpoint_of(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  Endpoint ep;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    ep.port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    ep.port = ntohs(a->sin6_port);
  }
  ep.host = buf;
  return ep;
}

// Resolves host:port to one socket address (numeric or via DNS).
sockaddr_storage resolve(const std::string& host, int port, bool passive, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (passive && h.empty()) h = "0.0.0.0";
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(h.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw InvalidArgument("cannot resolve address '" + host + "': " + gai_strerror(rc) +
                          " (check MASTER_ADDR / NCCLZ_SOCKET_IFNAME)");
  }
  // Prefer IPv4 when a name resolves to both.
  addrinfo* pick = res;
  for (addrinfo* p = res; p; p = p->ai_next) {
    if (p->ai_family == AF_INET) {
      pick = p;
      break;
    }
  }
  sockaddr_storage ss{};
  std::memcpy(&ss, pick->ai_addr, pick->ai_addrlen);
  *len = pick->ai_addrlen;
  freeaddrinfo(res);
  return ss;
}

}  // namespace

void set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    throw SystemError(errno_text("fcntl(O_NONBLOCK)", errno));
  }
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_buffers(int fd, int bytes) {
  if (bytes <= 0) return;
  // Best effort: the kernel caps these at net.core.{w,r}mem_max.
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

bool is_wildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

Fd listen_tcp(const std::string& host, int port, int bufbytes, int backlog, int* bind_errno) {
  socklen_t len = 0;
  sockaddr_storage ss = resolve(host, port, /*passive=*/true, &len);
  Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw SystemError(errno_text("socket", errno));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  set_buffers(fd.get(), bufbytes);
  Endpoint ep{host.empty() ? "0.0.0.0" : host, port};
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    int e = errno;
    if (bind_errno) *bind_errno = e;
    std::string hint = e == EADDRINUSE      ? " (another process, e.g. another job or torchrun's agent store, already "
                                              "listens there: choose another MASTER_PORT or use make_unique_id)"
                       : e == EADDRNOTAVAIL ? " (this host has no such address: check MASTER_ADDR / "
                                              "NCCLZ_SOCKET_IFNAME)"
                                            : "";
    throw SystemError("cannot listen on " + ep.str() + ": " + errno_text("bind", e) + hint);
  }
  if (::listen(fd.get(), backlog) != 0) {
    throw SystemError("cannot listen on " + ep.str() + ": " + errno_text("listen", errno));
  }
  set_nonblocking(fd.get());
  return fd;
}

Endpoint local_endpoint(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    throw SystemError(errno_text("getsockname", errno));
  }
  return endpoint_of(ss);
}

Endpoint peer_endpoint(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return Endpoint{"?", 0};
  return endpoint_of(ss);
}

Fd connect_tcp(const Endpoint& ep, Clock::time_point deadline, const AbortCheck& check_abort, bool retry_refused,
               const std::string& who, int bufbytes, std::string* last_error_out) {
  socklen_t len = 0;
  sockaddr_storage ss = resolve(ep.host, ep.port, /*passive=*/false, &len);
  auto backoff = std::chrono::milliseconds(5);
  std::string last_error = "no attempt";
  for (;;) {
    if (check_abort) check_abort();
    Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throw SystemError(who + ": " + errno_text("socket", errno));
    set_buffers(fd.get(), bufbytes);
    set_nonblocking(fd.get());
    int err = 0;
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        err = ETIMEDOUT;
        while (Clock::now() < deadline) {
          if (check_abort) check_abort();
          pollfd p{fd.get(), POLLOUT, 0};
          int rc = ::poll(&p, 1, poll_slice_ms(deadline));
          if (rc < 0 && errno != EINTR) {
            err = errno;
            break;
          }
          if (rc > 0) {
            socklen_t el = sizeof err;
            getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
            break;
          }
        }
      }
    }
    if (err == 0) {
      set_nodelay(fd.get());
      return fd;
    }
    last_error = errno_text("connect", err);
    if (last_error_out) *last_error_out = last_error;
    bool transient = err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
                     err == ECONNRESET || err == EAGAIN || err == EINTR;
    if (!transient || !retry_refused) {
      throw RemoteError(who + ": cannot connect to " + ep.str() + ": " + last_error);
    }
    if (Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
  throw Timeout(who + ": could not connect to " + ep.str() + " before the deadline (last error: " + last_error +
                "); is the peer running and reachable at that address? (check MASTER_ADDR, "
                "MASTER_PORT, NCCLZ_SOCKET_IFNAME, firewalls, NCCLZ_TIMEOUT)");
}

Fd accept_tcp(int listen_fd, Clock::time_point deadline, const AbortCheck& check_abort) {
  for (;;) {
    if (check_abort) check_abort();
    int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0) {
      set_nodelay(c);
      return Fd(c);
    }
    int e = errno;
    if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR && e != ECONNABORTED) {
      throw SystemError(errno_text("accept", e));
    }
    if (Clock::now() >= deadline) return Fd();
    pollfd p{listen_fd, POLLIN, 0};
    ::poll(&p, 1, poll_slice_ms(deadline));
  }
}

namespace {

// A descriptor kept open for accept_or_shed: when the process runs out, it is
// closed to accept (and drop) one waiting connection, then taken again.
std::mutex g_reserve_mu;
int g_reserve_fd = -1;

int open_reserve() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

}  // namespace

AcceptResult accept_or_shed(int listen_fd, Fd* out) {
  {
    std::lock_guard<std::mutex> lk(g_reserve_mu);
    if (g_reserve_fd < 0) g_reserve_fd = open_reserve();
  }
  for (;;) {
    int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0) {
      set_nodelay(c);
      out->reset(c);
      return AcceptResult::Accepted;
    }
    int e = errno;
    if (e == EINTR || e == ECONNABORTED || e == EPROTO) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) return AcceptResult::Empty;
    if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
      std::lock_guard<std::mutex> lk(g_reserve_mu);
      if (g_reserve_fd >= 0) {
        ::close(g_reserve_fd);
        g_reserve_fd = -1;
      }
      int d = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (d >= 0) ::close(d);
      g_reserve_fd = open_reserve();
      return AcceptResult::Shed;
    }
    throw SystemError(errno_text("accept", e));
  }
}

long raise_fd_limit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY ? rlim_t(65536) : std::min<rlim_t>(rl.rlim_max, 65536);
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
      rl.rlim_cur = want;
      setrlimit(RLIMIT_NOFILE, &rl);  // best effort: a container may forbid it
    }
  });
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  return rl.rlim_cur == RLIM_INFINITY ? -1 : static_cast<long>(rl.rlim_cur);
}

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const AbortCheck& check_abort,
              const std::string& who) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    int e = errno;
    if (w < 0 && e != EAGAIN && e != EWOULDBLOCK && e != EINTR) {
      if (e == EPIPE || e == ECONNRESET) {
        throw RemoteError(who + ": the peer closed the connection (" + errno_text("send", e) +
                          "); it probably exited or failed: check its log");
      }
      throw SystemError(who + ": " + errno_text("send", e));
    }
    if (check_abort) check_abort();
    if (Clock::now() >= deadline) {
      throw Timeout(who + ": timed out sending " + std::to_string(n) +
                    " bytes (the peer does not read; is it stuck? raise NCCLZ_TIMEOUT if it is just slow)");
    }
    pollfd pf{fd, POLLOUT, 0};
    ::poll(&pf, 1, poll_slice_ms(deadline));
  }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const AbortCheck& check_abort,
              const std::string& who) {
  auto* p = static_cast<uint8_t*>(data);
  size_t want = n;
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      throw RemoteError(who + ": the peer closed the connection after " + std::to_string(want - n) + " of " +
                        std::to_string(want) + " bytes; it probably exited or failed: check its log");
    }
    int e = errno;
    if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR) {
      if (e == ECONNRESET) {
        throw RemoteError(who + ": the connection was reset by the peer; it probably exited or failed");
      }
      throw SystemError(who + ": " + errno_text("recv", e));
    }
    if (check_abort) check_abort();
    if (Clock::now() >= deadline) {
      throw Timeout(who + ": timed out waiting for " + std::to_string(n) + " more bytes " +
                    "(the peer sent nothing; is it stuck or slower? raise NCCLZ_TIMEOUT if it is just slow)");
    }
    pollfd pf{fd, POLLIN, 0};
    ::poll(&pf, 1, poll_slice_ms(deadline));
  }
}

std::optional<std::string> interface_address(const std::string& spec_in) {
  std::string spec = spec_in;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec = spec.substr(1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec = spec.substr(1);
  }
  std::vector<std::string> names;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t c = spec.find(',', pos);
    if (c == std::string::npos) c = spec.size();
    if (c > pos) names.push_back(spec.substr(pos, c - pos));
    pos = c + 1;
  }
  auto listed = [&](const char* ifn) {
    for (auto& n : names) {
      if (exact ? n == ifn : std::strncmp(ifn, n.c_str(), n.size()) == 0) return true;
    }
    return false;
  };
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return std::nullopt;
  std::optional<std::string> v4, v6;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    bool match = exclude ? !listed(i->ifa_name) : listed(i->ifa_name);
    if (!match) continue;
    // Loopback only when named explicitly (NCCL's rule).
    if ((i->ifa_flags & IFF_LOOPBACK) && exclude) continue;
    sockaddr_storage ss{};
    std::memcpy(&ss, i->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    if (fam == AF_INET6) {
      auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;  // needs a scope id
    }
    std::string host = endpoint_of(ss).host;
    if (fam == AF_INET && !v4) v4 = host;
    if (fam == AF_INET6 && !v6) v6 = host;
  }
  freeifaddrs(ifs);
  return v4 ? v4 : v6;
}

bool equal_ct(const void* a, size_t na, const void* b, size_t nb) {
  const auto* pa = static_cast<const volatile uint8_t*>(a);
  const auto* pb = static_cast<const volatile uint8_t*>(b);
  size_t n = std::max(na, nb);
  uint8_t diff = na == nb ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    uint8_t x = i < na ? pa[i] : 0;
    uint8_t y = i < nb ? pb[i] : 0;
    diff |= static_cast<uint8_t>(x ^ y);
  }
  return diff == 0;
}

void random_bytes(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  if (n == 0) return;
  Fd f(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!f) throw SystemError(errno_text("open(/dev/urandom)", errno));
  while (n > 0) {
    ssize_t r = ::read(f.get(), p, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      throw SystemError(errno_text("read(/dev/urandom)", errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
}

std::string random_hex(size_t n) {
  std::vector<uint8_t> b(n);
  random_bytes(b.data(), n);
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s += d[x >> 4];
    s += d[x & 15];
  }
  return s;
}

}  // namespace ncclz::net
