// NCCL-style unique id: how ranks find each other without a rendezvous port
// agreed in advance. One process (the future rank 0's) makes it, the launcher
// or the application shares its bytes with the other ranks out of band (a
// store, MPI, a file), and every rank passes it to Communicator::create.
#pragma once

#include <cstdint>
#include <string>

namespace ncclz {

/// 128 opaque bytes: the address rank 0 listens on and the job's token.
struct UniqueId {
  uint8_t bytes[128];
};

/// Makes an id: binds the listening socket that rank 0 will use (kept open in
/// this process, which must then be rank 0) at addr:port ("" and 0: the
/// advertised address, a free port) and draws a random token.
UniqueId make_unique_id(const std::string& addr = "", int port = 0);

}  // namespace ncclz
