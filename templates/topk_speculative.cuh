// topk_speculative.cuh — the top-k family (templates/topk.cuh), part 3: the speculative single
// sweep of one CTA per row (sample, bound, per-warp lists).
#pragma once
#include "topk_radix.cuh"

// --- speculative single sweep (one CTA per row) ----------------------------------------------------
// The exact path reads the row twice (pass 0 for the first digit, then the classify sweep). Here a
// sample of up to 4 * threads scores, taken from the sweep's first loads (one window at the start
// of each warp's segment), gives a lower bound B under which the
// topk-th largest key lies with high probability: the bin of the sample's r-th largest key, r its
// expected rank plus 4 standard deviations. One sweep then lists every score whose key is >= B
// (per warp, in index order: the raw score bits and the position); the scores are turned into keys
// and their first digits counted over the lists afterwards, and the selection runs on the lists
// alone. Exact whenever it is used: the topk largest keys are all >= B iff at least
// topk keys are; when fewer are, or a warp's list overflows (a plateau at B, a row whose large
// scores crowd one warp's segment), the row falls back to the exact sweeps. A B in 0.0's bin
// becomes kTopkPositiveBound (below), so that a plateau of 0.0 completing topk does not fall back.

constexpr int kTopkSweepUnroll = 4;  // rounds of 32 vectors in flight per warp in the sweep

// The bound of a row whose sample puts the topk-th largest in 0.0's bin (a ReLU row's plateau): the
// sweep lists the scores above 0.0 and counts the 0.0s; when fewer than topk are listed and the
// 0.0s make up the rest, the threshold is 0.0 and the first zeros in index order are its ties.
constexpr uint32_t kTopkPositiveBound = kTopkZeroKey + 1u;

// Rounds [q0, q0 + kTopkSweepUnroll) of this lane's vectors, whole vectors only, into raw (edge
// vectors and rounds past round_end are left as they are: the sweep reads them by element).
NSAJIT_DEVICE void topk_sweep_load(const TopkSlice& s, int q0, int round_end, u32x4 (&raw)[kTopkSweepUnroll]) {
  const int lane = threadIdx.x & 31;
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
#pragma unroll
  for (int u = 0; u < kTopkSweepUnroll; ++u) {
    const int v = (q0 + u) * 32 + lane;
    if (q0 + u < round_end && v >= vw0 && v < vw1) raw[u] = topk_load_vec(s.abase + 4 * v);
  }
}

// Rounds [q0, q0 + kTopkSweepUnroll) of this lane's vectors when all are whole vectors of the
// slice: unguarded loads from one address (immediate offsets).
NSAJIT_DEVICE void topk_sweep_load_whole(const TopkSlice& s, int q0, u32x4 (&raw)[kTopkSweepUnroll]) {
  const TopkScore* const base = s.abase + 4 * (q0 * 32 + (threadIdx.x & 31));
#pragma unroll
  for (int u = 0; u < kTopkSweepUnroll; ++u) raw[u] = topk_load_vec(base + 128 * u);
}

// The rank r of the sample's key that bounds the row's topk-th largest from below: the expected
// rank of the topk-th largest among `samples` scores of a row of n, plus 4 standard deviations.
NSAJIT_DEVICE int topk_sample_rank(int samples, int n) {
  const float expected = float(samples) * float(NSAJIT_TOPK) / float(n);
  const float fraction = float(NSAJIT_TOPK) / float(n);
  return int(ceilf(expected + 4.0f * sqrtf(expected * (1.0f - fraction)) + 1.0f));
}

#if NSAJIT_SCORE_BF16
// bf16 scores: the sweep's loads are 16 bytes of 8 scores (templates/topk_bf16.cuh, included by
// topk.cuh after this file): the first batch, the sample taken from it, the sweep.
NSAJIT_DEVICE void topk_sweep_load_pairs(const TopkSlice& s, int round_begin, int round_end,
                                         u32x4 (&raw)[kTopkSweepUnroll]);
NSAJIT_DEVICE int topk_sample_pairs(const TopkSlice& s, const u32x4 (&head)[kTopkSweepUnroll], int round_begin,
                                    int round_end, uint32_t* hist, uint32_t& top);
template <bool kCountZeros>
NSAJIT_DEVICE int topk_speculative_sweep_pairs(const TopkSlice& s, uint32_t bound, uint32_t list_key, int capacity,
                                               int round_begin, int round_end, u32x4 (&raw)[kTopkSweepUnroll],
                                               int& zeros);
#endif

// The bound B (a key >= 1, so that padding is never listed) for a row of n > topk positions, or
// 0 when the row should not speculate. Whole block (uniform result); `hist` (4096 words) is zero
// on entry and dirty on return.
// The sample: the last score of this lane's vectors in each round of the sweep's first batch
// (`head`, already loaded: no separate DRAM round trip or traffic for the sample), i.e. one window
// of four 128-score chunks at the start of each warp's segment. At most 4 * threads scores: a
// vector not whole in registers (the row's unaligned head) or past the segment gives none, and r
// is computed from the number actually taken (a row too short to give r samples: no bound).
// Warp 0 alone computes r and finds the bin, from the highest sample's bin down (two barriers a
// row instead of four; the others wait at the second).
NSAJIT_DEVICE uint32_t topk_sample_bound(const TopkSlice& s, const u32x4 (&head)[kTopkSweepUnroll], int round_begin,
                                         int round_end, uint32_t* hist, TopkShared& sh) {
  constexpr int kMaxSamples = kTopkSweepUnroll * NSAJIT_THREADS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // The full sample's rank, while the first batch's loads are in flight.
  const int r_max = warp == 0 ? topk_sample_rank(kMaxSamples, s.n) : 0;
  uint32_t top = 0u;  // the highest bin of this lane's samples
#if NSAJIT_SCORE_BF16
  const int taken = topk_sample_pairs(s, head, round_begin, round_end, hist, top);  // the same from pairs
#else
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
  int taken = 0;
#pragma unroll
  for (int u = 0; u < kTopkSweepUnroll; ++u) {
    const int v = (round_begin + u) * 32 + lane;
    if (round_begin + u < round_end && v >= vw0 && v < vw1) {
      const uint32_t bin = topk_key(__uint_as_float(head[u].w)) >> NSAJIT_TOPK_SHIFT0;
      atomicAdd(&hist[bin], 1u);
      top = max(top, bin);
      ++taken;
    }
  }
#endif
  const int warp_taken = __reduce_add_sync(NSAJIT_TOPK_FULL, taken);
  const uint32_t warp_top = __reduce_max_sync(NSAJIT_TOPK_FULL, top);
  if (lane == 0) {
    sh.warp_sum[warp] = warp_taken;
    sh.warp_greater[warp] = int(warp_top);
  }
  __syncthreads();  // the histogram and the warps' counts
  if (warp == 0) {
    const int samples = __reduce_add_sync(NSAJIT_TOPK_FULL, lane < NSAJIT_TOPK_WARPS ? sh.warp_sum[lane] : 0);
    const uint32_t row_top =
        __reduce_max_sync(NSAJIT_TOPK_FULL, lane < NSAJIT_TOPK_WARPS ? uint32_t(sh.warp_greater[lane]) : 0u);
    const int r = samples == kMaxSamples ? r_max : topk_sample_rank(samples, s.n);
    uint32_t bound = 0u;
    // Dense rows (more than 1/8 of the keys would be listed, even with every sample taken): the
    // exact path, whose second sweep hits L2 and whose list holds only the threshold bin, is faster.
    // 8 r > samples: also fewer than r samples (the search needs >= r).
    if (8 * r_max <= kMaxSamples && 8 * r <= samples) {
      int greater, count;
      const uint32_t d = topk_warp_find_bin_down_far(hist, int(row_top), 0, r, greater, count);
      bound = d == kTopkZeroKey >> NSAJIT_TOPK_SHIFT0 ? kTopkPositiveBound  // no list holds a plateau of 0.0
              : d == 0u                               ? 0u                  // bin 0 (NaN, below -inf): the exact path
                                                      : d << NSAJIT_TOPK_SHIFT0;
    }
    if (lane == 0) sh.digit = bound;
  }
  __syncthreads();  // the bound; the lists may overwrite the histogram after it
  return sh.digit;
}

// Asks L2 for the whole vectors of rounds [round_begin, round_end) (a hint, no
// completion): the sweep's later batches then wait on L2, not on DRAM, and the row streams at
// the copy engine's pace rather than at 4 loads in flight per thread.
NSAJIT_DEVICE void topk_prefetch_segment(const TopkSlice& s, int round_begin, int round_end) {
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
  const int v0 = max(vw0, 32 * round_begin), v1 = min(vw1, 32 * round_end);
#if NSAJIT_SCORE_BF16
  // The bulk prefetch takes 16-byte aligned bounds: bf16 vectors (8 bytes) are trimmed inward.
  const unsigned long long first = (reinterpret_cast<unsigned long long>(s.abase + 4 * v0) + 15ull) & ~15ull;
  const unsigned long long end = reinterpret_cast<unsigned long long>(s.abase + 4 * v1) & ~15ull;
  if (end > first)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(first), "r"(uint32_t(end - first)) : "memory");
#else
  if (v1 > v0)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(s.abase + 4 * v0), "r"(uint32_t(16 * (v1 - v0)))
                 : "memory");
#endif
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
// (the shared-memory address list_key; each entry's position position_bytes after its score, a
// uniform offset the stores take as an address term; bf16: one word an entry, topk_bf16.cuh), in
// index order, at most `capacity` entries. Returns the number found (more than capacity: the list overflowed and the sweep stopped).
// kCountZeros: `zeros` also counts this lane's scores equal to 0.0 (the plateau bound).
template <bool kCountZeros>
NSAJIT_DEVICE int topk_speculative_sweep(const TopkSlice& s, int slice_begin, uint32_t bound, uint32_t list_key,
                                         uint32_t position_bytes, int capacity, int round_begin, int round_end,
                                         u32x4 (&raw)[kTopkSweepUnroll], int& zeros) {
#if NSAJIT_SCORE_BF16  // 8 scores a lane and load, one-word entries (templates/topk_bf16.cuh); raw: topk_sweep_load_pairs'
  return topk_speculative_sweep_pairs<kCountZeros>(s, bound, list_key, capacity, round_begin, round_end, raw, zeros);
#else
  const int lane = threadIdx.x & 31;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const float f = topk_bound_score(bound);
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
  const float kNaN = __uint_as_float(0x7fffffffu);  // outside the slice: never listed
  int fill = 0;
  constexpr int kUnroll = kTopkSweepUnroll;
  // Lists round q's scores x (lane l's element j is position 4 (32 q + l) + j, so the list order,
  // lane then element, is index order): ballots by element, predicated stores of the raw score
  // bits and positions at 32-bit shared addresses (no loop as long as the lane with the most listed
  // scores; keys are made after the sweep, over the lists).
  auto list_round = [&](const float (&x)[4], int q) {
    bool listed[4];
    uint32_t m[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      listed[j] = x[j] >= f;
      m[j] = __ballot_sync(NSAJIT_TOPK_FULL, listed[j]);
      if (kCountZeros) zeros += int(x[j] == 0.0f);  // -0.0 too; NaN (outside the slice) never
    }
    const int found = __popc(m[0]) + __popc(m[1]) + __popc(m[2]) + __popc(m[3]);
    if (fill + found <= capacity) {
      uint32_t at = list_key + 4u * uint32_t(fill + __popc(m[0] & lanes_below) + __popc(m[1] & lanes_below) +
                                             __popc(m[2] & lanes_below) + __popc(m[3] & lanes_below));
      const int position = slice_begin + 4 * (q * 32 + lane) - s.head;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (listed[j]) {
          st_shared_4(at, __float_as_uint(x[j]));
          st_shared_4(at + position_bytes, uint32_t(position + j));
          at += 4u;
        }
      }
    }
    fill += found;
  };
  for (int q0 = round_begin; q0 < round_end; q0 += kUnroll) {
    // Warp-uniform: every vector of the batch is a whole vector of the slice (all but the slice's
    // edge batches and a warp's partial last batch), so its rounds need no edge code and its loads no guards.
    const bool whole = q0 + kUnroll <= round_end && 32 * q0 >= vw0 && 32 * (q0 + kUnroll) <= vw1;
    if (whole) {
      if (q0 != round_begin) topk_sweep_load_whole(s, q0, raw);  // the first batch: the caller's
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float x[4] = {__uint_as_float(raw[u].x), __uint_as_float(raw[u].y), __uint_as_float(raw[u].z),
                            __uint_as_float(raw[u].w)};
        list_round(x, q0 + u);
      }
    } else {
      if (q0 != round_begin) topk_sweep_load(s, q0, round_end, raw);
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
            x[j] = e >= 0 && e < s.n ? topk_score(s.sp, e) : kNaN;
          }
        }
        list_round(x, q);
      }
    }
    if (fill > capacity) break;  // warp-uniform: the row falls back
  }
  return fill;
#endif
}

// Rounds of the tie writer's batch, loaded together: its ties wait for L2 once a batch, not once a
// round (8 rounds spill at 64 registers).
constexpr int kTopkTieRounds = 4;

// Speculated on a plateau of 0.0 (whole warp, after the lists' keys are written): the warp's zeros
// of rounds [round_begin, round_end) in index order, read again from the scores (L2), at slots
// total_greater + next_equal onwards while next_equal < take_equal; stops when those are taken
// or the warp's warp_zeros zeros are all written. A batch's zero counts are ranked by one warp
// scan of byte-packed counts per 4 rounds (a lane's count in a round is at most 4, a round's 128).
NSAJIT_DEVICE void topk_write_zero_ties(const TopkSlice& s, int slice_begin, int round_begin, int round_end,
                                        int next_equal, int take_equal, int total_greater, int warp_zeros,
                                        int* dst) {
  take_equal = min(take_equal, next_equal + warp_zeros);  // past the warp's own zeros: nothing to find
  const int lane = threadIdx.x & 31;
  const int vw0 = topk_whole_begin(s), vw1 = topk_whole_end(s);
  for (int q0 = round_begin; q0 < round_end && next_equal < take_equal; q0 += kTopkTieRounds) {  // warp-uniform
    u32x4 raw[kTopkTieRounds];
#pragma unroll
    for (int u = 0; u < kTopkTieRounds; ++u) {
      const int v = (q0 + u) * 32 + lane;
      if (q0 + u < round_end && v >= vw0 && v < vw1) raw[u] = topk_load_vec(s.abase + 4 * v);
    }
    uint32_t zero[kTopkTieRounds];  // bit j: element j of this lane's vector of round q0 + u is 0.0
    constexpr int kWords = (kTopkTieRounds + 3) / 4;
    uint32_t packed[kWords] = {};  // byte u % 4 of word u / 4: this lane's zeros in round q0 + u
#pragma unroll
    for (int u = 0; u < kTopkTieRounds; ++u) {
      const int v = (q0 + u) * 32 + lane;
      zero[u] = 0u;
      if (q0 + u >= round_end) {
        // past the segment: no zeros
      } else if (v >= vw0 && v < vw1) {
        zero[u] = uint32_t(__uint_as_float(raw[u].x) == 0.0f) | uint32_t(__uint_as_float(raw[u].y) == 0.0f) << 1 |
                  uint32_t(__uint_as_float(raw[u].z) == 0.0f) << 2 | uint32_t(__uint_as_float(raw[u].w) == 0.0f) << 3;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int e = 4 * v + j - s.head;
          zero[u] |= uint32_t(e >= 0 && e < s.n && topk_score(s.sp, e) == 0.0f) << j;
        }
      }
      packed[u / 4] += uint32_t(__popc(zero[u])) << (8 * (u % 4));
    }
    uint32_t inclusive[kWords], totals[kWords];
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      inclusive[w] = warp_inclusive_scan(packed[w]);
      totals[w] = __shfl_sync(NSAJIT_TOPK_FULL, inclusive[w], 31);
    }
#pragma unroll
    for (int u = 0; u < kTopkTieRounds; ++u) {
      const int shift = 8 * (u % 4);
      const int below = int(((inclusive[u / 4] - packed[u / 4]) >> shift) & 0xffu);
      int slot = next_equal + below;
      const int position0 = slice_begin + 4 * ((q0 + u) * 32 + lane) - s.head;
      uint32_t z = zero[u];
      while (z) {
        const int j = __ffs(z) - 1;
        z &= z - 1u;
        if (slot < take_equal) dst[total_greater + slot] = position0 + j;
        ++slot;
      }
      next_equal += int((totals[u / 4] >> shift) & 0xffu);
    }
  }
}
