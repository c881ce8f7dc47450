// topk_cluster_lists.cuh — the top-k family (templates/topk.cuh), part 4: the speculative
// selection of a row split over a cluster (C > 1 CTAs; the plan's cluster_lists).
//
// Why: the exact cluster path exchanges a window of the first-digit histogram, then the threshold
// bin's candidates, then the CTAs' counts: five cluster barriers and remote round trips of
// 0.5-2 us each under load (docs/notes/topk.md, runs 32 and 45). This path has one.
//
// How: after pass 0 each CTA lists, in index order, the keys of its slice in the first-digit bins
// at or above its `cut`, the bin of its list_rank-th largest key (list_rank ~ 1.25 topk / C + 16:
// a slice of a row whose largest scores are spread over it holds about topk / C of the row's
// selected keys), with their positions. One cluster barrier. Every CTA copies the C lists' keys
// into its union (in rank order, so in index order), counting their first digits, and finds the
// union's topk-th largest key T. When T's first digit is at least every CTA's cut, every key of
// the row >= T is listed (a list holds whole bins), so T is the row's threshold and the union
// orders the row's selected keys as the exact path does: each CTA writes its own at their slots,
// nothing more to exchange. Else (a list longer than its capacity, a union larger than its
// capacity or with fewer than topk keys, a cut above T: the largest scores crowded into a few
// slices, plateaus, ascending rows) the row takes the exact path, which has nothing to undo:
// nothing was written and the exact path uses none of this file's memory.
#pragma once

struct TopkClusterLists {
  uint32_t* keys;        // this CTA's list: keys (16-byte aligned; capacity words, a multiple of 4)
  int* positions;        // and their positions in the row
  int capacity;
  uint32_t* union_keys;  // the cluster's lists' keys in rank order (union_capacity words)
  int union_capacity;
  uint32_t* hist;        // the union's first-digit histogram (4096 words; the exact path's slots,
                         // which it writes only after deciding)
};

// 16 bytes at `remote` (a shared::cluster address, 16-byte aligned). No memory clobber: several
// of these stay in flight before their first use.
NSAJIT_DEVICE u32x4 topk_cluster_load_16(uint32_t remote) {
  u32x4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(remote));
  return v;
}

// Before the cluster barrier that publishes hist0 (whole block; warp 0 may still be finding
// slice_lo): warp 1 finds the cut while the others zero the union's histogram, then this CTA's
// list is written and its size published (capacity + 1: it did not fit, nothing written). Each
// warp lists its rounds [round_begin, round_end) (contiguous, so the warps' lists concatenate in
// index order): a count pass, a block scan of the warps' counts, a write pass.
NSAJIT_DEVICE void topk_cluster_list(const TopkSlice& s, int b, const u32x4* keys, int resident_vecs,
                                     const uint32_t* hist0, int hi_local, int list_rank, const TopkClusterLists& l,
                                     int round_begin, int round_end, TopkShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (warp == 1) {
    int greater, count;
    // A slice with fewer than list_rank keys: bin 0, every key listed.
    const uint32_t cut = topk_warp_find_bin_down(hist0, hi_local, 0, list_rank, greater, count);
    if (lane == 0) sh.cluster_cut = cut;
  }
  for (int i = tid; i < NSAJIT_TOPK_BINS0; i += NSAJIT_THREADS) l.hist[i] = 0u;
  __syncthreads();
  const uint32_t cut = sh.cluster_cut;
  auto listed = [&](uint32_t key) { return key != 0u && (key >> NSAJIT_TOPK_SHIFT0) >= cut; };
  int mine = 0;
  for (int q = round_begin; q < round_end; ++q) {
    const u32x4 kv = topk_slice_keys(s, keys, resident_vecs, q * 32 + lane);
    mine += int(listed(kv.x)) + int(listed(kv.y)) + int(listed(kv.z)) + int(listed(kv.w));
  }
  const int warp_count = __reduce_add_sync(NSAJIT_TOPK_FULL, mine);
  if (lane == 0) sh.warp_sum[warp] = warp_count;
  __syncthreads();
  const int w = lane < NSAJIT_TOPK_WARPS ? sh.warp_sum[lane] : 0;
  const int w_inclusive = warp_inclusive_scan(w);
  const int total = __shfl_sync(NSAJIT_TOPK_FULL, w_inclusive, 31);
  if (tid == 0) sh.cluster_listed = total > l.capacity ? l.capacity + 1 : total;
  if (total > l.capacity) return;  // uniform: the row takes the exact path
  int at = __shfl_sync(NSAJIT_TOPK_FULL, w_inclusive - w, warp);
  for (int q = round_begin; q < round_end; ++q) {
    const int v = q * 32 + lane;
    const u32x4 kv = topk_slice_keys(s, keys, resident_vecs, v);
    const int c = int(listed(kv.x)) + int(listed(kv.y)) + int(listed(kv.z)) + int(listed(kv.w));
    const int inclusive = warp_inclusive_scan(c);
    int o = at + inclusive - c;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t key = topk_lane(kv, j);
      if (listed(key)) {
        l.keys[o] = key;
        l.positions[o] = b + 4 * v + j - s.head;
        ++o;
      }
    }
    at += __shfl_sync(NSAJIT_TOPK_FULL, inclusive, 31);
  }
}

// After that cluster barrier (whole block). Returns true when the row is done: its output written
// (each CTA its own list's selected keys) and the cluster barrier waited on that lets the CTA exit.
// False: the row takes the exact path; cluster barrier phases balanced, nothing written.
// strict (a test hook): a row that would take the exact path gets -2 in its first slot instead.
NSAJIT_DEVICE bool topk_cluster_select(int C, uint32_t rank, const TopkClusterLists& l, const KvSlotRow& t,
                                       bool apply, int* out, bool strict, TopkShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Every warp reads the C lists' sizes and cuts and the slices' largest keys (lane q: CTA q).
  int n_q = 0;
  uint32_t cut_q = 0u, max_q = 0u;
  if (lane < C) {
    n_q = int(topk_cluster_load(&sh.cluster_listed, uint32_t(lane)));
    cut_q = topk_cluster_load(&sh.cluster_cut, uint32_t(lane));
    max_q = topk_cluster_load(&sh.slice_max, uint32_t(lane));
  }
  const int inclusive = warp_inclusive_scan(n_q);
  const int listed = __shfl_sync(NSAJIT_TOPK_FULL, inclusive, 31);
  const bool fits = !__any_sync(NSAJIT_TOPK_FULL, n_q > l.capacity) && listed >= NSAJIT_TOPK &&
                    listed <= l.union_capacity;  // uniform in the cluster
  bool holds = false;
  int greater = 0, count = 0;
  uint32_t d = 0u;
  if (fits) {
    // The union: warps per source list share its 16-byte vectors, two in flight per lane; the
    // first digits counted once per distinct bin of a warp (most keys share a few bins).
    const int per_source = NSAJIT_TOPK_WARPS >= C ? NSAJIT_TOPK_WARPS / C : 1;
    const int step = 4 * 32 * per_source;
    for (int q = warp / per_source; q < C; q += NSAJIT_TOPK_WARPS / per_source) {
      const int n = __shfl_sync(NSAJIT_TOPK_FULL, n_q, q);
      const int at = __shfl_sync(NSAJIT_TOPK_FULL, inclusive - n_q, q);
      const uint32_t remote = topk_cluster_address(l.keys, uint32_t(q));
      for (int i0 = 4 * ((warp % per_source) * 32 + lane); i0 - 4 * lane < n; i0 += 2 * step) {  // warp-uniform
        u32x4 v[2];
#pragma unroll
        for (int u = 0; u < 2; ++u)
          if (i0 + u * step < n) v[u] = topk_cluster_load_16(remote + 4u * uint32_t(i0 + u * step));
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int i = i0 + u * step + j;
            const uint32_t key = i < n ? topk_lane(v[u], j) : 0u;
            if (i < n) l.union_keys[at + i] = key;
            const uint32_t bin = key >> NSAJIT_TOPK_SHIFT0;
            const uint32_t same = __match_any_sync(NSAJIT_TOPK_FULL, i < n ? bin : 0xffffffffu);
            if (i < n && lane == __ffs(same) - 1) atomicAdd(&l.hist[bin], uint32_t(__popc(same)));
          }
      }
    }
    topk_cluster_arrive();  // done reading the others' lists (waited for below)
    __syncthreads();
    const int hi = int(__reduce_max_sync(NSAJIT_TOPK_FULL, max_q) >> NSAJIT_TOPK_SHIFT0);
    d = topk_warp_find_bin_down(l.hist, hi, 0, NSAJIT_TOPK, greater, count);
    holds = d >= __reduce_max_sync(NSAJIT_TOPK_FULL, cut_q);  // uniform
    if (!holds) topk_cluster_wait();
  }
  if (!holds) {
    if (!strict) return false;
    if (!fits) topk_cluster_sync();  // no CTA leaves while another may still read its counts
    if (rank == 0 && tid == 0) out[0] = -2;
    return true;
  }

  // The union's topk-th largest key: the first digit d, then its refinement.
  TopkRadix x{0u, 0u, NSAJIT_TOPK, 0, 0};
  topk_radix_step(x, d, 32 - NSAJIT_TOPK_SHIFT0, greater, count);
  topk_refine_candidates(x, sh, topk_thread_share(listed, tid),
                         [&](int j) -> uint32_t { return l.union_keys[tid + j * NSAJIT_THREADS]; });
  const uint32_t threshold = x.prefix;
  const int take_equal = x.k;
  const int total_greater = NSAJIT_TOPK - take_equal;

  // Output (the exact path's order): the keys > T at slots [0, G) in index order, then the first
  // take_equal keys == T. First the selected keys of the union before this CTA's list.
  const int begin = __shfl_sync(NSAJIT_TOPK_FULL, inclusive - n_q, int(rank));
  const int own = __shfl_sync(NSAJIT_TOPK_FULL, n_q, int(rank));
  int g = 0, e = 0;
  for (int u = tid; u < begin; u += NSAJIT_THREADS) {
    const uint32_t key = l.union_keys[u];
    g += int(key > threshold);
    e += int(key == threshold);
  }
  topk_store_warp_counts(sh, warp, g, e);
  __syncthreads();
  int next_greater = __reduce_add_sync(NSAJIT_TOPK_FULL, lane < NSAJIT_TOPK_WARPS ? sh.warp_greater[lane] : 0);
  int next_equal = __reduce_add_sync(NSAJIT_TOPK_FULL, lane < NSAJIT_TOPK_WARPS ? sh.warp_equal[lane] : 0);
  const uint32_t lanes_below = (1u << lane) - 1u;
  for (int i0 = 0; i0 < own; i0 += NSAJIT_THREADS) {  // uniform
    __syncthreads();  // warp_greater / warp_equal read
    const int i = i0 + tid;
    const uint32_t key = i < own ? l.keys[i] : 0u;  // 0: never > or == T (T >= 1)
    const uint32_t gb = __ballot_sync(NSAJIT_TOPK_FULL, key > threshold);
    const uint32_t eb = __ballot_sync(NSAJIT_TOPK_FULL, key == threshold);
    if (lane == 0) {
      sh.warp_greater[warp] = __popc(gb);
      sh.warp_equal[warp] = __popc(eb);
    }
    __syncthreads();
    const int wg = lane < NSAJIT_TOPK_WARPS ? sh.warp_greater[lane] : 0;
    const int we = lane < NSAJIT_TOPK_WARPS ? sh.warp_equal[lane] : 0;
    const int wg_inclusive = warp_inclusive_scan(wg);
    const int we_inclusive = warp_inclusive_scan(we);
    const int pg = next_greater + __shfl_sync(NSAJIT_TOPK_FULL, wg_inclusive - wg, warp) + __popc(gb & lanes_below);
    const int pe = next_equal + __shfl_sync(NSAJIT_TOPK_FULL, we_inclusive - we, warp) + __popc(eb & lanes_below);
    if (key > threshold) out[pg] = topk_emit(t, l.positions[i], apply);
    else if (key == threshold && pe < take_equal) out[total_greater + pe] = topk_emit(t, l.positions[i], apply);
    next_greater += __shfl_sync(NSAJIT_TOPK_FULL, wg_inclusive, 31);
    next_equal += __shfl_sync(NSAJIT_TOPK_FULL, we_inclusive, 31);
  }
  topk_cluster_wait();  // no CTA leaves while another may still read its list
  return true;
}
