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


@family("topk")
def topk_baseline(case):
    """torch.topk(k, sorted=False) over [rows, width] fp32 scores whose positions >= len were set to
    -inf by the bench (so the selection stays inside each row's length); fused cases add the
    page-table gather of a real page table: slot = page_table[r, idx // P] * P + idx % P."""
    p = case["params"]
    rows, width, k = p["rows"], p["width"], p["topk"]
    scores = load(case["input"], "scores.f32", torch.float32, (rows, width))
    if p.get("fused"):
        ps, pages = p["page_size"], p["pages"]
        table = load(case["input"], "page_table.i32", torch.int32, (rows, pages))

        def fn():
            idx = torch.topk(scores, k, dim=-1, sorted=False).indices
            return torch.gather(table, 1, idx // ps) * ps + idx % ps
    else:
        def fn():
            return torch.topk(scores, k, dim=-1, sorted=False)
    us = median_us(fn)
    del scores
    return us


_pools = {}


@family("sparse_mla")
def sparse_mla_baseline(case):
    """ref_sparse_bf16 of shared/baselines/torch_baselines.py: gather the top-k KV rows, bf16 einsum
    for the scores, fp32 softmax (invalid -> -inf), bf16 einsum with V. FP8 cases run on the
    dequantized bf16 pool (params.pool). q [rows, h_q, 576], indices [rows, topk]."""
    p = case["params"]
    rows, h, k, n = p["rows"], p["h_q"], p["topk"], p["num_slots"]
    if p["pool"] not in _pools:
        _pools.clear()
        torch.cuda.empty_cache()
        folder, name = os.path.split(p["pool"])
        _pools[p["pool"]] = load(folder, name, torch.bfloat16, (n, 576))
    kv = _pools[p["pool"]]
    q = load(case["input"], "q.bf16", torch.bfloat16, (rows, h, 576))
    idx = load(case["input"], "idx.i32", torch.int32, (rows, k))
    scale = 0.13524

    def fn():
        kg = kv[idx.clamp(min=0)]
        s = torch.einsum("thd,tkd->thk", q, kg).float() * scale
        s = s.masked_fill((idx < 0)[:, None, :], float("-inf"))
        pr = torch.softmax(s, dim=-1).to(q.dtype)
        return torch.einsum("thk,tkd->thd", pr, kg[..., :512])
    us = median_us(fn)
    del q, idx
    return us


if __name__ == "__main__":
    main()
