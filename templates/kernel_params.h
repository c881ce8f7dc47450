// kernel_params.h — launch parameter blocks, one per family.
//
// Included by the host runtime (C++) and embedded into every generated source, so both sides see
// one definition: builtin types only, no headers, identical layout on host and device. Each kernel
// takes its block by value as its single parameter.
#pragma once

// Shared-memory plans are evaluated on both sides (NVRTC's JIT mode rejects unannotated functions).
#ifdef __CUDACC__
#define NSAJIT_HOST_DEVICE __host__ __device__
#else
#define NSAJIT_HOST_DEVICE
#endif

// ---- DeepSeek-V3.2 MLA shapes (docs/nsa-semantics.md, "Model constants") ----
constexpr int kMlaDimQK = 576;       // d_qk: kv_lora_rank 512 latent dims + 64 rope dims
constexpr int kMlaDimV = 512;        // d_v = kv_lora_rank: V is the latent part of the KV row
constexpr int kFp8KvTokenBytes = 656;  // §4: 512 e4m3 + 4 fp32 scales + 64 bf16 rope
// Sparse MLA tile.combine cluster: CTAs a cluster (a row and head group's splits).
constexpr int kMlaClusterSplits = 2;

struct IndexTransformParams {
  const int* topk_indices;          // [rows, topk]
  int* out;                         // [rows, topk]
  const int* page_table;            // [num_requests, page_table_width]
  long long page_table_row_stride;  // elements
  const int* cu_seqlens_q;          // prefill: [num_requests + 1]
  const int* offsets;               // ragged: [rows]
  long long max_position;           // page_table_width * page_size: positions the table covers
  int rows;
  int num_requests;
};

// Dense rows (NSAJIT_TOPK_DENSE_REGISTERS): each of the 256 threads holds this many 16-byte vectors
// of the row in registers, so slices of at most 256 * NSAJIT_TOPK_DENSE_VECS vectors; their keys'
// exchange, then a short list of the threshold bin's keys (512 words), take
// NSAJIT_TOPK_DENSE_SMEM_VECS vectors of dynamic shared memory from word 0 (the host plans it).
#define NSAJIT_TOPK_DENSE_VECS 9
#define NSAJIT_TOPK_DENSE_SMEM_VECS (256 * NSAJIT_TOPK_DENSE_VECS + 128)

// A cluster-lists message (NSAJIT_TOPK_CLUSTER_LISTS, templates/topk_cluster_lists.cuh): header
// words, then the counts of the 32 first-digit bins top, top - 1, ..., then the keys (a multiple
// of 4 words in all, so messages stay 16-byte aligned; the host plans cluster_list_capacity + this).
#define NSAJIT_TOPK_MSG_HEADER 4  // listed (capacity + 1: did not fit), cut, top bin, 0.0 plateau counts
#define NSAJIT_TOPK_MSG_BINS 32
#define NSAJIT_TOPK_MSG_KEYS (NSAJIT_TOPK_MSG_HEADER + NSAJIT_TOPK_MSG_BINS)

// Dynamic shared memory a top-k launch may use: with ~12.5 KB of static shared memory the total
// stays under sm_90's 227 KB per block.
#ifndef __CUDACC__
constexpr unsigned kTopkMaxDynamicSmem = 215040;
#endif

// Top-k selection paths, one compiled into each kernel (NSAJIT_TOPK_ALGORITHM; the host's
// nsajit::TopkAlgorithm in the same order): one CTA per row for the first, third and fourth, a
// cluster of 2-16 CTAs per row for the second and fifth.
#define NSAJIT_TOPK_EXACT_SWEEPS 0
#define NSAJIT_TOPK_CLUSTER_SWEEPS 1
#define NSAJIT_TOPK_SPECULATIVE_SWEEP 2
#define NSAJIT_TOPK_DENSE_REGISTERS 3
#define NSAJIT_TOPK_CLUSTER_LISTS 4

struct TopkParams {
  const void* scores;          // fp32 or bf16 (NSAJIT_SCORE_BF16) [rows, width]
  long long score_row_stride;  // elements
  const int* lengths;          // [rows]
  const int* row_starts;       // [rows] or null
  int* out;                    // [rows, topk]
  int rows;
  int width;
  // Launch shape (templates/topk.cuh): CTAs per row (= the cluster size: 1, or 2..16 for the
  // cluster algorithms), positions per CTA.
  int ctas_per_row;
  int slice;                   // multiple of 4; the row's CTA c covers [c * slice, (c + 1) * slice)
  int resident_vecs;           // the slice's first resident_vecs 16-byte vectors are kept as keys in
                               // dynamic shared memory; the rest is re-read from global memory
  int phase;                   // 0: select (+ transform); 1 (sorted specs): sort each row, transform
  // Dynamic shared memory of the select phase, offsets in 4-byte words (families/topk/heuristics.cpp):
  int hist_offset;             // first-digit histogram, 4096 words; later the candidate overflow list
  int slots_offset;            // per-thread candidate slots, 4096 words
  int cand_offset;             // C > 1: the cluster-wide candidate list, cand_capacity words
  int overflow_warp_offset;    // uint16 warp of each overflow-list entry, cand_capacity halves
  int bitmap_offset;           // the classify's above and match bitmaps, bitmap_words words each
  int bitmap_words;            // >= 4 * ceil(vectors of the slice / 32): one bit per position
  int cand_capacity;           // <= 4096 keys; a larger threshold bin is rescanned instead
  int slots_per_thread;        // <= 4096 / threads
  // Speculative single sweep (templates/topk_speculative.cuh): a sample of the row gives a lower
  // bound, one sweep lists every score at or above it (per warp, in index order); the row falls
  // back to the exact sweeps when a list overflows or the lists hold fewer than topk scores.
  int prefetch_row;            // each warp first asks L2 for its segment of the row
  int prefetch_slice;          // each CTA first asks L2 for its slice, before it reads the row's length
                               // (rows without row_starts; the plan: a few rows in 8-16 CTA clusters)
  int list_offset;             // the per-warp lists, list_words words: keys in the first half,
  int list_words;              // positions in the second (the sample's histograms at the start)
  // Speculative cluster selection (templates/topk_cluster_lists.cuh): each CTA lists its slice's
  // keys in the first-digit bins down to that of its cluster_list_rank-th largest and sends the
  // list to every CTA, every CTA selects from the C lists; the exact path when they cannot hold the
  // row's selection.
  int cluster_list_offset;     // this CTA's message (36 + capacity words, 16-byte aligned), then
                               // each warp's list: keys, then positions (warps * warp capacity
                               // words each)
  int cluster_list_capacity;   // keys a message may hold, a multiple of 4
  int cluster_warp_capacity;   // keys a warp's list may hold
  int cluster_inbox_offset;    // C messages of 36 + capacity words, 16-byte aligned
  // Fused transform (NSAJIT_FUSED): see IndexTransformParams.
  const int* page_table;            // [num_requests, page_table_row_stride]
  long long page_table_row_stride;  // elements
  long long max_position;           // page_table_width * page_size
  const int* cu_seqlens_q;          // prefill: [num_requests + 1]
  const int* offsets;               // ragged: [rows]
  int num_requests;
};

// ---- Sparse MLA shared-memory plans (bytes of dynamic shared memory of one CTA), used by the
// family's traits for the launch and static_asserted by each kernel against its own layout.

// The wgmma kernel: q + two KV tiles of nine 8 KB swizzled subtiles, P_lo 8 KB, validity flags
// 512 B, alpha and 1/l 256 B each, 64 B of mbarriers, + 1 KB to align the base to the 128-byte
// swizzle's 1 KB period.
NSAJIT_HOST_DEVICE constexpr unsigned sparse_mla_wgmma_smem_bytes() {
  return 3u * 9u * 8192u + 8192u + 512u + 256u + 256u + 64u + 1024u;
}

// The seesaw schedule of the bf16 wgmma kernel (spec tile.schedule = seesaw, the kernel
// templates/sparse_mla_seesaw.cuh): q + two KV
// tiles of nine 8 KB swizzled subtiles (tile 2i in buffer 0, 2i+1 in buffer 1; WG0's bf16 P over
// its tile's rope subtile), WG1's bf16 P in its own 8 KB buffer (so its tile's upper half is freed
// by WG1's own PV), validity flags [2][64] int 512 B, the row maxima
// the two math warpgroups publish [2][64] float 512 B, their row sums for the epilogue [2][64]
// float 512 B, 64 B of mbarriers, + 1 KB to align the base to the swizzle's 1 KB period:
// 232 000 B of the 232 448 B opt-in limit.
NSAJIT_HOST_DEVICE constexpr unsigned sparse_mla_seesaw_smem_bytes() {
  return 3u * 9u * 8192u + 8192u + 512u + 512u + 512u + 64u + 1024u;
}

// The mma_sync kernel of `threads` (256, or 320 / 512 with producer warps). bf16 tiles are bulk
// copies into rows padded to 1168 bytes (validity flag in the padding); FP8: one bf16 tile + raw
// staging of 656-byte tokens (1 tile at 64 heads, else 2), with producer warps two bf16 tiles + 1
// staging tile.
NSAJIT_HOST_DEVICE constexpr unsigned sparse_mla_mma_sync_smem_bytes(int block_tokens, int heads_per_cta, int threads, bool fp8) {
  const unsigned tokens = unsigned(block_tokens);
  const unsigned mma_rows = heads_per_cta < 16 ? 16u : unsigned(heads_per_cta);
  const unsigned heads_per_warp = mma_rows >= 32 ? 32u : 16u;
  const bool producers = threads == 320 || threads == 512;
  const unsigned mma_warps = producers ? 8u : unsigned(threads / 32);
  const unsigned warps_per_head_group = mma_warps / (mma_rows / heads_per_warp);
  const unsigned staging_tiles = fp8 ? (producers || heads_per_cta == 64 ? 1u : 2u) : 0u;
  const unsigned kv = (fp8 && !producers ? 1u : 2u) * tokens * (fp8 ? 1152u : 1168u) + staging_tiles * tokens * 656u;
  const unsigned q = mma_rows * 576u * 2u;
  const unsigned p = mma_rows * tokens * 2u;
  const unsigned row_exchange = warps_per_head_group * mma_rows * 4u;
  // QK split over the dims (8 warps per head group): the second half's S.
  const unsigned s_exchange = warps_per_head_group == 8 ? 4u * (heads_per_warp / 16u) * 2u * 4u * 32u * 4u : 0u;
  const unsigned valid = !fp8 ? 0u : (!producers ? (1u + staging_tiles) : 2u) * tokens * 4u;
  const unsigned mbarriers = fp8 ? (producers ? 96u : 8u * staging_tiles) : 0u;
  return kv + q + p + row_exchange + s_exchange + valid + mbarriers;
}

// The FP8 direct kernel's plan (templates/sparse_mla_fp8_direct.cuh: 8 or 16 heads a CTA, 320
// threads): 4 raw 656-byte tiles of 64 tokens, q [16][576], P [16][64] bf16, row maxima and sums
// [8][16], the second half's S [4][2][4][32] (fp32), validity flags [4][64], full and empty
// mbarriers [2][4].
NSAJIT_HOST_DEVICE constexpr unsigned sparse_mla_fp8_direct_smem_bytes() {
  return 4u * 64u * 656u + 16u * 576u * 2u + 16u * 64u * 2u + 8u * 16u * 4u + 4u * 2u * 4u * 32u * 4u + 4u * 64u * 4u +
         2u * 4u * 8u;
}

struct SparseMlaDecodeParams {
  const unsigned short* q;         // bf16 [rows, h_q, 576]
  const unsigned short* kv;        // bf16 KV: [num_slots, kv_row_stride]
  const unsigned char* kv_fp8;     // FP8 KV: [num_pages, page_size, 656] bytes, pages kv_page_stride apart
  long long num_slots;             // valid indices are [0, num_slots)
  long long kv_row_stride;         // bf16: elements
  long long kv_page_stride;        // fp8: bytes between pages
  int page_size;                   // fp8: tokens per page (>= 1)
  const int* indices;              // [rows, topk]
  const int* topk_length;          // [rows] or null
  unsigned short* out;             // bf16 [rows, h_q, 512]
  float* lse;                      // [rows, h_q] natural log
  float* max_logits;               // [rows, h_q] or null
  const float* attn_sink;          // [h_q] natural-log units, or null; applied here only without splits
  // Split-KV (gridDim.z > 1): partial results, combined by nsajit_sparse_mla_combine.
  float* o_part;                   // fp32 [splits, rows, h_q, 512]
  float* lse_part;                 // fp32 [splits, rows, h_q], base 2
  float* max_part;                 // fp32 [splits, rows, h_q], base 2
  float sm_scale;
  int rows;
};

struct SparseMlaCombineParams {
  const float* o_part;    // fp32 [splits, rows, h_q, 512]
  const float* lse_part;  // fp32 [splits, rows, h_q], base 2 (-inf: the split saw no valid token)
  const float* max_part;  // fp32 [splits, rows, h_q], base 2
  unsigned short* out;    // bf16 [rows, h_q, 512]
  float* lse;             // [rows, h_q] natural log
  float* max_logits;      // [rows, h_q] or null
  const float* attn_sink; // [h_q] natural-log units, or null
  int rows;
  int h_q;
  int num_splits;
};

struct Fp8KvQuantizeParams {
  const unsigned short* kv;  // bf16 [n, kv_row_stride]
  long long kv_row_stride;   // elements
  const int* slots;          // [n]
  unsigned char* cache;      // [num_pages, page_size, 656] bytes, pages page_stride apart
  long long page_stride;     // bytes
  long long num_slots;       // num_pages * page_size
  int n;
  int scale_fmt;             // 0: fp32, 1: ue8m0
};

struct Fp8KvGatherParams {
  const unsigned char* cache;  // [num_pages, page_size, 656] bytes, pages page_stride apart
  long long page_stride;       // bytes
  long long num_slots;         // num_pages * page_size
  const int* slots;            // [n]
  unsigned short* out;         // bf16 [n, out_row_stride]
  long long out_row_stride;    // elements
  int n;
};
