"""FlashMLA's sparse entry points (flash_mla/flash_mla_interface.py) on nsajit:
flash_mla_sparse_fwd (prefill, bf16 KV) and the sparse path of get_mla_metadata +
flash_mla_with_kvcache (decode over the FP8 656-byte cache, or bf16).

Same signatures, defaults, return values, dtypes and shapes, for d_qk 576 (DeepSeek-V3.2) with
one KV head; lse is the natural log; a row with no valid index gives out 0, lse +inf. Beyond
FlashMLA: h_q 8, 16, 32 as well as 64, 128; any index < 0 or >= the slot count is skipped
(FlashMLA decode skips only -1); topk_length works on the decode path too. Not supported (raise
NotImplementedError naming the argument): d_qk other than 576, d_v / head_dim_v other than 512,
h_kv > 1, causal=True, dense decode (indices=None), extra_k_cache / extra_indices_in_kvcache /
extra_topk_length. Non-contiguous q / indices / topk_length are copied to contiguous tensors; the KV
cache is read in place with its own strides (FlashMLA's padded page stride included) when its rows
are 16-byte aligned, else copied. attn_sink (fp32 [h_q], natural log) is applied in the kernel's
epilogue as FlashMLA defines it: out * 1 / (1 + exp(attn_sink - lse)), lse unchanged; a row with
no valid index keeps out 0.

get_mla_metadata: called with no arguments (FlashMLA HEAD) it returns (FlashMLASchedMeta(), None);
called with the first release's arguments it returns (tile_scheduler_metadata int32
[num_sm_parts, 8], num_splits int32 [b + 1]) tensors that only mark the call as split-KV. With
metadata, flash_mla_with_kvcache uses nsajit's automatic split-KV (not batch-invariant, like
FlashMLA); tile_scheduler_metadata=None gives one CTA per row (batch-invariant).
"""
from .. import sparse_mla as _sparse_mla
from .._tensors import tensor as _tensor, torch as _torch

__all__ = ["flash_mla_sparse_fwd", "get_mla_metadata", "flash_mla_with_kvcache", "FlashMLASchedMeta"]


class FlashMLASchedMeta:
    """Scheduler metadata of FlashMLA HEAD's API; nsajit schedules each launch itself."""

    def __init__(self):
        self.have_initialized = False


def _unsupported(name, value, what):
    raise NotImplementedError(f"nsajit.compat.flash_mla: argument {name} = {value}: {what} is not supported by nsajit")


def _aligned(x):
    return x.data_ptr() % 16 == 0


def _sink(attn_sink, h_q, device):
    """attn_sink checked (fp32 [h_q] on the device) and made contiguous, or None."""
    if attn_sink is None:
        return None
    t = _torch()
    _tensor(attn_sink, "attn_sink", t.float32, shape=(h_q,), device=device)
    return attn_sink.contiguous()


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None):
    """q bf16 [s_q, h_q, 576], kv bf16 [s_kv, 1, 576], indices int32 [s_q, 1, topk] (< 0 or >= s_kv
    invalid), topk_length optional int32 [s_q] -> (out bf16 [s_q, h_q, 512], max_logits fp32
    [s_q, h_q], lse fp32 [s_q, h_q])."""
    t = _torch()
    _tensor(q, "q", t.bfloat16, ndim=3)
    _tensor(kv, "kv", t.bfloat16, ndim=3, device=q.device)
    _tensor(indices, "indices", t.int32, ndim=3, device=q.device)
    s_q, h_q, d_qk = q.shape
    if d_qk != 576:
        _unsupported("q.shape[-1] (d_qk)", d_qk, "a d_qk other than 576")
    if d_v != 512:
        _unsupported("d_v", d_v, "a d_v other than 512")
    if kv.shape[1] != 1:
        _unsupported("kv.shape[1] (h_kv)", kv.shape[1], "more than one KV head")
    if kv.shape[2] != d_qk:
        raise ValueError(f"nsajit: argument kv has shape {list(kv.shape)}: expected [s_kv, 1, {d_qk}]")
    if indices.shape[0] != s_q or indices.shape[1] != 1:
        raise ValueError(f"nsajit: argument indices has shape {list(indices.shape)}: expected [{s_q}, 1, topk]")
    if h_q not in (8, 16, 32, 64, 128):
        _unsupported("q.shape[1] (h_q)", h_q, "h_q other than 8, 16, 32, 64, 128")
    # KV is read in place when its rows are 16-byte aligned; otherwise one contiguous copy.
    kv2 = kv.select(1, 0)
    if kv2.stride(-1) != 1 or not _aligned(kv2) or (kv2.shape[0] > 1 and (kv2.stride(0) % 8 or kv2.stride(0) < 576)):
        kv2 = kv2.contiguous()
    if topk_length is not None:
        _tensor(topk_length, "topk_length", t.int32, shape=(s_q,), device=q.device)
        topk_length = topk_length.contiguous()
    out, lse, max_logits = _sparse_mla(q.contiguous(), kv2, indices.reshape(s_q, -1).contiguous(), sm_scale,
                                       topk_length=topk_length, prefill=True, return_max_logits=True,
                                       attn_sink=_sink(attn_sink, h_q, q.device))
    return out, max_logits, lse


def get_mla_metadata(cache_seqlens=None, num_q_tokens_per_head_k=None, num_heads_k=None, num_heads_q=None,
                     is_fp8_kvcache=False, topk=None):
    """HEAD: get_mla_metadata() -> (FlashMLASchedMeta(), None). First release:
    get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_heads_q, is_fp8_kvcache,
    topk) -> (tile_scheduler_metadata, num_splits) tensors."""
    if cache_seqlens is None:
        return FlashMLASchedMeta(), None
    t = _torch()
    _tensor(cache_seqlens, "cache_seqlens", t.int32, ndim=1)
    if num_heads_k is not None and num_heads_k != 1:
        _unsupported("num_heads_k", num_heads_k, "more than one KV head")
    device = cache_seqlens.device
    sms = t.cuda.get_device_properties(device).multi_processor_count
    b = cache_seqlens.shape[0]
    return t.zeros((sms, 8), dtype=t.int32, device=device), t.zeros((b + 1,), dtype=t.int32, device=device)


def _kv_cache_view(k_cache, is_fp8):
    """The cache as nsajit reads it: FP8 [num_blocks, page, 656] with its own page stride, or bf16
    [num_slots, 576] rows with a uniform stride (one copy when the pages are not evenly spaced)."""
    t = _torch()
    if k_cache.dim() == 4:
        if k_cache.shape[2] != 1:
            _unsupported("k_cache.shape[2] (h_kv)", k_cache.shape[2], "more than one KV head")
        k_cache = k_cache.select(2, 0)
    if k_cache.dim() != 3:
        raise ValueError(f"nsajit: argument k_cache has shape {list(k_cache.shape)}: expected "
                         "[num_blocks, page_block_size, 1, bytes_per_token]")
    if is_fp8:
        _tensor(k_cache, "k_cache", (t.float8_e4m3fn, t.uint8, t.int8))
        if k_cache.shape[-1] != 656:
            _unsupported("k_cache.shape[-1]", k_cache.shape[-1], "an FP8 token size other than 656 bytes (d_qk 576)")
        if k_cache.shape[1] > 1 and k_cache.stride(1) != 656:
            raise ValueError(f"nsajit: argument k_cache has strides {list(k_cache.stride())}: expected 656 bytes "
                             "between the tokens of a page (as FlashMLA)")
        # a copy also for pages that overlap or repeat (expand()): nsajit reads strides >= a page only
        if k_cache.stride(-1) != 1 or not _aligned(k_cache) or (k_cache.shape[0] > 1 and (
                k_cache.stride(0) % 16 or k_cache.stride(0) < k_cache.shape[1] * 656)):
            k_cache = k_cache.contiguous()
        return k_cache
    _tensor(k_cache, "k_cache", t.bfloat16)
    if k_cache.shape[-1] != 576:
        _unsupported("k_cache.shape[-1] (d_qk)", k_cache.shape[-1], "a d_qk other than 576")
    rows = k_cache.reshape(-1, 576)  # a view when pages are evenly spaced, else a copy
    if rows.stride(-1) != 1 or not _aligned(rows) or (rows.shape[0] > 1 and (rows.stride(0) % 8 or rows.stride(0) < 576)):
        rows = rows.contiguous()
    return rows


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                           num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=False, indices=None,
                           attn_sink=None, extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None):
    """Sparse decode: q bf16 [b, s_q, h_q, 576], k_cache [num_blocks, page_block_size, 1, 656] FP8
    (is_fp8_kvcache=True) or bf16 [..., 576], indices int32 [b, s_q, topk] slots (page_id *
    page_block_size + offset), topk_length optional int32 [b] -> (out bf16 [b, s_q, h_q, 512],
    lse fp32 [b, h_q, s_q]). block_table and cache_seqlens are not used (as FlashMLA's sparse path)."""
    t = _torch()
    if indices is None:
        _unsupported("indices", None, "dense (non-sparse) decode")
    if causal:
        _unsupported("causal", causal, "causal masking in sparse decode")
    for name, value in (("extra_k_cache", extra_k_cache), ("extra_indices_in_kvcache", extra_indices_in_kvcache),
                        ("extra_topk_length", extra_topk_length)):
        if value is not None:
            _unsupported(name, "<tensor>", "an extra KV cache (DeepSeek-V4)")
    if head_dim_v != 512:
        _unsupported("head_dim_v", head_dim_v, "a head_dim_v other than 512")
    _tensor(q, "q", t.bfloat16, ndim=4)
    b, s_q, h_q, d_qk = q.shape
    if d_qk != 576:
        _unsupported("q.shape[-1] (d_qk)", d_qk, "a d_qk other than 576")
    if h_q not in (8, 16, 32, 64, 128):
        _unsupported("q.shape[2] (h_q)", h_q, "h_q other than 8, 16, 32, 64, 128")
    _tensor(indices, "indices", t.int32, ndim=3, device=q.device)
    if indices.shape[0] != b or indices.shape[1] != s_q:
        raise ValueError(f"nsajit: argument indices has shape {list(indices.shape)}: expected [{b}, {s_q}, topk]")
    _tensor(k_cache, "k_cache", (t.float8_e4m3fn, t.uint8, t.int8, t.bfloat16), device=q.device)
    if (k_cache.dtype == t.bfloat16) == bool(is_fp8_kvcache):
        raise ValueError(f"nsajit: argument k_cache has dtype {k_cache.dtype} but is_fp8_kvcache = {is_fp8_kvcache}")
    kv = _kv_cache_view(k_cache, bool(is_fp8_kvcache))
    rows = b * s_q
    if topk_length is not None:
        _tensor(topk_length, "topk_length", t.int32, shape=(b,), device=q.device)
        topk_length = topk_length.repeat_interleave(s_q) if s_q > 1 else topk_length.contiguous()
    scale = d_qk ** -0.5 if softmax_scale is None else softmax_scale
    out, lse = _sparse_mla(q.reshape(rows, h_q, d_qk).contiguous(), kv, indices.reshape(rows, -1).contiguous(), scale,
                           topk_length=topk_length, next_n=s_q if s_q <= 8 else 1,
                           num_splits=0 if tile_scheduler_metadata is not None else 1,
                           attn_sink=_sink(attn_sink, h_q, q.device))
    return out.view(b, s_q, h_q, 512), lse.view(b, s_q, h_q).transpose(1, 2)
