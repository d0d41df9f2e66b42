// The timeline trace (see trace.hpp).
#include "base/trace.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "base/log.hpp"

namespace ncclz::trace {

std::atomic<int> g_live{0};

namespace {

struct Binding {
  Recorder* rec = nullptr;
  int tid = 0;
};
thread_local Binding t_bind;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The live Recorders, for the exit handler. Never destroyed (the handler
/// may run after static destructors).
struct Registry {
  std::mutex mu;
  std::set<Recorder*> live;
  std::map<std::string, int> files;  ///< `<base>.rank<R>`: communicators so far
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void write_all_at_exit() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  for (Recorder* x : r.live) x->write();
}

/// `s` as a JSON string's contents.
void put_escaped(std::string& out, const char* s) {
  for (; *s; ++s) {
    const unsigned char ch = static_cast<unsigned char>(*s);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += char(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += char(ch);
    }
  }
}

void put_number(std::string& out, double v) {
  char buf[32];
  // Integral values (counts, bytes) without an exponent; anything else with
  // enough digits; JSON has no NaN or infinity.
  if (!(v == v) || v > 1e300 || v < -1e300) {
    out += "null";
    return;
  }
  if (v == double(int64_t(v)) && v < 9e15 && v > -9e15) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  out += buf;
}

/// Nanoseconds as microseconds with three decimals.
void put_us(std::string& out, int64_t ns) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  out += buf;
}

}  // namespace

Recorder::Recorder(std::string file, int rank, int nranks, size_t max_events)
    : file_(std::move(file)), rank_(rank), nranks_(nranks), max_events_(max_events) {
  static std::once_flag exit_hook;
  std::call_once(exit_hook, [] { std::atexit(write_all_at_exit); });
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    r.live.insert(this);
  }
  g_live.fetch_add(1);
}

Recorder::~Recorder() {
  {
    // Out of the registry first, so that the exit handler never writes a
    // Recorder being destroyed.
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    r.live.erase(this);
  }
  write();
  g_live.fetch_sub(1);
}

void Recorder::add(const Event& e) {
  std::lock_guard<std::mutex> lk(mu_);
  if (written_ || events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(e);
}

size_t Recorder::events() const {
  std::lock_guard<std::mutex> lk(mu_);
  return events_.size();
}

size_t Recorder::dropped() const {
  std::lock_guard<std::mutex> lk(mu_);
  return dropped_;
}

bool Recorder::write() {
  std::lock_guard<std::mutex> lk(mu_);
  if (written_) return write_ok_;
  written_ = true;
  std::string out;
  out.reserve(256 + events_.size() * 160);
  const std::string pid = std::to_string(rank_);
  out += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"ncclz rank " +
         pid + "\"}},\n";
  out += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"sort_index\":" + pid +
         "}}";
  std::set<int> tids{0};
  for (const Event& e : events_) tids.insert(e.tid);
  for (int t : tids) {
    const std::string name = t == 0 ? "calls" : "channel " + std::to_string(t - 1);
    out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(t) +
           ",\"args\":{\"name\":\"" + name + "\"}}";
    out += ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(t) +
           ",\"args\":{\"sort_index\":" + std::to_string(t) + "}}";
  }
  for (const Event& e : events_) {
    out += ",\n{\"name\":\"";
    put_escaped(out, e.name);
    out += "\",\"ph\":\"X\",\"pid\":" + pid + ",\"tid\":" + std::to_string(e.tid) + ",\"ts\":";
    put_us(out, e.ts_ns);
    out += ",\"dur\":";
    put_us(out, std::max<int64_t>(e.dur_ns, 0));
    if (e.nargs > 0) {
      out += ",\"args\":{";
      for (int i = 0; i < e.nargs; ++i) {
        if (i) out += ',';
        out += '"';
        put_escaped(out, e.args[i].key);
        out += "\":";
        if (e.str_mask & (1u << i)) {
          out += '"';
          put_escaped(out, e.args[i].str);
          out += '"';
        } else {
          put_number(out, e.args[i].num);
        }
      }
      out += '}';
    }
    out += '}';
  }
  out += "\n],\n\"otherData\":{\"ncclz_rank\":" + pid + ",\"nranks\":" + std::to_string(nranks_) +
         ",\"events\":" + std::to_string(events_.size()) + ",\"dropped_events\":" + std::to_string(dropped_) +
         ",\"max_events\":" + std::to_string(max_events_) +
         ",\"clock\":\"steady_clock (CLOCK_MONOTONIC), microseconds\"}}\n";
  std::FILE* f = std::fopen(file_.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) {
    NCCLZ_WARN(rank_, "trace: could not write %s (NCCLZ_TRACE_FILE): is its directory there and writable?",
               file_.c_str());
  } else {
    NCCLZ_INFO(rank_, "trace: %zu events (%zu dropped) written to %s", events_.size(), dropped_, file_.c_str());
  }
  events_.clear();
  events_.shrink_to_fit();
  write_ok_ = ok;
  return ok;
}

std::string file_for(const std::string& base, int rank) {
  const std::string stem = base + ".rank" + std::to_string(rank);
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  const int k = r.files[stem]++;
  return k == 0 ? stem + ".json" : stem + "." + std::to_string(k) + ".json";
}

void Bind::set(Recorder* r, int tid) {
  prev_ = t_bind.rec;
  prev_tid_ = t_bind.tid;
  t_bind.rec = r;
  t_bind.tid = tid;
  bound_ = true;
}

void Bind::restore() {
  t_bind.rec = prev_;
  t_bind.tid = prev_tid_;
}

Recorder* current() { return t_bind.rec; }

void Scope::begin(const char* name) {
  rec_ = t_bind.rec;
  if (!rec_) return;
  e_.name = name;
  e_.tid = t_bind.tid;
  e_.nargs = 0;
  e_.str_mask = 0;
  e_.ts_ns = now_ns();
}

void Scope::end() {
  e_.dur_ns = now_ns() - e_.ts_ns;
  rec_->add(e_);
}

}  // namespace ncclz::trace
