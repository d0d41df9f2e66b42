// A per-rank timeline trace in Chrome's trace-event JSON (NCCLZ_TRACE_FILE;
// docs/ENVIRONMENT.md, docs/GPU.md "Timeline"), for machines where no
// profiler runs: what a call spends where, thread by thread.
//
// A communicator with CommConfig::trace_file set owns a Recorder. The thread
// that runs a call binds it (Bind, tid 0: "calls"), and each channel's part
// binds it on the thread that runs it (tid 1 + channel: "channel c"); a Scope
// on a bound thread records one complete event ("ph": "X") from its
// construction to its destruction, with a few numeric or static-string args:
//
//   trace::Scope s("encode");
//   ...
//   s.arg("bytes", double(bytes));
//
// Off (no Recorder alive in the process), a Scope costs one predictable
// branch on a global atomic (relaxed load) and one on a null pointer: no
// clock read, no allocation, no lock. On, an event is one clock read at each
// end and a locked append; at most max_events per Recorder are kept, the rest
// counted ("dropped_events" in the file's otherData).
//
// The file: {"traceEvents": [...], "displayTimeUnit": "ns", "otherData":
// {...}}, "pid" = the rank, "ts"/"dur" in microseconds of the steady clock
// (CLOCK_MONOTONIC: the same clock in every process of a machine, so the
// ranks' files line up when merged), process_name/thread_name metadata
// events. Written once: when the communicator is destroyed (closed), or at
// a clean process exit while it is still alive (std::atexit).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ncclz::trace {

constexpr int kMaxArgs = 8;
constexpr size_t kMaxEvents = size_t(1) << 20;  ///< per Recorder (160 MiB at most)

/// One "args" entry: a number, or a static string (Event::str_mask says which).
struct Arg {
  const char* key;
  union {
    double num;
    const char* str;
  };
};

/// One complete event (static strings only: nothing is copied).
struct Event {
  const char* name;
  int64_t ts_ns;   ///< steady clock, since its epoch
  int64_t dur_ns;  ///< >= 0
  int32_t tid;
  uint16_t nargs;
  uint16_t str_mask;  ///< bit i: args[i] is a string
  Arg args[kMaxArgs];
};

/// Recorders alive in this process (Scope's one test).
extern std::atomic<int> g_live;
inline bool on() { return g_live.load(std::memory_order_relaxed) != 0; }

/// One communicator's events.
class Recorder {
 public:
  /// Rank `rank` of `nranks`, written to `file` (file_for names it).
  Recorder(std::string file, int rank, int nranks, size_t max_events = kMaxEvents);
  /// Writes the file unless it was written already.
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  /// Appends `e` (thread-safe); counted as dropped past max_events or once written.
  void add(const Event& e);
  /// Writes the file, once (later calls return the first's result); warns
  /// (NCCLZ_WARN) and returns false when it cannot be written.
  bool write();

  const std::string& file() const { return file_; }
  size_t events() const;
  size_t dropped() const;

 private:
  const std::string file_;
  const int rank_, nranks_;
  const size_t max_events_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  size_t dropped_ = 0;
  bool written_ = false, write_ok_ = false;
};

/// The file of rank `rank`'s communicator: `<base>.rank<R>.json`, and for the
/// k-th later communicator of that rank with the same base in this process
/// `<base>.rank<R>.<k>.json` (k = 1, 2, ...), so that none overwrites another.
std::string file_for(const std::string& base, int rank);

/// Binds `r` (nothing when null) to this thread as thread `tid` for its
/// lifetime; the previous binding comes back after.
class Bind {
 public:
  Bind(Recorder* r, int tid) {
    if (r) set(r, tid);
  }
  ~Bind() {
    if (bound_) restore();
  }
  Bind(const Bind&) = delete;
  Bind& operator=(const Bind&) = delete;

 private:
  void set(Recorder* r, int tid);
  void restore();
  Recorder* prev_ = nullptr;
  int prev_tid_ = 0;
  bool bound_ = false;
};

/// The Recorder bound to this thread (null when none; read it only when on()).
Recorder* current();

/// One complete event on this thread's Recorder, from construction to destruction.
class Scope {
 public:
  explicit Scope(const char* name) {
    if (on()) begin(name);
  }
  ~Scope() {
    if (rec_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  /// Whether the event is being recorded (args are then worth computing).
  bool active() const { return rec_ != nullptr; }
  Scope& arg(const char* key, double v) {
    if (rec_ && e_.nargs < kMaxArgs) {
      e_.args[e_.nargs].key = key;
      e_.args[e_.nargs++].num = v;
    }
    return *this;
  }
  /// `s` must outlive the Recorder (a literal, or a static name).
  Scope& arg(const char* key, const char* s) {
    if (rec_ && e_.nargs < kMaxArgs) {
      e_.str_mask = uint16_t(e_.str_mask | (1u << e_.nargs));
      e_.args[e_.nargs].key = key;
      e_.args[e_.nargs++].str = s ? s : "";
    }
    return *this;
  }

 private:
  void begin(const char* name);
  void end();
  Recorder* rec_ = nullptr;
  Event e_;  // set only when recording
};

}  // namespace ncclz::trace
