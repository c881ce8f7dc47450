"""Loading libnsajit and the ctypes mirror of include/nsajit/nsajit.h (ABI 2).

The library is found, in order: $NSAJIT_LIBRARY (a path; nothing else is tried when it is set),
the CMake build tree of the source checkout this package was installed from (or is imported
from), the install trees under sys.prefix and /usr/local, then the dynamic loader's path.
"""
import ctypes
import os
import sys
import threading
from pathlib import Path

ABI_VERSION = 2

# nsajit_status
OK = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_CUDA = 2
ERROR_COMPILE = 3
ERROR_CAPTURE = 4
ERROR_BUFFER_TOO_SMALL = 5
ERROR_OUT_OF_MEMORY = 6
ERROR_INTERNAL = 7
ERROR_NOT_PRECOMPILED = 8

MODES = {"decode": 0, "prefill": 1, "ragged": 2}
KV_BF16, KV_FP8_E4M3 = 0, 1
SCALE_FORMATS = {"fp32": 0, "ue8m0": 1}
FAMILIES = {
    "index_transform": 0,
    "topk": 1,
    "sparse_mla": 2,
    "sparse_mla_decode": 2,  # the family's former name
    "sparse_mla_combine": 3,
    "fp8_kv_quantize": 4,
    "fp8_kv_gather": 5,
}
SOURCES = {0: "memory", 1: "disk_cache", 2: "compiled"}


class NsajitError(RuntimeError):
    """A failed nsajit call; .status is the C ABI's nsajit_status."""

    status = ERROR_INTERNAL


class InvalidArgument(NsajitError, ValueError):
    """A bad argument: nothing was compiled or launched."""

    status = ERROR_INVALID_ARGUMENT


class CudaError(NsajitError):
    status = ERROR_CUDA


class CompileError(NsajitError):
    status = ERROR_COMPILE


class CaptureError(NsajitError):
    """The call needs a kernel compile (or a wait for another process's) while its stream is capturing a CUDA graph."""

    status = ERROR_CAPTURE


class NotPrecompiledError(NsajitError):
    """Strict mode (NSAJIT_NO_JIT=1): the kernel is not in the cache; run `nsajit precompile`."""

    status = ERROR_NOT_PRECOMPILED


_ERRORS = {
    ERROR_INVALID_ARGUMENT: InvalidArgument,
    ERROR_CUDA: CudaError,
    ERROR_COMPILE: CompileError,
    ERROR_CAPTURE: CaptureError,
    ERROR_NOT_PRECOMPILED: NotPrecompiledError,
}

_c_int32_p = ctypes.POINTER(ctypes.c_int32)
_c_float_p = ctypes.POINTER(ctypes.c_float)


class _Struct(ctypes.Structure):
    def __init__(self, **fields):
        super().__init__()
        self.struct_size = ctypes.sizeof(self)
        for k, v in fields.items():
            setattr(self, k, v)


_C_TYPES = {
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "u64": ctypes.c_uint64,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
    "size": ctypes.c_size_t,
    "ptr": ctypes.c_void_p,
    "char256": ctypes.c_char * 256,
}


def _struct(name, fields):
    """The ctypes mirror of an nsajit.h struct: struct_size, then `fields` ("type name, ...", the
    header's order; types as in _C_TYPES). _bind checks each size against the library's."""
    pairs = [f.split() for f in fields.replace("\n", " ").split(",")]
    return type(name, (_Struct,), {"_fields_": [("struct_size", ctypes.c_size_t)] +
                                   [(n, _C_TYPES[t]) for t, n in pairs]})


# The §1 page-table fields shared by the transform and the fused top-k.
_TRANSFORM_FIELDS = ("ptr page_table, i32 page_table_width, i64 page_table_row_stride, i32 page_size, "
                     "ptr cu_seqlens_q, i32 num_requests, ptr offsets")
# The FP8 paged cache (§4) as quantize and gather address it.
_FP8_CACHE_FIELDS = "ptr cache, i64 num_pages, i32 page_size, i64 page_stride_bytes"

IndexTransformArgs = _struct("IndexTransformArgs",
                             "i32 mode, ptr topk_indices, ptr out, i32 rows, i32 topk, " + _TRANSFORM_FIELDS)
TopkArgs = _struct("TopkArgs", f"""ptr scores, i64 score_row_stride, ptr lengths, ptr row_starts, ptr out,
    i32 rows, i32 width, i32 topk, i32 sorted, i32 fused_transform, i32 mode, {_TRANSFORM_FIELDS}, i32 next_n,
    i32 score_dtype""")
SparseMlaArgs = _struct("SparseMlaArgs", """ptr q, ptr kv, i64 num_slots, i64 kv_row_stride, i32 kv_dtype,
    i32 page_size, i64 kv_page_stride, ptr indices, ptr topk_length, ptr out, ptr lse, ptr max_logits, i32 rows,
    i32 next_n, i32 h_q, i32 topk, f32 sm_scale, ptr workspace, size workspace_bytes, i32 num_splits, i32 precise,
    ptr attn_sink""")
Fp8KvQuantizeArgs = _struct("Fp8KvQuantizeArgs",
                            f"ptr kv, i64 kv_row_stride, ptr slots, i32 n, {_FP8_CACHE_FIELDS}, i32 scale_fmt, i32 reserved")
Fp8KvGatherArgs = _struct("Fp8KvGatherArgs", f"{_FP8_CACHE_FIELDS}, ptr slots, i32 n, ptr out, i64 out_row_stride")
KernelSpec = _struct("KernelSpec", """i32 family, i32 h_q, i32 topk, i32 page_size, i32 mode, i32 kv_dtype,
    i32 next_n, i32 fused_transform, i32 sorted, i32 threads, i32 block_tokens, i32 heads_per_cta, i32 arch_sm,
    i32 arch_suffix, i32 precise, i32 score_dtype, i32 topk_algorithm, i32 reserved""")
KernelRecord = _struct("KernelRecord",
                       "char256 name, i32 source, f64 compile_ms, f64 load_ms, u64 cubin_bytes, i32 on_disk")

# (name, restype, argtypes) of every C ABI function.
_SIGNATURES = [
    ("nsajit_abi_version", ctypes.c_int, []),
    ("nsajit_version", ctypes.c_char_p, []),
    ("nsajit_last_error", ctypes.c_char_p, []),
    ("nsajit_status_name", ctypes.c_char_p, [ctypes.c_int]),
    ("nsajit_index_transform_defaults", IndexTransformArgs, []),
    ("nsajit_index_transform", ctypes.c_int, [ctypes.POINTER(IndexTransformArgs), ctypes.c_void_p]),
    ("nsajit_topk_defaults", TopkArgs, []),
    ("nsajit_topk", ctypes.c_int, [ctypes.POINTER(TopkArgs), ctypes.c_void_p]),
    ("nsajit_sparse_mla_defaults", SparseMlaArgs, []),
    ("nsajit_sparse_mla_decode", ctypes.c_int, [ctypes.POINTER(SparseMlaArgs), ctypes.c_void_p]),
    ("nsajit_sparse_mla_prefill", ctypes.c_int, [ctypes.POINTER(SparseMlaArgs), ctypes.c_void_p]),
    ("nsajit_sparse_mla_num_splits", ctypes.c_int,
     [ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, _c_int32_p]),
    ("nsajit_sparse_mla_workspace_bytes", ctypes.c_int,
     [ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_size_t)]),
    ("nsajit_fp8_kv_quantize_defaults", Fp8KvQuantizeArgs, []),
    ("nsajit_fp8_kv_quantize", ctypes.c_int, [ctypes.POINTER(Fp8KvQuantizeArgs), ctypes.c_void_p]),
    ("nsajit_fp8_kv_gather_defaults", Fp8KvGatherArgs, []),
    ("nsajit_fp8_kv_gather", ctypes.c_int, [ctypes.POINTER(Fp8KvGatherArgs), ctypes.c_void_p]),
    ("nsajit_kernel_spec_defaults", KernelSpec, []),
    ("nsajit_precompile", ctypes.c_int, [ctypes.POINTER(KernelSpec), ctypes.POINTER(KernelRecord)]),
    ("nsajit_precompile_text", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(KernelRecord)]),
    ("nsajit_cache_dir", ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    ("nsajit_nvrtc_version", ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    ("nsajit_generate_source", ctypes.c_int,
     [ctypes.POINTER(KernelSpec), ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    ("nsajit_kernel_name", ctypes.c_int,
     [ctypes.POINTER(KernelSpec), ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    ("nsajit_jit_record_count", ctypes.c_int, [ctypes.POINTER(ctypes.c_size_t)]),
    ("nsajit_jit_record", ctypes.c_int, [ctypes.c_size_t, ctypes.POINTER(KernelRecord)]),
]

_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    here = Path(__file__).resolve().parent
    dirs = []
    try:
        from . import _build_info  # written by setup.py when installed from a source checkout

        dirs += [Path(d) for d in _build_info.SOURCE_BUILD_DIRS]
    except ImportError:
        pass
    dirs.append(here.parent.parent / "build")  # imported from python/ of a source checkout
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix, "/usr/local", "/opt/nsajit"]):
        dirs += [Path(prefix) / "lib", Path(prefix) / "lib64"]
    for d in dirs:
        for name in ("libnsajit.so", "libnsajit.so.0"):
            p = d / name
            if p.is_file():
                yield str(p)
    yield "libnsajit.so.0"  # the dynamic loader's search path
    yield "libnsajit.so"


def _bind(lib):
    for name, restype, argtypes in _SIGNATURES:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    abi = lib.nsajit_abi_version()
    if abi != ABI_VERSION:
        raise ImportError(f"nsajit: the library's C ABI version is {abi}; this package needs {ABI_VERSION}")
    for name, restype, _ in _SIGNATURES:  # each *_defaults() reports the C struct's size
        if name.endswith("_defaults") and getattr(lib, name)().struct_size != ctypes.sizeof(restype):
            raise ImportError(f"nsajit: {restype.__name__} has {ctypes.sizeof(restype)} bytes here, "
                              f"{getattr(lib, name)().struct_size} in the library (nsajit.h and _lib.py differ)")
    return lib


def library():
    """The loaded libnsajit (ctypes.CDLL); loads it on first use."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        explicit = os.environ.get("NSAJIT_LIBRARY")
        tried = []
        for path in [explicit] if explicit else _candidates():
            try:
                lib = ctypes.CDLL(path)
                bound = _bind(lib)
            except (OSError, AttributeError) as e:  # AttributeError: a library without nsajit's symbols
                tried.append((path, e))
                continue
            _lib = bound
            _lib_path = path
            return _lib
        if explicit:
            raise ImportError(f"nsajit: cannot load NSAJIT_LIBRARY = {explicit!r}: {tried[0][1]} "
                              "(expected the path of libnsajit.so; unset it to search the usual places)")
        raise ImportError(
            "nsajit: libnsajit.so not found (set NSAJIT_LIBRARY to its path, or build the source tree "
            "with CMake, or install it with cmake --install). Tried:\n  " +
            "\n  ".join(f"{path}: {e}" for path, e in tried))


def library_path():
    library()
    return _lib_path


def check(status):
    """Raises the exception of a failed status with the thread's message."""
    if status == OK:
        return
    lib = library()
    message = lib.nsajit_last_error().decode("utf-8", "replace")
    name = lib.nsajit_status_name(status).decode()
    raise _ERRORS.get(status, NsajitError)(message or name)


def text(fn, *args):
    """Calls a buffer-convention function (…, char* buffer, size_t capacity, size_t* needed)."""
    needed = ctypes.c_size_t(0)
    status = fn(*args, None, 0, ctypes.byref(needed))
    if status not in (OK, ERROR_BUFFER_TOO_SMALL):
        check(status)
    buf = ctypes.create_string_buffer(needed.value)
    check(fn(*args, buf, needed.value, ctypes.byref(needed)))
    return buf.value.decode("utf-8", "replace")
