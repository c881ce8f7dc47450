#!/usr/bin/env bash
# Builds main with patches applied (e.g. docs/notes/unmerged/*.patch) in a temporary worktree and
# copies its nsajit, nsajit_tests and libnsajit.so into OUT_DIR, for a device call's A/B
# (scripts/gpu_ab.sh takes build folders holding `nsajit`; scripts/gpu_verify.sh's Python tests
# load the library). Nothing in this checkout changes.
# Usage: scripts/build_variant.sh OUT_DIR [PATCH ...]   (no patch: main as it is)
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [PATCH ...]" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
patches=()
for p in "$@"; do patches+=("$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"); done
work=$(mktemp -d /tmp/nsajit-variant-XXXXXX)
trap 'git -C "$root" worktree remove --force "$work" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add --detach "$work" HEAD >/dev/null
for p in "${patches[@]}"; do git -C "$work" apply "$p"; done
cmake -S "$work" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT=/usr/local/cuda >/dev/null
cmake --build "$work/build" -j "${JOBS:-2}" --target nsajit_cli nsajit_tests nsajit_shared >/dev/null
cp "$work/build/nsajit" "$work/build/nsajit_tests" "$out/"
cp -L "$work/build/libnsajit.so" "$out/libnsajit.so"
echo "$out: main $(git -C "$root" rev-parse --short HEAD)${patches:+ + ${patches[*]##*/}}"
