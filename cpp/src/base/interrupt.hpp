// Interrupting a blocked call from the thread that made it.
//
// A caller that must react to something while ncclz blocks (the Python
// bindings: the interpreter's signal handlers, Ctrl-C) installs a check on
// its thread with ncclz::set_interrupt_check (ncclz/communicator.hpp). Every
// wait that has slept at least once (the slot rings' waits, the caller's wait
// for its sibling channels) polls it through poll_interrupt(), at most once
// per kInterruptPollMs on that thread; a non-null answer makes the wait throw
// ncclz::Interrupted, which aborts the communicator like any failure while
// data moves. Threads without a check (the channels' workers, the socket
// proxies) never poll: the abort reaches them through the AbortFlag.
#pragma once

namespace ncclz::base {

constexpr int kInterruptPollMs = 50;

/// Whether the calling thread has an interrupt check installed.
bool has_interrupt_check();
/// Runs the calling thread's check if kInterruptPollMs passed since its last
/// run: nullptr to go on waiting, else why to stop (e.g. "KeyboardInterrupt").
const char* poll_interrupt();

}  // namespace ncclz::base
