// topk_sort.cuh — the top-k family (templates/topk.cuh), part 5: phase 1 of sorted specs.
#pragma once
#include "topk_common.cuh"

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
  const TopkScore* row = topk_row_scores(p, r) + row_start;
  for (int i = threadIdx.x; i < NSAJIT_SORT_N; i += NSAJIT_THREADS) {
    unsigned long long v = 0ull;  // padding sorts last
    if (i < NSAJIT_TOPK) {
      const int idx = out[i];  // phase 0 wrote topk positions in [0, len)
      v = ((unsigned long long)topk_key(topk_score(row, idx)) << 32) | (unsigned long long)(0xffffffffu - uint32_t(idx));
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
