#!/usr/bin/env python3
"""PyTorch baselines for `nsajit bench <family>` (run by the bench as a subprocess, same inputs).

Usage: torch_baseline.py <family> <cases.json>
cases.json lists {"name", "params", "input"}; "input" is a folder of raw blobs the bench wrote.
Prints progress to stderr and, as the last line of stdout, {"<case name>": median microseconds}, or
{"<case name>": {"us": median microseconds, "params": {extra figures recorded with the case}}}.
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
        print(f"torch baseline {case['name']}: {out[case['name']]}", file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
    print(json.dumps(out))


# Family baselines are defined below this line (one function per family, @family("<name>")).


@family("topk")
def topk_baseline(case):
    """torch.topk(k, sorted=False) over [rows, width] fp32 or bf16 scores whose positions >= len were set to
    -inf by the bench (so the selection stays inside each row's length); fused cases add the
    page-table gather of a real page table: slot = page_table[r, idx // P] * P + idx % P."""
    p = case["params"]
    rows, width, k = p["rows"], p["width"], p["topk"]
    if p.get("score_dtype") == "bf16":
        scores = load(case["input"], "scores.bf16", torch.bfloat16, (rows, width))
    else:
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


def _pool(path, dtype, shape):
    """A pool (bf16 rows or FP8 tokens) from the bench's blobs, kept loaded; a third pool unloads the
    other two (an FP8 case uses two: its dequantized pool and its cache)."""
    if path not in _pools:
        if len(_pools) >= 2:
            _pools.clear()
        torch.cuda.empty_cache()
        folder, name = os.path.split(path)
        _pools[path] = load(folder, name, dtype, shape)
    return _pools[path]


def _dequant_tokens(tok):
    """656-byte FP8 tokens [..., 656] uint8 -> bf16 [..., 576] (nsa-semantics.md §4):
    bf16(float(e4m3) * scale[d / 128]) for the 512 latent dims, the 64 rope dims as stored."""
    lead = tok.shape[:-1]
    lat = tok[..., :512].view(torch.float8_e4m3fn).float().view(*lead, 4, 128)
    scale = tok[..., 512:528].view(torch.float32)
    lat = (lat * scale.unsqueeze(-1)).view(*lead, 512).to(torch.bfloat16)
    return torch.cat([lat, tok[..., 528:656].view(torch.bfloat16)], dim=-1)


@family("sparse_mla")
def sparse_mla_baseline(case):
    """ref_sparse_bf16 of shared/baselines/torch_baselines.py: gather the top-k KV rows, bf16 einsum
    for the scores, fp32 softmax (invalid -> -inf), bf16 einsum with V. FP8 cases run it on the
    dequantized bf16 pool (params.pool): torch pays no dequantisation, the stricter comparison, and
    the one the case's baseline_us reports. They also time, as params.torch_fp8_cache_us, the same
    reference reading the FP8 cache itself (params.fp8_cache): gather the 656-byte tokens, dequantize
    them in torch, then the same einsums (timed only if its output equals the pool version's bit for
    bit: params.torch_fp8_cache_check).
    q [rows, h_q, 576], indices [rows, topk]."""
    p = case["params"]
    rows, h, k, n = p["rows"], p["h_q"], p["topk"], p["num_slots"]
    q = load(case["input"], "q.bf16", torch.bfloat16, (rows, h, 576))
    idx = load(case["input"], "idx.i32", torch.int32, (rows, k))
    scale = 0.13524

    def attend(kg):
        s = torch.einsum("thd,tkd->thk", q, kg).float() * scale
        s = s.masked_fill((idx < 0)[:, None, :], float("-inf"))
        pr = torch.softmax(s, dim=-1).to(q.dtype)
        return torch.einsum("thk,tkd->thd", pr, kg[..., :512])

    kv = _pool(p["pool"], torch.bfloat16, (n, 576))

    def fn():
        return attend(kv[idx.clamp(min=0)])
    us = median_us(fn)  # the case's baseline_us, timed before the FP8-cache variant
    result = {}
    if "fp8_cache" in p:
        cache = _pool(p["fp8_cache"], torch.uint8, (n, 656))

        def fn_fp8():
            return attend(_dequant_tokens(cache[idx.clamp(min=0)]))
        try:  # its fp32 intermediates are several times the gathered rows: a side figure, never the run's end
            same = torch.equal(fn_fp8(), fn())
            result["torch_fp8_cache_check"] = "equal" if same else "differs from the dequantized-pool reference"
            result["torch_fp8_cache_us"] = median_us(fn_fp8) if same else None
        except torch.cuda.OutOfMemoryError:
            result["torch_fp8_cache_check"] = "not measured: out of GPU memory"
            result["torch_fp8_cache_us"] = None
    del q, idx
    return {"us": us, "params": result} if result else us


if __name__ == "__main__":
    main()
