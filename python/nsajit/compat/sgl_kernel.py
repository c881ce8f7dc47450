"""sgl_kernel's DSA top-k (sgl_kernel/top_k.py) on nsajit: `from nsajit.compat.sgl_kernel import
fast_topk_v2` instead of `from sgl_kernel import fast_topk_v2`.

Same arguments, defaults and result (int32 [B, topk], every slot written) for any topk that is a
multiple of 64 in [64, 4096] (sgl_kernel asserts topk == 2048). The selected sets are the true
top-k (sgl_kernel's order within a row is unspecified; nsajit's is ascending position above the
threshold, then the threshold ties by position). A row with length <= topk gives 0..length-1
(transformed) then -1, as sgl_kernel.
"""
from .. import topk as _topk
from .._tensors import tensor as _tensor, torch as _torch

__all__ = ["fast_topk_v2", "fast_topk_transform_fused", "fast_topk_transform_ragged_fused"]


def _check_score(score):
    t = _torch()
    _tensor(score, "score", t.float32, ndim=2, inner_contiguous=True)


def fast_topk_v2(score, lengths, topk, row_starts=None):
    """score float32 [B, L] (stride(1) == 1), lengths int32 [B], optional row_starts int32 [B] ->
    int32 [B, topk] positions relative to row_start."""
    _check_score(score)
    return _topk(score, lengths, topk, row_starts=row_starts)


def fast_topk_transform_fused(score, lengths, page_table_size_1, cu_seqlens_q, topk, row_starts=None):
    """As fast_topk_v2, each position mapped through page_table_size_1 (int32 [prefill_bs, W],
    stride(1) == 1). With row_starts None and len(cu_seqlens_q) - 1 == B, row b uses page-table
    row b (sgl_kernel's decode kernel); otherwise row r of request b (cu_seqlens_q[b] <= r <
    cu_seqlens_q[b + 1]) uses row b and row_starts is honoured (its prefill kernel)."""
    _check_score(score)
    t = _torch()
    _tensor(cu_seqlens_q, "cu_seqlens_q", t.int32, ndim=1, contiguous=True)
    _tensor(page_table_size_1, "page_table_size_1", t.int32, ndim=2, inner_contiguous=True)
    prefill_bs = cu_seqlens_q.shape[0] - 1
    if page_table_size_1.shape[0] != prefill_bs:
        raise ValueError(f"nsajit: argument page_table_size_1 has shape {list(page_table_size_1.shape)}: expected "
                         f"{prefill_bs} rows (len(cu_seqlens_q) - 1)")
    if row_starts is None and prefill_bs == score.shape[0]:
        return _topk(score, lengths, topk, transform="decode", page_table=page_table_size_1)
    return _topk(score, lengths, topk, row_starts=row_starts, transform="prefill", page_table=page_table_size_1,
                 cu_seqlens_q=cu_seqlens_q)


def fast_topk_transform_ragged_fused(score, lengths, topk_indices_offset, topk, row_starts=None):
    """As fast_topk_v2, each valid position plus topk_indices_offset[r] (int32 [B])."""
    _check_score(score)
    return _topk(score, lengths, topk, row_starts=row_starts, transform="ragged", offsets=topk_indices_offset)
