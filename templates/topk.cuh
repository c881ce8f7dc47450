// topk.cuh — §2: exact per-row top-k of fp32 indexer scores, optionally fused with the §1
// transform (positions -> KV slots) and optionally sorted by score descending.
//
// Per row: row_start = clamp(row_starts[r], 0, width) (0 without row_starts);
// len = min(lengths[r], width - row_start).
//   len <= 0:         all -1.
//   0 < len <= topk:  0, 1, ..., len-1, then -1 (scores not read).
//   len > topk:       exact radix select (below).
//
// Launch shape (chosen by runtime/topk.cpp from width and rows): grid = rows * ctas_per_row CTAs;
// with ctas_per_row = C > 1 the C CTAs of a row form one thread-block cluster (sm_90) and share
// histograms and counts through distributed shared memory. CTA c covers the positions
// [c * slice, (c + 1) * slice) of its row. resident = 1: the slice is loaded once (16-byte loads)
// and kept as order-preserving keys in dynamic shared memory; every later pass reads shared
// memory. resident = 0 (slices too long for shared memory, e.g. a 2^20 row): every pass re-reads
// global memory. Nothing is ever buffered in a fixed-size candidate list, so any len is exact.
//
// Selection: keys are order-preserving uint32 (NaN -> 1 below -inf's 0x007fffff; -0.0 == +0.0;
// key 0 marks padding and is never counted). Four histogram passes of 8-bit digits (bits 31..24,
// fused with the load, then 23..16, 15..8, 7..0 of the keys whose higher bits match the digits
// found so far: a rescan of the slice, no candidate buffer) find the topk-th largest key T.
// Histograms count into 32 lane-private copies (conflict-free whatever the data). Cluster CTAs
// publish each pass's histogram and every CTA sums all of them (one cluster barrier per pass),
// so every CTA finds the same digit from the same sums.
// Output (ordered compaction): the keys > T in increasing index order at slots [0, G), then the
// first topk - G keys == T in increasing index order (ties go to the lower index). Slot of an
// element = number of selected elements of lower index (per-warp contiguous segments, warp scans,
// block scan, cluster prefix of CTA counts), so the output depends on the row's data only: it is
// bit-identical across runs, launch shapes and batchmates.
//
// NSAJIT_FUSED: every written index goes through the transform (after the CTA wrote its raw
// positions, one parallel pass over its own slots, so that page-table reads do not serialise) (decode: page-table row
// r / NSAJIT_NEXT_N; prefill: the request of r through cu_seqlens_q; ragged: + offsets[r]); only
// indices in [0, len) ever reach the page table. NSAJIT_SORTED: phase 0 writes raw positions,
// phase 1 (a second launch, one CTA per row) sorts each row of len > topk by (score desc, index
// asc) with a bitonic sort in shared memory, then transforms. Rows of len <= topk keep
// 0..len-1 (scores are not read for them).

#ifndef NSAJIT_TOPK
#error "NSAJIT_TOPK must be defined"
#endif
#ifndef NSAJIT_THREADS
#define NSAJIT_THREADS 512
#endif
#ifndef NSAJIT_FUSED
#define NSAJIT_FUSED 0
#endif
#ifndef NSAJIT_MODE
#define NSAJIT_MODE 0
#endif
#ifndef NSAJIT_PAGE_SIZE
#define NSAJIT_PAGE_SIZE 1
#endif
#ifndef NSAJIT_NEXT_N
#define NSAJIT_NEXT_N 1
#endif
#ifndef NSAJIT_SORTED
#define NSAJIT_SORTED 0
#endif
#ifndef NSAJIT_SORT_N
#define NSAJIT_SORT_N 2048
#endif

#define NSAJIT_TOPK_WARPS (NSAJIT_THREADS / 32)
#define NSAJIT_TOPK_FULL 0xffffffffu

static_assert(NSAJIT_TOPK % 64 == 0, "topk must be a multiple of 64");
static_assert(NSAJIT_THREADS % 32 == 0 && NSAJIT_THREADS >= 128 && NSAJIT_THREADS <= 1024,
              "threads: whole warps, 128..1024");
static_assert(NSAJIT_SORT_N >= NSAJIT_TOPK && (NSAJIT_SORT_N & (NSAJIT_SORT_N - 1)) == 0,
              "sort size: a power of two >= topk");

// Order-preserving key: a > b as floats (NaN lowest, -0 == +0) iff key(a) > key(b) as uint32.
// Keys of real scores are >= 1 (NaN 1, -inf 0x007fffff); 0 marks padding.
NSAJIT_DEVICE uint32_t topk_key(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 1u;            // NaN: below -inf
  if (magnitude == 0u) return 0x80000000u;           // -0.0 gets +0.0's key
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // negatives reversed, below positives
}

// --- thread-block cluster helpers (sm_90 PTX) -----------------------------------------------------

NSAJIT_DEVICE uint32_t topk_smem_address(const void* p) {
  uint32_t a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// The 32-bit word at `local` (a shared-memory address of this CTA) in CTA `rank` of the cluster.
NSAJIT_DEVICE uint32_t topk_cluster_load(const void* local, uint32_t rank) {
  uint32_t remote, v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(topk_smem_address(local)), "r"(rank));
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

// --- fused transform (§1 applied to one row) -------------------------------------------------------

struct TopkTransformRow {
  const int* table_row;  // null: the whole row maps to -1 (prefill row of no request)
  long long max_position;
  int offset;
};

NSAJIT_DEVICE TopkTransformRow topk_transform_row(const TopkParams& p, int r) {
  TopkTransformRow t;
  t.table_row = nullptr;
  t.max_position = p.max_position;
  t.offset = 0;
#if NSAJIT_FUSED
#if NSAJIT_MODE == 0
  t.table_row = p.page_table + (long long)(r / NSAJIT_NEXT_N) * p.page_table_row_stride;
#elif NSAJIT_MODE == 1
  const int b = find_request(p.cu_seqlens_q, p.num_requests, r);
  if (b >= 0) t.table_row = p.page_table + (long long)b * p.page_table_row_stride;
#else
  t.offset = p.offsets[r];
#endif
#endif
  return t;
}

// idx: a position in [0, len) or -1. apply = 0 returns it unchanged.
NSAJIT_DEVICE int topk_emit(const TopkTransformRow& t, int idx, bool apply) {
  if (!apply || idx < 0) return idx;
#if NSAJIT_MODE == 2
  return int(uint32_t(idx) + uint32_t(t.offset));  // wrapping add, as the CPU reference
#else
  if (t.table_row == nullptr || (long long)idx >= t.max_position) return -1;
  const int entry = t.table_row[idx / NSAJIT_PAGE_SIZE];
  if (entry < 0) return -1;
  return int((long long)entry * NSAJIT_PAGE_SIZE + idx % NSAJIT_PAGE_SIZE);
#endif
}

// --- slice access ----------------------------------------------------------------------------------

// The CTA's slice: positions [b, b + n) of the row, seen as nvec 16-byte vectors of global memory
// starting `head` elements before position b (vector v, element j = position b + 4v + j - head).
struct TopkSlice {
  const float* sp;     // row + b
  const float* abase;  // sp - head, 16-byte aligned
  int head;
  int n;
  int nvec;
};

// 16-byte read-only load, not volatile so that the compiler may batch several before their use.
NSAJIT_DEVICE u32x4 topk_load_16(const void* ptr) {
  u32x4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr));
  return v;
}

// Keys of vector v; elements outside the slice get key 0. 16-byte load when the vector lies
// inside the slice, element loads at the two edges (never a read outside [b, b + n)).
NSAJIT_DEVICE u32x4 topk_global_keys(const TopkSlice& s, int v) {
  const int first = 4 * v - s.head;
  u32x4 k;
  if (first >= 0 && first + 4 <= s.n) {
    const u32x4 raw = topk_load_16(s.abase + 4 * v);
    k.x = topk_key(__uint_as_float(raw.x));
    k.y = topk_key(__uint_as_float(raw.y));
    k.z = topk_key(__uint_as_float(raw.z));
    k.w = topk_key(__uint_as_float(raw.w));
  } else {
    k.x = (first + 0 >= 0 && first + 0 < s.n) ? topk_key(s.sp[first + 0]) : 0u;
    k.y = (first + 1 >= 0 && first + 1 < s.n) ? topk_key(s.sp[first + 1]) : 0u;
    k.z = (first + 2 >= 0 && first + 2 < s.n) ? topk_key(s.sp[first + 2]) : 0u;
    k.w = (first + 3 >= 0 && first + 3 < s.n) ? topk_key(s.sp[first + 3]) : 0u;
  }
  return k;
}

NSAJIT_DEVICE u32x4 topk_slice_keys(const TopkSlice& s, const u32x4* keys, bool resident, int v) {
  if (v >= s.nvec) {
    u32x4 z;
    z.x = z.y = z.z = z.w = 0u;
    return z;
  }
  return resident ? keys[v] : topk_global_keys(s, v);
}

NSAJIT_DEVICE uint32_t topk_lane(const u32x4& k, int j) { return j == 0 ? k.x : j == 1 ? k.y : j == 2 ? k.z : k.w; }

// Histograms of one 8-bit digit use 32 lane-private copies of 16-bit counters: bin d of lane l
// is half (d & 1) of word (d >> 1) * 32 + l, so the 32 lanes of a warp always hit 32 different
// banks and never the same address, whatever the data (plateaus and narrow bands cost the same as
// spread values; no warp-wide step per element). A copy counts at most 32768 keys per chunk
// (kTopkChunkVecs vectors) before it is folded into the 32-bit histogram.
#define NSAJIT_TOPK_PRIV_WORDS (128 * 32)
constexpr int kTopkChunkVecs = 1 << 18;

NSAJIT_DEVICE void topk_count(uint32_t* priv, uint32_t key, int shift, int lane) {
  const uint32_t d = (key >> shift) & 255u;
  atomicAdd(&priv[(d >> 1) * 32 + lane], 1u << ((d & 1u) * 16));
}

// Adds the lane copies into hist[256] (32-bit) and zeroes them. Whole block; ends synchronised.
// Thread d < 256 sums bin d over the 32 copies, starting at copy (d >> 1) so that the 16 words a
// warp reads at once lie in 16 different banks (the two bins of one word share a broadcast): 32
// independent loads instead of a shuffle-reduction chain per word.
NSAJIT_DEVICE void topk_fold(uint32_t* priv, uint32_t* hist) {
  __syncthreads();
  for (int d = threadIdx.x; d < 256; d += NSAJIT_THREADS) {
    const int w = d >> 1;
    const uint32_t half = (uint32_t(d) & 1u) * 16u;
    uint32_t sum = 0;
#pragma unroll 8
    for (int i = 0; i < 32; ++i) sum += (priv[w * 32 + ((i + w) & 31)] >> half) & 0xffffu;
    hist[d] += sum;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < NSAJIT_TOPK_PRIV_WORDS; i += NSAJIT_THREADS) priv[i] = 0u;
  __syncthreads();
}

// The row's histogram: the local one (C == 1), or the sum over the cluster's CTAs, read from
// their `hist` (a buffer no CTA rewrites before the next cluster barrier) into `total`.
NSAJIT_DEVICE const uint32_t* topk_row_hist(const uint32_t* hist, uint32_t* total, int C) {
  if (C == 1) return hist;
  topk_cluster_sync();  // every CTA's histogram of this pass is complete
  for (int j = threadIdx.x; j < 256; j += NSAJIT_THREADS) {
    uint32_t sum = 0;
    for (int q0 = 0; q0 < C; q0 += 4) {  // four loads in flight at a time
      const uint32_t a = topk_cluster_load(&hist[j], uint32_t(q0));
      const uint32_t b = topk_cluster_load(&hist[j], uint32_t(q0 + 1));  // C is even
      const uint32_t c = q0 + 2 < C ? topk_cluster_load(&hist[j], uint32_t(q0 + 2)) : 0u;
      const uint32_t d = q0 + 3 < C ? topk_cluster_load(&hist[j], uint32_t(q0 + 3)) : 0u;
      sum += a + b + c + d;
    }
    total[j] = sum;
  }
  __syncthreads();
  return total;
}

// The digit d with greater(d) < k <= greater(d) + h[d] (greater(d) = keys in the bins above d),
// found by warp 0 (lane l owns bins [8l, 8l + 8)). Every thread returns d and *greater_out.
NSAJIT_DEVICE uint32_t topk_find_digit(const uint32_t* h, int k, uint32_t* s_digit, int* s_greater,
                                       int* greater_out) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int local = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) local += int(h[8 * lane + j]);
    const int inclusive = warp_inclusive_scan(local);
    const int all = __shfl_sync(NSAJIT_TOPK_FULL, inclusive, 31);
    int greater = all - inclusive;  // keys in the bins of the lanes above
    for (int d = 8 * lane + 7; d >= 8 * lane; --d) {
      const int c = int(h[d]);
      if (greater < k && greater + c >= k) {
        *s_digit = uint32_t(d);
        *s_greater = greater;
      }
      greater += c;
    }
  }
  __syncthreads();
  *greater_out = *s_greater;
  return *s_digit;
}

// --- phase 1 of sorted specs: sort each row by (score desc, index asc), then transform -----------

NSAJIT_DEVICE void topk_sort_phase(const TopkParams& p, unsigned long long* s) {
  const int r = blockIdx.x;
  if (r >= p.rows) return;
  const int row_start = p.row_starts ? min(max(p.row_starts[r], 0), p.width) : 0;
  const int len = min(p.lengths[r], p.width - row_start);
  int* out = p.out + (long long)r * NSAJIT_TOPK;
  const TopkTransformRow t = topk_transform_row(p, r);
  if (len <= NSAJIT_TOPK) {
#if NSAJIT_FUSED
    for (int j = threadIdx.x; j < NSAJIT_TOPK; j += NSAJIT_THREADS) out[j] = topk_emit(t, j < len ? j : -1, true);
#endif
    return;
  }
  const float* row = p.scores + (long long)r * p.score_row_stride + row_start;
  for (int i = threadIdx.x; i < NSAJIT_SORT_N; i += NSAJIT_THREADS) {
    unsigned long long v = 0ull;  // padding sorts last
    if (i < NSAJIT_TOPK) {
      const int idx = out[i];  // phase 0 wrote topk positions in [0, len)
      v = ((unsigned long long)topk_key(row[idx]) << 32) | (unsigned long long)(0xffffffffu - uint32_t(idx));
    }
    s[i] = v;
  }
  __syncthreads();
  // Bitonic sort, descending: larger key first, then lower index (larger 0xffffffff - idx).
  for (unsigned size = 2; size <= NSAJIT_SORT_N; size <<= 1) {
    for (unsigned stride = size >> 1; stride > 0; stride >>= 1) {
      for (unsigned i = threadIdx.x; i < NSAJIT_SORT_N / 2; i += NSAJIT_THREADS) {
        const unsigned lo = (i / stride) * 2 * stride + (i % stride);
        const unsigned hi = lo + stride;
        const bool descending = (lo & size) == 0;
        const unsigned long long a = s[lo], b = s[hi];
        if ((a < b) == descending) {
          s[lo] = b;
          s[hi] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < NSAJIT_TOPK; i += NSAJIT_THREADS)
    out[i] = topk_emit(t, int(0xffffffffu - uint32_t(s[i] & 0xffffffffull)), NSAJIT_FUSED != 0);
}

// --- the kernel ------------------------------------------------------------------------------------

// At most 64 registers: 1024 threads per SM (the most the shared memory allows) are never
// limited by registers.
extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS, 1024 / NSAJIT_THREADS) nsajit_topk(const TopkParams p) {
  extern __shared__ u32x4 topk_dynamic[];
  __shared__ uint32_t priv[NSAJIT_TOPK_PRIV_WORDS];
  __shared__ uint32_t hist[2][256];  // by pass parity: cluster peers read one while the next fills
  __shared__ uint32_t row_total[256];
  __shared__ int warp_greater[NSAJIT_TOPK_WARPS];
  __shared__ int warp_equal[NSAJIT_TOPK_WARPS];
  __shared__ int cta_counts[2];
  __shared__ uint32_t s_digit;
  __shared__ int s_greater;

#if NSAJIT_SORTED
  if (p.phase == 1) {
    topk_sort_phase(p, reinterpret_cast<unsigned long long*>(topk_dynamic));
    return;
  }
  const bool apply = false;  // phase 1 transforms after sorting
#else
  const bool apply = NSAJIT_FUSED != 0;
#endif

  const int C = p.ctas_per_row;
  const int r = blockIdx.x / C;
  if (r >= p.rows) return;  // never: grid = rows * C
  const uint32_t rank = C > 1 ? topk_cluster_rank() : 0u;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  int* out = p.out + (long long)r * NSAJIT_TOPK;

  const int row_start = p.row_starts ? min(max(p.row_starts[r], 0), p.width) : 0;
  const int len = min(p.lengths[r], p.width - row_start);
  const TopkTransformRow t = topk_transform_row(p, r);
  if (len <= NSAJIT_TOPK) {  // the same decision in every CTA of the row: no cluster barrier follows
    const int per = NSAJIT_TOPK / C;  // C divides 64, topk is a multiple of 64
    for (int j = int(rank) * per + tid; j < int(rank + 1) * per; j += NSAJIT_THREADS)
      out[j] = topk_emit(t, j < len ? j : -1, apply);
    return;
  }

  // This CTA's slice.
  TopkSlice s;
  const int b = int(rank) * p.slice;
  s.n = max(0, min(len - b, p.slice));
  s.sp = p.scores + (long long)r * p.score_row_stride + row_start + b;
  s.head = int((reinterpret_cast<unsigned long long>(s.sp) >> 2) & 3ull);
  s.abase = s.sp - s.head;
  s.nvec = s.n > 0 ? (s.head + s.n + 3) >> 2 : 0;
  const bool resident = p.resident != 0;
  u32x4* keys = topk_dynamic;

  // Four passes of 8-bit digits, most significant first. Invariant: among the keys whose bits
  // above `shift` equal `prefix`, the k largest are still to be selected. Pass 0 also loads the
  // slice (keeping its keys when resident); later passes rescan it.
  for (int i = tid; i < NSAJIT_TOPK_PRIV_WORDS; i += NSAJIT_THREADS) priv[i] = 0u;
  uint32_t prefix = 0u, mask = 0u;
  int k = NSAJIT_TOPK;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    uint32_t* h = hist[pass & 1];
    for (int i = tid; i < 256; i += NSAJIT_THREADS) h[i] = 0u;
    __syncthreads();
    for (int c0 = 0; c0 < s.nvec || (c0 == 0 && s.nvec == 0); c0 += kTopkChunkVecs) {
      const int c1 = min(s.nvec, c0 + kTopkChunkVecs);
      if (pass == 0) {
        constexpr int kUnroll = 4;
        for (int base = c0; base < c1; base += kUnroll * NSAJIT_THREADS) {
          // All 16-byte loads first (several in flight per thread), then keys and counts.
          u32x4 raw[kUnroll];
          bool whole[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int v = base + u * NSAJIT_THREADS + tid;
            const int first = 4 * v - s.head;
            whole[u] = v < c1 && first >= 0 && first + 4 <= s.n;
            if (whole[u]) raw[u] = topk_load_16(s.abase + 4 * v);
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int v = base + u * NSAJIT_THREADS + tid;
            if (v >= c1) continue;
            u32x4 kv;
            if (whole[u]) {
              kv.x = topk_key(__uint_as_float(raw[u].x));
              kv.y = topk_key(__uint_as_float(raw[u].y));
              kv.z = topk_key(__uint_as_float(raw[u].z));
              kv.w = topk_key(__uint_as_float(raw[u].w));
            } else {
              kv = topk_global_keys(s, v);  // an edge vector: element loads
            }
            if (resident) keys[v] = kv;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const uint32_t key = topk_lane(kv, j);
              if (key != 0u) topk_count(priv, key, 24, lane);
            }
          }
        }
      } else {
        for (int v = c0 + tid; v < c1; v += NSAJIT_THREADS) {
          const u32x4 kv = resident ? keys[v] : topk_global_keys(s, v);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const uint32_t key = topk_lane(kv, j);
            if (key != 0u && (key & mask) == prefix) topk_count(priv, key, shift, lane);
          }
        }
      }
      topk_fold(priv, h);
      if (s.nvec == 0) break;
    }
    const uint32_t* row_hist = topk_row_hist(h, row_total, C);
    int greater;
    const uint32_t digit = topk_find_digit(row_hist, k, &s_digit, &s_greater, &greater);
    k -= greater;
    prefix |= digit << shift;
    mask |= 255u << shift;
  }

  const uint32_t threshold = prefix;  // the topk-th largest key
  const int take_equal = k;                         // keys == threshold to take (>= 1)
  const int total_greater = NSAJIT_TOPK - take_equal;

  // Ordered compaction. Warp w owns the contiguous rounds [w*R/W, (w+1)*R/W) of 32 vectors.
  const int rounds = (s.nvec + 31) >> 5;
  const int round_begin = int((long long)rounds * warp / NSAJIT_TOPK_WARPS);
  const int round_end = int((long long)rounds * (warp + 1) / NSAJIT_TOPK_WARPS);
  int my_greater = 0, my_equal = 0;
  for (int q = round_begin; q < round_end; ++q) {
    const u32x4 kv = topk_slice_keys(s, keys, resident, q * 32 + lane);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t key = topk_lane(kv, j);
      my_greater += key > threshold;
      my_equal += key == threshold;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    my_greater += __shfl_xor_sync(NSAJIT_TOPK_FULL, my_greater, o);
    my_equal += __shfl_xor_sync(NSAJIT_TOPK_FULL, my_equal, o);
  }
  if (lane == 0) {
    warp_greater[warp] = my_greater;
    warp_equal[warp] = my_equal;
  }
  __syncthreads();
  if (warp == 0) {
    const int g = lane < NSAJIT_TOPK_WARPS ? warp_greater[lane] : 0;
    const int e = lane < NSAJIT_TOPK_WARPS ? warp_equal[lane] : 0;
    const int gi = warp_inclusive_scan(g);
    const int ei = warp_inclusive_scan(e);
    if (lane < NSAJIT_TOPK_WARPS) {
      warp_greater[lane] = gi - g;  // exclusive prefixes
      warp_equal[lane] = ei - e;
    }
    if (lane == 31) {
      cta_counts[0] = gi;
      cta_counts[1] = ei;
    }
  }
  int cta_greater = 0, cta_equal = 0;  // selected elements of the CTAs before this one
  if (C > 1) {
    topk_cluster_sync();  // counts published
    for (int q = 0; q < int(rank); ++q) {
      cta_greater += int(topk_cluster_load(&cta_counts[0], uint32_t(q)));
      cta_equal += int(topk_cluster_load(&cta_counts[1], uint32_t(q)));
    }
    topk_cluster_arrive();  // done reading the others' counts (waited for before exit)
  } else {
    __syncthreads();
  }
  int next_greater = cta_greater + warp_greater[warp];
  int next_equal = cta_equal + warp_equal[warp];
  for (int q = round_begin; q < round_end; ++q) {
    if (next_greater >= total_greater && next_equal >= take_equal) break;  // warp-uniform
    const int v = q * 32 + lane;
    const u32x4 kv = topk_slice_keys(s, keys, resident, v);
    int g = 0, e = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t key = topk_lane(kv, j);
      g += key > threshold;
      e += key == threshold;
    }
    const int packed = (g << 16) | e;
    const int inclusive = warp_inclusive_scan(packed);
    const int all = __shfl_sync(NSAJIT_TOPK_FULL, inclusive, 31);
    int pg = next_greater + ((inclusive - packed) >> 16);
    int pe = next_equal + ((inclusive - packed) & 0xffff);
    if (g | e) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t key = topk_lane(kv, j);
        const int position = b + 4 * v + j - s.head;
        if (key > threshold) {
          out[pg++] = position;
        } else if (key == threshold) {
          if (pe < take_equal) out[total_greater + pe] = position;
          ++pe;
        }
      }
    }
    next_greater += all >> 16;
    next_equal += all & 0xffff;
  }
  if (apply) {
    // Fused transform of this CTA's slots, all page-table reads in parallel (in the loop above
    // each would stall its warp): the slots [cta_greater, cta_greater + G) and the taken ties.
    __syncthreads();  // the positions written above are visible to the whole CTA
    const int g_end = cta_greater + cta_counts[0];
    const int e_begin = total_greater + min(cta_equal, take_equal);
    const int e_end = total_greater + min(cta_equal + cta_counts[1], take_equal);
    const int g_count = g_end - cta_greater;
    for (int i = tid; i < g_count + (e_end - e_begin); i += NSAJIT_THREADS) {
      const int slot = i < g_count ? cta_greater + i : e_begin + (i - g_count);
      out[slot] = topk_emit(t, out[slot], true);
    }
  }
  if (C > 1) topk_cluster_wait();  // no CTA leaves while another may still read its counts
}
