// topk_dense.cuh — the top-k family (templates/topk.cuh), part 6: dense rows, read once into
// registers, then exchanged through shared memory (one 256-thread CTA per row).
#pragma once
#include "topk_radix.cuh"

#if NSAJIT_TOPK_ALGORITHM == NSAJIT_TOPK_DENSE_REGISTERS
// Slices of at most 4 (NSAJIT_TOPK_DENSE_VECS * 256 - 1) = 9212 positions (with the head, at most
// 256 DV vectors), in dense_registers kernels (256 threads). The row is read once, coalesced
// (thread t loads vectors t + 256 j; bf16: 16-byte pairs of vectors, topk_dense_vector), its keys
// counted into hist0 (the 12-bit first digit) and the threshold's bin found.
// Then the keys change hands through shared memory: thread t takes the dv = ceil(nvec / 256)
// consecutive vectors [t dv, t dv + dv), so that index order is thread order: one block scan of
// per-thread counts places every output, every thread has work whatever the row's length, and
// padding costs nothing past dv. The threshold bin's keys (about 70 of 6K normal scores) are
// listed and ranked (one a thread), or refined by two 10-bit digits over the list (257-512 keys)
// or over the runs (a larger bin: a plateau); each
// thread records its keys > T and == T as bit masks and writes its selected positions in index
// order to staged slots, which go to `out` coalesced (fused: through the transform, the
// page-table reads batched). Exact whatever the distribution: nothing is sampled or truncated.

// Vector index of vector v's keys in the exchange: v with its low bits XORed by its group of 8,
// under the mask (dv & -dv) - 1, so that a quarter-warp's reads of runs of dv vectors (lanes dv
// vectors apart) fall in 8 distinct 16-byte bank groups for every dv <= 9 (odd dv: no swizzle;
// dv = 8 unswizzled would be 8-way). The stores, in load order, stay conflict-free.
NSAJIT_DEVICE int topk_dense_exchange_index(int v, int swizzle) { return v ^ ((v >> 3) & swizzle); }

// (m << 4) + n as one instruction (written as an OR, the compiler shifted and ORed apart).
NSAJIT_DEVICE uint32_t topk_mask_push4(uint32_t m, uint32_t n) {
  uint32_t r;
  asm("mad.lo.u32 %0, %1, 16, %2;" : "=r"(r) : "r"(m), "r"(n));
  return r;
}

// m + (n << 4 j) as one instruction (disjoint nibbles: the sum is the OR).
NSAJIT_DEVICE uint32_t topk_mask_add4(uint32_t m, uint32_t n, int j) {
  uint32_t r;
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(n), "r"(1u << (4 * j)), "r"(m));
  return r;
}

// Writes position0 + i for each set bit i of (lo, hi), in increasing i, to staged[at], staged[at + 1], ...,
// at most `limit` of them; returns the next slot.
NSAJIT_DEVICE int topk_stage_bits(uint32_t lo, uint32_t hi, int position0, int* staged, int at, int limit) {
  while (lo != 0u && at < limit) {
    const int i = __ffs(lo) - 1;
    lo &= lo - 1u;
    staged[at++] = position0 + i;
  }
  while (hi != 0u && at < limit) {
    const int i = __ffs(hi) - 1;
    hi &= hi - 1u;
    staged[at++] = position0 + 32 + i;
  }
  return at;
}

// 31 - clz(m), or 0xffffffff when m == 0 (PTX bfind: defined for 0, unlike 31 - __clz).
NSAJIT_DEVICE uint32_t topk_bfind(uint32_t m) {
  uint32_t r;
  asm("bfind.u32 %0, %1;" : "=r"(r) : "r"(m));
  return r;
}

// (1 << i) - 1, all ones for i >= 32 (PTX bmsk.clamp; in C++ the shift is undefined).
NSAJIT_DEVICE uint32_t topk_below(uint32_t i) {
  uint32_t r;
  asm("bmsk.clamp.b32 %0, 0, %1;" : "=r"(r) : "r"(i));
  return r;
}

// topk_stage_bits without a limit (keys above T never reach topk slots). lo's keys highest first, from
// the end of [at, at + popc(lo)): a warp-uniform loop (no divergent remainder), 5 instructions a key.
NSAJIT_DEVICE void topk_stage_all_bits(uint32_t lo, uint32_t hi, int position0, int* staged, int at) {
  const int n = __popc(lo);
  int* end = staged + at + n;
  const int trips = __reduce_max_sync(NSAJIT_TOPK_FULL, uint32_t(n));
#pragma unroll 1
  for (int k = 0; k < trips; k += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t i = topk_bfind(lo);
      if (lo != 0u) end[-1 - u] = position0 + int(i);
      lo &= topk_below(i);
    }
    end -= 4;
  }
  at += n;
  while (hi != 0u) {
    staged[at++] = position0 + 31 + __ffs(hi);
    hi &= hi - 1u;
  }
}

// f(j) for j = dv - 1 down to 0 (dv <= 9). Rows of more than 4096 positions (dv >= 5)
// run vectors 4..0 with no test (a uniform `j < dv` test a vector cost 3 instructions).
template <typename F>
NSAJIT_DEVICE void topk_dense_runs_down(int dv, F&& f) {
  constexpr int kSure = 5;
  static_assert(kSure <= NSAJIT_TOPK_DENSE_VECS, "vectors 0..4 are in the unrolled slots");
#pragma unroll
  for (int j = NSAJIT_TOPK_DENSE_VECS - 1; j >= kSure; --j)
    if (j < dv) f(j);
  if (dv >= kSure) {  // uniform
#pragma unroll
    for (int j = kSure - 1; j >= 0; --j) f(j);
  } else {
#pragma unroll
    for (int j = kSure - 1; j >= 0; --j)
      if (j < dv) f(j);
  }
}

// warp_inclusive_scan over the first `width` lanes, with the shuffle's own in-range predicate guarding
// each add: 2 instructions a step, where the lane test came out as a SEL before each add.
template <int width = 32>
NSAJIT_DEVICE int topk_dense_warp_scan(int v) {
#pragma unroll
  for (int o = 1; o < width; o <<= 1)
    asm("{\n\t.reg .pred p;\n\t.reg .b32 t;\n\tshfl.sync.up.b32 t|p, %0, %1, 0, -1;\n\t@p add.s32 %0, %0, t;\n\t}"
        : "+r"(v) : "r"(o));
  return v;
}

// topk_find_bin over hist0 (4096 bins, 256 threads: 16 a thread) with each chunk read as four
// 16-byte words: a third of the instructions of 16 rotated word reads. Lane L starts at word
// (L / 2) % 4 of its chunk, so that each 8-lane phase of the reads covers 8 distinct bank groups.
NSAJIT_DEVICE uint32_t topk_dense_find_bin0(const uint32_t* h, int k, TopkShared& sh, int& greater, int& count) {
  constexpr int per = NSAJIT_TOPK_BINS0 / NSAJIT_THREADS;
  static_assert(per == 16, "dense rows: 16 first-digit bins a thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int top = NSAJIT_TOPK_BINS0 - 1 - tid * per;  // the highest bin of this thread's chunk
  const u32x4* const chunk = reinterpret_cast<const u32x4*>(h + top - (per - 1));
  const int rotate = (lane >> 1) & 3;
  int local = 0;
#pragma unroll 2  // two words in flight (four, with the row's 36 keys held here, spilled)
  for (int i = 0; i < 4; ++i) {
    const u32x4 q = chunk[(i + rotate) & 3];
    local += int(q.x + q.y + q.z + q.w);
  }
  const int inclusive = topk_dense_warp_scan(local);
  if (lane == 31) sh.warp_sum[warp] = inclusive;
  __syncthreads();
  // Every warp scans the warp sums itself (no second barrier): keys in the warps' chunks above.
  const int w = lane < NSAJIT_TOPK_WARPS ? sh.warp_sum[lane] : 0;
  const int w_inclusive = topk_dense_warp_scan<NSAJIT_TOPK_WARPS>(w);  // only lanes < warps are read
  int above = __shfl_sync(NSAJIT_TOPK_FULL, w_inclusive - w, warp) + inclusive - local;
  if (above < k && above + local >= k) {  // exactly one thread
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

#if NSAJIT_SCORE_BF16
constexpr uint32_t kTopkDenseZeroKey = kTopkZeroKey;  // bf16 rows: topk_key's keys (topk_pair_keys)
#else
// fp32 rows' key in 4 instructions (topk_key: 5): topk_key's, but 0.0 keys 0x7fffffff. 0 - f is -f with
// both zeros +0.0 and every NaN 0x7fffffff (the canonical NaN of an fp32 operation: CUDA programming
// guide, floating-point standard): f < 0 keys g ^ 0x7fffffff, f > 0 keys g, NaN 0 -> 1.
constexpr uint32_t kTopkDenseZeroKey = 0x7fffffffu;
NSAJIT_DEVICE uint32_t topk_dense_key(float f) {
  const uint32_t g = __float_as_uint(0.0f - f);
  const uint32_t key = g ^ (~uint32_t(int(g) >> 31) & 0x7fffffffu);
  uint32_t r;
  asm("max.u32 %0, %1, 1;" : "=r"(r) : "r"(key));  // one VIMNMX: max() came out as a compare and a select
  return r;
}

// The vector at vec + 4 OFFSET scores when a < b (unsigned compare, else signed), loaded with the
// offset as an immediate (written as C++, the compiler computed a 64-bit address a slot); else
// the registers are left undefined, for the caller to fill.
template <int OFFSET, bool kUnsigned>
NSAJIT_DEVICE u32x4 topk_dense_load_if(const TopkScore* vec, int a, int b) {
  u32x4 v;
  if (kUnsigned)
    asm("{\n\t.reg .pred p;\n\tsetp.lt.u32 p, %5, %6;\n\t"
        "@p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4+%7];\n\t}"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(vec), "r"(a), "r"(b), "n"(4 * OFFSET * int(sizeof(TopkScore))));
  else
    asm("{\n\t.reg .pred p;\n\tsetp.lt.s32 p, %5, %6;\n\t"
        "@p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4+%7];\n\t}"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(vec), "r"(a), "r"(b), "n"(4 * OFFSET * int(sizeof(TopkScore))));
  return v;
}

// Slots 0..J of a thread's vectors (tid + 256 j) that are whole vectors of the slice, from vec0 =
// abase + 4 tid: slot 0 by one unsigned compare (vw0 <= 1), slot j >= 1 by tid < vw1 - 256 j.
template <int J>
NSAJIT_DEVICE void topk_dense_load_slots(u32x4 (&k)[NSAJIT_TOPK_DENSE_VECS], const TopkScore* vec0, int tid,
                                         int vw0, int vw1) {
  if constexpr (J == 0) {
    k[0] = topk_dense_load_if<0, true>(vec0, tid - vw0, vw1 - vw0);
  } else {
    topk_dense_load_slots<J - 1>(k, vec0, tid, vw0, vw1);
    k[J] = topk_dense_load_if<J * NSAJIT_THREADS, false>(vec0, tid, vw1 - J * NSAJIT_THREADS);
  }
}

// Keys of an edge vector v (never whole: element loads), 0 outside the slice.
NSAJIT_DEVICE u32x4 topk_dense_edge_keys(const TopkSlice& s, int v) {
  const int first = 4 * v - s.head;
  auto key = [&](int i) { return i >= 0 && i < s.n ? topk_dense_key(s.sp[i]) : 0u; };
  u32x4 k;
  k.x = key(first);
  k.y = key(first + 1);
  k.z = key(first + 2);
  k.w = key(first + 3);
  return k;
}
#endif

#if NSAJIT_SCORE_BF16
// bf16 rows load 16 bytes (8 scores, a pair of vectors: topk_load_pair) a lane, as pass 0 and the
// sweep do (topk_bf16.cuh): slots 2 i and 2 i + 1 of thread t hold the pair of vectors
// p0 + 2 (t + 256 i) + {0, 1} (p0 = topk_pair_phase: a pair starts at a 16-byte unit; in the
// opposite order when h = 1), the last slot the vector p0 + 512 (DV / 2) + t, wrapped to vector 0
// past 256 DV (p0 = 1: the half unit no pair holds), so that every vector of [0, 256 DV) is one
// thread's.
constexpr int kTopkDensePairs = NSAJIT_TOPK_DENSE_VECS / 2;
static_assert(NSAJIT_TOPK_DENSE_VECS % 2 == 1, "bf16 dense rows: pairs and one single slot (vector 0 at p0 = 1)");

NSAJIT_DEVICE int topk_dense_vector(int tid, int j, int p0, int h) {
  if (j < 2 * kTopkDensePairs) return p0 + 2 * (tid + NSAJIT_THREADS * (j >> 1)) + ((j & 1) ^ h);
  const int v = p0 + 2 * NSAJIT_THREADS * kTopkDensePairs + tid;
  return v < NSAJIT_THREADS * NSAJIT_TOPK_DENSE_VECS ? v : v - NSAJIT_THREADS * NSAJIT_TOPK_DENSE_VECS;
}

// h of topk_dense_vector: 1 in lanes 4-7 of each 8 when the exchange is unswizzled (odd dv), so that
// a quarter-warp's store of a pair slot covers the 8 bank groups (vectors 2 apart: 4 groups twice).
NSAJIT_DEVICE int topk_dense_pair_order(int nvec, int lane) {
  return (((nvec + NSAJIT_THREADS - 1) / NSAJIT_THREADS) & 1) & (lane >> 2);
}

// The smallest vector slot j holds in any thread: slots starting at or past the row hold padding.
NSAJIT_DEVICE int topk_dense_slot_first(int j, int p0) {
  if (j < 2 * kTopkDensePairs) return p0 + 2 * NSAJIT_THREADS * (j >> 1);
  return p0 != 0 ? 0 : 2 * NSAJIT_THREADS * kTopkDensePairs;
}

// One 8-byte vector of 4 bf16 scores, packed in .x and .y (keyed by topk_pair_keys).
NSAJIT_DEVICE u32x4 topk_dense_load_single(const TopkScore* ptr) {
  u32x4 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(ptr));
  v.z = v.w = 0u;
  return v;
}

// Counts the four keys of a vector of real scores in hist0 (keys of real scores are never 0).
NSAJIT_DEVICE void topk_dense_count4(uint32_t* hist0, const u32x4& k) {
  atomicAdd(&hist0[k.x >> NSAJIT_TOPK_SHIFT0], 1u);
  atomicAdd(&hist0[k.y >> NSAJIT_TOPK_SHIFT0], 1u);
  atomicAdd(&hist0[k.z >> NSAJIT_TOPK_SHIFT0], 1u);
  atomicAdd(&hist0[k.w >> NSAJIT_TOPK_SHIFT0], 1u);
}

// Vector v at an edge of the slice (or the half of a pair the slice only partly holds): element
// loads, key 0 outside the slice, the slice's keys counted in hist0.
NSAJIT_DEVICE u32x4 topk_dense_edge_keys(const TopkSlice& s, int v, uint32_t* hist0) {
  const u32x4 k = topk_global_keys(s, v);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t key = topk_lane(k, e);
    if (key != 0u) atomicAdd(&hist0[key >> NSAJIT_TOPK_SHIFT0], 1u);
  }
  return k;
}
#endif

// Not inlined: its registers are allocated apart from the rest of the kernel's (inlined, the
// whole kernel spilled at 64 registers); scalar arguments, so that nothing goes through the stack.
__device__ __noinline__ void topk_dense_row(const TopkScore* sp, const TopkScore* abase, int head, int n, int nvec,
                                            const int* table_row, int limit, int offset,
                                            int* out, uint32_t* hist0, int* staged, TopkShared& sh) {
  constexpr int DV = NSAJIT_TOPK_DENSE_VECS;
  constexpr bool kApply = NSAJIT_FUSED != 0 && NSAJIT_SORTED == 0;  // the caller's `apply`, known here at compile time
  static_assert(4 * DV <= 64, "a thread's keys are one 64-bit mask");
  static_assert((NSAJIT_THREADS * DV) % 8 == 0, "the exchange's swizzled groups of 8 vectors lie inside it");
  static_assert(NSAJIT_THREADS == 256, "dense rows: 256 threads (NSAJIT_TOPK_DENSE_SMEM_VECS)");
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
#if NSAJIT_SCORE_BF16
  const int p0 = topk_pair_phase(s), h = topk_dense_pair_order(s.nvec, lane);
  // Whole pairs (both vectors whole) and the single slot's whole vector: all loads in flight
  // before the first key; a pair stays packed in its first slot until keyed.
#pragma unroll
  for (int j = 0; j < DV; ++j) k[j].x = k[j].y = k[j].z = k[j].w = 0u;
#pragma unroll
  for (int i = 0; i < kTopkDensePairs; ++i) {
    const int v = topk_dense_vector(tid, 2 * i, p0, 0);
    if (v >= vw0 && v + 1 < vw1) k[2 * i] = topk_load_pair(s.abase + 4 * v);
  }
  {
    const int v = topk_dense_vector(tid, DV - 1, p0, 0);
    if (v >= vw0 && v < vw1) k[DV - 1] = topk_dense_load_single(s.abase + 4 * v);
  }
#else
  // v in [vw0, vw1) as one compare a slot (two, kept as bits of a register, cost ~40 a thread); vw0 <= 1.
  auto whole = [&](int j) {
    return j == 0 ? uint32_t(tid - vw0) < uint32_t(vw1 - vw0) : tid < vw1 - j * NSAJIT_THREADS;
  };
  // Whole vectors: all loads in flight before the first key, from one address (a slot's offset is an
  // immediate); the other slots get their keys below.
  topk_dense_load_slots<DV - 1>(k, s.abase + 4 * tid, tid, vw0, vw1);
#endif
  // While the loads are in flight: hist0 (16-byte stores; the plan aligns it) and the list's fill.
  static_assert(NSAJIT_TOPK_BINS0 % (4 * NSAJIT_THREADS) == 0, "hist0: whole 16-byte words a thread");
#pragma unroll 1  // a counted loop (ptxas made the strided one a generic remainder loop); unrolled, prefill spilled
  for (int i = 0; i < NSAJIT_TOPK_BINS0 / (4 * NSAJIT_THREADS); ++i)
    reinterpret_cast<u32x4*>(hist0)[tid + i * NSAJIT_THREADS] = u32x4{0u, 0u, 0u, 0u};
  if (tid == 0) {
    sh.cand_local = 0;
    sh.zero_keys = 0u;
    sh.unique_key = 0xffffffffu;  // the rank's minimum (below)
    sh.cand_reserved = 0;         // dense rows: the ranked keys with exactly k - 1 listed above them (below)
  }
  __syncthreads();
#if NSAJIT_SCORE_BF16
#pragma unroll
  for (int i = 0; i < kTopkDensePairs; ++i) {
    const int v = topk_dense_vector(tid, 2 * i, p0, 0);
    if (v >= vw0 && v + 1 < vw1) {
      const u32x4 raw = k[2 * i];
      const uint32_t a = h ? raw.z : raw.x, b = h ? raw.w : raw.y, c = h ? raw.x : raw.z, d = h ? raw.y : raw.w;
      topk_pair_keys(a, k[2 * i].x, k[2 * i].y);
      topk_pair_keys(b, k[2 * i].z, k[2 * i].w);
      topk_pair_keys(c, k[2 * i + 1].x, k[2 * i + 1].y);
      topk_pair_keys(d, k[2 * i + 1].z, k[2 * i + 1].w);
      topk_dense_count4(hist0, k[2 * i]);
      topk_dense_count4(hist0, k[2 * i + 1]);
    } else {  // a pair at an edge of the slice, or past it
      if (v + h < s.nvec) k[2 * i] = topk_dense_edge_keys(s, v + h, hist0);
      if (v + 1 - h < s.nvec) k[2 * i + 1] = topk_dense_edge_keys(s, v + 1 - h, hist0);
    }
  }
  {
    const int v = topk_dense_vector(tid, DV - 1, p0, 0);
    if (v >= vw0 && v < vw1) {
      const u32x4 raw = k[DV - 1];
      topk_pair_keys(raw.x, k[DV - 1].x, k[DV - 1].y);
      topk_pair_keys(raw.y, k[DV - 1].z, k[DV - 1].w);
      topk_dense_count4(hist0, k[DV - 1]);
    } else if (v < s.nvec) {
      k[DV - 1] = topk_dense_edge_keys(s, v, hist0);
    }
  }
#else
#pragma unroll
  for (int j = 0; j < DV; ++j) {
    const int v = tid + j * NSAJIT_THREADS;
    if (whole(j)) {  // keys of real scores are never 0
      k[j].x = topk_dense_key(__uint_as_float(k[j].x));
      k[j].y = topk_dense_key(__uint_as_float(k[j].y));
      k[j].z = topk_dense_key(__uint_as_float(k[j].z));
      k[j].w = topk_dense_key(__uint_as_float(k[j].w));
      atomicAdd(&hist0[k[j].x >> NSAJIT_TOPK_SHIFT0], 1u);
      atomicAdd(&hist0[k[j].y >> NSAJIT_TOPK_SHIFT0], 1u);
      atomicAdd(&hist0[k[j].z >> NSAJIT_TOPK_SHIFT0], 1u);
      atomicAdd(&hist0[k[j].w >> NSAJIT_TOPK_SHIFT0], 1u);
    } else if (v < s.nvec) {  // an edge vector: element loads, key 0 outside the slice
      k[j] = topk_dense_edge_keys(s, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t key = topk_lane(k[j], e);
        if (key != 0u) atomicAdd(&hist0[key >> NSAJIT_TOPK_SHIFT0], 1u);
      }
    } else {  // past the slice: padding
      k[j].x = k[j].y = k[j].z = k[j].w = 0u;
    }
  }
#endif
  __syncthreads();
  TopkRadix x{0u, 0u, NSAJIT_TOPK, 0, 0};
  {
    int greater, count;
    const uint32_t d = topk_dense_find_bin0(hist0, x.k, sh, greater, count);
    topk_radix_step(x, d, 32 - NSAJIT_TOPK_SHIFT0, greater, count);
  }
  if (x.prefix == (kTopkDenseZeroKey & x.mask)) {  // uniform: the threshold in 0.0's bin (a ReLU row's plateau)
    // The keys other than 0.0's as a nibble a slot (their compares pack with one P2R; a count a key
    // was a compare, an add and a select), 0.0's keys the slots' 4 DV keys less their popcount
    // (padding keys 0 count as others). Every slot: skipping j >= dv cost a uniform branch a slot.
    uint32_t other_lo = 0u, other_hi = 0u;
#pragma unroll
    for (int j = DV - 1; j >= 0; --j) {
      const uint32_t n = uint32_t(k[j].x != kTopkDenseZeroKey) | uint32_t(k[j].y != kTopkDenseZeroKey) << 1 |
                         uint32_t(k[j].z != kTopkDenseZeroKey) << 2 | uint32_t(k[j].w != kTopkDenseZeroKey) << 3;
      if (j >= 8)
        other_hi = topk_mask_push4(other_hi, n);
      else
        other_lo = topk_mask_push4(other_lo, n);
    }
    const uint32_t zeros = uint32_t(4 * DV - __popc(other_lo) - __popc(other_hi));
    topk_flush_zeros(zeros, sh);
    __syncthreads();
    if (uint32_t(x.count) == sh.zero_keys) {  // the bin holds only 0.0: T = 0.0 (topk_resolve_zero_plateau)
      x.prefix = kTopkDenseZeroKey;
      x.mask = 0xffffffffu;
      x.bits = 32;
    }
  }

  // The keys of the threshold's bin (about 70 of 6K normal scores), listed after the exchange's
  // area when at most 512, then ranked one a thread when at most 256; a larger bin (a plateau) is
  // refined by two 10-bit digits counted over the runs.
  extern __shared__ u32x4 topk_dynamic[];
  constexpr int kShortList = 4 * (NSAJIT_TOPK_DENSE_SMEM_VECS - NSAJIT_THREADS * DV);
  constexpr int kTopkDenseRankBlock = 16;  // the rank reads the list in blocks of 16 keys (padded)
  static_assert(NSAJIT_THREADS + kTopkDenseRankBlock <= kShortList, "a ranked list and its padding fit the list's room");
#if !NSAJIT_SCORE_BF16
  static_assert(2 * NSAJIT_THREADS <= kShortList, "a ranked list's positions follow its first NSAJIT_THREADS words");
#endif
  // Not listed: a plateau of 0.0 (resolved already) or bin 0, which holds only NaN's key 1 (below).
  const int n_listed = x.bits < 32 && x.prefix != 0u && x.count <= kShortList ? x.count : 0;
  uint32_t* const listed = reinterpret_cast<uint32_t*>(topk_dynamic + NSAJIT_THREADS * DV);
  // The exchange, from word 0 of dynamic shared memory (hist0's search ended with a barrier; the
  // plan gives it room for DV vectors a thread, then the short list): stored in load order, read
  // back in runs. Vectors [nvec, 256 dv) get their keys 0 too, so that no run's read is guarded.
  // Its barrier also publishes the list. With each slot's store, its keys in T's bin as bits
  // 4 j + e of (hit_lo, hit_hi), copied back from the exchange below: a compare a key, where an
  // atomic listing cost ~6 a key and ~16 more a warp-slot with a hit. The compares record misses,
  // a nibble a slot (their predicates pack with one P2R; hits came out as inverted compares and SELs).
  const int dv = (s.nvec + NSAJIT_THREADS - 1) / NSAJIT_THREADS;  // uniform, <= DV
  const int swizzle = (dv & -dv) - 1;  // topk_dense_exchange_index
  const uint32_t bin = x.prefix >> NSAJIT_TOPK_SHIFT0;  // when listing: not 0, so padding's key 0 never matches
  // Slot j's exchange index without its per-slot swizzle: the swizzle (< 8) reads bits 3-5 of v, which the
  // slot's multiple of 256 (fp32) or 512 (bf16 pairs) leaves alone, so index(v + 256 m) = index(v) + 256 m.
#if NSAJIT_SCORE_BF16
  // Pair slot j: index(p0 + 2 tid + ((j & 1) ^ h)) + 512 (j >> 1); the single slot as before.
  const int xpair0 = topk_dense_exchange_index(p0 + 2 * tid + h, swizzle);
  const int xpair1 = topk_dense_exchange_index(p0 + 2 * tid + (h ^ 1), swizzle);
  auto xindex = [&](int j) {
    return j < 2 * kTopkDensePairs ? ((j & 1) ? xpair1 : xpair0) + 2 * NSAJIT_THREADS * (j >> 1)
                                   : topk_dense_exchange_index(topk_dense_vector(tid, j, p0, h), swizzle);
  };
#else
  const int xbase = tid ^ ((tid >> 3) & swizzle);  // index(tid + 256 j) = xbase + 256 j
  auto xindex = [&](int j) { return xbase + j * NSAJIT_THREADS; };
#endif
  uint32_t miss_lo = 0u, miss_hi = 0u;
#if NSAJIT_SCORE_BF16
  uint32_t valid_lo = 0u, valid_hi = 0u;
#endif
#pragma unroll
  for (int j = 0; j < DV; ++j) {
#if NSAJIT_SCORE_BF16
    // Uniform: a slot none of whose vectors is below 256 dv is skipped; the others are stored and
    // compared whole, their lanes past 256 dv included: those keys are the zero padding (never a
    // hit), and the exchange's 256 DV vectors hold nothing else live there (hist0 is dead).
    if (topk_dense_slot_first(j, p0) >= NSAJIT_THREADS * dv) continue;
    if (j >= 8)
      valid_hi |= 0xfu << (4 * j - 32);
    else
      valid_lo |= 0xfu << (4 * j);
#else
    if (j >= dv) break;  // uniform: v < 256 dv
#endif
    topk_dynamic[xindex(j)] = k[j];
    if (n_listed > 0) {  // uniform
      const uint32_t b0 = bin << NSAJIT_TOPK_SHIFT0, w = 1u << NSAJIT_TOPK_SHIFT0;
      const uint32_t n = uint32_t((k[j].x ^ b0) >= w) | uint32_t((k[j].y ^ b0) >= w) << 1 |
                         uint32_t((k[j].z ^ b0) >= w) << 2 | uint32_t((k[j].w ^ b0) >= w) << 3;
      if (j >= 8)
        miss_hi = topk_mask_add4(miss_hi, n, j - 8);
      else
        miss_lo = topk_mask_add4(miss_lo, n, j);
    }
  }
#if !NSAJIT_SCORE_BF16
  static_assert(DV <= 9, "valid_hi holds one vector's nibble");
  const uint32_t valid_lo = dv >= 8 ? 0xffffffffu : (1u << (4 * dv)) - 1u, valid_hi = dv > 8 ? 0xfu : 0u;
#endif
  const uint32_t hit_lo = valid_lo & ~miss_lo, hit_hi = valid_hi & ~miss_hi;
  if (n_listed > 0) {  // uniform: one atomic a warp reserves its lanes' places (a warp scan of their counts)
    const int c = __popc(hit_lo) + __popc(hit_hi);
    const int inclusive = topk_dense_warp_scan(c);
    int at = 0;
    if (lane == 31 && inclusive != 0) at = atomicAdd(&sh.cand_local, inclusive);
    at = __shfl_sync(NSAJIT_TOPK_FULL, at, 31) + inclusive - c;
    // Each hit's key read back from the thread's own exchange stores (no barrier needed). In bounds: the
    // hits are the x.count keys of T's bin, listed only when x.count <= kShortList.
    const uint32_t* const words = reinterpret_cast<const uint32_t*>(topk_dynamic);
#if !NSAJIT_SCORE_BF16
    // A ranked list (fp32) also holds each key's position, after the list's first 256 words: the word
    // 4 xbase + 1024 (i >> 2) + (i & 3) is position 4 (tid + 256 (i >> 2)) + (i & 3) - head.
    const bool with_positions = n_listed <= NSAJIT_THREADS;  // uniform
    const int position_of_word = 4 * (tid - xbase) - s.head;
#endif
    auto copy = [&](uint32_t bits, int i0) {
      while (bits != 0u) {
        const int i = i0 + __ffs(bits) - 1;
        bits &= bits - 1u;
#if NSAJIT_SCORE_BF16
        const int v = topk_dense_vector(tid, i >> 2, p0, h);
        listed[at++] = words[4 * topk_dense_exchange_index(v, swizzle) + (i & 3)];
#else
        const int w = 4 * xbase + i + 1020 * (i >> 2);  // 4 xindex(i >> 2) + (i & 3)
        listed[at] = words[w];
        if (with_positions) listed[NSAJIT_THREADS + at] = uint32_t(w + position_of_word);
        ++at;
#endif
      }
    };
    copy(hit_lo, 0);
    copy(hit_hi, 32);
    // The rank's list padded to whole blocks of 16 keys with the bin's least key, which no listed key
    // counts as above it (mine - pad is in [0, 2^20)): the rank's loop has no remainder. A ranked list
    // holds at most 256 keys: the padding stays in the list's first 256 words (fp32: before the positions).
    if (n_listed <= NSAJIT_THREADS && tid < (-n_listed & (kTopkDenseRankBlock - 1)))
      listed[n_listed + tid] = bin << NSAJIT_TOPK_SHIFT0;
  }
  __syncthreads();
  const int v0 = tid * dv;
  // Vector j < dv of this thread's run (keys 0 past the slice). Read from shared memory in each
  // pass: the registers stay free for the rest (holding the 36 keys through the passes spilled).
  auto run = [&](int j) { return topk_dynamic[topk_dense_exchange_index(v0 + j, swizzle)]; };

  if (x.prefix == 0u) {  // uniform: T in bin 0, which holds only NaN's key 1 (padding's 0 is never counted)
    x.prefix = 1u;
    x.mask = 0xffffffffu;
    x.bits = 32;
  }
  bool unique = false;     // uniform: T ranked, with no copy in the row (fp32)
  int t_position = -1;     // unique: T's position, in the thread that listed it at index tid
  if (x.bits < 32 && n_listed > 0 && n_listed <= NSAJIT_THREADS) {
    // One entry a thread, counted against all (16-byte broadcast reads): T is the smallest entry
    // with fewer than k entries above it. The listed keys share their first digit, so o > mine is
    // the sign of mine - o (one subtract and one shift-add an entry). One barrier, where two
    // 10-bit digits take four; the copies of T to take follow from the block scan below.
    if (warp * 32 < n_listed) {  // uniform in the warp
      uint32_t candidate = 0xffffffffu;
      bool last = false;  // exactly k - 1 listed keys above mine
      if (tid < n_listed) {
        const uint32_t mine = listed[tid];
        const u32x4* const quads = reinterpret_cast<const u32x4*>(listed);
        uint32_t greater = 0u;
        // The padded list, a block of 16 keys a trip (n_listed >= 1: at least one).
        const int end = (n_listed + kTopkDenseRankBlock - 1) / kTopkDenseRankBlock * (kTopkDenseRankBlock / 4);
        int i = 0;
#pragma unroll 1
        do {
#pragma unroll
          for (int u = 0; u < kTopkDenseRankBlock / 4; ++u) {
            const u32x4 o = quads[i + u];
            greater += ((mine - o.x) >> 31) + ((mine - o.y) >> 31) + ((mine - o.z) >> 31) + ((mine - o.w) >> 31);
          }
          i += kTopkDenseRankBlock / 4;
        } while (i != end);
        if (int(greater) < x.k) candidate = mine;
        last = int(greater) == x.k - 1;
      }
      candidate = __reduce_min_sync(NSAJIT_TOPK_FULL, candidate);
      if (lane == 0 && candidate != 0xffffffffu) atomicMin(&sh.unique_key, candidate);
#if !NSAJIT_SCORE_BF16
      const int lasts = __popc(__ballot_sync(NSAJIT_TOPK_FULL, last));
      if (lane == 0 && lasts != 0) atomicAdd(&sh.cand_reserved, lasts);
#endif
    }
    __syncthreads();
    x.prefix = sh.unique_key;
#if !NSAJIT_SCORE_BF16
    // Keys with exactly k - 1 listed above them are T's copies when T has k - 1 above it (keys above T
    // have fewer, keys below it k or more), else none: one such key is T with no copy, the row's
    // topk-th key alone (topk - 1 keys above it), placed at the last slot by its listed position.
    unique = sh.cand_reserved == 1;
    // Read before the block scan's barrier: a plan that keeps the slice puts hist0 and the staged slots
    // higher, where the staged slots may cover the list.
    if (unique && tid < n_listed && listed[tid] == x.prefix) t_position = int(listed[NSAJIT_THREADS + tid]);
#endif
    x.mask = 0xffffffffu;
    x.bits = 32;
  }
  if (x.bits < 32) {  // uniform: the digits' histograms, not zeroed at the kernel's start on this path
    for (int i = tid; i < 2 << NSAJIT_TOPK_REFINE_BITS; i += NSAJIT_THREADS) (&sh.refine_hist[0][0])[i] = 0u;
    __syncthreads();
  }
  for (int pass = 0; x.bits < 32; ++pass) {  // two 10-bit digits, over the list or the runs
    x.mask = ~(0xffffffffu >> x.bits);  // as it is (the top `bits` bits): not held in a register through the exchange
    const TopkRefineDigit digit = topk_refine_digit(x, sh, pass);
    if (n_listed > 0) {
      for (int i = tid; i < n_listed; i += NSAJIT_THREADS) topk_refine_count(digit, x, listed[i]);
    } else {
#pragma unroll 1
      for (int j = 0; j < dv; ++j) {
        const u32x4 k4 = run(j);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (topk_lane(k4, e) != 0u) topk_refine_count(digit, x, topk_lane(k4, e));  // 0: padding
      }
    }
    topk_refine_finish(digit, x, sh);
  }
  const uint32_t threshold = x.prefix;  // the topk-th largest key (>= 1)

  // Bit 4 j + e of the masks: the thread's key of vector v0 + j, element e (padding keys are 0,
  // below any threshold). Packed counts (greater in the low 16 bits, equal in the high: a row's
  // totals stay below 2^16), one block-wide exclusive scan.
  // Descending j, each vector's four compares a nibble pushed in at the bottom (a P2R and an IMAD a
  // mask, where bits set one by one cost a SEL and half a LOP3 a key); equal from >=, as its
  // compares then pack the same way (== came out as ISETP.NE and SELs).
  uint32_t greater_lo = 0u, greater_hi = 0u, equal_lo = 0u, equal_hi = 0u;
  uint32_t c;
  if (unique) {  // uniform: the keys > T only (T's one key is placed from the list below)
    topk_dense_runs_down(dv, [&](int j) {
      const u32x4 k4 = run(j);
      const uint32_t g = uint32_t(k4.x > threshold) | uint32_t(k4.y > threshold) << 1 |
                         uint32_t(k4.z > threshold) << 2 | uint32_t(k4.w > threshold) << 3;
      if (j >= 8)
        greater_hi = topk_mask_push4(greater_hi, g);
      else
        greater_lo = topk_mask_push4(greater_lo, g);
    });
    c = uint32_t(__popc(greater_lo) + __popc(greater_hi));
  } else {
    topk_dense_runs_down(dv, [&](int j) {
      const u32x4 k4 = run(j);
      const uint32_t g = uint32_t(k4.x > threshold) | uint32_t(k4.y > threshold) << 1 |
                         uint32_t(k4.z > threshold) << 2 | uint32_t(k4.w > threshold) << 3;
      const uint32_t q = uint32_t(k4.x >= threshold) | uint32_t(k4.y >= threshold) << 1 |
                         uint32_t(k4.z >= threshold) << 2 | uint32_t(k4.w >= threshold) << 3;
      if (j >= 8) {
        greater_hi = topk_mask_push4(greater_hi, g);
        equal_hi = topk_mask_push4(equal_hi, q);
      } else {
        greater_lo = topk_mask_push4(greater_lo, g);
        equal_lo = topk_mask_push4(equal_lo, q);
      }
    });
    equal_lo &= ~greater_lo;
    equal_hi &= ~greater_hi;
    c = uint32_t(__popc(greater_lo) + __popc(greater_hi)) | (uint32_t(__popc(equal_lo) + __popc(equal_hi)) << 16);
  }
  const uint32_t inclusive = uint32_t(topk_dense_warp_scan(int(c)));
  if (lane == 31) sh.warp_sum[warp] = int(inclusive);  // free: the bin search read it before its last barrier
  __syncthreads();
  const uint32_t warp_total = lane < NSAJIT_TOPK_WARPS ? uint32_t(sh.warp_sum[lane]) : 0u;  // warps <= 32 lanes
  const uint32_t earlier_warp = lane < warp ? warp_total : 0u;
  const uint32_t before = inclusive - c + __reduce_add_sync(NSAJIT_TOPK_FULL, earlier_warp);
  // The row's keys > T (the rank above leaves the copies of T to take to this count).
  const int total_greater = int(__reduce_add_sync(NSAJIT_TOPK_FULL, warp_total) & 0xffffu);
  const int take_equal = NSAJIT_TOPK - total_greater;
  // The thread's selected positions in index order: keys > T at [0, total_greater), then the
  // first take_equal keys == T after them.
  const int position0 = 4 * v0 - s.head;
  topk_stage_all_bits(greater_lo, greater_hi, position0, staged, int(before & 0xffffu));
  if (unique) {  // uniform: take_equal = 1, total_greater = topk - 1; T's one listed key gives its position
    if (t_position >= 0) staged[NSAJIT_TOPK - 1] = t_position;
  } else {
    const int q = int(before >> 16);
    if (q < take_equal)
      topk_stage_bits(equal_lo, equal_hi, position0, staged + total_greater, q, take_equal);
  }
  __syncthreads();
  // `out`, consecutive threads on consecutive slots, up to 8 page-table reads in flight (fused).
  // Positions first, then the transform, then the stores: no branch between the reads. The batch
  // offsets are constants, so that the bounds tests fold where a batch is whole.
  constexpr int kBatch = 8;
#pragma unroll
  for (int i0 = 0; i0 < NSAJIT_TOPK; i0 += kBatch * NSAJIT_THREADS) {
    int value[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * NSAJIT_THREADS + tid;
      value[u] = i0 + (u + 1) * NSAJIT_THREADS <= NSAJIT_TOPK || i < NSAJIT_TOPK ? staged[i] : -1;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) value[u] = topk_emit(t, value[u], kApply);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * NSAJIT_THREADS + tid;
      if (i0 + (u + 1) * NSAJIT_THREADS <= NSAJIT_TOPK || i < NSAJIT_TOPK) out[i] = value[u];
    }
  }
}
#endif
