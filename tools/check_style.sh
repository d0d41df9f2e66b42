#!/usr/bin/env bash
# Style checks: ruff (Python, the rules in pyproject.toml) and clang-format
# (C++/CUDA, .clang-format) on the project's files.
# Usage: bash tools/check_style.sh          every tracked file
#        bash tools/check_style.sh REF      only files changed since git REF (e.g. main)
# Needs ruff and clang-format (pip install ruff clang-format). Exits non-zero
# on the first tool that finds something, after printing what it found.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  files=$(git diff --name-only --diff-filter=d "$1" -- .)
else
  files=$(git ls-files)
fi
py=$(printf '%s\n' $files | grep -E '\.py$' || true)
cxx=$(printf '%s\n' $files | grep -E '\.(c|cpp|hpp|h|cu|cuh)$' | grep -v '^third_party/' || true)
status=0
if [ -n "$py" ]; then
  echo "== ruff check ($(echo "$py" | wc -l) files)"
  # shellcheck disable=SC2086
  ruff check --quiet $py || status=1
fi
if [ -n "$cxx" ]; then
  echo "== clang-format ($(echo "$cxx" | wc -l) files)"
  # shellcheck disable=SC2086
  clang-format --dry-run -Werror $cxx || status=1
fi
[ $status -eq 0 ] && echo "style: clean"
exit $status
