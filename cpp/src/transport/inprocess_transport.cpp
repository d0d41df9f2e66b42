// In-process transport: ranks are threads of one process (the GoogleTest
// suite, single-process multi-rank runs).
//
// A process-global registry maps (key, src, dst, channel) to a heap-allocated
// slot ring (slot_ring.hpp). Whichever end connects first creates the ring;
// the second end takes it and removes the registry entry; the ring lives as
// long as the connection ends that share it. No bootstrap
// traffic is needed (both ends compute the same name) but a barrier closes
// connect(), so all ends are attached before any rank can leave.
#include <map>
#include <mutex>

#include "transport/transport_impl.hpp"

namespace ncclz::transport {
namespace {

// The registry holds weak references: a ring whose first end went away
// before the second attached (failed setup) disappears with it.
struct Entry {
  std::weak_ptr<void> mem;
  int attached = 0;
};

std::mutex g_mu;
std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> m;
  return m;
}

std::shared_ptr<void> attach(const std::string& name, int nslots, size_t slot_bytes) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto it = registry().begin(); it != registry().end();) {
    it = it->second.mem.expired() ? registry().erase(it) : std::next(it);
  }
  Entry& e = registry()[name];
  std::shared_ptr<void> mem = e.mem.lock();
  if (!mem) {
    mem = make_heap_ring(nslots, slot_bytes);
    e.mem = mem;
    e.attached = 0;
  }
  if (++e.attached == 2) registry().erase(name);
  return mem;
}

class InProcessTransport final : public Transport {
 public:
  explicit InProcessTransport(TransportContext ctx) : ctx_(std::move(ctx)) {}
  Kind kind() const override { return Kind::InProcess; }

  std::vector<std::vector<PeerLink>> connect(const std::vector<int>& peers, int nchannels,
                                             Clock::time_point /*deadline*/, size_t slot_bytes) override {
    check_connect_args(ctx_, peers, nchannels);
    const size_t sb = slot_bytes ? slot_bytes : ctx_.cfg.slot_bytes;
    const int me = ctx_.bootstrap->rank();
    const int gen = gen_++;
    std::vector<std::vector<PeerLink>> links(static_cast<size_t>(nchannels));
    for (int c = 0; c < nchannels; ++c) {
      for (int p : peers) {
        if (p == me) {
          links[c].push_back(make_self_link(ctx_, c, "inproc", sb));
          continue;
        }
        ConnLabel label{"inproc", me, p, c};
        std::string out = name(gen, me, p, c), in = name(gen, p, me, c);
        auto smem = attach(out, ctx_.cfg.nslots, sb);
        auto rmem = attach(in, ctx_.cfg.nslots, sb);
        PeerLink link;
        link.send = std::make_unique<RingSendConn>(smem, smem.get(), label, ctx_.abort, nullptr);
        link.recv = std::make_unique<RingRecvConn>(rmem, rmem.get(), label, ctx_.abort, nullptr);
        links[c].push_back(std::move(link));
      }
    }
    // Every end is attached before anyone returns (and may post and leave):
    // a ring never vanishes before its second end took it.
    ctx_.bootstrap->barrier();
    return links;
  }

 private:
  std::string name(int gen, int src, int dst, int ch) const {
    return ctx_.key + "/" + std::to_string(gen) + "/" + std::to_string(src) + "/" + std::to_string(dst) + "/" +
           std::to_string(ch);
  }
  TransportContext ctx_;
  int gen_ = 0;
};

}  // namespace

std::unique_ptr<Transport> make_inprocess_transport(TransportContext ctx) {
  return std::make_unique<InProcessTransport>(std::move(ctx));
}

}  // namespace ncclz::transport
