"""CPU part: import without torch, the ctypes mirror of nsajit.h, C ABI error paths, argument
validation (the torch checks run when torch is installed; a CPU build is enough)."""
import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

import nsajit
from nsajit import _lib


def test_import_without_torch_and_no_torch_until_a_tensor_call():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch blocked by the test")
        sys.meta_path.insert(0, Block())
        import nsajit, nsajit.compat.sgl_kernel, nsajit.compat.sglang_nsa, nsajit.compat.flash_mla
        assert nsajit.abi_version() == 2
        assert "torch" not in sys.modules
        print(nsajit.kernel_name("topk", topk=2048, arch="sm_90a"))
        try:
            nsajit.topk(None, None)
        except ImportError as e:
            print("import error:", e)
        try:  # no arch: the current device through the C ABI, never an ImportError
            print("precompiled", nsajit.precompile("topk", topk=2048).name)
        except nsajit.CudaError as e:
            assert "name the arch" in str(e), e
            print("precompiled", "no GPU:", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert "topk" in r.stdout
    assert "import error: torch blocked" in r.stdout
    assert "precompiled" in r.stdout


def test_structs_match_the_c_header():
    lib = nsajit.library()
    for fn, cls in [(lib.nsajit_topk_defaults, _lib.TopkArgs),
                    (lib.nsajit_index_transform_defaults, _lib.IndexTransformArgs),
                    (lib.nsajit_sparse_mla_defaults, _lib.SparseMlaArgs),
                    (lib.nsajit_fp8_kv_quantize_defaults, _lib.Fp8KvQuantizeArgs),
                    (lib.nsajit_fp8_kv_gather_defaults, _lib.Fp8KvGatherArgs),
                    (lib.nsajit_kernel_spec_defaults, _lib.KernelSpec)]:
        d = fn()
        assert d.struct_size == ctypes.sizeof(cls), cls.__name__
    t = lib.nsajit_topk_defaults()
    assert (t.topk, t.page_size, t.next_n) == (2048, 1, 1)
    m = lib.nsajit_sparse_mla_defaults()
    assert (m.kv_row_stride, m.h_q, m.topk, m.page_size, m.next_n) == (576, 16, 2048, 1, 1)


def _status(fn, args):
    return fn(ctypes.byref(args), None), nsajit.library().nsajit_last_error().decode()


def test_c_abi_error_paths_through_ctypes():
    lib = nsajit.library()
    assert lib.nsajit_topk(None, None) == _lib.ERROR_INVALID_ARGUMENT
    assert "argument args = null" in lib.nsajit_last_error().decode()
    args = _lib.TopkArgs(topk=100, rows=1, width=8)
    status, message = _status(lib.nsajit_topk, args)
    assert status == _lib.ERROR_INVALID_ARGUMENT
    assert "argument topk = 100" in message and "multiple of 64" in message
    args = _lib.TopkArgs(topk=2048, rows=1, width=8, scores=0x10000, lengths=0x10000, out=0x10003)
    status, message = _status(lib.nsajit_topk, args)
    assert status == _lib.ERROR_INVALID_ARGUMENT and "argument out = 0x10003" in message and "aligned" in message
    args.struct_size = 3
    status, message = _status(lib.nsajit_topk, args)
    assert status == _lib.ERROR_INVALID_ARGUMENT and "struct_size = 3" in message
    m = _lib.SparseMlaArgs(rows=1, h_q=16, topk=2048, sm_scale=float("nan"), next_n=1, kv_row_stride=576, page_size=1)
    status, message = _status(lib.nsajit_sparse_mla_decode, m)
    assert status == _lib.ERROR_INVALID_ARGUMENT and "argument sm_scale = nan" in message
    q = _lib.Fp8KvQuantizeArgs(kv_row_stride=576, page_size=64, scale_fmt=9)
    status, message = _status(lib.nsajit_fp8_kv_quantize, q)
    assert status == _lib.ERROR_INVALID_ARGUMENT and "argument scale_fmt = 9" in message
    # A successful call clears the thread's message.
    assert nsajit.cache_dir()
    assert lib.nsajit_last_error().decode() == ""


def test_errors_map_to_python_exceptions():
    with pytest.raises(nsajit.InvalidArgument, match="topk") as e:
        nsajit.kernel_name("topk", topk=100, arch="sm_90a")
    assert isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match="family"):
        nsajit.precompile("attention")
    with pytest.raises(ValueError, match="arch"):
        nsajit.kernel_name("topk", arch="sm_x")
    with pytest.raises(TypeError, match="precompile: unknown spec field 'threds': expected one of h_q, topk"):
        nsajit.precompile("topk", threds=512)
    with pytest.raises(TypeError, match="kernel_name: unknown spec field 'archh'"):
        nsajit.kernel_name("topk", archh="sm_90a")
    with pytest.raises(nsajit.InvalidArgument, match="h_q"):
        nsajit.sparse_mla_num_splits(1, 12, 2048, 4)
    assert nsajit.sparse_mla_num_splits(1, 16, 2048, 4) == 4
    assert nsajit.sparse_mla_workspace_bytes(2, 16, 2048, 4) == 4 * 2 * 16 * 514 * 4


def test_names_sources_records():
    assert nsajit.kernel_name("sparse_mla_decode", h_q=16, kv_dtype="fp8", arch="sm_90a").startswith("sparse_mla.h16")
    assert "precise" not in nsajit.kernel_name("sparse_mla_decode", h_q=128, arch="sm_90a")
    assert nsajit.kernel_name("sparse_mla_decode", h_q=128, arch="sm_90a", precise=True).endswith(".precise.sm_90a")
    assert nsajit.kernel_name("topk", threads=256, topk_algorithm="dense_registers",
                              arch="sm_90a") == "topk.topk2048.t256.dense_registers.sm_90a"
    with pytest.raises(ValueError, match="topk_algorithm"):
        nsajit.kernel_name("topk", topk_algorithm="lists", arch="sm_90a")
    with pytest.raises(nsajit.InvalidArgument, match="threads"):  # dense_registers runs 256 threads only
        nsajit.kernel_name("topk", threads=512, topk_algorithm="dense_registers", arch="sm_90a")
    seesaw = "sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a"
    assert nsajit.precompile_text(seesaw).name == seesaw
    assert nsajit.precompile_text("family=sparse_mla h_q=64 kernel=wgmma schedule=seesaw arch=sm_90a").name == seesaw
    with pytest.raises(nsajit.InvalidArgument, match="bogus"):
        nsajit.precompile_text("sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.bogus.sm_90a")
    with pytest.raises(TypeError, match="text has type bytes"):
        nsajit.precompile_text(b"topk.topk2048.sm_90a")
    with pytest.raises(ValueError, match="no NUL"):  # ctypes would cut the text at the NUL
        nsajit.precompile_text("topk.topk2048.sm_90a\0garbage")
    with pytest.raises(nsajit.InvalidArgument, match="threds"):  # named before any device is asked for
        nsajit.precompile_text("family=topk threds=512")
    src = nsajit.generate_source("index_transform", topk=2048, page_size=64, arch="sm_90a")
    assert len(src) > 1000
    assert isinstance(nsajit.jit_records(), list)
    assert nsajit.version() == nsajit.__version__
    assert nsajit.nvrtc_version().count(".") == 1


def test_library_lookup_honours_nsajit_library():
    code = "import nsajit; nsajit.library()"
    env = dict(os.environ, NSAJIT_LIBRARY="/nonexistent/libnsajit.so")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "cannot load NSAJIT_LIBRARY = '/nonexistent/libnsajit.so'" in r.stderr
    assert "set NSAJIT_LIBRARY" not in r.stderr  # it is set: the advice is to fix or unset it
    libc = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6") if os.path.exists(p)), None)
    if libc:  # a real library without nsajit's symbols: an ImportError naming it, not an AttributeError
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(os.environ, NSAJIT_LIBRARY=libc))
        assert r.returncode != 0 and f"cannot load NSAJIT_LIBRARY = '{libc}'" in r.stderr, r.stderr
        assert "nsajit_abi_version" in r.stderr


def test_leading_strides_that_overlap_rows_are_refused_never_sent_as_the_default():
    # An expand()ed tensor has stride 0 in dimension 0, which the C ABI would read as "contiguous".
    class Strided:  # the two attributes the check reads, as torch reports them
        def __init__(self, shape, strides):
            self.shape, self._strides = shape, strides

        def stride(self, dim=None):
            return self._strides if dim is None else self._strides[dim]

    check = nsajit._leading_stride
    with pytest.raises(ValueError, match=r"argument cache has strides \[0, 656, 1\].*>= 41984 bytes"):
        check(Strided((4, 64, 656), (0, 656, 1)), "cache", 64 * 656, "bytes")
    with pytest.raises(ValueError, match=r"argument page_table has strides \[1, 1\].*>= 128 elements"):
        check(Strided((8, 128), (1, 1)), "page_table", 128)
    assert check(Strided((1, 128), (0, 1)), "page_table", 128) is None  # one row: its stride is never used
    assert check(Strided((4, 64, 656), (41984, 656, 1)), "cache", 41984, "bytes") == 41984
    assert check(Strided((2, 576), (640, 1)), "kv", 576) == 640


def test_arch_text_is_checked_as_the_library_reads_it():
    for bad in ("sm_99999999999999999999", "sm_90z", "sm_9x", "sm_80", "sm_", "sm_\u0669\u0660a", "sm_\u00b2"):
        with pytest.raises(ValueError, match=f"argument arch = '{bad}': expected sm_<90..199>"):
            nsajit.kernel_name("topk", arch=bad)
    assert nsajit.kernel_name("topk", arch="sm_90a").endswith(".sm_90a")
    assert nsajit.kernel_name("topk", arch="100f").endswith(".sm_100f")


def test_topk_is_checked_before_its_output_is_allocated():
    for bad in (2**31 - 1, 100, 0, 8192):
        with pytest.raises(ValueError, match=f"argument topk = {bad}"):
            nsajit.topk(None, None, topk=bad)


# ---- argument validation with torch tensors (CPU tensors are enough: checks come first) ----

def _torch():
    return pytest.importorskip("torch")


def test_tensor_checks_name_the_argument():
    torch = _torch()
    scores = torch.zeros(2, 128)
    with pytest.raises(ValueError, match="argument scores is on device cpu"):
        nsajit.topk(scores, torch.zeros(2, dtype=torch.int32))
    with pytest.raises(TypeError, match="argument scores has dtype float16"):
        nsajit.topk(scores.half(), torch.zeros(2, dtype=torch.int32))
    from nsajit.compat.sgl_kernel import fast_topk_v2
    with pytest.raises(TypeError, match="argument score is a list"):
        fast_topk_v2([[1.0]], torch.zeros(1, dtype=torch.int32), 2048)
    with pytest.raises(TypeError, match="argument q has dtype float32"):
        nsajit.sparse_mla(torch.zeros(1, 16, 576), None, None, 0.5)
    from nsajit.compat import flash_mla, sglang_nsa
    with pytest.raises(NotImplementedError, match="indices"):
        flash_mla.flash_mla_with_kvcache(None, None, None, None, 512, None)
    with pytest.raises(NotImplementedError, match="extra_k_cache"):
        flash_mla.flash_mla_with_kvcache(None, None, None, None, 512, None, indices=1, extra_k_cache=1)
    with pytest.raises(NotImplementedError, match="head_dim_v"):
        flash_mla.flash_mla_with_kvcache(None, None, None, None, 256, None, indices=1)
    with pytest.raises(NotImplementedError, match="group_size"):
        sglang_nsa.dequantize_k_cache_paged(None, None, group_size=64)
    with pytest.raises(TypeError, match="argument cache_k"):
        sglang_nsa.quantize_k_cache(torch.zeros(1, 64, 1, 576))
    meta, splits = flash_mla.get_mla_metadata()
    assert splits is None and isinstance(meta, flash_mla.FlashMLASchedMeta)
