// Device calls in the call routine (see device_call.hpp).
#include "core/device_call.hpp"

#include "base/trace.hpp"
#include "core/device_work.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"

namespace ncclz {
namespace {
thread_local int t_buffer_device = -1;
}  // namespace

void set_buffer_device(int device) { t_buffer_device = device < 0 ? -1 : device; }

int buffer_device() { return t_buffer_device; }

namespace core {

int buffer_device() { return t_buffer_device; }

std::string check_device_call(Runtime& rt, const Collective& cd) {
  if (cd.device < 0) return "";
  if (!cuda::built_with_cuda()) {
    return "its buffers are on CUDA device " + std::to_string(cd.device) +
           ", and this ncclz was built without CUDA (rebuild with nvcc present, or pass host buffers)";
  }
  try {
    device_work(rt, cd.device);  // the device is there (made once per communicator)
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool any_device(const std::vector<CallDesc>& all) {
  for (const CallDesc& d : all) {
    if (d.device) return true;
  }
  return false;
}

bool device_codes_exact(const Wire& w) {
  if (!w.as_wire) return false;  // the device reduces the wire types only
  if (w.mode == prims::WireMode::Raw) return true;
  using Choice = codec::EncodeOptions::Choice;
  const Choice c = w.enc.choice;
  return codec::codec_accepts(codec::Codec::FloatHuff, w.type, codec::Predictor::None) &&
         ((c == Choice::Auto && !w.enc.allow_rans) || c == Choice::FloatHuff || c == Choice::Raw);
}

DeviceWork& device_work(Runtime& rt, int device) {
  if (!rt.device_work) rt.device_work = DeviceWork::create(device);
  if (rt.device_work->device() != device) {
    throw InvalidArgument("ncclz rank " + std::to_string(rt.rank) +
                          ": this communicator's device calls use CUDA device " +
                          std::to_string(rt.device_work->device()) + ", and this call's buffers are on device " +
                          std::to_string(device) + " (one device per communicator)");
  }
  return *rt.device_work;
}

void HostStaging::begin() {
  if (cd_.device < 0 || active()) return;
  trace::Scope ev("staging_in");  // base/trace.hpp
  ev.arg("count", double(cd_.in_count));
  DeviceWork& dw = device_work(rt_, cd_.device);
  const size_t es = dsize(t_);
  const auto* s = static_cast<const uint8_t*>(cd_.send);
  auto* r = static_cast<uint8_t*>(cd_.recv);
  const size_t in_bytes = cd_.in_count * es, out_bytes = cd_.out_count * es;
  // The host copies live in the runtime's staging buffers: the output's and,
  // where the input is a separate array, the input's.
  auto* host_out = static_cast<uint8_t*>(rt_.staging[0].get(out_bytes + 8));
  const bool inside = s >= r && s + in_bytes <= r + out_bytes;  // in place (all_reduce, broadcast)
  if (inside) {
    dw.to_host(host_out, r, out_bytes);
    cd_.send = host_out + (s - r);
  } else {
    auto* host_in = static_cast<uint8_t*>(rt_.staging[1].get(in_bytes + 8));
    dw.to_host(host_in, s, in_bytes);
    cd_.send = host_in;
  }
  dev_out_ = r;
  cd_.recv = host_out;
  active_ = true;
}

void HostStaging::end() {
  if (!active()) return;
  trace::Scope ev("staging_out");
  ev.arg("count", double(cd_.out_count));
  if (dev_out_ != nullptr) device_work(rt_, cd_.device).to_device(dev_out_, cd_.recv, cd_.out_count * dsize(t_));
  dev_out_ = nullptr;
  active_ = false;
}

}  // namespace core
}  // namespace ncclz
