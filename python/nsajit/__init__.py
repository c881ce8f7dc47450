"""nsajit from Python: DeepSeek Sparse Attention kernels (top-k, index transform, sparse MLA, FP8
KV cache) JIT-compiled by libnsajit, called through its C ABI with ctypes.

Every launch goes on the current torch CUDA stream of the tensors' device, asynchronously, like a
torch op; outputs are new tensors unless `out=` is given. Bad arguments raise TypeError or
ValueError naming the argument (nsajit.InvalidArgument, a ValueError, for the checks made by the
library); a KV tensor with more than one KV head raises NotImplementedError. `import nsajit` needs neither torch nor a GPU; torch is imported on first use.

Drop-in modules with the signatures of the functions they replace: nsajit.compat.sgl_kernel,
nsajit.compat.sglang_nsa, nsajit.compat.flash_mla. Semantics: docs/nsa-semantics.md.
"""
import ctypes
from collections import namedtuple

from . import _lib
from ._lib import (CaptureError, CompileError, CudaError, InvalidArgument, NotPrecompiledError, NsajitError, library,
                   library_path)
from ._tensors import int_arg, launch_on, ptr, tensor, torch

__all__ = [
    "abi_version", "version", "library_path", "cache_dir", "nvrtc_version", "topk", "index_transform",
    "sparse_mla", "sparse_mla_num_splits", "sparse_mla_workspace_bytes", "fp8_kv_quantize", "fp8_kv_gather",
    "precompile", "precompile_text", "kernel_name", "generate_source", "jit_records", "KernelRecord", "NsajitError",
    "InvalidArgument", "CudaError", "CompileError", "CaptureError", "NotPrecompiledError",
]

__version__ = "0.1.0"

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

KernelRecord = namedtuple("KernelRecord", "name source compile_ms load_ms cubin_bytes on_disk")


def abi_version():
    """The loaded library's C ABI version (nsajit_abi_version)."""
    return library().nsajit_abi_version()


def version():
    """The library's version string."""
    return library().nsajit_version().decode()


def cache_dir():
    """The cubin cache directory: $NSAJIT_CACHE_DIR, else an absolute $XDG_CACHE_HOME/nsajit, else
    ~/.cache/nsajit, else /tmp/nsajit-cache-<uid>. It is used only if owned by the current user or
    root and not writable by group or others (else kernels are compiled in memory only)."""
    return _lib.text(library().nsajit_cache_dir)


def nvrtc_version():
    """The NVRTC version libnsajit loaded, as 'major.minor' (e.g. '13.0')."""
    return _lib.text(library().nsajit_nvrtc_version)


def _mode(value, name="transform"):
    if value not in _lib.MODES:
        raise ValueError(f"nsajit: argument {name} = {value!r}: expected one of 'decode', 'prefill', 'ragged'")
    return _lib.MODES[value]


def _int32(value, name, low=None, high=_INT32_MAX):
    return int_arg(value, name, -2**31 if low is None else low, high)


def _call(fn, args, device):
    with launch_on(device) as stream:
        _lib.check(fn(ctypes.byref(args), ctypes.c_void_p(stream)))


def _leading_stride(x, name, item, unit="elements"):
    """x.stride(0) when x's rows (pages) are at least item apart, so none overlaps or repeats
    another (an expand()ed stride of 0 would otherwise reach the C ABI as its "0 = contiguous"
    default); None for a single row, whose stride is never used."""
    if x.shape[0] <= 1:
        return None
    if x.stride(0) < item:
        raise ValueError(f"nsajit: argument {name} has strides {list(x.stride())} (shape {list(x.shape)}): "
                         f"expected a stride >= {item} {unit} in dimension 0 (rows that do not overlap)")
    return x.stride(0)


def _page_table_fields(args, page_table, device, name="page_table"):
    tensor(page_table, name, torch().int32, ndim=2, device=device, inner_contiguous=True)
    args.page_table = ptr(page_table)
    args.page_table_width = _int32(page_table.shape[1], f"{name}.shape[1]", 0)
    stride = _leading_stride(page_table, name, page_table.shape[1])
    args.page_table_row_stride = page_table.shape[1] if stride is None else stride
    return _int32(page_table.shape[0], f"{name}.shape[0]", 0)


def _transform_fields(args, transform, rows, page_table, page_size, cu_seqlens_q, offsets, device):
    """The §1 transform's fields of IndexTransformArgs / TopkArgs (mode already set)."""
    t = torch()
    if transform == "ragged":
        tensor(offsets, "offsets", t.int32, shape=(rows,), device=device, contiguous=True)
        args.offsets = ptr(offsets)
        return
    args.num_requests = _page_table_fields(args, page_table, device)
    args.page_size = _int32(page_size, "page_size", 1)
    if transform == "prefill":
        tensor(cu_seqlens_q, "cu_seqlens_q", t.int32, shape=(page_table.shape[0] + 1,), device=device,
               contiguous=True)
        args.cu_seqlens_q = ptr(cu_seqlens_q)


def topk(scores, lengths, topk=2048, *, row_starts=None, sorted=False, transform=None, page_table=None,
         page_size=1, cu_seqlens_q=None, offsets=None, next_n=1, out=None):
    """Top-k positions of each row of the indexer scores (sgl_kernel fast_topk_v2 semantics, any topk
    that is a multiple of 64 up to 4096).

    scores: float32 or bfloat16 [rows, width] (last dim contiguous, any row stride; bf16 is exact
    on the bf16 values); lengths: int32 [rows];
    row_starts: optional int32 [rows]. topk: a multiple of 64 in [64, 4096]. Returns int32
    [rows, topk]: per row the positions (relative to row_start) of the top-k scores among the
    first lengths[r], or 0..len-1 then -1 when len <= topk. sorted=True orders them by score
    descending, ties by index. next_n (1..8, 'decode' only; else 1): MTP query rows per request.
    transform: None (positions), 'decode' (page_table [rows / next_n, W]: row r uses page-table
    row r // next_n), 'prefill' (page_table [num_requests, W] and cu_seqlens_q int32
    [num_requests + 1]) or 'ragged' (offsets int32 [rows]: position + offset) — the fused
    forms of sgl_kernel's fast_topk_transform_fused / _ragged_fused. page_size > 1: page_table
    holds page ids (slot = page_table[b, p // P] * P + p % P).
    """
    k = _int32(topk, "topk")
    if not 64 <= k <= 4096 or k % 64 != 0:  # before anything is allocated for [rows, topk]
        raise ValueError(f"nsajit: argument topk = {k}: expected a multiple of 64 in [64, 4096]")
    t = torch()
    tensor(scores, "scores", (t.float32, t.bfloat16), ndim=2, inner_contiguous=True)
    device = scores.device
    rows, width = scores.shape
    tensor(lengths, "lengths", t.int32, shape=(rows,), device=device, contiguous=True)
    tensor(row_starts, "row_starts", t.int32, shape=(rows,), device=device, contiguous=True, optional=True)
    if out is None:
        out = t.empty((rows, k), dtype=t.int32, device=device)
    tensor(out, "out", t.int32, shape=(rows, k), device=device, contiguous=True)
    args = _lib.TopkArgs(scores=ptr(scores), lengths=ptr(lengths), row_starts=ptr(row_starts), out=ptr(out),
                         rows=_int32(rows, "scores.shape[0]", 0), width=_int32(width, "scores.shape[1]", 0),
                         topk=k, sorted=1 if sorted else 0, page_size=1, next_n=1,
                         score_dtype=1 if scores.dtype == t.bfloat16 else 0)
    stride = _leading_stride(scores, "scores", width)
    args.score_row_stride = width if stride is None else stride
    if transform is not None:
        args.fused_transform = 1
        args.mode = _mode(transform)
        args.next_n = _int32(next_n, "next_n", 1, 8)
        _transform_fields(args, transform, rows, page_table, page_size, cu_seqlens_q, offsets, device)
    elif page_table is not None or cu_seqlens_q is not None or offsets is not None:
        raise ValueError("nsajit: arguments page_table / cu_seqlens_q / offsets need transform="
                         "'decode', 'prefill' or 'ragged'")
    _call(library().nsajit_topk, args, device)
    return out


def index_transform(topk_indices, *, transform="decode", page_table=None, page_size=1, cu_seqlens_q=None,
                    offsets=None, out=None):
    """Top-k positions -> KV-cache slots (SGLang's transform_index_page_table_decode / _prefill and
    the ragged offset form). topk_indices: int32 [rows, topk] (topk a multiple of 64 in [64,
    16384]), -1 or any negative value = invalid. transform 'decode': page_table [rows, W] (row r
    uses row r); 'prefill': page_table [num_requests, W] + cu_seqlens_q int32 [num_requests + 1];
    'ragged': offsets int32 [rows]. page_size 1: page_table holds slots (page_table_1); P > 1: page
    ids (slot = page_table[b, p // P] * P + p % P). Returns int32 [rows, topk]: the slot, or -1
    (invalid position, one past the page table, or a negative page-table entry)."""
    t = torch()
    tensor(topk_indices, "topk_indices", t.int32, ndim=2, contiguous=True)
    device = topk_indices.device
    rows, k = topk_indices.shape
    if out is None:
        out = t.empty((rows, k), dtype=t.int32, device=device)
    tensor(out, "out", t.int32, shape=(rows, k), device=device, contiguous=True)
    args = _lib.IndexTransformArgs(mode=_mode(transform), topk_indices=ptr(topk_indices), out=ptr(out),
                                   rows=_int32(rows, "topk_indices.shape[0]", 0), topk=_int32(k, "topk", 0),
                                   page_size=1)
    _transform_fields(args, transform, rows, page_table, page_size, cu_seqlens_q, offsets, device)
    _call(library().nsajit_index_transform, args, device)
    return out


def _kv_fields(args, kv, device, page_size=None):
    """Fills the KV fields from kv: bf16 [num_slots, 576] / [num_slots, 1, 576] (any row stride), or
    the FP8 cache uint8 / int8 / float8_e4m3fn [num_pages, page_size, (1,) 656] with any page stride."""
    t = torch()
    fp8_types = (t.uint8, t.int8, t.float8_e4m3fn)
    tensor(kv, "kv", (t.bfloat16,) + fp8_types, ndim=(2, 3, 4), device=device, inner_contiguous=True)
    bf16 = kv.dtype == t.bfloat16
    # bf16 [num_slots, (1,) 576] or the FP8 cache [num_pages, page_size, (1,) 656]: the KV-head
    # dimension, when present, comes before the last.
    heads_dim, row, expected = ((1, 576, "bf16 [num_slots, 576] or [num_slots, 1, 576]") if bf16 else
                                (2, 656, "the FP8 cache [num_pages, page_size, 656] or [num_pages, page_size, 1, 656]"))
    if kv.dim() == heads_dim + 2 and kv.shape[heads_dim] != 1:
        raise NotImplementedError(f"nsajit: kv has {kv.shape[heads_dim]} KV heads (shape {list(kv.shape)}): "
                                  "only one latent KV head (h_kv = 1) is supported")
    if kv.dim() not in (heads_dim + 1, heads_dim + 2) or kv.shape[-1] != row:
        raise ValueError(f"nsajit: argument kv has shape {list(kv.shape)}: expected {expected}")
    if bf16:
        args.kv_dtype = _lib.KV_BF16
        args.num_slots = kv.shape[0]
        stride = _leading_stride(kv, "kv", 576)
        args.kv_row_stride = 576 if stride is None else stride
    else:
        if kv.shape[1] > 1 and kv.stride(1) != 656:
            raise ValueError(f"nsajit: argument kv has strides {list(kv.stride())}: expected 656 bytes between "
                             "the tokens of a page (dimension 1)")
        if page_size is not None and page_size != kv.shape[1]:
            raise ValueError(f"nsajit: argument page_size = {page_size}: expected kv.shape[1] = {kv.shape[1]}")
        args.kv_dtype = _lib.KV_FP8_E4M3
        args.page_size = _int32(kv.shape[1], "kv.shape[1] (page_size)", 1)
        args.num_slots = kv.shape[0] * kv.shape[1]
        stride = _leading_stride(kv, "kv", kv.shape[1] * 656, "bytes")
        args.kv_page_stride = 0 if stride is None else stride
    args.kv = ptr(kv)


def sparse_mla(q, kv, indices, sm_scale, *, topk_length=None, next_n=1, num_splits=1, prefill=False,
               return_max_logits=False, out=None, lse=None, precise=False, attn_sink=None):
    """Sparse MLA attention over the top-k KV tokens of each query row (FlashMLA semantics).

    q: bf16 [rows, h_q, 576] contiguous (h_q 8, 16, 32, 64 or 128); kv: bf16 [num_slots, 576] or
    [num_slots, 1, 576] (row stride a multiple of 8) or the FP8 cache [num_pages, page_size, (1,)
    656] (uint8 / int8 / float8_e4m3fn; pages any multiple of 16 bytes apart); more than one KV
    head raises NotImplementedError. indices: int32 [rows, topk] slots (topk a multiple of 64 in
    [64, 16384]), an index < 0 or >= num_slots is skipped; topk_length: optional int32 [rows] (use
    the first n, clamped to [0, topk]). next_n: decode MTP rows per request (1..8, dividing rows);
    prefill=True: the prefill entry point (next_n must be 1).
    num_splits: 1 = one CTA per row (batch-invariant), 0 = automatic split-KV (a workspace is
    allocated from torch's caching allocator), 2..64 forced. Returns (out bf16 [rows, h_q, 512],
    lse fp32 [rows, h_q] natural log) and max_logits fp32 [rows, h_q] when return_max_logits.
    A row with no valid index gives out 0, lse +inf, max_logits -inf.
    precise: False (default) rounds P to bf16 before P.V, as FlashMLA does; True carries P as bf16
    hi + lo (tighter tolerance, nsa-semantics.md "Tolerances"; slower).
    attn_sink: optional fp32 [h_q] (FlashMLA's attn_sink, natural log): out of head h is scaled by
    1 / (1 + exp(attn_sink[h] - lse)) in the kernel (+inf gives 0, -inf the plain output); lse,
    max_logits and rows with no valid index are unchanged.
    """
    t = torch()
    tensor(q, "q", t.bfloat16, ndim=3, contiguous=True)
    device = q.device
    rows, h_q, d_qk = q.shape
    if d_qk != 576:
        raise ValueError(f"nsajit: argument q has shape {list(q.shape)}: expected [rows, h_q, 576]")
    tensor(indices, "indices", t.int32, ndim=2, device=device, contiguous=True)
    if indices.shape[0] != rows:
        raise ValueError(f"nsajit: argument indices has shape {list(indices.shape)}: expected [{rows}, topk] "
                         "(one index row per query row)")
    k = indices.shape[1]
    tensor(topk_length, "topk_length", t.int32, shape=(rows,), device=device, contiguous=True, optional=True)
    tensor(attn_sink, "attn_sink", t.float32, shape=(h_q,), device=device, contiguous=True, optional=True)
    if out is None:
        out = t.empty((rows, h_q, 512), dtype=t.bfloat16, device=device)
    tensor(out, "out", t.bfloat16, shape=(rows, h_q, 512), device=device, contiguous=True)
    if lse is None:
        lse = t.empty((rows, h_q), dtype=t.float32, device=device)
    tensor(lse, "lse", t.float32, shape=(rows, h_q), device=device, contiguous=True)
    max_logits = t.empty((rows, h_q), dtype=t.float32, device=device) if return_max_logits else None
    try:
        scale = float(sm_scale)
    except (TypeError, ValueError):
        raise TypeError(f"nsajit: argument sm_scale = {sm_scale!r}: expected a float") from None
    args = _lib.SparseMlaArgs(q=ptr(q), indices=ptr(indices), topk_length=ptr(topk_length), out=ptr(out),
                              lse=ptr(lse), max_logits=ptr(max_logits), rows=_int32(rows, "q.shape[0]", 0),
                              next_n=_int32(next_n, "next_n", 1, 8), h_q=_int32(h_q, "h_q", 0),
                              topk=_int32(k, "topk", 0), sm_scale=scale, page_size=1, kv_row_stride=576,
                              precise=1 if precise else 0, attn_sink=ptr(attn_sink))
    _kv_fields(args, kv, device)
    splits = _int32(num_splits, "num_splits", 0, 64)
    args.num_splits = splits
    if splits != 1 and rows > 0:
        need = sparse_mla_workspace_bytes(rows, h_q, k, splits, device=device)
        if need > 0:
            workspace = t.empty((need,), dtype=t.uint8, device=device)
            args.workspace = ptr(workspace)
            args.workspace_bytes = need
        else:
            args.num_splits = 1 if splits == 0 else splits
    lib = library()
    _call(lib.nsajit_sparse_mla_prefill if prefill else lib.nsajit_sparse_mla_decode, args, device)
    return (out, lse, max_logits) if return_max_logits else (out, lse)


def _sizing(fn, value, rows, h_q, topk, num_splits, device):
    args = (_int32(rows, "rows"), _int32(h_q, "h_q"), _int32(topk, "topk"), _int32(num_splits, "num_splits"))
    if num_splits == 0 and (device is not None or _torch_has_gpu()):  # the automatic count depends on the device
        with launch_on(device if device is not None else torch().cuda.current_device()):
            _lib.check(fn(*args, ctypes.byref(value)))
    else:  # a fixed count, or the C ABI's current device (without torch)
        _lib.check(fn(*args, ctypes.byref(value)))
    return value.value


def sparse_mla_num_splits(rows, h_q, topk, num_splits=0, *, device=None):
    """Split count a sparse MLA launch of these sizes uses (nsajit::sparse_mla_num_splits):
    num_splits when > 0 (at most the row's 64-token tiles), 0 = automatic for the device (needs a
    GPU); 1 for rows == 0. ValueError (InvalidArgument) for sizes a launch would refuse: rows < 0
    or past the grid's bound, h_q, topk, num_splits outside 0..64."""
    return _sizing(library().nsajit_sparse_mla_num_splits, ctypes.c_int32(0), rows, h_q, topk, num_splits, device)


def sparse_mla_workspace_bytes(rows, h_q, topk, num_splits=0, *, device=None):
    """Workspace bytes a split-KV launch needs (0 when it does not split, and for rows == 0):
    splits * rows * h_q * (512 + 2) * 4. The same errors as sparse_mla_num_splits."""
    return _sizing(library().nsajit_sparse_mla_workspace_bytes, ctypes.c_size_t(0), rows, h_q, topk, num_splits,
                   device)


def _cache_fields(args, cache, device, name="cache"):
    t = torch()
    tensor(cache, name, (t.uint8, t.int8, t.float8_e4m3fn), ndim=(3, 4), device=device, inner_contiguous=True)
    if cache.shape[-1] != 656 or (cache.dim() == 4 and cache.shape[2] != 1):
        raise ValueError(f"nsajit: argument {name} has shape {list(cache.shape)}: expected "
                         "[num_pages, page_size, 656] or [num_pages, page_size, 1, 656]")
    if cache.shape[1] > 1 and cache.stride(1) != 656:
        raise ValueError(f"nsajit: argument {name} has strides {list(cache.stride())}: expected 656 bytes between "
                         "the tokens of a page")
    args.cache = ptr(cache)
    args.num_pages = cache.shape[0]
    args.page_size = _int32(cache.shape[1], f"{name}.shape[1] (page_size)", 1)
    stride = _leading_stride(cache, name, cache.shape[1] * 656, "bytes")
    args.page_stride_bytes = 0 if stride is None else stride


def fp8_kv_quantize(kv, slots, cache, *, scale_fmt="fp32"):
    """Quantizes bf16 rows kv [n, 576] (last dim contiguous, any row stride) into the FP8 cache
    [num_pages, page_size, (1,) 656] at slots int32 [n] (slot = page * page_size + row; a slot < 0
    or past the cache is skipped), in place (FlashMLA's / SGLang's quantize_k_cache). scale_fmt
    'fp32' (max(amax / 448, FLT_MIN): vLLM's floor, SGLang's writer has none) or 'ue8m0' (a power
    of two, FlashMLA's test quantizer). Returns cache."""
    t = torch()
    tensor(kv, "kv", t.bfloat16, ndim=2, inner_contiguous=True)
    device = kv.device
    if kv.shape[1] != 576:
        raise ValueError(f"nsajit: argument kv has shape {list(kv.shape)}: expected [n, 576]")
    n = kv.shape[0]
    tensor(slots, "slots", t.int32, shape=(n,), device=device, contiguous=True)
    if scale_fmt not in _lib.SCALE_FORMATS:
        raise ValueError(f"nsajit: argument scale_fmt = {scale_fmt!r}: expected 'fp32' or 'ue8m0'")
    stride = _leading_stride(kv, "kv", 576)
    args = _lib.Fp8KvQuantizeArgs(kv=ptr(kv), kv_row_stride=576 if stride is None else stride, slots=ptr(slots),
                                  n=_int32(n, "kv.shape[0]", 0), scale_fmt=_lib.SCALE_FORMATS[scale_fmt])
    _cache_fields(args, cache, device)
    _call(library().nsajit_fp8_kv_quantize, args, device)
    return cache


def fp8_kv_gather(cache, slots, *, out=None):
    """Gathers and dequantizes the tokens of slots int32 [n] from the FP8 cache
    [num_pages, page_size, (1,) 656]: bf16 [n, 576] (an invalid slot gives zeros). Follows SGLang's
    dequantize_k_cache_paged: latent dim d = bf16(float(e4m3) * scale[d // 128]), rope copied."""
    t = torch()
    tensor(slots, "slots", t.int32, ndim=1, contiguous=True)
    device = slots.device
    n = slots.shape[0]
    if out is None:
        out = t.empty((n, 576), dtype=t.bfloat16, device=device)
    tensor(out, "out", t.bfloat16, ndim=2, device=device, inner_contiguous=True)
    if out.shape[0] != n or out.shape[1] != 576:
        raise ValueError(f"nsajit: argument out has shape {list(out.shape)}: expected [{n}, 576]")
    stride = _leading_stride(out, "out", 576)
    args = _lib.Fp8KvGatherArgs(slots=ptr(slots), n=_int32(n, "slots.shape[0]", 0), out=ptr(out),
                                out_row_stride=576 if stride is None else stride)
    _cache_fields(args, cache, device)
    _call(library().nsajit_fp8_kv_gather, args, device)
    return out


# nsajit.h's NSAJIT_TOPK_ALGORITHM_* values, in order.
_TOPK_ALGORITHMS = ("exact_sweeps", "cluster_sweeps", "speculative_sweep", "dense_registers", "cluster_lists")


def _spec(family, h_q=0, topk=2048, page_size=1, mode="decode", kv_dtype="bf16", next_n=1, fused_transform=False,
          sorted=False, threads=0, block_tokens=0, heads_per_cta=0, arch=None, precise=False, score_dtype="fp32",
          topk_algorithm="exact_sweeps"):
    if family not in _lib.FAMILIES:
        raise ValueError(f"nsajit: argument family = {family!r}: expected one of {', '.join(_lib.FAMILIES)}")
    if kv_dtype not in ("bf16", "fp8"):
        raise ValueError(f"nsajit: argument kv_dtype = {kv_dtype!r}: expected 'bf16' or 'fp8'")
    if score_dtype not in ("fp32", "bf16"):
        raise ValueError(f"nsajit: argument score_dtype = {score_dtype!r}: expected 'fp32' or 'bf16'")
    if topk_algorithm not in _TOPK_ALGORITHMS:
        raise ValueError(f"nsajit: argument topk_algorithm = {topk_algorithm!r}: expected one of "
                         f"{', '.join(map(repr, _TOPK_ALGORITHMS))}")
    s = _lib.KernelSpec(family=_lib.FAMILIES[family], h_q=_int32(h_q, "h_q"), topk=_int32(topk, "topk"),
                        page_size=_int32(page_size, "page_size"), mode=_mode(mode, "mode"),
                        kv_dtype=_lib.KV_BF16 if kv_dtype == "bf16" else _lib.KV_FP8_E4M3,
                        next_n=_int32(next_n, "next_n"), fused_transform=1 if fused_transform else 0,
                        sorted=1 if sorted else 0, threads=_int32(threads, "threads"),
                        block_tokens=_int32(block_tokens, "block_tokens"),
                        heads_per_cta=_int32(heads_per_cta, "heads_per_cta"), precise=1 if precise else 0,
                        score_dtype=1 if score_dtype == "bf16" else 0,
                        topk_algorithm=_TOPK_ALGORITHMS.index(topk_algorithm))
    if arch is not None:
        text = str(arch).removeprefix("sm_")
        suffix = text[-1] if text and text[-1].isalpha() else ""
        digits = text[: len(text) - len(suffix)]
        # The library's own rule (parse_arch), so its messages never see a wrapped or coded value.
        if not (digits.isascii() and digits.isdigit()) or not 90 <= int(digits) <= 199 or suffix not in ("", "a", "f"):
            raise ValueError(f"nsajit: argument arch = {arch!r}: expected sm_<90..199> with an optional 'a' or "
                             "'f' suffix, e.g. 'sm_90a' or '90a'")
        s.arch_sm = int(digits)
        s.arch_suffix = ord(suffix) if suffix else 0
    return s


_SPEC_FIELDS = _spec.__code__.co_varnames[1:_spec.__code__.co_argcount]


def _torch_has_gpu():
    try:
        return bool(torch().cuda.is_available())
    except ImportError:
        return False


def _spec_of(caller, family, spec):
    """_spec(family, **spec), with a misspelled field named as the caller's argument."""
    for name in spec:
        if name not in _SPEC_FIELDS:
            raise TypeError(f"nsajit: {caller}: unknown spec field {name!r}: expected one of {', '.join(_SPEC_FIELDS)}")
    return _spec(family, **spec)


def _record(r):
    return KernelRecord(r.name.decode(), _lib.SOURCES.get(r.source, str(r.source)), r.compile_ms, r.load_ms,
                        r.cubin_bytes, bool(r.on_disk))


def precompile(family, **spec):
    """Puts one kernel's cubin into the disk cache (nsajit::precompile). family: 'topk',
    'index_transform', 'sparse_mla' ('sparse_mla_decode', its former name, is accepted),
    'sparse_mla_combine', 'fp8_kv_quantize', 'fp8_kv_gather'; keyword fields as in nsajit/spec.hpp (h_q, topk, page_size, mode, kv_dtype
    'bf16' / 'fp8', next_n, fused_transform, sorted, threads, block_tokens, heads_per_cta, precise,
    score_dtype 'fp32' / 'bf16', topk_algorithm 'exact_sweeps' / 'cluster_sweeps' /
    'speculative_sweep' / 'dense_registers' / 'cluster_lists') and
    arch ('sm_90a'; None = the current device). Returns a KernelRecord."""
    s = _spec_of("precompile", family, spec)
    r = _lib.KernelRecord()
    _precompile_call(lambda: library().nsajit_precompile(ctypes.byref(s), ctypes.byref(r)), s.arch_sm == 0)
    return _record(r)


def _precompile_call(call, on_current_device):
    """Runs a C ABI precompile that may need a device: torch's current one when torch sees a GPU, else the C ABI's."""
    if on_current_device and _torch_has_gpu():
        with launch_on(torch().cuda.current_device()):
            _lib.check(call())
    elif on_current_device:
        _with_arch_hint(lambda: _lib.check(call()))
    else:
        _lib.check(call())


def _with_arch_hint(call):
    """Runs a C ABI call that asks the current device for the arch; its failure says how to go without one."""
    try:
        return call()
    except CudaError as e:
        raise CudaError(f"{e} (to compile without a GPU, name the arch: arch='sm_90a', or arch=sm_90a in spec text)") from None


def precompile_text(text):
    """Puts one kernel's cubin into the disk cache, the spec given as text (nsajit_precompile_text):
    its readable name ('sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a', as
    kernel_name, jit_records and `nsajit precompile --manifest` write it) or canonical text
    ('family=sparse_mla h_q=64 kernel=wgmma schedule=seesaw'; without arch= the current device's,
    which needs a GPU). Reaches every tile field, including sparse MLA's kernel, producer_warps,
    schedule and combine. Returns a KernelRecord."""
    if not isinstance(text, str):
        raise TypeError(f"nsajit: argument text has type {type(text).__name__}: expected a str")
    if "\0" in text:
        raise ValueError(f"nsajit: argument text = {text!r}: expected no NUL character")
    r = _lib.KernelRecord()
    # Whether the text names an arch is the C ABI's to decide: on torch's device either way.
    _precompile_call(lambda: library().nsajit_precompile_text(text.encode(), ctypes.byref(r)), True)
    return _record(r)


def kernel_name(family, **spec):
    """The readable kernel name of a spec (needs arch= without a GPU)."""
    s = _spec_of("kernel_name", family, spec)
    call = lambda: _lib.text(library().nsajit_kernel_name, ctypes.byref(s))
    return _with_arch_hint(call) if s.arch_sm == 0 else call()


def generate_source(family, **spec):
    """The generated CUDA source of a spec (needs arch= without a GPU)."""
    s = _spec_of("generate_source", family, spec)
    call = lambda: _lib.text(library().nsajit_generate_source, ctypes.byref(s))
    return _with_arch_hint(call) if s.arch_sm == 0 else call()


def jit_records():
    """One KernelRecord per kernel this process obtained a cubin for, in first-use order."""
    lib = library()
    count = ctypes.c_size_t(0)
    _lib.check(lib.nsajit_jit_record_count(ctypes.byref(count)))
    out = []
    for i in range(count.value):
        r = _lib.KernelRecord()
        _lib.check(lib.nsajit_jit_record(i, ctypes.byref(r)))
        out.append(_record(r))
    return out
