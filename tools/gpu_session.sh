#!/usr/bin/env bash
# One-call GPU session for the device codec (docs/GPU.md): build with CUDA for
# the machine's GPU, run the device-codec tests, compute-sanitizer, and the
# throughput benchmark, writing logs and results to $OUT.
#
# Usage (from the repository root):
#   bash tools/gpu_session.sh prepare        # HERE, on the machine without a GPU:
#                                            # copies GoogleTest's sources into .gtest/
#                                            # (git-ignored) for the device machine,
#                                            # which has no GTest and no network
#   bash tools/gpu_session.sh [PHASE ...]    # ON the GPU machine; PHASES (default: all):
#       env       nvidia-smi, nvcc --version, compilers, cmake (always run first)
#       build     configure + build (CUDA ON, the GPU's arch, tests, benchmark)
#       test      the CudaCodec GoogleTests (ctest-independent: runs the binary)
#       sanitize  compute-sanitizer memcheck, racecheck and initcheck on a filter
#       bench     bench/gpu_codec_bench.cu: 256 MiB float32 vs cudaMemcpy D2D
#       alltests  the whole GoogleTest suite (CPU tests too); not in "all"
#       profile   Nsight Compute per-kernel times and DRAM bytes of one small
#                 benchmark run -> $OUT/profile.csv; not in "all"
#       all       env build test bench sanitize
#
# With the device tool (one command, at most 10 minutes; build outputs stay on
# a warm machine between calls, so a second call skips the build):
#   run(command="bash tools/gpu_session.sh all", carry=[".gtest"], timeout_s=600)
#   or split:  "bash tools/gpu_session.sh build test bench"  then  "... sanitize"
# Results: $OUT/{summary.md,env.txt,build.log,test.log,sanitize.log,bench.log,
# bench.json,bench.md} (8 files: the tool returns at most 8). Without $OUT
# (local runs) they go to build/gpu-out/.
#
# Environment knobs: NCCLZ_GPU_DEADLINE (seconds for the whole script, default
# 560), NCCLZ_GPU_ARCH (e.g. 90; default from nvidia-smi), NCCLZ_GPU_JOBS,
# NCCLZ_SAN_FILTER (gtest filter for compute-sanitizer), NCCLZ_BENCH_MIB (256),
# NCCLZ_FORCE_CARRIED_GTEST=1 (build .gtest even where a system GTest exists).
#
# Robust on purpose: no `set -e`; every step runs under `timeout`, its exit
# code and duration go to the summary, and the next step runs anyway.
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
export PATH

OUT_DIR=${OUT:-$ROOT/build/gpu-out}
mkdir -p "$OUT_DIR"
BUILD=$ROOT/build/gpu
START=$(date +%s)
DEADLINE=${NCCLZ_GPU_DEADLINE:-560}
JOBS=${NCCLZ_GPU_JOBS:-$(nproc 2>/dev/null || echo 8)}
SUMMARY=$OUT_DIR/summary.md
TESTBIN=$BUILD/tests/cpp/ncclz_tests
BENCHBIN=$BUILD/cuda/gpu_codec_bench
SAN_FILTER=${NCCLZ_SAN_FILTER:-CudaCodec.FormatExamplesOnDevice:CudaCodec.EmptySliceAndSmallCapacity:CudaCodec.SlicesMatchCpuSmallI32:CudaCodec.BatchesMatchCpu:CudaCodec.CorruptSlicesGiveTheCpuStatus:CudaCodec.QuantizerF16MatchesCpu:CudaCodec.OneCodecManyCalls}
INIT_FILTER=${NCCLZ_INIT_FILTER:-CudaCodec.FormatExamplesOnDevice:CudaCodec.EmptySliceAndSmallCapacity:CudaCodec.CorruptSlicesGiveTheCpuStatus}

[ -f "$SUMMARY" ] || printf '# GPU session summary\n\n| step | rc | seconds |\n|---|---|---|\n' >"$SUMMARY"

remaining() { echo $((DEADLINE - ($(date +%s) - START))); }

# step NAME LOG LIMIT_S CMD...: runs CMD with `timeout min(LIMIT, remaining)`,
# appending its output (with set -x tracing) to LOG; records rc and seconds.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local left
  left=$(remaining)
  if [ "$left" -lt 15 ]; then
    echo "| $name | skipped (deadline) | 0 |" >>"$SUMMARY"
    echo "== $name: skipped, deadline reached" | tee -a "$log"
    return 99
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s) $(date -u +%T)" | tee -a "$log"
  local t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" bash -xc "$*" >>"$log" 2>&1
  local rc=$?
  local dt=$(($(date +%s) - t0))
  echo "| $name | $rc | $dt |" >>"$SUMMARY"
  echo "== $name: rc=$rc in ${dt}s" | tee -a "$log"
  return $rc
}

phase_env() {
  local log=$OUT_DIR/env.txt
  {
    echo "date: $(date -u)"; echo "host: $(uname -a)"; echo "root: $ROOT"
    echo "git: $(git -C "$ROOT" log --oneline -1 2>/dev/null || echo 'no git')"
    echo "nproc: $(nproc)"; free -g 2>/dev/null | head -2
  } >"$log" 2>&1
  step env "$log" 60 "nvidia-smi; nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv; nvcc --version; which nvcc compute-sanitizer ncu; ls /usr/local/cuda/bin; gcc --version | head -1; cmake --version | head -1; ninja --version"
}

gpu_arch() {
  if [ -n "${NCCLZ_GPU_ARCH:-}" ]; then echo "$NCCLZ_GPU_ARCH"; return; fi
  local cc
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  [ -n "$cc" ] && echo "$cc" || echo 90
}

phase_build() {
  BUILD_TRIED=1
  local log=$OUT_DIR/build.log
  local prefix=""
  # GoogleTest: the system's if CMake finds it, else the carried sources (.gtest).
  if [ -f "$ROOT/.gtest/CMakeLists.txt" ] && { [ -n "${NCCLZ_FORCE_CARRIED_GTEST:-}" ] ||
      ! ls /usr/lib/*/cmake/GTest/GTestConfig.cmake /usr/lib/cmake/GTest/GTestConfig.cmake /usr/local/lib/cmake/GTest/GTestConfig.cmake >/dev/null 2>&1; }; then
    if [ ! -f /tmp/gtest-install/lib/cmake/GTest/GTestConfig.cmake ] && [ ! -f /tmp/gtest-install/lib64/cmake/GTest/GTestConfig.cmake ]; then
      step gtest "$log" 180 "cmake -S '$ROOT/.gtest' -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX=/tmp/gtest-install -DCMAKE_POSITION_INDEPENDENT_CODE=ON && cmake --build /tmp/gtest-build -j $JOBS && cmake --install /tmp/gtest-build"
    fi
    prefix="-DCMAKE_PREFIX_PATH=/tmp/gtest-install"
  fi
  local arch
  arch=$(gpu_arch)
  echo "CUDA arch: $arch" | tee -a "$log"
  # -Xptxas=-v: registers, shared memory, stack and spills of every kernel go to build.log.
  step configure "$log" 120 "cmake -S '$ROOT' -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCLZ_BUILD_TESTS=ON -DNCCLZ_CUDA=ON -DNCCLZ_BUILD_GPU_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=$arch -DCMAKE_CUDA_FLAGS=-Xptxas=-v $prefix" || return
  # -k 0: keep going, so that the benchmark still builds if a test file does not.
  step build "$log" 420 "cmake --build '$BUILD' -j $JOBS -- -k 0"
}

BUILD_TRIED=0
ensure_built() {  # builds once per invocation when a binary is missing
  if [ "$BUILD_TRIED" = 0 ] && { [ ! -x "$TESTBIN" ] || [ ! -x "$BENCHBIN" ]; }; then phase_build; fi
}

phase_test() {
  ensure_built
  local log=$OUT_DIR/test.log
  step test "$log" 300 "'$TESTBIN' --gtest_filter='CudaCodec.*' --gtest_color=no"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|Failure|first difference' "$log" | head -40 >>"$SUMMARY"
}

phase_alltests() {
  ensure_built
  step alltests "$OUT_DIR/test.log" 400 "cd '$BUILD' && ctest --output-on-failure -j 8"
}

phase_sanitize() {
  ensure_built
  local log=$OUT_DIR/sanitize.log
  # Every launch is slow under the sanitizers: the tests do less (NCCLZ_CUDA_TEST_QUICK).
  export NCCLZ_CUDA_TEST_QUICK=1
  step memcheck "$log" 240 "compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 '$TESTBIN' --gtest_filter='$SAN_FILTER' --gtest_color=no"
  step racecheck "$log" 150 "compute-sanitizer --tool racecheck --error-exitcode 3 '$TESTBIN' --gtest_filter='$INIT_FILTER:CudaCodec.BatchesMatchCpu' --gtest_color=no"
  step initcheck "$log" 100 "compute-sanitizer --tool initcheck --error-exitcode 3 '$TESTBIN' --gtest_filter='$INIT_FILTER' --gtest_color=no"
  unset NCCLZ_CUDA_TEST_QUICK
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Uninitialized|hazard|PASSED|FAILED' "$log" | sort | uniq -c | head -20 >>"$SUMMARY"
}

phase_bench() {
  ensure_built
  local log=$OUT_DIR/bench.log
  step bench "$log" 240 "'$BENCHBIN' --mib ${NCCLZ_BENCH_MIB:-256} --rel 1e-3 --reps 10 --json '$OUT_DIR/bench.json' --md '$OUT_DIR/bench.md'"
  [ -f "$OUT_DIR/bench.md" ] && cat "$OUT_DIR/bench.md" >>"$SUMMARY"
}

phase_profile() {
  ensure_built
  local log=$OUT_DIR/bench.log
  step profile "$log" 300 "ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed --csv --log-file '$OUT_DIR/profile.csv' '$BENCHBIN' --mib 64 --reps 1 --warm 0"
}

phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(all)
phase_env
for p in "${phases[@]}"; do
  case "$p" in
    all) phase_build; phase_test; phase_bench; phase_sanitize ;;
    env) ;;
    build) phase_build ;;
    test) phase_test ;;
    alltests) phase_alltests ;;
    sanitize) phase_sanitize ;;
    bench) phase_bench ;;
    profile) phase_profile ;;
    *) echo "unknown phase: $p" | tee -a "$SUMMARY" ;;
  esac
done
echo "total seconds: $(($(date +%s) - START))" >>"$SUMMARY"
echo
cat "$SUMMARY"
# Keep the logs within what the device tool returns (16 MiB a file).
for f in "$OUT_DIR"/*.log "$OUT_DIR"/*.txt; do
  [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 15000000 ] && tail -c 15000000 "$f" >"$f.tmp" && mv "$f.tmp" "$f"
done
exit 0
