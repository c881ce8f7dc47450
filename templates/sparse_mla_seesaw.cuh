// sparse_mla_seesaw.cuh — sparse MLA attention (§3) on Hopper wgmma (sm_90a), bf16 KV, the
// "seesaw" schedule (spec tile.schedule = seesaw; docs/design/sparse_mla.md): two math warpgroups
// each compute S = Q K^T of every other KV tile, so the tensor pipe has two issuers in every phase
// (sparse_mla_wgmma.cuh's single schedule leaves WG1 idle while WG0 runs QK and the softmax).
// Same contract and outputs as the other sparse MLA kernels, split-KV included (a split takes whole
// pairs; its partials have the wgmma kernel's format): bf16 P (no precise), 64 heads per CTA, topk
// a multiple of 128.
//
// CTA = one query row x 64 heads (x one split's pairs), 384 threads, 1 CTA per SM; KV tiles of 64
// tokens go in pairs: tile 2i in buffer 0, tile 2i + 1 in buffer 1 (an odd tile count's last pair
// has an all-invalid second tile, zero-filled). Halves of a buffer b: Lb = subtiles 0-3 (dims 0-255: K, V-left),
// Hb = subtiles 4-8 (dims 256-575: K, V-right, rope). m: the running max (base 2), the same in
// both math warpgroups; l0 / l1: the row sums of WG0's / WG1's tiles, added in the epilogue.
//   WG0 (warps 0-3, REG_MATH): S0 = Q K0^T (L0 first), mask; mA = max(m, rowmax S0) -> max[0];
//        P0 = 2^(S0 - mA), O_L = 2^(m - mA) O_L + P0 V0_L (RS), issued without waiting for WG1's
//        tile; then mB = max[1] (the pair's max from WG1): O_L, l0 times 2^(mA - mB) and P0
//        recomputed against mB when WG1's tile raised it; P0 -> H0's subtile 8 for WG1;
//        O_L += P1 V1_L (SS, P1 from its own buffer). O_L = O[:, 0:256].
//   WG1 (warps 4-7, REG_MATH): S1 = Q K1^T (H1 first), mask; mB = max(max[0], rowmax S1) ->
//        max[1]; P1 = 2^(S1 - mB) -> the P1 buffer for WG0; O_R = 2^(m - mB) O_R + P1 V1_R (RS)
//        + P0 V0_R (SS). O_R = O[:, 256:512].
//   WG2 (warps 8-11, REG_PRODUCER): q, then per pair the four halves by 16-byte cp.async with
//        the L2::256B hint (zero-filled invalid rows, validity flags), each arriving on its full
//        barrier when it lands (cp.async.mbarrier.arrive.noinc), in the order they are freed:
//        L0, H1, H0, L1. No separate L2 prefetch: the 256-byte fills serve the row's next chunks.
// So WG0's softmax and RS PV overlap WG1's QK, and WG1's softmax WG0's RS PV. P0 goes over H0's
// rope subtile (only QK0 read it; V0_R in H0 is read as late as P0), P1 into its own 8 KB buffer,
// so that H1 is freed by WG1's RS PV alone, well before the pair ends: both QKs' first halves (L0,
// H1) are then in shared memory when the pair starts, while the late halves (H0, L1) reload.
//
// Barrier protocol (pair i: each mbarrier completes phase i once, waited with parity i & 1):
//   FULL_L0  mbarrier 256: producer cp.async arrive.noinc (q + L0 landed) + arrive (valid[0]
//            stored); WG0 waits before QK0, then reads valid[0].
//   FULL_H0  mbarrier 128: producer arrive.noinc (H0 landed); WG0 waits before QK0's dims
//            256-575, WG1 (already complete) before its SS PV reads V0_R.
//   FULL_H1  mbarrier 256: producer arrive.noinc (q + H1 landed) + arrive (valid[1] stored); WG1
//            waits before QK1, then reads valid[1].
//   FULL_L1  mbarrier 128: producer arrive.noinc (L1 landed); WG1 waits before QK1's dims 0-255,
//            WG0 (already complete) before its SS PV reads V1_L.
//   EMPTY_L0 mbarrier 128: WG0 once its RS PV (V0_L) completed, after its QK0 and valid[0] reads;
//            the producer waits before refilling L0 and rewriting valid[0].
//   EMPTY_H0 mbarrier 128: WG1 once its SS PV (V0_R, P0) completed; WG0's QK0 and P0 stores come
//            before it through P0_READY. The producer waits before refilling H0.
//   EMPTY_H1 mbarrier 128: WG1 once its RS PV (V1_R) completed (wait_group 1 after issuing its
//            SS PV), after its QK1 and valid[1] reads; the producer waits before refilling H1
//            and rewriting valid[1].
//   EMPTY_L1 mbarrier 128: WG0 once its SS PV (V1_L, the P1 buffer) completed; WG1's QK1 comes
//            before it through P1_READY. The producer waits before refilling L1. The P1 buffer
//            has no barrier of its own: WG1 rewrites it after waiting for FULL_L1 of the next
//            pair, which the producer arms only after this release.
//   MAX0     named 256: WG0 arrives after storing max[0]; WG1 syncs, then reads max[0].
//   MAX1     named 256: WG1 arrives after storing max[1]; WG0 syncs, then reads max[1].
//   P0_READY named 256: WG0 arrives after P0's stmatrix + proxy fence; WG1 syncs before its SS PV.
//   P1_READY named 256: WG1 arrives after P1's stmatrix + proxy fence; WG0 syncs before its SS PV.
//   SUM0     named 256: WG0 arrives after storing its row sums to sum[0]; WG1 syncs, then reads them.
//   SUM1     named 256: WG1 arrives after storing sum[1]; WG0 syncs, then reads them. (One barrier
//            synced by both would be reached at two instructions once ptxas duplicates the
//            epilogue per role: undefined for bar.sync, and synccheck reports it.)
//   STAGED_O named 128, ids 13 / 14 (store_o_staged): a warpgroup's O stmatrix + proxy fence ->
//            its bulk copies out of the Q tile.
// Reuse of the named barriers and of max[]: WG0 arrives on MAX0 / P0_READY of pair i + 1 only past
// its MAX1 sync of pair i + 1 or i, which needs WG1's MAX1 arrival, made after WG1's MAX0 sync and
// its P0_READY sync of the pair before; WG1 arrives on MAX1 / P1_READY of pair i + 1 only past its
// MAX0 sync of pair i + 1, which needs WG0's MAX0 arrival of pair i + 1, made after WG0's MAX1 and
// P1_READY syncs of pair i. So neither warpgroup arrives twice on a barrier before the other synced
// on it, and max[W] is rewritten only after the other read it. An mbarrier never runs a phase
// ahead of a waiter: a refill of pair i + 1 waits for the consumers' release of pair i, which
// follows their wait for pair i's full phase. No cycle: every wait of pair i depends only on
// producer issues of pair i, which depend only on releases of pair i - 1.
#pragma once
#include "sparse_mla_wgmma_common.cuh"

namespace mla {

static_assert(NSAJIT_KV_FP8 == 0 && NSAJIT_PRECISE == 0, "seesaw: bf16 KV, bf16 P");
// tile.combine cluster: a row and head group's two splits are one 2-CTA cluster (x = unit * 2 +
// rank); CTA rank r keeps O[:, 256 r : 256 r + 256] and receives the peer's part of it (below).
constexpr bool CLUSTER = NSAJIT_CLUSTER_COMBINE != 0;
static_assert(NSAJIT_THREADS == 384 && TILE_TOKENS == 64 && HEADS_PER_CTA == 64, "seesaw: 384 threads, 64-token tiles, 64 heads");
static_assert(H_Q % HEADS_PER_CTA == 0 && TOPK % (2 * TILE_TOKENS) == 0, "seesaw: H_Q / TOPK (tiles in pairs)");

constexpr uint32_t OFF_Q = 0;
constexpr uint32_t OFF_KV = TILE;                // two tiles
constexpr uint32_t OFF_P1 = 3 * TILE;            // WG1's P [64 heads][64 tokens] bf16, swizzled
constexpr uint32_t OFF_VALID = OFF_P1 + SUB;     // [2][64] int
constexpr uint32_t OFF_MAX = OFF_VALID + 512;    // [2][64] float: max[0] WG0's, max[1] the pair's
constexpr uint32_t OFF_SUM = OFF_MAX + 512;      // [2][64] float: row sums l0, l1 (epilogue)
constexpr uint32_t OFF_BAR = OFF_SUM + 512;      // full[2][2], empty[2][2] (buffer, half)
constexpr uint32_t LAYOUT_BYTES = OFF_BAR + 64;
constexpr uint32_t SMEM_BYTES = LAYOUT_BYTES + 1024;  // slack to align the base to 1024 bytes
static_assert(SMEM_BYTES == sparse_mla_seesaw_smem_bytes(), "the layout must match the plan (kernel_params.h)");
static_assert(SMEM_BYTES == NSAJIT_DYNAMIC_SMEM, "host and kernel disagree on shared memory size");

// setmaxnreg: 128 x (P + 2 M) = 384 x 168, the launch's allocation.
constexpr int REG_PRODUCER = 72;
constexpr int REG_MATH = 216;
static_assert(REG_PRODUCER + 2 * REG_MATH == 3 * REG_LAUNCH, "setmaxnreg budgets must balance");

enum : int { HALF_L = 0, HALF_H = 1 };
enum : int { BAR_MAX0 = 1, BAR_MAX1 = 2, BAR_P0_READY = 3, BAR_P1_READY = 4, BAR_SUM0 = 5, BAR_SUM1 = 6 };

// mbarrier addresses: full[b][h] at OFF_BAR + 16 b + 8 h, empty[b][h] 32 bytes on.
NSAJIT_DEVICE uint32_t bar_full(uint32_t s_base, int b, int h) { return s_base + OFF_BAR + 16u * b + 8u * h; }
NSAJIT_DEVICE uint32_t bar_empty(uint32_t s_base, int b, int h) { return s_base + OFF_BAR + 32u + 16u * b + 8u * h; }

// Distributed shared memory of the 2-CTA cluster (tile.combine cluster).
NSAJIT_DEVICE uint32_t peer_address(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
// Every non-exited thread of both CTAs (the producers have exited): writes before it, on either
// CTA, are visible after it.
NSAJIT_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

// cp.async with an L2 prefetch-size hint: a miss fills the whole 256-byte block (FlashMLA's gather;
// faster than 128-byte fills behind a line prefetch a pair ahead, docs/notes/sparse_mla.md).
NSAJIT_DEVICE void cp_async_16_zfill_256(uint32_t saddr, const void* gmem, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(saddr), "l"(gmem), "r"(src_bytes) : "memory");
}

// Subtiles [S0, S1) of this producer thread's four rows grp + 16 i (16-byte chunk ch of each):
// cp.async from the KV row, zero-filled (nothing read) for an invalid index, whose copies point at
// slot 0's row (q's with an empty pool): one base address a row, the chunks at immediate offsets.
template <int S0, int S1>
NSAJIT_DEVICE void gather_rows(uint32_t dst, const SparseMlaDecodeParams& p, const int (&idx)[4], int grp, int ch) {
  const bf16_t* kv_or_q = p.num_slots > 0 ? p.kv : p.q;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = grp + 16 * i;
    const bool ok = idx[i] >= 0;
    const bf16_t* src = kv_or_q + (long long)(ok ? idx[i] : 0) * p.kv_row_stride + ch * 8;
#pragma unroll
    for (int s = S0; s < S1; ++s) cp_async_16_zfill_256(dst + s * SUB + swz(r, ch), src + s * 64, ok ? 16u : 0u);
  }
}

// The producer warpgroup: q, then the pairs' half tiles (see the barrier protocol above).
NSAJIT_DEVICE void producer(const SparseMlaDecodeParams& p, uint32_t s_base, int* valid_s, const int* idx_row, int n,
                            int pairs, long long row, int head0) {
  set_max_regs<REG_PRODUCER>();
  const int pt = threadIdx.x - 256;
  const int grp = pt >> 3, ch = pt & 7;  // rows grp + 16 i (one swizzle phase a thread), chunk ch
  if (pairs == 0) return;  // no tile: nothing to read (the math warpgroups write empty rows)
  // q: chunk ch of rows grp + 16 i of each of the nine subtiles; tracked by the first pair's
  // full arrivals (cp.async.mbarrier.arrive covers every earlier cp.async of the thread).
  const bf16_t* q_g = p.q + (row * H_Q + head0) * kDimQK;
  const uint64_t q_policy = l2_evict_first_policy();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = grp + 16 * i;
#pragma unroll
    for (int s = 0; s < 9; ++s)
      cp_async_16_zfill_hint(s_base + OFF_Q + s * SUB + swz(r, ch), q_g + r * kDimQK + s * 64 + ch * 8, 16u, q_policy);
  }
  // Every index entry pair 0 needs, loaded before anything waits for one (after a launch they come
  // from DRAM; one after another they would put round trips before the first copies). Raw entries,
  // checked at use.
  int raw0[4], raw1[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    raw0[i] = load_index_raw(idx_row, grp + 16 * i, n);
    raw1[i] = load_index_raw(idx_row, TILE_TOKENS + grp + 16 * i, n);
  }
  for (int i = 0; i < pairs; ++i) {
    int c0[4], c1[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      c0[j] = valid_index(raw0[j], p.num_slots);
      c1[j] = valid_index(raw1[j], p.num_slots);
    }
    const uint32_t par = uint32_t((i - 1) & 1);  // the release phase of pair i - 1
    const uint32_t buf0 = s_base + OFF_KV, buf1 = buf0 + TILE;
    // L0: freed first (WG0's own PV); valid[0] with it.
    if (i > 0) mbar_wait(bar_empty(s_base, 0, HALF_L), par);
    if (ch == 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j) valid_s[grp + 16 * j] = c0[j] >= 0;
    }
    gather_rows<0, 4>(buf0, p, c0, grp, ch);
    cp_async_arrive_noinc(bar_full(s_base, 0, HALF_L));
    mbar_arrive(bar_full(s_base, 0, HALF_L));  // releases valid[0]
    // H1: valid[1] with it (WG1 waits for H1 first).
    if (i > 0) mbar_wait(bar_empty(s_base, 1, HALF_H), par);
    if (ch == 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j) valid_s[TILE_TOKENS + grp + 16 * j] = c1[j] >= 0;
    }
    gather_rows<4, 9>(buf1, p, c1, grp, ch);
    cp_async_arrive_noinc(bar_full(s_base, 1, HALF_H));
    mbar_arrive(bar_full(s_base, 1, HALF_H));  // releases valid[1]
    if (i > 0) mbar_wait(bar_empty(s_base, 0, HALF_H), par);
    gather_rows<4, 9>(buf0, p, c0, grp, ch);
    cp_async_arrive_noinc(bar_full(s_base, 0, HALF_H));
    if (i > 0) mbar_wait(bar_empty(s_base, 1, HALF_L), par);
    gather_rows<0, 4>(buf1, p, c1, grp, ch);
    cp_async_arrive_noinc(bar_full(s_base, 1, HALF_L));
    // The next pair's index entries (past n: -1, so a padding tile is all invalid).
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      raw0[j] = load_index_raw(idx_row, (2 * i + 2) * TILE_TOKENS + grp + 16 * j, n);
      raw1[j] = load_index_raw(idx_row, (2 * i + 3) * TILE_TOKENS + grp + 16 * j, n);
    }
  }
  cp_async_wait_all();  // no copy may outlive the CTA (their arrivals are waited for by the math warpgroups)
}

// Math warpgroup W (0: even tiles, O[:, 0:256]; 1: odd tiles, O[:, 256:512]).
template <int W>
NSAJIT_DEVICE void math_warpgroup(const SparseMlaDecodeParams& p, uint32_t s_base, const int* valid_s, float* max_s,
                                  float* sum_s, int pairs, long long row, int head0, int split) {
  set_max_regs<REG_MATH>();
  const int ct = threadIdx.x & 127;
  const int lane = ct & 31;
  const int r0 = 16 * (ct >> 5) + (lane >> 2);  // accumulator rows (heads) r0 and r0 + 8
  const int r1 = r0 + 8;
  const int t4 = lane & 3;
  const uint32_t own = s_base + OFF_KV + uint32_t(W) * TILE;       // this warpgroup's S tile
  const uint32_t other = s_base + OFF_KV + uint32_t(1 - W) * TILE;  // the other's (SS PV)
  const int* vf = valid_s + W * TILE_TOKENS;
  const float scale_log2 = p.sm_scale * 1.4426950408889634f;
  const uint64_t dq = smem_desc(s_base + OFF_Q, 16, 1024);
  const uint64_t dk = smem_desc(own, 16, 1024);
  const uint64_t dv_own = smem_desc(own + 4u * W * SUB, 8192, 1024);      // V of own tile, this half's 256 dims
  const uint64_t dv_other = smem_desc(other + 4u * W * SUB, 8192, 1024);  // V of the other's tile
  // P: WG0's over H0's rope subtile, WG1's in the P1 buffer (K-major, swizzled like a subtile)
  const uint32_t p_own = W == 0 ? own + 8u * SUB : s_base + OFF_P1;
  const uint64_t dp_other = smem_desc(W == 0 ? s_base + OFF_P1 : other + 8u * SUB, 16, 1024);
  // QK halves in the order the producer delivers them: WG0 dims 0-255 first, WG1 256-575.
  constexpr int FIRST = W == 0 ? HALF_L : HALF_H;
  constexpr int KK_FIRST0 = W == 0 ? 0 : 16, KK_FIRST1 = W == 0 ? 16 : 36;
  constexpr int KK_REST0 = W == 0 ? 16 : 0, KK_REST1 = W == 0 ? 36 : 16;

  float o[128];  // O[64 heads][256 dims]: o[4j + e] = (e < 2 ? r0 : r1, 8j + 2 t4 + (e & 1))
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  // m: the running max (base 2, both warpgroups hold the same); l: this warpgroup's tiles' row sums
  float m0 = neg_inf(), m1 = neg_inf(), l0 = 0.f, l1 = 0.f;
  uint32_t ph[4][4];  // bf16 P, the RS PV's A fragments of the 4 k16 steps
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) ph[kk][e] = 0u;

  for (int i = 0; i < pairs; ++i) {
    const uint32_t par = uint32_t(i & 1);
    // ---- S = Q K^T: 36 k16 steps over 576 dims, one commit group, the first half's steps issued
    // while the second half may still be landing
    float s[32];
    mbar_wait(bar_full(s_base, W, FIRST), par);
    fence_proxy_async();  // the tile (and q) by cp.async (generic proxy) -> wgmma
    wgmma_fence();
#pragma unroll
    for (int kk = KK_FIRST0; kk < KK_FIRST1; ++kk) {
      const uint64_t off = uint64_t((uint32_t(kk >> 2) * SUB + uint32_t(kk & 3) * 32u) >> 4);
      wgmma_m64n64k16_ss(s, dq + off, dk + off, kk > KK_FIRST0 ? 1 : 0);
    }
    mbar_wait(bar_full(s_base, W, 1 - FIRST), par);
    fence_proxy_async();
    wgmma_fence();  // after the wait's branch (ptxas would otherwise insert one itself, C7519)
#pragma unroll
    for (int kk = KK_REST0; kk < KK_REST1; ++kk) {
      const uint64_t off = uint64_t((uint32_t(kk >> 2) * SUB + uint32_t(kk & 3) * 32u) >> 4);
      wgmma_m64n64k16_ss(s, dq + off, dk + off, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);
    fence_regs(o);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) fence_regs_u(ph[kk]);

    // ---- mask invalid tokens to -inf, row max over the tile
    float mx0, mx1;
    mask_scale_row_max(s, vf, t4, scale_log2, mx0, mx1);

    // P = 2^(S - mu) rounded to bf16 into the RS PV's A fragments; returns the row sums (fp32)
    auto exponentials = [&](float mu0, float mu1, float& rs0, float& rs1) {
      rs0 = rs1 = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p0 = exp2_ftz(s[4 * j + 0] - mu0), p1 = exp2_ftz(s[4 * j + 1] - mu0);
        const float p2 = exp2_ftz(s[4 * j + 2] - mu1), p3 = exp2_ftz(s[4 * j + 3] - mu1);
        rs0 += p0 + p1;
        rs1 += p2 + p3;
        ph[j >> 1][2 * (j & 1)] = pack_bf16x2_rn(p0, p1);
        ph[j >> 1][2 * (j & 1) + 1] = pack_bf16x2_rn(p2, p3);
      }
    };
    // P to shared memory (WG0: over H0's rope subtile, which only QK0 read; WG1: the P1
    // buffer), the other warpgroup's SS A operand. stmatrix.x4 kk: the 8x8 blocks (rows 16 w + [0, 8) / [8, 16),
    // column chunks 2 kk and 2 kk + 1); lane L gives row (L & 7) + 8 ((L >> 3) & 1), chunk 2 kk + (L >> 4).
    auto store_p = [&] {
      const int srow = 16 * (ct >> 5) + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) stmatrix_x4(p_own + swz(srow, 2 * kk + (lane >> 4)), ph[kk]);
      fence_proxy_async();  // P by generic stores, read by the other warpgroup's wgmma
    };
    auto pv_own_rs = [&] {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_m64n256k16_rs_tb(o, ph[kk], dv_own + uint64_t((uint32_t(kk) * 2048u) >> 4), 1);
      wgmma_commit();
    };
    auto pv_other_ss = [&] {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_m64n256k16_ss_tb(o, dp_other + uint64_t((uint32_t(kk) * 32u) >> 4), dv_other + uint64_t((uint32_t(kk) * 2048u) >> 4), 1);
      wgmma_commit();
    };
    // A reference that is still -inf (nothing valid yet) is used as 0, so -inf - -inf never happens.
    auto usable = [](float m) { return m == neg_inf() ? 0.f : m; };

    if constexpr (W == 0) {
      // ---- WG0: softmax and RS PV against its own tile's max mA (published for WG1), without
      // waiting for WG1's tile; then the pair's max mB from WG1, and the correction 2^(mA - mB)
      const float mA0 = fmaxf(m0, mx0), mA1 = fmaxf(m1, mx1);
      if (t4 == 0) {
        max_s[r0] = mA0;
        max_s[r1] = mA1;
      }
      bar_arrive(BAR_MAX0, 256);
      const bool upA0 = mA0 > m0, upA1 = mA1 > m1;
      const float muA0 = usable(mA0), muA1 = usable(mA1);
      const float alA0 = upA0 ? exp2_ftz(m0 - muA0) : 1.f, alA1 = upA1 ? exp2_ftz(m1 - muA1) : 1.f;
      float rs0, rs1;
      exponentials(muA0, muA1, rs0, rs1);
      l0 = l0 * alA0 + rs0;
      l1 = l1 * alA1 + rs1;
      if (__any_sync(0xffffffffu, upA0 || upA1)) scale_o_rows(o, alA0, alA1);
      pv_own_rs();
      bar_sync(BAR_MAX1, 256);
      const float mB0 = max_s[TILE_TOKENS + r0], mB1 = max_s[TILE_TOKENS + r1];
      const bool upB0 = mB0 > mA0, upB1 = mB1 > mA1;
      const float muB0 = usable(mB0), muB1 = usable(mB1);
      wgmma_wait<0>();  // the RS PV: O and the P registers may change, L0 is free
      fence_regs(o);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) fence_regs_u(ph[kk]);
      mbar_arrive(bar_empty(s_base, 0, HALF_L));
      if (__any_sync(0xffffffffu, upB0 || upB1)) {
        // WG1's tile raised the max: O_L, l0 and P0 (for WG1) move to the pair's reference
        const float be0 = upB0 ? exp2_ftz(mA0 - muB0) : 1.f, be1 = upB1 ? exp2_ftz(mA1 - muB1) : 1.f;
        scale_o_rows(o, be0, be1);
        l0 *= be0;
        l1 *= be1;
        float unused0, unused1;
        exponentials(muB0, muB1, unused0, unused1);
      }
      m0 = mB0;
      m1 = mB1;
      store_p();
      bar_arrive(BAR_P0_READY, 256);
      mbar_wait(bar_full(s_base, 1, HALF_L), par);  // V1_L by cp.async (completed: WG1's QK waited for it)
      fence_proxy_async();
      bar_sync(BAR_P1_READY, 256);
      pv_other_ss();
      // V1_L and the P1 buffer free. (The next pair's QK issued before this wait, FlashMLA's order,
      // was no faster and slower with L2 misses: docs/notes/sparse_mla.md, seesaw v3.)
      wgmma_wait<0>();
      fence_regs(o);
      mbar_arrive(bar_empty(s_base, 1, HALF_L));
    } else {
      // ---- WG1: the pair's max mB = max(WG0's mA, its tile's), published for WG0; P1 to shared
      // memory first (WG0's SS PV waits for it), then its RS PV and the SS PV of WG0's P0
      bar_sync(BAR_MAX0, 256);
      const float mB0 = fmaxf(max_s[r0], mx0), mB1 = fmaxf(max_s[r1], mx1);
      if (t4 == 0) {
        max_s[TILE_TOKENS + r0] = mB0;
        max_s[TILE_TOKENS + r1] = mB1;
      }
      bar_arrive(BAR_MAX1, 256);
      const bool up0 = mB0 > m0, up1 = mB1 > m1;
      const float mu0 = usable(mB0), mu1 = usable(mB1);
      const float al0 = up0 ? exp2_ftz(m0 - mu0) : 1.f, al1 = up1 ? exp2_ftz(m1 - mu1) : 1.f;
      m0 = mB0;
      m1 = mB1;
      float rs0, rs1;
      exponentials(mu0, mu1, rs0, rs1);
      l0 = l0 * al0 + rs0;
      l1 = l1 * al1 + rs1;
      store_p();
      bar_arrive(BAR_P1_READY, 256);
      if (__any_sync(0xffffffffu, up0 || up1)) scale_o_rows(o, al0, al1);
      pv_own_rs();
      mbar_wait(bar_full(s_base, 0, HALF_H), par);  // V0_R by cp.async (completed: WG0's QK waited for it)
      fence_proxy_async();
      bar_sync(BAR_P0_READY, 256);
      pv_other_ss();
      wgmma_wait<1>();  // the RS PV: H1 (V1_R) free, its rope subtile too (P1 has its own buffer)
      mbar_arrive(bar_empty(s_base, 1, HALF_H));
      wgmma_wait<0>();  // V0_R and P0 (H0's subtile 8) free
      fence_regs(o);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) fence_regs_u(ph[kk]);
      mbar_arrive(bar_empty(s_base, 0, HALF_H));
    }
  }

  // ---- epilogue: l = l0 + l1 of both warpgroups (each over its 4 lanes first), 1 / l (with the
  // attention sink when not split: the combine applies it); WG0 writes lse / max_logits (split: the
  // base-2 partials); each warpgroup its 256 output dims (split: fp32 O / l of the split)
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (t4 == 0) {
    sum_s[W * TILE_TOKENS + r0] = l0;
    sum_s[W * TILE_TOKENS + r1] = l1;
  }
  bar_arrive(W == 0 ? BAR_SUM0 : BAR_SUM1, 256);
  bar_sync(W == 0 ? BAR_SUM1 : BAR_SUM0, 256);
  // the same sum in both warpgroups (one order), so both halves of a row get the same 1 / l
  float lt0 = sum_s[r0] + sum_s[TILE_TOKENS + r0], lt1 = sum_s[r1] + sum_s[TILE_TOKENS + r1];
  if constexpr (CLUSTER) {
    // The cluster's merge: (m, l) of every row to the peer through its max[] buffer (read by the
    // loop only: free after SUM0 / SUM1), the pair's M = max(m_0, m_1) and L = sum l_s 2^(m_s - M)
    // in rank order (both CTAs the same bits); WG 1 - rank sends its O half times 2^(m - M) into the
    // owner's KV buffer 0 (free: both its warpgroups passed their last tile before the first
    // cluster barrier), in the receiver thread's fragment order; WG rank adds it to its own.
    const uint32_t rank = uint32_t(split);
    f32x2* stat_s = reinterpret_cast<f32x2*>(max_s);  // [64] (m, l)
    if (W == 0 && t4 == 0) {
      stat_s[r0] = f32x2{m0, lt0};
      stat_s[r1] = f32x2{m1, lt1};
    }
    cluster_sync();
    float f_self[2], mm[2], ll[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = hh ? r1 : r0;
      const float m_self = hh ? m1 : m0, l_self = hh ? lt1 : lt0;
      float m_peer, l_peer;
      asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(m_peer), "=f"(l_peer)
                   : "r"(peer_address(smem_u32(stat_s + r), rank ^ 1u)) : "memory");
      const float M = fmaxf(m_self, m_peer);
      const float f_peer = m_peer == neg_inf() ? 0.f : exp2_ftz(m_peer - M);
      f_self[hh] = m_self == neg_inf() ? 0.f : exp2_ftz(m_self - M);
      // rank 0's term first in both CTAs, and no contraction into an fma (which would round the
      // two products differently on the two ranks): the same L bits in both halves of the row
      const float a0 = __fmul_rn(l_self, f_self[hh]), a1 = __fmul_rn(l_peer, f_peer);
      ll[hh] = rank == 0 ? __fadd_rn(a0, a1) : __fadd_rn(a1, a0);
      mm[hh] = M;
    }
    const uint32_t recv = s_base + OFF_KV + uint32_t(ct) * 16u;  // [32 j][128 threads] float4
    if (uint32_t(W) != rank) {
      const uint32_t to = peer_address(recv, rank ^ 1u);
#pragma unroll
      for (int j = 0; j < 32; ++j)
        asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(to + uint32_t(j) * 2048u),
                     "f"(o[4 * j] * f_self[0]), "f"(o[4 * j + 1] * f_self[0]), "f"(o[4 * j + 2] * f_self[1]),
                     "f"(o[4 * j + 3] * f_self[1])
                     : "memory");
    }
    cluster_sync();  // after it no CTA touches the other's shared memory: either may exit
    if (uint32_t(W) != rank) return;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      float v[4];
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                   : "r"(recv + uint32_t(j) * 2048u) : "memory");
      o[4 * j] = fmaf(o[4 * j], f_self[0], v[0]);
      o[4 * j + 1] = fmaf(o[4 * j + 1], f_self[0], v[1]);
      o[4 * j + 2] = fmaf(o[4 * j + 2], f_self[1], v[2]);
      o[4 * j + 3] = fmaf(o[4 * j + 3], f_self[1], v[3]);
    }
    m0 = mm[0];
    m1 = mm[1];
    lt0 = ll[0];
    lt1 = ll[1];
  }
  const bool sink = (CLUSTER || split < 0) && p.attn_sink != nullptr;
  const float inv0 = mla_output_scale(lt0, m0, sink ? p.attn_sink + (head0 + r0) : nullptr);
  const float inv1 = mla_output_scale(lt1, m1, sink ? p.attn_sink + (head0 + r1) : nullptr);
  if (W == 0 && t4 == 0) {  // (cluster: only rank 0's WG0 gets here)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = hh ? r1 : r0;
      const float l = hh ? lt1 : lt0, m = hh ? m1 : m0;
      const long long head = row * H_Q + head0 + r;
      if (CLUSTER || split < 0) {
        p.lse[head] = l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : pos_inf();
        if (p.max_logits != nullptr) p.max_logits[head] = l > 0.f ? m * 0.6931471805599453f : neg_inf();
      } else {
        const long long part_row = (long long)split * p.rows * H_Q + head;
        p.lse_part[part_row] = l > 0.f ? m + log2f(l) : neg_inf();
        p.max_part[part_row] = l > 0.f ? m : neg_inf();
      }
    }
  }
  // The Q tile is free: both warpgroups' QKs completed before SUM0 / SUM1, and q is copied only with a pair.
  if (CLUSTER || split < 0) store_o_staged(p, o, W, s_base + OFF_Q, inv0, inv1, row, head0);
  else store_o(p, o, 256 * W, r0, r1, t4, inv0, inv1, row, head0, split, true);
}

}  // namespace mla

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS, 1)
nsajit_sparse_mla(const SparseMlaDecodeParams p) {
  using namespace mla;
  // A split launch's combine is a programmatic dependent: it may launch now and waits for this
  // grid (griddepcontrol.wait) before reading. A no-op without one.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t s_base = (raw + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
  unsigned char* smem = smem_raw + (s_base - raw);
  int* valid_s = reinterpret_cast<int*>(smem + OFF_VALID);  // [2][64]
  float* max_s = reinterpret_cast<float*>(smem + OFF_MAX);  // [2][64]
  float* sum_s = reinterpret_cast<float*>(smem + OFF_SUM);  // [2][64]

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  // unit = row * (H_Q / 64) + head group: the CTAs of one row run side by side (L2 hits);
  // blockIdx.x = unit, or unit * 2 + cluster rank (tile.combine cluster)
  const unsigned unit = CLUSTER ? blockIdx.x / kMlaClusterSplits : blockIdx.x;
  const long long row = unit / (H_Q / HEADS_PER_CTA);
  const int head0 = int(unit % (H_Q / HEADS_PER_CTA)) * HEADS_PER_CTA;
  int n = TOPK;
  if (p.topk_length != nullptr) n = min(max(__ldg(p.topk_length + row), 0), TOPK);
  const int tiles = (n + TILE_TOKENS - 1) / TILE_TOKENS;
  const int all_pairs = (tiles + 1) / 2;  // an odd count's last pair: the second tile all invalid
  // split-KV (gridDim.z splits): whole pairs, so only a row's last pair may hold a padding tile
  const int num_splits = CLUSTER ? kMlaClusterSplits : int(gridDim.z);
  const int z = CLUSTER ? int(blockIdx.x % kMlaClusterSplits) : int(blockIdx.z);
  const int pair_begin = int((long long)all_pairs * z / num_splits);
  const int pairs = int((long long)all_pairs * (z + 1) / num_splits) - pair_begin;
  const int split = num_splits > 1 ? z : -1;  // -1: not split (out, lse); cluster: the rank
  const int tok_begin = 2 * TILE_TOKENS * pair_begin;
  const int* idx_row = p.indices + row * TOPK + tok_begin;
  n = min(n - tok_begin, 2 * TILE_TOKENS * pairs);  // this split's tokens (<= 0: none)

  if (tid == 0) {
    // full: one cp.async arrival (noinc) per producer thread, + one plain arrival on the halves
    // that publish validity flags; empty: one arrival per releasing consumer thread
    mbar_init(bar_full(s_base, 0, HALF_L), 256);
    mbar_init(bar_full(s_base, 0, HALF_H), 128);
    mbar_init(bar_full(s_base, 1, HALF_L), 128);
    mbar_init(bar_full(s_base, 1, HALF_H), 256);
    mbar_init(bar_empty(s_base, 0, HALF_L), 128);  // WG0
    mbar_init(bar_empty(s_base, 0, HALF_H), 128);  // WG1
    mbar_init(bar_empty(s_base, 1, HALF_L), 128);  // WG0
    mbar_init(bar_empty(s_base, 1, HALF_H), 128);  // WG1 (P1 has its own buffer)
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 2) producer(p, s_base, valid_s, idx_row, n, pairs, row, head0);
  else if (wg == 0) math_warpgroup<0>(p, s_base, valid_s, max_s, sum_s, pairs, row, head0, split);
  else math_warpgroup<1>(p, s_base, valid_s, max_s, sum_s, pairs, row, head0, split);
}
