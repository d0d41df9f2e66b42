// Bindings of the collective runtime (ncclz::Communicator, UniqueId) into the
// submodule ncclz._core.comm. Thin on purpose: python/ncclz/comm.py wraps
// these raw classes in the Pythonic ncclz.Communicator.
//
// Buffers arrive as nb::ndarray with .noconvert(), so nanobind never makes a
// hidden converted copy (an in-place collective into a temporary would lose
// its result). The bindings only map arrays to pointers, element counts and
// types (refusing, with what to do, arrays they cannot map: another device,
// an unsupported dtype, not C-contiguous) and strings to enums; every check
// of the call itself (counts and types of the two arrays, overlap, root,
// peer, op, compression) is the runtime's Communicator::check_call, raised
// here on this rank before any data moves, as ncclz.InvalidArgumentError
// (python/ncclz/comm.py then takes part in the call as refused:
// Communicator::refuse, bound as `refuse`). The policy's hints are the exception: they are
// rank 0's proposal, so a bad one is left to the call, which fails it on every
// rank. Only public headers (cpp/include/ncclz/).
// The GIL is released for every call that may block (rendezvous and every
// collective), only after the array views have been read, and abort() is
// callable from another thread while a collective is waiting. While a call
// waits, the interpreter's signal handlers still run (blocking() below), so
// Ctrl-C interrupts it with KeyboardInterrupt.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ncclz/communicator.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"
#include "ncclz/policy_hints.hpp"
#include "ncclz/topology.hpp"
#include "ncclz/unique_id.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using ncclz::CallArgs;
using ncclz::CallKind;
using ncclz::CallStats;
using ncclz::CommConfig;
using ncclz::Communicator;
using ncclz::Compression;
using ncclz::DataType;
using ncclz::PolicyHints;
using ncclz::RedOp;
using ncclz::UniqueId;

/// Input buffers: read-only or writable arrays of any dtype/device (checked below).
using InArray = nb::ndarray<nb::ro>;
/// Output buffers: writable arrays of any dtype/device (checked below).
using OutArray = nb::ndarray<>;

std::string describe_dlpack_dtype(const nb::dlpack::dtype& d) {
  const char* code = "?";
  switch (static_cast<nb::dlpack::dtype_code>(d.code)) {
    case nb::dlpack::dtype_code::Int: code = "int"; break;
    case nb::dlpack::dtype_code::UInt: code = "uint"; break;
    case nb::dlpack::dtype_code::Float: code = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: code = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: code = "complex"; break;
    case nb::dlpack::dtype_code::Bool: code = "bool"; break;
    default: break;
  }
  std::ostringstream s;
  s << code << int(d.bits);
  if (d.lanes != 1) s << "x" << d.lanes;
  return s.str();
}

/// A view of one user buffer after all checks: pointer, element count, type.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::F32;
  uint32_t row = 0, plane = 0;  ///< the array's last dimension / last two (0: fewer dimensions)
  int device = -1;              ///< the CUDA device of a device array (-1: host memory)
  bool given = true;            ///< false: no array (a buffer used on the root only)
};

/// `as_dtype` is "" (type from the array's DLPack dtype) or "bfloat16": the
/// array holds bfloat16 bits as uint16 (NumPy arrays of ml_dtypes.bfloat16
/// cannot be exported through DLPack, so the Python layer passes a view).
/// device_ok: the call takes CUDA device arrays (ncclz::set_buffer_device:
/// every call of the Python API), where ncclz was built with CUDA.
template <typename Array>
Buffer check_buffer(const Array& a, const char* what, const std::string& as_dtype, bool device_ok = false) {
  const int dev = a.device_type();
  const bool on_device = dev == nb::device::cuda::value && device_ok && ncclz::cuda::built_with_cuda();
  if (dev != nb::device::cpu::value && dev != nb::device::cuda_host::value && !on_device) {
    std::ostringstream s;
    s << what << " is on a GPU or other device (DLPack device type " << dev << ", id " << a.device_id()
      << "); the Python API takes CPU arrays only for now: copy it to the host (e.g. tensor.cpu())";
    throw ncclz::InvalidArgument(s.str());
  }
  const nb::dlpack::dtype d = a.dtype();
  Buffer b;
  bool ok = d.lanes == 1;
  if (ok && !as_dtype.empty()) {
    // bfloat16 as a uint16 view (NumPy), the 8-bit floats as uint8 views (every framework)
    const bool f8 = as_dtype == "float8_e4m3fn" || as_dtype == "float8_e5m2";
    if ((as_dtype != "bfloat16" && !f8) || d.code != uint8_t(nb::dlpack::dtype_code::UInt) || d.bits != (f8 ? 8 : 16))
      throw ncclz::InvalidArgument(std::string(what) + ": dtype override '" + as_dtype +
                                   "' needs a uint16 view of bfloat16 data or a uint8 view of float8 data, got " +
                                   describe_dlpack_dtype(d));
    b.type = !f8 ? DataType::BF16 : as_dtype == "float8_e4m3fn" ? DataType::F8E4M3 : DataType::F8E5M2;
  } else if (ok) {
    switch (static_cast<nb::dlpack::dtype_code>(d.code)) {
      case nb::dlpack::dtype_code::Float:
        if (d.bits == 32)
          b.type = DataType::F32;
        else if (d.bits == 64)
          b.type = DataType::F64;
        else if (d.bits == 16)
          b.type = DataType::F16;
        else
          ok = false;
        break;
      case nb::dlpack::dtype_code::Bfloat:
        ok = d.bits == 16;
        b.type = DataType::BF16;
        break;
      case nb::dlpack::dtype_code::Int:
        if (d.bits == 32)
          b.type = DataType::I32;
        else if (d.bits == 64)
          b.type = DataType::I64;
        else if (d.bits == 8)
          b.type = DataType::I8;
        else
          ok = false;
        break;
      case nb::dlpack::dtype_code::UInt:
        if (d.bits == 8)
          b.type = DataType::U8;
        else if (d.bits == 32)
          b.type = DataType::U32;
        else if (d.bits == 64)
          b.type = DataType::U64;
        else
          ok = false;
        break;
      default: ok = false;
    }
  }
  if (!ok)
    throw ncclz::InvalidArgument(
        std::string(what) + " has dtype " + describe_dlpack_dtype(d) +
        "; supported: float32, float64, float16, bfloat16, int32, int64, uint8, int8, uint32, uint64 (and "
        "float8_e4m3fn, float8_e5m2 as uint8 views with as_dtype)");
  // C-contiguity (strides count elements; dimensions of extent 1 may have any stride).
  size_t count = 1;
  for (size_t i = 0; i < a.ndim(); ++i) count *= a.shape(i);
  if (a.stride_ptr() != nullptr && count > 0) {
    int64_t expect = 1;
    for (size_t k = a.ndim(); k-- > 0;) {
      if (a.shape(k) != 1 && a.stride(k) != expect) {
        std::ostringstream s;
        s << what << " is not C-contiguous (dimension " << k << " has stride " << a.stride(k) << " elements, expected "
          << expect << "); make it contiguous first (numpy.ascontiguousarray(x), tensor.contiguous())";
        throw ncclz::InvalidArgument(s.str());
      }
      expect *= int64_t(a.shape(k));
    }
  }
  b.data = const_cast<void*>(static_cast<const void*>(a.data()));
  b.count = count;
  if (on_device) b.device = int(a.device_id());
  // Shape hint for the wire codec's 2-D/3-D predictors (Compression::row/plane).
  const size_t nd = a.ndim();
  if (nd >= 2 && a.shape(nd - 1) <= 0xFFFFFFFFu) b.row = uint32_t(a.shape(nd - 1));
  if (nd >= 3 && uint64_t(a.shape(nd - 1)) * uint64_t(a.shape(nd - 2)) <= 0xFFFFFFFFu)
    b.plane = uint32_t(a.shape(nd - 1) * a.shape(nd - 2));
  return b;
}

/// The device of a call's buffers (-1: host memory): every buffer on the
/// same device, or every one in host memory.
int call_device(const char* call, std::initializer_list<const Buffer*> bufs) {
  int dev = -2;
  for (const Buffer* b : bufs) {
    if (!b->given) continue;  // a buffer used on the root only, absent here
    if (dev == -2) dev = b->device;
    if (b->device != dev) {
      throw ncclz::InvalidArgument(std::string(call) + ": its arrays are on different devices (" +
                                   (dev < 0 ? std::string("host") : "cuda:" + std::to_string(dev)) + " and " +
                                   (b->device < 0 ? std::string("host") : "cuda:" + std::to_string(b->device)) +
                                   "); pass them on one device");
    }
  }
  return dev < 0 ? -1 : dev;
}

/// The calling thread's buffer device for one call (ncclz::set_buffer_device).
class BufferDevice {
 public:
  explicit BufferDevice(int device) { ncclz::set_buffer_device(device); }
  ~BufferDevice() { ncclz::set_buffer_device(-1); }
  BufferDevice(const BufferDevice&) = delete;
  BufferDevice& operator=(const BufferDevice&) = delete;
};

/// A buffer used on the root only: None elsewhere is no buffer (of the other
/// array's type, so that check_call compares what is there).
template <typename Array>
Buffer optional_buffer(const Array& a, const char* what, const std::string& as_dtype, DataType other,
                       bool device_ok = false) {
  if (!a.is_valid()) {
    Buffer b;
    b.type = other;
    b.given = false;
    return b;
  }
  return check_buffer(a, what, as_dtype, device_ok);
}

/// `c` with the layout hint of the array the call codes.
Compression with_layout(const Compression& c, const Buffer& b) {
  Compression x = c;
  x.row = b.row;
  x.plane = b.plane;
  return x;
}

RedOp parse_op(const std::string& op, const char* call) {
  if (op == "sum") return RedOp::Sum;
  if (op == "avg") return RedOp::Avg;
  if (op == "max") return RedOp::Max;
  if (op == "min") return RedOp::Min;
  if (op == "prod") return RedOp::Prod;
  throw ncclz::InvalidArgument(std::string(call) + ": unknown reduction op '" + op +
                               "'; use one of sum, avg, max, min, prod");
}

Compression::Mode parse_mode(const std::string& m) {
  if (m == "none") return Compression::Mode::None;
  if (m == "lossless") return Compression::Mode::Lossless;
  if (m == "lossy_abs") return Compression::Mode::LossyAbs;
  if (m == "lossy_rel") return Compression::Mode::LossyRel;
  throw ncclz::InvalidArgument("unknown compression mode '" + m + "'; use none, lossless, lossy_abs, lossy_rel");
}

/// Runs a blocking call without the GIL, with the interpreter's signal
/// handlers as the thread's interrupt check (ncclz::set_interrupt_check):
/// about every 50 ms of waiting the call takes the GIL and runs
/// PyErr_CheckSignals (handlers run on the main thread only; elsewhere it does
/// nothing). A handler that raises (Ctrl-C's KeyboardInterrupt) stops the
/// call, which aborts the communicator (its peers get AbortedError naming this
/// rank); the handler's exception is then raised here, in place of whatever
/// the call threw.
class SignalCheck {
 public:
  static const char* check(void* ctx) {
    auto* s = static_cast<SignalCheck*>(ctx);
    if (s->type_) return s->name_;
    // A thread still blocked while the interpreter shuts down must not take
    // the GIL (it would be ended there); its call ends with the communicator.
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing()) return nullptr;
#else
    if (_Py_IsFinalizing()) return nullptr;
#endif
    PyGILState_STATE g = PyGILState_Ensure();
    if (PyErr_CheckSignals() != 0) {
      PyErr_Fetch(&s->type_, &s->value_, &s->tb_);
      s->name_ = s->type_ ? reinterpret_cast<PyTypeObject*>(s->type_)->tp_name : "a signal handler raised";
    }
    PyGILState_Release(g);
    return s->type_ ? s->name_ : nullptr;
  }
  bool raised() const { return type_ != nullptr; }
  /// With the GIL: raises the handler's exception (nb::python_error).
  [[noreturn]] void rethrow() {
    PyErr_Restore(type_, value_, tb_);
    type_ = value_ = tb_ = nullptr;
    throw nb::python_error();
  }

 private:
  PyObject *type_ = nullptr, *value_ = nullptr, *tb_ = nullptr;
  const char* name_ = nullptr;
};

template <class F>
void blocking(F&& call) {
  SignalCheck sc;
  std::exception_ptr err;
  {
    nb::gil_scoped_release nogil;
    ncclz::set_interrupt_check(&SignalCheck::check, &sc);
    try {
      call();
    } catch (...) {
      err = std::current_exception();
    }
    ncclz::set_interrupt_check(nullptr, nullptr);
  }
  if (sc.raised()) sc.rethrow();
  if (err) std::rethrow_exception(err);
}

/// Owns the C++ communicator. Calls hold a shared_ptr copy, so close() from
/// one thread never frees the object under a call running in another.
class CommHandle {
 public:
  explicit CommHandle(std::unique_ptr<Communicator> c) : comm_(std::move(c)) {
    rank_ = comm_->rank();
    size_ = comm_->size();
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return comm_ == nullptr;
  }

  std::shared_ptr<Communicator> get() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_)
      throw ncclz::InvalidArgument("communicator (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                                   ") is closed");
    return comm_;
  }

  void close() {
    std::shared_ptr<Communicator> c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      c.swap(comm_);
    }
    // The last reference (ours, or a running call's) destroys it without the GIL.
  }

  void abort(const std::string& reason) {
    std::shared_ptr<Communicator> c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      c = comm_;
    }
    if (c) c->abort(reason);
  }

  CommConfig config() const { return get()->config(); }
  ncclz::Topology topology() const { return get()->topology(); }

  CallStats all_reduce(const InArray& send, const OutArray& recv, const std::string& op, const Compression& c,
                       const std::string& as_dtype, const PolicyHints* hints) {
    Buffer in = check_buffer(send, "all_reduce input", as_dtype, true);
    Buffer out = check_buffer(recv, "all_reduce output", as_dtype, true);
    const int dev = call_device("all_reduce", {&in, &out});
    const RedOp r = parse_op(op, "all_reduce");
    auto comm = get();
    comm->check_call(args(CallKind::AllReduce, in, out, r, 0, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(dev);
      comm->all_reduce(in.data, out.data, in.count, in.type, r, with_layout(c, in), &st, hints);
    });
    return st;
  }

  CallStats reduce_scatter(const InArray& send, const OutArray& recv, const std::string& op, const Compression& c,
                           const std::string& as_dtype, const PolicyHints* hints) {
    Buffer in = check_buffer(send, "reduce_scatter input", as_dtype, true);
    Buffer out = check_buffer(recv, "reduce_scatter output", as_dtype, true);
    const int dev = call_device("reduce_scatter", {&in, &out});
    const RedOp r = parse_op(op, "reduce_scatter");
    auto comm = get();
    comm->check_call(args(CallKind::ReduceScatter, in, out, r, 0, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(dev);
      comm->reduce_scatter(in.data, out.data, out.count, in.type, r, with_layout(c, in), &st, hints);
    });
    return st;
  }

  CallStats all_gather(const InArray& send, const OutArray& recv, const Compression& c, const std::string& as_dtype,
                       const PolicyHints* hints) {
    Buffer in = check_buffer(send, "all_gather input", as_dtype, true);
    Buffer out = check_buffer(recv, "all_gather output", as_dtype, true);
    const int dev = call_device("all_gather", {&in, &out});
    auto comm = get();
    comm->check_call(args(CallKind::AllGather, in, out, RedOp::Sum, 0, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(dev);
      comm->all_gather(in.data, out.data, in.count, in.type, with_layout(c, in), &st, hints);
    });
    return st;
  }

  CallStats broadcast(const OutArray& buf, int root, const Compression& c, const std::string& as_dtype,
                      const PolicyHints* hints) {
    Buffer b = check_buffer(buf, "broadcast buffer", as_dtype, true);
    auto comm = get();
    comm->check_call(args(CallKind::Broadcast, Buffer{}, b, RedOp::Sum, root, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(b.device);
      comm->broadcast(b.data, b.count, b.type, root, with_layout(c, b), &st, hints);
    });
    return st;
  }

  CallStats send(const InArray& buf, int peer, const Compression& c, const std::string& as_dtype) {
    Buffer b = check_buffer(buf, "send buffer", as_dtype, true);
    auto comm = get();
    comm->check_call(args(CallKind::Send, b, Buffer{}, RedOp::Sum, peer, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(b.device);
      comm->send(b.data, b.count, b.type, peer, with_layout(c, b), &st);
    });
    return st;
  }

  CallStats recv(const OutArray& buf, int peer, const Compression& c, const std::string& as_dtype) {
    Buffer b = check_buffer(buf, "recv buffer", as_dtype, true);
    auto comm = get();
    comm->check_call(args(CallKind::Recv, Buffer{}, b, RedOp::Sum, peer, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(b.device);
      comm->recv(b.data, b.count, b.type, peer, c, &st);
    });
    return st;
  }

  /// Communicator::group: sends (buffer, peer, compression, as_dtype) and
  /// recvs alike; only the order among the sends and among the recvs counts.
  using GroupSend = std::tuple<InArray, int, Compression, std::string>;
  using GroupRecv = std::tuple<OutArray, int, Compression, std::string>;
  CallStats group(const std::vector<GroupSend>& sends, const std::vector<GroupRecv>& recvs) {
    auto comm = get();
    std::vector<ncclz::PeerCall> calls;
    auto add = [&](const auto& a, bool sending) {
      const char* what = sending ? "send buffer" : "recv buffer";
      Buffer b = check_buffer(std::get<0>(a), what, std::get<3>(a), false);
      const int peer = std::get<1>(a);
      comm->check_call(sending ? args(CallKind::Send, b, Buffer{}, RedOp::Sum, peer, std::get<2>(a))
                               : args(CallKind::Recv, Buffer{}, b, RedOp::Sum, peer, std::get<2>(a)));
      ncclz::PeerCall pc;
      pc.send = sending;
      pc.buf = b.data;
      pc.count = b.count;
      pc.type = b.type;
      pc.peer = peer;
      pc.compression = sending ? with_layout(std::get<2>(a), b) : std::get<2>(a);
      calls.push_back(pc);
    };
    for (const GroupSend& a : sends) add(a, true);
    for (const GroupRecv& a : recvs) add(a, false);
    CallStats st;
    blocking([&] { comm->group(calls, &st); });
    return st;
  }

  CallStats reduce(const InArray& send, const OutArray& recv, const std::string& op, int root, const Compression& c,
                   const std::string& as_dtype, const PolicyHints* hints) {
    Buffer in = check_buffer(send, "reduce input", as_dtype, true);
    Buffer out = optional_buffer(recv, "reduce output", as_dtype, in.type, true);
    const int dev = call_device("reduce", {&in, &out});
    const RedOp r = parse_op(op, "reduce");
    auto comm = get();
    comm->check_call(args(CallKind::Reduce, in, out, r, root, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(dev);
      comm->reduce(in.data, out.data, in.count, in.type, r, root, with_layout(c, in), &st, hints);
    });
    return st;
  }

  CallStats gather(const InArray& send, const OutArray& recv, int root, const Compression& c,
                   const std::string& as_dtype, const PolicyHints* hints) {
    Buffer in = check_buffer(send, "gather input", as_dtype, true);
    Buffer out = optional_buffer(recv, "gather output", as_dtype, in.type, true);
    const int dev = call_device("gather", {&in, &out});
    auto comm = get();
    comm->check_call(args(CallKind::Gather, in, out, RedOp::Sum, root, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(dev);
      comm->gather(in.data, out.data, in.count, in.type, root, with_layout(c, in), &st, hints);
    });
    return st;
  }

  CallStats scatter(const InArray& send, const OutArray& recv, int root, const Compression& c,
                    const std::string& as_dtype, const PolicyHints* hints) {
    Buffer out = check_buffer(recv, "scatter output", as_dtype, true);
    Buffer in = optional_buffer(send, "scatter input", as_dtype, out.type, true);
    const int dev = call_device("scatter", {&in, &out});
    auto comm = get();
    comm->check_call(args(CallKind::Scatter, in, out, RedOp::Sum, root, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(dev);
      comm->scatter(in.data, out.data, out.count, out.type, root, with_layout(c, out), &st, hints);
    });
    return st;
  }

  CallStats all_to_all(const InArray& send, const OutArray& recv, const Compression& c, const std::string& as_dtype,
                       const PolicyHints* hints) {
    Buffer in = check_buffer(send, "all_to_all input", as_dtype, true);
    Buffer out = check_buffer(recv, "all_to_all output", as_dtype, true);
    const int dev = call_device("all_to_all", {&in, &out});
    auto comm = get();
    comm->check_call(args(CallKind::AllToAll, in, out, RedOp::Sum, 0, c));
    CallStats st;
    blocking([&] {
      BufferDevice d(dev);
      comm->all_to_all(in.data, out.data, in.count / size_t(size_), in.type, with_layout(c, in), &st, hints);
    });
    return st;
  }

  CallStats all_to_allv(const InArray& send, const OutArray& recv, const std::vector<size_t>& send_counts,
                        const std::vector<size_t>& recv_counts, const Compression& c, const std::string& as_dtype,
                        const PolicyHints* hints) {
    Buffer in = check_buffer(send, "all_to_all input", as_dtype, true);
    Buffer out = check_buffer(recv, "all_to_all output", as_dtype, true);
    const int dev = call_device("all_to_all", {&in, &out});
    for (const auto* v : {&send_counts, &recv_counts}) {
      if (v->size() != size_t(size_)) {
        throw ncclz::InvalidArgument(std::string("all_to_allv: ") + (v == &send_counts ? "send" : "recv") +
                                     "_counts has " + std::to_string(v->size()) + " entries, expected one per rank (" +
                                     std::to_string(size_) + ")");
      }
    }
    auto comm = get();
    CallArgs a = args(CallKind::AllToAllv, in, out, RedOp::Sum, 0, c);
    a.send_counts = send_counts.data();
    a.recv_counts = recv_counts.data();
    comm->check_call(a);
    CallStats st;
    blocking([&] {
      BufferDevice d(dev);
      comm->all_to_allv(in.data, send_counts.data(), out.data, recv_counts.data(), in.type, with_layout(c, in), &st,
                        hints);
    });
    return st;
  }

  void barrier() {
    auto comm = get();
    blocking([&] { comm->barrier(); });
  }

  /// Communicator::split: the new communicator (None for kSplitNoColor).
  std::shared_ptr<CommHandle> split(int color, int key) {
    auto comm = get();
    std::unique_ptr<Communicator> made;
    blocking([&] { made = comm->split(color, key); });
    return made ? std::make_shared<CommHandle>(std::move(made)) : nullptr;
  }

  /// Communicator::refuse for a call refused before it reached the runtime
  /// (its kind by name: "all_reduce", ..., "send", "recv").
  void refuse(const std::string& kind, int root, const std::string& why) {
    CallArgs a;
    bool known = false;
    for (int k = 0; k <= int(CallKind::Scatter) && !known; ++k) {
      if (kind == ncclz::call_name(CallKind(k))) a.kind = CallKind(k), known = true;
    }
    if (!known) throw ncclz::InvalidArgument("refuse: unknown call '" + kind + "'");
    a.root = root;
    auto comm = get();
    blocking([&] { comm->refuse(a, why); });
  }
  uint64_t rounds() const { return get()->rounds(); }

 private:
  static CallArgs args(CallKind kind, const Buffer& in, const Buffer& out, RedOp op, int root, const Compression& c) {
    CallArgs a;
    a.kind = kind;
    a.send = in.data;
    a.send_count = in.count;
    a.send_type = in.type;
    a.recv = out.data;
    a.recv_count = out.count;
    a.recv_type = out.type;
    a.op = op;
    a.root = root;
    a.compression = c;
    return a;
  }

  mutable std::mutex mu_;
  std::shared_ptr<Communicator> comm_;
  int rank_ = 0;
  int size_ = 1;
};

UniqueId unique_id_from_bytes(const nb::bytes& b) {
  UniqueId id;
  if (b.size() != sizeof(id.bytes))
    throw ncclz::InvalidArgument("a UniqueId is " + std::to_string(sizeof(id.bytes)) + " bytes, got " +
                                 std::to_string(b.size()));
  std::memcpy(id.bytes, b.c_str(), sizeof(id.bytes));
  return id;
}

}  // namespace

void register_comm(nb::module_& m) {
  nb::module_ c = m.def_submodule("comm", "Raw collective runtime bindings (use ncclz.Communicator)");

  nb::class_<UniqueId>(c, "UniqueId", "128 opaque bytes that let ranks find each other (NCCL-style)")
      .def(nb::new_([](const nb::bytes& b) { return unique_id_from_bytes(b); }), "data"_a)
      .def_static(
          "make",
          [](const std::string& addr, int port) {
            nb::gil_scoped_release nogil;
            return ncclz::make_unique_id(addr, port);
          },
          "addr"_a = "", "port"_a = 0,
          "Makes an id: binds the listening socket rank 0 will use (keep this process as rank 0)")
      .def_prop_ro(
          "bytes",
          [](const UniqueId& id) { return nb::bytes(reinterpret_cast<const char*>(id.bytes), sizeof(id.bytes)); })
      .def("__repr__", [](const UniqueId&) { return std::string("<ncclz UniqueId (128 bytes)>"); });

  nb::class_<CommConfig>(c, "CommConfig",
                         "Communicator settings (ncclz/communicator.hpp). Tuning fields left unset (0, -1, '') take "
                         "NCCLZ_* from the environment, else their default, when a communicator is created.")
      .def(nb::init<>())
      .def_static("from_env", &CommConfig::from_env,
                  "Settings from RANK, WORLD_SIZE, MASTER_*, NCCLZ_*, every unset tuning field at its default: "
                  "what a communicator created now would use (before the transport's own choices)")
      .def_static("defaults", &CommConfig::defaults, "The built-in defaults, the environment ignored")
      .def("resolved", &CommConfig::resolved,
           "This configuration with every unset tuning field from the environment, else its default, checked")
      .def_rw("rank", &CommConfig::rank)
      .def_rw("size", &CommConfig::size)
      .def_rw("master_addr", &CommConfig::master_addr)
      .def_rw("master_port", &CommConfig::master_port)
      .def_rw("token", &CommConfig::token)
      .def_rw("timeout_s", &CommConfig::timeout_s)
      .def_rw("transport", &CommConfig::transport)
      .def_rw("nchannels", &CommConfig::nchannels)
      .def_rw("slot_bytes", &CommConfig::slot_bytes)
      .def_rw("nslots", &CommConfig::nslots)
      .def_rw("sparse_slice_bytes", &CommConfig::sparse_slice_bytes)
      .def_rw("exact_nchannels", &CommConfig::exact_nchannels)
      .def_rw("exact_slice_bytes", &CommConfig::exact_slice_bytes)
      .def_rw("throttle_gbps", &CommConfig::throttle_gbps)
      .def_rw("socket_ifname", &CommConfig::socket_ifname)
      .def_rw("pipeline_quantize", &CommConfig::pipeline_quantize)
      .def_rw("hier_rounds", &CommConfig::hier_rounds)
      .def_rw("sparse_input", &CommConfig::sparse_input)
      .def_rw("persistent", &CommConfig::persistent)
      .def_rw("p2p", &CommConfig::p2p)
      .def_rw("topo_host", &CommConfig::topo_host)
      .def_rw("topo_hosts", &CommConfig::topo_hosts)
      .def_rw("algorithm", &CommConfig::algorithm)
      .def_rw("latency_bytes", &CommConfig::latency_bytes)
      .def_rw("two_hop_bytes", &CommConfig::two_hop_bytes)
      .def_rw("direct_from_bytes", &CommConfig::direct_from_bytes)
      .def_rw("spin_us", &CommConfig::spin_us)
      .def_rw("trace_file", &CommConfig::trace_file)
      .def(
          "as_dict",
          [](const CommConfig& x) {
            nb::dict d;
            d["rank"] = x.rank;
            d["size"] = x.size;
            d["master_addr"] = x.master_addr;
            d["master_port"] = x.master_port;
            d["timeout_s"] = x.timeout_s;
            d["transport"] = x.transport;
            d["nchannels"] = x.nchannels;
            d["slot_bytes"] = x.slot_bytes;
            d["nslots"] = x.nslots;
            d["sparse_slice_bytes"] = x.sparse_slice_bytes;
            d["exact_nchannels"] = x.exact_nchannels;
            d["exact_slice_bytes"] = x.exact_slice_bytes;
            d["throttle_gbps"] = x.throttle_gbps;
            d["socket_ifname"] = x.socket_ifname;
            d["pipeline_quantize"] = x.pipeline_quantize;
            d["hier_rounds"] = x.hier_rounds;
            d["sparse_input"] = x.sparse_input;
            d["persistent"] = x.persistent;
            d["p2p"] = x.p2p;
            d["topo_host"] = x.topo_host;
            d["topo_hosts"] = x.topo_hosts;
            d["algorithm"] = x.algorithm;
            d["latency_bytes"] = x.latency_bytes;
            d["two_hop_bytes"] = x.two_hop_bytes;
            d["direct_from_bytes"] = x.direct_from_bytes;
            d["spin_us"] = x.spin_us;
            d["trace_file"] = x.trace_file;
            return d;
          },
          "Every field but the token")
      .def("__repr__", [](const CommConfig& x) {
        std::ostringstream s;
        s << "CommConfig(rank=" << x.rank << ", size=" << x.size << ", transport='" << x.transport
          << "', nchannels=" << x.nchannels << ", slot_bytes=" << x.slot_bytes << ", nslots=" << x.nslots
          << ", sparse_slice_bytes=" << x.sparse_slice_bytes << ", exact_nchannels=" << x.exact_nchannels
          << ", exact_slice_bytes=" << x.exact_slice_bytes << ", pipeline_quantize=" << x.pipeline_quantize
          << ", hier_rounds=" << x.hier_rounds << ", sparse_input=" << x.sparse_input << ", p2p=" << x.p2p
          << ", algorithm='" << x.algorithm << "', latency_bytes=" << x.latency_bytes
          << ", two_hop_bytes=" << x.two_hop_bytes << ", direct_from_bytes=" << x.direct_from_bytes
          << ", timeout_s=" << x.timeout_s << ")";
        return s.str();
      });

  nb::class_<Compression>(c, "Compression", "Compression of one call: mode none|lossless|lossy_abs|lossy_rel")
      .def(nb::new_([](const std::string& mode, double bound, const std::string& codec, size_t min_bytes) {
             Compression x;
             x.mode = parse_mode(mode);
             x.bound = bound;
             x.codec = codec;
             x.min_bytes = min_bytes;
             return x;
           }),
           "mode"_a = "none", "bound"_a = 0.0, "codec"_a = "", "min_bytes"_a = 0)
      .def_prop_ro("mode", [](const Compression& x) { return std::string(ncclz::mode_name(x.mode)); })
      .def_ro("bound", &Compression::bound)
      .def_ro("codec", &Compression::codec)
      .def_ro("min_bytes", &Compression::min_bytes)
      .def("__repr__", [](const Compression& x) {
        std::ostringstream s;
        s << "Compression(mode='" << ncclz::mode_name(x.mode) << "', bound=" << x.bound << ", codec='" << x.codec
          << "', min_bytes=" << x.min_bytes << ")";
        return s.str();
      });

  nb::class_<PolicyHints>(c, "PolicyHints",
                          "Internal: the compression policy's proposal for one call (ncclz/policy_hints.hpp). "
                          "Only rank 0's count.")
      .def(nb::new_([](const std::string& lighter, double rans_margin, const std::string& algorithm) {
             PolicyHints h;
             if (lighter == "none") {
               h.lighter = int(Compression::Mode::None);
             } else if (lighter == "lossless") {
               h.lighter = int(Compression::Mode::Lossless);
             } else if (!lighter.empty()) {
               throw ncclz::InvalidArgument("lighter must be '', 'none' or 'lossless', got '" + lighter + "'");
             }
             h.rans_margin = rans_margin;
             if (algorithm == "ring") {
               h.algorithm = int(ncclz::Algorithm::Ring);
             } else if (algorithm == "hierarchical") {
               h.algorithm = int(ncclz::Algorithm::Hierarchical);
             } else if (!algorithm.empty()) {
               throw ncclz::InvalidArgument("algorithm must be '', 'ring' or 'hierarchical', got '" + algorithm + "'");
             }
             return h;
           }),
           "lighter"_a = "", "rans_margin"_a = -1.0, "algorithm"_a = "",
           "lighter: run the call with this lighter mode (none | lossless; '' = the requested mode); "
           "rans_margin: the codec effort (the selector's margin for Rans, < 0: its default, 1: never Rans); "
           "algorithm: ring | hierarchical ('' = the communicator's setting, else its default)")
      .def_prop_ro("lighter",
                   [](const PolicyHints& h) {
                     return h.lighter < 0 ? std::string() : std::string(ncclz::mode_name(Compression::Mode(h.lighter)));
                   })
      .def_ro("rans_margin", &PolicyHints::rans_margin)
      .def_prop_ro("algorithm",
                   [](const PolicyHints& h) {
                     return h.algorithm < 0 ? std::string()
                                            : std::string(ncclz::algorithm_name(ncclz::Algorithm(h.algorithm)));
                   })
      .def("__repr__", [](const PolicyHints& h) {
        std::ostringstream s;
        s << "PolicyHints(lighter='" << (h.lighter < 0 ? "" : ncclz::mode_name(Compression::Mode(h.lighter)))
          << "', rans_margin=" << h.rans_margin << ", algorithm='"
          << (h.algorithm < 0 ? "" : ncclz::algorithm_name(ncclz::Algorithm(h.algorithm))) << "')";
        return s.str();
      });

  nb::class_<ncclz::Topology>(c, "Topology", "Which ranks share a host (ncclz/topology.hpp)")
      .def_ro("nhosts", &ncclz::Topology::nhosts)
      .def_ro("host", &ncclz::Topology::host)
      .def_ro("local_rank", &ncclz::Topology::local_rank)
      .def_ro("local_size", &ncclz::Topology::local_size)
      .def_ro("host_of", &ncclz::Topology::host_of)
      .def_ro("local_rank_of", &ncclz::Topology::local_rank_of)
      .def_ro("intra_link", &ncclz::Topology::intra_link)
      .def_ro("inter_link", &ncclz::Topology::inter_link)
      .def_ro("source", &ncclz::Topology::source)
      .def_prop_ro("hierarchical", &ncclz::Topology::hierarchical)
      .def("__repr__", [](const ncclz::Topology& t) { return "<ncclz Topology: " + t.describe() + ">"; });

  c.def("topology_hosts", &ncclz::topology_hosts, "spec"_a, "n"_a = -1,
        "Every rank's host id from an NCCLZ_TOPO_HOSTS value ('0,0,1,1' or 'HxL') for n ranks (n < 0: as many as "
        "it describes); InvalidArgumentError saying what is wrong");

  nb::class_<CallStats>(c, "CallStats", "Per-call statistics")
      .def(nb::init<>())
      .def_ro("raw_bytes", &CallStats::raw_bytes)
      .def_ro("wire_bytes", &CallStats::wire_bytes)
      .def_ro("ratio", &CallStats::ratio)
      .def_ro("encode_s", &CallStats::encode_s)
      .def_ro("decode_s", &CallStats::decode_s)
      .def_ro("quantize_s", &CallStats::quantize_s)
      .def_ro("wait_s", &CallStats::wait_s)
      .def_ro("wall_s", &CallStats::wall_s)
      .def_ro("error_bound", &CallStats::error_bound)
      .def_ro("requested_bound", &CallStats::requested_bound)
      .def_ro("exact_fallback", &CallStats::exact_fallback)
      .def_ro("on_device", &CallStats::on_device)
      .def_ro("persistent", &CallStats::persistent)
      .def_ro("persistent_device_fifos", &CallStats::persistent_device_fifos)
      .def_prop_ro("ran_mode", [](const CallStats& x) { return std::string(ncclz::mode_name(x.ran_mode)); })
      .def_ro("lightened", &CallStats::lightened)
      .def_prop_ro("algorithm", [](const CallStats& x) { return std::string(ncclz::algorithm_name(x.algorithm)); })
      .def_ro("local_bytes", &CallStats::local_bytes)
      .def_ro("channels", &CallStats::channels)
      .def_ro("slice_bytes", &CallStats::slice_bytes)
      .def_ro("schedule_s", &CallStats::schedule_s);

  nb::class_<CommHandle>(c, "Communicator", "Raw communicator; ncclz.Communicator wraps it")
      .def_static(
          "create",
          [](const CommConfig& cfg) {
            std::unique_ptr<Communicator> p;
            {
              nb::gil_scoped_release nogil;
              p = Communicator::create(cfg);
            }
            return std::make_shared<CommHandle>(std::move(p));
          },
          "config"_a, "Rendezvous at config.master_addr:master_port (blocks until all ranks arrive or timeout)")
      .def_static(
          "create_from_id",
          [](const UniqueId& id, int rank, int size, const CommConfig& base) {
            std::unique_ptr<Communicator> p;
            {
              nb::gil_scoped_release nogil;
              p = Communicator::create(id, rank, size, base);
            }
            return std::make_shared<CommHandle>(std::move(p));
          },
          "id"_a, "rank"_a, "size"_a, "config"_a, "Rendezvous through a UniqueId (made by rank 0's process)")
      .def_prop_ro("rank", &CommHandle::rank)
      .def_prop_ro("size", &CommHandle::size)
      .def_prop_ro("closed", &CommHandle::closed)
      .def_prop_ro("config", &CommHandle::config,
                   "The configuration in effect (a copy): defaults resolved, the transport chosen, no token")
      .def_prop_ro("topology", &CommHandle::topology, "Which ranks share a host, as found at creation (a copy)")
      .def("all_reduce", &CommHandle::all_reduce, "send"_a.noconvert(), "recv"_a.noconvert(), "op"_a, "compression"_a,
           "as_dtype"_a = "", "hints"_a = nb::none())
      .def("reduce_scatter", &CommHandle::reduce_scatter, "send"_a.noconvert(), "recv"_a.noconvert(), "op"_a,
           "compression"_a, "as_dtype"_a = "", "hints"_a = nb::none())
      .def("all_gather", &CommHandle::all_gather, "send"_a.noconvert(), "recv"_a.noconvert(), "compression"_a,
           "as_dtype"_a = "", "hints"_a = nb::none())
      .def("broadcast", &CommHandle::broadcast, "buf"_a.noconvert(), "root"_a, "compression"_a, "as_dtype"_a = "",
           "hints"_a = nb::none())
      .def("reduce", &CommHandle::reduce, "send"_a.noconvert(), "recv"_a.noconvert().none(), "op"_a, "root"_a,
           "compression"_a, "as_dtype"_a = "", "hints"_a = nb::none(),
           "recv: the root's output (None elsewhere; may be send on the root)")
      .def("gather", &CommHandle::gather, "send"_a.noconvert(), "recv"_a.noconvert().none(), "root"_a, "compression"_a,
           "as_dtype"_a = "", "hints"_a = nb::none(), "recv: the root's output (None elsewhere)")
      .def("scatter", &CommHandle::scatter, "send"_a.noconvert().none(), "recv"_a.noconvert(), "root"_a,
           "compression"_a, "as_dtype"_a = "", "hints"_a = nb::none(), "send: the root's input (None elsewhere)")
      .def("all_to_all", &CommHandle::all_to_all, "send"_a.noconvert(), "recv"_a.noconvert(), "compression"_a,
           "as_dtype"_a = "", "hints"_a = nb::none())
      .def("all_to_allv", &CommHandle::all_to_allv, "send"_a.noconvert(), "recv"_a.noconvert(), "send_counts"_a,
           "recv_counts"_a, "compression"_a, "as_dtype"_a = "", "hints"_a = nb::none(),
           "send_counts / recv_counts: elements to / from each rank")
      .def("send", &CommHandle::send, "buf"_a.noconvert(), "peer"_a, "compression"_a, "as_dtype"_a = "")
      .def("recv", &CommHandle::recv, "buf"_a.noconvert(), "peer"_a, "compression"_a, "as_dtype"_a = "")
      .def("group", &CommHandle::group, "sends"_a, "recvs"_a,
           "Communicator::group: (buffer, peer, compression, as_dtype) sends and recvs run together")
      .def("barrier", &CommHandle::barrier)
      .def("split", &CommHandle::split, "color"_a, "key"_a,
           "Communicator::split: a new communicator of the ranks of this color (None for color -1)")
      .def("refuse", &CommHandle::refuse, "kind"_a, "root"_a, "why"_a,
           "Takes part in a call this rank refused before the runtime saw it (Communicator::refuse): the others' "
           "call raises RemoteError, and the ranks' calls stay in step")
      .def_prop_ro("rounds", &CommHandle::rounds,
                   "Descriptor rounds this rank took part in (Communicator::rounds): whether a call that raised did")
      .def("abort", &CommHandle::abort, "reason"_a = "aborted by user", nb::call_guard<nb::gil_scoped_release>())
      .def("close", &CommHandle::close, nb::call_guard<nb::gil_scoped_release>());
}
