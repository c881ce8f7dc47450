// topk_radix.cuh — the top-k family (templates/topk.cuh), part 2: the block's shared state and
// the radix select's block-wide steps (bin search, digits, refinement), cluster-wide sums.
#pragma once
#include "topk_common.cuh"

// --- shared state and block-wide steps -------------------------------------------------------------

#define NSAJIT_TOPK_BINS0 4096   // first digit: key bits 31..20 (sign, exponent, 3 mantissa bits)
#define NSAJIT_TOPK_SHIFT0 20
#define NSAJIT_TOPK_RESCAN_BITS 8   // digits of the rescans (threshold bin larger than the list)
#define NSAJIT_TOPK_REFINE_BITS 10  // digits of the refinement over the candidate list
#define NSAJIT_TOPK_FIRST_REFINE_BITS 8  // its first digit (found by every warp, no block search)

struct TopkShared {
  uint32_t rescan_hist[2][1 << NSAJIT_TOPK_RESCAN_BITS];  // by pass parity (cluster peers read one)
  uint32_t row_total[1 << NSAJIT_TOPK_RESCAN_BITS];
  uint32_t refine_hist[2][1 << NSAJIT_TOPK_REFINE_BITS];  // by pass parity: no barrier to zero
  uint32_t first_refine_hist[1 << NSAJIT_TOPK_FIRST_REFINE_BITS];  // the candidates' first digit
  uint32_t short_list[32];  // the few candidates left after that digit
  int short_n;
  int warp_sum[NSAJIT_TOPK_WARPS];
  int warp_greater[NSAJIT_TOPK_WARPS];
  int warp_equal[NSAJIT_TOPK_WARPS];
  int cta_counts[2];
  int cta_prefix[2];  // C > 1: the counts of the cluster's lower-rank CTAs
  uint32_t digit;
  int greater;
  int count;
  int cand_local;     // candidates this CTA found
  int cand_reserved;  // cluster rank 0: the cluster-wide list's fill level (remote atomics); dense rows: the rank's count of keys with k - 1 above
  uint32_t unique_key;  // speculative refinement: the one key left with the prefix
  uint32_t key_lo, key_hi;  // a key range: topk_key_range's, or the speculative lists' (~0u and 0 from the prologue)
  uint32_t slice_max;   // C > 1: this slice's largest key (0 when empty)
  uint32_t slice_lo;    // C > 1: the first-digit bin of this slice's topk-th largest key (0: fewer keys)
  uint32_t union_count[32];  // cluster lists: the union's counts of the 32 bins under the row's top
  int own_greater[NSAJIT_TOPK_WARPS];  // cluster lists: each warp's selected keys of its own list
  int own_equal[NSAJIT_TOPK_WARPS];
  unsigned long long inbox_full;  // cluster lists: the mbarrier of the C messages (topk_cluster_lists.cuh)
  int message_fill[32];           // cluster lists: the next free key of each bin's range in the message
  uint32_t zero_keys;             // keys of 0.0 when counted (topk_flush_zeros; 0 from the prologue)
};
// The speculative prologue zeroes refine_hist and first_refine_hist (after 32-bit arrays) with 8-byte stores.
static_assert(alignof(TopkShared) >= 8 && (sizeof(TopkShared::rescan_hist) + sizeof(TopkShared::row_total)) % 8 == 0 &&
                  sizeof(TopkShared::refine_hist) % 8 == 0,
              "refine_hist and first_refine_hist 8-byte aligned");

// +0.0's key (-0.0's too): ReLU rows are mostly 0.0, which the sweep (kTopkPositiveBound) and pass 0 treat apart.
constexpr uint32_t kTopkZeroKey = 0x80000000u;

// Whole warp: adds its lanes' counts of 0.0 keys to sh.zero_keys (and, given hist0, to 0.0's bin).
NSAJIT_DEVICE void topk_flush_zeros(uint32_t zeros, TopkShared& sh, uint32_t* hist0 = nullptr) {
  zeros = __reduce_add_sync(NSAJIT_TOPK_FULL, zeros);
  if ((threadIdx.x & 31) == 0 && zeros != 0u) {
    atomicAdd(&sh.zero_keys, zeros);
    if (hist0 != nullptr) atomicAdd(&hist0[kTopkZeroKey >> NSAJIT_TOPK_SHIFT0], zeros);
  }
}

// Speculative kernels count 0.0 apart in pass 0, which only the rows that could not speculate
// reach (ReLU plateaus among them), since a warp's atomics on one histogram word are serialised;
// elsewhere every row runs pass 0, and the compare costs normal rows 4-6 %.
constexpr bool kTopkCountZeros = NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_SPECULATIVE_SWEEP;

NSAJIT_DEVICE void topk_count_first_digit(uint32_t* hist0, uint32_t key, uint32_t& zeros) {
  if (kTopkCountZeros && key == kTopkZeroKey)
    ++zeros;
  else
    atomicAdd(&hist0[key >> NSAJIT_TOPK_SHIFT0], 1u);
}

// Pass 0 of one vector read score by score (a slice's partial or unaligned edge, topk_global_keys):
// kept when resident, its keys counted (0: outside the slice, never counted) and maxed.
NSAJIT_DEVICE void topk_pass0_edge_vector(const TopkSlice& s, int v, u32x4* keys, int resident_vecs,
                                          uint32_t* hist0, uint32_t& zeros, uint32_t& slice_max) {
  const u32x4 kv = topk_global_keys(s, v);
  if (v < resident_vecs) keys[v] = kv;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t key = topk_lane(kv, j);
    if (key != 0u) topk_count_first_digit(hist0, key, zeros);
    slice_max = max(slice_max, key);
  }
}

// One radix step, whole block: the bin d of h[0, nbins) with greater(d) < k <= greater(d) + h[d],
// greater(d) = keys in the bins above d. nbins is a power of two; thread t owns `per` consecutive
// bins counted from the top, so a block scan in thread order gives the counts above each chunk.
// Every thread returns d, greater(d) and h[d].
NSAJIT_DEVICE uint32_t topk_find_bin(const uint32_t* h, int nbins, int k, TopkShared& sh, int& greater, int& count) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = nbins > NSAJIT_THREADS ? int(unsigned(nbins) / NSAJIT_THREADS) : 1;
  const int owners = min(nbins, NSAJIT_THREADS);  // nbins / per for powers of two, without a run-time divide
  const int top = nbins - 1 - tid * per;  // the highest bin of this thread's chunk
  // The chunk's sum in a rotated order: lane L starts at bin (L * per / 32) of its chunk, so the
  // warp's 32 reads of one step fall in 32 different banks (in order, chunks `per` words apart
  // share 32 / per banks: a 16-way conflict at 4096 bins and 256 threads). Chunks of 4 keep the
  // plain order: the rotation's index arithmetic costs more than 4-way conflicts.
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

// One warp (every lane returns the same): the bin d of [bottom, top] counted from the top with
// greater(d) < k <= greater(d) + count_of(d), 32 bins a step (count_of(bin) for bin >= bottom);
// no barrier. When [bottom, top] holds fewer than k keys: bottom, with count 0.
template <class CountOf>
NSAJIT_DEVICE uint32_t topk_warp_find_bin_down_by(int top, int bottom, int k, int& greater, int& count,
                                                  CountOf count_of) {
  const int lane = threadIdx.x & 31;
  int above = 0;  // keys in the bins above this step's
  for (int first = top; first >= bottom; first -= 32) {
    const int bin = first - lane;
    const int c = bin >= bottom ? count_of(bin) : 0;
    const int inclusive = warp_inclusive_scan(c);
    const uint32_t reached = __ballot_sync(NSAJIT_TOPK_FULL, above + inclusive >= k);
    if (reached) {
      const int j = __ffs(reached) - 1;
      greater = above + __shfl_sync(NSAJIT_TOPK_FULL, inclusive - c, j);
      count = __shfl_sync(NSAJIT_TOPK_FULL, c, j);
      return uint32_t(first - j);
    }
    above += __shfl_sync(NSAJIT_TOPK_FULL, inclusive, 31);
  }
  greater = above;
  count = 0;
  return uint32_t(bottom);
}

// topk_warp_find_bin_down_by over the histogram h. The caller knows that h[bottom, top] holds at
// least k keys (else: bottom, with count 0).
NSAJIT_DEVICE uint32_t topk_warp_find_bin_down(const uint32_t* h, int top, int bottom, int k, int& greater,
                                               int& count) {
  return topk_warp_find_bin_down_by(top, bottom, k, greater, count, [&](int bin) { return int(h[bin]); });
}

// topk_warp_find_bin_down over a range that may be long (one warp, no barrier): the top 32 bins
// in one step (a normal slice's bin lies there), then 1024 bins a step (lane i sums 32 of them),
// then the reaching lane's 32 bins. A ReLU slice's topk-th key lies ~1000 bins under its top,
// at 0.0: 3 steps instead of ~33 dependent ones.
NSAJIT_DEVICE uint32_t topk_warp_find_bin_down_far(const uint32_t* h, int top, int bottom, int k, int& greater,
                                                   int& count) {
  const int lane = threadIdx.x & 31;
  const int near_bottom = max(top - 31, bottom);
  const uint32_t d = topk_warp_find_bin_down(h, top, near_bottom, k, greater, count);
  if (count != 0 || near_bottom == bottom) return d;
  int above = greater;  // keys in the bins above this step's
  for (int first = near_bottom - 1; first >= bottom; first -= 1024) {
    const int lane_top = first - 32 * lane;
    int sum = 0;
#pragma unroll 8
    for (int i = 0; i < 32; ++i) {
      const int bin = lane_top - ((i + lane) & 31);  // rotated: the warp's 32 reads in 32 banks
      sum += bin >= bottom ? int(h[bin]) : 0;
    }
    const int inclusive = warp_inclusive_scan(sum);
    const uint32_t reached = __ballot_sync(NSAJIT_TOPK_FULL, above + inclusive >= k);
    if (reached) {
      const int j = __ffs(reached) - 1;
      const int top_j = first - 32 * j;
      const int above_j = above + __shfl_sync(NSAJIT_TOPK_FULL, inclusive - sum, j);
      const uint32_t d_j = topk_warp_find_bin_down(h, top_j, max(top_j - 31, bottom), k - above_j, greater, count);
      greater += above_j;
      return d_j;
    }
    above += __shfl_sync(NSAJIT_TOPK_FULL, inclusive, 31);
  }
  greater = above;
  count = 0;
  return uint32_t(bottom);
}

// topk_warp_find_bin_down over all of h[0, 256) in one step instead of up to eight: lane i sums the
// 8 bins 255 - 8i - 7 .. 255 - 8i, one scan finds the lane whose chunk reaches k, and that lane
// walks its 8 bins (every lane returns the same). The caller knows that h holds at least k keys.
NSAJIT_DEVICE uint32_t topk_warp_find_bin_256(const uint32_t* h, int k, int& greater, int& count) {
  const int lane = threadIdx.x & 31;
  const int top = 255 - 8 * lane;
  int c[8];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    c[i] = int(h[top - i]);
    sum += c[i];
  }
  const int inclusive = warp_inclusive_scan(sum);
  const int j = __ffs(__ballot_sync(NSAJIT_TOPK_FULL, inclusive >= k)) - 1;
  int above = inclusive - sum;  // keys in the chunks above this lane's
  int d = top - 7, g = 0, n = 0;
  bool found = false;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (!found && above + c[i] >= k) {
      found = true;
      d = top - i;
      g = above;
      n = c[i];
    }
    above += c[i];
  }
  greater = __shfl_sync(NSAJIT_TOPK_FULL, g, j);
  count = __shfl_sync(NSAJIT_TOPK_FULL, n, j);
  return uint32_t(__shfl_sync(NSAJIT_TOPK_FULL, d, j));
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

// A first digit fitted to a candidate list whose keys lie in [lo, hi]: bits of key >> shift
// counted from lo >> shift, shift the least that fits the range in NSAJIT_TOPK_BINS0 bins. A bin
// is still a key prefix (32 - shift bits), so the refinement goes on from it; the fixed digit
// spends 8 of its 12 bits on the exponent, so a normal row's threshold bin holds hundreds of keys
// where this one holds a few.
NSAJIT_DEVICE int topk_window_shift(uint32_t lo, uint32_t hi) {
  const int shift = max(0, NSAJIT_TOPK_SHIFT0 - __clz(hi - lo));  // (hi - lo) >> shift < BINS0
  return (hi >> shift) - (lo >> shift) < NSAJIT_TOPK_BINS0 ? shift : shift + 1;
}

NSAJIT_DEVICE void topk_window_step(TopkRadix& x, uint32_t lo, int shift, uint32_t digit, int greater, int count) {
  x.k -= greater;
  x.count = count;
  x.prefix = ((lo >> shift) + digit) << shift;
  x.mask = 0xffffffffu << shift;
  x.bits = 32 - shift;
}

// The keys matching x's prefix all lie in [lo, hi], their minimum and maximum: they share the
// leading bits of lo and hi, so the prefix advances to the first bit where lo and hi differ (count
// and k unchanged), and lo == hi resolves all 32 bits (a plateau of equal keys, e.g. ReLU zeros).
NSAJIT_DEVICE void topk_narrow_to_range(TopkRadix& x, uint32_t lo, uint32_t hi) {
  const int common = lo == hi ? 32 : __clz(lo ^ hi);
  if (common <= x.bits) return;
  x.mask = ~(0xffffffffu >> common);  // common >= 1: x.bits >= 12 here
  x.prefix = lo & x.mask;
  x.bits = common;
}

// After the first digit: when the threshold's bin holds only keys of 0.0 (a ReLU row's plateau),
// all 32 bits are known without listing or rescanning them.
NSAJIT_DEVICE void topk_resolve_zero_plateau(TopkRadix& x, uint32_t zero_keys) {
  if (x.prefix == (kTopkZeroKey & x.mask) && uint32_t(x.count) == zero_keys) {
    x.prefix = kTopkZeroKey;
    x.mask = 0xffffffffu;
    x.bits = 32;
  }
}

// bf16 scores: a key's low 16 bits follow from its high 16 (0 for a score >= +0.0, 0xffff for a
// negative one; NaN's key is 1, the only key with high bits 0 besides padding, which is never
// counted), so once 16 bits are resolved the keys matching the prefix are all one key, T: all 32
// bits are known (count and k unchanged), and no further digit is needed (the ties of a bf16 row
// never leave one key, which ended fp32's refinement early). fp32: nothing.
NSAJIT_DEVICE void topk_resolve_bf16(TopkRadix& x) {
#if NSAJIT_SCORE_BF16
  if (x.bits >= 16 && x.bits < 32) {
    const uint32_t high = x.prefix >> 16;
    x.prefix = high == 0u ? 1u : (high & 0x8000u) != 0u ? high << 16 : high << 16 | 0xffffu;
    x.mask = 0xffffffffu;
    x.bits = 32;
  }
#endif
}

// Whole block (C > 1: every CTA of the cluster, uniformly): lo and hi become the minimum and the
// maximum over the block's (the cluster's) threads. In clustered kernels sh.key_lo / key_hi are
// written only here, from the prologue's ~0u / 0, so cluster peers may read them until the kernel
// ends (the speculative kernels, never clustered, also write them in their selection). Ends synchronised.
NSAJIT_DEVICE void topk_key_range(uint32_t& lo, uint32_t& hi, TopkShared& sh, int C) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(NSAJIT_TOPK_FULL, lo, o));
    hi = max(hi, __shfl_xor_sync(NSAJIT_TOPK_FULL, hi, o));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMin(&sh.key_lo, lo);
    atomicMax(&sh.key_hi, hi);
  }
  if (C > 1) {
    topk_cluster_sync();  // every CTA's range is complete
    const int lane = threadIdx.x & 31;
    lo = lane < C ? topk_cluster_load(&sh.key_lo, uint32_t(lane)) : 0xffffffffu;
    hi = lane < C ? topk_cluster_load(&sh.key_hi, uint32_t(lane)) : 0u;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      lo = min(lo, __shfl_xor_sync(NSAJIT_TOPK_FULL, lo, o));
      hi = max(hi, __shfl_xor_sync(NSAJIT_TOPK_FULL, hi, o));
    }
  } else {
    __syncthreads();
    lo = sh.key_lo;
    hi = sh.key_hi;
  }
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

// Whole block, once the x.count (<= 32) keys matching x's prefix are in sh.short_list (each
// thread's appends before the call): warp 0 ranks them, lane i key i; T is the key with greater <
// k <= greater + equal. Returns with all 32 bits resolved (x.prefix = T, x.k = the keys == T to take).
NSAJIT_DEVICE void topk_rank_short_list(TopkRadix& x, TopkShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (warp == 0) {
    const uint32_t mine = lane < x.count ? sh.short_list[lane] : 0u;
    int greater = 0, equal = 0;
    for (int j = 0; j < x.count; ++j) {
      const uint32_t other = sh.short_list[j];
      greater += int(other > mine);
      equal += int(other == mine);
    }
    const uint32_t hit = __ballot_sync(NSAJIT_TOPK_FULL, lane < x.count && greater < x.k && x.k <= greater + equal);
    if (lane == __ffs(hit) - 1) {  // x.k <= x.count: some lane holds T
      sh.digit = mine;
      sh.greater = greater;
      sh.count = equal;
    }
  }
  __syncthreads();
  x.prefix = sh.digit;
  x.k -= sh.greater;
  x.count = sh.count;
  x.mask = 0xffffffffu;
  x.bits = 32;
}

// The refinement of x over a candidate list that holds every key of the row matching x's prefix
// (and maybe others): thread tid's are candidate(j), j < mine_n. First an 8-bit digit; then, when
// at most 32 keys are left with the prefix (normal scores: ~6 of ~1,400), they are listed and
// ranked; else digits of up to 10 bits down to bit 0, found by the whole block. The 8-bit digit's
// bin and the ranking are found by warp 0 alone, the others waiting at a barrier (every warp
// doing them was slower: docs/notes/topk.md sessions 17 and 18). Whole block; x.bits < 32 on
// entry, 32 on return (x.prefix = T, x.k = the keys == T to take). Uses sh.first_refine_hist and
// sh.short_n as zeroed by the kernel's prologue: at most once per row.
template <class Candidate>
NSAJIT_DEVICE void topk_refine_candidates(TopkRadix& x, TopkShared& sh, int mine_n, Candidate candidate) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  {
    const int width = min(NSAJIT_TOPK_FIRST_REFINE_BITS, 32 - x.bits);
    const int shift = 32 - x.bits - width;
    const uint32_t digit_mask = (1u << width) - 1u;
#pragma unroll 1  // a few candidates a thread: the unrolled code cost more to fetch than it saved
    for (int j = 0; j < mine_n; ++j) {
      const uint32_t key = candidate(j);
      if ((key & x.mask) == x.prefix) atomicAdd(&sh.first_refine_hist[(key >> shift) & digit_mask], 1u);
    }
    __syncthreads();
    if (warp == 0) {
      int greater, count;
      const uint32_t d = width == 8 ? topk_warp_find_bin_256(sh.first_refine_hist, x.k, greater, count)
                                    : topk_warp_find_bin_down(sh.first_refine_hist, int(digit_mask), 0, x.k, greater, count);
      if (lane == 0) {
        sh.digit = d;
        sh.greater = greater;
        sh.count = count;
      }
    }
    __syncthreads();
    topk_radix_step(x, sh.digit, width, sh.greater, sh.count);
    topk_resolve_bf16(x);  // bf16: 20 bits are all of them
  }
  if (x.bits < 32 && x.count <= 32) {  // uniform
#pragma unroll 1  // as above
    for (int j = 0; j < mine_n; ++j) {
      const uint32_t key = candidate(j);
      if ((key & x.mask) == x.prefix) sh.short_list[atomicAdd(&sh.short_n, 1)] = key;
    }
    topk_rank_short_list(x, sh);
  }
  for (int pass = 0; x.bits < 32; ++pass) {
    const TopkRefineDigit digit = topk_refine_digit(x, sh, pass);
    for (int j = 0; j < mine_n; ++j) topk_refine_count(digit, x, candidate(j));
    topk_refine_finish(digit, x, sh);
  }
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
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(local)), "r"(rank));
  return remote;
}
