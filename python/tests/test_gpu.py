"""GPU part: every drop-in against a PyTorch reference of the SGLang / FlashMLA semantics, FlashMLA's
test input style (q, kv ~ N(0, 0.1^2) plus an offset, sm_scale 0.5, invalid indices -2^31, -1,
s_kv, 2^31 - 1, NaN in every KV row no index references, non-contiguous inputs, a padded FP8 page
stride), and a CUDA graph of top-k + sparse MLA decode replayed with new inputs equal to eager.
Outputs the kernels write are fresh tensors; the references run in fp32 (fp64 sums) on the GPU."""
import math

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import nsajit  # noqa: E402
from nsajit.compat import flash_mla, sgl_kernel, sglang_nsa  # noqa: E402

INVALID = [-2147483648, -1, 2147483647]  # plus s_kv, added per problem


def gen(seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return g


# ---------------------------------------------------------------- top-k (sgl_kernel) -----------

def check_topk_rows(idx, scores, lengths, topk, row_starts=None, transform=None):
    """Each row: len <= topk -> transform(0..len-1) then -1; else topk distinct positions whose
    scores are the true top-k multiset (transform applied: checked through `transform`)."""
    idx, scores, lengths = idx.cpu(), scores.cpu(), lengths.cpu()
    starts = row_starts.cpu() if row_starts is not None else torch.zeros_like(lengths)
    for r in range(idx.shape[0]):
        start = min(max(int(starts[r]), 0), scores.shape[1])
        n = min(int(lengths[r]), scores.shape[1] - start)
        row = idx[r]
        if n <= topk:
            want = torch.arange(topk, dtype=torch.int32)
            want[max(n, 0):] = -1
            if transform is not None:
                want = transform(r, want)
            assert torch.equal(row, want), f"row {r} (len {n})"
            continue
        pos = row if transform is None else transform.inverse(r, row)
        assert (pos >= 0).all() and (pos < n).all(), f"row {r}"
        assert pos.unique().numel() == topk, f"row {r}: duplicates"
        got = scores[r, start + pos.long()].sort(descending=True).values
        want = scores[r, start:start + n].topk(topk).values
        assert torch.equal(got, want), f"row {r}: not the top-k multiset"


class PageTable:
    """positions -> slots through page_table_1 (a permutation), and back."""

    def __init__(self, table):
        self.table = table.cpu()

    def __call__(self, r, pos):
        out = torch.full_like(pos, -1)
        ok = pos >= 0
        out[ok] = self.table[r, pos[ok].long()]
        return out

    def inverse(self, r, slots):
        inv = torch.empty(self.table.max() + 1, dtype=torch.int32)
        inv[self.table[r].long()] = torch.arange(self.table.shape[1], dtype=torch.int32)
        return inv[slots.long()]


@pytest.mark.parametrize("with_row_starts", [False, True])
def test_fast_topk_v2(with_row_starts):
    g = gen(1)
    b, width, topk = 6, 12000, 2048
    scores = torch.randn(b, width, generator=g, device="cuda")
    lengths = torch.tensor([100, 2048, 2049, 5000, 9000, 11000], dtype=torch.int32, device="cuda")
    row_starts = None
    if with_row_starts:
        row_starts = torch.randint(0, 1000, (b,), generator=g, device="cuda", dtype=torch.int32)
    idx = sgl_kernel.fast_topk_v2(scores, lengths, topk, row_starts)
    assert idx.dtype == torch.int32 and idx.shape == (b, topk)
    check_topk_rows(idx, scores, lengths, topk, row_starts)


def test_fast_topk_v2_strided_scores_and_sorted_any_topk():
    g = gen(2)
    big = torch.randn(5, 9000, generator=g, device="cuda")
    scores = big[:, :8000]  # row stride 9000
    lengths = torch.tensor([8000, 7000, 300, 600, 5000], dtype=torch.int32, device="cuda")
    idx = sgl_kernel.fast_topk_v2(scores, lengths, 512)
    check_topk_rows(idx, scores, lengths, 512)
    s = nsajit.topk(scores, lengths, 512, sorted=True)
    for r in (0, 1, 4):
        want = scores[r, :int(lengths[r])].topk(512).indices.int()
        assert torch.equal(s[r], want), f"row {r}"


def test_topk_bf16_scores_equal_the_fp32_launch_on_the_widened_values():
    g = gen(21)
    # Rows 1024 bytes apart (DeepGEMM's logits layout): width 5000, row stride 5120 bf16 elements.
    big = torch.randn(4, 5120, generator=g, device="cuda").to(torch.bfloat16)
    big[2, :3000] = 0.0  # a ReLU-like plateau of exact zeros
    scores = big[:, :5000]
    lengths = torch.tensor([5000, 4097, 4999, 100], dtype=torch.int32, device="cuda")
    for sorted_ in (False, True):
        got = nsajit.topk(scores, lengths, 2048, sorted=sorted_)
        want = nsajit.topk(scores.float(), lengths, 2048, sorted=sorted_)
        assert torch.equal(got, want), f"sorted={sorted_}"
    check_topk_rows(nsajit.topk(scores, lengths, 2048), scores.float(), lengths, 2048)
    with pytest.raises(ValueError, match="argument scores has strides"):
        nsajit.topk(big[:1].expand(4, 5120), lengths, 2048)  # rows that repeat one row's memory


def test_fast_topk_transform_fused_decode_and_prefill():
    g = gen(3)
    b, width, topk = 4, 10000, 2048
    scores = torch.randn(b, width, generator=g, device="cuda")
    lengths = torch.tensor([3000, 10000, 700, 6000], dtype=torch.int32, device="cuda")
    table = torch.stack([torch.randperm(width, generator=g, device="cuda") for _ in range(b)]).int() + 5
    cu = torch.arange(b + 1, dtype=torch.int32, device="cuda")
    out = sgl_kernel.fast_topk_transform_fused(scores, lengths, table, cu, topk)  # decode kernel
    check_topk_rows(out, scores, lengths, topk, transform=PageTable(table))
    # Prefill: 2 requests owning rows [0, 3) and [3, 4), with row_starts.
    cu = torch.tensor([0, 3, 4], dtype=torch.int32, device="cuda")
    table2 = table[:2].contiguous()
    starts = torch.tensor([0, 100, 200, 50], dtype=torch.int32, device="cuda")
    lengths2 = torch.tensor([3000, 9000, 700, 6000], dtype=torch.int32, device="cuda")
    out = sgl_kernel.fast_topk_transform_fused(scores, lengths2, table2, cu, topk, starts)
    req = [0, 0, 0, 1]

    class ByRequest(PageTable):
        def __call__(self, r, pos):
            return super().__call__(req[r], pos)

        def inverse(self, r, slots):
            return super().inverse(req[r], slots)

    check_topk_rows(out, scores, lengths2, topk, starts, transform=ByRequest(table2))


def test_fast_topk_transform_ragged_fused():
    g = gen(4)
    scores = torch.randn(3, 7000, generator=g, device="cuda")
    lengths = torch.tensor([7000, 1500, 4000], dtype=torch.int32, device="cuda")
    offsets = torch.randint(0, 1024, (3,), generator=g, device="cuda", dtype=torch.int32)
    out = sgl_kernel.fast_topk_transform_ragged_fused(scores, lengths, offsets, 2048)

    class Offset:
        def __call__(self, r, pos):
            return torch.where(pos >= 0, pos + int(offsets[r]), pos)

        def inverse(self, r, slots):
            return slots - int(offsets[r])

    check_topk_rows(out, scores, lengths, 2048, transform=Offset())


def test_topk_argument_errors_name_the_argument():
    scores = torch.randn(2, 100, device="cuda")
    lengths = torch.tensor([5, 6], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="topk = 100"):
        sgl_kernel.fast_topk_v2(scores, lengths, 100)
    with pytest.raises(TypeError, match="lengths has dtype int64"):
        sgl_kernel.fast_topk_v2(scores, lengths.long(), 2048)
    with pytest.raises(ValueError, match="argument score has strides"):
        sgl_kernel.fast_topk_v2(scores.t(), lengths, 2048)
    with pytest.raises(ValueError, match="lengths has shape"):
        sgl_kernel.fast_topk_v2(scores, lengths[:1], 2048)


# ---------------------------------------------------------- SGLang NSA helpers -----------------

def ref_transform(page_table, idx):
    out = torch.gather(page_table.long(), 1, idx.clamp(min=0).long()).int()
    return torch.where(idx < 0, torch.full_like(out, -1), out)


@pytest.mark.parametrize("topk", [2048, 100])
def test_transform_index_page_table(topk):
    g = gen(5)
    rows, width = 5, 3000
    table = torch.randint(0, 1 << 20, (rows, width), generator=g, device="cuda", dtype=torch.int32)
    idx = torch.randint(-1, width, (rows, topk), generator=g, device="cuda", dtype=torch.int32)
    idx[1, :] = -1
    out = sglang_nsa.transform_index_page_table_decode(page_table=table, topk_indices=idx)
    assert out.dtype == torch.int32 and out.shape == (rows, topk)
    assert torch.equal(out, ref_transform(table, idx))
    result = torch.empty_like(idx)
    assert sglang_nsa.transform_index_page_table_decode(page_table=table, topk_indices=idx, result=result) is result
    assert torch.equal(result, out)
    lens = [2, 0, 3]
    table3 = table[:3]
    out = sglang_nsa.transform_index_page_table_prefill(page_table=table3, topk_indices=idx, extend_lens_cpu=lens)
    req = torch.tensor([0, 0, 2, 2, 2], device="cuda")
    assert torch.equal(out, ref_transform(table3[req], idx))
    with pytest.raises(ValueError, match="extend_lens_cpu"):
        sglang_nsa.transform_index_page_table_prefill(page_table=table3, topk_indices=idx, extend_lens_cpu=[1, 1, 1])


def test_transform_index_page_table_int64_saturates():
    """int64 inputs are narrowed saturating: a position past int32 is past the row (-1), never wrapped
    to a small valid position; a slot past int32 becomes 2^31 - 1, never a small valid slot."""
    g = gen(6)
    rows, width, topk = 3, 300, 128
    table = torch.randint(0, 1 << 20, (rows, width), generator=g, device="cuda", dtype=torch.int64)
    idx = torch.randint(-1, width, (rows, topk), generator=g, device="cuda", dtype=torch.int64)
    idx[0, :4] = torch.tensor([(1 << 32) + 5, 1 << 31, -(1 << 32) + 7, -(1 << 40)])
    idx[1, 0] = 7
    table[1, 7] = (1 << 32) + 9
    out = sglang_nsa.transform_index_page_table_decode(page_table=table, topk_indices=idx)
    assert out[0, :4].tolist() == [-1, -1, -1, -1]
    assert out[1, 0].item() == (1 << 31) - 1
    ref = ref_transform(table.clamp(max=(1 << 31) - 1).int(), idx.clamp(-1, width - 1).int())
    ref = torch.where(idx >= width, torch.full_like(ref, -1), ref)
    assert torch.equal(out, ref)


def ref_quantize(x):
    """SGLang's reference quantizer: scale = amax / 448 per 128-dim tile, x / scale -> e4m3."""
    n = x.shape[0]
    out = torch.empty((n, 656), dtype=torch.uint8, device=x.device)
    xf = x.float()
    scales = torch.empty((n, 4), dtype=torch.float32, device=x.device)
    for t in range(4):
        tile = xf[:, 128 * t:128 * t + 128]
        amax = tile.abs().amax(dim=1)
        # A divisor tensor, not a Python scalar: torch multiplies by a scalar's reciprocal on the GPU.
        s = amax / torch.full_like(amax, 448.0)
        scales[:, t] = s
        out[:, 128 * t:128 * t + 128] = (tile / s[:, None]).to(torch.float8_e4m3fn).view(torch.uint8)
    out[:, 512:528] = scales.view(torch.uint8).view(n, 16)
    out[:, 528:] = x[:, 512:].contiguous().view(torch.uint8).view(n, 128)
    return out


def ref_dequantize(cache_rows):
    """[n, 656] bytes -> bf16 [n, 576]: bf16(float(e4m3) * scale), rope copied."""
    n = cache_rows.shape[0]
    lat = cache_rows[:, :512].contiguous().view(torch.float8_e4m3fn).float()
    scales = cache_rows[:, 512:528].contiguous().view(torch.float32).view(n, 4)
    lat = (lat.view(n, 4, 128) * scales[:, :, None]).view(n, 512).to(torch.bfloat16)
    rope = cache_rows[:, 528:].contiguous().view(torch.bfloat16).view(n, 64)
    return torch.cat([lat, rope], dim=1)


def test_quantize_and_dequantize_k_cache():
    g = gen(6)
    blocks, page = 3, 64
    x = torch.randn(blocks, page, 1, 576, generator=g, device="cuda").to(torch.bfloat16)
    q = sglang_nsa.quantize_k_cache(x)
    assert q.shape == (blocks, page, 1, 656) and q.dtype == torch.float8_e4m3fn
    got = q.view(torch.uint8).view(-1, 656)
    want = ref_quantize(x.view(-1, 576))
    assert torch.equal(got[:, 512:], want[:, 512:])  # scales and rope exactly
    assert (got[:, :512] != want[:, :512]).sum().item() == 0
    slots = torch.tensor([5, 0, 191, 64, 5], dtype=torch.int32, device="cuda")
    d = sglang_nsa.dequantize_k_cache_paged(q, slots)
    assert d.shape == (5, 1, 576) and d.dtype == torch.bfloat16
    assert torch.equal(d.view(5, 576), ref_dequantize(want[slots.long()]))


# ------------------------------------------------------------------- FlashMLA -------------------

def make_indices(g, rows, topk, s_kv, valid_counts, extra_invalid):
    """Per row: valid_counts[r] distinct positions in [0, s_kv), the rest invalid values, shuffled."""
    invalid = torch.tensor(INVALID + extra_invalid, dtype=torch.int32, device="cuda")
    idx = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
    for r in range(rows):
        n = valid_counts[r]
        row = torch.cat([torch.randperm(s_kv, generator=g, device="cuda")[:n].int(),
                         invalid[torch.randint(0, invalid.numel(), (topk - n,), generator=g, device="cuda")]])
        idx[r] = row[torch.randperm(topk, generator=g, device="cuda")]
    return idx


def nan_unreferenced(kv_rows, idx):
    """NaN in every KV row no index references (FlashMLA's test), to catch stray reads."""
    s_kv = kv_rows.shape[0]
    used = torch.zeros(s_kv, dtype=torch.bool, device=kv_rows.device)
    flat = idx.flatten().long()
    used[flat[(flat >= 0) & (flat < s_kv)]] = True
    kv_rows[~used] = float("nan")


def ref_attention(q, kv_rows, idx, sm_scale, topk_length=None):
    """q [rows, h, 576] bf16, kv_rows [s_kv, 576] bf16 (or dequantized), idx [rows, topk] ->
    out [rows, h, 512] fp32, lse [rows, h] (natural log; +inf for no valid index), max_logits."""
    s_kv = kv_rows.shape[0]
    valid = (idx >= 0) & (idx < s_kv)
    if topk_length is not None:
        valid &= torch.arange(idx.shape[1], device=idx.device)[None, :] < topk_length[:, None]
    k = kv_rows.float()[idx.clamp(0, s_kv - 1).long()]  # [rows, topk, 576]
    k = torch.where(valid[:, :, None], k, torch.zeros_like(k))
    s = torch.einsum("rhd,rtd->rht", q.double(), k.double()) * sm_scale
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    m = s.amax(dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    out = torch.einsum("rht,rtd->rhd", p, k[:, :, :512].double())
    empty = ~valid.any(dim=1)
    lse[empty] = float("inf")
    return out.float(), lse.float(), m.float()


def close(got, want, atol, rtol, name):
    torch.testing.assert_close(got.float(), want, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")


def sink_reference(out, lse, sink):
    """FlashMLA's sink on a reference [rows, h_q, 512]: out / (1 + exp(sink - lse)); rows with no
    valid index (lse +inf) stay 0."""
    factor = torch.sigmoid(lse - sink[None, :])
    factor = torch.where(torch.isinf(lse) & (lse > 0), torch.ones_like(factor), factor)
    return out * factor[..., None]


def random_sinks(g, h_q, around):
    """fp32 [h_q] sinks around the rows' lse (the factor anywhere in (0, 1)); head 0 +inf, head 1 -inf."""
    sink = around + 3 * torch.randn(h_q, generator=g, device="cuda")
    sink[0], sink[1] = float("inf"), float("-inf")
    return sink


@pytest.mark.parametrize("h_q", [64])
def test_flash_mla_sparse_fwd_flashmla_inputs(h_q):
    g = gen(7)
    s_q, s_kv, topk, sm_scale = 62, 1840, 512, 0.5
    q_big = (torch.randn(s_q, h_q, 640, generator=g, device="cuda") * 0.1 + 0.02).to(torch.bfloat16)
    q = q_big[:, :, :576]  # non-contiguous
    kv_big = (torch.randn(s_kv, 1, 640, generator=g, device="cuda") * 0.1 - 0.03).to(torch.bfloat16)
    kv = kv_big[:, :, :576]  # row stride 640: read in place
    counts = torch.randint(0, topk + 1, (s_q,), generator=g, device="cuda").tolist()
    counts[0], counts[1], counts[2] = 0, topk, 1
    idx = make_indices(g, s_q, topk, s_kv, counts, [s_kv])
    nan_unreferenced(kv_big[:, 0, :], idx)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx.unsqueeze(1), sm_scale)
    assert out.shape == (s_q, h_q, 512) and out.dtype == torch.bfloat16
    assert lse.shape == max_logits.shape == (s_q, h_q)
    ro, rl, rm = ref_attention(q, kv[:, 0, :], idx, sm_scale)
    close(out, ro, 2e-3, 2 / 128, "out")
    close(lse, rl, 1e-4, 1e-4, "lse")
    close(max_logits, rm, 1e-4, 1e-4, "max_logits")
    assert torch.isinf(lse[0]).all() and (lse[0] > 0).all() and (out[0] == 0).all()
    # topk_length and attn_sink (applied in the kernel): +inf gives 0, -inf the plain output, lse
    # and max_logits as without a sink, an empty row stays 0.
    tl = torch.randint(0, topk + 1, (s_q,), generator=g, device="cuda", dtype=torch.int32)
    tl[3] = 0
    sink = random_sinks(g, h_q, math.log(topk / 2))
    out2, ml2, lse2 = flash_mla.flash_mla_sparse_fwd(q, kv, idx.unsqueeze(1), sm_scale, attn_sink=sink, topk_length=tl)
    out3, ml3, lse3 = flash_mla.flash_mla_sparse_fwd(q, kv, idx.unsqueeze(1), sm_scale, topk_length=tl)
    ro2, rl2, _ = ref_attention(q, kv[:, 0, :], idx, sm_scale, tl)
    close(out2, sink_reference(ro2, rl2, sink), 2e-3, 2 / 128, "out (topk_length, attn_sink)")
    close(lse2, rl2, 1e-4, 1e-4, "lse (topk_length)")
    assert torch.equal(lse2, lse3) and torch.equal(ml2, ml3), "the sink changed lse / max_logits"
    assert (out2[:, 0] == 0).all() and torch.equal(out2[:, 1], out3[:, 1])
    assert (out2[3] == 0).all() and (out2[0] == 0).all()
    with pytest.raises(ValueError, match="attn_sink"):
        flash_mla.flash_mla_sparse_fwd(q, kv, idx.unsqueeze(1), sm_scale, attn_sink=sink[:-1])
    with pytest.raises(NotImplementedError, match="d_qk"):
        flash_mla.flash_mla_sparse_fwd(q_big[:, :, :512], kv_big[:, :, :512], idx.unsqueeze(1), sm_scale)


def fp8_paged_cache(g, num_blocks, page, pad_bytes, kv_rows):
    """The FP8 cache of kv_rows as FlashMLA lays it out, pages page * 656 + pad_bytes apart;
    returns (k_cache [num_blocks, page, 1, 656] uint8 view, dequantized rows)."""
    n = num_blocks * page
    raw = ref_quantize(kv_rows)
    buf = torch.full((num_blocks, page * 656 + pad_bytes), 0xFF, dtype=torch.uint8, device="cuda")
    buf[:, :page * 656] = raw.view(num_blocks, page * 656)
    k_cache = buf[:, :page * 656].view(num_blocks, page, 1, 656)
    assert k_cache.stride(0) == page * 656 + pad_bytes
    return k_cache, ref_dequantize(raw), n


@pytest.mark.parametrize("metadata", ["none", "head", "first_release"])
def test_flash_mla_with_kvcache_fp8_sparse_decode(metadata):
    g = gen(8)
    b, s_q, h_q, topk, page, num_blocks, sm_scale = 4, 2, 64, 512, 64, 40, 0.5
    q = (torch.randn(b, s_q, h_q, 576, generator=g, device="cuda") * 0.1 + 0.02).to(torch.bfloat16)
    kv = (torch.randn(num_blocks * page, 576, generator=g, device="cuda") * 0.1 - 0.03).to(torch.bfloat16)
    rows = b * s_q
    counts = torch.randint(0, topk + 1, (rows,), generator=g, device="cuda").tolist()
    counts[1] = 0
    idx = make_indices(g, rows, topk, num_blocks * page, counts, [num_blocks * page])
    k_cache, deq, n = fp8_paged_cache(g, num_blocks, page, 48, kv)
    # NaN bytes (e4m3 NaN, NaN scales and rope) in every token no index references.
    used = torch.zeros(n, dtype=torch.bool, device="cuda")
    flat = idx.flatten().long()
    used[flat[(flat >= 0) & (flat < n)]] = True
    k_cache[(~used).view(num_blocks, page)] = 0xFF
    if metadata == "none":
        meta, splits = None, None
    elif metadata == "head":
        meta, splits = flash_mla.get_mla_metadata()
    else:
        meta, splits = flash_mla.get_mla_metadata(torch.full((b,), 4000, dtype=torch.int32, device="cuda"),
                                                  s_q * h_q, 1, h_q, True, topk)
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, meta, splits, sm_scale,
                                                is_fp8_kvcache=True, indices=idx.view(b, s_q, topk))
    assert out.shape == (b, s_q, h_q, 512) and out.dtype == torch.bfloat16
    assert lse.shape == (b, h_q, s_q) and lse.dtype == torch.float32
    ro, rl, _ = ref_attention(q.view(rows, h_q, 576), deq, idx, sm_scale)
    close(out.view(rows, h_q, 512), ro, 2e-3, 2 / 128, "out")
    close(lse.transpose(1, 2).reshape(rows, h_q), rl, 1e-4, 1e-4, "lse")
    assert torch.isinf(lse[0, :, 1]).all()
    # attn_sink in the kernel's epilogue (metadata: in the split-KV combine).
    sink = random_sinks(g, h_q, math.log(topk / 2))
    out_s, lse_s = flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, meta, splits, sm_scale,
                                                    is_fp8_kvcache=True, indices=idx.view(b, s_q, topk), attn_sink=sink)
    close(out_s.view(rows, h_q, 512), sink_reference(ro, rl, sink), 2e-3, 2 / 128, "out (attn_sink)")
    assert torch.equal(lse_s, lse), "the sink changed lse"
    assert (out_s[:, :, 0] == 0).all() and torch.equal(out_s[:, :, 1], out[:, :, 1])
    with pytest.raises(NotImplementedError, match="extra_k_cache"):
        flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, meta, splits, sm_scale, is_fp8_kvcache=True,
                                         indices=idx.view(b, s_q, topk), extra_k_cache=k_cache)
    with pytest.raises(ValueError, match="k_cache has strides"):
        flash_mla.flash_mla_with_kvcache(q, k_cache.transpose(0, 1), None, None, 512, meta, splits, sm_scale,
                                         is_fp8_kvcache=True, indices=idx.view(b, s_q, topk))


# ------------------------------------------------------------- top-level API, graphs ------------

def test_top_level_fp8_roundtrip_and_errors():
    g = gen(9)
    kv = torch.randn(100, 576, generator=g, device="cuda").to(torch.bfloat16)
    cache = torch.zeros(2, 64, 656, dtype=torch.uint8, device="cuda")
    slots = torch.arange(100, dtype=torch.int32, device="cuda").flip(0).contiguous()
    nsajit.fp8_kv_quantize(kv, slots, cache)
    back = nsajit.fp8_kv_gather(cache, slots)
    assert torch.equal(back, ref_dequantize(ref_quantize(kv)))
    with pytest.raises(ValueError, match="argument slots has shape"):
        nsajit.fp8_kv_quantize(kv, slots[:5], cache)
    with pytest.raises(ValueError, match="argument cache has shape"):
        nsajit.fp8_kv_quantize(kv, slots, cache[:, :, :600])


def test_cuda_graph_topk_transform_sparse_decode_replays_equal_to_eager():
    b, width, topk, page, h_q = 4, 4096, 512, 64, 16
    pages = b * width // page
    g = gen(10)
    scores = torch.empty(b, width, device="cuda")
    lengths = torch.empty(b, dtype=torch.int32, device="cuda")
    q = torch.empty(b, h_q, 576, dtype=torch.bfloat16, device="cuda")
    cache = torch.empty(pages, page, 656, dtype=torch.uint8, device="cuda")
    table = torch.arange(pages, dtype=torch.int32, device="cuda").view(b, width // page).flip(1).contiguous()
    all_slots = torch.arange(pages * page, dtype=torch.int32, device="cuda")

    def fill():
        scores.copy_(torch.randn(b, width, generator=g, device="cuda"))
        lengths.copy_(torch.randint(100, width, (b,), generator=g, device="cuda", dtype=torch.int32))
        q.copy_(torch.randn(b, h_q, 576, generator=g, device="cuda").to(torch.bfloat16))
        nsajit.fp8_kv_quantize(torch.randn(pages * page, 576, generator=g, device="cuda").to(torch.bfloat16),
                               all_slots, cache)

    def step():
        slots = nsajit.topk(scores, lengths, topk, transform="decode", page_table=table, page_size=page)
        out_s, lse_s = nsajit.sparse_mla(q, cache, slots, 0.5, num_splits=0)
        out_p, lse_p = nsajit.sparse_mla(q, cache, slots, 0.5)
        return slots, out_s, lse_s, out_p, lse_p

    fill()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up: kernels loaded before the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    first = None
    for _ in range(2):
        fill()
        for t in static:
            t.fill_(7)  # poison
        graph.replay()
        torch.cuda.synchronize()
        replayed = [t.clone() for t in static]
        eager = step()
        torch.cuda.synchronize()
        for name, a, e in zip(["slots", "out split", "lse split", "out", "lse"], replayed, eager):
            assert torch.equal(a, e), name
        if first is not None:
            assert not torch.equal(first, replayed[0])
        first = replayed[0]


def test_capture_error_names_the_kernel():
    scores = torch.randn(2, 5000, device="cuda")
    lengths = torch.tensor([4000, 4500], dtype=torch.int32, device="cuda")
    # topk 3072 + sorted is used by no other test: its first call would compile.
    name = nsajit.kernel_name("topk", topk=3072, sorted=True, threads=1024)
    import os
    import glob

    for f in glob.glob(os.path.join(nsajit.cache_dir(), name + ".*")):
        os.remove(f)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(nsajit.CaptureError, match=name.replace(".", r"\.")):
        with torch.cuda.graph(graph):
            nsajit.topk(scores, lengths, 3072, sorted=True)


def test_overlapping_pages_and_rows_are_refused_or_copied():
    """An expand()ed cache or page table (stride 0) is refused by the nsajit API, never read as the
    C ABI's contiguous default; FlashMLA's drop-in copies such a cache and keeps its semantics."""
    dev, bf16, i32 = "cuda", torch.bfloat16, torch.int32
    cache = torch.zeros(1, 64, 656, dtype=torch.uint8, device=dev).expand(4, 64, 656)
    kv = torch.randn(256, 576, device=dev).to(bf16)
    slots = torch.arange(256, dtype=i32, device=dev)
    with pytest.raises(ValueError, match=r"argument cache has strides \[0, 656, 1\]"):
        nsajit.fp8_kv_quantize(kv, slots, cache)
    with pytest.raises(ValueError, match=r"argument cache has strides \[0, 656, 1\]"):
        nsajit.fp8_kv_gather(cache, slots)
    q = torch.randn(2, 16, 576, device=dev).to(bf16)
    indices = torch.arange(2 * 2048, dtype=i32, device=dev).view(2, 2048) % 256
    with pytest.raises(ValueError, match=r"argument kv has strides \[0, 656, 1\]"):
        nsajit.sparse_mla(q, cache, indices, 0.5)
    table = torch.arange(128, dtype=i32, device=dev).view(1, 128)
    topk_indices = torch.arange(8 * 2048, dtype=i32, device=dev).view(8, 2048) % 100
    for bad in (table.expand(8, 128), torch.arange(135, dtype=i32, device=dev).as_strided((8, 128), (1, 1))):
        with pytest.raises(ValueError, match="argument page_table has strides"):
            nsajit.index_transform(topk_indices, page_table=bad)
    # FlashMLA's drop-in: an expanded FP8 cache is copied (every page reads page 0's tokens)
    real = torch.zeros(4, 64, 656, dtype=torch.uint8, device=dev)
    nsajit.fp8_kv_quantize(kv[:64], slots[:64], real)
    shared = real[:1].expand(4, 64, 656).unsqueeze(2)
    idx = (torch.arange(2048, device=dev, dtype=i32) % 256).view(1, 1, 2048)
    qd = torch.randn(1, 1, 16, 576, device=dev).to(bf16)
    out, _ = flash_mla.flash_mla_with_kvcache(qd, shared, None, None, 512, None, softmax_scale=0.5,
                                              is_fp8_kvcache=True, indices=idx)
    want, _ = flash_mla.flash_mla_with_kvcache(qd, real[:1].repeat(4, 1, 1).unsqueeze(2).contiguous(), None, None,
                                               512, None, softmax_scale=0.5, is_fp8_kvcache=True, indices=idx)
    assert torch.equal(out, want)
