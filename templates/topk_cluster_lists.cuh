// topk_cluster_lists.cuh — the top-k family (templates/topk.cuh), part 4: the speculative
// selection of a row split over a cluster (C > 1 CTAs; cluster_lists kernels).
//
// Why: the exact cluster path exchanges a window of the first-digit histogram, then the threshold
// bin's candidates, then the CTAs' counts: five cluster barriers and remote round trips, each
// slow under load. Here each CTA sends one message to each CTA, by bulk copy (a few large
// transfers instead of hundreds of remote loads).
//
// How: after pass 0 each CTA lists the keys of its slice in the first-digit bins at or above its
// `cut`: the bin of its list_rank-th largest key (list_rank ~ 1.25 times its share of topk + 16:
// a slice of a row whose largest scores are spread over it holds about that share of the row's
// selected keys), but at most 31 bins under its top bin. Each warp keeps its part in index order
// with the positions (for the output). The message: a header (list size, cut, the slice's top
// bin), the counts of the 32 bins under the top bin, the listed keys in decreasing bin order;
// bulk-copied into slot `rank` of every CTA's inbox, completing on that CTA's mbarrier. Every CTA
// then finds the union's first digit d from the counts and refines T over bin d of each message.
// When d is at least every cut, every key of the row >= T is listed (a list holds whole bins),
// so T is the row's threshold, and each CTA writes its own selected keys from its warps' lists,
// after the selected keys of the lower ranks (counted from the messages): the exact path's order.
// A plateau of 0.0 (ReLU rows with fewer than topk positive scores): a CTA whose slice holds 0.0
// and whose cut falls at or under 0.0's bin (or below the 32 bins) lists every key above 0.0 in
// its warp lists and sends their count and its count of 0.0 in the header; when every CTA did and
// those complete topk, T is 0.0 and each CTA writes its listed keys and its share of the row's
// first zeros (topk_cluster_plateau).
// Else (a list longer than its capacity, fewer than topk keys listed, a cut above d: the largest
// scores crowded into a few slices, plateaus of other values, zeros short of topk, ascending rows)
// the row takes the exact path, which has nothing to undo: nothing was written, the exact path
// uses none of this file's dynamic shared memory, and of the TopkShared fields written here before
// that decision (warp_sum, warp_equal, message_fill, union_count, inbox_full) it uses only
// warp_sum and warp_equal, which it writes after a cluster barrier before reading them
// (union_count is left as it is: a CTA serves one row).
#pragma once
#include "topk_radix.cuh"

// A message's layout: NSAJIT_TOPK_MSG_* in templates/kernel_params.h (the host plans it).

struct TopkClusterLists {
  uint32_t* outbox;     // this CTA's message (msg_words words)
  uint32_t* warp_keys;  // warp w's listed keys in index order at w * warp_capacity
  int* warp_positions;  // and their positions in the row
  uint32_t* inbox;      // C messages, CTA q's at q * msg_words
  int capacity;         // keys a message may hold (a multiple of 4)
  int msg_words;        // NSAJIT_TOPK_MSG_KEYS + capacity
  int warp_capacity;    // keys a warp's list may hold
};

// Header word 3 of a message: this flag when the CTA's warp lists hold every key above 0.0 (a
// plateau of 0.0, ReLU rows), with their count in bits 0-14 (lists of two words a key within
// kTopkMaxDynamicSmem: under 2^15 keys) and the slice's keys of 0.0 in bits 16-31 (a kept slice:
// under 2^16).
constexpr uint32_t kTopkPlateauListed = 0x8000u;
// The first key past 0.0's first-digit bin (which also holds the positive subnormals under 2^-129).
constexpr uint32_t kTopkZeroBinEnd = ((kTopkZeroKey >> NSAJIT_TOPK_SHIFT0) + 1u) << NSAJIT_TOPK_SHIFT0;

// The rank whose first-digit bin a CTA lists down to: 1.25 times its share of topk (its n of the
// row's len scores), plus 16. families/topk/heuristics.cpp sizes the lists for n = slice, len = width; a CTA
// of a shorter row lists more, and may overflow into the exact path. (A share by the slice
// instead of n made the partial last slice of a row list far down, over more than 32 bins.)
NSAJIT_DEVICE int topk_cluster_list_rank(int n, int len) {
  return int((5LL * NSAJIT_TOPK * n + 4LL * len - 1) / (4LL * len)) + 16;
}

// Whether a row over a cluster (a cluster_lists kernel) takes the speculative selection first:
// every vector of a slice is kept (the plan's rule, checked again: the listing reads the keys
// from shared memory). From the launch's parameters alone: uniform in the cluster, and
// recomputed where needed rather than held in a register (a flag held from the prologue made the
// 512-thread fused kernel spill).
NSAJIT_DEVICE bool topk_uses_cluster_lists(const TopkParams& p) { return p.resident_vecs >= (p.slice + 6) / 4; }

// At kernel start of a row that will list (whole block, before any CTA may send): the inbox's
// mbarrier expects one arrival (with its bytes) per CTA; the cluster barrier's arrive here is
// waited on just before sending, so that every mbarrier is initialised when the first message
// comes.
NSAJIT_DEVICE void topk_cluster_lists_init(int C, TopkShared& sh) {
  if (threadIdx.x == 0) {
    mbar_init(smem_u32(&sh.inbox_full), uint32_t(C));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

// After pass 0 (whole block): warp 1 finds the cut, one pass lists the keys (each warp its rounds
// [round_begin, round_end), contiguous, so the warps' lists concatenate in index order), then the
// message goes to every CTA (lane q of warp 0 to CTA q) and the CTA waits for the C messages of
// its inbox. Returns the size of the warp's list.
NSAJIT_DEVICE int topk_cluster_exchange(const TopkSlice& s, int b, const u32x4* keys,
                                         const uint32_t* hist0, int hi_local, int list_rank, int C, uint32_t rank,
                                         const TopkClusterLists& l, int round_begin, int round_end, TopkShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (warp == 1) {
    int greater, count;
    // At most 32 bins (those the counts cover): a higher cut lists whole bins too, and d >= cut
    // still decides. Searched over those 32 alone (one step; the bottom one when they hold fewer
    // than list_rank keys): a ReLU row's list_rank-th key may lie ~1000 bins down, at 0.0.
    const uint32_t cut = topk_warp_find_bin_down(hist0, hi_local, max(hi_local - (NSAJIT_TOPK_MSG_BINS - 1), 0),
                                                 list_rank, greater, count);
    // A plateau of 0.0 (ReLU rows) in the slice: 0.0's bin holds keys and the list_rank-th key is
    // in or under it (or below the 32 bins), or the slice is empty; its lists take every key above
    // 0.0 (topk_cluster_plateau).
    const bool plateau =
        s.n == 0 || (hist0[kTopkZeroKey >> NSAJIT_TOPK_SHIFT0] != 0u &&
                     (count == 0 || cut <= kTopkZeroKey >> NSAJIT_TOPK_SHIFT0));
    // A plateau's lists hold no key at or under 0.0: its message claims only the bins above 0.0's.
    const uint32_t sent_cut = plateau ? max(cut, (kTopkZeroKey >> NSAJIT_TOPK_SHIFT0) + 1u) : cut;
    // The counts of the 32 bins under the top one that the list holds (all of it when narrow),
    // and where each bin's keys start in the message (bins in decreasing order).
    const int bin = hi_local - lane;
    const int c = bin >= int(sent_cut) ? int(hist0[bin]) : 0;
    const int inclusive = warp_inclusive_scan(c);
    l.outbox[NSAJIT_TOPK_MSG_HEADER + lane] = uint32_t(c);
    sh.message_fill[lane] = inclusive - c;
    if (lane == 31) {
      // Within capacity, or only the header goes out. The up to 3 words after the keys (sent:
      // whole 16-byte units) zeroed, never read.
      const bool fits = inclusive <= l.capacity;
      l.outbox[0] = fits ? uint32_t(inclusive) : uint32_t(l.capacity + 1);
      l.outbox[1] = sent_cut;
      l.outbox[2] = uint32_t(hi_local);
      l.outbox[3] = plateau ? kTopkPlateauListed : 0u;  // completed after the listing
      for (int i = inclusive; fits && (i & 3) != 0; ++i) l.outbox[NSAJIT_TOPK_MSG_KEYS + i] = 0u;
    }
  }
  __syncthreads();
  const uint32_t cut = l.outbox[1];
  const bool fits = int(l.outbox[0]) <= l.capacity;
  const bool plateau = l.outbox[3] != 0u;  // uniform
  // key >> SHIFT0 >= cut and key != 0 (padding), in one compare (the listing is bound by integer
  // instruction issue: 16 warps a SM). A plateau's warp lists take every key above 0.0; its
  // message only those from the cut.
  const uint32_t cut_key = max(cut << NSAJIT_TOPK_SHIFT0, 1u);
  const uint32_t list_key = plateau ? kTopkZeroKey + 1u : cut_key;
  auto listed = [&](uint32_t key) { return key >= list_key; };
  // One pass: each warp lists its keys (and positions) in index order in its own list of
  // warp_capacity. Four rounds at a time: their loads in flight together and one scan of their
  // counts packed in bytes (a round's warp total is at most 128): the listing is bound by integer
  // instruction issue.
  uint32_t* const warp_keys = l.warp_keys + warp * l.warp_capacity;
  int* const warp_positions = l.warp_positions + warp * l.warp_capacity;
  int warp_n = 0;
  const int position0 = b + 4 * lane - s.head;  // of key 0 of this lane's vector in round 0
  for (int q0 = round_begin; (fits || plateau) && q0 < round_end; q0 += 4) {  // nothing to list past capacity (uniform)
    auto round_keys = [&](int u) {  // every vector is kept (topk_uses_cluster_lists); 0: never listed
      u32x4 z;
      z.x = z.y = z.z = z.w = 0u;
      const int v = (q0 + u) * 32 + lane;
      return q0 + u < round_end && v < s.nvec ? keys[v] : z;
    };
    uint32_t packed = 0u;  // unsigned: a last round of 128 listed keys sets bit 31
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const u32x4 kv = round_keys(u);
      packed |= (uint32_t(listed(kv.x)) + uint32_t(listed(kv.y)) + uint32_t(listed(kv.z)) + uint32_t(listed(kv.w)))
                << (8 * u);
    }
    const uint32_t inclusive = warp_inclusive_scan(packed);
    uint32_t exclusive = inclusive - packed;  // per byte: the lanes below this one
    uint32_t totals = __shfl_sync(NSAJIT_TOPK_FULL, inclusive, 31);
    // The keys read again (not held across the scan: 16 more registers spill at 512 threads).
#pragma unroll 1
    for (int u = 0; u < 4; ++u) {
      const u32x4 kv = round_keys(u);
      int o = warp_n + int(exclusive & 0xffu);
      exclusive >>= 8;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t key = topk_lane(kv, j);
        if (listed(key)) {
          if (o < l.warp_capacity) {
            warp_keys[o] = key;
            warp_positions[o] = position0 + 128 * (q0 + u) + j;
          }
          ++o;
        }
      }
      warp_n += int(totals & 0xffu);
      totals >>= 8;
    }
  }
  // The message: each listed key into its bin's range (the order inside a bin does not matter:
  // only the multiset of each bin is used), the warp's keys 32 at a time.
  __syncwarp();
  uint32_t* const message = l.outbox + NSAJIT_TOPK_MSG_KEYS;
  for (int i = lane; fits && i < min(warp_n, l.warp_capacity); i += 32) {
    const uint32_t key = warp_keys[i];
    if (key >= cut_key) message[atomicAdd(&sh.message_fill[hi_local - int(key >> NSAJIT_TOPK_SHIFT0)], 1)] = key;
  }
  if (plateau) {  // the listed keys in 0.0's bin (subnormals), which hist0's count of the bin holds too
    int subnormal = 0;
    for (int i = lane; i < min(warp_n, l.warp_capacity); i += 32) subnormal += int(warp_keys[i] < kTopkZeroBinEnd);
    subnormal = __reduce_add_sync(NSAJIT_TOPK_FULL, subnormal);
    if (lane == 0) sh.warp_equal[warp] = subnormal;
  }
  if (lane == 0) sh.warp_sum[warp] = warp_n;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the message, for the bulk copies
  __syncthreads();
  // A plateau's header word 3: its keys above 0.0 and of 0.0 (0 when a warp's list overflowed).
  if (warp == 0 && plateau) {
    const int n = lane < NSAJIT_TOPK_WARPS ? sh.warp_sum[lane] : 0;
    const int subnormal = lane < NSAJIT_TOPK_WARPS ? sh.warp_equal[lane] : 0;
    const bool complete = !__any_sync(NSAJIT_TOPK_FULL, n > l.warp_capacity);
    const int positives = __reduce_add_sync(NSAJIT_TOPK_FULL, n);
    const int zeros = int(hist0[kTopkZeroKey >> NSAJIT_TOPK_SHIFT0]) - __reduce_add_sync(NSAJIT_TOPK_FULL, subnormal);
    if (lane == 0) l.outbox[3] = complete ? kTopkPlateauListed | uint32_t(positives) | uint32_t(zeros) << 16 : 0u;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
  }
  // A warp's list that overflowed: only the header goes out (the row takes the exact path).
  if (warp == 0 && __any_sync(NSAJIT_TOPK_FULL, lane < NSAJIT_TOPK_WARPS && sh.warp_sum[lane] > l.warp_capacity)) {
    if (lane == 0) l.outbox[0] = uint32_t(l.capacity + 1);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
  }
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every inbox mbarrier is initialised
  if (warp == 0 && lane < C) {
    const int total = int(l.outbox[0]);  // as it goes out (warp 0 wrote it last)
    const uint32_t bytes = 4u * uint32_t(NSAJIT_TOPK_MSG_KEYS + (total <= l.capacity ? (total + 3) & ~3 : 0));
    const uint32_t bar = topk_cluster_address(&sh.inbox_full, uint32_t(lane));
    const uint32_t dst = topk_cluster_address(l.inbox + rank * uint32_t(l.msg_words), uint32_t(lane));
    // Relaxed (PTX ISA 8.6): the arrival publishes no data (the copy's bytes complete the barrier
    // themselves); the release form compiled to a MEMBAR.ALL.GPU before the remote arrive.
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "r"(smem_u32(l.outbox)), "r"(bytes), "r"(bar)
                 : "memory");
  }
  const uint32_t bar = smem_u32(&sh.inbox_full);
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar)
                 : "memory");
  return warp_n;
}

// A row whose threshold is 0.0 (every CTA's lists hold its keys above 0.0, fewer than topk in the
// row, and its zeros complete topk; whole block, after the exchange): every listed key is
// selected, after those of the lower ranks (positives_below) and of the warps before this one; then
// the first take_equal zeros of the row in index order, of which zeros_below lie in lower ranks'
// slices: each warp counts its segment's zeros (kept keys), and the warps whose zeros are taken
// write them. Ends after the cluster barrier that lets the CTA exit.
NSAJIT_DEVICE void topk_cluster_plateau(const TopkSlice& s, int b, const u32x4* keys, int round_begin, int round_end,
                                        const TopkClusterLists& l, int warp_n, int positives, int positives_below,
                                        int zeros_below, const KvSlotRow& t, bool apply, int* out, TopkShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");  // every message received
  const int* const warp_positions = l.warp_positions + warp * l.warp_capacity;
  const int first = positives_below + __reduce_add_sync(NSAJIT_TOPK_FULL, lane < warp ? sh.warp_sum[lane] : 0);
  for (int i = lane; i < warp_n; i += 32) out[first + i] = topk_emit(t, warp_positions[i], apply);
  const int take_equal = NSAJIT_TOPK - positives;
  if (zeros_below < take_equal) {  // uniform in the CTA
    auto zero_bits = [&](int q) {  // bit j: element j of this lane's vector of round q is 0.0
      const int v = q * 32 + lane;
      if (v >= s.nvec) return 0u;  // kept vectors past the slice are not written
      const u32x4 kv = keys[v];
      return uint32_t(kv.x == kTopkZeroKey) | uint32_t(kv.y == kTopkZeroKey) << 1 |
             uint32_t(kv.z == kTopkZeroKey) << 2 | uint32_t(kv.w == kTopkZeroKey) << 3;
    };
    int zeros = 0;
    for (int q = round_begin; q < round_end; ++q) zeros += __popc(zero_bits(q));
    zeros = __reduce_add_sync(NSAJIT_TOPK_FULL, zeros);
    if (lane == 0) sh.own_equal[warp] = zeros;
    __syncthreads();
    int next = zeros_below + __reduce_add_sync(NSAJIT_TOPK_FULL, lane < warp ? sh.own_equal[lane] : 0);
    const int position0 = b + 4 * lane - s.head;  // of element 0 of this lane's vector in round 0
    for (int q = round_begin; q < round_end && next < take_equal; ++q) {  // warp-uniform
      uint32_t bits = zero_bits(q);
      const int c = __popc(bits);
      const int inclusive = warp_inclusive_scan(c);
#if NSAJIT_FUSED
      const int e = next + inclusive - c;
      // The lane's (up to 4) zeros together: their table reads are in flight at once instead of
      // one L2 latency each before its store. (Plain kernels keep the loop: no latency to hide.)
      int slot[4], value[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int j = __ffs(bits) - 1;  // -1: no zero left
        bits &= bits - 1u;
        slot[u] = j >= 0 && e + u < take_equal ? positives + e + u : -1;
        value[u] = slot[u] >= 0 ? position0 + 128 * q + j : -1;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) value[u] = topk_emit(t, value[u], apply);
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (slot[u] >= 0) out[slot[u]] = value[u];
#else
      int e = next + inclusive - c;
      while (bits && e < take_equal) {
        const int j = __ffs(bits) - 1;
        bits &= bits - 1u;
        out[positives + e] = topk_emit(t, position0 + 128 * q + j, apply);
        ++e;
      }
#endif
      next += __shfl_sync(NSAJIT_TOPK_FULL, inclusive, 31);
    }
  }
  topk_cluster_wait();  // no CTA leaves while a copy may still read its outbox
}

// After the exchange (whole block; warp_n: the warp's list size). Returns true when the
// row is done: its output written (each CTA its own list's selected keys) and the cluster barrier
// waited on that lets the CTA exit (every CTA has received all its messages, so no copy still
// reads this CTA's outbox). False: the row takes the exact path (its first cluster barrier also
// keeps this CTA until every copy is done); nothing written.
NSAJIT_DEVICE bool topk_cluster_select(int C, uint32_t rank, const TopkClusterLists& l, int warp_n, const TopkSlice& s,
                                       int b, const u32x4* keys, int round_begin, int round_end, const KvSlotRow& t,
                                       bool apply, int* out, TopkShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Every warp reads the C headers (lane q: CTA q's) and its list's 32 counts: one barrier (the
  // window's sums below) and no serial search by one warp while the others wait.
  int n_q = 0, cut_q = 0, top_q = -1;
  uint32_t plateau_q = kTopkPlateauListed;
  if (lane < C) {
    const u32x4 h = *reinterpret_cast<const u32x4*>(l.inbox + lane * l.msg_words);
    n_q = int(h.x);
    cut_q = int(h.y);
    top_q = int(h.z);
    plateau_q = h.w;
  }
  // Threshold 0.0: every list holds its slice's keys above 0.0, fewer than topk in all, and the
  // zeros complete topk (uniform in the cluster: every CTA reads the same headers).
  if (__all_sync(NSAJIT_TOPK_FULL, (plateau_q & kTopkPlateauListed) != 0u)) {
    const int positives_q = lane < C ? int(plateau_q & (kTopkPlateauListed - 1u)) : 0;
    const int zeros_q = lane < C ? int(plateau_q >> 16) : 0;
    const int positives = __reduce_add_sync(NSAJIT_TOPK_FULL, positives_q);
    const int zeros = __reduce_add_sync(NSAJIT_TOPK_FULL, zeros_q);
    if (positives < NSAJIT_TOPK && positives + zeros >= NSAJIT_TOPK) {
      const bool lower = lane < int(rank);
      topk_cluster_plateau(s, b, keys, round_begin, round_end, l, warp_n, positives,
                           __reduce_add_sync(NSAJIT_TOPK_FULL, lower ? positives_q : 0),
                           __reduce_add_sync(NSAJIT_TOPK_FULL, lower ? zeros_q : 0), t, apply, out, sh);
      return true;
    }
  }
  const int listed = __reduce_add_sync(NSAJIT_TOPK_FULL, n_q);
  const int max_cut = int(__reduce_max_sync(NSAJIT_TOPK_FULL, uint32_t(cut_q)));
  const int top = int(__reduce_max_sync(NSAJIT_TOPK_FULL, uint32_t(max(top_q, 0))));
  // Every list fits and is covered by its 32 counts (the sender's cut guarantees the latter;
  // checked again here, as the window below relies on it).
  const bool fits =
      !__any_sync(NSAJIT_TOPK_FULL, lane < C && (n_q > l.capacity || top_q - cut_q >= NSAJIT_TOPK_MSG_BINS)) &&
      listed >= NSAJIT_TOPK;
  // The warps of list q (WARPS / C of them, the plan allows no fewer than one) read its message.
  const int per_list = NSAJIT_TOPK_WARPS / C;
  const int list = warp / per_list;
  const uint32_t* const mine = l.inbox + list * l.msg_words;
  const int mine_top = __shfl_sync(NSAJIT_TOPK_FULL, top_q, list);
  const int mine_count = int(mine[NSAJIT_TOPK_MSG_HEADER + lane]);  // its bin mine_top - lane
  // The union's counts of the 32 bins under the row's top bin, summed by the lists' first warps.
  // That window is enough: T's first digit d must be at least every list's cut for the lists to
  // hold the selection, and the cut of the list with the row's top bin is at most 31 bins under
  // it (a deeper d fails that test whatever the counts below the window).
  const int window_index = top - mine_top + lane;  // 0: the row's top bin
  if (warp % per_list == 0 && mine_count != 0 && window_index < NSAJIT_TOPK_MSG_BINS)
    atomicAdd(&sh.union_count[window_index], uint32_t(mine_count));
  __syncthreads();
  // Every warp: d, the first bin of the window (from the top) where the union reaches topk keys.
  const int c = int(sh.union_count[lane]);
  const int inclusive = warp_inclusive_scan(c);
  const uint32_t reached = __ballot_sync(NSAJIT_TOPK_FULL, top - lane >= 0 && inclusive >= NSAJIT_TOPK);
  const int d_lane = reached ? __ffs(reached) - 1 : 0;
  const int d = top - d_lane;
  // d = 0 (the threshold among NaN and -inf keys) is left to the exact path.
  const bool holds = fits && reached != 0u && d >= max_cut && d >= 1;  // uniform in the cluster
  if (!holds) return false;
  // Every message received (waited for before exit). Relaxed: it orders no data.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  // The union's topk-th largest key: the first digit d, then its refinement over the keys of bin d.
  // The warps of list q read its bin d, a range of its message (bins in decreasing order): keys
  // begin + first, begin + first + stride, ... (a few a thread: normal scores at 16 CTAs, ~90
  // keys a list).
  TopkRadix x{0u, 0u, NSAJIT_TOPK, 0, 0};
  topk_radix_step(x, uint32_t(d), 32 - NSAJIT_TOPK_SHIFT0, __shfl_sync(NSAJIT_TOPK_FULL, inclusive - c, d_lane),
                  __shfl_sync(NSAJIT_TOPK_FULL, c, d_lane));
  const int first = (warp % per_list) * 32 + lane, stride = 32 * per_list;
  const int d_index = mine_top - d;  // bin d's count in the message (when in [0, 32))
  const int begin = __reduce_add_sync(NSAJIT_TOPK_FULL, lane < d_index ? mine_count : 0);  // keys above bin d
  const int in_bin_count = __shfl_sync(NSAJIT_TOPK_FULL, mine_count, d_index & 31);
  const int in_bin = d_index >= 0 && d_index < NSAJIT_TOPK_MSG_BINS ? in_bin_count : 0;
  const int n_mine = max(0, in_bin - first + stride - 1) / stride;
  auto candidate = [&](int j) -> uint32_t { return mine[NSAJIT_TOPK_MSG_KEYS + begin + first + j * stride]; };
  topk_refine_candidates(x, sh, n_mine, candidate);
  const uint32_t threshold = x.prefix;
  const int take_equal = x.k;
  const int total_greater = NSAJIT_TOPK - take_equal;

  // Output (the exact path's order): the total_greater keys > T at slots [0, total_greater) in
  // index order, then the first take_equal keys == T. First the selected keys of the lists of
  // lower rank: each warp counts its part of its list's bin d (the first warp of a list adds the
  // keys above bin d), then every warp sums those of the warps of lists 0 .. rank - 1.
  int g = lane == 0 && first == 0 ? begin : 0, e = 0;
#pragma unroll 1  // a few keys a thread: less code to fetch
  for (int j = 0; j < n_mine; ++j) {
    const uint32_t key = candidate(j);
    g += int(key > threshold);
    e += int(key == threshold);
  }
  topk_store_warp_counts(sh, warp, g, e);
  // This CTA's selected keys: warp w's list (in index order, after those of warps 0 .. w - 1),
  // 32 at a time, ranked by ballots; its counts published beside the lists' (one barrier).
  const uint32_t* const warp_keys = l.warp_keys + warp * l.warp_capacity;
  const int* const warp_positions = l.warp_positions + warp * l.warp_capacity;
  const uint32_t lanes_below = (1u << lane) - 1u;
  g = e = 0;
  for (int i = lane; i - lane < warp_n; i += 32) {
    const uint32_t key = i < warp_n ? warp_keys[i] : 0u;  // 0: never > or == T (T >= 1)
    g += __popc(__ballot_sync(NSAJIT_TOPK_FULL, key > threshold));
    e += __popc(__ballot_sync(NSAJIT_TOPK_FULL, key == threshold));
  }
  if (lane == 0) {
    sh.own_greater[warp] = g;
    sh.own_equal[warp] = e;
  }
  __syncthreads();
  // The lists of lower rank (warp `lane` reads one when lane < rank * per_list), then the warps
  // before this one.
  const bool lower = lane < int(rank) * per_list;
  int next_greater = __reduce_add_sync(NSAJIT_TOPK_FULL, lower ? sh.warp_greater[lane] : 0);
  int next_equal = __reduce_add_sync(NSAJIT_TOPK_FULL, lower ? sh.warp_equal[lane] : 0);
  next_greater += __reduce_add_sync(NSAJIT_TOPK_FULL, lane < warp ? sh.own_greater[lane] : 0);
  next_equal += __reduce_add_sync(NSAJIT_TOPK_FULL, lane < warp ? sh.own_equal[lane] : 0);
  for (int i = lane; i - lane < warp_n; i += 32) {
    const uint32_t key = i < warp_n ? warp_keys[i] : 0u;
    const uint32_t gb = __ballot_sync(NSAJIT_TOPK_FULL, key > threshold);
    const uint32_t eb = __ballot_sync(NSAJIT_TOPK_FULL, key == threshold);
    const int pg = next_greater + __popc(gb & lanes_below);
    const int pe = next_equal + __popc(eb & lanes_below);
    if (key > threshold) out[pg] = topk_emit(t, warp_positions[i], apply);
    else if (key == threshold && pe < take_equal) out[total_greater + pe] = topk_emit(t, warp_positions[i], apply);
    next_greater += __popc(gb);
    next_equal += __popc(eb);
  }
  topk_cluster_wait();  // no CTA leaves while a copy may still read its outbox
  return true;
}
