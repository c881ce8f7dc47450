"""SGLang's NSA helpers (srt/layers/attention/nsa/: transform_index.py, quant_k_cache.py,
dequant_k_cache.py) on nsajit, with their signatures.

Differences, all documented: a positive top-k position past the page-table row gives -1 (SGLang's
torch gather would raise); page_size > 1 reads a real page table (SGLang asserts page_size == 1);
quantize_k_cache floors the scale at FLT_MIN so an all-zero tile stores zeros (SGLang: 0 / 0).
Integer page tables / slot lists of another dtype are converted to int32 (a copy), saturating
rather than wrapping (no host sync to check them): a position past int32 then gives -1 like any
position past the row, a slot past int32 becomes 2^31 - 1, which no cache holds; topk widths that
are not a multiple of 64 are padded with -1 columns (a copy) and cut back.
"""
from .. import fp8_kv_gather as _gather, fp8_kv_quantize as _quantize, index_transform as _transform
from .._tensors import tensor as _tensor, torch as _torch

__all__ = ["transform_index_page_table_decode", "transform_index_page_table_prefill", "quantize_k_cache",
           "dequantize_k_cache_paged"]


def _int32_tensor(x, name):
    t = _torch()
    _tensor(x, name, (t.int32, t.int64, t.int16, t.uint8, t.int8))
    if x.dtype == t.int32:
        return x
    if x.dtype == t.int64:  # 2^32 + 5 would wrap to slot or position 5
        x = x.clamp(-(1 << 31), (1 << 31) - 1)
    return x.to(t.int32)


def _padded(topk_indices):
    """(indices with a multiple-of-64 width, original width): extra columns are -1."""
    t = _torch()
    k = topk_indices.shape[1]
    width = max(64, (k + 63) // 64 * 64)
    if width == k:
        return topk_indices.contiguous(), k
    padded = t.full((topk_indices.shape[0], width), -1, dtype=t.int32, device=topk_indices.device)
    padded[:, :k] = topk_indices
    return padded, k


def _finish(out, k, result):
    out = out[:, :k]
    if result is None:
        return out if out.is_contiguous() else out.contiguous()
    result.copy_(out)
    return result


def _check_result(result, rows, k, device):
    if result is not None:
        t = _torch()
        _tensor(result, "result", t.int32, shape=(rows, k), device=device)


def transform_index_page_table_decode(page_table, topk_indices, result=None, page_size=1):
    """page_table [rows, max_seqlen_k], topk_indices [rows, topk] -> int32 [rows, topk]:
    page_table[r, topk_indices[r, j]], or -1 where topk_indices < 0."""
    topk_indices = _int32_tensor(topk_indices, "topk_indices")
    page_table = _int32_tensor(page_table, "page_table")
    if topk_indices.dim() != 2:
        raise ValueError(f"nsajit: argument topk_indices has shape {list(topk_indices.shape)}: expected [rows, topk]")
    if page_table.dim() != 2 or page_table.shape[0] != topk_indices.shape[0]:
        raise ValueError(f"nsajit: argument page_table has shape {list(page_table.shape)}: expected "
                         f"[{topk_indices.shape[0]}, max_seqlen_k] (one row per query row)")
    _check_result(result, *topk_indices.shape, topk_indices.device)
    idx, k = _padded(topk_indices)
    out = _transform(idx, transform="decode", page_table=page_table, page_size=page_size)
    return _finish(out, k, result)


def transform_index_page_table_prefill(page_table, topk_indices, extend_lens_cpu, page_size=1):
    """page_table [batch, max_seqlen_k], topk_indices [sum(extend_lens_cpu), topk], extend_lens_cpu
    a list of per-request query counts -> int32 [sum, topk] through each row's request row."""
    t = _torch()
    topk_indices = _int32_tensor(topk_indices, "topk_indices")
    page_table = _int32_tensor(page_table, "page_table")
    lens = [int(x) for x in extend_lens_cpu]
    if len(lens) != page_table.shape[0] or sum(lens) != topk_indices.shape[0] or min(lens, default=0) < 0:
        raise ValueError(f"nsajit: argument extend_lens_cpu = {lens}: expected {page_table.shape[0]} non-negative "
                         f"counts (page_table rows) summing to {topk_indices.shape[0]} (topk_indices rows)")
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    cu_seqlens_q = t.tensor(cu, dtype=t.int32).to(topk_indices.device, non_blocking=True)
    idx, k = _padded(topk_indices)
    out = _transform(idx, transform="prefill", page_table=page_table, page_size=page_size, cu_seqlens_q=cu_seqlens_q)
    return _finish(out, k, None)


def quantize_k_cache(cache_k):
    """bf16 [num_blocks, block_size, 1, 576] -> the FP8 cache float8_e4m3fn
    [num_blocks, block_size, 1, 656] (per token: 512 e4m3, 4 fp32 scales amax / 448, 64 bf16 rope)."""
    t = _torch()
    _tensor(cache_k, "cache_k", t.bfloat16, ndim=4)
    num_blocks, block_size, h_k, d = cache_k.shape
    if h_k != 1:
        raise NotImplementedError(f"nsajit: cache_k has h_k = {h_k}: only 1 is supported")
    if d != 576:
        raise NotImplementedError(f"nsajit: cache_k has d = {d}: only 576 (512 latent + 64 rope) is supported")
    rows = cache_k.reshape(-1, 576)  # a copy only when the layout cannot be viewed so
    if rows.stride(-1) != 1 or (rows.shape[0] > 1 and rows.stride(0) < 576):  # nsajit reads rows >= 576 apart
        rows = rows.contiguous()
    n = rows.shape[0]
    out = t.empty((num_blocks, block_size, 1, 656), dtype=t.uint8, device=cache_k.device)
    slots = t.arange(n, dtype=t.int32, device=cache_k.device)
    _quantize(rows, slots, out.view(n, 1, 656), scale_fmt="fp32")
    return out.view(t.float8_e4m3fn)


def dequantize_k_cache_paged(quant_k_cache, page_table_1_flattened, group_size=128):
    """quant_k_cache [..., 656] (the FP8 cache, viewed as [-1, 656] token rows), page_table_1_flattened
    [num_tokens] slots -> bf16 [num_tokens, 1, 576]."""
    t = _torch()
    if group_size != 128:
        raise NotImplementedError(f"nsajit: group_size = {group_size}: only 128 is supported")
    _tensor(quant_k_cache, "quant_k_cache", (t.uint8, t.int8, t.float8_e4m3fn))
    if quant_k_cache.shape[-1] != 656:
        raise ValueError(f"nsajit: argument quant_k_cache has shape {list(quant_k_cache.shape)}: expected [..., 656]")
    tokens = quant_k_cache.view(-1, 1, 656)  # as SGLang: a view, so the cache must be contiguous
    slots = _int32_tensor(page_table_1_flattened, "page_table_1_flattened")
    if slots.dim() != 1:
        raise ValueError(f"nsajit: argument page_table_1_flattened has shape {list(slots.shape)}: expected [num_tokens]")
    out = _gather(tokens, slots.contiguous())
    return out.view(-1, 1, 576)
