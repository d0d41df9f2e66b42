#!/usr/bin/env bash
# Reproduces bench/results/netlab.md and bench/results/netlab_*.png (network-lab evaluation).
#
#   sudo bash bench/run_all.sh                 # every phase, ~25-35 min on a 2-core VM
#   sudo bash bench/run_all.sh --quick         # 16 MiB messages, 3 rates (smoke test, ~5 min)
#   sudo bash bench/run_all.sh --phases main   # one phase (main, bf16, colls, rates, sizes)
#
# Needs root (network namespaces, veth, bridge, tc tbf), the installed ncclz package, torch (gloo),
# pysz, matplotlib; for the MPI baseline openmpi-bin + libopenmpi-dev and mpi4py.
# Without root: bench/netlab/netlab.py explains the root-less emulation (NCCLZ_SOCKET_THROTTLE_GBPS).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  python3 bench/netlab/netlab.py up   # prints the no-root message and exits non-zero
  exit 1
fi
python3 bench/netlab/netlab.py --cleanup            # leftovers of an interrupted run
trap 'python3 bench/netlab/netlab.py --cleanup >/dev/null' EXIT
rm -f bench/results/netlab_raw/*.json
nice -n 10 python3 bench/netlab/suite.py "$@"
python3 bench/netlab/report.py
if ip netns list | grep -q '^nczl-'; then echo "run_all: namespaces left behind" >&2; exit 1; fi
echo "run_all: wrote bench/results/netlab.md"
