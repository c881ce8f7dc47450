// topk_common.cuh — the top-k family (templates/topk.cuh), part 1: its compile-time constants,
// order-preserving keys, cluster helpers, the fused transform's glue, slice access and the classify
// sweep's bitmaps. topk.cuh includes topk_common, topk_radix, topk_speculative, topk_bf16,
// topk_cluster_lists, topk_sort and topk_dense, in that order.
#pragma once
#include "kv_slot_transform.cuh"

#ifndef NSAJIT_TOPK
#error "NSAJIT_TOPK must be defined"
#endif
#ifndef NSAJIT_THREADS
#define NSAJIT_THREADS 512
#endif
#ifndef NSAJIT_FUSED
#define NSAJIT_FUSED 0
#endif
#ifndef NSAJIT_SORTED
#define NSAJIT_SORTED 0
#endif
#ifndef NSAJIT_SORT_N
#define NSAJIT_SORT_N 2048
#endif
#ifndef NSAJIT_SCORE_BF16
#define NSAJIT_SCORE_BF16 0
#endif
#ifndef NSAJIT_TOPK_ALGORITHM
#error "NSAJIT_TOPK_ALGORITHM must be defined (the spec's tile.algorithm, kernel_params.h)"
#endif
// The algorithms whose rows span a cluster of 2-16 CTAs (the others: one CTA per row).
constexpr bool kTopkClustered =
    NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_CLUSTER_SWEEPS || NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_CLUSTER_LISTS;

// A score as stored: fp32, or the bits of a bf16 (widened exactly to fp32 on load, so keys,
// ties and the selection are those of the bf16 values). A vector is 4 scores: 16 or 8 bytes.
#if NSAJIT_SCORE_BF16
typedef unsigned short TopkScore;
#else
typedef float TopkScore;
#endif
#define NSAJIT_TOPK_VEC_BYTES (4 * int(sizeof(TopkScore)))

#define NSAJIT_TOPK_WARPS (NSAJIT_THREADS / 32)
#define NSAJIT_TOPK_FULL 0xffffffffu

static_assert(NSAJIT_TOPK % 64 == 0, "topk must be a multiple of 64");
static_assert((NSAJIT_THREADS & (NSAJIT_THREADS - 1)) == 0 && NSAJIT_THREADS >= 128 && NSAJIT_THREADS <= 1024,
              "threads: a power of two, 128..1024 (the bin search's chunks)");
static_assert(NSAJIT_SORT_N >= NSAJIT_TOPK && (NSAJIT_SORT_N & (NSAJIT_SORT_N - 1)) == 0,
              "sort size: a power of two >= topk");

// Order-preserving key: a > b as floats (NaN lowest, -0 == +0) iff key(a) > key(b) as uint32.
// Keys of real scores are >= 1 (NaN 1, -inf 0x007fffff); 0 marks padding.
NSAJIT_DEVICE uint32_t topk_key(float f) {
  // Branch-free (this runs once per score), and mostly off the integer pipe, which the cluster
  // rows' passes are short of: -0.0 + 0.0 is +0.0 (round to
  // nearest; NVRTC runs without fast math or flush-to-zero, so subnormals stay), NaN tested as a
  // float.
  const float g = f + 0.0f;
  const uint32_t u = __float_as_uint(g);
  const uint32_t key = u ^ (uint32_t(int(u) >> 31) | 0x80000000u);  // negatives reversed, below positives
  return g != g ? 1u : key;                                          // NaN: below -inf
}

// Score i of `row`, as fp32.
NSAJIT_DEVICE float topk_score(const TopkScore* row, int i) {
#if NSAJIT_SCORE_BF16
  return __uint_as_float(uint32_t(row[i]) << 16);
#else
  return row[i];
#endif
}

// Row r of the scores (position 0 of the score row; row_starts are the caller's).
NSAJIT_DEVICE const TopkScore* topk_row_scores(const TopkParams& p, int r) {
  return reinterpret_cast<const TopkScore*>(p.scores) + (long long)r * p.score_row_stride;
}

// --- thread-block cluster helpers (sm_90 PTX) -----------------------------------------------------

// The 32-bit word at `local` (a shared-memory address of this CTA) in CTA `rank` of the cluster.
NSAJIT_DEVICE uint32_t topk_cluster_load(const void* local, uint32_t rank) {
  uint32_t remote, v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(local)), "r"(rank));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
  return v;
}

NSAJIT_DEVICE void topk_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
NSAJIT_DEVICE void topk_cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
NSAJIT_DEVICE void topk_cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

NSAJIT_DEVICE uint32_t topk_cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// --- fused transform (§1 applied to one row: templates/kv_slot_transform.cuh) ---------------------

// The row's transform (a null table row, never read, when the spec is not fused).
NSAJIT_DEVICE KvSlotRow topk_transform_row(const TopkParams& p, int r) {
#if NSAJIT_FUSED
  return kv_slot_row(p, r);
#else
  return KvSlotRow{nullptr, 0, 0};
#endif
}

// idx: a position in [0, len) or -1. apply = 0 returns it unchanged.
NSAJIT_DEVICE int topk_emit(const KvSlotRow& t, int idx, bool apply) { return apply ? kv_slot(t, idx) : idx; }

// Fused: asks L2 for the page-table entries a row of `len` positions can read (the whole used
// prefix of its table row, 16-byte chunks inside it), so that the transform at the end of the row
// waits an L2 rather than a DRAM latency. A hint: no completion, no shared memory.
// Only for pages of >= 32 positions: the prefix is then <= 1/32 of the row's score bytes; with
// page_table_1 it would be as large as the scores, to serve topk scattered 4-byte reads.
NSAJIT_DEVICE void topk_prefetch_table(const KvSlotRow& t, int len) {
#if NSAJIT_MODE != 2 && NSAJIT_PAGE_SIZE >= 32
  if (t.table_row == nullptr) return;
  const long long used = min(len, t.limit);  // positions that reach the table
  const long long entries = (used + NSAJIT_PAGE_SIZE - 1) / NSAJIT_PAGE_SIZE;
  const unsigned long long first = (reinterpret_cast<unsigned long long>(t.table_row) + 15ull) & ~15ull;
  const unsigned long long end = reinterpret_cast<unsigned long long>(t.table_row + entries) & ~15ull;
  if (end > first)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(first), "r"(uint32_t(end - first)) : "memory");
#endif
}

// Asks L2 for the line of `lengths` (and `row_starts`) that the rows about one wave after row r
// start by reading (resident CTAs: SMs x 1024 / threads), so that those CTAs' first, dependent read
// waits an L2 rather than a DRAM latency. One thread a CTA; a line serves 32 rows, asked by each.
NSAJIT_DEVICE void topk_prefetch_next_wave(const TopkParams& p, int r) {
  uint32_t sms;
  asm("mov.u32 %0, %%nsmid;" : "=r"(sms));
  const int ahead = r + int(sms) * (1024 / NSAJIT_THREADS);
  if (ahead >= p.rows) return;
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p.lengths + ahead));
  if (p.row_starts != nullptr) asm volatile("prefetch.global.L2 [%0];" ::"l"(p.row_starts + ahead));
}

// Asks L2 for the scores CTA `rank` of row r would read if the row were as long as its width
// (rows without row_starts), one 128-byte line per thread and round, before the row's length is
// known: the loads of pass 0 then find them in L2 instead of waiting a second DRAM latency after
// the length's. A hint: no completion, no shared memory.
NSAJIT_DEVICE void topk_prefetch_slice(const TopkParams& p, int r, uint32_t rank) {
  const int b = int(rank) * p.slice;
  const int n = min(p.slice, p.width - b);
  if (n <= 0) return;
  const char* base = reinterpret_cast<const char*>(topk_row_scores(p, r) + b);
  for (int o = threadIdx.x * 128; o < int(sizeof(TopkScore)) * n; o += NSAJIT_THREADS * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + o));
}

// --- slice access ----------------------------------------------------------------------------------

// The CTA's slice: positions [b, b + n) of the row, seen as nvec vectors of 4 scores of global
// memory starting `head` elements before position b (vector v, element j = position b + 4v + j - head).
struct TopkSlice {
  const TopkScore* sp;     // row + b
  const TopkScore* abase;  // sp - head, aligned to a vector (16 or 8 bytes)
  int head;
  int n;
  int nvec;
};

// The slice's whole vectors are [topk_whole_begin, topk_whole_end): all but the partial
// vectors at its edges (the first when the slice is not vector-aligned, the last when it ends
// inside a vector).
NSAJIT_DEVICE int topk_whole_begin(const TopkSlice& s) { return s.head == 0 ? 0 : 1; }
NSAJIT_DEVICE int topk_whole_end(const TopkSlice& s) { return max(topk_whole_begin(s), (s.head + s.n) >> 2); }

// The 4 scores of an aligned vector as fp32 bits: one read-only load (16 bytes, or 8 of bf16),
// not volatile so that the compiler may batch several before their use.
NSAJIT_DEVICE u32x4 topk_load_vec(const TopkScore* ptr) {
  u32x4 v;
#if NSAJIT_SCORE_BF16
  uint32_t lo, hi;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(lo), "=r"(hi) : "l"(ptr));
  v.x = lo << 16;
  v.y = lo & 0xffff0000u;
  v.z = hi << 16;
  v.w = hi & 0xffff0000u;
#else
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr));
#endif
  return v;
}

// Keys of vector v; elements outside the slice get key 0. One vector load when the vector lies
// inside the slice, element loads at the two edges (never a read outside [b, b + n)).
NSAJIT_DEVICE u32x4 topk_global_keys(const TopkSlice& s, int v) {
  const int first = 4 * v - s.head;
  u32x4 k;
  if (first >= 0 && first + 4 <= s.n) {
    const u32x4 raw = topk_load_vec(s.abase + 4 * v);
    k.x = topk_key(__uint_as_float(raw.x));
    k.y = topk_key(__uint_as_float(raw.y));
    k.z = topk_key(__uint_as_float(raw.z));
    k.w = topk_key(__uint_as_float(raw.w));
  } else {
    k.x = (first + 0 >= 0 && first + 0 < s.n) ? topk_key(topk_score(s.sp, first + 0)) : 0u;
    k.y = (first + 1 >= 0 && first + 1 < s.n) ? topk_key(topk_score(s.sp, first + 1)) : 0u;
    k.z = (first + 2 >= 0 && first + 2 < s.n) ? topk_key(topk_score(s.sp, first + 2)) : 0u;
    k.w = (first + 3 >= 0 && first + 3 < s.n) ? topk_key(topk_score(s.sp, first + 3)) : 0u;
  }
  return k;
}

// Vector v of the slice: kept in shared memory when v < resident_vecs, else re-read; zeros past
// the slice.
NSAJIT_DEVICE u32x4 topk_slice_keys(const TopkSlice& s, const u32x4* keys, int resident_vecs, int v) {
  if (v >= s.nvec) {
    u32x4 z;
    z.x = z.y = z.z = z.w = 0u;
    return z;
  }
  return v < resident_vecs ? keys[v] : topk_global_keys(s, v);
}

// Whole block: words [0, kWords) of p set to 0 by kBytes-wide shared stores (16 or 8; p aligned
// to them), one a thread and step, at 32-bit addresses.
template <int kBytes, int kWords>
NSAJIT_DEVICE void topk_zero_words(const uint32_t* p) {
  static_assert((kBytes == 16 || kBytes == 8) && 4 * kWords % kBytes == 0, "whole 16- or 8-byte vectors");
  constexpr int kVecs = 4 * kWords / kBytes;
  const uint32_t a = smem_u32(p) + uint32_t(kBytes) * threadIdx.x;
#pragma unroll
  for (int i0 = 0; i0 < kVecs; i0 += NSAJIT_THREADS) {
    if (kVecs - i0 < NSAJIT_THREADS && i0 + int(threadIdx.x) >= kVecs) break;
    if (kBytes == 16)
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(a + uint32_t(kBytes * i0)), "r"(0u) : "memory");
    else
      asm volatile("st.shared.v2.u32 [%0], {%1, %1};" ::"r"(a + uint32_t(kBytes * i0)), "r"(0u) : "memory");
  }
}

// How many of the items 0..n-1 thread `tid` takes when the block strides over them (tid, tid + T, ...).
NSAJIT_DEVICE int topk_thread_share(int n, int tid) {
  return n > tid ? (n - tid + NSAJIT_THREADS - 1) / NSAJIT_THREADS : 0;
}

NSAJIT_DEVICE uint32_t topk_lane(const u32x4& k, int j) { return j == 0 ? k.x : j == 1 ? k.y : j == 2 ? k.z : k.w; }

// Key u = 4 v + j of the slice (element j of vector v), which the caller knows to be inside it.
NSAJIT_DEVICE uint32_t topk_slice_key(const TopkSlice& s, const uint32_t* kept, int resident_vecs, int u) {
  return (u >> 2) < resident_vecs ? kept[u] : topk_key(topk_score(s.abase, u));
}

// --- per-position bitmaps of the classify sweep ------------------------------------------------------
// Word w of a map covers the keys u = 32 w .. 32 w + 31 of the slice (vectors 8 w .. 8 w + 7): bit
// u % 32 = 4 (v % 8) + j. In a classify round q (vectors 32 q + lane), the 8 lanes of a group hold
// one word's 4-bit pieces: OR them and store word 4 q + lane / 8.
NSAJIT_DEVICE void topk_store_word(uint32_t* map, int round, int lane, uint32_t bits4) {
  uint32_t w = bits4 << (4 * (lane & 7));
  w |= __shfl_xor_sync(NSAJIT_TOPK_FULL, w, 1);
  w |= __shfl_xor_sync(NSAJIT_TOPK_FULL, w, 2);
  w |= __shfl_xor_sync(NSAJIT_TOPK_FULL, w, 4);
  if ((lane & 7) == 0) map[4 * round + (lane >> 3)] = w;
}
