#!/usr/bin/env bash
# Full verification on a machine with an NVIDIA GPU, from a build folder made elsewhere (nothing is
# built here): every test, both benchmarks against the PyTorch baseline (results JSON),
# compute-sanitizer memcheck of sparse-MLA decode and prefill shapes and of attn_sink, racecheck (2-CTA clusters)
# and synccheck (2-, 8- and 16-CTA clusters) of top-k, memcheck of its dense rows, memcheck and
# racecheck of its speculative path, and `nsajit run`.
# Results (topk.json, sparse_mla.json), gpu.txt and logs.tgz (every step's log) go to $OUT
# (default ./out): few files, because the device tool returns at most eight files from $OUT.
# Usage: NSAJIT_COMMIT=<sha> scripts/gpu_verify.sh [build-dir]
set -uo pipefail
build=${1:-build}
out=${OUT:-out}
logs="$out/logs"
mkdir -p "$logs"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NSAJIT_CACHE_DIR=$(mktemp -d /tmp/nsajit-verify-cache-XXXXXX)
trap 'rm -rf "$NSAJIT_CACHE_DIR"' EXIT
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
status=0
step() {  # step NAME SECONDS COMMAND... : runs with a time limit, logs to $logs/NAME.log
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc ($((SECONDS - start)) s)"
  [ "$rc" -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
step tests 330 "$build/nsajit_tests" --duration=true
grep -E "test cases|assertions" "$logs/tests.log"
step bench_topk 300 "$build/nsajit" bench topk --out "$out/topk.json"
step bench_sparse_mla 360 "$build/nsajit" bench sparse-mla --out "$out/sparse_mla.json"
for shape in "decode h128 b8 n1 bf16" "decode h64 b8 n2 fp8" "prefill h64 sq4096 skv262144 bf16"; do
  step "memcheck_${shape// /_}" 90 "$sanitizer" --tool memcheck --error-exitcode 9 \
    "$build/nsajit" bench sparse-mla --only "$shape" --iters 1 --no-baseline --out /tmp/nsajit-memcheck.json
  grep -E "ERROR SUMMARY" "$logs/memcheck_${shape// /_}.log"
done
# racecheck of a 16-CTA cluster took over 50 s on the H200 (did not finish): 2-CTA clusters only.
# The 8- and 16-CTA rows take the cluster lists, whose bulk copies memcheck reports (and aborts)
# although they are correct (docs/notes/topk.md): synccheck only there.
for check in "racecheck 64x65536" "synccheck 64x65536" "synccheck 1x131072" "synccheck 8x131072"; do
  set -- $check
  step "${1}_topk_$2" 90 "$sanitizer" --tool "$1" --error-exitcode 9 \
    "$build/nsajit" bench topk --only "$2" --iters 1 --no-baseline --out /tmp/nsajit-sanitizer.json
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logs/${1}_topk_$2.log"
done
# Dense rows (keys in registers), plain and fused (the transform's predicated table reads).
step memcheck_topk_4096x4097 120 "$sanitizer" --tool memcheck --error-exitcode 9 \
  "$build/nsajit" bench topk --only 4096x4097 --iters 1 --no-baseline --out /tmp/nsajit-sanitizer.json
grep -E "ERROR SUMMARY" "$logs/memcheck_topk_4096x4097.log"
# The speculative single sweep (one CTA per row of long slices) and its fallbacks.
step memcheck_topk_128x131072 90 "$sanitizer" --tool memcheck --error-exitcode 9 \
  "$build/nsajit" bench topk --only 128x131072 --iters 1 --no-baseline --out /tmp/nsajit-sanitizer.json
grep -E "ERROR SUMMARY" "$logs/memcheck_topk_128x131072.log"
step racecheck_topk_speculative 120 "$sanitizer" --tool racecheck --error-exitcode 9 \
  "$build/nsajit_tests" -tc="topk gpu: the speculative*"
grep -E "RACECHECK SUMMARY" "$logs/racecheck_topk_speculative.log"
# attn_sink in both kernels' epilogues and the split combine.
step memcheck_attn_sink 180 "$sanitizer" --tool memcheck --error-exitcode 9 \
  "$build/nsajit_tests" -tc="sparse_mla gpu: attn_sink*"
grep -E "ERROR SUMMARY" "$logs/memcheck_attn_sink.log"
step run 60 "$build/nsajit" run
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$logs"
echo "gpu_verify: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
