// One rank's persistent ring in the call path (core/persistent_call.hpp,
// PersistentWork): the cuda::PersistentRing, the group's abort word, and
// either device FIFOs that the kernels write directly (ranks on one host) or
// host-mapped FIFOs with the PersistentProxy over the connections made at
// creation. Built where cuda/ is (NCCLZ_WITH_CUDA); elsewhere create()
// throws (core/cuda_fallback.cpp).
//
// The choice, at the first eligible call, on every rank alike:
//  1. each rank that may use device FIFOs (NCCLZ_PERSISTENT_FIFOS not host,
//     every rank on this host) makes its ring with device FIFOs and exports
//     their CUDA IPC handle; rank 0 also creates the abort page (/dev/shm);
//  2. an Offer from every rank goes around the ring (ring_allgather, channel
//     0's connections): its setting, process, device, FIFO pointer and
//     handle, rank 0's abort word (its address for ranks of its process, the
//     page's name for the others);
//  3. from the offers alone (so every rank decides the same) device FIFOs
//     are possible or not; where possible each rank connects to the next
//     rank's FIFO (its pointer: same process, peer access where it is on
//     another device; else open_fifo of its handle), takes the group's abort
//     word (rank 0's RingAbort shared where all ranks are one process, else
//     the page, mapped and registered), and an Answer (ok, or why not) from
//     every rank goes around;
//  4. all ok: device FIFOs; else host FIFOs (auto), or the call fails on
//     every rank (device). Rank 0 unlinks the page's name after step 3.
// A local failure while setting up (CUDA refusing, say) throws: the caller
// aborts the communicator, whose transport closes every connection with a
// note, so the peers' exchange fails at once instead of waiting.
//
// With device FIFOs the connections carry nothing more: the rank keeps
// channel 0's and a thread watching the previous rank (persistent_call.hpp):
// a goodbye (kBye, sent when a communicator is destroyed) means the peer
// left after its last call (the next call here fails before its kernel); a
// close with an abort note, or without a goodbye (its process died), sets
// the group's abort word, so every kernel stops. The call thread polls its
// kernel and sets the word when its communicator is aborted.
#if defined(NCCLZ_WITH_CUDA)

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "base/env.hpp"
#include "base/log.hpp"
#include "core/persistent_call.hpp"
#include "core/persistent_fifos.hpp"
#include "ncclz/cuda_persistent.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {
namespace {

using cuda::PersistentRing;
using cuda::RingAbort;

static_assert(uint8_t(RedOp::Sum) == uint8_t(cuda::ReduceOp::Sum) &&
                  uint8_t(RedOp::Max) == uint8_t(cuda::ReduceOp::Max) &&
                  uint8_t(RedOp::Min) == uint8_t(cuda::ReduceOp::Min),
              "RedOp and cuda::ReduceOp name the same ops with the same values");

constexpr uint32_t kMagic = 0x4e5a4631;           // an Offer or Answer of this layout
constexpr uint64_t kBye = 0x6e63636c7a627965ull;  // the goodbye on channel 0 (8 bytes)

/// This process, as the offers tell processes apart (random, so that equal
/// process ids in different PID namespaces differ). The test hook
/// NCCLZ_TEST_PERSISTENT_AS_PROCESSES=1 gives each ring its own, so that ranks
/// as threads take the processes' path (IPC handles, the abort page): the
/// CPU emulator's IPC calls map a handle to the same pointer; a real CUDA
/// refuses to open a handle of its own process.
uint64_t process_token() {
  static const uint64_t mine = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(getpid());
  }();
  if (env::get_bool("NCCLZ_TEST_PERSISTENT_AS_PROCESSES", false)) {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }
  return mine;
}

/// Step 2's record (fixed layout, no pointers used outside their process).
struct Offer {
  uint32_t magic = kMagic;
  int32_t rank = 0;
  int32_t choice = 0;  // FifoChoice
  int32_t device = -1;
  int32_t one_host = 0;
  int32_t ring_ok = 0;   // made a ring with device FIFOs
  int32_t exported = 0;  // `handle` holds its FIFOs' IPC handle
  int32_t unused = 0;
  uint64_t process = 0;
  uint64_t fifo = 0;       // its FIFOs' device pointer (in its process)
  uint64_t abort_ptr = 0;  // rank 0: its std::shared_ptr<RingAbort>'s address (in its process)
  uint8_t handle[PersistentRing::kIpcHandleBytes] = {};
  char page[64] = {};  // rank 0: the abort page's name ("" where none)
  char why[96] = {};   // why ring_ok is 0
};
/// Step 3's record.
struct Answer {
  uint32_t magic = kMagic;
  int32_t ok = 0;
  char why[120] = {};
};

void put(char* dst, size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), std::min(n - 1, s.size()));
}

template <class T>
std::vector<T> exchange(transport::ProxyChannel& ch, const T& mine, int rank, int nranks, Clock::time_point deadline) {
  const std::vector<uint8_t> b = ring_allgather(ch, &mine, sizeof(T), rank, nranks, deadline);
  std::vector<T> all(static_cast<size_t>(nranks));
  std::memcpy(all.data(), b.data(), b.size());
  for (const T& x : all) {
    if (x.magic != kMagic) throw Error("the persistent ring's setup exchange met a record of another layout");
  }
  return all;
}

const char* ring_error_name(int e) {
  switch (cuda::RingError(e)) {
    case cuda::RingError::Aborted: return "aborted (the abort word was set: a peer, the proxy or the communicator)";
    case cuda::RingError::TimedOut: return "timed out (a wait made no progress)";
    case cuda::RingError::Codec: return "a slice did not decode";
    default: return "no error";
  }
}

class RingWork final : public PersistentWork {
 public:
  RingWork(int rank, int nranks, int device, const CommConfig& cfg, std::vector<transport::ProxyChannel> links,
           bool one_host, std::shared_ptr<transport::AbortFlag> comm_abort)
      : rank_(rank),
        nranks_(nranks),
        device_(device),
        timeout_(std::chrono::duration<double>(cfg.timeout_s > 0 ? cfg.timeout_s : 300)),
        comm_abort_(std::move(comm_abort)) {
    who_ = "persistent ring of rank " + std::to_string(rank);
    if (links.empty()) throw Error(who_ + ": no connections (made at creation where NCCLZ_PERSISTENT=1)");
    abort_ = std::make_shared<RingAbort>(device);
    if (abort_->status() != 0) throw Error(who_ + ": the abort word: " + PersistentRing::describe(abort_->status()));
    o_.rank = rank;
    o_.nranks = nranks;
    o_.channels = int(links.size());
    o_.type = codec::ElemType::I32;
    o_.coded = true;
    o_.select = true;  // a coded call's slices: the device selector's choice (below)
    o_.slot_bytes = persistent_slot_bytes(cfg);
    o_.slots = cfg.nslots;
    o_.timeout_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_).count());
    o_.device = device;
    // G CTAs a channel: NCCLZ_PERSISTENT_CTAS, else one per two slots, at most 4;
    // fewer where the device cannot hold every rank's at once.
    const int asked = int(env::get_int("NCCLZ_PERSISTENT_CTAS", 0, 0, 32));
    o_.ctas_per_channel = asked > 0 ? asked : std::clamp(cfg.nslots / 2, 1, 4);
    bytes_.assign(size_t(o_.channels), 0);
    if (try_device_fifos(links[0], one_host)) {
      start_watching(std::move(links));
    } else {
      start_host_fifos(std::move(links));
    }
    NCCLZ_INFO(rank, "persistent ring: %s, %d channels x %d CTAs", fifo_note_.c_str(), o_.channels,
               o_.ctas_per_channel);
  }

  ~RingWork() override {
    if (proxy_) {
      // No kernel runs (every call synchronizes): the proxy's threads end (the
      // peers' receiving threads see a close without a note after every slice
      // they expect: no failure), then the ring and the abort word go.
      proxy_->stop();
      return;
    }
    // Device FIFOs: the goodbye, then the watching thread ends; the next
    // rank's FIFO is closed once this rank's kernel is surely done.
    stop_.store(true);
    if (watch_.send) {
      try {
        const auto until = Clock::now() + std::chrono::seconds(1);
        uint8_t* s = watch_.send->acquire(until);
        std::memcpy(s, &kBye, sizeof kBye);
        watch_.send->post(sizeof kBye);
        watch_.send->flush(until);
      } catch (const std::exception&) {
        // the peer is gone already: nothing to tell it
      }
    }
    if (watcher_.joinable()) watcher_.join();
    if (ring_) ring_->synchronize();
    if (opened_) PersistentRing::close_fifo(opened_, device_);
    ring_.reset();
    abort_.reset();
  }

  void all_reduce(codec::ElemType wire, bool coded, RedOp op, const void* src, void* dst, size_t count, int nch,
                  const std::vector<uint64_t>& expect_recv, const std::vector<uint64_t>& sent) override {
    const std::string who = "rank " + std::to_string(rank_);
    if (proxy_) {
      for (int c = 0; c < channels(); ++c) proxy_->expect(c, expect_recv[size_t(c)], sent[size_t(c)]);
      if (proxy_->halted() || proxy_->peer_gone() || abort_->is_set()) {
        abort_->set();  // the peers' kernels stop through the communicator's abort (the caller's)
        throw Error(who + ": the persistent ring's proxy stopped before the call: " + proxy_why());
      }
    } else if (gone_.load() || left_.load() || abort_->is_set() || comm_abort_->aborted.load()) {
      if (!left_.load()) abort_->set();
      throw Error(who + ": the persistent ring (device FIFOs) stopped before the call: " + watch_why());
    }
    PersistentRing::Shape sh;
    sh.type = wire;
    sh.coded = coded;
    // Coded: each slice's codec and predictor chosen by the device selector
    // (Block with None / Delta1 / Delta2, or Raw: the CPU's encode_slice
    // with codec::fast_select_options()); the sums, max and min of codes
    // are exact whatever the slices, so only the wire bytes depend on it.
    sh.select = coded;
    sh.op = cuda::ReduceOp(uint8_t(op));  // the same values as RedOp (Sum, Max, Min here)
    sh.channels = nch;
    const int launched = ring_->all_reduce_async(src, dst, count, sh);
    if (launched != 0)
      throw Error(who + ": launching the persistent ring kernel: " + PersistentRing::describe(launched));
    if (!proxy_) wait_kernel();
    cuda::RingReport rep;
    const int rc = ring_->synchronize(&rep);
    if (rc >= 1000) {
      std::string msg = who + ": the persistent ring kernel " + ring_error_name(rc - 1000) + " at channel step " +
                        std::to_string(rep.step) + " waiting on or decoding from rank " + std::to_string(rep.peer);
      if (rep.error == int(cuda::RingError::Codec)) msg += " (codec status " + std::to_string(rep.codec_status) + ")";
      const std::string pe = proxy_ ? proxy_->error() : watch_note();
      if (!pe.empty()) msg += proxy_ ? "; proxy: " + pe : "; " + pe;
      throw Error(msg);
    }
    if (rc != 0) throw Error(who + ": the persistent ring kernel: " + PersistentRing::describe(rc));
    if (proxy_) {
      // The call's slices left this process (a rank may exit once its call returns).
      for (int c = 0; c < nch; ++c) {
        const std::string e =
            proxy_->wait_flushed(c, sent[size_t(c)], std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_));
        if (!e.empty()) throw Error(who + ": " + e);
      }
      return;
    }
    for (int c = 0; c < nch; ++c) {
      if (const int e = ring_->sent_bytes(c, &bytes_[size_t(c)]); e != 0)
        throw Error(who + ": reading the ring's byte counts: " + PersistentRing::describe(e));
    }
  }

  uint64_t sent_bytes(int c) const override { return proxy_ ? proxy_->sent_bytes(c) : bytes_[size_t(c)]; }
  size_t slice_elems(size_t esize) const override { return ring_->slice_elems_for(esize); }
  int channels() const override { return ring_->options().channels; }
  bool device_fifos() const override { return !proxy_; }

 private:
  /// A ring with these options and FIFOs, G halved until every rank's CTAs
  /// fit the device; status() as it ended.
  void make_ring(bool host_fifos) {
    o_.fifo_in_host_memory = host_fifos;
    for (;;) {
      ring_ = std::make_unique<PersistentRing>(o_, abort_.get());
      if (ring_->status() != PersistentRing::kNotResident || o_.ctas_per_channel == 1) break;
      o_.ctas_per_channel = std::max(1, o_.ctas_per_channel / 2);
    }
  }
  std::string ring_failure() const {
    return who_ + " (" + std::to_string(nranks_) + " ranks x " + std::to_string(o_.channels) + " channels x " +
           std::to_string(o_.ctas_per_channel) + " CTAs, the device holds " +
           std::to_string(ring_->max_resident_ctas()) + "): " + PersistentRing::describe(ring_->status());
  }

  /// Steps 1-4 above; true: device FIFOs, connected, on every rank.
  bool try_device_fifos(transport::ProxyChannel& ch, bool one_host) {
    const FifoChoice choice = fifo_choice_from_env();
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
    Offer me;
    me.rank = rank_;
    me.choice = int32_t(choice);
    me.device = device_;
    me.one_host = one_host ? 1 : 0;
    me.process = process_token();
    AbortPage page;
    if (choice != FifoChoice::Host && one_host) {
      make_ring(false);
      if (ring_->status() == 0) {
        me.ring_ok = 1;
        me.fifo = reinterpret_cast<uintptr_t>(ring_->fifo());
        me.exported = ring_->export_fifo(me.handle) == 0 ? 1 : 0;
      } else {
        put(me.why, sizeof me.why, "rank " + std::to_string(rank_) + ": " + PersistentRing::describe(ring_->status()));
        ring_.reset();
      }
      if (rank_ == 0 && me.ring_ok) {
        me.abort_ptr = reinterpret_cast<uintptr_t>(&abort_);
        try {
          page = AbortPage::create();
          put(me.page, sizeof me.page, page.name());
        } catch (const std::exception&) {
          // no page: ranks as processes take host FIFOs (the offer's empty name says so)
        }
      }
    }
    const std::vector<Offer> all = exchange(ch, me, rank_, nranks_, deadline);
    // Step 3: the same reading of the same offers on every rank.
    bool any_host = false, any_device = false, same_process = true;
    std::string why_not;
    for (const Offer& x : all) {
      any_host = any_host || x.choice == int32_t(FifoChoice::Host);
      any_device = any_device || x.choice == int32_t(FifoChoice::Device);
      same_process = same_process && x.process == all[0].process;
    }
    if (any_host && any_device) {
      throw InvalidArgument("ncclz: ranks disagree on NCCLZ_PERSISTENT_FIFOS (device on some, host on others)");
    }
    for (int r = 0; r < nranks_ && why_not.empty(); ++r) {
      const Offer& x = all[size_t(r)];
      const Offer& next = all[size_t((r + 1) % nranks_)];
      if (any_host)
        why_not = "NCCLZ_PERSISTENT_FIFOS=host";
      else if (!x.one_host)
        why_not = "the ranks are on several hosts";
      else if (!x.ring_ok)
        why_not = std::string("device FIFOs could not be made: ") + x.why;
      else if (x.process != next.process && !next.exported)
        why_not = "rank " + std::to_string(r + 1 == nranks_ ? 0 : r + 1) + "'s FIFOs have no CUDA IPC handle";
    }
    if (why_not.empty() && !same_process && all[0].page[0] == 0) why_not = "no abort page in /dev/shm";
    Answer ans;
    std::string local_why;
    if (why_not.empty()) {
      try {
        local_why = connect_device(all, same_process, page);
      } catch (const std::exception& e) {
        local_why = e.what();
      }
      ans.ok = local_why.empty() ? 1 : 0;
      put(ans.why, sizeof ans.why, "rank " + std::to_string(rank_) + ": " + local_why);
      const std::vector<Answer> answers = exchange(ch, ans, rank_, nranks_, deadline);
      page.unlink();  // every rank mapped it by now (rank 0's; a no-op elsewhere)
      for (const Answer& a : answers) {
        if (!a.ok && why_not.empty()) why_not = a.why;
      }
    }
    if (why_not.empty()) {
      page_ = std::move(page);
      fifo_note_ = same_process ? "device FIFOs (ranks as threads)" : "device FIFOs (CUDA IPC)";
      return true;
    }
    // Host FIFOs: undo whatever was made.
    if (opened_) PersistentRing::close_fifo(opened_, device_);
    opened_ = nullptr;
    ring_.reset();
    abort_ = std::make_shared<RingAbort>(device_);
    if (abort_->status() != 0) throw Error(who_ + ": the abort word: " + PersistentRing::describe(abort_->status()));
    if (any_device) {
      throw Error(who_ + ": NCCLZ_PERSISTENT_FIFOS=device, but device FIFOs cannot be used: " + why_not);
    }
    fifo_note_ = "host FIFOs (" + why_not + ")";
    return false;
  }

  /// Step 3 on this rank: the next rank's FIFOs, the group's abort word, the
  /// fence scope. "" or why not.
  std::string connect_device(const std::vector<Offer>& all, bool same_process, AbortPage& page) {
    const Offer& me = all[size_t(rank_)];
    const Offer& next = all[size_t((rank_ + 1) % nranks_)];
    const Offer& prev = all[size_t((rank_ + nranks_ - 1) % nranks_)];
    void* fifo = nullptr;
    if (next.process == me.process) {
      if (next.device != device_) {
        bool can = false;
        const int e = PersistentRing::enable_peer_access(device_, next.device, &can);
        if (!can) {
          return "device " + std::to_string(device_) + " cannot reach device " + std::to_string(next.device) +
                 " (no peer access" + (e ? ": " + PersistentRing::describe(e) : std::string()) + ")";
        }
      }
      fifo = reinterpret_cast<void*>(uintptr_t(next.fifo));
    } else {
      if (const int e = PersistentRing::open_fifo(next.handle, device_, &fifo); e != 0)
        return "opening rank " + std::to_string(next.rank) + "'s FIFOs over CUDA IPC: " + PersistentRing::describe(e);
      opened_ = fifo;
    }
    ring_->connect(fifo);
    // Another process (same GPU or not: not told apart) or another device on
    // either side: system-scope fences (cuda/persistent_ring.cu, "Device FIFOs
    // between processes or devices").
    const bool sys =
        next.process != me.process || prev.process != me.process || next.device != device_ || prev.device != device_;
    ring_->set_system_fences(sys);
    if (same_process) {
      // Rank 0's word, shared by every rank's kernel (rank 0 keeps it
      // unchanged until every answer is in, so the copy here is safe).
      if (rank_ != 0) abort_ = *reinterpret_cast<const std::shared_ptr<RingAbort>*>(uintptr_t(all[0].abort_ptr));
    } else {
      if (rank_ != 0) page = AbortPage::open(all[0].page);
      auto shared = std::make_shared<RingAbort>(page.data(), page.bytes(), device_);
      if (shared->status() != 0)
        return "registering the abort page with CUDA: " + PersistentRing::describe(shared->status());
      abort_ = std::move(shared);
    }
    ring_->use_abort(abort_.get());
    return "";
  }

  void start_host_fifos(std::vector<transport::ProxyChannel> links) {
    make_ring(true);
    if (ring_->status() != 0) throw Error(ring_failure());
    transport::PersistentProxy::Fifos f;
    f.inbox = static_cast<uint8_t*>(ring_->fifo_host());
    f.outbox = static_cast<uint8_t*>(ring_->outbox_host());
    f.channels = o_.channels;
    f.slots = o_.slots;
    f.slot_bytes = o_.slot_bytes;
    f.abort_word = abort_->host_ptr();
    transport::PersistentProxy::Options po;
    po.rank = rank_;
    po.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_);
    proxy_ = std::make_unique<transport::PersistentProxy>(f, po);
    proxy_->start(std::move(links));
  }

  void start_watching(std::vector<transport::ProxyChannel> links) {
    watch_ = std::move(links[0]);  // the other channels' connections close unused
    links.clear();
    watcher_ = std::thread([this] { watch(); });
  }

  /// The watching thread: channel 0's connection from the previous rank.
  void watch() {
    const int prev = watch_.recv->peer();
    const std::string them = "rank " + std::to_string(prev);
    for (;;) {
      if (stop_.load()) return;
      try {
        const transport::SlotView v = watch_.recv->wait(Clock::now() + std::chrono::milliseconds(20));
        uint64_t w = 0;
        if (v.bytes == sizeof w) std::memcpy(&w, v.data, sizeof w);
        watch_.recv->release();
        if (w != kBye) return halt(them + " sent an unexpected message on the persistent ring's connection");
        left_.store(true);  // it left after its last call; a later call here fails before its kernel
        note(them + "'s communicator was destroyed");
      } catch (const Timeout&) {
      } catch (const Aborted& e) {
        return halt(them + "'s communicator was aborted: " + e.what());
      } catch (const RemoteError& e) {
        if (left_.load() || stop_.load()) return;
        return halt(them + " closed its connection without a goodbye (its process exited?): " + e.what());
      } catch (const std::exception& e) {
        return halt(std::string("watching ") + them + ": " + e.what());
      }
    }
  }
  void note(const std::string& why) {
    std::lock_guard<std::mutex> lk(mu_);
    if (why_.empty()) why_ = why;
  }
  void halt(const std::string& why) {
    note(why);
    gone_.store(true);
    abort_->set();  // every rank's kernel stops (the word is the group's)
  }
  std::string watch_note() const {
    std::lock_guard<std::mutex> lk(mu_);
    return why_;
  }
  std::string watch_why() const {
    const std::string w = watch_note();
    if (!w.empty()) return w;
    if (comm_abort_->aborted.load()) return "the communicator was aborted";
    return "the abort word was set (another rank's kernel failed)";
  }

  /// Device FIFOs: until the kernel ends, setting the abort word as soon as
  /// the communicator is aborted (its transport closed: the peers' watching
  /// threads set theirs too). Polls: yields for the first 50 us, then sleeps
  /// growing to 200 us.
  void wait_kernel() {
    const auto t0 = Clock::now();
    int sleep_us = 10;
    for (;;) {
      const int q = ring_->query();
      if (q != 1) return;  // done or a CUDA error (synchronize() reports it)
      if (comm_abort_->aborted.load()) abort_->set();
      if (Clock::now() - t0 < std::chrono::microseconds(50)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
        sleep_us = std::min(2 * sleep_us, 200);
      }
    }
  }

  std::string proxy_why() const {
    const std::string e = proxy_->error();
    if (!e.empty()) return e;
    if (proxy_->peer_gone()) return "a ring neighbour closed its connection (its communicator was closed)";
    return "the abort word was set";
  }

  int rank_, nranks_, device_;
  std::string who_;
  std::chrono::duration<double> timeout_;
  std::shared_ptr<transport::AbortFlag> comm_abort_;
  PersistentRing::Options o_;
  std::string fifo_note_;             // which FIFOs, and why host ones where auto chose them
  AbortPage page_;                    // ranks as processes: the page the abort word is in (outlives abort_)
  std::shared_ptr<RingAbort> abort_;  // the group's word (before the ring and the proxy: they use it)
  std::unique_ptr<PersistentRing> ring_;
  std::unique_ptr<transport::PersistentProxy> proxy_;  // host FIFOs
  // Device FIFOs:
  void* opened_ = nullptr;       // the next rank's FIFOs opened over CUDA IPC
  std::vector<uint64_t> bytes_;  // per channel: bytes sent (the kernel's count, read after each call)
  transport::ProxyChannel watch_;
  std::thread watcher_;
  std::atomic<bool> stop_{false}, left_{false}, gone_{false};
  mutable std::mutex mu_;
  std::string why_;
};

}  // namespace

std::unique_ptr<PersistentWork> PersistentWork::create(int rank, int nranks, int device, const CommConfig& cfg,
                                                       std::vector<transport::ProxyChannel> links, bool one_host,
                                                       std::shared_ptr<transport::AbortFlag> comm_abort) {
  return std::make_unique<RingWork>(rank, nranks, device, cfg, std::move(links), one_host, std::move(comm_abort));
}

}  // namespace ncclz::core

#endif  // NCCLZ_WITH_CUDA
