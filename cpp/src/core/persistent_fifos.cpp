// Where the persistent ring's FIFOs live: the setting, the record exchange
// and the shared abort page (see persistent_fifos.hpp).
#include "core/persistent_fifos.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "base/env.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {

FifoChoice fifo_choice_from_env() {
  const std::string v = env::get_string("NCCLZ_PERSISTENT_FIFOS", "auto");
  if (v == "auto" || v.empty()) return FifoChoice::Auto;
  if (v == "device") return FifoChoice::Device;
  if (v == "host") return FifoChoice::Host;
  throw InvalidArgument("ncclz: NCCLZ_PERSISTENT_FIFOS=" + v + ": expected auto, device or host");
}

const char* fifo_choice_name(FifoChoice c) {
  switch (c) {
    case FifoChoice::Device: return "device";
    case FifoChoice::Host: return "host";
    default: return "auto";
  }
}

std::vector<uint8_t> ring_allgather(transport::ProxyChannel& ch, const void* mine, size_t bytes, int rank, int nranks,
                                    transport::Clock::time_point deadline) {
  if (!ch.send || !ch.recv || ch.send->slot_bytes() < bytes) {
    throw Error("ncclz rank " + std::to_string(rank) +
                ": the persistent ring's setup exchange needs connections "
                "whose slots hold " +
                std::to_string(bytes) + " bytes");
  }
  std::vector<uint8_t> all(bytes * size_t(nranks));
  std::memcpy(all.data() + bytes * size_t(rank), mine, bytes);
  // Hop k: send the record of rank - k + 1, receive that of rank - k.
  for (int k = 1; k < nranks; ++k) {
    const int out = ((rank - k + 1) % nranks + nranks) % nranks, in = ((rank - k) % nranks + nranks) % nranks;
    uint8_t* slot = ch.send->acquire(deadline);
    std::memcpy(slot, all.data() + bytes * size_t(out), bytes);
    ch.send->post(bytes);
    const transport::SlotView v = ch.recv->wait(deadline);
    if (v.bytes != bytes) {
      throw Error("ncclz rank " + std::to_string(rank) + ": the persistent ring's setup exchange got " +
                  std::to_string(v.bytes) + " bytes from rank " + std::to_string(ch.recv->peer()) + ", expected " +
                  std::to_string(bytes) + " (ranks of different ncclz builds?)");
    }
    std::memcpy(all.data() + bytes * size_t(in), v.data, bytes);
    ch.recv->release();
  }
  return all;
}

AbortPage& AbortPage::operator=(AbortPage&& o) noexcept {
  if (this != &o) {
    drop();
    map_ = o.map_;
    bytes_ = o.bytes_;
    name_ = std::move(o.name_);
    linked_ = o.linked_;
    o.map_ = nullptr;
    o.linked_ = false;
  }
  return *this;
}

AbortPage::~AbortPage() { drop(); }

void AbortPage::drop() {
  if (map_) munmap(map_, bytes_);
  map_ = nullptr;
  unlink();
}

void AbortPage::unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

AbortPage AbortPage::create() {
  AbortPage p;
  p.bytes_ = size_t(sysconf(_SC_PAGESIZE));
  std::random_device rd;
  const uint64_t tag = (uint64_t(rd()) << 32) ^ rd();
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 8; ++tries) {
    p.name_ = "/ncclz-abort-" + std::to_string(getpid()) + "-" + std::to_string(tag + uint64_t(tries));
    fd = shm_open(p.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw Error("ncclz: creating the persistent ring's abort page " + p.name_ + ": " + std::strerror(errno));
  p.linked_ = true;
  const bool sized = ftruncate(fd, off_t(p.bytes_)) == 0;
  void* m = sized ? mmap(nullptr, p.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int err = errno;
  close(fd);
  if (m == MAP_FAILED)
    throw Error("ncclz: mapping the persistent ring's abort page " + p.name_ + ": " + std::strerror(err));
  p.map_ = m;  // (a new segment's bytes are zero: the word is clear)
  return p;
}

AbortPage AbortPage::open(const std::string& name) {
  AbortPage p;
  p.bytes_ = size_t(sysconf(_SC_PAGESIZE));
  p.name_ = name;
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) throw Error("ncclz: opening the persistent ring's abort page " + name + ": " + std::strerror(errno));
  void* m = mmap(nullptr, p.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (m == MAP_FAILED)
    throw Error("ncclz: mapping the persistent ring's abort page " + name + ": " + std::strerror(err));
  p.map_ = m;
  return p;
}

}  // namespace ncclz::core
