#!/usr/bin/env bash
# The device code's tests without a GPU: builds cuda/*.cu as host code for the
# CPU emulator (include/cuda_emu.hpp; the build is tools/cuda_emu/CMakeLists.txt,
# which takes its sources from the CMake lists the real builds use) and runs
# the CudaCodec GoogleTests on it. This checks the kernels' logic (every CUDA
# thread a coroutine), not the GPU: tools/gpu_session.sh does that.
#
# Usage (from the repo root): bash tools/cuda_emu/run.sh [ci | prims | persistent | comm | bench | GTEST_FILTER]
#   (none)        every CudaCodec, CudaSelect, CudaFloatHuff and CudaCta test
#   GTEST_FILTER  those tests (e.g. 'CudaCodec.Batches*')
#   ci            what tools/run_tests.sh runs on every CPU CI run: every
#                 CudaCodec, CudaSelect, CudaFloatHuff and CudaCta test with the v3 slice
#                 kernels (the fused float calls too: v3's, under cta the CTA coder's),
#                 again with v2 and with v1 (NCCLZ_DEVICE_CODEC: the decoder of
#                 the selected slices; the fused CudaCodec tests once), the
#                 CudaCodec tests with the CTA slice coder (cta: the fused ones too),
#                 the device-rank prims tests (ncclz_cuda_emu_prims_tests:
#                 ring collectives with device and CPU ranks) with v3, v2, v1,
#                 the persistent ring kernels (CudaPersistent, same binary) once,
#                 the communicator with device buffers (ncclz_cuda_emu_comm_tests)
#                 with v3 and v2, and ranks on four emulated devices (the persistent
#                 ring's device FIFOs through peer access too), the codec, prims and
#                 communicator tests again with deferred stream work (lazy, below; the
#                 communicator's at full size, as tools/gpu_session.sh runs them),
#                 then the benchmark's round-trip checks (every version and
#                 the fused calls, slices compared with v1's), and
#                 bench/gpu_float_huff_bench.cu's (round trip, CPU bytes) and
#                 bench/gpu_persistent_bench.cu's (4 ranks, 1 MiB each, six shapes: one
#                 with the first version's slices, two with several CTAs per channel, one
#                 with host FIFOs and proxies, one with the device selector, one with the
#                 selector and max; exact sums and maxima)
#   prims         the device-rank prims tests (tests/cpp/test_cuda_prims.cpp, test_cuda_persistent.cpp)
#   persistent    the persistent ring kernels' tests alone (test_cuda_persistent.cpp; with
#                 host FIFOs through the proxy too)
#   comm          device buffers through the communicator (tests/cpp/test_cuda_comm.cpp), four
#                 emulated devices (NCCLZ_EMU_DEVICES, default 4 here) for the rank-per-device test
#   bench         bench/gpu_codec_bench.cu on 1 MiB: its checks (its timings mean nothing)
#   lazy          the codec, prims and communicator tests with deferred stream work
#                 (NCCLZ_EMU_LAZY=1, include/cuda_emu.hpp: launches, copies and memsets
#                 run only where the host synchronizes) and poisoned device memory
#                 (NCCLZ_EMU_POISON=1: new 0xA5, freed 0x5A); ci runs them too
# Environment: NCCLZ_CUDA_TEST_QUICK (default 1: fewer sizes and cases; 0: all,
# about 4x longer); EMU_SANITIZE=address (AddressSanitizer: an out-of-bounds
# "device" access becomes a host error; build dir build/emu-address);
# NCCLZ_TEST_JOBS (build parallelism, default nproc).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/emu${EMU_SANITIZE:+-$EMU_SANITIZE}
args=(-DNCCLZ_BUILD_TESTS=ON -DNCCLZ_CUDA=OFF -DNCCLZ_CUDA_EMU=ON)
[ -n "${EMU_SANITIZE:-}" ] && args+=(-DNCCLZ_SANITIZE="$EMU_SANITIZE" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
command -v ninja >/dev/null 2>&1 && args+=(-G Ninja)
command -v ccache >/dev/null 2>&1 && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
mkdir -p build
cmake -S . -B "$B" "${args[@]}" >"$B.configure.log" 2>&1 || { cat "$B.configure.log"; exit 1; }
cmake --build "$B" -j "${NCCLZ_TEST_JOBS:-$(nproc)}" --target ncclz_cuda_emu_tests ncclz_cuda_emu_prims_tests ncclz_cuda_emu_comm_tests \
  ncclz_cuda_emu_bench ncclz_cuda_emu_float_huff_bench ncclz_cuda_emu_persistent_bench
E=$B/tools/cuda_emu
export NCCLZ_CUDA_TEST_QUICK=${NCCLZ_CUDA_TEST_QUICK-1}
case "${1:-}" in
  ci)
    NCCLZ_DEVICE_CODEC=v3 "$E/ncclz_cuda_emu_tests" --gtest_filter='CudaCodec.*:CudaSelect.*:CudaFloatHuff.*:CudaCta.*:CudaEmulator.*' \
      --gtest_brief=1
    for v in v2 v1; do
      echo "again with the $v slice kernels (NCCLZ_DEVICE_CODEC=$v):"
      NCCLZ_DEVICE_CODEC=$v "$E/ncclz_cuda_emu_tests" --gtest_filter='CudaCodec.*:CudaSelect.*:-CudaCodec.Fused*' \
        --gtest_brief=1
    done
    echo "again with the CTA slice coder (NCCLZ_DEVICE_CODEC=cta, cuda/cta_slice.cuh):"
    NCCLZ_DEVICE_CODEC=cta "$E/ncclz_cuda_emu_tests" --gtest_filter='CudaCodec.*' --gtest_brief=1
    for v in v3 v2 v1; do
      echo "device ranks in the send/receive loops (test_cuda_prims.cpp), $v slice kernels:"
      NCCLZ_DEVICE_CODEC=$v "$E/ncclz_cuda_emu_prims_tests" --gtest_brief=1 --gtest_filter='*CudaPrims*'
    done
    echo "persistent ring kernels (test_cuda_persistent.cpp: ranks as threads, kernels running concurrently):"
    "$E/ncclz_cuda_emu_prims_tests" --gtest_brief=1 --gtest_filter='CudaPersistent.*'

    echo "device buffers through the communicator (test_cuda_comm.cpp), v3 (the default) with registered slots,"
    echo "and v2 slice kernels with unregistered ones (NCCLZ_DEVICE_PIN=0):"
    "$E/ncclz_cuda_emu_comm_tests" --gtest_brief=1
    NCCLZ_DEVICE_CODEC=v2 NCCLZ_DEVICE_PIN=0 "$E/ncclz_cuda_emu_comm_tests" --gtest_brief=1 --gtest_filter='CudaComm.Lossy*:CudaComm.DeviceAndHost*'
    echo "one rank per device (NCCLZ_EMU_DEVICES=4: four emulated devices):"
    NCCLZ_EMU_DEVICES=4 "$E/ncclz_cuda_emu_comm_tests" --gtest_brief=1 \
      --gtest_filter='CudaComm.RanksOnSeparateDevices:CudaPersistentComm.RanksOnSeparateDevicesUseDeviceFifos'
    echo "deferred stream work and poisoned device memory (NCCLZ_EMU_LAZY=1 NCCLZ_EMU_POISON=1), v3 kernels:"
    NCCLZ_EMU_LAZY=1 NCCLZ_EMU_POISON=1 "$E/ncclz_cuda_emu_tests" --gtest_filter='CudaCodec.*:CudaSelect.*:CudaFloatHuff.*:CudaCta.*:CudaEmulator.*' \
      --gtest_brief=1
    NCCLZ_EMU_LAZY=1 NCCLZ_EMU_POISON=1 "$E/ncclz_cuda_emu_prims_tests" --gtest_brief=1
    echo "the communicator's lazily, at the sizes the GPU session runs (NCCLZ_CUDA_TEST_QUICK=0):"
    NCCLZ_EMU_LAZY=1 NCCLZ_EMU_POISON=1 NCCLZ_EMU_DEVICES=4 NCCLZ_CUDA_TEST_QUICK=0 "$E/ncclz_cuda_emu_comm_tests" --gtest_brief=1
    "$E/ncclz_cuda_emu_bench" --mib 1 --slice 65536 --reps 1 --warm 0 --json "$B/bench.json" --md "$B/bench.md" \
      >"$B/bench.log" 2>&1 || { cat "$B/bench.log"; exit 1; }
    echo "emulated bench/gpu_codec_bench.cu: round trips checked (log: $B/bench.log)"
    "$E/ncclz_cuda_emu_float_huff_bench" --mib 1 --reps 1 --warm 0 >"$B/bench_fh.log" 2>&1 || { cat "$B/bench_fh.log"; exit 1; }
    echo "emulated bench/gpu_float_huff_bench.cu: round trips and CPU bytes checked (log: $B/bench_fh.log)"
    "$E/ncclz_cuda_emu_persistent_bench" --mib 1 --shapes 2:1:64:4:v1,2:2:64:8,1:3:16:4,1:2:16:4:proxy,1:2:16:4:sel,1:2:16:4:sel:max --reps 1 --warm 0 >"$B/bench_persistent.log" 2>&1 ||
      { cat "$B/bench_persistent.log"; exit 1; }
    echo "emulated bench/gpu_persistent_bench.cu: 4 ranks' all_reduce results checked (log: $B/bench_persistent.log)"
    ;;
  bench) "$E/ncclz_cuda_emu_bench" --mib 1 --slice 65536 --reps 1 --warm 0 --json "$B/bench.json" --md "$B/bench.md" ;;
  prims) "$E/ncclz_cuda_emu_prims_tests" ;;
  persistent) "$E/ncclz_cuda_emu_prims_tests" --gtest_filter='CudaPersistent.*' ;;
  comm) NCCLZ_EMU_DEVICES=${NCCLZ_EMU_DEVICES:-4} "$E/ncclz_cuda_emu_comm_tests" ;;
  lazy)
    NCCLZ_EMU_LAZY=1 NCCLZ_EMU_POISON=1 "$E/ncclz_cuda_emu_tests" --gtest_filter='CudaCodec.*:CudaSelect.*:CudaFloatHuff.*:CudaCta.*:CudaEmulator.*'
    NCCLZ_EMU_LAZY=1 NCCLZ_EMU_POISON=1 "$E/ncclz_cuda_emu_prims_tests"
    NCCLZ_EMU_LAZY=1 NCCLZ_EMU_POISON=1 NCCLZ_EMU_DEVICES=4 "$E/ncclz_cuda_emu_comm_tests"
    ;;
  *) "$E/ncclz_cuda_emu_tests" --gtest_filter="${1:-CudaCodec.*:CudaSelect.*:CudaFloatHuff.*:CudaCta.*}" ;;
esac
