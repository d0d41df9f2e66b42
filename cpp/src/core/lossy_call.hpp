// The lossy orchestration, written once for every collective: from this
// rank's input statistics to the result, on whichever path the call takes.
//
//  describe  scan this rank's input (if it takes part: Collective::input_here)
//            into its descriptor: finite min/max/max|x|, non-finite flag, and
//            for sums the list of a mostly-zero input's nonzeros with its
//            density (core::NonzeroIndex, NCCLZ_SPARSE_INPUT).
//  plan      from every rank's statistics: E (abs, or rel of the global
//            range), eb and the code width (bound::plan_lossy for the
//            collective's Combine), min_bytes.
//  then one of three paths, every rank taking the same one:
//   hierarchical  (Collective::algorithm) all_reduce and reduce_scatter
//            quantize each host's combined values slice by slice on the
//            inter-host ring, all_gather and broadcast take the eager path on
//            the hierarchical schedule; the exact path stays the flat ring's
//            (core/hier_call.hpp).
//   staged   (the default with >= 2 ranks) quantize and dequantize slice by
//            slice inside the schedule's loops (core::LossyStage), overlapped
//            with the transfers; mostly-zero sums carry lists of nonzeros and
//            run with larger slices (NCCLZ_SPARSE_SLICE_BYTES). The plan rules
//            outliers out (finite inputs within the exchanged max |x| always
//            fit: bound/error_budget.hpp), so no rank waits for the others to
//            quantize; a stage that meets one anyway raises.
//   eager    (a rank set NCCLZ_PIPELINE_QUANTIZE=0 or codes on the device,
//            or one rank) quantize the whole input, run the schedule on the
//            codes, dequantize the whole output. A rank whose buffers are
//            device memory does all of it on the device (core/device_work.hpp),
//            and then every rank codes without Rans. Outliers: where a rank
//            set NCCLZ_PIPELINE_QUANTIZE=0 (kEagerQuantize), the ranks agree
//            in a second round that none had any (else the exact path); on
//            every other eager call (device and mixed calls among them) the
//            plan rules them out as on the staged path, there is no round,
//            and a quantizer that meets one anyway (an input changed after
//            its statistics, a bug) raises on its rank before its codes
//            leave it and aborts the communicator, so every other rank's
//            call fails too (outlier_round, settle_outliers).
//   exact    (non-finite inputs, outliers, a bound below the type's own
//            rounding, codes that would not fit 64 bits, a message under
//            min_bytes): sums and means add in the narrowest type that
//            keeps E (T, float32 for 16-bit T, float64 rounded once), or
//            where none does, the narrowest as good as float64
//            (bound::choose_exact; losslessly coded where every rank's
//            input is mostly zero); select returns one rank's values
//            exactly, uncompressed.
// Every path gives every rank the same bits; the staged and eager paths the
// same codes, so the same bits as each other.
//
// Send/recv use the same pieces alone: the sender plans over itself (its plan
// travels in its descriptor), quantizes eagerly and falls back to the exact
// path on outliers; the receiver dequantizes with the sender's plan.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "core/call_desc.hpp"
#include "core/call_state.hpp"
#include "core/collective.hpp"
#include "core/device_call.hpp"
#include "core/lossy_ops.hpp"
#include "core/lossy_plan.hpp"
#include "core/runtime.hpp"

namespace ncclz::core {

class LossyCall {
 public:
  LossyCall(Runtime& rt, const Collective& cd, DataType t, const Compression& c, int nch, CallState& call);

  /// Collectives, before the exchange: this rank's input statistics (and list
  /// of nonzeros) into its descriptor.
  void describe(CallDesc& d);
  /// Collectives, after it: plan, prepare, run the schedule, finish.
  /// Device buffers (Collective::device): the compressed flat ring runs on
  /// the device (core/device_work.hpp), every other path after
  /// staging.begin() on host copies.
  void run(const std::vector<CallDesc>& all, HostStaging& staging);
  /// The channel count, when the exchange fixed it (all_to_allv's counts round).
  void use_channels(int nch) { nch_ = nch; }

  /// The wire of a send / recv in exact mode m (none, lossless): the user's
  /// values, coded without rANS where this rank or the peer (device_peer)
  /// codes on a device.
  Wire exact_wire(Mode m, bool device_peer) const;
  /// Whether this rank's send / recv in exact mode m runs on its device
  /// buffers there (device_codes_exact: raw slices, or lossless floats as
  /// FloatHuff slices), not on host copies.
  bool exact_on_device(Mode m) const;
  /// Send, before the handshake: plans over this rank's input alone and
  /// quantizes it; the descriptor carries the plan (kCompress, kWide, eb, E).
  /// Device buffers: the statistics and codes on the device; a call that
  /// sends its values (no compression) after staging.begin() from a host copy.
  void plan_send(CallDesc& d, HostStaging& staging);
  /// What goes on the wire after the handshake: the codes or the user's
  /// values, and how they travel.
  const void* send_data() const;
  /// `receiver`: the peer's descriptor (a device receiver: no Rans).
  Wire send_wire(Mode m, const CallDesc& receiver) const;
  /// Recv: where the data arrives (the codes when the sender compressed),
  /// how it travels, and the output written from the codes afterwards.
  /// Device buffers: device codes where the sender compressed, the device
  /// output itself for an exact call the device codes (exact_on_device),
  /// else (after staging.begin()) the host copy of the output.
  void* recv_target(const CallDesc& sender, Mode m, HostStaging& staging);
  Wire recv_wire(const CallDesc& sender, Mode m) const;
  void finish_recv(const CallDesc& sender);
  /// Send/recv on host buffers: the codes go to `b` instead of the runtime's
  /// work[0] (a group's calls each have their own, core/p2p_group.cpp).
  void use_codes(Buffer* b) { codes_buf_ = b; }
  /// Send/recv on host buffers: quantize each slice as the link's loop sends
  /// it, and dequantize each as it arrives (a LossyStage on the wire), not
  /// the whole buffer before and after the transfer. The same codes and
  /// bits; the element-wise work overlaps the transfer and runs on the
  /// thread that moves the call's data (a group's lanes).
  void stage_p2p() { stage_p2p_ = true; }

 private:
  /// Whether every rank's input is mostly zero (CallDesc::density): together
  /// below the share where the selector takes Sparse, so the sum is mostly
  /// zero too. A function of all descriptors: every rank decides the same.
  static bool mostly_zero(const std::vector<CallDesc>& all);
  static bool any_flag(const std::vector<CallDesc>& all, uint8_t flag);
  /// The outlier round (CallProtocol::any_outliers): whether any rank's
  /// quantizer found outliers (then every rank takes the exact path).
  bool any_outliers(const std::vector<CallDesc>& all, size_t outliers);
  /// Whether the eager path holds the outlier round: only where a rank asked
  /// for the eager quantize (kEagerQuantize, NCCLZ_PIPELINE_QUANTIZE=0), the
  /// path as it was. Elsewhere plan.compress means every input is finite and
  /// within the exchanged max |x|, which the plan's grid, check bound and
  /// code limit always fit (bound/error_budget.hpp; the staged path's
  /// premise). A function of the descriptors: every rank, device or CPU,
  /// holds the same rounds.
  static bool outlier_round(const std::vector<CallDesc>& all);
  /// After the eager quantize: with the round, whether any rank had outliers
  /// (then the exact path); without it, false where this rank had none, else
  /// the guard: aborts the communicator (every other rank's call fails with
  /// Aborted, naming this rank and why) and throws Error here.
  bool settle_outliers(const std::vector<CallDesc>& all, bool round, size_t outliers);
  /// The code limit the eager quantizer gets: plan.limit, or 0 on the rank
  /// NCCLZ_TEST_OUTLIER names (tests only; calls without the round), whose
  /// nonzero values then fail the check as a changed input would.
  int64_t quantizer_limit(const LossyPlan& plan, bool round) const;
  /// Whether any rank codes on the device (CallDesc::device).
  /// The codes' wire: code_wire; where a rank codes on the device, without
  /// Rans and in the larger slices (NCCLZ_SPARSE_SLICE_BYTES) where the links have them.
  Wire codes_wire(bool wide, const std::vector<CallDesc>& all) const;
  /// The eager path on the device: quantize (the host waits for it and reads
  /// its outlier count), the outlier round where outlier_round says, the ring
  /// on device codes, dequantize (the exact path on host copies after the
  /// round found outliers; settle_outliers' error without it).
  void run_device(LossyPlan plan, const std::vector<CallDesc>& all, HostStaging& staging);
  void run_staged(const LossyPlan& plan, const std::vector<CallDesc>& all);
  void run_exact(const LossyPlan& plan, const std::vector<CallDesc>& all);
  /// The exact path's sum in a wider float type acc (F32 for 16-bit T, or F64), rounded once to T
  /// (a mean divided in double first); coded: the wide values go losslessly coded.
  void run_widened(codec::ElemType acc, bool coded);
  /// The output's grid step: 2*eb, or 2*eb / N for a mean.
  double out_step(const LossyPlan& plan) const;
  /// Eager path: the output codes dequantized, but for this rank's own block
  /// (Collective::self_count: no schedule wrote its codes; the routine copies it).
  void dequantize_output(const LossyPlan& plan, const void* out_codes);

  Runtime& rt_;
  const Collective& cd_;
  DataType t_;
  const Compression& c_;
  int nch_;
  CallState& call_;
  NonzeroIndex* index_ = nullptr;            ///< the list of this rank's nonzeros, when the scan made one
  LossyPlan plan_;                           ///< send/recv: the sender's plan
  void* codes_ = nullptr;                    ///< send: the quantized input; recv: where the data arrives
  Buffer* codes_buf_ = &rt_.work[0];         ///< send/recv on the host: where the codes go
  bool stage_p2p_ = false;                   ///< see stage_p2p()
  mutable std::optional<LossyStage> stage_;  ///< send/recv: the slices' quantize / dequantize (stage_p2p)
};

}  // namespace ncclz::core
