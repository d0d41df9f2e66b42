// A bootstrap over a subset of a communicator's ranks (the ranks of one host),
// built on the communicator's own bootstrap: what a second transport for the
// intra-host links needs (create_transport takes a Bootstrap, and its
// collectives are over all of that bootstrap's ranks).
//
// Member i of the group is global rank members[i]. Point-to-point messages go
// through the parent's send/recv with the tag moved into a range of its own
// (tag ^ kGroupTagBit), so they never meet the parent's own streams.
// allgather: every member sends its part to member 0, which sends the whole
// back (star, like the TCP bootstrap's own); barrier is an allgather of one
// byte. Host and process ids, the address and the timeout are the parent's;
// the job key is the parent's with "-host<index>" added, so shared-memory
// segments of different groups never share a name; abort aborts the parent.
#pragma once

#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "ncclz/error.hpp"

namespace ncclz::topology {

class GroupBootstrap final : public Bootstrap {
 public:
  /// `members`: the group's global ranks in order (the caller's among them);
  /// `group`: an index that names the group (the host's).
  GroupBootstrap(Bootstrap& parent, std::vector<int> members, int group);

  int rank() const override { return me_; }
  int size() const override { return int(members_.size()); }
  const std::string& host_id(int rank) const override { return parent_.host_id(global(rank)); }
  const std::string& process_id(int rank) const override { return parent_.process_id(global(rank)); }
  const std::string& job_key() const override { return key_; }
  void allgather(const void* mine, size_t bytes, void* all) override;
  void barrier() override;
  void send(int peer, int tag, const void* data, size_t bytes) override;
  void recv(int peer, int tag, void* data, size_t bytes) override;
  void abort(const std::string& reason) override { parent_.abort(reason); }
  std::string advertised_address() const override { return parent_.advertised_address(); }
  double timeout_s() const override { return parent_.timeout_s(); }

  /// Moves a group tag out of the parent's tag space.
  static constexpr int kGroupTagBit = 0x20000000;

  /// "(on the links inside host 1, whose ranks 0, 1, 2 are ranks 3, 4, 5 of the communicator)":
  /// what an error of the group's transport adds, since it names the group's ranks.
  std::string note() const;

 private:
  int global(int r) const;
  Bootstrap& parent_;
  std::vector<int> members_;
  int me_ = 0;
  std::string key_;
  int group_ = 0;
};

/// Runs fn(); an ncclz error it throws (other than Aborted) is thrown again,
/// of the same type, with `note` appended to its message.
template <class Fn>
auto with_note(const std::string& note, Fn&& fn) -> decltype(fn());

template <class Fn>
auto with_note(const std::string& note, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Aborted&) {
    throw;
  } catch (const Timeout& e) {
    throw Timeout(std::string(e.what()) + " " + note);
  } catch (const RemoteError& e) {
    throw RemoteError(std::string(e.what()) + " " + note);
  } catch (const CorruptData& e) {
    throw CorruptData(std::string(e.what()) + " " + note);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string(e.what()) + " " + note);
  } catch (const SystemError& e) {
    throw SystemError(std::string(e.what()) + " " + note);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " " + note);
  }
}

}  // namespace ncclz::topology
