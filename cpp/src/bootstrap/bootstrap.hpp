// Bootstrap: how ranks find each other before any transport exists.
//
// Rank 0 listens on a TCP address (MASTER_ADDR:MASTER_PORT in the torchrun
// convention, or the address inside a UniqueId that rank 0 created and the
// launcher shared). Every other rank connects and proves, by challenge and
// response, that it holds the job's token after rank 0 has proven it first
// (the token itself never travels); ranks also present the job id (the
// launcher's run id) and rank 0 checks that both agree (bootstrap/handshake.hpp
// has the messages, bootstrap/job_identity.hpp the identity). Handshakes run
// concurrently with short deadlines, so idle or hostile connections never
// delay a real rank. A duplicate rank, a world-size mismatch or a second
// rank 0 of the same identity stops the whole job with an error naming both
// claimants on every rank; ranks of another job are refused with an error
// that says so. Once all ranks are in, rank 0 distributes the table of every
// rank's own listening address and host id, and keeps its rendezvous port open
// for the bootstrap's lifetime: a late claimant of the same identity stops the
// job (set_conflict_handler), anyone else is told that the job is complete.
// After that the bootstrap offers small collective operations (allgather,
// barrier) and point-to-point messages that the transports use to exchange
// connection details; a service thread per bootstrap accepts and reads those.
// A long wait says what it waits for (WARN, after NCCLZ_WAIT_REPORT seconds
// and at doubling intervals); a rank that never arrives gives every waiting
// rank a Timeout that names the missing ranks.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ncclz/unique_id.hpp"

namespace ncclz {

struct BootstrapConfig {
  int rank = 0;
  int size = 1;
  std::string master_addr = "127.0.0.1";  ///< MASTER_ADDR
  int master_port = 29500;                ///< MASTER_PORT
  std::string token;                      ///< the job's secret (NCCLZ_TOKEN or from the UniqueId)
  double timeout_s = 300;                 ///< NCCLZ_TIMEOUT
  std::string socket_ifname;              ///< NCCLZ_SOCKET_IFNAME: interface whose address ranks advertise
  /// The launcher's id of this job ("" = from the environment:
  /// bootstrap::job_id_from_env); every rank must present the same one.
  std::string job_id;
  /// false: no job-id check (UniqueId rendezvous: the id's random token is
  /// the job's identity already).
  bool check_job_id = true;
  /// Which rendezvous at this address this is for this rank in this process
  /// (-1: counted, 0 for the first). Rank 0 keeps a finished rendezvous's
  /// port open; a claim of a later generation is the job's next communicator
  /// (it waits for rank 0 to take the port over), one of the same or an
  /// earlier generation is a second claimant of the rank.
  int generation = -1;
};

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  /// Rendezvous at cfg.master_addr:master_port (rank 0 listens there).
  static std::unique_ptr<Bootstrap> create(const BootstrapConfig& cfg);
  /// Creates a unique id: binds a listening socket (kept open in this process
  /// for rank 0 to use) and draws a random token.
  static UniqueId make_unique_id(const std::string& addr = "", int port = 0);
  /// Rendezvous through a UniqueId (the rank that made it must be rank 0 and
  /// run in the process that made it).
  static std::unique_ptr<Bootstrap> create(const UniqueId& id, int rank, int size, double timeout_s);

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Opaque id of the host a rank runs on (equal ids: same machine, shared memory works).
  virtual const std::string& host_id(int rank) const = 0;
  /// Id of the process a rank runs in (equal ids: same process, in-process transport works).
  virtual const std::string& process_id(int rank) const = 0;
  /// The job's unique key (the same string on all ranks), for naming shm segments etc.
  virtual const std::string& job_key() const = 0;

  /// Collective: every rank contributes `bytes` bytes; all[r*bytes...] gets rank r's.
  virtual void allgather(const void* mine, size_t bytes, void* all) = 0;
  virtual void barrier() = 0;
  /// Point-to-point small messages (tags keep separate streams apart).
  virtual void send(int peer, int tag, const void* data, size_t bytes) = 0;
  virtual void recv(int peer, int tag, void* data, size_t bytes) = 0;
  /// Fails every pending and future bootstrap call with Aborted(reason).
  virtual void abort(const std::string& reason) = 0;
  /// What to do (on the bootstrap's service thread) when rank 0 learns after
  /// the rendezvous that another process claims a rank of this job with the
  /// job's identity (two jobs of one identity on one port: ranks of one may
  /// have joined the other): the communicator aborts with `reason`. Called at
  /// once if that already happened; nullptr unregisters (and waits for a call
  /// in progress to end). Only rank 0 ever calls it.
  virtual void set_conflict_handler(std::function<void(const std::string& reason)> fn) { (void)fn; }

  /// The IP address this rank advertised to the others (NCCLZ_SOCKET_IFNAME's
  /// interface, else the local address of its connection to rank 0). The
  /// socket transport listens there unless NCCLZ_SOCKET_IFNAME says otherwise.
  virtual std::string advertised_address() const { return "127.0.0.1"; }
  /// This rank's point-to-point listener, "host:port" (diagnostics, tests).
  virtual std::string listen_endpoint() const { return ""; }
  /// Timeout (seconds) of each bootstrap operation (NCCLZ_TIMEOUT).
  virtual double timeout_s() const { return 300; }
};

}  // namespace ncclz
