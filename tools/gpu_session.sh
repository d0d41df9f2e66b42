#!/usr/bin/env bash
# One-call GPU session (docs/GPU.md): a standalone CUDA smoke test, then the
# build (CUDA for the machine's GPU, tests, benchmark, the Python module), the
# device-codec GoogleTests, the Python GPU tests, the codec benchmark, the
# multi-rank all-reduce benchmark and compute-sanitizer, writing logs and
# results to $OUT.
#
# Usage (from the repository root):
#   bash tools/gpu_session.sh prepare        # HERE, on the machine without a GPU:
#                                            # copies GoogleTest's sources into .gtest/
#                                            # (git-ignored) for the device machine,
#                                            # which has no GTest and no network
#   bash tools/gpu_session.sh [PHASE ...]    # ON the GPU machine; PHASES (default: all):
#       env       nvidia-smi, nvcc --version, compilers, cmake (always run first)
#       smoke     tools/gpu_smoke.cu built with nvcc and run: device, a ballot/reduce
#                 kernel, cudaMallocAsync, cudaHostRegister of a /dev/shm mapping,
#                 CUDA IPC of a buffer and an event between two processes
#       build     configure + build (CUDA ON, the GPU's arch, tests, benchmark, the
#                 Python module _core), then an importable package in
#                 /tmp/ncclz-py (PYTHONPATH for the later phases)
#       test      the CudaCodec and CudaSelect GoogleTests with NCCLZ_REQUIRE_GPU=1 (runs the binary),
#                 with the default (v3) slice kernels (the fused tests too), then
#                 again with v2 (NCCLZ_DEVICE_CODEC=v2); then the CudaPrims
#                 tests (device ranks in the ring collectives,
#                 tests/cpp/test_cuda_prims.cpp) with v3 (the fused
#                 decode-and-add) and v2; then the CudaComm tests (device
#                 buffers through the communicator; 400 random calls against the
#                 host path too, CudaCommRandom) with v3 and v2; then the
#                 CTA slice coder and the persistent ring kernels (CudaCta,
#                 CudaPersistent) and the CudaCodec tests with the CTA coder
#                 (NCCLZ_DEVICE_CODEC=cta)
#       pytest    tests/python/test_gpu.py with NCCLZ_REQUIRE_GPU=1, and a CPU
#                 sanity subset of tests/python/test_comm.py
#       bench     bench/gpu_codec_bench.cu: 256 MiB float32 vs cudaMemcpy D2D (and the selecting encodes);
#                 bench/gpu_float_huff_bench.cu: FloatHuff on 256 MiB bf16, f32 and int8 bytes vs the D2D copy;
#                 bench/gpu_persistent_bench.cu: the persistent ring all_reduce of 4 ranks as
#                 threads, 64 MiB int32 codes (coded, raw) and float32 (raw) vs the D2D copy
#       ranks     bench/gpu_ranks.py: 2 and 4 ranks sharing the GPU, socket
#                 transport throttled, all_reduce none/lossless/lossy
#       devpath   bench/gpu_ranks.py's lossy all_reduce of CUDA tensors (2 and 4 ranks,
#                 64 MiB, 10 and 1 Gbit/s) on the device path, the staged path
#                 (NCCLZ_DEVICE_PATH=staged) and the ordinary slices
#                 (NCCLZ_SPARSE_SLICE_BYTES=0), side by side; other settings
#                 and cases: NCCLZ_DEVPATH_VARIANTS, NCCLZ_DEVPATH_ARGS; not in "all"
#       fifos     the persistent ring's FIFO placements (issue 21): CudaPersistentComm.*,
#                 tests/python/test_gpu_persistent.py (processes over CUDA IPC, a killed
#                 rank), then devpath's A/B of device FIFOs, host FIFOs and the opt-in off,
#                 ranks as threads and as processes (NCCLZ_FIFOS_VARIANTS); not in "all"
#       sanitize  compute-sanitizer memcheck and racecheck on a filter, with the
#                 default kernels and with v3 (initcheck: NCCLZ_SAN_INIT=1)
#       alltests  the whole GoogleTest suite (CPU tests too); not in "all"
#       profile   Nsight Compute per-kernel times and DRAM bytes of gpu_codec_bench and
#                 gpu_float_huff_bench on 64 MiB (one pass) -> $OUT/profile.csv; not in "all"
#       persist   only the CTA slice coder's and the persistent kernels' steps (issue 21):
#                 build, test-cta, test-codec-cta, bench-cta (gpu_codec_bench --kernels 34),
#                 bench-persistent (a sweep of shapes, NCCLZ_PERSIST_SHAPES, with the first
#                 version's per-slice code side by side), memcheck-cta, racecheck-cta,
#                 memcheck-persistent
#       floathuff FloatHuff alone (issue 21's lossless target): build, its tests, the v1/v2/v3
#                 kernels side by side (gpu_float_huff_bench, 256 MiB and 1 MiB), ncu of v2
#                 and v3 (64 MiB) -> $OUT/profile.csv, memcheck and racecheck of its decode
#                 tests; not in "all"
#       all       env smoke build test pytest bench ranks sanitize
#       dry       print the plan (phases, limits, commands' key flags); runs nothing
#
# With the device tool (one command, at most 10 minutes):
#   run(command="bash tools/gpu_session.sh all", carry=[".gtest"], timeout_s=600)
# Results, at most 8 files (the tool returns no more): $OUT/{summary.md,
# env.txt (env + smoke), build.log, test.log (GoogleTest + pytest), bench.log
# (codec benchmark + ranks), bench.json, ranks.json, sanitize.log}; summary.md
# is also printed last. Without $OUT (local runs) they go to build/gpu-out/.
#
# Environment knobs: NCCLZ_GPU_DEADLINE (seconds for the whole script, default
# 540), NCCLZ_GPU_ARCH (e.g. 90; default from nvidia-smi), NCCLZ_GPU_JOBS,
# NCCLZ_SAN_FILTER (gtest filter for compute-sanitizer), NCCLZ_BENCH_MIB (256),
# NCCLZ_RANKS_ARGS (extra arguments of bench/gpu_ranks.py),
# NCCLZ_FORCE_CARRIED_GTEST=1 (build .gtest even where a system GTest exists),
# NCCLZ_SAN_QUICK=1 (sanitize: memcheck steps only), NCCLZ_DEVPATH_VARIANTS and
# NCCLZ_DEVPATH_ARGS (devpath, below), NCCLZ_PERSIST_SHAPES (persist_bench, below).
#
# Robust on purpose: no `set -e`; every step runs under `timeout`, its exit
# code and duration go to the summary, and the next step runs anyway. The
# step limits below are ceilings (together more than the 540 s deadline, which
# stops whatever is left; a whole run took 94-245 s on an H200).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)

if [ "${1:-}" = "prepare" ]; then
  src=""
  for d in /usr/src/googletest /usr/src/gtest; do [ -f "$d/CMakeLists.txt" ] && src=$d && break; done
  if [ -z "$src" ]; then
    echo "no GoogleTest sources found (apt-get install libgtest-dev, or put a googletest checkout in .gtest/)" >&2
    exit 1
  fi
  rm -rf .gtest && mkdir -p .gtest && cp -r "$src"/. .gtest/
  excl=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$excl")"
  grep -qx '/.gtest/' "$excl" 2>/dev/null || echo '/.gtest/' >>"$excl"
  echo "copied $src to .gtest ($(du -sh .gtest | cut -f1)); git ignores it: $(git check-ignore -q .gtest && echo yes || echo NO)"
  echo 'now: run(command="bash tools/gpu_session.sh all", carry=[".gtest"], timeout_s=600)'
  exit 0
fi

# CUDA tools that may not be on PATH (nvcc, compute-sanitizer, ncu).
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer /opt/nvidia/nsight-compute/*; do
  [ -d "$d" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH=$PATH:$d ;; esac
done
export PATH PYTHONUNBUFFERED=1

OUT_DIR=${OUT:-$ROOT/build/gpu-out}
mkdir -p "$OUT_DIR"
BUILD=$ROOT/build/gpu
SCRATCH=/tmp/ncclz-gpu-session  # side files that must not add to the 8 in $OUT
mkdir -p "$SCRATCH"
PYPKG=/tmp/ncclz-py             # the importable package the build assembles
START=$(date +%s)
DEADLINE=${NCCLZ_GPU_DEADLINE:-540}
JOBS=${NCCLZ_GPU_JOBS:-$(nproc 2>/dev/null || echo 8)}
PY=$(command -v python3 || echo python3)
SUMMARY=$OUT_DIR/summary.md
TESTBIN=$BUILD/tests/cpp/ncclz_tests
BENCHBIN=$BUILD/cuda/gpu_codec_bench
SAN_FILTER=${NCCLZ_SAN_FILTER:-CudaCodec.FormatExamplesOnDevice:CudaCodec.EmptySliceAndSmallCapacity:CudaCodec.SlicesMatchCpuSmallI32:CudaCodec.BatchesMatchCpu:CudaCodec.CorruptSlicesGiveTheCpuStatus:CudaFloatHuff.*}
SAN3_FILTER=${NCCLZ_SAN3_FILTER:-CudaCodec.FusedDecodeOfCpuSlices:CudaCodec.FusedQuantizeEncodeF32:CudaSelect.CpuSparseSlicesDecodeOnDevice:CudaSelect.FusedMatchesQuantizeThenCpuSelect}
INIT_FILTER=${NCCLZ_INIT_FILTER:-CudaCodec.FormatExamplesOnDevice:CudaCodec.EmptySliceAndSmallCapacity:CudaCodec.CorruptSlicesGiveTheCpuStatus}

# Step limits in seconds, each a ceiling (the build's three are one phase:
# GoogleTest, configure, compile; the module copy is instant).
L_ENV=15 L_SMOKE=25 L_GTEST=20 L_CONFIGURE=25 L_BUILD=140 L_MODULE=10 L_TEST=40 L_PYTEST=150 L_PYCPU=0
L_BENCH=40 L_RANKS=60 L_DEVPATH=40 L_MEMCHECK=35 L_RACECHECK=60 L_SAN3=30 L_PRIMS=30 L_PERSIST=40 L_PERSIST_BENCH=70
# NCCLZ_GPU_LIMIT_SCALE=N multiplies every limit (rehearsals on a slow machine; with a deadline to match).
if [ -n "${NCCLZ_GPU_LIMIT_SCALE:-}" ]; then
  for v in L_ENV L_SMOKE L_GTEST L_CONFIGURE L_BUILD L_MODULE L_TEST L_PYTEST L_PYCPU L_BENCH L_RANKS L_MEMCHECK L_RACECHECK L_SAN3 L_PRIMS L_PERSIST L_PERSIST_BENCH; do
    eval "$v=\$(($v * NCCLZ_GPU_LIMIT_SCALE))"
  done
fi

[ -f "$SUMMARY" ] || printf '# GPU session summary\n\n| step | rc | seconds |\n|---|---|---|\n' >"$SUMMARY"

remaining() { echo $((DEADLINE - ($(date +%s) - START))); }

# excerpt TITLE N FILE PATTERN: the first N lines of FILE matching PATTERN, into the summary.
excerpt() {
  local title=$1 n=$2 file=$3 pat=$4 lines
  [ -f "$file" ] || return 0
  lines=$(grep -E -m "$n" -e "$pat" "$file" | cut -c1-400)
  [ -n "$lines" ] && printf '\n%s (first %s matching lines of %s):\n```\n%s\n```\n\n' "$title" "$n" "$(basename "$file")" "$lines" >>"$SUMMARY"
  return 0
}

# step NAME LOG LIMIT_S CMD...: runs CMD with `timeout min(LIMIT, remaining)`,
# appending its output (with set -x tracing) to LOG; records rc and seconds.
# rc 124/137: the step ran out of time.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local left
  left=$(remaining)
  if [ "$left" -lt 10 ]; then
    echo "| $name | skipped (deadline) | 0 |" >>"$SUMMARY"
    echo "== $name: skipped, deadline reached" | tee -a "$log"
    return 99
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s) $(date -u +%T)" | tee -a "$log"
  local t0
  t0=$(date +%s)
  timeout --signal=TERM --kill-after=5 "$limit" bash -xc "$*" >>"$log" 2>&1
  local rc=$?
  local dt=$(($(date +%s) - t0))
  local note=""
  case $rc in 124 | 137) note=" (time limit ${limit}s)" ;; esac
  echo "| $name | $rc$note | $dt |" >>"$SUMMARY"
  echo "== $name: rc=$rc$note in ${dt}s" | tee -a "$log"
  return $rc
}

phase_env() {
  local log=$OUT_DIR/env.txt
  {
    echo "date: $(date -u)"; echo "host: $(uname -a)"; echo "root: $ROOT"
    echo "git: $(git -C "$ROOT" log --oneline -1 2>/dev/null || echo 'no git')"
    echo "nproc: $(nproc)"; free -g 2>/dev/null | head -2; echo "python3: $PY"
  } >>"$log" 2>&1
  step env "$log" $L_ENV "nvidia-smi; nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv; nvcc --version; which nvcc compute-sanitizer ncu ccache; gcc --version | head -1; cmake --version | head -1; ninja --version; '$PY' -c 'import sys, torch, numpy; print(sys.version); print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"available\", torch.cuda.is_available(), \"devices\", torch.cuda.device_count()); print(\"numpy\", numpy.__version__)'; '$PY' -m nanobind --cmake_dir; '$PY' -c 'import sysconfig; print(\"Python.h dir:\", sysconfig.get_paths()[\"include\"])'; ls \$('$PY' -c 'import sysconfig; print(sysconfig.get_paths()[\"include\"])')/Python.h; df -h /tmp /dev/shm | tail -2"
  grep -m1 -E '^NVIDIA|H100|H200' "$log" | head -1 | sed 's/^/GPU: /' >>"$SUMMARY"
}

gpu_arch() {
  if [ -n "${NCCLZ_GPU_ARCH:-}" ]; then echo "$NCCLZ_GPU_ARCH"; return; fi
  local cc
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  [ -n "$cc" ] && echo "$cc" || echo 90
}

phase_smoke() {
  local log=$OUT_DIR/env.txt arch
  arch=$(gpu_arch)
  echo "== smoke: tools/gpu_smoke.cu for sm_$arch" >>"$log"
  # Compile and run in one step: the compile takes a few seconds, the checks about one.
  step smoke "$log" $L_SMOKE "nvcc -O2 -arch=sm_$arch -o '$SCRATCH/gpu_smoke' '$ROOT/tools/gpu_smoke.cu' && '$SCRATCH/gpu_smoke'"
  excerpt "smoke" 30 "$log" '^(PASS|FAIL|SMOKE)|error:|nvcc fatal|warning:'
}

phase_build() {
  BUILD_TRIED=1
  local log=$OUT_DIR/build.log
  local prefix="" launcher=""
  # GoogleTest: the system's if CMake finds it, else the carried sources (.gtest).
  if [ -f "$ROOT/.gtest/CMakeLists.txt" ] && { [ -n "${NCCLZ_FORCE_CARRIED_GTEST:-}" ] ||
      ! ls /usr/lib/*/cmake/GTest/GTestConfig.cmake /usr/lib/cmake/GTest/GTestConfig.cmake /usr/local/lib/cmake/GTest/GTestConfig.cmake >/dev/null 2>&1; }; then
    if [ ! -f /tmp/gtest-install/lib/cmake/GTest/GTestConfig.cmake ] && [ ! -f /tmp/gtest-install/lib64/cmake/GTest/GTestConfig.cmake ]; then
      step gtest "$log" $L_GTEST "cmake -S '$ROOT/.gtest' -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX=/tmp/gtest-install -DCMAKE_POSITION_INDEPENDENT_CODE=ON && cmake --build /tmp/gtest-build -j $JOBS && cmake --install /tmp/gtest-build"
    fi
    prefix="-DCMAKE_PREFIX_PATH=/tmp/gtest-install"
  fi
  command -v ccache >/dev/null 2>&1 && launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
  local arch
  arch=$(gpu_arch)
  echo "CUDA arch: $arch" | tee -a "$log"
  # -Xptxas=-v: registers, shared memory, stack and spills of every kernel go to build.log.
  local common="cmake -S '$ROOT' -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCLZ_BUILD_TESTS=ON -DNCCLZ_CUDA=ON -DNCCLZ_BUILD_GPU_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=$arch -DCMAKE_CUDA_FLAGS=-Xptxas=-v $prefix $launcher"
  if ! step configure "$log" $L_CONFIGURE "$common -DNCCLZ_BUILD_PYTHON=ON -DPython_EXECUTABLE='$PY'"; then
    # Most likely no Python headers for python3: keep the C++ tests and the benchmark.
    excerpt "configure errors" 20 "$log" 'CMake Error|Could NOT|error:'
    step configure-nopython "$log" $L_CONFIGURE "$common -DNCCLZ_BUILD_PYTHON=OFF" || return
  fi
  # -k 0: keep going, so that the benchmark still builds if a test file does not.
  step build "$log" $L_BUILD "cmake --build '$BUILD' -j $JOBS -- -k 0"
  excerpt "build errors" 25 "$log" 'error:|FAILED:|undefined reference|CMake Error|Error [0-9]'
  # An importable package: python/ncclz plus the module just built.
  local so
  so=$(find "$BUILD" -name '_core*.so' -newer "$ROOT/CMakeLists.txt" 2>/dev/null | head -1)
  [ -z "$so" ] && so=$(find "$BUILD" -name '_core*.so' 2>/dev/null | head -1)
  step module "$log" $L_MODULE "rm -rf '$PYPKG' && mkdir -p '$PYPKG' && cp -r '$ROOT/python/ncclz' '$PYPKG/ncclz' && test -n '$so' && cp '$so' '$PYPKG/ncclz/' && cd /tmp && PYTHONPATH='$PYPKG' '$PY' -c 'import ncclz; print(ncclz.__file__, ncclz._core.__file__, \"cuda:\", ncclz.built_with_cuda(), ncclz.cuda_device_count())'"
}

# The assembled package for the Python phases (also when an earlier call built it).
[ -d "$PYPKG/ncclz" ] && export PYTHONPATH=$PYPKG${PYTHONPATH:+:$PYTHONPATH}
py_ready() {
  case ":${PYTHONPATH:-}:" in *":$PYPKG:"*) ;; *) export PYTHONPATH=$PYPKG${PYTHONPATH:+:$PYTHONPATH} ;; esac
}

BUILD_TRIED=0
ensure_built() {  # builds once per invocation when a binary or the module is missing
  if [ "$BUILD_TRIED" = 0 ] && { [ ! -x "$TESTBIN" ] || [ ! -x "$BENCHBIN" ] || [ ! -d "$PYPKG/ncclz" ]; }; then phase_build; fi
}

phase_test() {
  ensure_built
  local log=$OUT_DIR/test.log
  step test "$log" $L_TEST "NCCLZ_REQUIRE_GPU=1 '$TESTBIN' --gtest_filter='CudaCodec.*:CudaSelect.*:CudaFloatHuff.*' --gtest_color=no"
  step test-v2 "$log" $L_TEST "NCCLZ_REQUIRE_GPU=1 NCCLZ_DEVICE_CODEC=v2 '$TESTBIN' --gtest_filter='CudaCodec.*:CudaSelect.*:-CudaCodec.Fused*' --gtest_color=no"
  # Device ranks in the ring collectives (prims::DeviceSliceCodec): outputs and wire bytes against CPU ranks.
  step test-prims "$log" $L_PRIMS "NCCLZ_REQUIRE_GPU=1 '$TESTBIN' --gtest_filter='*CudaPrims*' --gtest_color=no"
  step test-prims-v2 "$log" $L_PRIMS "NCCLZ_REQUIRE_GPU=1 NCCLZ_DEVICE_CODEC=v2 '$TESTBIN' --gtest_filter='*CudaPrims*' --gtest_color=no"
  # Device buffers through the communicator (core/device_work.hpp): the host calls' bits, within E.
  step test-comm "$log" $L_PRIMS "NCCLZ_REQUIRE_GPU=1 NCCLZ_RANDOM_CALLS=400 '$TESTBIN' --gtest_filter='CudaComm.*:CudaCommRandom.*:CudaPersistentComm.*' --gtest_color=no"
  step test-comm-v2 "$log" $L_PRIMS "NCCLZ_REQUIRE_GPU=1 NCCLZ_DEVICE_CODEC=v2 '$TESTBIN' --gtest_filter='CudaComm.*' --gtest_color=no"
  # Slots not registered with CUDA (the copies staged by the driver, two syncs per coded encode).
  step test-comm-nopin "$log" $L_PRIMS "NCCLZ_REQUIRE_GPU=1 NCCLZ_DEVICE_PIN=0 '$TESTBIN' --gtest_filter='CudaComm.*' --gtest_color=no"
  persist_tests
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|Failure|first difference' "$log" | head -40 >>"$SUMMARY"
}

# Issue 21: the CTA slice coder (cuda/cta_slice.cuh; DeviceCodec::set_kernels(4)) against the CPU
# and v3, and the persistent ring all_reduce kernels (cuda/persistent_ring.cu) of ranks as threads
# against the CPU ring; then the CudaCodec suite with the CTA coder.
persist_tests() {
  local log=$OUT_DIR/test.log
  step test-cta "$log" $L_PERSIST "NCCLZ_REQUIRE_GPU=1 '$TESTBIN' --gtest_filter='CudaCta.*:CudaPersistent.*' --gtest_color=no"
  step test-codec-cta "$log" $L_PERSIST "NCCLZ_REQUIRE_GPU=1 NCCLZ_DEVICE_CODEC=cta '$TESTBIN' --gtest_filter='CudaCodec.*' --gtest_color=no"
}
# NCCLZ_PERSIST_SHAPES: the persistent benchmark's shapes, one run of it (bench/gpu_persistent_bench.cu
# --shapes: C:G:SLOT_KIB:K[:v1], channels x CTAs per channel, slot KiB, slots; ":v1" the first
# version's per-slice code for the A/B; ":proxy" the same shape with host-memory FIFOs bridged by
# the proxy threads, each right after its device-FIFO twin). 4 ranks take 4 x C x G CTAs, which must
# all be resident at once: the benchmark reports a shape beyond the occupancy bound as refused instead
# of running it.
PERSIST_SHAPES_DEFAULT="8:1:1024:4:v1 8:1:1024:4 8:1:1024:4:proxy 32:1:256:4:v1 32:1:256:4 8:4:1024:8 8:4:1024:8:proxy 8:8:256:16 16:4:256:8 16:4:128:8 32:2:256:8 64:1:256:4 16:2:1024:8 16:8:256:16 4:2:1024:8 4:2:1024:8:proxy"
persist_bench() {
  local log=$OUT_DIR/bench.log
  rm -f "$SCRATCH/persistent.md"
  step bench-persistent "$log" $L_PERSIST_BENCH "'$BUILD/cuda/gpu_persistent_bench' --mib 64 --ranks 4 --shapes '${NCCLZ_PERSIST_SHAPES:-$PERSIST_SHAPES_DEFAULT}' --rel 1e-3 --reps 5 --md '$SCRATCH/persistent.md'"
  [ -f "$SCRATCH/persistent.md" ] && cat "$SCRATCH/persistent.md" | tee -a "$log" >>"$SUMMARY"
  return 0
}
# The sanitizers on the CTA coder (its shared-memory stages) and on one-rank persistent kernels
# (the wait, abort and report paths: compute-sanitizer may serialise kernels, which a ring of
# several ranks' kernels cannot survive; memcheck-persistent runs a 1- and 2-rank case with a
# 20 s timeout, so that a serialising tool shows up as TimedOut, not as a hang).
persist_sanitize() {
  local log=$OUT_DIR/sanitize.log
  step memcheck-cta "$log" $L_PERSIST "NCCLZ_CUDA_TEST_QUICK=1 NCCLZ_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 '$TESTBIN' --gtest_filter='CudaCta.SmallSlotsGiveNoSpaceAsTheCpu:CudaCta.CorruptSlicesGiveTheCpuStatus:CudaCta.FusedFloatCallsMatchV3:CudaPersistent.TimeoutStopsAWaitingKernel:CudaPersistent.RefusesBadOptions' --gtest_color=no"
  [ -z "${NCCLZ_SAN_QUICK:-}" ] && step racecheck-cta "$log" $L_PERSIST "NCCLZ_CUDA_TEST_QUICK=1 NCCLZ_REQUIRE_GPU=1 compute-sanitizer --tool racecheck --error-exitcode 3 '$TESTBIN' --gtest_filter='CudaCta.SmallSlotsGiveNoSpaceAsTheCpu:CudaCta.CorruptSlicesGiveTheCpuStatus:CudaPersistent.TimeoutStopsAWaitingKernel' --gtest_color=no"
  step memcheck-persistent "$log" $L_PERSIST "NCCLZ_CUDA_TEST_QUICK=1 NCCLZ_REQUIRE_GPU=1 NCCLZ_PERSISTENT_TEST_TIMEOUT_S=20 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 '$TESTBIN' --gtest_filter='CudaPersistent.SmallRing' --gtest_color=no"
  return 0
}

phase_persist() {
  ensure_built
  persist_tests
  step bench-cta "$OUT_DIR/bench.log" $L_BENCH "'$BENCHBIN' --mib ${NCCLZ_BENCH_MIB:-256} --rel 1e-3 --reps 10 --kernels 134 --select 0 --md '$SCRATCH/bench.md'"
  [ -f "$SCRATCH/bench.md" ] && cat "$SCRATCH/bench.md" | tee -a "$OUT_DIR/bench.log" >>"$SUMMARY"
  persist_bench
  persist_sanitize
  grep -hE '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|Failure|first difference|ERROR SUMMARY|RACECHECK SUMMARY' "$OUT_DIR/test.log" "$OUT_DIR/sanitize.log" 2>/dev/null | head -40 >>"$SUMMARY"
}

# FloatHuff alone, most important first (the deadline stops what is left): its tests (every
# kernel set against the CPU's bytes), the A/B of v1, v2, v3 on 256 MiB and on 1 MiB (the fixed
# cost a small lossless slice pays), ncu's per-kernel figures for v2 and v3, then the sanitizers
# on the decode tests (NCCLZ_CUDA_TEST_QUICK=1).
phase_floathuff() {
  ensure_built
  local bench=$BUILD/cuda/gpu_float_huff_bench mib
  step test-floathuff "$OUT_DIR/test.log" $L_TEST "NCCLZ_REQUIRE_GPU=1 '$TESTBIN' --gtest_filter='CudaFloatHuff.*' --gtest_color=no"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|Failure' "$OUT_DIR/test.log" | head -20 >>"$SUMMARY"
  for mib in 256 1; do
    rm -f "$SCRATCH/fhuff.md"
    step "bench-floathuff-$mib" "$OUT_DIR/bench.log" $L_BENCH "'$bench' --mib $mib --reps $([ "$mib" = 1 ] && echo 100 || echo 10) --md '$SCRATCH/fhuff.md'"
    [ -f "$SCRATCH/fhuff.md" ] && cat "$SCRATCH/fhuff.md" | tee -a "$OUT_DIR/bench.log" >>"$SUMMARY"
  done
  # run 10's four metrics, plus shared-memory load bank conflicts and achieved occupancy (if
  # this ncu does not know those two, the four alone)
  local metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
  local more=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,sm__warps_active.avg.pct_of_peak_sustained_active
  step profile-floathuff "$OUT_DIR/bench.log" ${NCCLZ_PROFILE_LIMIT:-120} "ncu --kernel-name regex:fh_ --metrics $metrics,$more --csv --log-file '$OUT_DIR/profile.csv' '$bench' --mib 64 --reps 1 --warm 0 --kernels v2,v3" ||
    step profile-floathuff-4 "$OUT_DIR/bench.log" ${NCCLZ_PROFILE_LIMIT:-120} "ncu --kernel-name regex:fh_ --metrics $metrics --csv --log-file '$OUT_DIR/profile.csv' '$bench' --mib 64 --reps 1 --warm 0 --kernels v2,v3"
  local filter='CudaFloatHuff.DecodesCpuPayloads'
  step memcheck-floathuff "$OUT_DIR/sanitize.log" 60 "NCCLZ_CUDA_TEST_QUICK=1 NCCLZ_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 '$TESTBIN' --gtest_filter='$filter' --gtest_color=no"
  step racecheck-floathuff "$OUT_DIR/sanitize.log" 90 "NCCLZ_CUDA_TEST_QUICK=1 NCCLZ_REQUIRE_GPU=1 compute-sanitizer --tool racecheck --error-exitcode 3 '$TESTBIN' --gtest_filter='$filter' --gtest_color=no"
  grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "$OUT_DIR/sanitize.log" 2>/dev/null | sort | uniq -c | head -10 >>"$SUMMARY"
}

phase_pytest() {
  ensure_built
  py_ready
  local log=$OUT_DIR/test.log t240="" t60=""
  # pytest-timeout is on the GPU machine; without it (a rehearsal) the step's own limit still holds.
  "$PY" -c 'import pytest_timeout' 2>/dev/null && t240="--timeout 240" && t60="--timeout 60"
  # Every GPU test file (tests/python/test_*gpu*.py); xdist spreads them over the cores (the
  # ranks of all tests share the one GPU).
  local files xdist=""
  files=$(cd "$ROOT/tests/python" && ls test_*gpu*.py 2>/dev/null | tr '\n' ' ')
  "$PY" -c 'import xdist' 2>/dev/null && xdist="-n 8"
  if [ -n "$files" ]; then
    step pytest-gpu "$log" $L_PYTEST "cd '$ROOT/tests/python' && NCCLZ_REQUIRE_GPU=1 '$PY' -m pytest -q -p no:cacheprovider $xdist $t240 -rfEs $files"
  else
    echo "| pytest-gpu | no tests/python/test_*gpu*.py | 0 |" >>"$SUMMARY"
  fi
  if [ "$L_PYCPU" -gt 0 ]; then
    step pytest-cpu "$log" $L_PYCPU "cd '$ROOT/tests/python' && '$PY' -m pytest -q -x -p no:cacheprovider $t60 -rfE test_comm.py -k 'collectives_numpy and socket-2 or single_rank'"
  fi
  excerpt "pytest" 30 "$log" '^(FAILED|ERROR)|Error:|[0-9]+ (passed|failed)|no tests ran'
}

phase_alltests() {
  ensure_built
  step alltests "$OUT_DIR/test.log" 400 "cd '$BUILD' && ctest --output-on-failure -j 8"
}

phase_sanitize() {
  ensure_built
  local log=$OUT_DIR/sanitize.log
  # Every launch is slow under the sanitizers: the tests do less (NCCLZ_CUDA_TEST_QUICK).
  export NCCLZ_CUDA_TEST_QUICK=1 NCCLZ_REQUIRE_GPU=1
  step memcheck "$log" $L_MEMCHECK "NCCLZ_DEVICE_CODEC=v2 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 '$TESTBIN' --gtest_filter='$SAN_FILTER' --gtest_color=no"
  # NCCLZ_SAN_QUICK=1: memcheck only (racecheck's kernels unchanged since a clean run).
  [ -z "${NCCLZ_SAN_QUICK:-}" ] && step racecheck "$log" $L_RACECHECK "NCCLZ_DEVICE_CODEC=v2 compute-sanitizer --tool racecheck --error-exitcode 3 '$TESTBIN' --gtest_filter='$INIT_FILTER:CudaCodec.BatchesMatchCpu' --gtest_color=no"
  # The v3 kernels (tile kernels, fused calls; their look-back is in global memory, which racecheck does not see).
  step memcheck-v3 "$log" $L_SAN3 "NCCLZ_DEVICE_CODEC=v3 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 '$TESTBIN' --gtest_filter='$SAN_FILTER:$SAN3_FILTER' --gtest_color=no"
  [ -z "${NCCLZ_SAN_QUICK:-}" ] && step racecheck-v3 "$log" $L_SAN3 "NCCLZ_DEVICE_CODEC=v3 compute-sanitizer --tool racecheck --error-exitcode 3 '$TESTBIN' --gtest_filter='CudaCodec.FormatExamplesOnDevice:CudaCodec.EmptySliceAndSmallCapacity:CudaCodec.SlicesMatchCpuSmallI32:CudaCodec.FusedDecodeOfCpuSlices' --gtest_color=no"
  # The device slice codec's three calls (fused decode-and-add and not), one process of direct calls.
  step memcheck-prims "$log" $L_PRIMS "NCCLZ_DEVICE_CODEC=v3 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 '$TESTBIN' --gtest_filter='CudaPrims.SliceCodecCallsMatchCpu:CudaPrims.UnsupportedSlicesAndOptions:CudaPrims.EncodeIntoRegisteredSlotsMatchesCpu:CudaPrims.HostPinsLookUpRegisteredRanges:CudaPrims.ReduceValuesMatchesHostBits:CudaPrims.FloatSliceCallsMatchCpu' --gtest_color=no"
  # Device buffers through a communicator of device and host ranks (the device path's kernels and copies).
  step memcheck-comm "$log" $L_PRIMS "compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 '$TESTBIN' --gtest_filter='CudaComm.DeviceAndHostRanksMix' --gtest_color=no"
  persist_sanitize
  if [ -n "${NCCLZ_SAN_INIT:-}" ]; then
    step initcheck "$log" 60 "compute-sanitizer --tool initcheck --error-exitcode 3 '$TESTBIN' --gtest_filter='$INIT_FILTER' --gtest_color=no"
  fi
  unset NCCLZ_CUDA_TEST_QUICK NCCLZ_REQUIRE_GPU
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Uninitialized|hazard|PASSED|FAILED' "$log" | sort | uniq -c | head -20 >>"$SUMMARY"
}

phase_bench() {
  ensure_built
  local log=$OUT_DIR/bench.log
  rm -f "$SCRATCH/bench.md"
  step bench "$log" $L_BENCH "'$BENCHBIN' --mib ${NCCLZ_BENCH_MIB:-256} --rel 1e-3 --reps 10 --json '$OUT_DIR/bench.json' --md '$SCRATCH/bench.md'"
  [ -f "$SCRATCH/bench.md" ] && cat "$SCRATCH/bench.md" | tee -a "$log" >>"$SUMMARY"
  # FloatHuff (lossless floats) encode / decode against the D2D copy, bf16 and f32 (issue 21's lossless target).
  rm -f "$SCRATCH/fhuff.md"
  step bench-floathuff "$log" $L_BENCH "'$BUILD/cuda/gpu_float_huff_bench' --mib ${NCCLZ_BENCH_MIB:-256} --reps 10 --md '$SCRATCH/fhuff.md'"
  [ -f "$SCRATCH/fhuff.md" ] && cat "$SCRATCH/fhuff.md" | tee -a "$log" >>"$SUMMARY"
  persist_bench
}

phase_ranks() {
  ensure_built
  py_ready
  local log=$OUT_DIR/bench.log
  rm -f "$SCRATCH/ranks.md"
  # --budget: the script plans its configurations to end inside the step's limit.
  step ranks "$log" $L_RANKS "cd '$ROOT' && NCCLZ_REQUIRE_GPU=1 '$PY' bench/gpu_ranks.py --device cuda --budget $((L_RANKS - 10)) --json '$OUT_DIR/ranks.json' --md '$SCRATCH/ranks.md' ${NCCLZ_RANKS_ARGS:-}"
  [ -f "$SCRATCH/ranks.md" ] && cat "$SCRATCH/ranks.md" >>"$SUMMARY"
  excerpt "ranks errors" 15 "$log" 'Error|error:|Traceback|FAIL|no GPU'
}

# The device path against its alternatives in one run (docs/GPU.md, "Device
# buffers"): the default, the staged path (NCCLZ_DEVICE_PATH=staged) and the
# ordinary slices (NCCLZ_SPARSE_SLICE_BYTES=0); tables to the summary and
# bench.log, JSON to the scratch folder (the device tool returns 8 files).
# NCCLZ_DEVPATH_VARIANTS: the settings to compare, space-separated, each
# "default" or VAR=VALUE[,VAR=VALUE...] (e.g. NCCLZ_TOPO_HOSTS=2x2 with 4
# ranks: the hierarchical schedules); NCCLZ_MPS=1 in a variant runs its ranks
# (processes) under an MPS daemon started for the step and stopped after it,
# so that their kernels share the GPU instead of time-slicing it (where
# nvidia-cuda-mps-control is missing or fails, the step says so and fails);
# a token of a variant that starts with "--" is an argument of gpu_ranks.py
# for that variant alone (e.g. "--threads,NCCLZ_SPARSE_SLICE_BYTES=2097152":
# ranks as threads of one process, 2 MiB device slices);
# NCCLZ_DEVPATH_ARGS: gpu_ranks.py's case arguments (default: 2 and 4 ranks,
# 64 MiB float32, 10 and 1 Gbit/s). The persistent ring kernels in the call
# path against the device path (docs/GPU.md, "Persistent ring kernels in the
# call path"), ranks as threads (their kernels run concurrently) and as
# processes (time-sliced without MPS):
#   NCCLZ_DEVPATH_VARIANTS="--threads --threads,NCCLZ_PERSISTENT=1 default NCCLZ_PERSISTENT=1"
phase_devpath() {
  ensure_built
  py_ready
  local log=$OUT_DIR/bench.log v name i=0
  local variants=${NCCLZ_DEVPATH_VARIANTS:-default NCCLZ_DEVICE_PATH=staged NCCLZ_SPARSE_SLICE_BYTES=0}
  local cases=${NCCLZ_DEVPATH_ARGS:---ranks 2,4 --sizes 64M --dtypes float32 --gbps 10 --extra-gbps 1}
  for v in $variants; do
    i=$((i + 1))
    name="$i-${v%%=*}"
    name=${name//[^A-Za-z0-9_-]/}
    # The variant's settings: VAR=VALUE tokens for env, "--..." tokens for gpu_ranks.py.
    local envs="" extra="" tok
    for tok in ${v//,/ }; do
      case "$tok" in
        default) ;;
        --*) extra="$extra $tok" ;;
        *) envs="$envs $tok" ;;
      esac
    done
    rm -f "$SCRATCH/devpath_$name.md"
    local mps_on="" mps_off=""
    if [[ ",$v," == *",NCCLZ_MPS=1,"* ]]; then
      # The daemon's pipes in the scratch folder; the ranks find them by CUDA_MPS_PIPE_DIRECTORY.
      local mps=$SCRATCH/mps
      mkdir -p "$mps/pipe" "$mps/log"
      mps_on="export CUDA_MPS_PIPE_DIRECTORY='$mps/pipe' CUDA_MPS_LOG_DIRECTORY='$mps/log' && { command -v nvidia-cuda-mps-control >/dev/null || { echo 'no nvidia-cuda-mps-control'; exit 2; }; } && nvidia-cuda-mps-control -d && "
      mps_off="; rc=\$?; echo quit | nvidia-cuda-mps-control; exit \$rc"
    fi
    step "devpath-$name" "$log" $L_DEVPATH "cd '$ROOT' && ${mps_on}env$envs NCCLZ_REQUIRE_GPU=1 '$PY' bench/gpu_ranks.py --device cuda $cases$extra --budget $((L_DEVPATH - 12)) --json '$SCRATCH/devpath_$name.json' --md '$SCRATCH/devpath_$name.md'${mps_off}"
    [ -f "$SCRATCH/devpath_$name.md" ] && { echo "devpath ($v):"; cat "$SCRATCH/devpath_$name.md"; } | tee -a "$log" >>"$SUMMARY"
    # The per-call statistics (encode / decode / wait seconds) of every row, for the raw results.
    [ -f "$SCRATCH/devpath_$name.json" ] && { echo "devpath ($v) json:"; cat "$SCRATCH/devpath_$name.json"; echo; } >>"$log"
  done
}

# Issue 21's FIFO placements for the persistent ring kernels (docs/GPU.md,
# "Persistent ring kernels in the call path"): the call-path GoogleTests
# (ranks as threads: device FIFOs, the processes' path where CUDA refuses its
# own IPC handles, host FIFOs), the processes' test (2 and 4 processes on GPU
# 0 over CUDA IPC and host FIFOs against the opt-in off; a killed rank), then
# the A/B through phase_devpath: device FIFOs, host FIFOs and the opt-in off,
# ranks as threads and as processes (NCCLZ_FIFOS_VARIANTS overrides the list).
phase_fifos() {
  ensure_built
  py_ready
  local log=$OUT_DIR/test.log t=""
  "$PY" -c 'import pytest_timeout' 2>/dev/null && t="--timeout 200"
  step test-fifos "$log" $L_PERSIST "NCCLZ_REQUIRE_GPU=1 '$TESTBIN' --gtest_filter='CudaPersistentComm.*' --gtest_color=no"
  step pytest-fifos "$log" $L_PYTEST "cd '$ROOT/tests/python' && NCCLZ_REQUIRE_GPU=1 '$PY' -m pytest -q -p no:cacheprovider $t -rfEs test_gpu_persistent.py"
  grep -E '^\[  FAILED  \]|Failure|^(FAILED|ERROR)|[0-9]+ (passed|failed)' "$log" | tail -20 >>"$SUMMARY"
  local p=NCCLZ_PERSISTENT=1
  NCCLZ_DEVPATH_VARIANTS=${NCCLZ_FIFOS_VARIANTS:-"--threads,$p,NCCLZ_PERSISTENT_FIFOS=device --threads,$p,NCCLZ_PERSISTENT_FIFOS=host --threads $p,NCCLZ_PERSISTENT_FIFOS=device $p,NCCLZ_PERSISTENT_FIFOS=host default"} phase_devpath
}

phase_profile() {
  ensure_built
  local log=$OUT_DIR/bench.log
  local metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
  # One CSV (the device tool returns 8 files): the codec benchmark's kernels
  # (every version), then FloatHuff's (bf16 and f32), each row one launch.
  step profile "$log" ${NCCLZ_PROFILE_LIMIT:-150} "ncu --metrics $metrics --csv --log-file '$SCRATCH/profile_codec.csv' '$BENCHBIN' --mib 64 --reps 1 --warm 0"
  step profile-floathuff "$log" ${NCCLZ_PROFILE_LIMIT:-150} "ncu --metrics $metrics --csv --log-file '$SCRATCH/profile_fh.csv' '$BUILD/cuda/gpu_float_huff_bench' --mib 64 --reps 1 --warm 0"
  cat "$SCRATCH/profile_codec.csv" "$SCRATCH/profile_fh.csv" >"$OUT_DIR/profile.csv" 2>/dev/null
}

phase_dry() {
  echo "deadline ${DEADLINE}s; limits: env $L_ENV smoke $L_SMOKE gtest $L_GTEST configure $L_CONFIGURE build $L_BUILD module $L_MODULE test $L_TEST x2 pytest $L_PYTEST+$L_PYCPU bench $L_BENCH ranks $L_RANKS memcheck $L_MEMCHECK racecheck $L_RACECHECK memcheck-v3, racecheck-v3 $L_SAN3 each, test-prims x2, test-comm x2, memcheck-prims and memcheck-comm $L_PRIMS each"
  echo "sum of limits: $((L_ENV + L_SMOKE + L_GTEST + L_CONFIGURE + L_BUILD + L_MODULE + 2 * L_TEST + L_PYTEST + L_PYCPU + L_BENCH + L_RANKS + L_MEMCHECK + L_RACECHECK + 2 * L_SAN3 + 3 * L_PRIMS)) (the deadline stops what is left)"
  echo "python3: $PY; jobs: $JOBS; ccache: $(command -v ccache || echo none); out: $OUT_DIR; build: $BUILD"
  echo "gtest sources carried: $([ -f "$ROOT/.gtest/CMakeLists.txt" ] && echo yes || echo NO)"
  echo "tests/python/test_gpu.py: $([ -f "$ROOT/tests/python/test_gpu.py" ] && echo present || echo missing)"
}

phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(all)
if [ "${phases[0]}" = dry ]; then phase_dry; exit 0; fi
phase_env
for p in "${phases[@]}"; do
  case "$p" in
    all) phase_smoke; phase_build; phase_test; phase_pytest; phase_bench; phase_ranks; phase_sanitize ;;
    env) ;;
    smoke) phase_smoke ;;
    build) phase_build ;;
    test) phase_test ;;
    pytest) phase_pytest ;;
    alltests) phase_alltests ;;
    sanitize) phase_sanitize ;;
    bench) phase_bench ;;
    ranks) phase_ranks ;;
    devpath) phase_devpath ;;
    fifos) phase_fifos ;;
    profile) phase_profile ;;
    persist) phase_persist ;;
    floathuff) phase_floathuff ;;
    *) echo "unknown phase: $p" | tee -a "$SUMMARY" ;;
  esac
done
echo "total seconds: $(($(date +%s) - START))" >>"$SUMMARY"
# Keep the logs within what the device tool returns (16 MiB a file): the end matters most.
for f in "$OUT_DIR"/*.log "$OUT_DIR"/*.txt "$OUT_DIR"/*.json; do
  [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 15000000 ] && tail -c 15000000 "$f" >"$f.tmp" && mv "$f.tmp" "$f"
done
echo "files in $OUT_DIR: $(ls "$OUT_DIR" | wc -l) (the device tool returns at most 8): $(ls "$OUT_DIR" | tr '\n' ' ')" >>"$SUMMARY"
echo
cat "$SUMMARY"
exit 0
