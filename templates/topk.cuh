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
// histograms, candidates and counts through distributed shared memory. CTA c covers the positions
// [c * slice, (c + 1) * slice) of its row. The slice is loaded once (16-byte loads) and its first
// resident_vecs vectors are kept as order-preserving keys in dynamic shared memory: all of them
// when the slice fits, as many as fit when a slice too long for shared memory has the SM to itself
// (1024 threads, e.g. 128 rows of 131072 in one wave), none when shared memory is left to other
// CTAs. Every later sweep reads the kept vectors from shared memory and re-reads the others from
// global memory (L2).
//
// Selection: keys are order-preserving uint32 (NaN -> 1 below -inf's 0x007fffff; -0.0 == +0.0;
// key 0 marks padding and is never counted). Radix select of the topk-th largest key T:
//   1. pass 0, fused with the load: a histogram of the 12-bit first digit (bits 31..20: sign,
//      exponent, 3 mantissa bits, so normal data spreads over many bins); C > 1: summed over the
//      cluster (reduce-scatter + all-gather). The threshold bin holds x.count keys.
//   2. only if x.count > cand_capacity (a plateau, a narrow band): rescans of the slice with 8-bit
//      digits over the keys matching the prefix found so far, until the count fits or all 32 bits
//      are resolved. Never a truncating buffer: the rescan is the fallback.
//   3. classify sweep: per warp, the keys above the prefix (all selected) and the keys matching it,
//      which go to a candidate list (C > 1: every CTA gets the whole cluster's list); both also
//      recorded as per-position bitmaps (1 bit per key).
//   4. refinement on the list alone: 10-bit digits down to bit 0 give T and the ties to take.
// Output (ordered compaction): the keys > T in increasing index order at slots [0, G), then the
// first topk - G keys == T in increasing index order (ties go to the lower index). Slot of an
// element = number of selected elements of lower index (per-warp contiguous segments, warp scans
// of the bitmaps' words, block scan, cluster prefix of CTA counts), so the output depends on the
// row's data only: it is bit-identical across runs, launch shapes, candidate capacities and
// batchmates. Dense rows (more than 1/8 of the keys selected) and fused rows stage their slots in
// shared memory and write them to `out` coalesced.
//
// Speculative single sweep (one CTA per row, when the plan sets `speculate`: slices of at least
// 12 topk positions): a sample of up to 2 scores a thread, from the sweep's first loads, bounds
// the topk-th largest key from below, one sweep lists every score at or above the bound per warp
// (score and position, in index order), and the selection (first digit, two 10-bit digits) and
// the ordered output run on the lists alone. The row reads its scores once instead of twice.
// Exact whenever used: when the lists overflow or hold fewer than topk keys (a misleading sample,
// large scores crowded into one warp's segment), or the row is dense (more than ~1/8 of it would
// be listed) or too short to give the sample, the row takes the exact path above.
//
// NSAJIT_FUSED: every written index goes through the transform (in the pass that writes the
// staged slots, all page-table reads in parallel so that they do not serialise) (decode: page-table row
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
#ifndef NSAJIT_SORTED
#define NSAJIT_SORTED 0
#endif
#ifndef NSAJIT_SORT_N
#define NSAJIT_SORT_N 2048
#endif

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
  // Branch-free (this runs once per score): 6 instructions.
  const uint32_t u = __float_as_uint(f);
  const uint32_t magnitude = u & 0x7fffffffu;
  uint32_t key = u ^ (uint32_t(int(u) >> 31) | 0x80000000u);  // negatives reversed, below positives
  key = magnitude == 0u ? 0x80000000u : key;                   // -0.0 gets +0.0's key
  return magnitude > 0x7f800000u ? 1u : key;                   // NaN: below -inf
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

// Asks L2 for the scores CTA `rank` of row r would read if the row were as long as its width
// (rows without row_starts), one 128-byte line per thread and round, before the row's length is
// known: the loads of pass 0 then find them in L2 instead of waiting a second DRAM latency after
// the length's. A hint: no completion, no shared memory.
NSAJIT_DEVICE void topk_prefetch_slice(const TopkParams& p, int r, uint32_t rank) {
  const int b = int(rank) * p.slice;
  const int n = min(p.slice, p.width - b);
  if (n <= 0) return;
  const char* base = reinterpret_cast<const char*>(p.scores + (long long)r * p.score_row_stride + b);
  for (int o = threadIdx.x * 128; o < 4 * n; o += NSAJIT_THREADS * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + o));
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

// The slice's whole 16-byte vectors are [topk_whole_begin, topk_whole_end): all but the partial
// vectors at its edges (the first when the slice is not 16-byte aligned, the last when it ends
// inside a vector).
NSAJIT_DEVICE int topk_whole_begin(const TopkSlice& s) { return s.head == 0 ? 0 : 1; }
NSAJIT_DEVICE int topk_whole_end(const TopkSlice& s) { return max(topk_whole_begin(s), (s.head + s.n) >> 2); }

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

NSAJIT_DEVICE uint32_t topk_lane(const u32x4& k, int j) { return j == 0 ? k.x : j == 1 ? k.y : j == 2 ? k.z : k.w; }

// Key u = 4 v + j of the slice (element j of vector v), which the caller knows to be inside it.
NSAJIT_DEVICE uint32_t topk_slice_key(const TopkSlice& s, const uint32_t* kept, int resident_vecs, int u) {
  return (u >> 2) < resident_vecs ? kept[u] : topk_key(s.abase[u]);
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


// --- shared state and block-wide steps -------------------------------------------------------------

#define NSAJIT_TOPK_BINS0 4096   // first digit: key bits 31..20 (sign, exponent, 3 mantissa bits)
#define NSAJIT_TOPK_SHIFT0 20
#define NSAJIT_TOPK_RESCAN_BITS 8   // digits of the rescans (threshold bin larger than the list)
#define NSAJIT_TOPK_REFINE_BITS 10  // digits of the refinement over the candidate list

struct TopkShared {
  uint32_t rescan_hist[2][1 << NSAJIT_TOPK_RESCAN_BITS];  // by pass parity (cluster peers read one)
  uint32_t row_total[1 << NSAJIT_TOPK_RESCAN_BITS];
  uint32_t refine_hist[2][1 << NSAJIT_TOPK_REFINE_BITS];  // by pass parity: no barrier to zero
  int warp_sum[NSAJIT_TOPK_WARPS];
  int warp_greater[NSAJIT_TOPK_WARPS];
  int warp_equal[NSAJIT_TOPK_WARPS];
  int cta_counts[2];
  int cta_prefix[2];  // C > 1: the counts of the cluster's lower-rank CTAs
  uint32_t digit;
  int greater;
  int count;
  int cand_local;     // candidates this CTA found
  int cand_reserved;  // cluster rank 0: the cluster-wide list's fill level (remote atomics)
  uint32_t unique_key;  // speculative refinement: the one key left with the prefix
};

// One radix step, whole block: the bin d of h[0, nbins) with greater(d) < k <= greater(d) + h[d],
// greater(d) = keys in the bins above d. nbins is a power of two; thread t owns `per` consecutive
// bins counted from the top, so a block scan in thread order gives the counts above each chunk.
// Every thread returns d, greater(d) and h[d].
NSAJIT_DEVICE uint32_t topk_find_bin(const uint32_t* h, int nbins, int k, TopkShared& sh, int& greater, int& count) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = nbins > NSAJIT_THREADS ? nbins / NSAJIT_THREADS : 1;
  const int owners = nbins / per;
  const int top = nbins - 1 - tid * per;  // the highest bin of this thread's chunk
  // The chunk's sum in a rotated order: lane L starts at bin (L * per / 32) of its chunk, so the
  // warp's 32 reads of one step fall in 32 different banks (in order, chunks `per` words apart
  // share 32 / per banks: a 16-way conflict at 4096 bins and 256 threads; H200, 4096 rows of
  // 28673..32768 at 512 threads: -6 %). Chunks of 4 keep the plain order: the
  // rotation's index arithmetic cost more than 4-way conflicts in the 1024-thread cluster rows
  // (1 x 131072: +1 %).
  const int rotate = per >= 32 ? lane : per >= 8 ? (lane * per) >> 5 : 0;
  int local = 0;
  if (tid < owners)
    for (int i = 0; i < per; ++i) local += int(h[top - ((i + rotate) & (per - 1))]);
  const int inclusive = warp_inclusive_scan(local);
  if (lane == 31) sh.warp_sum[warp] = inclusive;
  __syncthreads();
  // Every warp scans the warp sums itself (no second barrier): keys in the warps' chunks above.
  const int w = lane < NSAJIT_TOPK_WARPS ? sh.warp_sum[lane] : 0;
  const int w_inclusive = warp_inclusive_scan(w);
  int above = __shfl_sync(NSAJIT_TOPK_FULL, w_inclusive - w, warp) + inclusive - local;
  if (tid < owners && above < k && above + local >= k) {  // exactly one thread
    for (int i = 0; i < per; ++i) {
      const int c = int(h[top - i]);
      if (above + c >= k) {
        sh.digit = uint32_t(top - i);
        sh.greater = above;
        sh.count = c;
        break;
      }
      above += c;
    }
  }
  __syncthreads();
  greater = sh.greater;
  count = sh.count;
  return sh.digit;
}

// The radix state of a row: among the keys whose bits under `mask` equal `prefix`, the k largest
// are still to be selected; `count` keys match; `bits` key bits are resolved (mask's width).
struct TopkRadix {
  uint32_t prefix;
  uint32_t mask;
  int k;
  int count;
  int bits;
};

NSAJIT_DEVICE void topk_radix_step(TopkRadix& x, uint32_t digit, int width, int greater, int count) {
  const int shift = 32 - x.bits - width;
  x.k -= greater;
  x.prefix |= digit << shift;
  x.mask |= ((1u << width) - 1u) << shift;
  x.count = count;
  x.bits += width;
}

// One pass of the refinement over a candidate list: the 10-bit (or last) digit under x's prefix,
// counted in the pass's histogram (zero: the prologue, or the pass before last).
struct TopkRefineDigit {
  int width;
  int shift;
  uint32_t digit_mask;
  uint32_t* h;
};

NSAJIT_DEVICE TopkRefineDigit topk_refine_digit(const TopkRadix& x, TopkShared& sh, int pass) {
  TopkRefineDigit r;
  r.width = min(NSAJIT_TOPK_REFINE_BITS, 32 - x.bits);
  r.shift = 32 - x.bits - r.width;
  r.digit_mask = (1u << r.width) - 1u;
  r.h = sh.refine_hist[pass & 1];
  return r;
}

NSAJIT_DEVICE void topk_refine_count(const TopkRefineDigit& r, const TopkRadix& x, uint32_t key) {
  if ((key & x.mask) == x.prefix) atomicAdd(&r.h[(key >> r.shift) & r.digit_mask], 1u);
}

// Whole block, after every thread's counts: the digit and the radix step; h is read again only
// by pass + 2, after the next pass's barriers, so it is zeroed here for that pass.
NSAJIT_DEVICE void topk_refine_finish(const TopkRefineDigit& r, TopkRadix& x, TopkShared& sh) {
  __syncthreads();
  int greater, count;
  const uint32_t d = topk_find_bin(r.h, 1 << r.width, x.k, sh, greater, count);
  topk_radix_step(x, d, r.width, greater, count);
  for (int i = threadIdx.x; i < (1 << r.width); i += NSAJIT_THREADS) r.h[i] = 0u;
}

// The warp's counts of keys above and equal to the threshold (or prefix): summed over the warp,
// stored by lane 0.
NSAJIT_DEVICE void topk_store_warp_counts(TopkShared& sh, int warp, int above, int equal) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    above += __shfl_xor_sync(NSAJIT_TOPK_FULL, above, o);
    equal += __shfl_xor_sync(NSAJIT_TOPK_FULL, equal, o);
  }
  if ((threadIdx.x & 31) == 0) {
    sh.warp_greater[warp] = above;
    sh.warp_equal[warp] = equal;
  }
}

// The sum over the cluster's C CTAs (C <= 16) of the word at `local` in each: all loads in flight
// before the first add.
NSAJIT_DEVICE uint32_t topk_cluster_sum_word(const void* local, int C) {
  uint32_t v[16];
#pragma unroll
  for (int q = 0; q < 16; ++q) v[q] = q < C ? topk_cluster_load(local, uint32_t(q)) : 0u;
  uint32_t sum = 0;
#pragma unroll
  for (int q = 0; q < 16; ++q) sum += v[q];
  return sum;
}

// The cluster-wide histogram of nbins bins: every CTA sums all CTAs' `local` (complete and not
// rewritten before the next cluster barrier) into `total`. Whole block; ends synchronised.
NSAJIT_DEVICE void topk_cluster_sum(const uint32_t* local, uint32_t* total, int nbins, int C) {
  topk_cluster_sync();  // every CTA's histogram is complete
  for (int j = threadIdx.x; j < nbins; j += NSAJIT_THREADS) total[j] = topk_cluster_sum_word(&local[j], C);
  __syncthreads();
}

NSAJIT_DEVICE uint32_t topk_cluster_address(const void* local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(topk_smem_address(local)), "r"(rank));
  return remote;
}


// --- speculative single sweep (one CTA per row) ----------------------------------------------------
// The exact path reads the row twice (pass 0 for the first digit, then the classify sweep). Here a
// sample of up to 2 * threads scores, taken from the sweep's first loads (one window at the start
// of each warp's segment), gives a lower bound B under which the
// topk-th largest key lies with high probability: the bin of the sample's r-th largest key, r its
// expected rank plus 4 standard deviations. One sweep then lists every score whose key is >= B
// (per warp, in index order: the raw score bits and the position); the scores are turned into keys
// and their first digits counted over the lists afterwards, and the selection runs on the lists
// alone. Exact whenever it is used: the topk largest keys are all >= B iff at least
// topk keys are; when fewer are, or a warp's list overflows (a plateau at B, a row whose large
// scores crowd one warp's segment), the row falls back to the exact sweeps.

constexpr int kTopkSweepUnroll = 4;  // rounds of 32 vectors in flight per warp in the sweep

// Rounds [q0, q0 + kTopkSweepUnroll) of this lane's vectors, whole vectors only, into raw (edge
// vectors and rounds past round_end are left as they are: the sweep reads them by element).
NSAJIT_DEVICE void topk_sweep_load(const TopkSlice& s, int q0, int round_end, u32x4 (&raw)[kTopkSweepUnroll]) {
  const int lane = threadIdx.x & 31;
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
#pragma unroll
  for (int u = 0; u < kTopkSweepUnroll; ++u) {
    const int v = (q0 + u) * 32 + lane;
    if (q0 + u < round_end && v >= vw0 && v < vw1) raw[u] = topk_load_16(s.abase + 4 * v);
  }
}

// The rank r of the sample's key that bounds the row's topk-th largest from below: the expected
// rank of the topk-th largest among `samples` scores of a row of n, plus 4 standard deviations.
NSAJIT_DEVICE int topk_sample_rank(int samples, int n) {
  const float expected = float(samples) * float(NSAJIT_TOPK) / float(n);
  const float fraction = float(NSAJIT_TOPK) / float(n);
  return int(ceilf(expected + 4.0f * sqrtf(expected * (1.0f - fraction)) + 1.0f));
}

// The bound B (a key >= 1, so that padding is never listed) for a row of n > topk positions, or
// 0 when the row should not speculate. Whole block (uniform result); `hist` (4096 words) is zero
// on entry and dirty on return.
// The sample: the last score of this lane's vectors in rounds 0 and 2 of the sweep's first batch
// (`head`, already loaded: no separate DRAM round trip or traffic for the sample), i.e. one window
// of two 128-score chunks at the start of each warp's segment. At most 2 * threads scores: a
// vector not whole in registers (the row's unaligned head) or past the segment gives none, and r
// is computed from the number actually taken (a row too short to give r samples: no bound).
NSAJIT_DEVICE uint32_t topk_sample_bound(const TopkSlice& s, const u32x4 (&head)[kTopkSweepUnroll], int round_begin,
                                         int round_end, uint32_t* hist, TopkShared& sh) {
  // Dense rows (more than 1/8 of the keys would be listed, even with every sample taken): the
  // exact path, whose second sweep hits L2 and whose list holds only the threshold bin, is faster
  // (measured on the H200, 4096 rows of 4097..8192: 182.2 us exact, 200.6 speculative at best;
  // docs/notes/topk.md run 29).
  constexpr int kMaxSamples = 2 * NSAJIT_THREADS;
  if (8 * topk_sample_rank(kMaxSamples, s.n) > kMaxSamples) return 0u;
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
  int taken = 0;
#pragma unroll
  for (int u = 0; u < kTopkSweepUnroll; u += 2) {
    const int v = (round_begin + u) * 32 + (threadIdx.x & 31);
    if (round_begin + u < round_end && v >= vw0 && v < vw1) {
      atomicAdd(&hist[topk_key(__uint_as_float(head[u].w)) >> NSAJIT_TOPK_SHIFT0], 1u);
      ++taken;
    }
  }
  // The barrier that publishes the histogram also counts the samples (0, 1 or 2 a thread).
  const int samples = __syncthreads_count(taken >= 1) + __syncthreads_count(taken >= 2);
  const int r = topk_sample_rank(samples, s.n);
  if (8 * r > samples) return 0u;  // uniform; also when fewer than r samples (find_bin needs >= r)
  int greater, count;
  const uint32_t d = topk_find_bin(hist, NSAJIT_TOPK_BINS0, r, sh, greater, count);
  return d == 0u ? 0u : d << NSAJIT_TOPK_SHIFT0;  // bin 0 (NaN, below -inf): the exact path
}

// Asks L2 for the whole 16-byte vectors of rounds [round_begin, round_end) (a hint, no
// completion): the sweep's later batches then wait on L2, not on DRAM, and the row streams at
// the copy engine's pace rather than at 4 loads in flight per thread.
NSAJIT_DEVICE void topk_prefetch_segment(const TopkSlice& s, int round_begin, int round_end) {
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
  const int v0 = max(vw0, 32 * round_begin), v1 = min(vw1, 32 * round_end);
  if (v1 > v0)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(s.abase + 4 * v0), "r"(uint32_t(16 * (v1 - v0)))
                 : "memory");
}

// The float f with x >= f <=> key(x) >= bound for every score x (NaN never passes, as its key 1
// is below any bound >= 2^20): the sweep compares scores, not keys.
NSAJIT_DEVICE float topk_bound_score(uint32_t bound) {
  if (bound >= 0x80000000u) return __uint_as_float(bound ^ 0x80000000u);  // a score >= +0
  if (bound > 0x007fffffu) return __uint_as_float(~bound);                 // a finite negative score
  return __uint_as_float(0xff800000u);  // at or below -inf's key: every score but NaN
}

// One warp's part of the sweep: rounds [round_begin, round_end) of 32 vectors (the classify's
// segments), every score x >= f(bound) appended to the warp's list as (score bits, row position)
// (shared-memory addresses list_key, list_position), in index order, at most `capacity` entries.
// Returns the number found (more than capacity: the list overflowed and the sweep stopped).
NSAJIT_DEVICE int topk_speculative_sweep(const TopkSlice& s, int slice_begin, uint32_t bound, uint32_t list_key,
                                         uint32_t list_position, int capacity, int round_begin, int round_end,
                                         u32x4 (&raw)[kTopkSweepUnroll]) {
  const int lane = threadIdx.x & 31;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const float f = topk_bound_score(bound);
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
  const float kNaN = __uint_as_float(0x7fffffffu);  // outside the slice: never listed
  int fill = 0;
  constexpr int kUnroll = kTopkSweepUnroll;
  for (int q0 = round_begin; q0 < round_end; q0 += kUnroll) {
    if (q0 != round_begin) topk_sweep_load(s, q0, round_end, raw);  // the first batch: the caller's
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = q0 + u;
      if (q >= round_end) break;  // warp-uniform
      const int v = q * 32 + lane;
      float x[4];
      if (v >= vw0 && v < vw1) {
        x[0] = __uint_as_float(raw[u].x);
        x[1] = __uint_as_float(raw[u].y);
        x[2] = __uint_as_float(raw[u].z);
        x[3] = __uint_as_float(raw[u].w);
      } else {  // an edge vector, or past the slice
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int e = 4 * v + j - s.head;
          x[j] = e >= 0 && e < s.n ? s.sp[e] : kNaN;
        }
      }
      // Ballots by element: lane l's element j is position 4 (32 q + l) + j, so the list order
      // (lane, then element) is index order.
      bool listed[4];
      uint32_t m[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        listed[j] = x[j] >= f;
        m[j] = __ballot_sync(NSAJIT_TOPK_FULL, listed[j]);
      }
      const int found = __popc(m[0]) + __popc(m[1]) + __popc(m[2]) + __popc(m[3]);
      if (fill + found <= capacity) {
        // Predicated stores of the raw score bits and positions at 32-bit shared addresses: no
        // loop as long as the lane with the most listed scores, no key conversion (done after
        // the sweep over the lists). Run 27's profile: the loop's version issued ~200
        // instructions a round.
        uint32_t at = 4u * uint32_t(fill + __popc(m[0] & lanes_below) + __popc(m[1] & lanes_below) +
                                    __popc(m[2] & lanes_below) + __popc(m[3] & lanes_below));
        const int position = slice_begin + 4 * v - s.head;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (listed[j]) {
            st_shared_4(list_key + at, __float_as_uint(x[j]));
            st_shared_4(list_position + at, uint32_t(position + j));
            at += 4u;
          }
        }
      }
      fill += found;
    }
    if (fill > capacity) break;  // warp-uniform: the row falls back
  }
  return fill;
}

// --- phase 1 of sorted specs: sort each row by (score desc, index asc), then transform -----------

NSAJIT_DEVICE void topk_sort_phase(const TopkParams& p, unsigned long long* s) {
  const int r = blockIdx.x;
  if (r >= p.rows) return;
  const int row_start = p.row_starts ? min(max(p.row_starts[r], 0), p.width) : 0;
  const int len = min(p.lengths[r], p.width - row_start);
  int* out = p.out + (long long)r * NSAJIT_TOPK;
  const KvSlotRow t = topk_transform_row(p, r);
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

// At most 64 registers: 1024 threads per SM are never limited by registers.
#if NSAJIT_THREADS == 256
// --- dense rows in registers (one CTA per row, 256 threads) -----------------------------------------
// Rows of at most NSAJIT_TOPK_DENSE_VECS * 256 - 1 vectors (slices <= 9212 positions) where the plan
// sets dense_registers: thread t holds the keys of vectors t + 256 j (j < NSAJIT_TOPK_DENSE_VECS) in
// registers, read once. Radix select on them: the 12-bit first digit (hist0), then two 10-bit
// digits counted straight from the registers (no candidate list, no second read of the row: exact
// whatever the distribution). Output: the keys > T and the first take_equal keys == T in index
// order, their slots from one block-wide scan of packed (greater | equal << 16) counts per round j
// (index order is round j, then thread, then element), staged in shared memory and written to
// `out` coalesced (transformed when fused).

// Not inlined: its registers are allocated apart from the rest of the kernel's (inlined, the
// whole kernel spilled at 64 registers); scalar arguments, so that nothing goes through the stack.
__device__ __noinline__ void topk_dense_row(const float* sp, const float* abase, int head, int n, int nvec,
                                            const int* table_row, int limit, int offset, bool apply,
                                            int* out, uint32_t* hist0, int* staged, TopkShared& sh) {
  constexpr int DV = NSAJIT_TOPK_DENSE_VECS;
  TopkSlice s;
  s.sp = sp;
  s.abase = abase;
  s.head = head;
  s.n = n;
  s.nvec = nvec;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  KvSlotRow t;
  t.table_row = table_row;
  t.limit = limit;
  t.offset = offset;
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
  u32x4 k[DV];
  // Whole vectors: all loads in flight before the first key.
#pragma unroll
  for (int j = 0; j < DV; ++j) {
    const int v = tid + j * NSAJIT_THREADS;
    k[j].x = k[j].y = k[j].z = k[j].w = 0u;
    if (v >= vw0 && v < vw1) k[j] = topk_load_16(s.abase + 4 * v);
  }
  // While the loads are in flight: hist0 (16-byte stores; the plan aligns it) and the list's fill.
  for (int i = tid; i < NSAJIT_TOPK_BINS0 / 4; i += NSAJIT_THREADS)
    reinterpret_cast<u32x4*>(hist0)[i] = u32x4{0u, 0u, 0u, 0u};
  if (tid == 0) sh.cand_local = 0;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < DV; ++j) {
    const int v = tid + j * NSAJIT_THREADS;
    if (v >= vw0 && v < vw1) {  // keys of real scores are never 0
      k[j].x = topk_key(__uint_as_float(k[j].x));
      k[j].y = topk_key(__uint_as_float(k[j].y));
      k[j].z = topk_key(__uint_as_float(k[j].z));
      k[j].w = topk_key(__uint_as_float(k[j].w));
      atomicAdd(&hist0[k[j].x >> NSAJIT_TOPK_SHIFT0], 1u);
      atomicAdd(&hist0[k[j].y >> NSAJIT_TOPK_SHIFT0], 1u);
      atomicAdd(&hist0[k[j].z >> NSAJIT_TOPK_SHIFT0], 1u);
      atomicAdd(&hist0[k[j].w >> NSAJIT_TOPK_SHIFT0], 1u);
    } else if (v < s.nvec) {  // an edge vector: element loads, key 0 outside the slice
      k[j] = topk_global_keys(s, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t key = topk_lane(k[j], e);
        if (key != 0u) atomicAdd(&hist0[key >> NSAJIT_TOPK_SHIFT0], 1u);
      }
    }
  }
  __syncthreads();
  TopkRadix x{0u, 0u, NSAJIT_TOPK, 0, 0};
  {
    int greater, count;
    const uint32_t d = topk_find_bin(hist0, NSAJIT_TOPK_BINS0, x.k, sh, greater, count);
    topk_radix_step(x, d, 32 - NSAJIT_TOPK_SHIFT0, greater, count);
  }
  // The keys of the threshold's bin (about 70 of 6K normal scores), listed from the start of
  // dynamic shared memory: nothing there is in use until the output is staged (hist0's search
  // ended with a barrier), and the plan gives it room for the whole slice (4 * 256 * 9 words).
  extern __shared__ u32x4 topk_dynamic[];
  uint32_t* const listed = reinterpret_cast<uint32_t*>(topk_dynamic);
  const int n_listed = x.count;
#pragma unroll
  for (int j = 0; j < DV; ++j) {
    if (j * NSAJIT_THREADS >= s.nvec) break;  // rounds past the slice hold padding only (uniform)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t key = topk_lane(k[j], e);
      if (key != 0u && (key & x.mask) == x.prefix) listed[atomicAdd(&sh.cand_local, 1)] = key;
    }
  }
  __syncthreads();
  if (n_listed <= NSAJIT_THREADS) {
    // One entry a thread, counted against all (16-byte broadcast reads): the entries with
    // greater < k <= greater + equal hold the threshold; the first listed copy writes it. One
    // barrier, where two 10-bit digits take four.
    if (tid < n_listed) {
      const uint32_t mine = listed[tid];
      const u32x4* const quads = reinterpret_cast<const u32x4*>(listed);
      int greater = 0, equal = 0, i = 0;
      for (; i + 4 <= n_listed; i += 4) {
        const u32x4 o = quads[i >> 2];
        greater += int(o.x > mine) + int(o.y > mine) + int(o.z > mine) + int(o.w > mine);
        equal += int(o.x == mine) + int(o.y == mine) + int(o.z == mine) + int(o.w == mine);
      }
      for (; i < n_listed; ++i) {
        greater += int(listed[i] > mine);
        equal += int(listed[i] == mine);
      }
      if (greater < x.k && greater + equal >= x.k) {
        bool first = true;  // copies of the threshold (rare): only the first listed one writes
        for (int j = 0; equal > 1 && j < tid; ++j) first = first && listed[j] != mine;
        if (first) {
          sh.digit = mine;
          sh.greater = x.k - greater;  // the copies of the threshold to take
        }
      }
    }
    __syncthreads();
    x.prefix = sh.digit;
    x.k = sh.greater;
    x.mask = 0xffffffffu;
    x.bits = 32;
  }
  if (x.bits < 32) {  // uniform: the digits' histograms, not zeroed at the kernel's start on this path
    for (int i = tid; i < 2 << NSAJIT_TOPK_REFINE_BITS; i += NSAJIT_THREADS) (&sh.refine_hist[0][0])[i] = 0u;
    __syncthreads();
  }
  for (int pass = 0; x.bits < 32; ++pass) {  // two 10-bit digits over the list
    const TopkRefineDigit digit = topk_refine_digit(x, sh, pass);
    for (int i = tid; i < n_listed; i += NSAJIT_THREADS) topk_refine_count(digit, x, listed[i]);
    topk_refine_finish(digit, x, sh);
  }
  const uint32_t threshold = x.prefix;  // the topk-th largest key (>= 1)
  const int take_equal = x.k;
  const int total_greater = NSAJIT_TOPK - take_equal;

  // Packed counts of round j: greater in the low 16 bits, equal in the high (a row's totals stay
  // below 2^16). Warp-inclusive scans; each warp's totals per round and each thread's exclusive
  // prefix inside its warp go to hist0 (free by now: the first digit's search ended with a
  // barrier; 72 + 9 * 256 words of its 4096), not to registers, which the keys fill.
  uint32_t* const warp_totals = hist0;                           // [warps][DV]
  uint32_t* const before = hist0 + DV * NSAJIT_TOPK_WARPS;       // [DV][threads]
#pragma unroll
  for (int j = 0; j < DV; ++j) {
    uint32_t c = 0u;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t key = topk_lane(k[j], e);
      c += uint32_t(key > threshold) | (uint32_t(key == threshold) << 16);
    }
    const uint32_t inclusive = uint32_t(warp_inclusive_scan(int(c)));
    before[j * NSAJIT_THREADS + tid] = inclusive - c;
    if (lane == 31) warp_totals[warp * DV + j] = inclusive;
  }
  __syncthreads();
  // Lane j < DV: round j's total, the warps before this one in it, then an exclusive scan of the
  // round totals over the lanes: the packed offset of (round j, this warp).
  uint32_t total = 0u, in_round = 0u;
  if (lane < DV) {
#pragma unroll
    for (int w = 0; w < NSAJIT_TOPK_WARPS; ++w) {
      const uint32_t v = warp_totals[w * DV + lane];
      total += v;
      in_round += w < warp ? v : 0u;
    }
  }
  const uint32_t rounds_inclusive = uint32_t(warp_inclusive_scan(int(total)));
  const uint32_t warp_offset = rounds_inclusive - total + in_round;
#pragma unroll
  for (int j = 0; j < DV; ++j) {
    const uint32_t base = __shfl_sync(NSAJIT_TOPK_FULL, warp_offset, j) + before[j * NSAJIT_THREADS + tid];
    int g = int(base & 0xffffu), q = int(base >> 16);
    const int position0 = 4 * (tid + j * NSAJIT_THREADS) - s.head;
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // predicated stores, no branches (the keys diverge)
      const uint32_t key = topk_lane(k[j], e);
      const bool greater = key > threshold, equal = key == threshold;
      const int slot = greater ? g : total_greater + q;
      if (greater || (equal && q < take_equal)) staged[slot] = position0 + e;
      g += int(greater);
      q += int(equal);
    }
  }
  __syncthreads();
  // `out`, consecutive threads on consecutive slots; fused: up to 8 page-table reads in flight.
  // Positions first, then the transform, then the stores: no branch between the reads.
  constexpr int kBatch = 8;
#pragma unroll
  for (int i0 = tid; i0 < NSAJIT_TOPK; i0 += kBatch * NSAJIT_THREADS) {
    int value[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * NSAJIT_THREADS;
      value[u] = i < NSAJIT_TOPK ? staged[i] : -1;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) value[u] = topk_emit(t, value[u], apply);
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (i0 + u * NSAJIT_THREADS < NSAJIT_TOPK) out[i0 + u * NSAJIT_THREADS] = value[u];
  }
}
#endif

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS, 1024 / NSAJIT_THREADS) nsajit_topk(const TopkParams p) {
  extern __shared__ u32x4 topk_dynamic[];
  __shared__ TopkShared sh;

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

  if (p.prefetch_slice != 0 && p.row_starts == nullptr) topk_prefetch_slice(p, r, rank);
  const int row_start = p.row_starts ? min(max(p.row_starts[r], 0), p.width) : 0;
  const int len = min(p.lengths[r], p.width - row_start);
  const KvSlotRow t = topk_transform_row(p, r);
  if (len <= NSAJIT_TOPK) {  // the same decision in every CTA of the row: no cluster barrier follows
    const int per = NSAJIT_TOPK / C;  // C divides 64, topk is a multiple of 64
    for (int j = int(rank) * per + tid; j < int(rank + 1) * per; j += NSAJIT_THREADS)
      out[j] = topk_emit(t, j < len ? j : -1, apply);
    return;
  }
  if (apply && tid == 0 && rank == 0) topk_prefetch_table(t, len);

  // This CTA's slice.
  TopkSlice s;
  const int b = int(rank) * p.slice;
  s.n = max(0, min(len - b, p.slice));
  s.sp = p.scores + (long long)r * p.score_row_stride + row_start + b;
  s.head = int((reinterpret_cast<unsigned long long>(s.sp) >> 2) & 3ull);
  s.abase = s.sp - s.head;
  s.nvec = s.n > 0 ? (s.head + s.n + 3) >> 2 : 0;
  const int resident_vecs = p.resident_vecs;
  // Dynamic shared memory (offsets in 4-byte words, set by runtime/topk.cpp): the kept keys at 0
  // (resident_vecs vectors), the first-digit histogram (later the overflow list of candidates),
  // this CTA's section of the cluster-wide histogram (C > 1), the per-thread candidate slots
  // (later, for dense or fused rows: the staged output positions), the cluster-wide candidate list
  // (C > 1), the warp of each overflow entry, and the classify's above and match bitmaps.
  uint32_t* const words = reinterpret_cast<uint32_t*>(topk_dynamic);
  u32x4* const keys = topk_dynamic;
  uint32_t* const hist0 = words + p.hist_offset;
  uint32_t* const section = words + p.section_offset;
  uint32_t* const slots = words + p.slots_offset;
  uint32_t* const cand = words + p.cand_offset;
  uint32_t* const overflow = hist0;  // free once the first digit is found
  unsigned short* const overflow_warp = reinterpret_cast<unsigned short*>(words + p.overflow_warp_offset);
  uint32_t* const above_map = words + p.bitmap_offset;  // keys above the prefix
  uint32_t* const match_map = above_map + p.bitmap_words;  // keys matching the prefix

  // C = 1 and the plan allows it: the speculative single sweep, with per-warp lists of (key,
  // position) in list_words words from list_offset (the sample's histogram first), over what only
  // the exact path uses.
  const bool may_speculate = C == 1 && p.speculate != 0;
  uint32_t* const list = words + p.list_offset;
  const int list_capacity = p.list_words / 2 / NSAJIT_TOPK_WARPS;  // entries per warp
  uint32_t* const warp_list = list + warp * list_capacity;
  int* const warp_list_position = reinterpret_cast<int*>(list + p.list_words / 2) + warp * list_capacity;

#if NSAJIT_THREADS == 256
  // The plan sets it only where s.nvec <= 256 * NSAJIT_TOPK_DENSE_VECS; checked again (uniform):
  // a longer slice takes the exact path instead of losing the keys past the registers. Before
  // the zeroing below: the dense rows zero what they use while their loads are in flight.
  if (p.dense_registers != 0 && C == 1 && s.nvec <= NSAJIT_THREADS * NSAJIT_TOPK_DENSE_VECS) {
    topk_dense_row(s.sp, s.abase, s.head, s.n, s.nvec, t.table_row, t.limit, t.offset, apply, out, hist0,
                   reinterpret_cast<int*>(slots), sh);
    return;
  }
#endif
  for (int i = tid; i < NSAJIT_TOPK_BINS0; i += NSAJIT_THREADS) hist0[i] = 0u;
  if (may_speculate)
    for (int i = tid; i < NSAJIT_TOPK_BINS0; i += NSAJIT_THREADS) list[i] = 0u;  // the sample's histogram
  for (int i = tid; i < 2 << NSAJIT_TOPK_REFINE_BITS; i += NSAJIT_THREADS) (&sh.refine_hist[0][0])[i] = 0u;
  if (tid == 0) {
    sh.cand_local = 0;
    sh.cand_reserved = 0;
  }
  __syncthreads();

  // Warp w owns the contiguous rounds [w R / W, (w + 1) R / W) of 32 vectors: in the classify (or
  // speculative) sweep and in the output.
  const int rounds = (s.nvec + 31) >> 5;
  const int round_begin = int((long long)rounds * warp / NSAJIT_TOPK_WARPS);
  const int round_end = int((long long)rounds * (warp + 1) / NSAJIT_TOPK_WARPS);

  TopkRadix x{0u, 0u, NSAJIT_TOPK, 0, 0};
  bool resolved = false;      // exact path: all 32 bits found before the classify
  bool speculated = false;    // the speculative sweep's list holds the selection
  int warp_fill = 0;          // keys in this warp's list
  if (may_speculate) {
    if (p.prefetch_row != 0 && lane == 0) topk_prefetch_segment(s, round_begin, round_end);
    u32x4 head[kTopkSweepUnroll];  // the sweep's first batch, which also gives the sample
    topk_sweep_load(s, round_begin, round_end, head);
    const uint32_t bound = topk_sample_bound(s, head, round_begin, round_end, list, sh);
    if (bound != 0u) {  // uniform
      warp_fill = topk_speculative_sweep(s, b, bound, topk_smem_address(warp_list),
                                         topk_smem_address(warp_list_position), list_capacity, round_begin,
                                         round_end, head);
      if (lane == 0) sh.warp_sum[warp] = warp_fill;
      __syncthreads();
      int listed = 0;
      bool overflowed = false;
#pragma unroll
      for (int w = 0; w < NSAJIT_TOPK_WARPS; ++w) {
        listed += sh.warp_sum[w];
        overflowed |= sh.warp_sum[w] > list_capacity;
      }
      speculated = !overflowed && listed >= NSAJIT_TOPK;
    }
  }

  if (speculated) {
    // The topk-th largest of the listed keys is the row's: first digit from hist0, then 10-bit
    // digits over the lists down to bit 0 (no capacity limit: the lists hold every candidate).
    for (int i = lane; i < warp_fill; i += 32) {  // scores to keys, first digits counted
      const uint32_t key = topk_key(__uint_as_float(warp_list[i]));
      warp_list[i] = key;
      atomicAdd(&hist0[key >> NSAJIT_TOPK_SHIFT0], 1u);
    }
    __syncthreads();
    int greater, count;
    const uint32_t d = topk_find_bin(hist0, NSAJIT_TOPK_BINS0, x.k, sh, greater, count);
    topk_radix_step(x, d, 32 - NSAJIT_TOPK_SHIFT0, greater, count);
    for (int pass = 0; x.bits < 32; ++pass) {
      if (x.count == 1) {  // one key left with the prefix: it is T (one barrier, not three a digit)
        for (int i = lane; i < warp_fill; i += 32)
          if ((warp_list[i] & x.mask) == x.prefix) sh.unique_key = warp_list[i];
        __syncthreads();
        x.prefix = sh.unique_key;
        x.mask = 0xffffffffu;
        x.bits = 32;
        break;
      }
      const TopkRefineDigit digit = topk_refine_digit(x, sh, pass);
      for (int i = lane; i < warp_fill; i += 32) topk_refine_count(digit, x, warp_list[i]);
      topk_refine_finish(digit, x, sh);
    }
    int g = 0, e = 0;
    for (int i = lane; i < warp_fill; i += 32) {
      const uint32_t key = warp_list[i];
      g += key > x.prefix;
      e += key == x.prefix;
    }
    topk_store_warp_counts(sh, warp, g, e);
    __syncthreads();
  } else {

    // Pass 0: load the slice, keep the keys of its first resident_vecs vectors, and count the first
    // digit (bits 31..20) of every key. The whole 16-byte vectors [vw0, vw1) go through a lean loop
    // (several loads in flight per thread, no per-element checks: their keys are never 0); the at
    // most two partial vectors at the edges are read element by element.
    {
      const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
      constexpr int kUnroll = 4;
      for (int base = vw0; base < vw1; base += kUnroll * NSAJIT_THREADS) {
        u32x4 raw[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int v = base + u * NSAJIT_THREADS + tid;
          if (v < vw1) raw[u] = topk_load_16(s.abase + 4 * v);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int v = base + u * NSAJIT_THREADS + tid;
          if (v < vw1) {
            u32x4 kv;
            kv.x = topk_key(__uint_as_float(raw[u].x));
            kv.y = topk_key(__uint_as_float(raw[u].y));
            kv.z = topk_key(__uint_as_float(raw[u].z));
            kv.w = topk_key(__uint_as_float(raw[u].w));
            if (v < resident_vecs) keys[v] = kv;
            atomicAdd(&hist0[kv.x >> NSAJIT_TOPK_SHIFT0], 1u);
            atomicAdd(&hist0[kv.y >> NSAJIT_TOPK_SHIFT0], 1u);
            atomicAdd(&hist0[kv.z >> NSAJIT_TOPK_SHIFT0], 1u);
            atomicAdd(&hist0[kv.w >> NSAJIT_TOPK_SHIFT0], 1u);
          }
        }
      }
      // Partial vectors: v = 0 (when the slice is not 16-byte aligned) and v = nvec - 1.
      const int edge = tid == 0 ? 0 : tid == 1 ? s.nvec - 1 : -1;
      if (edge >= 0 && edge < s.nvec && (edge < vw0 || edge >= vw1) && !(tid == 1 && edge == 0)) {
        const u32x4 kv = topk_global_keys(s, edge);
        if (edge < resident_vecs) keys[edge] = kv;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t key = topk_lane(kv, j);
          if (key != 0u) atomicAdd(&hist0[key >> NSAJIT_TOPK_SHIFT0], 1u);
        }
      }
    }
    __syncthreads();
    if (C > 1) {
      // Cluster-wide first-digit histogram: CTA q sums the section [q S, (q + 1) S) over all CTAs
      // (reduce-scatter), then every CTA gathers all sections into its hist0.
      const int S = NSAJIT_TOPK_BINS0 / C;
      topk_cluster_sync();  // every CTA's hist0 is complete
      for (int j = tid; j < S; j += NSAJIT_THREADS) section[j] = topk_cluster_sum_word(&hist0[int(rank) * S + j], C);
      topk_cluster_sync();  // every section is summed; no CTA reads a hist0 any more
      static_assert(NSAJIT_TOPK_BINS0 % (4 * NSAJIT_THREADS) == 0, "all-gather: 4 bins per thread and round");
      for (int bin = tid; bin < NSAJIT_TOPK_BINS0; bin += 4 * NSAJIT_THREADS) {
        uint32_t v[4];  // four loads in flight
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int b2 = bin + u * NSAJIT_THREADS;
          v[u] = topk_cluster_load(&section[b2 % S], uint32_t(b2 / S));
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) hist0[bin + u * NSAJIT_THREADS] = v[u];
      }
      __syncthreads();
    }
    {
      int greater, count;
      const uint32_t d = topk_find_bin(hist0, NSAJIT_TOPK_BINS0, x.k, sh, greater, count);
      topk_radix_step(x, d, 32 - NSAJIT_TOPK_SHIFT0, greater, count);
    }

    // Rescans (rare: more keys share the threshold bin than the candidate list holds, e.g. a
    // plateau or values inside one narrow band): 8-bit digits over the keys matching the prefix.
    for (int pass = 0; x.count > p.cand_capacity && x.bits < 32; ++pass) {
      const int width = min(NSAJIT_TOPK_RESCAN_BITS, 32 - x.bits);
      const int shift = 32 - x.bits - width;
      const int nbins = 1 << width;
      uint32_t* h = sh.rescan_hist[pass & 1];
      for (int i = tid; i < nbins; i += NSAJIT_THREADS) h[i] = 0u;
      __syncthreads();
      for (int v = tid; v < s.nvec; v += NSAJIT_THREADS) {
        const u32x4 kv = v < resident_vecs ? keys[v] : topk_global_keys(s, v);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t key = topk_lane(kv, j);
          if (key != 0u && (key & x.mask) == x.prefix) atomicAdd(&h[(key >> shift) & uint32_t(nbins - 1)], 1u);
        }
      }
      __syncthreads();
      const uint32_t* total = h;
      if (C > 1) {
        topk_cluster_sum(h, sh.row_total, nbins, C);
        total = sh.row_total;
      }
      int greater, count;
      const uint32_t d = topk_find_bin(total, nbins, x.k, sh, greater, count);
      topk_radix_step(x, d, width, greater, count);
    }
    resolved = x.bits == 32;  // else: x.count <= cand_capacity keys go to the list

    // Classify: warp w owns the contiguous rounds [w R / W, (w + 1) R / W) of 32 vectors (the same
    // segments as the output below). Per warp: keys above the prefix (all selected) and keys matching
    // it (resolved: the ties; else candidates), counted and recorded in the above / match bitmaps.
    // A thread keeps its first slots_per_thread candidates in its own slots (slots[i * T + tid]: no
    // atomic, no wait); more go to the overflow list.
    int nslot = 0;  // candidates in this thread's slots
    {
      int my_above = 0, my_match = 0;
      for (int q = round_begin; q < round_end; ++q) {
        const u32x4 kv = topk_slice_keys(s, keys, resident_vecs, q * 32 + lane);
        uint32_t above = 0u, match = 0u;  // bit j: key j of the vector
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t key = topk_lane(kv, j);
          const uint32_t high = key & x.mask;
          above |= uint32_t(high > x.prefix) << j;
          match |= uint32_t((high == x.prefix) & (key != 0u)) << j;
        }
        my_above += __popc(above);
        my_match += __popc(match);
        topk_store_word(above_map, q, lane, above);
        topk_store_word(match_map, q, lane, match);
        if (!resolved && match) {  // rare
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const uint32_t key = topk_lane(kv, j);
            if ((key & x.mask) == x.prefix && key != 0u) {
              if (nslot < p.slots_per_thread) {
                slots[nslot * NSAJIT_THREADS + tid] = key;
                ++nslot;
              } else {
                const int i = atomicAdd(&sh.cand_local, 1);
                overflow[i] = key;
                overflow_warp[i] = (unsigned short)warp;
              }
            }
          }
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        my_above += __shfl_xor_sync(NSAJIT_TOPK_FULL, my_above, o);
        my_match += __shfl_xor_sync(NSAJIT_TOPK_FULL, my_match, o);
      }
      if (lane == 0) {
        sh.warp_greater[warp] = my_above;
        sh.warp_equal[warp] = resolved ? my_match : 0;
      }
    }
    __syncthreads();

    if (!resolved) {
      // The candidates: all x.count keys of the row that match the prefix. C = 1: this CTA's slots
      // (slots[i * T + tid], i < nslot) and overflow list. C > 1: the CTA reserves a range of the
      // cluster-wide list (one remote atomic on rank 0), each thread a part of it for its slots
      // and its share of the overflow list (a block scan), and writes them into every CTA's list,
      // so that every CTA refines the same keys (their order does not matter). One atomic per
      // thread with candidates (≈ 1,400 of a normal row of 131072, on one word of rank 0,
      // serialised) cost ≈ 1.2 us of its 20 us (H200, docs/notes/topk.md run 33).
      const int n_over = sh.cand_local;
      if (C > 1) {
        const int over_mine = n_over > tid ? (n_over - tid + NSAJIT_THREADS - 1) / NSAJIT_THREADS : 0;
        const int mine = nslot + over_mine;
        const int inclusive = warp_inclusive_scan(mine);
        if (lane == 31) sh.warp_sum[warp] = inclusive;
        __syncthreads();
        if (warp == 0) {  // the CTA's range, then each warp's start in it (in warp_sum)
          const int w = lane < NSAJIT_TOPK_WARPS ? sh.warp_sum[lane] : 0;
          const int w_inclusive = warp_inclusive_scan(w);
          int base = 0;
          if (lane == 31 && w_inclusive > 0)
            asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;"
                         : "=r"(base)
                         : "r"(topk_cluster_address(&sh.cand_reserved, 0u)), "r"(w_inclusive)
                         : "memory");
          base = __shfl_sync(NSAJIT_TOPK_FULL, base, 31);
          if (lane < NSAJIT_TOPK_WARPS) sh.warp_sum[lane] = base + w_inclusive - w;
        }
        __syncthreads();
        const int at = sh.warp_sum[warp] + inclusive - mine;
        for (int i = 0; i < mine; ++i) {
          const uint32_t key = i < nslot ? slots[i * NSAJIT_THREADS + tid] : overflow[tid + (i - nslot) * NSAJIT_THREADS];
          for (int q = 0; q < C; ++q)
            asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(topk_cluster_address(&cand[at + i], uint32_t(q))),
                         "r"(key)
                         : "memory");
        }
        topk_cluster_sync();  // every list is complete
      }
      // Refinement over the candidates: digits of up to 10 bits down to bit 0.
      const int x_count_list = x.count;
      for (int pass = 0; x.bits < 32; ++pass) {
        const TopkRefineDigit digit = topk_refine_digit(x, sh, pass);
        if (C > 1) {  // the cluster-wide list
          for (int i = tid; i < x_count_list; i += NSAJIT_THREADS) topk_refine_count(digit, x, cand[i]);
        } else {  // this thread's slots, then its share of the overflow list
          for (int i = 0; i < nslot; ++i) topk_refine_count(digit, x, slots[i * NSAJIT_THREADS + tid]);
          for (int i = tid; i < n_over; i += NSAJIT_THREADS) topk_refine_count(digit, x, overflow[i]);
        }
        topk_refine_finish(digit, x, sh);
      }
      // This CTA's candidates above the threshold and equal to it, per warp: the thread's own slots
      // (its warp is known), then the overflow list.
      int g = 0, e = 0;
      for (int i = 0; i < nslot; ++i) {
        const uint32_t key = slots[i * NSAJIT_THREADS + tid];
        g += key > x.prefix;
        e += key == x.prefix;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        g += __shfl_xor_sync(NSAJIT_TOPK_FULL, g, o);
        e += __shfl_xor_sync(NSAJIT_TOPK_FULL, e, o);
      }
      if (lane == 0 && (g | e)) {
        atomicAdd(&sh.warp_greater[warp], g);
        atomicAdd(&sh.warp_equal[warp], e);
      }
      for (int i = tid; i < n_over; i += NSAJIT_THREADS) {
        const uint32_t key = overflow[i];
        if (key > x.prefix) atomicAdd(&sh.warp_greater[overflow_warp[i]], 1);
        else if (key == x.prefix) atomicAdd(&sh.warp_equal[overflow_warp[i]], 1);
      }
      __syncthreads();
    }
  }

  const uint32_t threshold = x.prefix;  // the topk-th largest key
  const int take_equal = x.k;           // keys == threshold to take (>= 1)
  const int total_greater = NSAJIT_TOPK - take_equal;

  // Ordered compaction: exclusive prefixes of the per-warp counts, then of the CTAs' counts.
  if (warp == 0) {
    const int g = lane < NSAJIT_TOPK_WARPS ? sh.warp_greater[lane] : 0;
    const int e = lane < NSAJIT_TOPK_WARPS ? sh.warp_equal[lane] : 0;
    const int gi = warp_inclusive_scan(g);
    const int ei = warp_inclusive_scan(e);
    if (lane < NSAJIT_TOPK_WARPS) {
      sh.warp_greater[lane] = gi - g;
      sh.warp_equal[lane] = ei - e;
    }
    if (lane == 31) {
      sh.cta_counts[0] = gi;
      sh.cta_counts[1] = ei;
    }
  }
  int cta_greater = 0, cta_equal = 0;  // selected elements of the CTAs before this one
  if (C > 1) {
    topk_cluster_sync();  // counts published
    if (warp == 0) {  // lane q < rank reads CTA q's counts; one warp sum
      int g = 0, e = 0;
      if (lane < int(rank)) {
        g = int(topk_cluster_load(&sh.cta_counts[0], uint32_t(lane)));
        e = int(topk_cluster_load(&sh.cta_counts[1], uint32_t(lane)));
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        g += __shfl_xor_sync(NSAJIT_TOPK_FULL, g, o);
        e += __shfl_xor_sync(NSAJIT_TOPK_FULL, e, o);
      }
      if (lane == 0) {
        sh.cta_prefix[0] = g;
        sh.cta_prefix[1] = e;
      }
    }
    topk_cluster_arrive();  // done reading the others' shared memory (waited for before exit)
    __syncthreads();
    cta_greater = sh.cta_prefix[0];
    cta_equal = sh.cta_prefix[1];
  } else {
    __syncthreads();
  }
  // Dense rows (more than 1/8 of the keys selected) and fused rows stage their positions in
  // shared memory (the candidate slots, free by now; topk <= 4096 words) and write them to `out`
  // once, coalesced (and transformed when fused): a lane's positions are consecutive output
  // slots, so in a dense row each store straight to `out` would spread over the whole warp's
  // output range (measured: 4096 rows of 4097..8192, 205 -> 192 us staged; at 28673..32768 the
  // extra pass costs more than it saves, 516 -> 527 us). Uniform per row, so per cluster.
  const bool stage = apply || 8 * NSAJIT_TOPK > len;
  // (The speculative path stages in hist0, free since its first digit: its lists use the slots.)
  int* const dst = stage ? reinterpret_cast<int*>(speculated ? hist0 : slots) : out;
  int next_greater = cta_greater + sh.warp_greater[warp];
  int next_equal = cta_equal + sh.warp_equal[warp];
  // Output from the bitmaps, no second pass over the keys: each warp walks the words of its rounds
  // 32 at a time, lane i word w0 + i. A matching key (a candidate) is compared with T in full, then
  // the selected bits are ranked by a warp scan of their counts and written in index order.
  const uint32_t* const kept = reinterpret_cast<const uint32_t*>(keys);
  const int word_end = 4 * round_end;
  // Speculated: the warp's list (in index order) 32 entries at a time, ranked by ballots.
  const uint32_t lanes_below = (1u << lane) - 1u;
  for (int i0 = 0; speculated && i0 < warp_fill; i0 += 32) {
    const int i = i0 + lane;
    const uint32_t key = i < warp_fill ? warp_list[i] : 0u;
    const int position = i < warp_fill ? warp_list_position[i] : 0;
    const uint32_t g = __ballot_sync(NSAJIT_TOPK_FULL, key > threshold);
    const uint32_t e = __ballot_sync(NSAJIT_TOPK_FULL, key == threshold);
    if (key > threshold) dst[next_greater + __popc(g & lanes_below)] = position;
    const int pe = next_equal + __popc(e & lanes_below);
    if (key == threshold && pe < take_equal) dst[total_greater + pe] = position;
    next_greater += __popc(g);
    next_equal += __popc(e);
  }
  for (int w0 = 4 * round_begin; !speculated && w0 < word_end; w0 += 32) {
    if (next_greater >= total_greater && next_equal >= take_equal) break;  // warp-uniform
    const int w = w0 + lane;
    uint32_t above = 0u, equal = 0u;
    if (w < word_end) {
      above = above_map[w];
      uint32_t match = match_map[w];
      if (resolved) {
        equal = match;  // all 32 bits resolved: matching keys are T
      } else {
        while (match) {
          const int bit = __ffs(match) - 1;
          match &= match - 1u;
          const uint32_t key = topk_slice_key(s, kept, resident_vecs, 32 * w + bit);
          above |= uint32_t(key > threshold) << bit;
          equal |= uint32_t(key == threshold) << bit;
        }
      }
    }
    const int g = __popc(above);
    const int g_inclusive = warp_inclusive_scan(g);
    int pg = next_greater + g_inclusive - g;
    next_greater += __shfl_sync(NSAJIT_TOPK_FULL, g_inclusive, 31);
    int pe = next_equal;
    if (__any_sync(NSAJIT_TOPK_FULL, equal != 0u)) {
      const int e = __popc(equal);
      const int e_inclusive = warp_inclusive_scan(e);
      pe += e_inclusive - e;
      next_equal += __shfl_sync(NSAJIT_TOPK_FULL, e_inclusive, 31);
    }
    const int position0 = b + 32 * w - s.head;  // the position of bit 0
    while (above) {
      const int bit = __ffs(above) - 1;
      above &= above - 1u;
      dst[pg++] = position0 + bit;
    }
    while (equal) {
      const int bit = __ffs(equal) - 1;
      equal &= equal - 1u;
      if (pe < take_equal) dst[total_greater + pe] = position0 + bit;
      ++pe;
    }
  }
  if (stage) {
    // This CTA's staged slots [cta_greater, cta_greater + G) and its taken ties go to `out`,
    // consecutive threads on consecutive slots. Fused: the transform's page-table reads all in
    // parallel (in the loop above each would stall its warp); each thread issues the reads of up
    // to 4 slots before its first store (the compiler may not move a read of the table above a
    // store to `out`), so a row pays about one L2 latency here instead of one per slot of the
    // thread.
    __syncthreads();  // the staged positions are visible to the whole CTA
    const int g_end = cta_greater + sh.cta_counts[0];
    const int e_begin = total_greater + min(cta_equal, take_equal);
    const int e_end = total_greater + min(cta_equal + sh.cta_counts[1], take_equal);
    const int g_count = g_end - cta_greater;
    const int count = g_count + (e_end - e_begin);
    constexpr int kBatch = 4;
    for (int i0 = tid; i0 < count; i0 += kBatch * NSAJIT_THREADS) {
      int slot[kBatch], slot_value[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * NSAJIT_THREADS;
        slot[u] = i >= count ? -1 : i < g_count ? cta_greater + i : e_begin + (i - g_count);
        slot_value[u] = slot[u] >= 0 ? dst[slot[u]] : -1;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) slot_value[u] = topk_emit(t, slot_value[u], apply);
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (slot[u] >= 0) out[slot[u]] = slot_value[u];
    }
  }
  if (C > 1) topk_cluster_wait();  // no CTA leaves while another may still read its shared memory
}
