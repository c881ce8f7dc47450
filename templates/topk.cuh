// topk.cuh — §2: exact per-row top-k of fp32 or bf16 indexer scores, optionally fused with the §1
// transform (positions -> KV slots) and optionally sorted by score descending.
//
// Per row: row_start = clamp(row_starts[r], 0, width) (0 without row_starts);
// len = min(lengths[r], width - row_start).
//   len <= 0:         all -1.
//   0 < len <= topk:  0, 1, ..., len-1, then -1 (scores not read).
//   len > topk:       exact radix select (below).
//
// Launch shape (chosen by families/topk/heuristics.cpp from width and rows): grid = rows * ctas_per_row CTAs;
// with ctas_per_row = C > 1 the C CTAs of a row form one thread-block cluster (sm_90) and share
// histograms, candidates and counts through distributed shared memory. CTA c covers the positions
// [c * slice, (c + 1) * slice) of its row. The slice is loaded once (vector loads of 4 scores) and its first
// resident_vecs vectors are kept as order-preserving keys in dynamic shared memory: all of them
// when the slice fits, as many as fit when a slice too long for shared memory has the SM to itself
// (1024 threads, e.g. 128 rows of 131072 in one wave), none when shared memory is left to other
// CTAs. Every later sweep reads the kept vectors from shared memory and re-reads the others from
// global memory (L2).
//
// Selection: keys are order-preserving uint32 (NaN -> 1 below -inf's 0x007fffff; -0.0 == +0.0;
// key 0 marks padding and is never counted). Radix select of the topk-th largest key T:
//   1. pass 0, fused with the load: a histogram of the 12-bit first digit (bits 31..20: sign,
//      exponent, 3 mantissa bits, so normal data spreads over many bins); C > 1: only the window of
//      bins that can hold T is summed over the cluster (from the highest slice-local topk-th key's
//      bin to the row's largest key's bin; one barrier, one remote load a thread for normal data).
//      The threshold bin holds x.count keys.
//   2. only if x.count > cand_capacity (a plateau, a narrow band): rescans of the slice with 8-bit
//      digits over the keys matching the prefix found so far, until the count fits or all 32 bits
//      are resolved. Never a truncating buffer: the rescan is the fallback.
//   3. classify sweep: per warp, the keys above the prefix (all selected) and the keys matching it,
//      which go to a candidate list (C > 1: every CTA gets the whole cluster's list); both also
//      recorded as per-position bitmaps (1 bit per key).
//   4. refinement on the list alone: an 8-bit digit, then the <= 32 keys left ranked by warp 0
//      (else 10-bit digits down to bit 0) give T and the ties to take.
// Output (ordered compaction): the `greater` keys > T in increasing index order at slots
// [0, greater), then the first topk - greater keys == T in increasing index order (ties go to
// the lower index). Slot of an element = number of selected elements of lower index (per-warp
// contiguous segments, warp scans of the bitmaps' words, block scan, cluster prefix of CTA
// counts), so the output depends on the row's data only: it is bit-identical across runs, launch
// shapes, candidate capacities and batchmates. Dense rows (more than 1/8 of the keys selected)
// and fused rows stage their slots in shared memory and write them to `out` coalesced.
//
// Algorithm (NSAJIT_TOPK_ALGORITHM, the spec's tile.algorithm): each kernel compiles one selection
// path (with the exact sweeps its speculation falls back to), so a kernel holds only the code its
// launches run: exact_sweeps and cluster_sweeps are the steps above at C = 1 and C > 1, the other
// three follow.
//
// Cluster lists (C > 1 CTAs, cluster_lists; templates/topk_cluster_lists.cuh):
// after pass 0 each CTA lists its keys down to the first-digit bin of its ~1.25 topk / C-th
// largest and bulk-copies the list (with its bins' counts) to every CTA; each CTA selects from
// the C lists, which hold the row's selection whenever every list's lowest bin is at or below
// T's, and writes its own keys. One exchange instead of the steps above; a threshold of 0.0
// (ReLU rows) is found from the messages' counts of keys above 0.0 and of 0.0; when the lists
// cannot hold the selection (scores crowded into a few slices, other plateaus, lists over
// capacity) the row takes the exact path, with nothing to undo.
//
// Speculative single sweep (one CTA per row, speculative_sweep; the plan's choice for slices of at
// least 12 topk positions): a sample of up to 4 scores a thread, from the sweep's first loads, bounds
// the topk-th largest key from below, one sweep lists every score at or above the bound per warp
// (score and position, in index order), and the selection (fp32: a first digit fitted to the
// listed keys' range, then warp 0 ranks the few left; bf16: the fixed first digit and the key's
// 4 bits under it) and the ordered output run on the lists alone. The row reads its scores once instead of twice.
// A bound in 0.0's bin (a ReLU plateau no list could hold) lists the scores above 0.0 and counts
// the zeros: when those complete topk the threshold is 0.0 and its ties, the first zeros in index
// order, are re-read (L2). Exact whenever used: when the lists overflow or hold fewer than topk
// keys (a misleading sample, large scores crowded into one warp's segment, a plateau of 0.0 with
// negatives needed below it), or the row is dense (more than ~1/8 of it would be listed) or too
// short to give the sample, the row takes the exact path above.
//
// NSAJIT_FUSED: every written index goes through the transform (in the pass that writes the
// staged slots, all page-table reads in parallel so that they do not serialise) (decode: page-table row
// r / NSAJIT_NEXT_N; prefill: the request of r through cu_seqlens_q; ragged: + offsets[r]); only
// indices in [0, len) ever reach the page table. NSAJIT_SORTED: phase 0 writes raw positions,
// phase 1 (a second launch, one CTA per row) sorts each row of len > topk by (score desc, index
// asc) with a bitonic sort in shared memory, then transforms. Rows of len <= topk keep
// 0..len-1 (scores are not read for them).
//
// The parts before this file (concatenated by the generator): topk_common.cuh (constants, keys,
// cluster helpers, slices), topk_radix.cuh (block-wide radix steps), topk_speculative.cuh (the
// speculative sweep), topk_bf16.cuh (bf16 rows: pass 0 and the sweep with 16-byte loads of 8
// scores), topk_cluster_lists.cuh (the speculative cluster selection), topk_sort.cuh (phase 1 of
// sorted specs), topk_dense.cuh (dense rows).
#include "kv_slot_transform.cuh"
#include "topk_common.cuh"
#include "topk_radix.cuh"
#include "topk_speculative.cuh"
#include "topk_bf16.cuh"
#include "topk_cluster_lists.cuh"
#include "topk_sort.cuh"
#include "topk_dense.cuh"

// --- the kernel ------------------------------------------------------------------------------------

// At most 64 registers: 1024 threads per SM are never limited by registers. The 512-thread
// cluster-list kernel keeps its slice (>= 137 KB of shared memory: one CTA an SM anyway): up to 128.
#if NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_CLUSTER_LISTS && NSAJIT_THREADS == 512
#define NSAJIT_TOPK_MIN_CTAS 1
#else
#define NSAJIT_TOPK_MIN_CTAS (1024 / NSAJIT_THREADS)
#endif
extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS, NSAJIT_TOPK_MIN_CTAS) nsajit_topk(const TopkParams p) {
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

  // Known at compile time to be 1 or at least 2 (the host launches clusters of 2-16 CTAs), so
  // every `C > 1` below folds and a kernel keeps one CTA layout's code.
  const int C = kTopkClustered ? max(p.ctas_per_row, 2) : 1;
  const int r = blockIdx.x / C;
  if (r >= p.rows) return;  // never: grid = rows * C
  const uint32_t rank = C > 1 ? topk_cluster_rank() : 0u;
  const int tid = threadIdx.x;
  int* out = p.out + (long long)r * NSAJIT_TOPK;

  if (p.prefetch_slice != 0 && p.row_starts == nullptr) topk_prefetch_slice(p, r, rank);
  if (!kTopkClustered && tid == 0) topk_prefetch_next_wave(p, r);  // clusters: one wave
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
  s.sp = topk_row_scores(p, r) + row_start + b;
  s.head = int((reinterpret_cast<unsigned long long>(s.sp) / sizeof(TopkScore)) & 3ull);
  s.abase = s.sp - s.head;
  s.nvec = s.n > 0 ? (s.head + s.n + 3) >> 2 : 0;
  uint32_t* const words = reinterpret_cast<uint32_t*>(topk_dynamic);
#if NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_DENSE_REGISTERS
  // The host launches it only with slices of at most 256 * NSAJIT_TOPK_DENSE_VECS - 1 vectors
  // (families/topk/launch.cpp checks the plan), so every row's keys fit the registers.
  topk_dense_row(s.sp, s.abase, s.head, s.n, s.nvec, t.table_row, t.limit, t.offset, out,
                 words + p.hist_offset, reinterpret_cast<int*>(words + p.slots_offset), sh);
#else  // the other algorithms: the rest of the kernel
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int resident_vecs = p.resident_vecs;
  // Dynamic shared memory (offsets in 4-byte words, set by families/topk/heuristics.cpp): the kept keys at 0
  // (resident_vecs vectors), the first-digit histogram (later the overflow list of candidates,
  // then, for dense or fused rows, the staged output positions), the per-thread candidate slots
  // (C > 1: first the window's cluster-wide totals), the cluster-wide candidate list (C > 1), the
  // warp of each overflow entry, and the classify's above and match bitmaps.
  u32x4* const keys = topk_dynamic;
  uint32_t* const hist0 = words + p.hist_offset;
  uint32_t* const slots = words + p.slots_offset;
  uint32_t* const cand = words + p.cand_offset;
  uint32_t* const overflow = hist0;  // free once the first digit is found
  unsigned short* const overflow_warp = reinterpret_cast<unsigned short*>(words + p.overflow_warp_offset);
  uint32_t* const above_map = words + p.bitmap_offset;  // keys above the prefix
  uint32_t* const match_map = above_map + p.bitmap_words;  // keys matching the prefix

  // speculative_sweep kernels: the speculative single sweep, with per-warp lists in list_words
  // words from list_offset (the sample's histogram first), over what only the exact path uses:
  // fp32, (key, position) in two halves; bf16, one word an entry (score or key bits << 16 | the
  // position's offset in the warp's segment: templates/topk_bf16.cuh).
  const bool may_speculate = NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_SPECULATIVE_SWEEP;
  uint32_t* const list = words + p.list_offset;
  constexpr int kListEntryWords = NSAJIT_SCORE_BF16 ? 1 : 2;
  const int list_capacity = p.list_words / kListEntryWords / NSAJIT_TOPK_WARPS;  // entries per warp
  uint32_t* const warp_list = list + warp * list_capacity;
  int* const warp_list_position = reinterpret_cast<int*>(list + p.list_words / 2) + warp * list_capacity;  // fp32
  const uint32_t position_bytes = 4u * uint32_t(p.list_words / 2);  // warp_list_position - warp_list, uniform

  if (may_speculate) {  // vector stores, unrolled: a quarter (half in sh, 8-byte aligned) of the stores, no loop code
    topk_zero_words<16, NSAJIT_TOPK_BINS0>(hist0);  // hist_offset, list_offset: multiples of 4 words
    topk_zero_words<16, NSAJIT_TOPK_BINS0>(list);   // the sample's histogram
    topk_zero_words<8, 2 << NSAJIT_TOPK_REFINE_BITS>(&sh.refine_hist[0][0]);
    topk_zero_words<8, 1 << NSAJIT_TOPK_FIRST_REFINE_BITS>(sh.first_refine_hist);
  } else {
    for (int i = tid; i < NSAJIT_TOPK_BINS0; i += NSAJIT_THREADS) hist0[i] = 0u;
    for (int i = tid; i < 2 << NSAJIT_TOPK_REFINE_BITS; i += NSAJIT_THREADS) (&sh.refine_hist[0][0])[i] = 0u;
    for (int i = tid; i < 1 << NSAJIT_TOPK_FIRST_REFINE_BITS; i += NSAJIT_THREADS) sh.first_refine_hist[i] = 0u;
  }
  if (tid < 32) sh.union_count[tid] = 0u;
  if (tid == 0) {
    sh.cand_local = 0;
    sh.key_lo = 0xffffffffu;
    sh.key_hi = 0u;
    sh.cand_reserved = 0;
    sh.slice_max = 0u;
    sh.short_n = 0;
    sh.zero_keys = 0u;
  }
#if NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_CLUSTER_LISTS
  if (topk_uses_cluster_lists(p)) topk_cluster_lists_init(C, sh);
#endif
  __syncthreads();

  // Warp w owns the contiguous rounds [w R / W, (w + 1) R / W) of 32 vectors: in the classify (or
  // speculative) sweep and in the output.
  const int rounds = (s.nvec + 31) >> 5;
  const int round_begin = int((long long)rounds * warp / NSAJIT_TOPK_WARPS);
  const int round_end = int((long long)rounds * (warp + 1) / NSAJIT_TOPK_WARPS);

  TopkRadix x{0u, 0u, NSAJIT_TOPK, 0, 0};
  bool resolved = false;      // exact path: all 32 bits found before the classify
  bool speculated = false;    // the speculative sweep's list holds the selection
  bool zero_ties = false;     // ... and it is a plateau of 0.0: the list holds the keys above it
  int warp_zeros = 0;         // zero_ties: this warp's zeros (its segment's ties)
  int listed = 0;             // keys in all the warps' lists
  int warp_fill = 0;          // keys in this warp's list
  if (may_speculate) {
    if (p.prefetch_row != 0 && lane == 0) topk_prefetch_segment(s, round_begin, round_end);
    u32x4 head[kTopkSweepUnroll];  // the sweep's first batch, which also gives the sample
#if NSAJIT_SCORE_BF16
    topk_sweep_load_pairs(s, round_begin, round_end, head);  // 8 scores a lane (templates/topk_bf16.cuh)
#else
    topk_sweep_load(s, round_begin, round_end, head);
#endif
    const uint32_t bound = topk_sample_bound(s, head, round_begin, round_end, list, sh);
    if (bound != 0u) {  // uniform
      const bool plateau = bound == kTopkPositiveBound;  // uniform
      if (plateau) {  // the zeros are counted only here: normal rows run the sweep they ran before
        int zeros = 0;
        warp_fill = topk_speculative_sweep<true>(s, b, bound, smem_u32(warp_list), position_bytes,
                                                 list_capacity, round_begin, round_end, head, zeros);
        warp_zeros = __reduce_add_sync(NSAJIT_TOPK_FULL, zeros);
        if (lane == 0) sh.warp_equal[warp] = warp_zeros;  // the plateau's ties, used when zero_ties
      } else {
        int unused = 0;
        warp_fill = topk_speculative_sweep<false>(s, b, bound, smem_u32(warp_list), position_bytes,
                                                  list_capacity, round_begin, round_end, head, unused);
      }
      if (lane == 0) sh.warp_sum[warp] = warp_fill;
      __syncthreads();
      int zero_total = 0;
      bool overflowed = false;
#pragma unroll
      for (int w = 0; w < NSAJIT_TOPK_WARPS; ++w) {
        listed += sh.warp_sum[w];
        overflowed |= sh.warp_sum[w] > list_capacity;
      }
      if (plateau) {
#pragma unroll
        for (int w = 0; w < NSAJIT_TOPK_WARPS; ++w) zero_total += sh.warp_equal[w];
      }
      speculated = !overflowed && listed >= NSAJIT_TOPK;
      zero_ties = !overflowed && plateau && listed < NSAJIT_TOPK && listed + zero_total >= NSAJIT_TOPK;
      speculated = speculated || zero_ties;
    }
  }

  if (zero_ties) {
    // The threshold is 0.0; every listed key is above it, and the first topk - listed zeros of
    // the row (in index order, at the output) are its ties. sh.warp_equal holds each warp's zeros.
#if NSAJIT_SCORE_BF16
    for (int i = lane; i < warp_fill; i += 32) warp_list[i] = topk_packed_key(warp_list[i]);
#else
    for (int i = lane; i < warp_fill; i += 32) warp_list[i] = topk_key(__uint_as_float(warp_list[i]));
#endif
    x.prefix = kTopkZeroKey;
    x.mask = 0xffffffffu;
    x.bits = 32;
    x.k = NSAJIT_TOPK - listed;
    // Each warp's keys above T are its list, counted in sh.warp_sum (read by the compaction): no
    // write to sh.warp_greater here, which the warps' vector reads of warp_equal above may overlap.
    __syncthreads();  // every warp has read warp_equal before the compaction rewrites it
  } else if (speculated) {
    // The topk-th largest of the listed keys is the row's. fp32: a first digit fitted to the
    // listed keys' range, counted in hist0, then the few keys left ranked by warp 0, then 10-bit
    // digits over the lists down to bit 0 (no capacity limit: the lists hold every candidate);
    // bf16: the fixed first digit (the fitted one measured slower there), then the 4 bits that
    // resolve a bf16 key, counted by each warp with its keys above the first digit's bin.
#if NSAJIT_SCORE_BF16
    uint32_t hi = 0u;  // the largest listed key
    for (int i = lane; i < warp_fill; i += 32) {  // scores to keys in place, first digits counted
      const uint32_t key = topk_packed_key(warp_list[i]);
      warp_list[i] = key;
      atomicAdd(&hist0[key >> NSAJIT_TOPK_SHIFT0], 1u);
      hi = max(hi, key);
    }
    hi = __reduce_max_sync(NSAJIT_TOPK_FULL, hi);
    if (lane == 0) atomicMax(&sh.key_hi, hi);
    __syncthreads();
    // Every warp finds the bin itself, from the lists' top bin down (a normal row's lists span a
    // few dozen bins: one or two warp steps; no block-wide search and its two barriers).
    int greater, count;
    const uint32_t d =
        topk_warp_find_bin_down_far(hist0, int(sh.key_hi >> NSAJIT_TOPK_SHIFT0), 0, x.k, greater, count);
    topk_radix_step(x, d, 32 - NSAJIT_TOPK_SHIFT0, greater, count);
    topk_resolve_bf16_lists(x, warp_list, warp_fill, sh);  // templates/topk_bf16.cuh; the warps' counts stored
#else
    uint32_t lo = 0xffffffffu, hi = 0u;
    for (int i = lane; i < warp_fill; i += 32) {  // scores to keys
      const uint32_t key = topk_key(__uint_as_float(warp_list[i]));
      warp_list[i] = key;
      lo = min(lo, key);
      hi = max(hi, key);
    }
    lo = __reduce_min_sync(NSAJIT_TOPK_FULL, lo);
    hi = __reduce_max_sync(NSAJIT_TOPK_FULL, hi);
    if (lane == 0) {
      atomicMin(&sh.key_lo, lo);
      atomicMax(&sh.key_hi, hi);
    }
    __syncthreads();
    lo = sh.key_lo;
    const int shift = topk_window_shift(lo, sh.key_hi);
    for (int i = lane; i < warp_fill; i += 32) atomicAdd(&hist0[(warp_list[i] >> shift) - (lo >> shift)], 1u);
    __syncthreads();
    int greater, count;
    const uint32_t d = topk_find_bin(hist0, NSAJIT_TOPK_BINS0, x.k, sh, greater, count);
    topk_window_step(x, lo, shift, d, greater, count);
    if (x.bits < 32 && x.count > 1 && x.count <= 32) {  // uniform
      for (int i = lane; i < warp_fill; i += 32)
        if ((warp_list[i] & x.mask) == x.prefix) sh.short_list[atomicAdd(&sh.short_n, 1)] = warp_list[i];
      topk_rank_short_list(x, sh);
    }
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
#endif
    __syncthreads();
  } else {

    // Pass 0: load the slice, keep the keys of its first resident_vecs vectors, and count the first
    // digit (bits 31..20) of every key. The whole vectors [vw0, vw1) go through a lean loop
    // (several loads in flight per thread, no per-element checks: their keys are never 0); the at
    // most two partial vectors at the edges are read element by element.
    {
      uint32_t slice_max = 0u;  // C > 1: the slice's largest key
      uint32_t zeros = 0u;      // keys of 0.0 (kTopkCountZeros)
#if NSAJIT_SCORE_BF16
      topk_pass0_pairs(s, keys, resident_vecs, hist0, zeros, slice_max);  // 8 scores a load (topk_bf16.cuh)
#else
      const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
      constexpr int kUnroll = 4;
      for (int base = vw0; base < vw1; base += kUnroll * NSAJIT_THREADS) {
        u32x4 raw[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int v = base + u * NSAJIT_THREADS + tid;
          if (v < vw1) raw[u] = topk_load_vec(s.abase + 4 * v);
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
            topk_count_first_digit(hist0, kv.x, zeros);
            topk_count_first_digit(hist0, kv.y, zeros);
            topk_count_first_digit(hist0, kv.z, zeros);
            topk_count_first_digit(hist0, kv.w, zeros);
            slice_max = max(slice_max, max(max(kv.x, kv.y), max(kv.z, kv.w)));
          }
        }
      }
      // Partial vectors: v = 0 (when the slice is not vector-aligned) and v = nvec - 1.
      const int edge = tid == 0 ? 0 : tid == 1 ? s.nvec - 1 : -1;
      if (edge >= 0 && edge < s.nvec && (edge < vw0 || edge >= vw1) && !(tid == 1 && edge == 0))
        topk_pass0_edge_vector(s, edge, keys, resident_vecs, hist0, zeros, slice_max);
#endif
      if (kTopkCountZeros) topk_flush_zeros(zeros, sh, hist0);
      if (C > 1) {
        slice_max = __reduce_max_sync(NSAJIT_TOPK_FULL, slice_max);
        if (lane == 0) atomicMax(&sh.slice_max, slice_max);
      }
    }
    __syncthreads();
    if (C > 1) {
      // The row's first digit without exchanging whole histograms. The row's threshold T is at
      // least the topk-th largest key of any slice holding topk keys (that slice alone has topk
      // keys at or above it), and at most the row's largest key: its bin lies in [lo, hi], lo the
      // highest of the slices' bins of their topk-th largest keys, hi the bin of the row's largest
      // key (normal scores: ~25 bins). After the barrier every CTA reads the C CTAs' bounds, then
      // sums the window's bins over all CTAs (two dependent remote round trips: about what the
      // reduce-scatter and all-gather cost at 16 CTAs, less at 2) and finds the same bin. The plan's slices hold >= 8192
      // positions, so lo > 0 whenever a row needs a selection; a window down to bin 0 (test
      // overrides with short slices) is slower, never wrong.
      const int hi_local = int(sh.slice_max >> NSAJIT_TOPK_SHIFT0);
#if NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_CLUSTER_LISTS
      // The speculative selection first (templates/topk_cluster_lists.cuh): one message from each
      // CTA to each, the exact path below when the lists cannot hold the row's selection (512 or
      // 1024 threads only: at 256 it would spill).
      if (topk_uses_cluster_lists(p)) {
        // Words from cluster_list_offset: the message, then the warps' lists' keys and positions.
        const int message_words = NSAJIT_TOPK_MSG_KEYS + p.cluster_list_capacity;
        uint32_t* const warp_lists = words + p.cluster_list_offset + message_words;
        const TopkClusterLists lists{words + p.cluster_list_offset,
                                     warp_lists,
                                     reinterpret_cast<int*>(warp_lists + NSAJIT_TOPK_WARPS * p.cluster_warp_capacity),
                                     words + p.cluster_inbox_offset,
                                     p.cluster_list_capacity,
                                     message_words,
                                     p.cluster_warp_capacity};
        const int warp_n = topk_cluster_exchange(s, b, keys, hist0, hi_local,
                                                 topk_cluster_list_rank(s.n, len), C, rank, lists, round_begin,
                                                 round_end, sh);
        if (topk_cluster_select(C, rank, lists, warp_n, s, b, keys, round_begin, round_end, t, apply, out, sh)) return;
      }
#endif
      if (warp == 0) {
        int greater, count;
        const uint32_t lo_local = s.n >= NSAJIT_TOPK
                                      ? topk_warp_find_bin_down_far(hist0, hi_local, 0, NSAJIT_TOPK, greater, count)
                                      : 0u;
        if (lane == 0) sh.slice_lo = lo_local;
      }
      topk_cluster_sync();  // every CTA's hist0, slice_max and slice_lo are complete
      // Every warp reads the C CTAs' bounds itself (no block barrier).
      uint32_t max_key = 0u, lo_bin = 0u;
      if (lane < C) {
        max_key = topk_cluster_load(&sh.slice_max, uint32_t(lane));
        lo_bin = topk_cluster_load(&sh.slice_lo, uint32_t(lane));
      }
      const int hi = int(__reduce_max_sync(NSAJIT_TOPK_FULL, max_key) >> NSAJIT_TOPK_SHIFT0);
      const int lo = int(__reduce_max_sync(NSAJIT_TOPK_FULL, lo_bin));
      // Pair i = (bin hi - i / C, CTA i % C): C consecutive lanes load one bin of every CTA and
      // sum it by shuffles (C divides 32); the window's totals go to the slots (free until the
      // classify, written by this CTA only), indexed by bin.
      uint32_t* const total = slots;
      const int pairs = (hi - lo + 1) * C;
      for (int i0 = 0; i0 < pairs; i0 += NSAJIT_THREADS) {  // uniform
        const int i = i0 + tid;
        uint32_t v = i < pairs ? topk_cluster_load(&hist0[hi - i / C], uint32_t(i % C)) : 0u;
        for (int o = 1; o < C; o <<= 1) v += __shfl_xor_sync(NSAJIT_TOPK_FULL, v, o);
        if (i < pairs && i % C == 0) total[hi - i / C] = v;
      }
      topk_cluster_arrive();  // done reading the others' hist0 (the wait below: before it is reused)
      __syncthreads();
      // Every warp finds the bin itself (no barrier): one step for a window of at most 32 bins,
      // 1024 bins a step past them (a ReLU row's window reaches down to 0.0's bin).
      int greater, count;
      const uint32_t d = topk_warp_find_bin_down_far(total, hi, lo, x.k, greater, count);
      topk_radix_step(x, d, 32 - NSAJIT_TOPK_SHIFT0, greater, count);
      topk_cluster_wait();  // no CTA reads this hist0 any more (it becomes the overflow list)
      __syncthreads();      // every warp has read `total` before the classify writes the slots
    } else {
      int greater, count;
      const uint32_t d = topk_find_bin(hist0, NSAJIT_TOPK_BINS0, x.k, sh, greater, count);
      topk_radix_step(x, d, 32 - NSAJIT_TOPK_SHIFT0, greater, count);
      if (kTopkCountZeros) topk_resolve_zero_plateau(x, sh.zero_keys);
    }

    // Rescans (rare: more keys share the threshold bin than the candidate list holds, e.g. a
    // plateau or values inside one narrow band): 8-bit digits over the keys matching the prefix,
    // after one sweep for their range, which resolves a plateau of equal keys (ReLU zeros: each
    // digit would count them all on one histogram word) and skips the bits a band shares.
    if (x.count > p.cand_capacity && x.bits < 32) {  // uniform (C > 1: cluster-wide counts)
      uint32_t lo = 0xffffffffu, hi = 0u;
      for (int v = tid; v < s.nvec; v += NSAJIT_THREADS) {
        const u32x4 kv = v < resident_vecs ? keys[v] : topk_global_keys(s, v);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t key = topk_lane(kv, j);
          if (key != 0u && (key & x.mask) == x.prefix) {
            lo = min(lo, key);
            hi = max(hi, key);
          }
        }
      }
      topk_key_range(lo, hi, sh, C);
      topk_narrow_to_range(x, lo, hi);
      topk_resolve_bf16(x);
    }
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
      topk_resolve_bf16(x);
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
      // serialised) is a small part of the row's time.
      const int n_over = sh.cand_local;
      if (C > 1) {
        const int mine = nslot + topk_thread_share(n_over, tid);
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
      // Refinement over the candidates (templates/topk_radix.cuh).
      const int x_count_list = x.count;
      // This thread's candidates: j < mine_n, candidate(j).
      const int mine_n = C > 1 ? topk_thread_share(x_count_list, tid) : nslot + topk_thread_share(n_over, tid);
      topk_refine_candidates(x, sh, mine_n, [&](int j) -> uint32_t {
        if (C > 1) return cand[tid + j * NSAJIT_THREADS];  // the cluster-wide list
        return j < nslot ? slots[j * NSAJIT_THREADS + tid] : overflow[tid + (j - nslot) * NSAJIT_THREADS];
      });
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
    const int g = lane < NSAJIT_TOPK_WARPS ? (zero_ties ? sh.warp_sum[lane] : sh.warp_greater[lane]) : 0;
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
  // shared memory and write them to `out` once, coalesced (and transformed when fused): a lane's
  // positions are consecutive output slots, so in a dense row each store straight to `out` would
  // spread over the whole warp's output range; for sparse rows the extra pass costs more than it
  // saves. Uniform per row, so per cluster.
  const bool stage = apply || 8 * NSAJIT_TOPK > len;
  // The stage is hist0 (4096 words >= topk on every plan, where the slots may hold 2,048), dead by
  // now on every path: the speculative lists start after it, the exact path's overflow list was
  // last read before the barrier above, and clusters waited before reusing it.
  int* const dst = stage ? reinterpret_cast<int*>(hist0) : out;
  int next_greater = cta_greater + sh.warp_greater[warp];
  int next_equal = cta_equal + sh.warp_equal[warp];
  // Output from the bitmaps, no second pass over the keys: each warp walks the words of its rounds
  // 32 at a time, lane i word w0 + i. A matching key (a candidate) is compared with T in full, then
  // the selected bits are ranked by a warp scan of their counts and written in index order.
  const uint32_t* const kept = reinterpret_cast<const uint32_t*>(keys);
  const int word_end = 4 * round_end;
  // Speculated: the warp's list (in index order) 32 entries at a time, ranked by ballots.
  const uint32_t lanes_below = (1u << lane) - 1u;
#if NSAJIT_SCORE_BF16
  // bf16 entries: the key's high half (its low half is the sign's, as T's) and the position's offset.
  const uint32_t list_threshold = threshold & 0xffff0000u;
  const int segment_base = topk_pair_segment_base(s, b, round_begin);
#else
  const uint32_t list_threshold = threshold;
#endif
  for (int i0 = 0; speculated && i0 < warp_fill; i0 += 32) {
    const int i = i0 + lane;
#if NSAJIT_SCORE_BF16
    const uint32_t entry = i < warp_fill ? warp_list[i] : 0u;
    const uint32_t key = entry & 0xffff0000u;
    const int position = segment_base + int(entry & 0xffffu);
#else
    const uint32_t key = i < warp_fill ? warp_list[i] : 0u;
    const int position = i < warp_fill ? warp_list_position[i] : 0;
#endif
    const uint32_t g = __ballot_sync(NSAJIT_TOPK_FULL, key > list_threshold);
    const uint32_t e = __ballot_sync(NSAJIT_TOPK_FULL, key == list_threshold);
    if (key > list_threshold) dst[next_greater + __popc(g & lanes_below)] = position;
    const int pe = next_equal + __popc(e & lanes_below);
    if (key == list_threshold && pe < take_equal) dst[total_greater + pe] = position;
    next_greater += __popc(g);
    next_equal += __popc(e);
  }
  if (zero_ties)
    topk_write_zero_ties(s, b, round_begin, round_end, next_equal, take_equal, total_greater, warp_zeros, dst);
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
    // This CTA's staged slots of keys > T (from cta_greater on) and its taken ties go to `out`,
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
#endif  // NSAJIT_TOPK_ALGORITHM != NSAJIT_TOPK_DENSE_REGISTERS
}
