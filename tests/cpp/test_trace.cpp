// The timeline trace (base/trace.hpp, CommConfig::trace_file /
// NCCLZ_TRACE_FILE): a file per rank in Chrome's trace-event JSON with the
// calls, their steps and the channels' events inside them; nothing when off.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/trace.hpp"
#include "ncclz/communicator.hpp"
#include "test_ranks.hpp"

using namespace ncclz;
using ncclz_test::Ranks;

namespace {

/// One "ph":"X" event of a trace file.
struct Ev {
  std::string name;
  int tid = -1;
  double ts = 0, dur = 0;
  std::string line;
};

/// The file's text ("" when it is not there).
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// The text after `"key":` in `line`, up to the next , or }.
std::string field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t p = line.find(k);
  if (p == std::string::npos) return "";
  size_t b = p + k.size(), e = b;
  if (line[b] == '"') return line.substr(b + 1, line.find('"', b + 1) - b - 1);
  while (e < line.size() && line[e] != ',' && line[e] != '}') ++e;
  return line.substr(b, e - b);
}

/// The complete events of a trace (the writer puts one event on a line).
std::vector<Ev> complete_events(const std::string& text) {
  std::vector<Ev> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"ph\":\"X\"") == std::string::npos) continue;
    Ev e;
    e.name = field(line, "name");
    e.tid = std::atoi(field(line, "tid").c_str());
    e.ts = std::atof(field(line, "ts").c_str());
    e.dur = std::atof(field(line, "dur").c_str());
    e.line = line;
    out.push_back(e);
  }
  return out;
}

/// A new empty directory under the test's temporary directory.
std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "ncclz_trace_" + name + "_" + std::to_string(getpid());
  std::system(("rm -rf '" + d + "'").c_str());
  EXPECT_EQ(mkdir(d.c_str(), 0700), 0) << d;
  return d;
}

/// The files in `dir`.
int count_files(const std::string& dir) {
  int n = 0;
  if (FILE* p = popen(("ls -A '" + dir + "'").c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) ++n;
    pclose(p);
  }
  return n;
}

void all_reduces(Ranks& w, size_t n) {
  w.run([&](int r, Communicator& comm) {
    std::vector<float> x(n), y(n);
    for (size_t i = 0; i < n; ++i) x[i] = float(std::sin(0.001 * double(i)) + 0.1 * r);
    comm.all_reduce(x.data(), y.data(), n, DataType::F32, RedOp::Sum, Compression::lossy_rel(1e-3));
    comm.all_reduce(x.data(), y.data(), n, DataType::F32, RedOp::Sum, Compression::none());
  });
}

}  // namespace

TEST(Trace, EveryRankWritesItsCallsAndTheChannelsInsideThem) {
  if (std::getenv("NCCLZ_TRACE_FILE")) GTEST_SKIP() << "NCCLZ_TRACE_FILE is set for the whole test run";
  const std::string dir = fresh_dir("on");
  const std::string base = dir + "/t";
  constexpr int kRanks = 3;
  {
    // 600 KB: both channels (kBytesPerChannel), dozens of 16 KiB slices on each.
    Ranks w(
        kRanks,
        [&](int, CommConfig& cfg) {
          cfg.trace_file = base;
          cfg.slot_bytes = 16384;
        },
        2);
    all_reduces(w, 150000);
    EXPECT_TRUE(trace::on());
  }  // closed: written
  EXPECT_FALSE(trace::on());
  EXPECT_EQ(count_files(dir), kRanks);
  for (int r = 0; r < kRanks; ++r) {
    const std::string text = slurp(base + ".rank" + std::to_string(r) + ".json");
    ASSERT_FALSE(text.empty()) << "rank " << r;
    EXPECT_EQ(text.front(), '{');
    EXPECT_NE(text.find("\"traceEvents\":["), std::string::npos);
    EXPECT_NE(text.find("\"dropped_events\":0"), std::string::npos);
    EXPECT_NE(text.find("\"thread_name\""), std::string::npos);
    EXPECT_NE(text.find("\"name\":\"channel 1\""), std::string::npos);  // tid 2's name
    const std::vector<Ev> evs = complete_events(text);
    std::map<std::string, int> by_name;
    std::vector<Ev> calls;
    for (const Ev& e : evs) {
      ++by_name[e.name];
      EXPECT_GE(e.dur, 0) << e.line;
      EXPECT_NE(field(e.line, "pid"), "") << e.line;
      EXPECT_EQ(std::atoi(field(e.line, "pid").c_str()), r) << e.line;
      if (e.name == "all_reduce") calls.push_back(e);
    }
    ASSERT_EQ(calls.size(), 2u) << "rank " << r;
    EXPECT_EQ(calls[0].tid, 0);
    EXPECT_EQ(field(calls[0].line, "ran"), "lossy_rel");
    EXPECT_EQ(field(calls[1].line, "ran"), "none");
    EXPECT_EQ(field(calls[0].line, "bytes"), "600000");
    EXPECT_EQ(field(calls[0].line, "algorithm"), "ring");
    EXPECT_EQ(field(calls[1].line, "seq"), "1");
    for (const char* name : {"check_describe", "describe_stats", "exchange", "decide", "schedule", "channel", "wait_in",
                             "acquire_out", "post_out", "encode", "settle", "flush"}) {
      EXPECT_GT(by_name[name], 0) << "rank " << r << ": no " << name << " event";
    }
    EXPECT_GT(by_name["decode"] + by_name["reduce"], 0) << "rank " << r;
    EXPECT_GT(by_name["stage_prepare"] + by_name["quantize"], 0) << "rank " << r;  // the lossy call's quantizer
    // Every channel event (tid >= 1) lies inside one of the calls.
    int on_channels = 0;
    for (const Ev& e : evs) {
      if (e.tid < 1) continue;
      ++on_channels;
      bool inside = false;
      for (const Ev& c : calls) inside = inside || (e.ts >= c.ts - 1e-3 && e.ts + e.dur <= c.ts + c.dur + 1e-3);
      EXPECT_TRUE(inside) << "rank " << r << ": " << e.line << " outside the calls";
    }
    EXPECT_GT(on_channels, 20) << "rank " << r;
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(Trace, OffRecordsAndWritesNothing) {
  if (std::getenv("NCCLZ_TRACE_FILE")) GTEST_SKIP() << "NCCLZ_TRACE_FILE is set for the whole test run";
  const std::string dir = fresh_dir("off");
  {
    Ranks w(2, nullptr, 2);
    EXPECT_FALSE(trace::on());
    all_reduces(w, 5000);
    for (const auto& c : w.comms) EXPECT_EQ(c->config().trace_file, "");
  }
  EXPECT_EQ(count_files(dir), 0);
  EXPECT_FALSE(trace::on());
  // A Scope with nothing bound records nothing (and costs the one test).
  trace::Scope s("nothing");
  EXPECT_FALSE(s.active());
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(Trace, RecorderBoundsItsEventsAndNamesLaterFiles) {
  const std::string dir = fresh_dir("cap");
  const std::string file = trace::file_for(dir + "/x", 5);
  EXPECT_EQ(file, dir + "/x.rank5.json");
  EXPECT_EQ(trace::file_for(dir + "/x", 5), dir + "/x.rank5.1.json");
  EXPECT_EQ(trace::file_for(dir + "/x", 4), dir + "/x.rank4.json");
  {
    trace::Recorder rec(file, 5, 8, /*max_events=*/3);
    trace::Bind b(&rec, 2);
    {
      trace::Scope outer("outer \"quoted\"");
      outer.arg("n", 42.0).arg("what", "a\\b");
      for (int i = 0; i < 4; ++i) trace::Scope inner("inner");
    }
    EXPECT_EQ(rec.events(), 3u);
    EXPECT_EQ(rec.dropped(), 2u);
  }
  const std::string text = slurp(file);
  EXPECT_NE(text.find("\"dropped_events\":2"), std::string::npos) << text;
  EXPECT_NE(text.find("\"max_events\":3"), std::string::npos);
  EXPECT_NE(text.find("\"nranks\":8"), std::string::npos);
  // The outer event ends last: dropped; the three inner ones are there, on thread 2.
  const std::vector<Ev> evs = complete_events(text);
  ASSERT_EQ(evs.size(), 3u);
  for (const Ev& e : evs) {
    EXPECT_EQ(e.name, "inner");
    EXPECT_EQ(e.tid, 2);
    EXPECT_EQ(field(e.line, "pid"), "5");
  }
  EXPECT_NE(text.find("\"name\":\"channel 1\""), std::string::npos);
  // Escaping: a second recorder keeps the quoted name and the string arg.
  const std::string file2 = dir + "/y.json";
  {
    trace::Recorder rec(file2, 0, 1);
    trace::Bind b(&rec, 0);
    trace::Scope outer("outer \"quoted\"");
    outer.arg("n", 42.0).arg("what", "a\\b");
  }
  const std::string t2 = slurp(file2);
  EXPECT_NE(t2.find("\"name\":\"outer \\\"quoted\\\"\""), std::string::npos) << t2;
  EXPECT_NE(t2.find("\"args\":{\"n\":42,\"what\":\"a\\\\b\"}"), std::string::npos) << t2;
  std::system(("rm -rf '" + dir + "'").c_str());
}
