#!/usr/bin/env bash
# A/B of builds of nsajit on a machine with an NVIDIA GPU (nothing is built here): the family's
# benchmark without the PyTorch baseline, run ROUNDS times interleaved (A, B, C, A, B, C, ...) so
# that clock and thermal drift fall on all, then one line per case: each build's median over the
# rounds and its change against A. The runs' JSON files and logs go to one tarball in $OUT
# (default ./out).
# Usage: scripts/gpu_ab.sh FAMILY BUILD_A BUILD_B [BUILD_C ...] [ROUNDS] [bench options, e.g. --only 4096x]
# (a build is a folder holding an `nsajit` binary).
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 topk|sparse-mla BUILD_A BUILD_B [BUILD_C ...] [ROUNDS] [bench options]" >&2
  exit 2
fi
family=$1
shift
builds=()
while [ $# -gt 0 ] && [ -x "$1/nsajit" ]; do builds+=("$1"); shift; done
if [ ${#builds[@]} -lt 2 ]; then
  echo "$0: need at least two build folders holding an nsajit binary" >&2
  exit 2
fi
rounds=2
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
out=${OUT:-out}
work=$(mktemp -d /tmp/nsajit-ab-XXXXXX)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
status=0
for r in $(seq 1 "$rounds"); do
  for i in "${!builds[@]}"; do
    build=${builds[$i]}
    # One cache per build: the builds' kernels may share names but not sources.
    NSAJIT_CACHE_DIR=$work/cache_$i "$build/nsajit" bench "$family" --no-baseline "$@" \
      --out "$work/${i}_$r.json" > "$work/${i}_$r.log" 2>&1 || { echo "${build} round $r failed (log in the tarball)"; status=1; }
  done
done
printf '%s\n' "${builds[@]}" > "$work/builds.txt"
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
builds = open(f"{work}/builds.txt").read().split()
def runs(i):
    cases = {}
    for r in range(1, rounds + 1):
        try:
            for c in json.load(open(f"{work}/{i}_{r}.json"))["cases"]:
                cases.setdefault(c["case"], []).append(c["nsajit_us"])
        except (OSError, ValueError):
            pass
    return cases
results = [runs(i) for i in range(len(builds))]
for i, b in enumerate(builds):
    print(f"{chr(65 + i)}: {b}")
print(f"{'case':40s}" + "".join(f" {chr(65 + i) + ' us':>9s}" for i in range(len(builds))) +
      "".join(f" {chr(65 + i) + ' vs A':>8s}" for i in range(1, len(builds))))
for name, ta in results[0].items():
    ms = [statistics.median(r[name]) if name in r else float("nan") for r in results]
    print(f"{name:40s}" + "".join(f" {m:9.1f}" for m in ms) +
          "".join(f" {100 * (m / ms[0] - 1):+7.1f}%" for m in ms[1:]))
PY
mkdir -p "$out"
tar czf "$out/ab.tgz" -C "$work" --exclude='cache_*' . && rm -rf "$work"
exit $status
