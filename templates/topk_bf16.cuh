// topk_bf16.cuh — the top-k family (templates/topk.cuh), bf16 scores: the streaming loops of
// pass 0 and of the speculative sweep with 16-byte loads of 8 scores (two vectors, "a pair").
// Compiled only for bf16 kernels (NSAJIT_SCORE_BF16); fp32 kernels see nothing of this file.
//
// Why: a bf16 vector (4 scores) is 8 bytes, so with the fp32 loops' vector per load a bf16 row
// runs as many loads, loop rounds and load batches (each one memory latency of the warp's chain)
// as an fp32 row of the same length, for half the bytes; the fp32 kernels are latency- and
// issue-bound, not byte-bound, so bf16 was not faster (docs/notes/topk.md, issue 36). Here a lane
// loads a pair: the same 16 bytes a load and the same bytes in flight per thread as fp32
// (kTopkSweepUnroll loads), half the loads, rounds and batches a row.
//
// Pairs: the slice's vectors (TopkSlice: vector v at s.abase + 4 v, 8-byte aligned) are grouped
// in 16-byte units; p0 = 1 when s.abase is 8 bytes into one, so pair P is the vectors
// 2 P - p0 and 2 P - p0 + 1 (one aligned 16-byte load when both lie in the slice's whole vectors).
// Everything after the load is the 4-score vectors' (keys, shared-memory vectors, lists, order):
// a bf16 launch still returns the fp32 launch's bytes on the widened values.
#pragma once
#include "topk_speculative.cuh"

#if NSAJIT_SCORE_BF16

// The 8 scores of an aligned pair as packed bf16 (word i: scores 2 i (low half) and 2 i + 1).
NSAJIT_DEVICE u32x4 topk_load_pair(const TopkScore* ptr) {
  u32x4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr));
  return v;
}

// The keys of the two bf16 scores of word w (the lower address in the low half): topk_key of
// their fp32 values, bit for bit, from the packed pair (4 instructions a score instead of 6):
// g = w + 0.0 in bf16 (-0.0 becomes +0.0, every other value is exact), s = each half's sign
// replicated over it, g ^ (s | 0x8000) = each score's key bits 31..16 (negatives reversed, below
// positives), and bits 15..0 of an fp32 key of a bf16 are the sign replicated: the low 16 bits of
// ~(x << 16) for a negative x, 0 otherwise. NaN (either sign): 1.
NSAJIT_DEVICE void topk_pair_keys(uint32_t w, uint32_t& lo, uint32_t& hi) {
  uint32_t g, s, nan_lo, nan_hi;
  asm("{\n\t.reg .pred p, q;\n\t"
      "add.rn.bf16x2 %0, %4, %5;\n\t"
      "setp.nan.bf16x2 p|q, %4, %4;\n\t"
      "selp.u32 %2, 1, 0, p;\n\tselp.u32 %3, 1, 0, q;\n\t"
      "prmt.b32 %1, %0, 0, 0xbb99;\n\t}"  // s: byte 1's sign over bytes 0-1, byte 3's over 2-3
      : "=r"(g), "=r"(s), "=r"(nan_lo), "=r"(nan_hi)
      : "r"(w), "r"(0u));
  const uint32_t k = g ^ (s | 0x80008000u);
  lo = nan_lo != 0u ? 1u : __byte_perm(k, s, 0x1054);  // bytes: s, s, k.0, k.1
  hi = nan_hi != 0u ? 1u : __byte_perm(k, s, 0x3276);  // bytes: s, s, k.2, k.3
}

// 1 when the slice's vector 0 is the second half of a 16-byte unit.
NSAJIT_DEVICE int topk_pair_phase(const TopkSlice& s) {
  return int((reinterpret_cast<unsigned long long>(s.abase) >> 3) & 1ull);
}

// The whole pairs of the slice: [pw0, pw1), both vectors in [topk_whole_begin, topk_whole_end).
NSAJIT_DEVICE int topk_whole_pair_begin(const TopkSlice& s, int p0) { return (topk_whole_begin(s) + p0 + 1) >> 1; }
NSAJIT_DEVICE int topk_whole_pair_end(const TopkSlice& s, int p0) {
  return max(topk_whole_pair_begin(s, p0), (topk_whole_end(s) + p0) >> 1);
}

// --- pass 0 ------------------------------------------------------------------------------------------

// Pass 0 of a bf16 slice (topk.cuh): every key of the slice counted in hist0 (0.0's in `zeros`
// where kTopkCountZeros), the first resident_vecs vectors' keys kept, slice_max the largest key.
// Thread tid takes the whole pairs tid, tid + T, ... (4 loads in flight); threads 0-3 the at most
// two vectors at each end that no whole pair covers (partial or not), element by element.
NSAJIT_DEVICE void topk_pass0_pairs(const TopkSlice& s, u32x4* keys, int resident_vecs, uint32_t* hist0,
                                    uint32_t& zeros, uint32_t& slice_max) {
  const int tid = threadIdx.x;
  const int p0 = topk_pair_phase(s);
  const int pw0 = topk_whole_pair_begin(s, p0), pw1 = topk_whole_pair_end(s, p0);
  constexpr int kUnroll = 4;
  for (int base = pw0; base < pw1; base += kUnroll * NSAJIT_THREADS) {
    u32x4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int pair = base + u * NSAJIT_THREADS + tid;
      if (pair < pw1) raw[u] = topk_load_pair(s.abase + 4 * (2 * pair - p0));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int pair = base + u * NSAJIT_THREADS + tid;
      if (pair < pw1) {
        const int v = 2 * pair - p0;
        u32x4 k0, k1;
        topk_pair_keys(raw[u].x, k0.x, k0.y);
        topk_pair_keys(raw[u].y, k0.z, k0.w);
        topk_pair_keys(raw[u].z, k1.x, k1.y);
        topk_pair_keys(raw[u].w, k1.z, k1.w);
        if (v < resident_vecs) keys[v] = k0;
        if (v + 1 < resident_vecs) keys[v + 1] = k1;
        topk_count_first_digit(hist0, k0.x, zeros);
        topk_count_first_digit(hist0, k0.y, zeros);
        topk_count_first_digit(hist0, k0.z, zeros);
        topk_count_first_digit(hist0, k0.w, zeros);
        topk_count_first_digit(hist0, k1.x, zeros);
        topk_count_first_digit(hist0, k1.y, zeros);
        topk_count_first_digit(hist0, k1.z, zeros);
        topk_count_first_digit(hist0, k1.w, zeros);
        slice_max = max(slice_max, max(max(max(k0.x, k0.y), max(k0.z, k0.w)), max(max(k1.x, k1.y), max(k1.z, k1.w))));
      }
    }
  }
  // The vectors outside the whole pairs: [0, 2 pw0 - p0) (at most 2: vw0 <= 1) and
  // [2 pw1 - p0, nvec) (at most 2: the last whole vector and the partial one).
  const int v = tid < 2 ? tid : 2 * pw1 - p0 + tid - 2;
  if (tid < 4 && v < s.nvec && (tid >= 2 || v < 2 * pw0 - p0))
    topk_pass0_edge_vector(s, v, keys, resident_vecs, hist0, zeros, slice_max);
}

// --- the speculative sweep ---------------------------------------------------------------------------

// A warp's segment (rounds [round_begin, round_end) of 32 vectors: vectors [v0, v1), the same
// segment as the fp32 sweep's, the classify's and the output's) as rounds of 32 pairs: pairs
// [pb, pe), pair pb + 32 d + lane in round d. With p0 = 1 the segment's first and last pairs reach
// one vector into the neighbouring segments, whose scores are never listed here: a pair's first
// vector 2 P - p0 is the segment's iff P is in [first_begin, pe), its second iff P < second_end.
struct TopkPairSegment {
  int p0;           // topk_pair_phase
  int pw0, pw1;     // the slice's whole pairs
  int pb, pe;       // the segment's pairs
  int load_end;     // min(pw1, pe): the whole pairs of the segment are [max(pw0, pb), load_end)
  int first_begin;  // pb + p0
  int second_end;   // (v1 + p0) / 2
};

NSAJIT_DEVICE TopkPairSegment topk_pair_segment(const TopkSlice& s, int round_begin, int round_end) {
  TopkPairSegment g;
  g.p0 = topk_pair_phase(s);
  g.pw0 = topk_whole_pair_begin(s, g.p0);
  g.pw1 = topk_whole_pair_end(s, g.p0);
  const int v0 = 32 * round_begin, v1 = min(32 * round_end, s.nvec);
  g.pb = v0 >> 1;  // v0 is even: pair pb holds vector v0
  g.pe = v1 > v0 ? (v1 + g.p0 + 1) >> 1 : g.pb;
  g.load_end = min(g.pw1, g.pe);
  g.first_begin = g.pb + g.p0;
  g.second_end = (v1 + g.p0) >> 1;
  return g;
}

// The pairs of the rounds from first (the round's pair of lane 0) on, kTopkSweepUnroll rounds,
// whole pairs of the segment only, into raw (edge pairs and pairs past the segment are left as
// they are).
NSAJIT_DEVICE void topk_sweep_load_pair_batch(const TopkSlice& s, const TopkPairSegment& g, int first,
                                              u32x4 (&raw)[kTopkSweepUnroll]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int u = 0; u < kTopkSweepUnroll; ++u) {
    const int pair = first + 32 * u + lane;
    if (pair >= g.pw0 && pair < g.load_end) raw[u] = topk_load_pair(s.abase + 4 * (2 * pair - g.p0));
  }
}

// The sweep's first batch (topk_sweep_load for bf16): rounds 0 .. kTopkSweepUnroll - 1 of pairs.
NSAJIT_DEVICE void topk_sweep_load_pairs(const TopkSlice& s, int round_begin, int round_end,
                                         u32x4 (&raw)[kTopkSweepUnroll]) {
  const TopkPairSegment g = topk_pair_segment(s, round_begin, round_end);
  topk_sweep_load_pair_batch(s, g, g.pb, raw);
}

// The sample of topk_sample_bound from the pairs' first batch: the last score of this lane's
// pair in each round (one window of four 256-score chunks at the start of the warp's segment),
// counted in hist, the highest of their bins in top; returns how many were taken (0 to 4).
NSAJIT_DEVICE int topk_sample_pairs(const TopkSlice& s, const u32x4 (&head)[kTopkSweepUnroll], int round_begin,
                                    int round_end, uint32_t* hist, uint32_t& top) {
  const TopkPairSegment g = topk_pair_segment(s, round_begin, round_end);
  const int lane = threadIdx.x & 31;
  int taken = 0;
#pragma unroll
  for (int u = 0; u < kTopkSweepUnroll; ++u) {
    const int pair = g.pb + 32 * u + lane;
    if (pair >= g.pw0 && pair < g.load_end && pair < g.second_end) {
      const uint32_t bin = topk_key(__uint_as_float(head[u].w & 0xffff0000u)) >> NSAJIT_TOPK_SHIFT0;
      atomicAdd(&hist[bin], 1u);
      top = max(top, bin);
      ++taken;
    }
  }
  return taken;
}

// The packed bf16 bound of the sweep: for every bf16 x, x >= f (as fp32) iff x >= the result, the
// smallest bf16 >= f in both halves (a negative f's magnitude rounds down, a positive f up; the
// sweep's bounds of first-digit bins are exact bf16 values when >= +0.0). f is not NaN.
NSAJIT_DEVICE uint32_t topk_pair_bound(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t h = (u & 0x80000000u) != 0u ? u >> 16 : (u + 0xffffu) >> 16;
  return h | h << 16;
}

// Bit 31 - j: score j of the pair w (word i: scores 2 i, 2 i + 1) is >= the packed bound b2, not
// NaN, and inside the segment (j < 4 ? first_in : second_in). One compare of two scores.
NSAJIT_DEVICE uint32_t topk_pair_listed(const uint32_t (&w)[4], uint32_t b2, bool first_in, bool second_in) {
  uint32_t t[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)  // each half 0xffff (listed) or 0
    asm("{\n\t.reg .pred c;\n\tsetp.ne.u32 c, %2, 0;\n\tset.ge.and.u32.bf16x2 %0, %1, %3, c;\n\t}"
        : "=r"(t[i])
        : "r"(w[i]), "r"(uint32_t(i < 2 ? first_in : second_in)), "r"(b2));
  // Byte 3 - j of a (j < 4) or b (j >= 4): score j's 0xff or 0; bit 7 - j kept, the multiply sums bytes.
  const uint32_t a = __byte_perm(t[0], t[1], 0x1357), b = __byte_perm(t[2], t[3], 0x1357);
  return ((a & 0x80402010u) | (b & 0x08040201u)) * 0x01010101u & 0xff000000u;
}

// v plus lane - o's v where that lane exists (the shuffle's in-range flag predicates the add).
template <int kOffset>
NSAJIT_DEVICE int topk_scan_step(int v) {
  asm("{\n\t.reg .s32 n;\n\t.reg .pred p;\n\tshfl.sync.up.b32 n|p, %0, %1, 0, -1;\n\t@p add.s32 %0, %0, n;\n\t}"
      : "+r"(v)
      : "n"(kOffset));
  return v;
}

// The inclusive sum of v over lanes 0..lane (no lane compares kept live across the sweep).
NSAJIT_DEVICE int topk_warp_inclusive_scan(int v) {
  return topk_scan_step<16>(topk_scan_step<8>(topk_scan_step<4>(topk_scan_step<2>(topk_scan_step<1>(v)))));
}

// The position of the first score of a warp segment's first pair (pair pb = 16 round_begin): a
// listed score's position is this plus the low half of its list entry.
NSAJIT_DEVICE int topk_pair_segment_base(const TopkSlice& s, int slice_begin, int round_begin) {
  return slice_begin - 4 * topk_pair_phase(s) - s.head + 8 * (16 * round_begin);
}

// A bf16 list entry (the sweep's: score bits << 16 | position offset) with its high half turned
// into the score's order key (a bf16 key is a 16-bit function of its bits, topk_pair_keys), the
// offset kept: it orders, and has the first digits of, the score's 32-bit key.
NSAJIT_DEVICE uint32_t topk_packed_key(uint32_t entry) {
  return __byte_perm(topk_key(__uint_as_float(entry & 0xffff0000u)), entry, 0x3254);  // bytes: e.0, e.1, k.2, k.3
}

// topk_speculative_sweep for bf16 scores (same arguments and result, no positions list; raw holds
// the first batch of pairs, topk_sweep_load_pairs'): rounds of 32 pairs, 8 scores a lane, compared
// as bf16 pairs (the bound as the smallest bf16 at or above it) and listed in index order (lane,
// then element: lane l's 8 scores precede lane l + 1's), one word an entry: the score's bf16 bits
// in the high half, its position less topk_pair_segment_base in the low half (the plan keeps a
// warp's segment under 2^16 positions: families/topk/heuristics.cpp); kCountZeros: `zeros` also
// counts this lane's scores of the segment equal to 0.0 (either sign).
template <bool kCountZeros>
NSAJIT_DEVICE int topk_speculative_sweep_pairs(const TopkSlice& s, uint32_t bound, uint32_t list_key, int capacity,
                                               int round_begin, int round_end, u32x4 (&raw)[kTopkSweepUnroll],
                                               int& zeros) {
  const TopkPairSegment g = topk_pair_segment(s, round_begin, round_end);
  const int lane = threadIdx.x & 31;
  const uint32_t b2 = topk_pair_bound(topk_bound_score(bound));
  int fill = 0;
  constexpr int kUnroll = kTopkSweepUnroll;
  // This lane's pair of the next batch's round 0 (one pointer advanced, not recomputed a round).
  const TopkScore* ahead = s.abase + 4 * (2 * (g.pb + 32 * kUnroll + lane) - g.p0);
  // Counts this lane's scores of w equal to 0.0 (kCountZeros; first_in, second_in: which of its
  // vectors are the segment's).
  auto count_zeros = [&](const uint32_t (&w)[4], bool first_in, bool second_in) {
    if (kCountZeros) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (i < 2 ? first_in : second_in) zeros += int((w[i] & 0x7fffu) == 0u) + int((w[i] & 0x7fff0000u) == 0u);
    }
  };
  // Stores the scores of this lane's pair w (pair `pair`) marked in listed (bit 31 - j: element j,
  // offset 8 (pair - pb) + j in the segment, so leading zeros give index order) at the warp's list
  // entries fill + below on, below the listed scores of the lanes before it; found: the round's, all lanes'.
  auto store_pair = [&](const uint32_t (&w)[4], uint32_t listed, int pair, int below, int found) {
    if (fill + found <= capacity) {
      // Stores for the listed only: the warp loops as often as its busiest lane lists.
      uint32_t key_at = list_key + 4u * uint32_t(fill + below);
      const uint32_t offset = uint32_t(8 * (pair - g.pb));
      for (uint32_t m = listed; m != 0u;) {
        uint32_t j;  // the next listed score: m's leading zeros (m != 0)
        asm("bfind.shiftamt.u32 %0, %1;" : "=r"(j) : "r"(m));
        m ^= 0x80000000u >> j;
        // Score j is bits 16 (j & 3) .. + 15 of the 64 bits w[j & 4 ? 3 : 1]:w[j & 4 ? 2 : 0].
        const unsigned long long half = (j & 4u) != 0u ? (static_cast<unsigned long long>(w[3]) << 32 | w[2])
                                                       : (static_cast<unsigned long long>(w[1]) << 32 | w[0]);
        st_shared_4(key_at, __byte_perm(uint32_t(half >> (16u * (j & 3u))), offset + j, 0x1054));  // score, offset
        key_at += 4u;
      }
    }
    fill += found;
  };
  // Lists one round's pair w of this lane alone (the batches with edges): one scan of the lanes'
  // counts places each lane's run (cheaper than a ballot per element).
  auto list_pair = [&](const uint32_t (&w)[4], int pair, bool first_in, bool second_in) {
    const uint32_t listed = topk_pair_listed(w, b2, first_in, second_in);
    count_zeros(w, first_in, second_in);
    const int count = __popc(listed);
    const int inclusive = topk_warp_inclusive_scan(count);
    store_pair(w, listed, pair, inclusive - count, __shfl_sync(NSAJIT_TOPK_FULL, inclusive, 31));
  };
  // Batches from first in [whole_first, whole_last]: every round present, whole pairs, both vectors the segment's.
  const int whole_first = max(g.pw0, g.first_begin), whole_last = min(g.pw1, g.second_end) - 32 * kUnroll;
  // first: lane 0's pair, warp-uniform.
  for (int first = g.pb; first < g.pe; first += 32 * kUnroll, ahead += 8 * 32 * kUnroll) {
    if (first >= whole_first && first <= whole_last) {  // warp-uniform: no edge code, no segment masks
      const int room = g.load_end - 32 * kUnroll - first - lane;  // round u's next pair is loaded iff 32 u < room
      // The batch's rounds ranked by one scan of byte-packed counts (byte u: round u's, <= 8 a
      // lane). The lanes below lane 31 list at most 31 x 8 a round, so `below` carries across no
      // byte; lane 31's inclusive sum may carry out of one, which subtracting its counts undoes.
      static_assert(kUnroll <= 4, "one byte a round");
      uint32_t listed[kUnroll];
      uint32_t counts = 0u;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
        listed[u] = topk_pair_listed(w, b2, true, true);
        count_zeros(w, true, true);
        counts |= uint32_t(__popc(listed[u])) << (8 * u);
      }
      const uint32_t below = uint32_t(topk_warp_inclusive_scan(int(counts))) - counts;
      const uint32_t last_below = __shfl_sync(NSAJIT_TOPK_FULL, below, 31);
      const uint32_t last_counts = __shfl_sync(NSAJIT_TOPK_FULL, counts, 31);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
        const int found = int((last_below >> (8 * u)) & 0xffu) + int((last_counts >> (8 * u)) & 0xffu);
        store_pair(w, listed[u], first + 32 * u + lane, int((below >> (8 * u)) & 0xffu), found);
        if (32 * u < room) raw[u] = topk_load_pair(ahead + 256 * u);
      }
    } else {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int pair = first + 32 * u + lane;
        if (pair - lane >= g.pe) break;  // warp-uniform
        if (pair < g.pw0 || pair >= g.pw1) {  // an edge of the slice: element by element, NaN (never listed) outside it
          const int e0 = 8 * pair - 4 * g.p0 - s.head;  // the pair's first score in the slice
          uint32_t w[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int e = e0 + 2 * i;
            const uint32_t a = e >= 0 && e < s.n ? uint32_t(s.sp[e]) : 0x7fffu;
            const uint32_t b = e + 1 >= 0 && e + 1 < s.n ? uint32_t(s.sp[e + 1]) : 0x7fffu;
            w[i] = a | b << 16;
          }
          raw[u].x = w[0];
          raw[u].y = w[1];
          raw[u].z = w[2];
          raw[u].w = w[3];
        }
        const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
        // Only the segment's vectors are listed (its first and last pairs may reach past it).
        list_pair(w, pair, pair >= g.first_begin && pair < g.pe, pair < g.second_end);
        // The next batch's round u into the slot just read: in flight during the later rounds (pw0 <= 1).
        if (pair + 32 * kUnroll < g.load_end) raw[u] = topk_load_pair(ahead + 256 * u);
      }
    }
    if (fill > capacity) break;  // warp-uniform: the row falls back
  }
  return fill;
}

// --- the selection over the lists --------------------------------------------------------------------

// After the first digit over the lists (x.bits 12, templates/topk.cuh): a bf16 key is its high 16
// bits (the low 16 repeat the sign), so the 4 bits under the digit resolve T. One pass: each warp
// counts its keys of the digit's bin by those bits (16 counters a warp in sh.refine_hist[0], zeroed
// by the prologue) and its keys above the bin; after one barrier every warp finds T's bits from all
// warps' counters (lane l: bits 15 - l, from the top) and stores its counts of keys above T and
// equal to T (topk_store_warp_counts) without another pass over its list. Whole block; returns with
// x.prefix = T, x.k = the keys == T to take, x.bits = 32 (the caller's barrier publishes the counts).
NSAJIT_DEVICE void topk_resolve_bf16_lists(TopkRadix& x, const uint32_t* warp_list, int warp_fill, TopkShared& sh) {
  static_assert(16 * NSAJIT_TOPK_WARPS <= (1 << NSAJIT_TOPK_REFINE_BITS), "16 counters a warp fit refine_hist[0]");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t* const counters = sh.refine_hist[0];
  int above = 0;  // this lane's keys above the bin
  for (int i = lane; i < warp_fill; i += 32) {
    const uint32_t key = warp_list[i];
    if ((key & x.mask) == x.prefix) atomicAdd(&counters[16 * warp + ((key >> 16) & 15u)], 1u);
    else above += int(key > x.prefix);
  }
  __syncthreads();
  const int bits = 15 - lane;  // lanes 0-15
  const int own = lane < 16 ? int(counters[16 * warp + bits]) : 0;
  int total = 0;
  if (lane < 16) {
#pragma unroll
    for (int w = 0; w < NSAJIT_TOPK_WARPS; ++w) total += int(counters[16 * w + bits]);
  }
  const int inclusive = warp_inclusive_scan(total);
  // 1 <= x.k <= the bin's keys, all counted: lane j < 16 reaches x.k.
  const int j = __ffs(__ballot_sync(NSAJIT_TOPK_FULL, inclusive >= x.k)) - 1;
  x.k -= __shfl_sync(NSAJIT_TOPK_FULL, inclusive - total, j);
  x.count = __shfl_sync(NSAJIT_TOPK_FULL, total, j);
  x.prefix |= uint32_t(15 - j) << 16;
  x.mask = 0xffff0000u;
  x.bits = 16;
  topk_resolve_bf16(x);
  topk_store_warp_counts(sh, warp, above + (lane < j ? own : 0), lane == j ? own : 0);
}

#endif  // NSAJIT_SCORE_BF16
