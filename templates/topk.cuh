// topk.cuh — §2: exact per-row top-k of fp32 indexer scores.
//
// One CTA per row. row_start = clamp(row_starts[r], 0, width) (0 without row_starts);
// len = min(lengths[r], width - row_start).
//   len <= 0:           all -1.
//   0 < len <= topk:    0, 1, ..., len-1, then -1 (scores not read).
//   len > topk:         exact radix select. Scores map to order-preserving uint32 keys (NaN -> 0,
//                       below -inf; -0.0 and +0.0 -> one key). Four passes over the row find the
//                       topk-th largest key T one byte at a time (256-bin shared histogram of the
//                       keys that match the bytes found so far). A last pass writes every key > T
//                       and the first (topk - count(> T)) keys == T, both in increasing index order
//                       (ties go to the lower index), through a block-wide prefix scan.
// Nothing is buffered: each pass re-reads the row from global memory, so any len is exact. The
// output depends only on the row's own data (not on the launch or batch), so it is bit-identical
// across runs. Output order: the > T indices ascending, then the == T indices ascending.

#ifndef NSAJIT_TOPK
#error "NSAJIT_TOPK must be defined"
#endif
#ifndef NSAJIT_THREADS
#define NSAJIT_THREADS 1024
#endif

#define NSAJIT_TOPK_WARPS (NSAJIT_THREADS / 32)

static_assert(NSAJIT_TOPK % 64 == 0, "topk must be a multiple of 64");
static_assert(NSAJIT_THREADS % 32 == 0 && NSAJIT_THREADS >= 64 && NSAJIT_THREADS <= 1024,
              "threads: whole warps, 64..1024");

// Order-preserving key: a > b as floats (NaN lowest, -0 == +0) iff key(a) > key(b) as uint32.
NSAJIT_DEVICE uint32_t topk_order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0u;            // NaN: below -inf (whose key is 0x007fffff)
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

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS) nsajit_topk(const TopkParams p) {
  __shared__ uint32_t hist[256];
  __shared__ int warp_sums[32];
  __shared__ uint32_t found_digit;
  __shared__ int found_greater;

  const int r = blockIdx.x;
  if (r >= p.rows) return;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  int* out = p.out + (long long)r * NSAJIT_TOPK;

  const int row_start = p.row_starts ? min(max(p.row_starts[r], 0), p.width) : 0;
  const int len = min(p.lengths[r], p.width - row_start);
  if (len <= NSAJIT_TOPK) {
    for (int j = tid; j < NSAJIT_TOPK; j += NSAJIT_THREADS) out[j] = j < len ? j : -1;
    return;
  }

  const float* row = p.scores + (long long)r * p.score_row_stride + row_start;
  const uint32_t n = uint32_t(len);  // unsigned loop bounds: n - 1 + NSAJIT_THREADS never overflows

  // Radix select of the topk-th largest key, most significant byte first. Invariant: among the
  // keys whose bytes above `shift` equal `prefix`, the k largest are still to be selected.
  uint32_t prefix = 0, mask = 0;
  int k = NSAJIT_TOPK;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += NSAJIT_THREADS) hist[i] = 0u;
    __syncthreads();
    for (uint32_t base = 0; base < n; base += NSAJIT_THREADS) {  // uniform trip count per warp
      const uint32_t i = base + tid;
      uint32_t bin = 256u;  // 256 = not counted
      if (i < n) {
        const uint32_t key = topk_order_key(row[i]);
        if ((key & mask) == prefix) bin = (key >> shift) & 0xffu;
      }
      // One shared atomic per distinct bin per warp: plateaus would otherwise serialise 32-way.
      const uint32_t peers = __match_any_sync(0xffffffffu, bin);
      if (bin < 256u && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], uint32_t(__popc(peers)));
    }
    __syncthreads();
    if (tid < 32) {
      // Lane l owns bins [8l, 8l + 8). Counts fit in int: they sum to at most len.
      int local = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) local += int(hist[8 * lane + j]);
      const int inclusive = warp_inclusive_scan(local);
      const int all = __shfl_sync(0xffffffffu, inclusive, 31);
      int greater = all - inclusive;  // keys in the bins of the lanes above
      // Exactly one bin d has greater(d) < k <= greater(d) + hist[d]: the group holds >= k keys.
      for (int d = 8 * lane + 7; d >= 8 * lane; --d) {
        const int h = int(hist[d]);
        if (greater < k && greater + h >= k) {
          found_digit = uint32_t(d);
          found_greater = greater;
        }
        greater += h;
      }
    }
    __syncthreads();  // the next writes of found_* and hist come after two more barriers
    prefix |= found_digit << shift;
    mask |= 0xffu << shift;
    k -= found_greater;
  }

  // prefix is now the threshold key T; k keys == T are to be taken, after the keys > T.
  const uint32_t threshold = prefix;
  const int count_greater = NSAJIT_TOPK - k;
  int written_greater = 0, taken_equal = 0;  // block-uniform running counts
  for (uint32_t base = 0; base < n; base += NSAJIT_THREADS) {
    if (written_greater == count_greater && taken_equal == k) break;  // uniform: all written
    const uint32_t i = base + tid;
    int greater = 0, equal = 0;
    if (i < n) {
      const uint32_t key = topk_order_key(row[i]);
      greater = key > threshold;
      equal = key == threshold;
    }
    // Both counts in one scan: (greater << 16) | equal; a chunk has at most 1024 of each.
    int total;
    const int before = topk_block_exclusive_scan((greater << 16) | equal, warp_sums, &total);
    if (greater) out[written_greater + (before >> 16)] = int(i);
    if (equal) {
      const int e = taken_equal + (before & 0xffff);
      if (e < k) out[count_greater + e] = int(i);
    }
    written_greater += total >> 16;
    taken_equal = min(k, taken_equal + (total & 0xffff));
  }
}
