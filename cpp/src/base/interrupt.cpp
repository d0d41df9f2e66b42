// Interrupt checks (see interrupt.hpp).
#include "base/interrupt.hpp"

#include <chrono>

#include "ncclz/communicator.hpp"

namespace ncclz {
namespace {

struct ThreadCheck {
  InterruptCheck fn = nullptr;
  void* ctx = nullptr;
  std::chrono::steady_clock::time_point last{};
};

thread_local ThreadCheck t_check;

}  // namespace

void set_interrupt_check(InterruptCheck check, void* ctx) {
  t_check.fn = check;
  t_check.ctx = ctx;
  t_check.last = {};
}

namespace base {

bool has_interrupt_check() { return t_check.fn != nullptr; }

const char* poll_interrupt() {
  if (!t_check.fn) return nullptr;
  const auto now = std::chrono::steady_clock::now();
  if (now - t_check.last < std::chrono::milliseconds(kInterruptPollMs)) return nullptr;
  t_check.last = now;
  return t_check.fn(t_check.ctx);
}

}  // namespace base
}  // namespace ncclz
