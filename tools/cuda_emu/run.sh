#!/usr/bin/env bash
# Builds the device codec's kernels (cuda/*.cu) for the CPU emulator
# (tools/cuda_emu/include/cuda_emu.hpp) with the CudaCodec GoogleTests, and
# runs them: the kernels' logic executes without a GPU. Slow (every CUDA
# thread is a coroutine); not a substitute for tools/gpu_session.sh.
# Usage: bash tools/cuda_emu/run.sh [gtest filter | bench]   (from the repo root)
#   bench: runs bench/gpu_codec_bench.cu on 1 MiB (its checks; timings are meaningless)
# Env: EMU_SANITIZE=address adds AddressSanitizer (out-of-bounds accesses of
# "device" memory become host errors).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/emu${EMU_SANITIZE:+-$EMU_SANITIZE}  # objects of a sanitized build kept apart
mkdir -p "$B/src"
for f in cuda/*.cu; do
  python3 tools/cuda_emu/rewrite.py "$f" >"$B/src/$(basename "$f" .cu).cpp"
done
flags=(-std=c++17 -O1 -g -Wno-unused-function -Wno-subobject-linkage -DNCCLZ_WITH_CUDA=1 -Itools/cuda_emu/include -Icuda -Icpp/include -Icpp/src)
[ -n "${EMU_SANITIZE:-}" ] && flags+=(-fsanitize="$EMU_SANITIZE" -fno-omit-frame-pointer)
srcs=("$B"/src/*.cpp tests/cpp/test_cuda_codec.cpp)
for f in block_coder float_coder predictor quantizer rans_coder slice sparse_coder; do srcs+=("cpp/src/codec/$f.cpp"); done
objs=()
for s in "${srcs[@]}"; do
  o="$B/obj/$(echo "$s" | tr '/' '_').o"
  mkdir -p "$B/obj"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ tools/cuda_emu/include/cuda_emu.hpp -nt "$o" ]; then
    g++ "${flags[@]}" -c "$s" -o "$o" &
  fi
  objs+=("$o")
done
wait
g++ "${flags[@]}" "${objs[@]}" -lgtest -lgtest_main -pthread -o "$B/emu_tests"
# The benchmark too (its round-trip checks run; its timings mean nothing here).
python3 tools/cuda_emu/rewrite.py bench/gpu_codec_bench.cu >"$B/src_bench.cpp"
g++ "${flags[@]}" "$B/src_bench.cpp" $(printf '%s\n' "${objs[@]}" | grep -E 'src_(slice|quantize|block|codec)_kernels') \
  -o "$B/emu_bench"
if [ "${1:-}" = "bench" ]; then
  "$B/emu_bench" --mib 1 --slice 65536 --reps 1 --warm 0 --json "$B/bench.json" --md "$B/bench.md"
  exit
fi
NCCLZ_CUDA_TEST_QUICK=${NCCLZ_CUDA_TEST_QUICK-1} "$B/emu_tests" --gtest_filter="${1:-CudaCodec.*}"
