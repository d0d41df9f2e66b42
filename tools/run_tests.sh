#!/usr/bin/env bash
# Runs every test of ncclz: the GoogleTest suite (plain and under
# AddressSanitizer) through ctest, the C library installed and a C program
# (examples/c) built against it and run on 3 ranks, a build of the codec's
# micro-benchmarks,
# the device kernels' tests in the CPU emulator (tools/cuda_emu: no GPU
# needed), then the pytest suite against the installed package, after the
# style checks (tools/check_style.sh, when ruff and clang-format are
# installed). Usage: bash tools/run_tests.sh   (from the repo root)
# Environment: NCCLZ_TEST_ASAN=0 skips the AddressSanitizer build;
#              NCCLZ_TEST_JOBS sets the build parallelism (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${NCCLZ_TEST_JOBS:-$(nproc)}"
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)

run_ctest() {  # $1: build dir, rest: extra cmake args
  local dir="$1"; shift
  cmake -S . -B "$dir" "${gen[@]}" -DNCCLZ_BUILD_TESTS=ON "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
}

mkdir -p build
echo "== Style (ruff, clang-format: tools/check_style.sh) =="
if command -v ruff >/dev/null 2>&1 && command -v clang-format >/dev/null 2>&1; then
  bash tools/check_style.sh
else
  echo "SKIPPED: ruff or clang-format is missing (pip install ruff==0.17.6 clang-format==23.1.5; CI installs them)"
fi
echo "== GoogleTest (release, CUDA code built when nvcc is present) =="
run_ctest build/tests
echo "== The C library: installed, examples/c built against it with find_package(ncclz), 3 ranks =="
rm -rf build/install build/example-c
cmake --install build/tests --prefix build/install >/dev/null
cmake -S examples/c -B build/example-c "${gen[@]}" -DCMAKE_PREFIX_PATH="$PWD/build/install" \
  -DCMAKE_C_FLAGS="-std=c99 -Wall -Wextra -pedantic -Werror" >build/example-c.configure.log 2>&1 ||
  { cat build/example-c.configure.log; exit 1; }
cmake --build build/example-c
port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
pids=()
for r in 0 1 2; do
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NCCLZ_TIMEOUT=60 timeout 120 build/example-c/allreduce &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "== Codec micro-benchmarks build (bench/cpp; run by hand, bench/README.md) =="
# Built, not run: they read their data from bench/data and time on one core. Building them here keeps
# their own source lists (bench/cpp/CMakeLists.txt) in step with the codec's files.
cmake -S bench/cpp -B build/bench "${gen[@]}" >build/bench.configure.log 2>&1 || { cat build/bench.configure.log; exit 1; }
cmake --build build/bench -j "$jobs" --target block_bench rans_bench sparse_bench float_huff_bench crc32c_bench
echo "== Device kernels in the CPU emulator (tools/cuda_emu: CudaCodec tests, quick) =="
if command -v python3 >/dev/null 2>&1; then
  NCCLZ_TEST_JOBS="$jobs" bash tools/cuda_emu/run.sh ci
else
  echo "SKIPPED: python3 is missing (tools/cuda_emu/rewrite.py turns the kernels' launches into host calls)"
fi
if [ "${NCCLZ_TEST_ASAN:-1}" != "0" ]; then
  echo "== GoogleTest under AddressSanitizer =="
  ASAN_OPTIONS=detect_leaks=1 run_ctest build/tests-asan -DNCCLZ_SANITIZE=address -DNCCLZ_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
echo "== pytest =="
cd tests/python && python -m pytest -q -p no:cacheprovider .
