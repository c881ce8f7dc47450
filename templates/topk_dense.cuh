// topk_dense.cuh — the top-k family (templates/topk.cuh), part 6: dense rows with their keys in
// registers (one 256-thread CTA per row).
#pragma once
#include "topk_radix.cuh"

#if NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_DENSE_REGISTERS
// Rows of at most NSAJIT_TOPK_DENSE_VECS * 256 - 1 vectors (slices <= 9212 positions), in
// dense_registers kernels (256 threads): thread t holds the keys of vectors t + 256 j (j < NSAJIT_TOPK_DENSE_VECS) in
// registers, read once. Radix select on them: the 12-bit first digit (hist0), then two 10-bit
// digits counted straight from the registers (no candidate list, no second read of the row: exact
// whatever the distribution). Output: the keys > T and the first take_equal keys == T in index
// order, their slots from one block-wide scan of packed (greater | equal << 16) counts per round j
// (index order is round j, then thread, then element). Unfused: stored straight to `out` (a warp's
// selected keys of a round are consecutive slots, faster than staging). Fused: staged in shared memory and written to `out`
// coalesced, the page-table reads batched.

// Not inlined: its registers are allocated apart from the rest of the kernel's (inlined, the
// whole kernel spilled at 64 registers); scalar arguments, so that nothing goes through the stack.
__device__ __noinline__ void topk_dense_row(const TopkScore* sp, const TopkScore* abase, int head, int n, int nvec,
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
    if (v >= vw0 && v < vw1) k[j] = topk_load_vec(s.abase + 4 * v);
  }
  // While the loads are in flight: hist0 (16-byte stores; the plan aligns it) and the list's fill.
  for (int i = tid; i < NSAJIT_TOPK_BINS0 / 4; i += NSAJIT_THREADS)
    reinterpret_cast<u32x4*>(hist0)[i] = u32x4{0u, 0u, 0u, 0u};
  if (tid == 0) {
    sh.cand_local = 0;
    sh.zero_keys = 0u;
  }
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
  if (x.prefix == (kTopkZeroKey & x.mask)) {  // uniform: the threshold in 0.0's bin (a ReLU row's plateau)
    uint32_t zeros = 0u;
#pragma unroll
    for (int j = 0; j < DV; ++j)
      zeros += uint32_t(k[j].x == kTopkZeroKey) + uint32_t(k[j].y == kTopkZeroKey) + uint32_t(k[j].z == kTopkZeroKey) +
               uint32_t(k[j].w == kTopkZeroKey);
    topk_flush_zeros(zeros, sh);
    __syncthreads();
    topk_resolve_zero_plateau(x, sh.zero_keys);
  }
  // The keys of the threshold's bin (about 70 of 6K normal scores), listed from the start of
  // dynamic shared memory: nothing there is in use until the output is staged (hist0's search
  // ended with a barrier), and the plan gives it room for the whole slice (4 * 256 * 9 words).
  extern __shared__ u32x4 topk_dynamic[];
  uint32_t* const listed = reinterpret_cast<uint32_t*>(topk_dynamic);
  const int n_listed = x.bits < 32 ? x.count : 0;  // a plateau of 0.0 is resolved already
#pragma unroll
  for (int j = 0; j < DV; ++j) {
    if (j * NSAJIT_THREADS >= s.nvec || n_listed == 0) break;  // padding only, or nothing to list (uniform)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t key = topk_lane(k[j], e);
      if (key != 0u && (key & x.mask) == x.prefix) listed[atomicAdd(&sh.cand_local, 1)] = key;
    }
  }
  __syncthreads();
  if (x.bits < 32 && n_listed <= NSAJIT_THREADS) {
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
      // Unfused (uniform): straight to `out` (a warp's selected keys of a round are consecutive
      // slots); fused: staged for the transform's batched table reads below.
      if (greater || (equal && q < take_equal)) {
        if (apply)
          staged[slot] = position0 + e;
        else
          out[slot] = position0 + e;
      }
      g += int(greater);
      q += int(equal);
    }
  }
  if (!apply) return;  // the positions are in `out` already
  __syncthreads();
  // Fused: `out`, consecutive threads on consecutive slots, up to 8 page-table reads in flight.
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
