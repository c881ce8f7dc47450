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
//   NVRTC failures nsajit::CompileError. Values inside device memory (indices, lengths) cannot be
//   checked on the host without a sync; the kernels handle every value as the spec says.
// Semantics: ../shared/spec/nsa-semantics.md (§ numbers below).
#pragma once

#include <cstdint>

#include "nsajit/spec.hpp"

// Same typedef as cuda.h, so this header does not need the toolkit's headers.
typedef struct CUstream_st* CUstream;

namespace nsajit {

// §1 Index transform: raw top-k positions -> KV-cache slots.
// Follows SGLang's transform_index_page_table_decode / _prefill (nsa/transform_index.py) and the
// ragged `topk_indices + offset` path of nsa_backend.py, with -1 for every invalid position.
struct IndexTransformArgs {
  IndexMode mode = IndexMode::decode;
  const std::int32_t* topk_indices = nullptr;  // int32 [rows, topk]: position in request, or -1
  std::int32_t* out = nullptr;                 // int32 [rows, topk]: slot, or -1
  int rows = 0;                                // query rows (>= 0)
  int topk = 2048;                             // multiple of 64
  // decode / prefill: the request's page table. page_size == 1: page_table_1 (SGLang's
  // req_to_token), entries are slots. page_size P > 1: the real page table, entries are page ids,
  // slot(p) = page_table[b, p / P] * P + p % P.
  const std::int32_t* page_table = nullptr;  // int32 [num_requests, page_table_width]
  int page_table_width = 0;                  // entries per page-table row
  std::int64_t page_table_row_stride = 0;    // elements between rows; 0 = page_table_width
  int page_size = 1;                         // P >= 1
  // decode: row r uses page-table row r (num_requests == rows).
  // prefill: row r of request b (cu_seqlens_q[b] <= r < cu_seqlens_q[b+1]) uses row b.
  const std::int32_t* cu_seqlens_q = nullptr;  // int32 [num_requests + 1], last == rows
  int num_requests = 0;
  // ragged: out = idx + offsets[r] for valid idx (idx >= 0), else -1.
  const std::int32_t* offsets = nullptr;  // int32 [rows]
};
void index_transform(const IndexTransformArgs& args, CUstream stream = nullptr);

// §2 Top-k of the indexer scores. Follows SGLang's fast_topk_v2 (sgl_kernel) / the
// `topk_transform` contract: output positions are relative to row_start; every slot is written.
// len = clamp(lengths[r], width - row_start); len <= 0: all -1; len <= topk: 0..len-1 then -1
// (scores not read); len > topk: the top-k (NaN lowest, ties to the lower index), order
// unspecified but deterministic.
struct TopkArgs {
  const float* scores = nullptr;         // fp32 [rows, width], row stride score_row_stride
  std::int64_t score_row_stride = 0;     // elements; 0 = width
  const std::int32_t* lengths = nullptr;  // int32 [rows]
  const std::int32_t* row_starts = nullptr;  // optional int32 [rows]; nullptr = all 0
  std::int32_t* out = nullptr;           // int32 [rows, topk]
  int rows = 0;
  int width = 0;                         // columns of scores (>= 0)
  int topk = 2048;                       // multiple of 64, <= 4096
};
void topk(const TopkArgs& args, CUstream stream = nullptr);

// §3 Sparse MLA attention, decode form (also valid for prefill rows: every query row has its own
// index row). Follows FlashMLA's flash_mla_with_kvcache(..., indices=...) / flash_mla_sparse_fwd:
// out = softmax(sm_scale * q . kv[idx]) . kv[idx][:512], lse natural log; invalid indices
// (< 0 or >= num_slots) contribute nothing and are never read; a row with none gives out 0,
// lse +inf.
struct SparseMlaDecodeArgs {
  const void* q = nullptr;            // bf16 [rows, h_q, 576] contiguous (rows = b * next_n)
  const void* kv = nullptr;           // bf16 [num_slots, 576], row stride kv_row_stride
  std::int64_t num_slots = 0;
  std::int64_t kv_row_stride = 576;   // elements, >= 576
  const std::int32_t* indices = nullptr;  // int32 [rows, topk] transformed indices (slots or -1)
  const std::int32_t* topk_length = nullptr;  // optional int32 [rows]: use only the first n
  void* out = nullptr;                // bf16 [rows, h_q, 512]
  float* lse = nullptr;               // fp32 [rows, h_q]
  int rows = 0;
  int h_q = 16;                       // 8, 16, 32, 64, 128
  int topk = 2048;                    // multiple of 64
  float sm_scale = 0.f;               // > 0 and finite
  KvDtype kv_dtype = KvDtype::bf16;   // only bf16 so far
};
void sparse_mla_decode(const SparseMlaDecodeArgs& args, CUstream stream = nullptr);

}  // namespace nsajit
