#!/usr/bin/env bash
# A/B of two builds of nsajit on a machine with an NVIDIA GPU (nothing is built here): the family's
# benchmark without the PyTorch baseline, run ROUNDS times interleaved (A, B, A, B, ...) so that
# clock and thermal drift fall on both, then one line per case: A's and B's median over the rounds
# and B's change. The runs' JSON files and logs go to one tarball in $OUT (default ./out).
# Usage: scripts/gpu_ab.sh FAMILY BUILD_A BUILD_B [ROUNDS] [bench options, e.g. --only 4096x]
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 topk|sparse-mla BUILD_A BUILD_B [ROUNDS] [bench options]" >&2
  exit 2
fi
family=$1 a=$2 b=$3
shift 3
rounds=2
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
out=${OUT:-out}
work=$(mktemp -d /tmp/nsajit-ab-XXXXXX)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
status=0
for r in $(seq 1 "$rounds"); do
  for side in a b; do
    build=$a
    [ $side = b ] && build=$b
    # One cache per side: the two builds' kernels may share names but not sources.
    NSAJIT_CACHE_DIR=$work/cache_$side "$build/nsajit" bench "$family" --no-baseline "$@" \
      --out "$work/${side}_$r.json" > "$work/${side}_$r.log" 2>&1 || { echo "$side round $r failed (log in the tarball)"; status=1; }
  done
done
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def runs(side):
    cases = {}
    for r in range(1, rounds + 1):
        try:
            for c in json.load(open(f"{work}/{side}_{r}.json"))["cases"]:
                cases.setdefault(c["case"], []).append(c["nsajit_us"])
        except (OSError, ValueError):
            pass
    return cases
a, b = runs("a"), runs("b")
print(f"{'case':40s} {'A us':>9s} {'B us':>9s} {'B vs A':>8s}")
for name, ta in a.items():
    if name in b:
        ma, mb = statistics.median(ta), statistics.median(b[name])
        print(f"{name:40s} {ma:9.1f} {mb:9.1f} {100 * (mb / ma - 1):+7.1f}%")
PY
mkdir -p "$out"
tar czf "$out/ab.tgz" -C "$work" --exclude='cache_*' . && rm -rf "$work"
exit $status
