#!/usr/bin/env bash
# GPU check on a machine with an NVIDIA GPU, from a build folder made elsewhere (nothing is built
# here): every test (GPU tests included), then `nsajit run` twice on a fresh cache (the second run
# must be all disk-cache hits), then the h_q = 16 config. Logs go to $OUT (default ./out).
# Usage: scripts/gpu_check.sh [build-dir]
set -uo pipefail
build=${1:-build}
out=${OUT:-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# Tests and the runs get separate fresh caches, so run1 shows compiles and run2 disk-cache hits.
test_cache=$(mktemp -d /tmp/nsajit-test-cache-XXXXXX)
export NSAJIT_CACHE_DIR=$(mktemp -d /tmp/nsajit-run-cache-XXXXXX)
status=0
step() {  # step NAME COMMAND... : runs, logs to $out/NAME.log, remembers failure
  local name=$1; shift
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc"
  [ "$rc" -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
NSAJIT_CACHE_DIR=$test_cache step tests "$build/nsajit_tests" --duration=true
step run1 "$build/nsajit" run
step run2 "$build/nsajit" run
step run_tp8 "$build/nsajit" run --tp 8
echo "gpu_check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
