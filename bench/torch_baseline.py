#!/usr/bin/env python3
"""PyTorch baselines for `nsajit bench <family>` (run by the bench as a subprocess, same inputs).

Usage: torch_baseline.py <family> <cases.json>
cases.json lists {"name", "params", "input"}; "input" is a folder of raw blobs the bench wrote.
Prints progress to stderr and, as the last line of stdout, {"<case name>": median microseconds}.
Timing: CUDA events, warm-up, 50 timed runs, the L2 flushed (256 MB written) before each, median.
"""
import json
import os
import sys

import torch

FAMILIES = {}


def family(name):
    def register(fn):
        FAMILIES[name] = fn
        return fn
    return register


_flush = None


def median_us(fn, warmup=5, iters=50):
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        _flush.fill_(i & 0xFF)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    times.sort()
    return times[len(times) // 2]


def load(folder, name, dtype, shape):
    """A raw little-endian blob written by the bench, as a CUDA tensor."""
    data = torch.from_file(os.path.join(folder, name), shared=False, size=int(torch.Size(shape).numel()), dtype=dtype)
    return data.reshape(shape).cuda()


def main():
    fam, cases_path = sys.argv[1], sys.argv[2]
    if fam not in FAMILIES:
        print(f"torch_baseline.py: no baseline for family {fam}", file=sys.stderr)
        sys.exit(2)
    cases = json.load(open(cases_path))
    out = {}
    for case in cases:
        out[case["name"]] = FAMILIES[fam](case)
        print(f"torch baseline {case['name']}: {out[case['name']]:.1f} us", file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
    print(json.dumps(out))


# Family baselines are defined below this line (one function per family, @family("<name>")).


if __name__ == "__main__":
    main()
