#!/usr/bin/env python3
"""Fills a kernel cache with the kernels of the embedding GPU tests (tests/test_capi_gpu.cpp,
python/tests/test_gpu.py) for sm_90a, with no GPU needed, so a GPU run spends no time in NVRTC:
  NSAJIT_CACHE_DIR=build/gpu_cache PYTHONPATH=python python3 scripts/precompile_embed_tests.py
Top-k kernels are the 1024-thread tile the launch plan picks for up to one CTA per SM."""
import sys
import time

import nsajit

A = "sm_90a"
specs = [dict(family="sparse_mla_decode", h_q=h, topk=k, kv_dtype=kv)
         for h, k, kv in ((16, 512, "fp8"), (64, 512, "fp8"), (64, 512, "bf16"), (16, 2048, "bf16"))]
specs += [dict(family="sparse_mla_combine")]
specs += [dict(family=f, page_size=p) for f in ("fp8_kv_quantize", "fp8_kv_gather") for p in (1, 64)]
specs += [dict(family="topk", topk=2048, threads=1024),
          dict(family="topk", topk=2048, threads=1024, fused_transform=True, mode="decode", page_size=1),
          dict(family="topk", topk=2048, threads=1024, fused_transform=True, mode="prefill", page_size=1),
          dict(family="topk", topk=2048, threads=1024, fused_transform=True, mode="ragged"),
          dict(family="topk", topk=512, threads=1024),
          dict(family="topk", topk=512, threads=1024, sorted=True),
          dict(family="topk", topk=512, threads=1024, fused_transform=True, mode="decode", page_size=64)]
specs += [dict(family="index_transform", topk=2048, mode="decode", page_size=1),
          dict(family="index_transform", topk=2048, mode="prefill", page_size=1),
          dict(family="index_transform", topk=512, mode="decode", page_size=64),
          dict(family="index_transform", topk=128, mode="decode", page_size=1),
          dict(family="index_transform", topk=128, mode="prefill", page_size=1)]
only = sys.argv[1] if len(sys.argv) > 1 else None
for s in specs:
    if only and only not in s["family"]:
        continue
    start = time.time()
    r = nsajit.precompile(**s, arch=A)
    print(f"{r.name}: {r.source} {time.time() - start:.1f} s", flush=True)
