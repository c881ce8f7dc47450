#!/usr/bin/env python3
"""One DeepSeek-V3.2 decode step of DSA from Python with torch tensors (nsajit's Python package):
store new tokens into the FP8 KV cache, pick each request's top-k tokens straight into cache slots
(fused top-k + page-table transform), then sparse MLA decode with split-KV; then the same step
through the SGLang / FlashMLA drop-ins. Needs torch with CUDA and a GPU.

  pip install ./python && python3 examples/python_decode_step.py
"""
import torch

import nsajit
from nsajit.compat.flash_mla import flash_mla_with_kvcache, get_mla_metadata
from nsajit.compat.sgl_kernel import fast_topk_transform_fused

b, h_q, topk, page, max_len = 4, 16, 2048, 64, 8192
pages_per_req = max_len // page
dev = "cuda"
torch.manual_seed(0)

# The paged FP8 cache (656 bytes per token) and each request's page table (page ids).
cache = torch.zeros(b * pages_per_req, page, 656, dtype=torch.uint8, device=dev)
page_table = torch.arange(b * pages_per_req, dtype=torch.int32, device=dev).view(b, pages_per_req)
kv = (torch.randn(b * max_len, 576, device=dev) * 0.1).to(torch.bfloat16)
nsajit.fp8_kv_quantize(kv, torch.arange(b * max_len, dtype=torch.int32, device=dev), cache)

scores = torch.randn(b, max_len, device=dev)  # the indexer's logits
seq_lens = torch.randint(3000, max_len, (b,), dtype=torch.int32, device=dev)
q = torch.randn(b, h_q, 576, device=dev).to(torch.bfloat16)

# The native API: keyword arguments, the current torch stream.
slots = nsajit.topk(scores, seq_lens, topk, transform="decode", page_table=page_table, page_size=page)
out, lse = nsajit.sparse_mla(q, cache, slots, sm_scale=576 ** -0.5, num_splits=0)  # 0: automatic split-KV
print("nsajit:", tuple(out.shape), "lse finite:", bool(torch.isfinite(lse).all()))

# The drop-ins, as SGLang calls them (page_table_1 = slot per position; FlashMLA's cache view).
page_table_1 = (page_table[:, :, None] * page + torch.arange(page, device=dev)).view(b, -1).int()
cu_seqlens_q = torch.arange(b + 1, dtype=torch.int32, device=dev)
slots_1 = fast_topk_transform_fused(scores, seq_lens, page_table_1, cu_seqlens_q, topk)
meta, num_splits = get_mla_metadata()
out2, lse2 = flash_mla_with_kvcache(q.view(b, 1, h_q, 576), cache.view(-1, page, 1, 656), None, None, 512, meta,
                                    num_splits, 576 ** -0.5, is_fp8_kvcache=True, indices=slots_1.view(b, 1, topk))
same_sets = all(torch.equal(slots[r].sort().values, slots_1[r].sort().values) for r in range(b))
print("drop-ins: same slots:", same_sets, "max |out diff|:", (out2.view(b, h_q, 512).float() - out.float()).abs().max().item())
for r in nsajit.jit_records():
    print(f"  {r.name}: {r.source}, {r.compile_ms:.0f} ms NVRTC")
