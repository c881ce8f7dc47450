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
// key 0 marks padding and is never counted). Three histogram passes find the topk-th largest key
// T: bits 31..21 (fused with the load), 20..10 and 9..0 of the keys whose higher bits match the
// digits found so far (a rescan of the slice, no candidate buffer). Cluster CTAs reduce each
// histogram: CTA q sums bins [q*B/C, (q+1)*B/C) of every CTA, then every CTA gathers the sums.
// Every CTA finds the same digit from the same sums.
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

// Exclusive prefix sum of v over the block (all threads must call); *total gets the block sum.
// warp_sums: 32 ints of shared memory, free again when this returns.
NSAJIT_DEVICE int topk_block_exclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int inclusive = warp_inclusive_scan(v);
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int s = lane < NSAJIT_TOPK_WARPS ? warp_sums[lane] : 0;
    s = warp_inclusive_scan(s);
    if (lane < NSAJIT_TOPK_WARPS) warp_sums[lane] = s;
  }
  __syncthreads();
  const int result = (warp > 0 ? warp_sums[warp - 1] : 0) + inclusive - v;
  *total = warp_sums[NSAJIT_TOPK_WARPS - 1];
  __syncthreads();  // everyone has read warp_sums before the next call overwrites it
  return result;
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

// The request of prefill row r: the last b with cu[b] <= r, or -1 when r is outside
// [cu[0], cu[n]) (same rule as templates/index_transform.cuh).
NSAJIT_DEVICE int topk_find_request(const int* cu, int n, int r) {
  if (n <= 0 || r < cu[0] || r >= cu[n]) return -1;
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (cu[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return r < cu[lo + 1] ? lo : -1;
}

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
  const int b = topk_find_request(p.cu_seqlens_q, p.num_requests, r);
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

// Histogram increment of `bin` for the lanes with `valid`; the whole warp calls. A warp whose
// valid lanes share one bin adds once (plateaus do not serialise on one shared address).
NSAJIT_DEVICE void topk_hist_add(uint32_t* hist, uint32_t bin, bool valid) {
  const unsigned m = __ballot_sync(NSAJIT_TOPK_FULL, valid);
  if (m == 0u) return;
  const int leader = __ffs(m) - 1;
  const uint32_t b0 = __shfl_sync(NSAJIT_TOPK_FULL, bin, leader);
  if (__all_sync(NSAJIT_TOPK_FULL, !valid || bin == b0)) {
    if ((threadIdx.x & 31) == leader) atomicAdd(&hist[b0], uint32_t(__popc(m)));
  } else if (valid) {
    atomicAdd(&hist[bin], 1u);
  }
}

// Pass-1 histogram (bits 31..21) of one vector of keys, by plain shared atomics: no warp-wide
// step per element (those made the pass latency-bound). Four equal bins (plateaus, runs) add once;
// key 0 (padding) is not counted.
NSAJIT_DEVICE void topk_hist_add4(uint32_t* hist, const u32x4& k) {
  const uint32_t b0 = k.x >> 21, b1 = k.y >> 21, b2 = k.z >> 21, b3 = k.w >> 21;
  if (b0 == b1 && b1 == b2 && b2 == b3 && k.x != 0u && k.w != 0u) {
    atomicAdd(&hist[b0], 4u);
  } else {
    if (k.x != 0u) atomicAdd(&hist[b0], 1u);
    if (k.y != 0u) atomicAdd(&hist[b1], 1u);
    if (k.z != 0u) atomicAdd(&hist[b2], 1u);
    if (k.w != 0u) atomicAdd(&hist[b3], 1u);
  }
}

// Reduces the cluster's histograms of `bins` bins into every CTA's `hist` (C > 1), or just
// publishes the local one (C == 1). On return `hist` holds the row's histogram in every CTA.
NSAJIT_DEVICE void topk_reduce_hist(uint32_t* hist, uint32_t* red, int bins, int C, uint32_t rank) {
  if (C == 1) {
    __syncthreads();
    return;
  }
  topk_cluster_sync();  // every CTA's local histogram is complete
  const int owned = bins / C;
  for (int i = threadIdx.x; i < owned; i += NSAJIT_THREADS) {
    const int j = int(rank) * owned + i;
    uint32_t sum = 0;
    for (int q = 0; q < C; ++q) sum += topk_cluster_load(&hist[j], uint32_t(q));
    red[i] = sum;
  }
  topk_cluster_sync();  // every owner's sums are complete; no one reads a local histogram any more
  for (int j = threadIdx.x; j < bins; j += NSAJIT_THREADS) {
    const int q = j / owned;
    hist[j] = topk_cluster_load(&red[j - q * owned], uint32_t(q));
  }
  __syncthreads();
}

// The digit d with greater(d) < k <= greater(d) + hist[d], greater(d) = count in bins above d.
// Every thread returns d and sets *greater_out.
NSAJIT_DEVICE uint32_t topk_find_digit(const uint32_t* hist, int bins, int k, int* warp_sums,
                                       uint32_t* s_digit, int* s_greater, int* greater_out) {
  const int per = bins / NSAJIT_THREADS > 0 ? bins / NSAJIT_THREADS : 1;
  const int lo = threadIdx.x * per;
  int local = 0;
  if (lo < bins)
    for (int j = 0; j < per; ++j) local += int(hist[lo + j]);
  int total;
  const int before = topk_block_exclusive_scan(local, warp_sums, &total);
  if (lo < bins) {
    int greater = total - before - local;  // keys in the bins above this thread's chunk
    for (int d = lo + per - 1; d >= lo; --d) {
      const int h = int(hist[d]);
      if (greater < k && greater + h >= k) {
        *s_digit = uint32_t(d);
        *s_greater = greater;
      }
      greater += h;
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

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS) nsajit_topk(const TopkParams p) {
  extern __shared__ u32x4 topk_dynamic[];
  __shared__ uint32_t hist[2048];
  __shared__ uint32_t red[1024];
  __shared__ int warp_sums[32];
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

  // Pass 1: load (keeping keys when resident) and histogram bits 31..21.
  for (int i = tid; i < 2048; i += NSAJIT_THREADS) hist[i] = 0u;
  __syncthreads();
  constexpr int kUnroll = 4;
  for (int base = 0; base < s.nvec; base += kUnroll * NSAJIT_THREADS) {  // uniform trip count
    // All 16-byte loads first (several in flight per thread), then the keys and histogram.
    u32x4 raw[kUnroll];
    bool whole[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = base + u * NSAJIT_THREADS + tid;
      const int first = 4 * v - s.head;
      whole[u] = v < s.nvec && first >= 0 && first + 4 <= s.n;
      if (whole[u]) raw[u] = topk_load_16(s.abase + 4 * v);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = base + u * NSAJIT_THREADS + tid;
      u32x4 k;
      if (whole[u]) {
        k.x = topk_key(__uint_as_float(raw[u].x));
        k.y = topk_key(__uint_as_float(raw[u].y));
        k.z = topk_key(__uint_as_float(raw[u].z));
        k.w = topk_key(__uint_as_float(raw[u].w));
      } else {
        k = topk_slice_keys(s, keys, false, v);  // an edge vector (element loads) or none
      }
      if (resident && v < s.nvec) keys[v] = k;
      topk_hist_add4(hist, k);
    }
  }
  topk_reduce_hist(hist, red, 2048, C, rank);
  int k = NSAJIT_TOPK, greater;
  const uint32_t d1 = topk_find_digit(hist, 2048, k, warp_sums, &s_digit, &s_greater, &greater);
  k -= greater;

  // Pass 2: bits 20..10 of the keys with bits 31..21 == d1.
  for (int i = tid; i < 2048; i += NSAJIT_THREADS) hist[i] = 0u;
  __syncthreads();
  for (int base = 0; base < s.nvec; base += NSAJIT_THREADS) {
    const u32x4 kv = topk_slice_keys(s, keys, resident, base + tid);
    const bool any = (kv.x >> 21) == d1 || (kv.y >> 21) == d1 || (kv.z >> 21) == d1 || (kv.w >> 21) == d1;
    if (__any_sync(NSAJIT_TOPK_FULL, any)) {  // most warps have no key in the threshold bin
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t key = topk_lane(kv, j);
        topk_hist_add(hist, (key >> 10) & 2047u, key != 0u && (key >> 21) == d1);
      }
    }
  }
  topk_reduce_hist(hist, red, 2048, C, rank);
  const uint32_t d2 = topk_find_digit(hist, 2048, k, warp_sums, &s_digit, &s_greater, &greater);
  k -= greater;

  // Pass 3: bits 9..0 of the keys with bits 31..10 == (d1, d2).
  const uint32_t prefix2 = (d1 << 11) | d2;
  for (int i = tid; i < 1024; i += NSAJIT_THREADS) hist[i] = 0u;
  __syncthreads();
  for (int base = 0; base < s.nvec; base += NSAJIT_THREADS) {
    const u32x4 kv = topk_slice_keys(s, keys, resident, base + tid);
    const bool any = (kv.x >> 10) == prefix2 || (kv.y >> 10) == prefix2 || (kv.z >> 10) == prefix2 ||
                     (kv.w >> 10) == prefix2;
    if (__any_sync(NSAJIT_TOPK_FULL, any)) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t key = topk_lane(kv, j);
        topk_hist_add(hist, key & 1023u, key != 0u && (key >> 10) == prefix2);
      }
    }
  }
  topk_reduce_hist(hist, red, 1024, C, rank);
  const uint32_t d3 = topk_find_digit(hist, 1024, k, warp_sums, &s_digit, &s_greater, &greater);
  k -= greater;

  const uint32_t threshold = (prefix2 << 10) | d3;  // the topk-th largest key
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
