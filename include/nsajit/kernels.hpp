// nsajit/kernels.hpp — the kernels, as launches on the caller's stream.
//
// Conventions for every function here:
// - Pointers are device pointers in the CUDA context current on the calling thread (the device's
//   primary context when none is current). Tensors are row-major and contiguous unless a stride
//   argument says otherwise; strides are in elements.
// - The call compiles the kernel on first use (NVRTC, through the on-disk cache), then launches on
//   `stream` without host synchronisation or allocation. Outputs are written by the kernel; every
//   output element is written.
// - Bad arguments throw nsajit::InvalidArgument naming the argument, its value and what was
//   expected, before anything is compiled or launched. Driver failures throw nsajit::CudaError,
//   NVRTC failures nsajit::CompileError; in strict mode (NSAJIT_NO_JIT=1) a kernel missing from the
//   cache throws nsajit::KernelNotPrecompiled, and an NSAJIT_NO_JIT value other than 0 or 1
//   InvalidArgument (nsajit/jit.hpp). Values inside device memory (indices, lengths) cannot be
//   checked on the host without a sync; the kernels handle every value as the spec says.
// Semantics: docs/nsa-semantics.md in the source tree (§ numbers below).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nsajit/spec.hpp"

// Same typedef as cuda.h, so this header does not need the toolkit's headers.
typedef struct CUstream_st* CUstream;

namespace nsajit {

// §1 Index transform: raw top-k positions -> KV-cache slots.
// Follows SGLang's transform_index_page_table_decode / _prefill (nsa/transform_index.py) and the
// ragged `topk_indices + offset` path of nsa_backend.py, with -1 for every invalid position:
// decode / prefill: a position < 0 or >= page_table_width * page_size, or whose page-table entry
// is negative, gives -1; slot = page_table[b, p / P] * P + p % P (64-bit, stored as int32); a
// prefill row outside [cu_seqlens_q[0], cu_seqlens_q[num_requests]) is all -1. ragged: out = idx +
// offsets[r] for idx >= 0 (int32 wrapping add), else -1.
// Errors: InvalidArgument for rows < 0, topk not a multiple of 64 in [64, 16384], mode, page_size
// outside [1, 4096], page_table_width < 0, page_table_row_stride in (0, page_table_width),
// num_requests (decode: == rows; prefill: >= 0), and, when rows > 0, a null or misaligned (4 bytes)
// topk_indices, out, offsets (ragged), cu_seqlens_q (prefill) or page_table (read when
// num_requests > 0 and page_table_width > 0).
struct IndexTransformArgs {
  IndexMode mode = IndexMode::decode;
  const std::int32_t* topk_indices = nullptr;  // int32 [rows, topk]: position in request, or -1
  std::int32_t* out = nullptr;                 // int32 [rows, topk]: slot, or -1
  int rows = 0;                                // query rows (>= 0)
  int topk = 2048;                             // multiple of 64 in [64, 16384]
  // decode / prefill: the request's page table. page_size == 1: page_table_1 (SGLang's
  // req_to_token), entries are slots. page_size P > 1: the real page table, entries are page ids,
  // slot(p) = page_table[b, p / P] * P + p % P.
  const std::int32_t* page_table = nullptr;  // int32 [num_requests, page_table_width]
  int page_table_width = 0;                  // entries per page-table row
  std::int64_t page_table_row_stride = 0;    // elements between rows; 0 = page_table_width
  int page_size = 1;                         // P in [1, 4096]
  // decode: row r uses page-table row r (num_requests == rows).
  // prefill: row r of request b (cu_seqlens_q[b] <= r < cu_seqlens_q[b+1]) uses row b.
  const std::int32_t* cu_seqlens_q = nullptr;  // int32 [num_requests + 1], last == rows
  int num_requests = 0;
  // ragged: out = idx + offsets[r] for valid idx (idx >= 0), else -1.
  const std::int32_t* offsets = nullptr;  // int32 [rows]
};
void index_transform(const IndexTransformArgs& args, CUstream stream = nullptr);

// §2 Top-k of the indexer scores, optionally fused with the §1 transform. Follows SGLang's
// sgl_kernel fast_topk_v2 (plain), fast_topk_transform_fused (decode / prefill through
// page_table_size_1 and cu_seqlens_q) and fast_topk_transform_ragged_fused (+ offsets), the
// `topk_transform` contract of nsa_backend.py, without their topk == 2048 restriction.
//
// Per row r: row_start = clamp(row_starts[r], 0, width) (0 without row_starts);
// len = min(lengths[r], width - row_start) (a negative length is <= 0, never a huge unsigned one).
//   len <= 0:        all -1.
//   len <= topk:     0, 1, ..., len-1, then -1 (scores are not read).
//   len > topk:      exactly topk distinct positions in [0, len) whose scores are the true top-k
//                    multiset: NaN ranks below -inf, -0.0 == +0.0, ties at the threshold go to the
//                    lower index. Exact for every input (no candidate buffer that can overflow).
// Scores: fp32, or bf16 (score_dtype; DeepGEMM's MQA-logits kernels can write bf16 logits): bf16
// values are widened exactly, so the selection, ties and order are those of the bf16 values.
// Positions are relative to row_start. Every output slot is written; the valid entries are the
// first min(len, topk). The output is bit-identical across runs, launch shapes and batchmates
// (each row depends on its own scores only). Order: sorted == false: the positions whose score is
// above the threshold in increasing index order, then the threshold ties in increasing index
// order; sorted == true: by score descending, ties by increasing index (rows with len <= topk keep
// 0..len-1, as their scores are not read). sorted costs a second launch (a bitonic sort per row).
//
// fused_transform: each position goes through the §1 transform before it is written (-1 stays
// -1); only positions in [0, len) ever reach the page table:
//   decode:  row r uses page-table row r / next_n (next_n MTP query rows per request, 1..8;
//            rows == num_requests * next_n). next_n = 1 is SGLang's decode / target-verify case.
//   prefill: row r uses page-table row b, cu_seqlens_q[b] <= r < cu_seqlens_q[b + 1]; a row of no
//            request is all -1.
//   ragged:  out = position + offsets[r] (int32 wrapping add); no page table.
// decode / prefill: page_size 1 = page_table_1 (slots); P > 1 = the real page table (page ids):
// slot = page_table[b, p / P] * P + p % P (64-bit, stored as int32); a position >=
// page_table_width * P or a negative entry gives -1.
//
// Launch: one CTA per row for rows that fit shared memory; long rows with few rows are split over
// a thread-block cluster of up to 8 CTAs (16 for a single row; sm_90); the part of a slice that
// does not fit shared memory is re-read from global memory. One CTA per row of long slices reads
// the row once: a sample bounds the threshold and one sweep lists the scores above it, with the
// exact sweeps as the fallback (same bytes either way). A few long rows without row_starts may
// have their slices prefetched into L2 before their lengths are read, so every row's whole
// [width] columns must be mapped memory even where len <= topk (no value is read there). See
// templates/topk.cuh and docs/notes/topk.md.
// Errors: InvalidArgument for rows outside [0, 2^27) (up to 16 CTAs a row in the grid), width < 0
// or > 4194304 (2^22: the classify's per-position bitmaps of a slice must fit shared memory), topk not a multiple of 64 in [64, 4096],
// score_row_stride in (0, width), score_dtype not fp32 or bf16, a null pointer that would be read
// or scores not aligned to their element size, and (fused) the
// index_transform checks: mode, page_size in [1, 4096], page_table_width >= 0, row stride,
// num_requests (decode: rows / next_n; rows % next_n == 0), next_n in [1, 8] (decode only).
struct TopkArgs {
  const void* scores = nullptr;          // fp32 or bf16 (score_dtype) [rows, width], row stride score_row_stride
  std::int64_t score_row_stride = 0;     // elements; 0 = width (any stride: 1024-byte aligned rows are fine)
  ScoreDtype score_dtype = ScoreDtype::fp32;  // bf16: exact on the bf16 values, half the bytes read
  const std::int32_t* lengths = nullptr;  // int32 [rows]
  const std::int32_t* row_starts = nullptr;  // optional int32 [rows]; nullptr = all 0
  std::int32_t* out = nullptr;           // int32 [rows, topk]: positions, or slots when fused
  int rows = 0;                          // 0 <= rows < 2^27
  int width = 0;                         // columns of scores, 0..4194304
  int topk = 2048;                       // multiple of 64, <= 4096
  bool sorted = false;                   // order by score descending (see above)
  // Fused transform (§2 fused forms); the fields below are ignored unless fused_transform.
  bool fused_transform = false;
  IndexMode mode = IndexMode::decode;
  const std::int32_t* page_table = nullptr;  // int32 [num_requests, page_table_width] (decode/prefill)
  int page_table_width = 0;                  // entries per page-table row
  std::int64_t page_table_row_stride = 0;    // elements; 0 = page_table_width
  int page_size = 1;                         // 1 = page_table_1; P > 1 = real page table
  const std::int32_t* cu_seqlens_q = nullptr;  // prefill: int32 [num_requests + 1], last == rows
  int num_requests = 0;                      // decode: rows / next_n; prefill: requests
  const std::int32_t* offsets = nullptr;     // ragged: int32 [rows]
  int next_n = 1;                            // decode: query rows per request (MTP), 1..8
};
void topk(const TopkArgs& args, CUstream stream = nullptr);

// §3 Sparse MLA attention, decode and prefill (every query row has its own index row: prefill
// rows are s_q query tokens, decode rows are b requests x next_n MTP tokens, flattened).
// Follows FlashMLA's flash_mla_with_kvcache(..., indices=...) (decode, FP8 KV) and
// flash_mla_sparse_fwd (prefill, bf16 KV): out = softmax(sm_scale * q . kv[idx]) . kv[idx][:512],
// lse = log sum_j exp(sm_scale * q . kv[j]) (natural log), max_logits = max_j sm_scale * q . kv[j]
// (the same natural units). Invalid indices (< 0 or >= num_slots) contribute
// nothing and are never read; a row with none gives out 0, lse +inf, max_logits -inf.
// KV layouts: bf16 [num_slots, 576] (row stride kv_row_stride elements), or the FP8 paged cache
// (§4) uint8 [num_pages, page_size, 656], num_slots = num_pages * page_size, read directly and
// dequantized in the kernel (bf16(float(e4m3) * scale)); slot s = page s / page_size, row s % page_size.
//
// Modes. Batch-invariant (the default: no workspace, or num_splits = 1): one CTA walks the whole
// index row of its (row, head group of 16-64 heads); a row's results are bit-identical whatever its batchmates and
// the launch's batch size. Split-KV (workspace given, num_splits 0 = automatic or > 1): when
// rows x h_q / 64 CTAs cannot fill the GPU, each row's tiles are split over num_splits CTAs that
// write fp32 partials into `workspace`, merged by a second kernel (same stream; on sm_90+ a
// programmatic dependent launch unless programmatic_launch is false or NSAJIT_PDL=0 is set in the
// environment, e.g. for a driver or graph-capture setup that rejects PDL). Results are
// deterministic for a given split count, but the automatic count depends on the batch size, so
// split mode is not batch-invariant (differences of ~1 bf16 ulp).
// Errors (InvalidArgument, before any driver call, naming the entry point called): rows < 0 or
// past the grid's bound (rows * max(1, h_q / 16) <= 2^31 - 1), h_q, topk not a multiple of 64 in
// [64, 16384], sm_scale not finite and > 0, next_n outside 1..8 or not dividing rows, num_slots < 0,
// kv_dtype; bf16: kv_row_stride not a multiple of 8 >= 576; fp8: page_size < 1, kv_page_stride not 0
// or a multiple of 16 >= page_size * 656, num_slots not a multiple of page_size; num_splits outside
// 0..64, a forced count of several splits without a workspace or with workspace_bytes below
// sparse_mla_workspace_bytes; and, when rows > 0, a null or misaligned q, kv (16 bytes; kv may be
// null when num_slots is 0), indices, lse (4), out (16), or a misaligned topk_length, max_logits,
// attn_sink (4) or workspace (16). sparse_mla_prefill also refuses next_n != 1.
struct SparseMlaDecodeArgs {
  const void* q = nullptr;            // bf16 [rows, h_q, 576] contiguous (rows = b * next_n), 16-byte aligned
  const void* kv = nullptr;           // 16-byte aligned; bf16: [num_slots, 576], row stride kv_row_stride;
                                      // fp8: uint8 [num_pages, page_size, 656], pages kv_page_stride apart
  std::int64_t num_slots = 0;         // valid indices are [0, num_slots) (fp8: num_pages * page_size)
  std::int64_t kv_row_stride = 576;   // bf16: elements, a multiple of 8, >= 576
  KvDtype kv_dtype = KvDtype::bf16;   // bf16 or fp8_e4m3
  int page_size = 1;                  // fp8: tokens per page (>= 1)
  std::int64_t kv_page_stride = 0;    // fp8: bytes between pages; 0 = page_size * 656; a multiple of 16
  const std::int32_t* indices = nullptr;  // int32 [rows, topk] transformed indices (slots or -1)
  const std::int32_t* topk_length = nullptr;  // optional int32 [rows]: use only the first n, clamped to [0, topk]
  void* out = nullptr;                // bf16 [rows, h_q, 512], 16-byte aligned
  float* lse = nullptr;               // fp32 [rows, h_q]
  float* max_logits = nullptr;        // optional fp32 [rows, h_q]
  int rows = 0;                       // query rows (b * next_n for decode, s_q for prefill);
                                      // rows * max(1, h_q / 16) <= 2^31 - 1 (the grid's CTAs)
  int next_n = 1;                     // decode MTP tokens per request, 1..8; rows must be a multiple
  int h_q = 16;                       // 8, 16, 32, 64, 128
  int topk = 2048;                    // multiple of 64, <= 16384
  float sm_scale = 0.f;               // > 0 and finite
  // Split-KV. workspace == nullptr: batch-invariant, no split (and no tuning database, whose
  // choices differ between batch sizes: the heuristics' variant). Otherwise 16-byte aligned, at least
  // sparse_mla_workspace_bytes(rows, h_q, topk, num_splits) bytes (InvalidArgument for a forced
  // num_splits that does not fit; an automatic count is lowered to what fits), not shared with a
  // concurrent call.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  int num_splits = 0;                 // 0 = automatic (with a workspace), 1 = no split, 2..64 forced
  bool programmatic_launch = true;    // split-KV: launch the combine as a programmatic dependent (PDL)
  // Precision (nsa-semantics.md "Tolerances"). false (default): P is rounded to bf16 before P.V,
  // as FlashMLA and FlashAttention-3 do: |out - ref| <= max(3e-3, 2/128 |ref|, 2^-8 sum_j p_j |v_j|)
  // (the last term scales with V; 2^-8 bounds bf16 P's relative rounding). true: P is carried
  // as bf16 hi + lo (two P.V products), max(1e-3, 2/128 |ref|); no anchor offers it, and it costs
  // ~13-19 % of the prefill throughput (docs/notes/sparse_mla.md).
  bool precise = false;
  // Attention sink (FlashMLA's attn_sink): optional fp32 [h_q] device array in natural-log units
  // (the units of lse), 4-byte aligned. Each output row of head h is scaled by
  // 1 / (1 + exp(attn_sink[h] - lse[row, h])), lse being the row's own (natural log, without the
  // sink): +inf gives out 0, -inf the plain output. lse and max_logits are not affected; a row
  // with no valid index keeps out 0, lse +inf. Applied in the kernel's epilogue (the combine's
  // with split-KV). nullptr: no sink.
  const float* attn_sink = nullptr;
};
void sparse_mla_decode(const SparseMlaDecodeArgs& args, CUstream stream = nullptr);
// The same kernel for prefill rows (s_q query tokens; InvalidArgument unless next_n is 1).
void sparse_mla_prefill(const SparseMlaDecodeArgs& args, CUstream stream = nullptr);
// Split count the launch uses: num_splits when > 0, else the automatic choice for the current
// device (1 when rows x h_q / 64 CTAs already fill it), or the tuning database's when larger
// (the largest it chooses for (rows, h_q, topk) over KV dtypes: a bound for sizing the
// workspace). At most 64 and at most the row's tiles; 1 for rows == 0. InvalidArgument for sizes
// a launch would refuse (rows < 0 or above the grid's bound, h_q, topk, num_splits outside 0..64);
// num_splits 0 asks the current device (CudaError without a GPU).
int sparse_mla_num_splits(int rows, int h_q, int topk, int num_splits = 0);
// Workspace bytes the split-KV launch needs (0 when it does not split, and for rows == 0):
// splits * rows * h_q * (512 + 2) * 4. The same errors as sparse_mla_num_splits.
std::size_t sparse_mla_workspace_bytes(int rows, int h_q, int topk, int num_splits = 0);

// §4 FP8 KV cache, 656 bytes per token, in pages: uint8 [num_pages, page_size, 656] (a page may be
// padded: page_stride_bytes apart). Token of slot s = page s / page_size, row s % page_size:
//   bytes [0, 512)   512 x e4m3 (OCP E4M3FN) latent dims 0..511,
//   bytes [512, 528) 4 x fp32 scale; scale t covers dims [128t, 128t + 128),
//   bytes [528, 656) 64 x bf16 rope dims 512..575, copied bit-exact.
// All byte offsets are 64-bit (a pool may exceed 2^31 bytes). The cache must be 16-byte aligned.
enum class Fp8ScaleFormat : std::uint8_t {
  fp32,   // scale = max(amax / 448, FLT_MIN) in fp32 (vLLM's writer; SGLang's without the floor)
  ue8m0,  // scale = 2^ceil(log2(max(amax / 448, 1e-4))), a power of two stored as fp32
          // (FlashMLA's test quantizer at HEAD)
};

// Quantize-and-store (the cache writer). Follows FlashMLA's quantize_k_cache (tests/quant.py) and
// SGLang's NSA quantize_k_cache (nsa/quant_k_cache.py, reference path: x / scale, not x * (1 /
// scale)), with vLLM's max(..., FLT_MIN) so that an all-zero tile is not 0 / 0. For row i with
// slot = slots[i] in [0, num_pages * page_size): per 128-dim tile t, amax = max |x| over the tile,
// scale as scale_fmt says, latent byte d = e4m3(x_d / scale) (fp32 division, saturated to ±448,
// round to nearest even; an all-zero tile stores zeros and scale FLT_MIN (fp32) or 2^-13 (ue8m0:
// 1e-4 rounded up to a power of two), never NaN); scales at
// bytes 512..527; rope dims copied. A slot < 0 or >= num_pages * page_size is skipped: its row is
// not read and no byte of the cache changes. Two rows with the same valid slot race (the token's
// bytes may mix both rows): give each slot once.
// Finite inputs are assumed; a NaN input dim stores e4m3 NaN (0x7f | sign) and does not affect amax.
// InvalidArgument: n < 0, kv_row_stride < 576, scale_fmt, page_size outside [1, 4096],
// num_pages < 0 or a pool past 2^63 bytes, page_stride_bytes; when n > 0 a null or misaligned kv
// (2 bytes), slots (4) or cache (16; cache may be null when num_pages == 0). n == 0 launches nothing.
struct Fp8KvQuantizeArgs {
  const void* kv = nullptr;                // bf16 [n, 576], row stride kv_row_stride
  std::int64_t kv_row_stride = 576;        // elements, >= 576
  const std::int32_t* slots = nullptr;     // int32 [n]: slot = page * page_size + offset; < 0 = skip
  int n = 0;                               // rows (>= 0)
  void* cache = nullptr;                   // uint8 [num_pages, page_size, 656], 16-byte aligned
  std::int64_t num_pages = 0;              // >= 0
  int page_size = 64;                      // tokens per page, in [1, 4096]
  std::int64_t page_stride_bytes = 0;      // bytes between pages; 0 = page_size * 656; else a
                                           // multiple of 16, >= page_size * 656
  Fp8ScaleFormat scale_fmt = Fp8ScaleFormat::fp32;
};
void fp8_kv_quantize(const Fp8KvQuantizeArgs& args, CUstream stream = nullptr);

// Gather-and-dequantize: out[i] = the token of slots[i] as bf16 [576]: latent dim d =
// bf16(float(e4m3) * scale[d / 128]) (fp32 product, round to nearest even), rope dims copied
// bit-exact. An invalid slot (< 0 or >= num_pages * page_size) gives an all-zero row and is never
// dereferenced. Follows SGLang's dequantize_k_cache_paged (nsa/dequant_k_cache.py), FlashMLA's
// dequantize_k_cache (tests/quant.py) and vLLM's cp_gather_and_upconvert_fp8_kv_cache.
// Columns [576, out_row_stride) of out are not written. InvalidArgument: n < 0, out_row_stride < 576,
// the cache arguments as for fp8_kv_quantize; when n > 0 a null or misaligned slots (4) or out (2).
struct Fp8KvGatherArgs {
  const void* cache = nullptr;             // uint8 [num_pages, page_size, 656], 16-byte aligned
  std::int64_t num_pages = 0;              // >= 0
  int page_size = 64;                      // tokens per page, in [1, 4096]
  std::int64_t page_stride_bytes = 0;      // bytes between pages; 0 = page_size * 656 (as above)
  const std::int32_t* slots = nullptr;     // int32 [n]
  int n = 0;                               // rows (>= 0)
  void* out = nullptr;                     // bf16 [n, 576], row stride out_row_stride
  std::int64_t out_row_stride = 576;       // elements, >= 576
};
void fp8_kv_gather(const Fp8KvGatherArgs& args, CUstream stream = nullptr);

}  // namespace nsajit
