// Communicator::group (core/p2p_group.cpp): sends and recvs that wait for
// each other as single calls (ring shifts, halo exchanges, both directions of
// one pair, several calls to one peer) complete in a group, in every mode,
// with messages of many slices (1 KiB slots); a group's single call meets a
// plain send or recv, and a group meets plain calls made one after another;
// argument errors and mismatches fail every rank they concern without a hang; device buffers where no device is usable
// are refused call by call. Ranks as threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ncclz/communicator.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"
#include "test_ranks.hpp"

using namespace ncclz;

namespace {

PeerCall send_of(const void* buf, size_t n, DataType t, int peer, const Compression& c = Compression::none()) {
  PeerCall p;
  p.send = true;
  p.buf = const_cast<void*>(buf);
  p.count = n;
  p.type = t;
  p.peer = peer;
  p.compression = c;
  return p;
}

PeerCall recv_of(void* buf, size_t n, DataType t, int peer, const Compression& c = Compression::none()) {
  PeerCall p = send_of(buf, n, t, peer, c);
  p.send = false;
  return p;
}

// Rank r's values: smooth, distinct per rank and per message.
std::vector<float> values(int r, int which, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(std::sin(0.001 * double(i) + r) * 10 + which + 0.25 * r);
  return v;
}

void expect_within(const std::vector<float>& got, const std::vector<float>& want, double E, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = E == 0 ? got[i] == want[i] : std::fabs(double(got[i]) - double(want[i])) <= E;
    if (!ok && bad++ < 3) ADD_FAILURE() << what << ": element " << i << ": " << got[i] << " vs " << want[i];
  }
  EXPECT_EQ(bad, 0u) << what;
}

// A ring shift of n ranks (15000 values(r, which) each) in which the ranks
// that `grouped` names group their send and recv and the others make plain
// calls, the recv first where `recv_first`: every element exact.
void ring_shift_with_plain_calls(int n, int which, bool (*grouped)(int), bool recv_first) {
  ncclz_test::Ranks w(n);
  const size_t count = 15000;
  w.run([&](int r, Communicator& comm) {
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    const std::vector<float> x = values(r, which, count);
    std::vector<float> y(count);
    auto send = [&] { comm.send(x.data(), count, DataType::F32, right, Compression::none()); };
    auto recv = [&] { comm.recv(y.data(), count, DataType::F32, left, Compression::none()); };
    if (grouped(r)) {
      comm.group({send_of(x.data(), count, DataType::F32, right), recv_of(y.data(), count, DataType::F32, left)});
    } else if (recv_first) {
      recv();
      send();
    } else {
      send();
      recv();
    }
    expect_within(y, values(left, which, count), 0, "n=" + std::to_string(n) + ", rank " + std::to_string(r));
  });
}

}  // namespace

// Every rank sends to r+1 and receives from r-1 at once: as single calls,
// every send would wait for a recv that comes after the neighbour's send.
TEST(P2pGroup, RingShiftInEveryMode) {
  for (int n : {2, 3, 4}) {
    ncclz_test::Ranks w(n);
    const size_t count = 20000;  // 80 KB: many 1 KiB slots
    for (const Compression& c : {Compression::none(), Compression::lossless(), Compression::lossy_abs(1e-3)}) {
      const double E = c.mode == Compression::Mode::LossyAbs ? 1e-3 : 0;
      for (bool recv_first : {false, true}) {
        w.run([&](int r, Communicator& comm) {
          const std::vector<float> x = values(r, 0, count);
          std::vector<float> y(count, -1.0f);
          std::vector<PeerCall> calls = {send_of(x.data(), count, DataType::F32, (r + 1) % n, c),
                                         recv_of(y.data(), count, DataType::F32, (r + n - 1) % n, c)};
          if (recv_first) std::swap(calls[0], calls[1]);
          CallStats st;
          comm.group(calls, &st);
          expect_within(y, values((r + n - 1) % n, 0, count), E,
                        "n=" + std::to_string(n) + " rank " + std::to_string(r) + " " + std::to_string(int(c.mode)));
          EXPECT_GT(st.raw_bytes, 0u);
          if (E > 0) {
            EXPECT_GT(st.ratio, 2.0) << "a smooth field codes";
            EXPECT_EQ(st.error_bound, 1e-3);
          }
        });
      }
    }
  }
}

// Groups whose bytes take several channels move their streams on lanes (the
// channels' threads, core/p2p_group.cpp): 3 ranks, both neighbours each way
// at once, 4 streams of 2-3 calls per rank in every mode; the same bits as
// the same group on a communicator of one channel (one loop), lossy within
// E, and the ranks in step after (shm and socket: tests/python/test_group.py).
TEST(P2pGroup, LanesMoveLargeGroupsAsOneLoopDoes) {
  const int n = 3;
  const size_t count = 150000;                          // 600 KB a call, 4 or more calls: 4 lanes of 4 channels
  std::vector<std::vector<std::vector<float>>> got(2);  // [1 channel, 4 channels][rank * 5 + call]
  const Compression modes[] = {Compression::none(), Compression::lossless(), Compression::lossy_abs(1e-3)};
  for (int nch : {1, 4}) {
    ncclz_test::Ranks w(n, nullptr, nch);
    got[nch == 4].assign(size_t(5 * n), {});
    w.run([&](int r, Communicator& comm) {
      const int right = (r + 1) % n, left = (r + n - 1) % n;
      std::vector<std::vector<float>> x = {values(r, 0, count), values(r, 1, count), values(r, 2, count / 3)};
      std::vector<std::vector<float>> y(5, std::vector<float>(count, -1.0f));
      y[4].resize(count / 3);
      std::vector<PeerCall> calls = {
          send_of(x[0].data(), count, DataType::F32, right, modes[0]),
          recv_of(y[0].data(), count, DataType::F32, left, modes[0]),
          send_of(x[1].data(), count, DataType::F32, left, modes[2]),
          recv_of(y[1].data(), count, DataType::F32, right, modes[2]),
          send_of(x[0].data(), count, DataType::F32, right, modes[1]),
          recv_of(y[2].data(), count, DataType::F32, left, modes[1]),
          send_of(x[1].data(), count, DataType::F32, left, modes[0]),
          recv_of(y[3].data(), count, DataType::F32, right, modes[0]),
          send_of(x[2].data(), count / 3, DataType::F32, right, modes[2]),
          recv_of(y[4].data(), count / 3, DataType::F32, left, modes[2]),
      };
      CallStats st;
      comm.group(calls, &st);
      EXPECT_EQ(st.channels, 4) << "one count per stream";
      const std::string at = "channels " + std::to_string(nch) + " rank " + std::to_string(r);
      expect_within(y[0], values(left, 0, count), 0, at + ": call 1");
      expect_within(y[1], values(right, 1, count), 1e-3, at + ": call 3");
      expect_within(y[2], values(left, 0, count), 0, at + ": call 5");
      expect_within(y[3], values(right, 1, count), 0, at + ": call 7");
      expect_within(y[4], values(left, 2, count / 3), 1e-3, at + ": call 9");
      for (size_t i = 0; i < 5; ++i) got[nch == 4][size_t(r * 5) + i] = y[i];
      float v = float(r + 1), sum = 0;
      comm.all_reduce(&v, &sum, 1, DataType::F32, RedOp::Sum, Compression::none());
      EXPECT_EQ(sum, 6.0f);
    });
  }
  for (size_t i = 0; i < got[0].size(); ++i) EXPECT_EQ(got[0][i], got[1][i]) << "result " << i << ": lanes differ";
}

// Both directions of one pair, several calls each way, of several types and
// sizes (an empty one among them), in different orders on the two ranks
// (only the order of the sends and of the recvs between a pair counts).
TEST(P2pGroup, SeveralCallsBothWaysOnOnePair) {
  ncclz_test::Ranks w(2);
  const size_t big = 30000, small = 7;
  w.run([&](int r, Communicator& comm) {
    const int peer = 1 - r;
    const std::vector<float> a = values(r, 1, big);
    std::vector<double> b(small);
    for (size_t i = 0; i < small; ++i) b[i] = double(i) * 1.5 + r;
    std::vector<int8_t> e(0);
    std::vector<float> ra(big, 0.0f);
    std::vector<double> rb(small, 0.0);
    std::vector<int8_t> re(0);
    std::vector<PeerCall> calls;
    if (r == 0) {
      calls = {send_of(a.data(), big, DataType::F32, peer, Compression::lossless()),
               recv_of(ra.data(), big, DataType::F32, peer, Compression::lossless()),
               send_of(b.data(), small, DataType::F64, peer),
               send_of(e.data(), 0, DataType::I8, peer),
               recv_of(rb.data(), small, DataType::F64, peer),
               recv_of(re.data(), 0, DataType::I8, peer)};
    } else {
      calls = {recv_of(ra.data(), big, DataType::F32, peer, Compression::lossless()),
               recv_of(rb.data(), small, DataType::F64, peer),
               recv_of(re.data(), 0, DataType::I8, peer),
               send_of(a.data(), big, DataType::F32, peer, Compression::lossless()),
               send_of(b.data(), small, DataType::F64, peer),
               send_of(e.data(), 0, DataType::I8, peer)};
    }
    comm.group(calls);
    expect_within(ra, values(peer, 1, big), 0, "float32 lossless, rank " + std::to_string(r));
    for (size_t i = 0; i < small; ++i) EXPECT_EQ(rb[i], double(i) * 1.5 + peer);
  });
  // The pair's sequence numbers stay in step with plain calls afterwards.
  w.run([&](int r, Communicator& comm) {
    int32_t v = 40 + r, got = 0;
    if (r == 0) {
      comm.send(&v, 1, DataType::I32, 1, Compression::none());
      comm.recv(&got, 1, DataType::I32, 1, Compression::none());
    } else {
      comm.recv(&got, 1, DataType::I32, 0, Compression::none());
      comm.send(&v, 1, DataType::I32, 0, Compression::none());
    }
    EXPECT_EQ(got, 40 + (1 - r));
  });
}

// A halo exchange on a ring of 4: each rank sends its left edge to r-1 and
// its right edge to r+1 (edges of different sizes) and receives both
// neighbours' edges; lossy, every element within the bound.
TEST(P2pGroup, HaloExchange) {
  const int n = 4;
  ncclz_test::Ranks w(n);
  const size_t nl = 5000, nr = 9000;
  const double E = 1e-2;
  w.run([&](int r, Communicator& comm) {
    const int left = (r + n - 1) % n, right = (r + 1) % n;
    const std::vector<float> L = values(r, 2, nl), R = values(r, 3, nr);
    std::vector<float> from_left(nr), from_right(nl);
    const Compression c = Compression::lossy_abs(E);
    comm.group({recv_of(from_left.data(), nr, DataType::F32, left, c), send_of(L.data(), nl, DataType::F32, left, c),
                send_of(R.data(), nr, DataType::F32, right, c),
                recv_of(from_right.data(), nl, DataType::F32, right, c)});
    expect_within(from_left, values(left, 3, nr), E, "from the left");
    expect_within(from_right, values(right, 2, nl), E, "from the right");
  });
}

// A group's single call with a peer meets a plain send or recv there; an
// empty group and a group of one are calls too.
TEST(P2pGroup, SingleCallsMeetPlainCalls) {
  ncclz_test::Ranks w(3);
  const size_t count = 5000;
  w.run([&](int r, Communicator& comm) {
    std::vector<float> x = values(r, 4, count), y(count);
    if (r == 0) {
      comm.group({send_of(x.data(), count, DataType::F32, 1), recv_of(y.data(), count, DataType::F32, 2)});
      expect_within(y, values(2, 4, count), 0, "rank 0 from rank 2");
    } else if (r == 1) {
      comm.recv(y.data(), count, DataType::F32, 0, Compression::none());
      expect_within(y, values(0, 4, count), 0, "rank 1 from rank 0");
    } else {
      comm.send(x.data(), count, DataType::F32, 0, Compression::none());
    }
    comm.group({});
    if (r < 2) {
      comm.group({r == 0 ? send_of(x.data(), count, DataType::F32, 1) : recv_of(y.data(), count, DataType::F32, 0)});
      if (r == 1) expect_within(y, values(0, 4, count), 0, "a group of one");
    }
  });
}

// A group meets plain sends and recvs made one after another (NCCL's
// grouped and ungrouped calls on the two ends of a pair): rank 0 groups a
// send and a recv with rank 1, which sends then receives, or receives then
// sends, with plain calls; in every mode, the bits of the same calls grouped
// on both ranks; the pair in step after.
TEST(P2pGroup, AGroupMeetsPlainCallsInEitherOrder) {
  ncclz_test::Ranks w(2);
  const size_t count = 20000;  // 80 KB: many 1 KiB slots
  for (const Compression& c : {Compression::none(), Compression::lossless(), Compression::lossy_abs(1e-3)}) {
    std::vector<std::vector<float>> both_grouped(2);
    for (int plain : {-1, 0, 1}) {  // rank 1 grouped too, plain send first, plain recv first
      const std::string what = "mode " + std::to_string(int(c.mode)) + ", plain " + std::to_string(plain);
      w.run([&](int r, Communicator& comm) {
        const int peer = 1 - r;
        const std::vector<float> x = values(r, 6, count);
        std::vector<float> y(count, -1.0f);
        if (r == 0 || plain < 0) {
          std::vector<PeerCall> calls = {send_of(x.data(), count, DataType::F32, peer, c),
                                         recv_of(y.data(), count, DataType::F32, peer, c)};
          if (plain == 1) std::swap(calls[0], calls[1]);
          comm.group(calls);
        } else if (plain == 0) {
          comm.send(x.data(), count, DataType::F32, peer, c);
          comm.recv(y.data(), count, DataType::F32, peer, c);
        } else {
          comm.recv(y.data(), count, DataType::F32, peer, c);
          comm.send(x.data(), count, DataType::F32, peer, c);
        }
        expect_within(y, values(peer, 6, count), c.mode == Compression::Mode::None ? 0 : c.bound,
                      what + ", rank " + std::to_string(r));
        if (plain < 0) {
          both_grouped[size_t(r)] = y;
        } else {
          EXPECT_TRUE(y == both_grouped[size_t(r)]) << what << ", rank " << r << ": the bits of a group on both ends";
        }
        int32_t v = 7 + r, got = 0;  // in step
        comm.group({send_of(&v, 1, DataType::I32, peer), recv_of(&got, 1, DataType::I32, peer)});
        EXPECT_EQ(got, 7 + peer) << what;
      });
    }
  }
}

// Several calls each way in one group against plain calls interleaved in
// another order (the sends among themselves and the recvs among themselves
// in the same order on both ranks): the plain recv reads the group's later
// send descriptors ahead of the data of its first. Then a ring shift of 3
// ranks in which only rank 0 groups: the others' plain send-then-recv chains
// end at rank 0's group, which answers and moves each plain call's data at
// once.
TEST(P2pGroup, PlainCallsReadAheadOfAGroupsSends) {
  {
    ncclz_test::Ranks w(2);
    const size_t n1 = 9000, n2 = 33;
    w.run([&](int r, Communicator& comm) {
      const int peer = 1 - r;
      const std::vector<float> a = values(r, 7, n1), b = values(r, 8, n2);
      std::vector<float> ra(n1), rb(n2);
      const Compression lossy = Compression::lossy_abs(1e-2);
      if (r == 0) {
        comm.group({send_of(a.data(), n1, DataType::F32, peer, lossy), send_of(b.data(), n2, DataType::F32, peer),
                    recv_of(ra.data(), n1, DataType::F32, peer, lossy), recv_of(rb.data(), n2, DataType::F32, peer)});
      } else {
        comm.recv(ra.data(), n1, DataType::F32, peer, lossy);
        comm.send(a.data(), n1, DataType::F32, peer, lossy);
        comm.recv(rb.data(), n2, DataType::F32, peer, Compression::none());
        comm.send(b.data(), n2, DataType::F32, peer, Compression::none());
      }
      expect_within(ra, values(peer, 7, n1), 1e-2, "the lossy message, rank " + std::to_string(r));
      expect_within(rb, values(peer, 8, n2), 0, "the exact one, rank " + std::to_string(r));
      float v = float(r + 1), s = 0;
      comm.all_reduce(&v, &s, 1, DataType::F32, RedOp::Sum, Compression::none());
      EXPECT_EQ(s, 3.0f);
    });
  }
  ring_shift_with_plain_calls(3, 9, [](int r) { return r == 0; }, false);
}

// Two sends in a row, and two recvs in a row, against a group: rank 0's
// group sends twice and receives twice; rank 1 receives twice then sends
// twice with plain calls (its first recv reads the group's second send
// descriptor ahead of the first one's data), or sends twice then receives
// twice; messages of different sizes and modes, each where it belongs.
TEST(P2pGroup, RunsOfPlainCallsAgainstAGroup) {
  ncclz_test::Ranks w(2);
  const size_t n1 = 7000, n2 = 1500;
  const Compression lossy = Compression::lossy_abs(1e-2);
  for (bool sends_first : {false, true}) {
    w.run([&](int r, Communicator& comm) {
      const int peer = 1 - r;
      const std::vector<float> a = values(r, 12, n1), b = values(r, 13, n2);
      std::vector<float> ra(n1), rb(n2);
      if (r == 0) {
        comm.group({recv_of(ra.data(), n1, DataType::F32, peer, lossy),
                    send_of(a.data(), n1, DataType::F32, peer, lossy), send_of(b.data(), n2, DataType::F32, peer),
                    recv_of(rb.data(), n2, DataType::F32, peer)});
      } else {
        auto sends = [&] {
          comm.send(a.data(), n1, DataType::F32, peer, lossy);
          comm.send(b.data(), n2, DataType::F32, peer, Compression::none());
        };
        auto recvs = [&] {
          comm.recv(ra.data(), n1, DataType::F32, peer, lossy);
          comm.recv(rb.data(), n2, DataType::F32, peer, Compression::none());
        };
        if (sends_first) {
          sends();
          recvs();
        } else {
          recvs();
          sends();
        }
      }
      const std::string at = std::string(sends_first ? "sends first" : "recvs first") + ", rank " + std::to_string(r);
      expect_within(ra, values(peer, 12, n1), 1e-2, at + ": the lossy message");
      expect_within(rb, values(peer, 13, n2), 0, at + ": the exact one");
    });
  }
}

// A group serves its peers in the order they need it, not in its calls'
// order: on a ring of 4 whose odd ranks receive, then send, with plain
// calls, each even rank's group must move its send to the right (whose
// plain recv waits for it) while its left neighbour, before it sends, waits
// for its own left group; and a group of 3 ranks whose recv comes from a
// plain peer that can only send once the group's send to the third rank has
// reached it through a plain call there.
TEST(P2pGroup, AGroupServesWhicheverPlainPeerIsReady) {
  for (int n : {4, 6}) ring_shift_with_plain_calls(n, 10, [](int r) { return r % 2 == 0; }, true);
  ncclz_test::Ranks w(3);
  const size_t count = 15000;
  w.run([&](int r, Communicator& comm) {
    const std::vector<float> x = values(r, 11, count);
    std::vector<float> y(count);
    if (r == 0) {  // its recv from 1 first: rank 1 sends only once rank 2 got rank 0's data
      comm.group({recv_of(y.data(), count, DataType::F32, 1), send_of(x.data(), count, DataType::F32, 2)});
      expect_within(y, values(1, 11, count), 0, "rank 0 from rank 1");
    } else if (r == 2) {
      comm.recv(y.data(), count, DataType::F32, 0, Compression::none());
      comm.send(x.data(), count, DataType::F32, 1, Compression::none());
      expect_within(y, values(0, 11, count), 0, "rank 2 from rank 0");
    } else {
      comm.recv(y.data(), count, DataType::F32, 2, Compression::none());
      comm.send(x.data(), count, DataType::F32, 0, Compression::none());
      expect_within(y, values(2, 11, count), 0, "rank 1 from rank 2");
    }
  });
}

// Plain calls that do not meet a group's fail on both ranks at once, not at
// the timeout: two plain sends against a group's send and recv (the second
// send's descriptor where the group's send expects its answer), and a
// collective while a group's send waits for its recv.
TEST(P2pGroup, PlainCallsThatMissAGroupFailBothRanksAtOnce) {
  for (int variant : {0, 1}) {
    ncclz_test::Ranks w(2, [](int, CommConfig& cfg) { cfg.timeout_s = 30; });
    std::vector<std::string> errs(2);
    const auto t0 = std::chrono::steady_clock::now();
    w.run([&](int r, Communicator& comm) {
      const int peer = 1 - r;
      std::vector<float> x(500, 1.0f), y(500);
      try {
        if (r == 0) {
          comm.group({send_of(x.data(), 500, DataType::F32, peer), recv_of(y.data(), 500, DataType::F32, peer)});
        } else {
          comm.send(x.data(), 500, DataType::F32, peer, Compression::none());
          if (variant == 0) {
            comm.send(x.data(), 500, DataType::F32, peer, Compression::none());
          } else {
            comm.all_reduce(x.data(), y.data(), 500, DataType::F32, RedOp::Sum, Compression::none());
          }
        }
      } catch (const Error& e) {
        errs[size_t(r)] = e.what();
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 10.0) << "variant " << variant << ": the ranks waited for their timeout";
    for (int r : {0, 1}) EXPECT_FALSE(errs[size_t(r)].empty()) << "variant " << variant << ", rank " << r;
    const char* says = variant == 0 ? "not a matching recv" : "in a group, which waits for its recv";
    EXPECT_TRUE(errs[0].find(says) != std::string::npos || errs[1].find(says) != std::string::npos) << errs[0] << "\n"
                                                                                                    << errs[1];
  }
}

// One call's invalid arguments: that call fails on both ends (InvalidArgument
// on its rank, RemoteError at the peer), the group's other calls complete and
// the communicator goes on.
TEST(P2pGroup, AnInvalidCallFailsAloneAndTheRestCompletes) {
  ncclz_test::Ranks w(2);
  const size_t count = 4000;
  std::vector<std::string> errs(2);
  w.run([&](int r, Communicator& comm) {
    const int peer = 1 - r;
    std::vector<float> x = values(r, 5, count), y(count, 0.0f), z(count, 0.0f);
    std::vector<PeerCall> calls = {send_of(x.data(), count, DataType::F32, peer),
                                   recv_of(y.data(), count, DataType::F32, peer),
                                   // rank 0's second send: a relative bound on int32 is refused
                                   send_of(x.data(), count, r == 0 ? DataType::I32 : DataType::F32, peer,
                                           r == 0 ? Compression::lossy_rel(1e-3) : Compression::none()),
                                   recv_of(z.data(), count, DataType::F32, peer)};
    try {
      comm.group(calls);
    } catch (const Error& e) {
      errs[size_t(r)] = std::string(r == 0 ? "I:" : "R:") + e.what();
      if (r == 0) {
        EXPECT_NE(dynamic_cast<const InvalidArgument*>(&e), nullptr) << e.what();
      } else {
        EXPECT_NE(dynamic_cast<const RemoteError*>(&e), nullptr) << e.what();
      }
    }
    expect_within(y, values(peer, 5, count), 0, "the first pair of calls");
    if (r == 1) {
      for (float v : z) ASSERT_EQ(v, 0.0f) << "the refused send's recv wrote nothing";
    } else {
      expect_within(z, values(peer, 5, count), 0, "rank 1's second send");
    }
  });
  EXPECT_NE(errs[0].find("lossy"), std::string::npos) << errs[0];
  EXPECT_NE(errs[1].find("invalid arguments"), std::string::npos) << errs[1];
  // Still in step.
  w.run([&](int r, Communicator& comm) {
    float v = float(r + 1), s = 0;
    comm.all_reduce(&v, &s, 1, DataType::F32, RedOp::Sum, Compression::none());
    EXPECT_EQ(s, 3.0f);
  });
}

// Calls that do not match (counts) abort the communicator on both ranks.
TEST(P2pGroup, MismatchedCallsAbortBothRanks) {
  ncclz_test::Ranks w(2);
  std::vector<std::string> errs(2);
  w.run([&](int r, Communicator& comm) {
    const int peer = 1 - r;
    std::vector<float> x(100, 1.0f), y(100);
    try {
      comm.group(
          {send_of(x.data(), r == 0 ? 100 : 99, DataType::F32, peer), recv_of(y.data(), 100, DataType::F32, peer)});
    } catch (const RemoteError& e) {
      errs[size_t(r)] = e.what();
    }
    EXPECT_THROW(comm.barrier(), Aborted);
  });
  for (const std::string& e : errs) EXPECT_NE(e.find("the counts differ"), std::string::npos) << e;
}

// Checks before any message: a bad peer, too many calls with one peer.
TEST(P2pGroup, RefusedBeforeAnyMessage) {
  ncclz_test::Ranks w(2, [](int, CommConfig& cfg) { cfg.nslots = 2; });
  w.run([&](int r, Communicator& comm) {
    float x[4] = {}, y[4] = {};
    try {
      comm.group({send_of(x, 4, DataType::F32, 1 - r), send_of(x, 4, DataType::F32, r)});
      ADD_FAILURE() << "a send to itself was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("call 1 (send)"), std::string::npos) << e.what();
    }
    try {
      comm.group({recv_of(y, 1, DataType::F32, 1 - r), recv_of(y + 1, 1, DataType::F32, 1 - r),
                  recv_of(y + 2, 1, DataType::F32, 1 - r)});
      ADD_FAILURE() << "3 recvs from one peer with 2 slots were taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("more than 2 recvs from rank"), std::string::npos) << e.what();
    }
    // Nothing was sent: the pair is in step.
    comm.group({send_of(x, 4, DataType::F32, 1 - r), recv_of(y, 4, DataType::F32, 1 - r)});
  });
}

// A call on device buffers where this process has no usable device (a build
// without CUDA, or no GPU): that call is refused (InvalidArgument naming it
// here, RemoteError at its peer), the group's other calls complete, and the
// pair stays in step; likewise every call of a group made with the thread's
// buffer device set. (test_cuda_comm.cpp: groups on device buffers that run.)
TEST(P2pGroup, DeviceBuffersWithoutADeviceAreRefusedCallByCall) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a device is there (test_cuda_comm.cpp runs groups on it)";
  ncclz_test::Ranks w(2);
  const size_t count = 3000;
  std::vector<std::string> errs(2);
  w.run([&](int r, Communicator& comm) {
    const int peer = 1 - r;
    std::vector<float> x = values(r, 2, count), y(count, 0.0f), z(count, 0.0f);
    PeerCall claimed = send_of(x.data(), count, DataType::F32, peer);
    if (r == 0) claimed.device = 0;  // (host memory: a device call must not touch it)
    try {
      comm.group({send_of(x.data(), count, DataType::F32, peer), recv_of(y.data(), count, DataType::F32, peer), claimed,
                  recv_of(z.data(), count, DataType::F32, peer)});
    } catch (const Error& e) {
      errs[size_t(r)] = e.what();
      if (r == 0) {
        EXPECT_NE(dynamic_cast<const InvalidArgument*>(&e), nullptr) << e.what();
      } else {
        EXPECT_NE(dynamic_cast<const RemoteError*>(&e), nullptr) << e.what();
      }
    }
    expect_within(y, values(peer, 2, count), 0, "the host calls");
    if (r == 1) {
      for (float v : z) ASSERT_EQ(v, 0.0f) << "the refused send's recv wrote nothing";
    } else {
      expect_within(z, values(peer, 2, count), 0, "rank 1's second send");
    }
    // The thread's buffer device: every call of rank 1's group is on device 0.
    std::fill(y.begin(), y.end(), 0.0f);
    set_buffer_device(r == 1 ? 0 : -1);
    try {
      comm.group({send_of(x.data(), count, DataType::F32, peer), recv_of(y.data(), count, DataType::F32, peer)});
      ADD_FAILURE() << "rank " << r << ": a group with a refused call returned";
    } catch (const Error& e) {
      EXPECT_NE(dynamic_cast<const InvalidArgument*>(&e) != nullptr, r == 0) << e.what();
    }
    set_buffer_device(-1);
    for (float v : y) ASSERT_EQ(v, 0.0f) << "rank " << r << ": a refused pair's recv wrote";
    float v = float(r + 1), s = 0;
    comm.all_reduce(&v, &s, 1, DataType::F32, RedOp::Sum, Compression::none());
    EXPECT_EQ(s, 3.0f);
  });
  EXPECT_NE(errs[0].find("group call 2 (send)"), std::string::npos) << errs[0];
  EXPECT_NE(errs[1].find("invalid arguments"), std::string::npos) << errs[1];
}
