#!/usr/bin/env bash
# Runs every test of ncclz: the GoogleTest suite (plain and under
# AddressSanitizer) through ctest, the C library installed (its exported
# symbols checked: the public API only) and a C and a C++ program
# (examples/c, examples/cpp) built against it and run on 3 ranks, a build of
# the codec's micro-benchmarks,
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
echo "== The C library: installed, its exports checked, examples/c and examples/cpp built against it, 3 ranks =="
rm -rf build/install build/example-c build/example-cpp
cmake --install build/tests --prefix build/install >/dev/null
# libncclz.so exports the API of its headers only (cmake/ncclz.map): every ncclz.h function, and no
# symbol but the C API's and those of ncclz's public C++ namespaces (no std:: instantiation, no
# ncclz::core, transport, ... internal, no CUDA runtime).
lib=$(find build/install -name libncclz.so | head -n 1)
exports=$(nm -D --defined-only "$lib" | awk '{print $NF}')
demangled=$(c++filt <<<"$exports")
bad=$({
  grep -vE '^(ncclz[A-Z]|_ZNK?5ncclz|_ZT[ISV]N5ncclz)' <<<"$exports" | c++filt
  grep -E '^[^(]*ncclz::(algorithms|base|bootstrap|bound|core|env|log|net|prims|topology|trace|transport)::' <<<"$demangled"
} || true)
if [ -n "$bad" ]; then
  echo "FAILED: $lib exports internal symbols (add public ones to cmake/ncclz.map):"
  head -n 40 <<<"$bad"
  exit 1
fi
api=$(sed -n '/^static/d; s/^[A-Za-z_][A-Za-z0-9_ *]*[ *]\(ncclz[A-Za-z0-9_]*\)(.*/\1/p' build/install/include/ncclz/ncclz.h | sort -u)
missing=$(comm -23 <(echo "$api") <(echo "$exports" | sort -u))
if [ -z "$api" ] || [ -n "$missing" ]; then
  echo "FAILED: $lib does not export these ncclz.h functions: ${missing:-(none found in ncclz.h)}"
  exit 1
fi
# ... and the C++ API: creation, and the exceptions' type information (libstdc++ would match a catch by
# the type's name even without it; other runtimes compare the type_info objects themselves).
for sym in "ncclz::Communicator::create(ncclz::CommConfig const&)" "ncclz::CommConfig::from_env()" \
  "typeinfo for ncclz::Error" "typeinfo for ncclz::InvalidArgument" "typeinfo for ncclz::RemoteError" \
  "typeinfo for ncclz::Timeout" "typeinfo for ncclz::Aborted" "vtable for ncclz::InvalidArgument"; do
  grep -qxF "$sym" <<<"$demangled" || { echo "FAILED: $lib does not export $sym (cmake/ncclz.map)"; exit 1; }
done
echo "$lib: $(wc -l <<<"$exports") symbols exported, the $(wc -l <<<"$api") functions of ncclz.h among them"
cmake -S examples/c -B build/example-c "${gen[@]}" -DCMAKE_PREFIX_PATH="$PWD/build/install" \
  -DCMAKE_C_FLAGS="-std=c99 -Wall -Wextra -pedantic -Werror" >build/example-c.configure.log 2>&1 ||
  { cat build/example-c.configure.log; exit 1; }
cmake --build build/example-c
cmake -S examples/cpp -B build/example-cpp "${gen[@]}" -DCMAKE_PREFIX_PATH="$PWD/build/install" \
  -DCMAKE_CXX_FLAGS="-Wall -Wextra -pedantic -Werror" >build/example-cpp.configure.log 2>&1 ||
  { cat build/example-cpp.configure.log; exit 1; }
cmake --build build/example-cpp
run_3_ranks() {  # $1: the program
  local port pids=() r p
  port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  for r in 0 1 2; do
    RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NCCLZ_TIMEOUT=60 timeout 120 "$1" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}
run_3_ranks build/example-c/allreduce
run_3_ranks build/example-cpp/allreduce_cpp
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
