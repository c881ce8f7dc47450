/* nsajit/nsajit.h — the stable C ABI of nsajit (C99; no C++ needed to include or call it).
 *
 * For hosts that are not C++20 (C, Rust, Go, Python through ctypes, a C++ engine built with
 * another compiler or standard library). It wraps the C++ API of nsajit/kernels.hpp and
 * nsajit/jit.hpp one to one; the semantics (docs/nsa-semantics.md) and the SGLang / FlashMLA
 * function each call follows are documented there and repeated briefly here.
 *
 * Conventions
 * - Every function returns an nsajit_status. NSAJIT_OK is 0; on any other value
 *   nsajit_last_error() returns a message for the calling thread naming the argument, its value
 *   and what was expected ("nsajit::topk: argument topk = 100: expected a multiple of 64 in
 *   [64, 4096]"). Nothing is compiled or launched after an argument error; no C++ exception
 *   ever leaves this API.
 * - Argument structs begin with `struct_size`: set it to sizeof(the struct) as your header
 *   declares it. Fields may be appended in later versions of this ABI, always at the previous
 *   sizeof (no argument struct has tail padding; a `reserved` field holds its place and must be
 *   0), so struct_size tells versions apart: an older caller's smaller struct gets the documented
 *   defaults for the fields it lacks; a newer caller's larger struct is accepted when every byte
 *   this library does not know is zero. A struct_size below this ABI's sizeof, or more than 4096
 *   bytes above it, is NSAJIT_ERROR_INVALID_ARGUMENT. Use the nsajit_*_defaults() initialisers to
 *   start from the documented defaults (zero-initialising by hand is not the same: e.g. topk).
 * - Pointers in the structs are CUDA device pointers in the context current on the calling
 *   thread (the device's primary context when none is current); null or misaligned pointers are
 *   argument errors. Tensors are row-major and contiguous unless a stride field says otherwise;
 *   strides are in elements unless named *_bytes.
 * - `stream` is a CUstream (or cudaStream_t) passed as void*; NULL is the legacy default stream.
 *   Launches are asynchronous on that stream; no host synchronisation, no allocation.
 * - A kernel is compiled on first use (NVRTC, through the on-disk cache). While `stream` is
 *   capturing a CUDA graph a call that would need NVRTC, or would wait for another process that
 *   holds the kernel's cache entry lock, fails with NSAJIT_ERROR_CAPTURE naming the kernel:
 *   precompile it (nsajit_precompile) or make the call once before capturing.
 *   In strict mode (environment NSAJIT_NO_JIT=1) nothing is compiled: a kernel missing from the
 *   cache fails with NSAJIT_ERROR_NOT_PRECOMPILED naming it and the `nsajit precompile` command.
 * - Booleans are int32 0 or 1; enums are int32 with the values below (anything else is an
 *   argument error).
 * - Thread safety: every function may be called from any thread, concurrently.
 */
#ifndef NSAJIT_NSAJIT_H
#define NSAJIT_NSAJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define NSAJIT_API __attribute__((visibility("default")))
#else
#define NSAJIT_API
#endif

/* Incremented when an existing function or field changes meaning or place (never for appended
 * fields). 2: ABI 1 appended fields into the tail padding of earlier struct versions, where an
 * older caller's struct_size could not tell them apart; ABI 2 structs have no tail padding. */
#define NSAJIT_ABI_VERSION 2

typedef enum nsajit_status {
  NSAJIT_OK = 0,
  NSAJIT_ERROR_INVALID_ARGUMENT = 1, /* bad argument or struct; nothing was compiled or launched */
  NSAJIT_ERROR_CUDA = 2,             /* a Driver API call failed (or libcuda.so.1 is missing) */
  NSAJIT_ERROR_COMPILE = 3,          /* NVRTC rejected a generated kernel (message has the log) */
  NSAJIT_ERROR_CAPTURE = 4,          /* the call needs a compile while its stream is capturing */
  NSAJIT_ERROR_BUFFER_TOO_SMALL = 5, /* a caller's text buffer is too small (needed size given) */
  NSAJIT_ERROR_OUT_OF_MEMORY = 6,    /* host allocation failed */
  NSAJIT_ERROR_INTERNAL = 7,         /* anything else (a bug: please report the message) */
  NSAJIT_ERROR_NOT_PRECOMPILED = 8   /* strict mode (NSAJIT_NO_JIT=1): the kernel is not in the cache */
} nsajit_status;

/* Values of the int32 enum fields. */
enum { NSAJIT_MODE_DECODE = 0, NSAJIT_MODE_PREFILL = 1, NSAJIT_MODE_RAGGED = 2 };
enum { NSAJIT_KV_BF16 = 0, NSAJIT_KV_FP8_E4M3 = 1 };
/* Dtype of the top-k scores (nsajit_topk_args::score_dtype). */
enum { NSAJIT_SCORES_FP32 = 0, NSAJIT_SCORES_BF16 = 1 };
/* Top-k kernel variant (nsajit_kernel_spec::topk_algorithm; nsajit/spec.hpp's TopkAlgorithm). */
enum { NSAJIT_TOPK_ALGORITHM_EXACT_SWEEPS = 0, NSAJIT_TOPK_ALGORITHM_CLUSTER_SWEEPS = 1,
       NSAJIT_TOPK_ALGORITHM_SPECULATIVE_SWEEP = 2, NSAJIT_TOPK_ALGORITHM_DENSE_REGISTERS = 3,
       NSAJIT_TOPK_ALGORITHM_CLUSTER_LISTS = 4 };
enum { NSAJIT_SCALE_FP32 = 0, NSAJIT_SCALE_UE8M0 = 1 };
enum {
  NSAJIT_FAMILY_INDEX_TRANSFORM = 0,
  NSAJIT_FAMILY_TOPK = 1,
  NSAJIT_FAMILY_SPARSE_MLA_DECODE = 2,
  NSAJIT_FAMILY_SPARSE_MLA_COMBINE = 3,
  NSAJIT_FAMILY_FP8_KV_QUANTIZE = 4,
  NSAJIT_FAMILY_FP8_KV_GATHER = 5
};
enum { NSAJIT_SOURCE_MEMORY = 0, NSAJIT_SOURCE_DISK_CACHE = 1, NSAJIT_SOURCE_COMPILED = 2 };

/* NSAJIT_ABI_VERSION of the loaded library: compare with the header's before calling anything. */
NSAJIT_API int nsajit_abi_version(void);

/* The library version ("0.1.0"); a static string. */
NSAJIT_API const char* nsajit_version(void);

/* The message of the calling thread's last nsajit call ("" when it succeeded). Valid until the
 * thread's next nsajit call. */
NSAJIT_API const char* nsajit_last_error(void);

/* The name of a status ("NSAJIT_ERROR_INVALID_ARGUMENT"); a static string. */
NSAJIT_API const char* nsajit_status_name(nsajit_status status);

/* ---- §1 Index transform: top-k positions -> KV-cache slots ----------------------------------
 * Follows SGLang's transform_index_page_table_decode / _prefill (nsa/transform_index.py) and the
 * ragged `topk_indices + offset` path. decode: row r uses page-table row r (num_requests == rows);
 * prefill: row r of request b (cu_seqlens_q[b] <= r < cu_seqlens_q[b+1]) uses row b; ragged:
 * out = idx + offsets[r]. page_size 1: page_table_1 (entries are slots); P > 1: page ids,
 * slot = page_table[b, p / P] * P + p % P. An invalid position (< 0, or past the table) gives -1. */
typedef struct nsajit_index_transform_args {
  size_t struct_size;
  int32_t mode;                   /* NSAJIT_MODE_*; default decode */
  const int32_t* topk_indices;    /* int32 [rows, topk] positions or -1 */
  int32_t* out;                   /* int32 [rows, topk] slots or -1 */
  int32_t rows;                   /* >= 0 */
  int32_t topk;                   /* multiple of 64 in [64, 16384]; default 2048 */
  const int32_t* page_table;      /* int32 [num_requests, page_table_width] (decode / prefill) */
  int32_t page_table_width;       /* entries per row */
  int64_t page_table_row_stride;  /* elements between rows; 0 = page_table_width */
  int32_t page_size;              /* [1, 4096]; default 1 */
  const int32_t* cu_seqlens_q;    /* prefill: int32 [num_requests + 1], last == rows */
  int32_t num_requests;
  const int32_t* offsets;         /* ragged: int32 [rows] */
} nsajit_index_transform_args;
NSAJIT_API nsajit_index_transform_args nsajit_index_transform_defaults(void);
NSAJIT_API nsajit_status nsajit_index_transform(const nsajit_index_transform_args* args, void* stream);

/* ---- §2 Top-k of the indexer scores, optionally fused with the §1 transform -----------------
 * Follows sgl_kernel's fast_topk_v2 (plain), fast_topk_transform_fused (decode / prefill) and
 * fast_topk_transform_ragged_fused, for any topk that is a multiple of 64 up to 4096. Per row:
 * row_start = clamp(row_starts[r], 0, width); len = min(lengths[r], width - row_start);
 * len <= 0: all -1; len <= topk: 0..len-1 then -1; else exactly topk positions of the top-k
 * scores (NaN lowest, ties to the lower index); bf16 scores (score_dtype) are exact on the bf16
 * values. Positions are relative to row_start. sorted = 1
 * orders by score descending. Every [width] column of every row must be mapped memory.
 * fused_transform = 1: each position goes through the §1 transform (decode: row r uses
 * page-table row r / next_n; prefill: through cu_seqlens_q; ragged: + offsets[r]). */
typedef struct nsajit_topk_args {
  size_t struct_size;
  const void* scores;             /* fp32 or bf16 (score_dtype) [rows, width], row stride score_row_stride */
  int64_t score_row_stride;       /* elements; 0 = width */
  const int32_t* lengths;         /* int32 [rows] */
  const int32_t* row_starts;      /* optional int32 [rows]; NULL = all 0 */
  int32_t* out;                   /* int32 [rows, topk] */
  int32_t rows;                   /* 0 <= rows < 2^27 */
  int32_t width;                  /* 0..4194304 */
  int32_t topk;                   /* multiple of 64 in [64, 4096]; default 2048 */
  int32_t sorted;                 /* 0 or 1 */
  int32_t fused_transform;        /* 0 or 1; the fields below are ignored when 0 */
  int32_t mode;                   /* NSAJIT_MODE_* */
  const int32_t* page_table;      /* int32 [num_requests, page_table_width] */
  int32_t page_table_width;
  int64_t page_table_row_stride;  /* elements; 0 = page_table_width */
  int32_t page_size;              /* [1, 4096]; default 1 (page_table_1) */
  const int32_t* cu_seqlens_q;    /* prefill: int32 [num_requests + 1], last == rows */
  int32_t num_requests;           /* decode: rows / next_n; prefill: requests */
  const int32_t* offsets;         /* ragged: int32 [rows] */
  int32_t next_n;                 /* decode: query rows per request, 1..8; default 1 */
  int32_t score_dtype;            /* NSAJIT_SCORES_*; default fp32 */
} nsajit_topk_args;
NSAJIT_API nsajit_topk_args nsajit_topk_defaults(void);
NSAJIT_API nsajit_status nsajit_topk(const nsajit_topk_args* args, void* stream);

/* ---- §3 Sparse MLA attention (decode and prefill rows) --------------------------------------
 * Follows FlashMLA's flash_mla_with_kvcache(..., indices=...) (decode, FP8 KV) and
 * flash_mla_sparse_fwd (prefill, bf16 KV): out = softmax(sm_scale * q . kv[idx]) . kv[idx][:512],
 * lse natural log, max_logits = max_j sm_scale * q . kv[j] (natural units). Indices < 0 or >=
 * num_slots contribute nothing and are never read; a row with none gives out 0, lse +inf,
 * max_logits -inf. bf16 KV: [num_slots, 576],
 * row stride kv_row_stride elements. fp8 KV: uint8 [num_pages, page_size, 656] (§4), pages
 * kv_page_stride bytes apart (FlashMLA's padded page stride), num_slots = num_pages * page_size.
 * Split-KV: with a workspace (16-byte aligned, >= nsajit_sparse_mla_workspace_bytes) and
 * num_splits 0 (automatic) or 2..64, small batches split each row over several CTAs and a second
 * kernel merges them (same stream; a programmatic dependent launch on sm_90+: set NSAJIT_PDL=0 in the
 * environment where the driver or a graph capture rejects it). Without a workspace: one CTA per
 * (row, head group of 16-64 heads), batch-invariant results. */
typedef struct nsajit_sparse_mla_args {
  size_t struct_size;
  const void* q;                  /* bf16 [rows, h_q, 576] contiguous, 16-byte aligned */
  const void* kv;                 /* see above; 16-byte aligned */
  int64_t num_slots;              /* valid indices are [0, num_slots) */
  int64_t kv_row_stride;          /* bf16: elements, multiple of 8, >= 576; default 576 */
  int32_t kv_dtype;               /* NSAJIT_KV_*; default bf16 */
  int32_t page_size;              /* fp8: tokens per page; default 1 */
  int64_t kv_page_stride;         /* fp8: bytes between pages; 0 = page_size * 656; multiple of 16 */
  const int32_t* indices;         /* int32 [rows, topk] slots (or invalid) */
  const int32_t* topk_length;     /* optional int32 [rows]: only the first n indices are used
                                     (n clamped to [0, topk]) */
  void* out;                      /* bf16 [rows, h_q, 512], 16-byte aligned */
  float* lse;                     /* fp32 [rows, h_q] */
  float* max_logits;              /* optional fp32 [rows, h_q] */
  int32_t rows;                   /* b * next_n (decode) or s_q (prefill); rows * max(1, h_q / 16) <= 2^31 - 1 */
  int32_t next_n;                 /* 1..8; default 1 */
  int32_t h_q;                    /* 8, 16, 32, 64, 128; default 16 */
  int32_t topk;                   /* multiple of 64 in [64, 16384]; default 2048 */
  float sm_scale;                 /* > 0, finite */
  void* workspace;                /* NULL: no split (num_splits must then be 0 or 1, workspace_bytes 0) */
  size_t workspace_bytes;
  int32_t num_splits;             /* 0 automatic (with a workspace), 1 no split, 2..64 forced */
  int32_t precise;                /* 0 (default): P rounded to bf16 before P.V (FlashMLA's precision);
                                     1: P as bf16 hi + lo, tighter (nsa-semantics.md "Tolerances"), slower */
  const float* attn_sink;         /* optional fp32 [h_q], natural log (FlashMLA's attn_sink; NULL: none, the
                                     default): out[row, h] scaled by 1 / (1 + exp(attn_sink[h] - lse[row, h]));
                                     +inf gives 0, -inf the plain output; lse, max_logits and rows with no
                                     valid index (out 0) unchanged. 4-byte aligned. */
} nsajit_sparse_mla_args;
NSAJIT_API nsajit_sparse_mla_args nsajit_sparse_mla_defaults(void);
NSAJIT_API nsajit_status nsajit_sparse_mla_decode(const nsajit_sparse_mla_args* args, void* stream);
/* The same kernels for prefill rows (next_n must be 1). */
NSAJIT_API nsajit_status nsajit_sparse_mla_prefill(const nsajit_sparse_mla_args* args, void* stream);
/* The split count a launch with these sizes uses (num_splits 0 = automatic for the current
 * device; needs a GPU then) and the workspace bytes it needs (0 when it does not split). */
NSAJIT_API nsajit_status nsajit_sparse_mla_num_splits(int32_t rows, int32_t h_q, int32_t topk, int32_t num_splits,
                                                      int32_t* splits_out);
NSAJIT_API nsajit_status nsajit_sparse_mla_workspace_bytes(int32_t rows, int32_t h_q, int32_t topk,
                                                           int32_t num_splits, size_t* bytes_out);

/* ---- §4 FP8 KV cache (656 bytes per token: 512 e4m3, 4 fp32 scales, 64 bf16 rope) ------------
 * Quantize-and-store follows FlashMLA's / SGLang's quantize_k_cache (x / scale), scale =
 * max(amax / 448, FLT_MIN) (vLLM's floor; SGLang's writer has none), or a power of two with
 * NSAJIT_SCALE_UE8M0; an all-zero tile stores zeros and scale FLT_MIN / 2^-13; a slot < 0 or >=
 * num_pages * page_size is skipped. Gather-and-dequantize follows SGLang's
 * dequantize_k_cache_paged: out[i] = bf16(e4m3 * scale) of slots[i]; an invalid slot gives zeros. */
typedef struct nsajit_fp8_kv_quantize_args {
  size_t struct_size;
  const void* kv;                 /* bf16 [n, 576], row stride kv_row_stride (2-byte aligned) */
  int64_t kv_row_stride;          /* elements, >= 576; default 576 */
  const int32_t* slots;           /* int32 [n] */
  int32_t n;                      /* >= 0 */
  void* cache;                    /* uint8 [num_pages, page_size, 656], 16-byte aligned */
  int64_t num_pages;              /* >= 0 */
  int32_t page_size;              /* [1, 4096]; default 64 */
  int64_t page_stride_bytes;      /* 0 = page_size * 656; else a multiple of 16, >= that */
  int32_t scale_fmt;              /* NSAJIT_SCALE_*; default fp32 */
  int32_t reserved;               /* 0 */
} nsajit_fp8_kv_quantize_args;
NSAJIT_API nsajit_fp8_kv_quantize_args nsajit_fp8_kv_quantize_defaults(void);
NSAJIT_API nsajit_status nsajit_fp8_kv_quantize(const nsajit_fp8_kv_quantize_args* args, void* stream);

typedef struct nsajit_fp8_kv_gather_args {
  size_t struct_size;
  const void* cache;              /* uint8 [num_pages, page_size, 656], 16-byte aligned */
  int64_t num_pages;              /* >= 0 */
  int32_t page_size;              /* [1, 4096]; default 64 */
  int64_t page_stride_bytes;      /* 0 = page_size * 656; else a multiple of 16, >= that */
  const int32_t* slots;           /* int32 [n] */
  int32_t n;                      /* >= 0 */
  void* out;                      /* bf16 [n, 576], row stride out_row_stride (2-byte aligned) */
  int64_t out_row_stride;         /* elements, >= 576; default 576 */
} nsajit_fp8_kv_gather_args;
NSAJIT_API nsajit_fp8_kv_gather_args nsajit_fp8_kv_gather_defaults(void);
NSAJIT_API nsajit_status nsajit_fp8_kv_gather(const nsajit_fp8_kv_gather_args* args, void* stream);

/* ---- JIT: specs, precompiling, the cache, records -------------------------------------------- */
/* One generated kernel (nsajit/spec.hpp's KernelSpec). Fields a family does not use stay at the
 * defaults; tile fields 0 = the family default. arch_sm 0 = the current device's architecture
 * (needs a GPU); else e.g. 90 with arch_suffix 'a' for sm_90a (0 for none). */
typedef struct nsajit_kernel_spec {
  size_t struct_size;
  int32_t family;                 /* NSAJIT_FAMILY_*; default topk */
  int32_t h_q;                    /* sparse MLA: 8..128 */
  int32_t topk;                   /* default 2048 */
  int32_t page_size;              /* index transform / fused top-k; default 1 */
  int32_t mode;                   /* NSAJIT_MODE_* */
  int32_t kv_dtype;               /* NSAJIT_KV_* */
  int32_t next_n;                 /* default 1 */
  int32_t fused_transform;        /* top-k: 0 or 1 */
  int32_t sorted;                 /* top-k: 0 or 1 */
  int32_t threads;                /* tile: threads per CTA, 0 = default */
  int32_t block_tokens;           /* tile: sparse MLA tokens per stage, 0 = default */
  int32_t heads_per_cta;          /* tile: sparse MLA heads per CTA, 0 = default */
  int32_t arch_sm;                /* 0 = current device; e.g. 90 */
  int32_t arch_suffix;            /* 'a' or 0 */
  int32_t precise;                /* sparse MLA: 0 or 1 (P as bf16 hi + lo); default 0 */
  int32_t score_dtype;            /* top-k: NSAJIT_SCORES_*; default fp32 */
  int32_t topk_algorithm;         /* top-k: NSAJIT_TOPK_ALGORITHM_*; default exact sweeps */
  int32_t reserved;               /* 0 */
} nsajit_kernel_spec;
NSAJIT_API nsajit_kernel_spec nsajit_kernel_spec_defaults(void);

/* Where one kernel's cubin came from on its first request in this process. */
typedef struct nsajit_kernel_record {
  size_t struct_size;
  char name[256];                 /* readable name, e.g. "topk.topk2048.sm_90a" (NUL-terminated; a longer
                                     name is cut at 255 bytes). The C++ record's cache key is not here. */
  int32_t source;                 /* NSAJIT_SOURCE_* (DISK_CACHE = hit, COMPILED = miss) */
  double compile_ms;              /* NVRTC time (0 on a hit) */
  double load_ms;                 /* read + verify (+ write after compiling) */
  uint64_t cubin_bytes;
  int32_t on_disk;                /* 0: compiled but the cache entry could not be written */
} nsajit_kernel_record;

/* Puts the spec's cubin into the disk cache (compiling if needed; no GPU needed when arch_sm is
 * given). record_out may be NULL; else its struct_size must be set. */
NSAJIT_API nsajit_status nsajit_precompile(const nsajit_kernel_spec* spec, nsajit_kernel_record* record_out);
/* As nsajit_precompile, for a spec given as text (NUL-terminated, < 4096 bytes): its readable name
 * ("sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a", as nsajit_kernel_name and
 * `nsajit precompile --manifest` write it) or canonical text ("family=sparse_mla h_q=64
 * kernel=wgmma schedule=seesaw": any fields in any order, the rest at their defaults; without arch=
 * the current device's, which needs a GPU). It reaches every tile field, including those
 * nsajit_kernel_spec lacks (sparse MLA's kernel, producer_warps, schedule and combine). */
NSAJIT_API nsajit_status nsajit_precompile_text(const char* spec_text, nsajit_kernel_record* record_out);

/* Copies a NUL-terminated text into buffer (capacity bytes). *needed_out (may be NULL) gets the
 * bytes needed including the NUL; a small buffer gives NSAJIT_ERROR_BUFFER_TOO_SMALL. buffer may be
 * NULL with capacity 0 to ask for the size: that call also returns NSAJIT_ERROR_BUFFER_TOO_SMALL,
 * with *needed_out set. */
NSAJIT_API nsajit_status nsajit_cache_dir(char* buffer, size_t capacity, size_t* needed_out);
NSAJIT_API nsajit_status nsajit_nvrtc_version(char* buffer, size_t capacity, size_t* needed_out);
/* The generated CUDA source of a spec (same buffer convention). */
NSAJIT_API nsajit_status nsajit_generate_source(const nsajit_kernel_spec* spec, char* buffer, size_t capacity,
                                                size_t* needed_out);
/* The readable name of a spec (same buffer convention). */
NSAJIT_API nsajit_status nsajit_kernel_name(const nsajit_kernel_spec* spec, char* buffer, size_t capacity,
                                            size_t* needed_out);

/* JIT records: one per spec this process obtained a cubin for, in first-use order. count_out gets
 * their number; nsajit_jit_record copies record `index` (< count) into record_out (struct_size
 * set by the caller). */
NSAJIT_API nsajit_status nsajit_jit_record_count(size_t* count_out);
NSAJIT_API nsajit_status nsajit_jit_record(size_t index, nsajit_kernel_record* record_out);

#ifdef __cplusplus
}
#endif

#endif /* NSAJIT_NSAJIT_H */
