// sparse_mla_wgmma.cuh — sparse MLA attention (§3) on Hopper warpgroup MMA (wgmma, sm_90a), bf16
// or FP8 (656-byte, §4) KV, optional split-KV. Spec tile.kernel = wgmma (producer_warps 4, FP8: 8;
// the default at 64 heads per CTA on sm_90a); the mma_sync kernel in sparse_mla_mma_sync.cuh
// serves the other specs. Same contract and outputs as that kernel (see its
// header), and the same workspace format.
//
// CTA = one query row x HEADS_PER_CTA = min(H_Q, 64) heads; the MMA M dimension is always 64 rows (fewer
// heads: the rows past HEADS_PER_CTA hold zero q and are never written out; the kernels of 8-32 heads are
// memory-bound, so the padding costs tensor time that is free there).
// 384 threads = 3 warpgroups (FP8 512: 4, two producers), 1 CTA per SM:
//   WG0 (warps 0-3, 240 / 200 / 224 registers with bf16 / FP8 at 384 / FP8 at 512 threads):
//        S = Q K^T (64 heads x 64 tokens, wgmma m64n64k16 SS over
//        576 dims), online softmax in base 2 against the running max (PRECISE: a reference
//        raised only when a tile exceeds it by more than 8, log2 units: P <= 2^8; O is rescaled
//        in few tiles),
//        P rounded to bf16 (PRECISE: P = P_hi + P_lo, both bf16), O[:, 0:256] += P V (PRECISE:
//        P_hi V + P_lo V; wgmma m64n256k16, or two
//        m64n128k16 at 512 threads; RS, P from registers; FP8 at 384 threads: SS, P from shared
//        memory like WG1, which frees WG0's P registers for the producer; issued before WG0
//        signals P_READY, so they queue ahead of WG1's).
//   WG1 (warps 4-7): O[:, 256:512] += P V (PRECISE: + P_lo V; SS: P over the tile's rope columns,
//        which QK no longer needs; P_lo in its own 8 KB buffer), after rescaling by WG0's alpha.
//   WG2 (warps 8-11, 56 / 144 registers; FP8 at 512 threads WG2 and WG3, 64 each): producer.
//        bf16: 16-byte cp.async gathers (zero-filled for
//        invalid tokens) of each token row into the 128-byte-swizzled KV tile, not waiting for
//        them (they arrive on the tile's full barrier when they land, cp.async.mbarrier.arrive),
//        so both tiles' copies can be in flight; FP8: register loads
//        of the 656-byte tokens' fp8 part, dequantised bf16(float(e4m3) * scale) and stored
//        swizzled, the bf16 rope by cp.async (no registers).
// Default precision is the field's (bf16 P, as FlashMLA and FlashAttention-3; nsa-semantics.md
// "Tolerances"). Why PRECISE adds P_lo: bf16 P alone (2^-9 relative) misses the 1e-3 absolute
// tolerance where a few dominant tokens' V values cancel (docs/notes/sparse_mla.md, "Measurements / 2").
// Shared memory: Q [64][576] and two KV tiles [64][576], each as nine [64 rows][128 B] subtiles
// with the 128-byte swizzle (16-byte chunk c of row r at c ^ (r & 7)), which wgmma reads K-major
// (Q, K, P) and MN-major (V = the same tile, transposed view); the unsplit epilogue stages O over Q. Two tiles in flight: full[b]
// (producer -> consumers) and empty[b] (consumers -> producer) mbarriers; named barriers pass P
// from WG0 to WG1 (P_READY) and the P_lo / alpha buffers back (P_FREE). WG0 releases a tile once
// its PV is done: before waiting for the next tile if that has not landed, else after issuing
// the next tile's QK (which then queues behind the PV). Wrappers, constants and the epilogue's
// store shared with the seesaw kernel: sparse_mla_wgmma_common.cuh.
#pragma once
#include "sparse_mla_wgmma_common.cuh"

namespace mla {

constexpr int kFp8Bytes = kFp8KvTokenBytes;
constexpr bool FP8 = NSAJIT_KV_FP8 != 0;
constexpr bool PRECISE = NSAJIT_PRECISE != 0;  // P = P_hi + P_lo (two PV wgmmas) instead of bf16 P
// Producer threads: one warpgroup, or two for FP8 at 512 threads (the default at 64 heads): the
// dequantisation then issues from two warps per scheduler.
constexpr int PRODUCERS = NSAJIT_THREADS - 256;
constexpr int THREADS_PER_TOKEN = PRODUCERS / 64;  // producer threads per token of a tile
constexpr int THREADS_PER_TOKEN_LOG2 = THREADS_PER_TOKEN == 4 ? 2 : 1;
// 512 threads cap ptxas at 128 registers a thread for every instruction (setmaxnreg raises a
// warpgroup's budget at run time, not that cap), below the ~158 one m64n256 wgmma with its 128
// accumulators needs: the PV then runs as two m64n128 halves.
constexpr bool PV_N128 = NSAJIT_THREADS == 512;
static_assert((FP8 ? NSAJIT_THREADS == 512 : NSAJIT_THREADS == 384) && TILE_TOKENS == 64,
              "wgmma kernel: 384 threads (FP8: 512), 64-token tiles");
static_assert(HEADS_PER_CTA == 8 || HEADS_PER_CTA == 16 || HEADS_PER_CTA == 32 || HEADS_PER_CTA == 64, "HEADS_PER_CTA: 8, 16, 32 or 64");
static_assert(H_Q % HEADS_PER_CTA == 0 && TOPK % TILE_TOKENS == 0, "H_Q / TOPK");

constexpr uint32_t OFF_Q = 0;
constexpr uint32_t OFF_KV = TILE;                // two tiles
constexpr uint32_t OFF_PLO = 3 * TILE;           // P_lo [64 heads][64 tokens] bf16, swizzled (PRECISE)
constexpr uint32_t OFF_VALID = OFF_PLO + SUB;    // [2][64] int
constexpr uint32_t OFF_ALPHA = OFF_VALID + 512;  // [64] float
constexpr uint32_t OFF_INVL = OFF_ALPHA + 256;   // [64] float
constexpr uint32_t OFF_BAR = OFF_INVL + 256;     // full[2], empty[2], q_full
constexpr uint32_t LAYOUT_BYTES = OFF_BAR + 64;
constexpr uint32_t SMEM_BYTES = LAYOUT_BYTES + 1024;  // slack to align the base to 1024 bytes
static_assert(SMEM_BYTES == sparse_mla_wgmma_smem_bytes(), "the layout must match the plan (kernel_params.h)");
static_assert(SMEM_BYTES == NSAJIT_DYNAMIC_SMEM, "host and kernel disagree on shared memory size");

// Register budgets (setmaxnreg): 128 x (P + W0 + W1) = 64512 = 384 x 168, the launch allocation
// (__launch_bounds__(384, 1) caps ptxas at 168; at 512 threads 128 x (2 P + W0 + W1) = 512 x 128):
// what the decreasing warpgroups release is what the increasing ones take. A count below the
// launch cap must use setmaxnreg.dec (.inc to a lower count is an illegal instruction).
// FP8 (512 threads): 64 a producer thread (a quarter token's 8 chunks), WG0 224 with P in
// registers; WG1 below 160 serialises its wgmmas (C7512).
constexpr int REG_PRODUCER = PV_N128 ? 64 : 56;
constexpr int REG_WG0 = PV_N128 ? 224 : 240;
constexpr int REG_WG1 = FP8 ? 160 : 208;
static_assert(PRODUCERS / 128 * REG_PRODUCER + REG_WG0 + REG_WG1 == NSAJIT_THREADS / 128 * REG_LAUNCH,
              "setmaxnreg budgets must balance");

// Ids 13 and 14 are the epilogue's BAR_STAGED_O (sparse_mla_wgmma_common.cuh).
enum : int { BAR_P_READY = 1, BAR_P_FREE = 2, BAR_EPILOGUE = 3, BAR_WG0_VOTE = 4 };

// One k16 step of a warpgroup's PV: O[:, 256 dims] += A V, A (64 x 16 of P) from shared memory
// (descriptor) or registers (fragment), dv: V's k16 rows of the 256 dims, MN-major. At 512 threads
// two m64n128 halves, V's columns 128.. two subtiles on (see wgmma_m64n128k16_ss_tb).
NSAJIT_DEVICE void pv_k16(float (&o)[128], uint64_t da, uint64_t dv) {
  if constexpr (PV_N128) {
    wgmma_m64n128k16_ss_tb<0>(o, da, dv);
    wgmma_m64n128k16_ss_tb<64>(o, da, dv + uint64_t((2u * SUB) >> 4));
  } else {
    wgmma_m64n256k16_ss_tb(o, da, dv, 1);
  }
}
NSAJIT_DEVICE void pv_k16(float (&o)[128], const uint32_t (&a)[4], uint64_t dv) {
  if constexpr (PV_N128) {
    wgmma_m64n128k16_rs_tb<0>(o, a, dv);
    wgmma_m64n128k16_rs_tb<64>(o, a, dv + uint64_t((2u * SUB) >> 4));
  } else {
    wgmma_m64n256k16_rs_tb(o, a, dv, 1);
  }
}

// O[:, half of 256 dims] += P_hi V (PRECISE: + P_lo V), P from shared memory (one commit group).
// dph: P_hi over the tile's rope columns, dpl: P_lo (both [64 heads][64 tokens], K-major); dv: the
// tile's 256 latent dims of this half, MN-major.
NSAJIT_DEVICE void pv_half_ss(float (&o)[128], uint64_t dph, uint64_t dpl, uint64_t dv) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t offp = uint64_t((uint32_t(kk) * 32u) >> 4);
    const uint64_t offv = uint64_t((uint32_t(kk) * 2048u) >> 4);
    pv_k16(o, dph + offp, dv + offv);
    if constexpr (PRECISE) pv_k16(o, dpl + offp, dv + offv);
  }
  wgmma_commit();
}

}  // namespace mla

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS, 1)
nsajit_sparse_mla(const SparseMlaDecodeParams p) {
  using namespace mla;
  // A split-KV launch is followed by the combine, launched as a programmatic dependent: allow it
  // to launch now rather than when the last CTA exits (it waits for this grid's completion and
  // memory, griddepcontrol.wait, before it reads anything). A no-op without such a dependent.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t s_base = (raw + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
  unsigned char* smem = smem_raw + (s_base - raw);
  const uint32_t s_q = s_base + OFF_Q;
  const uint32_t s_plo = s_base + OFF_PLO;
  int* valid_s = reinterpret_cast<int*>(smem + OFF_VALID);      // [2][64]
  float* alpha_s = reinterpret_cast<float*>(smem + OFF_ALPHA);  // [64]
  float* invl_s = reinterpret_cast<float*>(smem + OFF_INVL);    // [64]
  const uint32_t bar_full = s_base + OFF_BAR;  // full[b] = bar_full + 8 b
  const uint32_t bar_empty = bar_full + 16;    // empty[b] = bar_empty + 8 b
  const uint32_t bar_q = bar_full + 32;

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  // blockIdx.x = row * (H_Q / HEADS_PER_CTA) + head group: the CTAs of one row run side by side, so the
  // second one's gathers hit L2 (grid x allows 2^31 - 1 CTAs).
  const long long row = blockIdx.x / (H_Q / HEADS_PER_CTA);
  const int head0 = int(blockIdx.x % (H_Q / HEADS_PER_CTA)) * HEADS_PER_CTA;
  const int split = blockIdx.z;
  const int num_splits = gridDim.z;

  // ---- tile range of this split
  int n = TOPK;
  if (p.topk_length != nullptr) n = min(max(__ldg(p.topk_length + row), 0), TOPK);
  const int tiles = (n + TILE_TOKENS - 1) / TILE_TOKENS;
  const int tile_begin = (int)((long long)tiles * split / num_splits);
  const int tile_end = (int)((long long)tiles * (split + 1) / num_splits);
  const int* idx_row = p.indices + row * TOPK;

  if (tid == 0) {
    // FP8: one arrival per producer thread; bf16: also one when its copies land (cp.async arrive)
    mbar_init(bar_full, FP8 ? PRODUCERS : 256);
    mbar_init(bar_full + 8, FP8 ? PRODUCERS : 256);
    mbar_init(bar_empty, 256);  // one arrival per consumer thread
    mbar_init(bar_empty + 8, 256);
    mbar_init(bar_q, PRODUCERS);  // one arrival per producer thread (bf16: when its q copies land, noinc)
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 2 || (PRODUCERS == 256 && wg == 3)) {
    // ================= producer warpgroup =================
    set_max_regs<REG_PRODUCER>();
    const int pt = tid - 256;
    // Q: thread (group pt / 8, chunk pt % 8) copies chunk pt % 8 of rows grp + QSTEP i of every subtile.
    {
      constexpr int QSTEP = PRODUCERS / 8;
      const int grp = pt >> 3, ch = pt & 7;
      const bf16_t* q_g = p.q + (row * H_Q + head0) * kDimQK;
      const uint64_t q_policy = l2_evict_first_policy();
#pragma unroll
      for (int i = 0; i < 64 / QSTEP; ++i) {
        const int r = grp + QSTEP * i;
#pragma unroll
        for (int s = 0; s < 9; ++s)  // rows past HEADS_PER_CTA: zero-filled
          cp_async_16_zfill_hint(s_q + s * SUB + swz(r, ch), r < HEADS_PER_CTA ? q_g + r * kDimQK + s * 64 + ch * 8 : q_g,
                                 r < HEADS_PER_CTA ? 16u : 0u, q_policy);
      }
    }
    auto prefetch_raw = [&](int tile) { return tile < tile_end ? load_index_raw(idx_row, tile * TILE_TOKENS + (pt >> THREADS_PER_TOKEN_LOG2), n) : -1; };
    // The index entries of tile tile_begin and of the first two prefetches, all loaded (after the q
    // copies, which wait for nothing) before anything waits for one: after a launch they come
    // from DRAM, and loaded one after another they put three round trips before the first tile's
    // copies (a split-KV CTA runs 2-8 tiles).
    const int raw1 = prefetch_raw(tile_begin + 1), raw2 = prefetch_raw(tile_begin + 2);
    // Raw entries of tile tile_begin (bf16: this thread's four rows; FP8: its token), checked at use.
    [[maybe_unused]] int first_raw[4] = {-1, -1, -1, -1};
    if constexpr (!FP8) {
      const int grp = pt >> 3;
#pragma unroll
      for (int i = 0; i < 4; ++i) first_raw[i] = tile_begin < tile_end ? load_index_raw(idx_row, tile_begin * TILE_TOKENS + grp + 16 * i, n) : -1;
    } else {
      first_raw[0] = prefetch_raw(tile_begin);
    }
    // FP8: the first byte of slot idx's 656-byte token (page idx / page_size, row idx % page_size;
    // by shifts for a power-of-two page size: a division is ~20 instructions on the producer's path).
    const unsigned ps = (unsigned)p.page_size;
    const bool ps_pow2 = FP8 && (ps & (ps - 1u)) == 0u;
    const unsigned ps_shift = FP8 ? unsigned(__ffs(int(ps)) - 1) : 0u;
    auto token_bytes = [&](int idx) {
      const unsigned u = (unsigned)idx;
      const unsigned page = ps_pow2 ? u >> ps_shift : u / ps;
      return p.kv_fp8 + (long long)page * p.kv_page_stride + (long long)(u - page * ps) * kFp8Bytes;
    };
    // L2 prefetch, two tiles ahead of the copies into shared memory: only two tiles fit in shared
    // memory, so without it a tile's copies wait a full DRAM latency.
    // `raw`: the token's index entry, loaded a tile earlier (load_index_raw), checked here.
    auto prefetch_tile = [&](int tile, int raw) {
      if (tile >= tile_end) return;
      // Two CTAs a row (h_q 128 at 64 heads per CTA): they run side by side and read the same
      // rows; each prefetches every other tile (the sibling's lines are in L2 by then).
      if (H_Q / HEADS_PER_CTA == 2 && (tile & 1) != head0 / HEADS_PER_CTA) return;
      const int idx = valid_index(raw, p.num_slots);
      if constexpr (FP8) {
        // Threads (token pt / THREADS_PER_TOKEN, h = pt % THREADS_PER_TOKEN): the lines holding the token's bytes at offsets
        // 128 k, k % THREADS_PER_TOKEN == h, every line of the token: the token starts 16-byte
        // aligned (kv and the page stride are), so the line of offset 640 holds byte 655.
        // Per-thread line prefetches: a bulk prefetch takes a warp-uniform address, so the
        // compiler runs one per lane in a serial loop. The loop is not unrolled: unrolled, ptxas
        // keeps the addresses live and the producer spills.
        if (idx < 0) return;
        const unsigned char* base = token_bytes(idx);
#pragma unroll 1
        for (int o = 128 * (pt & (THREADS_PER_TOKEN - 1)); o < kFp8Bytes; o += 128 * THREADS_PER_TOKEN) prefetch_l2_line(base + o);
      } else {  // the same pairs over the 1152-byte row
        if (idx < 0) return;
        const char* base = reinterpret_cast<const char*>(p.kv + (long long)idx * p.kv_row_stride);
#pragma unroll 1
        for (int o = 128 * (pt & 1); o < 2 * kDimQK + 127; o += 256) prefetch_l2_line(base + min(o, 2 * kDimQK - 1));
      }
    };
    prefetch_tile(tile_begin + 1, raw1);
    if constexpr (!FP8) {
      // bf16: the same (group, chunk) mapping: rows grp + 16 i (one swizzle phase per thread),
      // 16-byte chunk ch of each of the nine 128-byte column blocks.
      const int grp = pt >> 3, ch = pt & 7;
      cp_async_arrive_noinc(bar_q);  // q landed (the copies above)
      int cur[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) cur[i] = valid_index(first_raw[i], p.num_slots);
      for (int t = tile_begin; t < tile_end; ++t) {
        const int k = t - tile_begin, b = k & 1;
        // bf16: the prefetch's index loaded and checked here (checking at use, as FP8 does, is slower).
        prefetch_tile(t + 2, k == 0 ? raw2 : prefetch_raw(t + 2));
        if (k >= 2) mbar_wait(bar_empty + 8 * b, uint32_t(((k >> 1) - 1) & 1));
        const uint32_t dst = s_base + OFF_KV + uint32_t(b) * TILE;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = grp + 16 * i;
          const bool ok = cur[i] >= 0;
          if (ch == 0) valid_s[b * TILE_TOKENS + r] = ok;
          const bf16_t* src = ok ? p.kv + (long long)cur[i] * p.kv_row_stride + ch * 8 : p.q;
          const uint32_t bytes = ok ? 16u : 0u;
#pragma unroll
          for (int s = 0; s < 9; ++s) cp_async_16_zfill(dst + s * SUB + swz(r, ch), ok ? src + s * 64 : src, bytes);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
          cur[i] = t + 1 < tile_end ? load_index(idx_row, (t + 1) * TILE_TOKENS + grp + 16 * i, n, p.num_slots) : -1;
        // Not waiting for the copies: the next tile's are issued as soon as its buffer is free,
        // so two tiles can be in flight. The consumers fence the async proxy after their wait.
        cp_async_arrive_noinc(bar_full + 8 * b);
        mbar_arrive(bar_full + 8 * b);  // releases valid_s
      }
      cp_async_wait_all();  // no copy may outlive the CTA
      // Nor may an arrival they trigger: with no tile nobody waits for bar_q, and the copies having
      // landed does not mean their arrivals on it have happened.
      if (tile_end == tile_begin) mbar_wait(bar_q, 0);
    } else {
      // FP8: thread = (token pt / THREADS_PER_TOKEN, part h = pt % THREADS_PER_TOKEN), THREADS_PER_TOKEN = 2 (384 threads) or 4 (512); part h
      // handles the 16-byte fp8 chunks THREADS_PER_TOKEN j + h (j < 32 / THREADS_PER_TOKEN) and rope chunks THREADS_PER_TOKEN j + h (j < 8 /
      // THREADS_PER_TOKEN), so the THREADS_PER_TOKEN threads of a token read 16 THREADS_PER_TOKEN contiguous bytes. The rope (bf16 already)
      // goes by cp.async straight into the tile: no registers, which the dequantisation uses for
      // instruction-level parallelism instead.
      constexpr int NCH = 32 / THREADS_PER_TOKEN;  // fp8 chunks a thread
      const int tok = pt >> THREADS_PER_TOKEN_LOG2, h = pt & (THREADS_PER_TOKEN - 1);
      bool q_pending = true;  // bar_q: arrived with the first tile
      // FP8: the index entries a tile ahead of their use, checked there (hides the load's latency).
      int cur = first_raw[0];
      int pf = raw2;  // the prefetch's, one tile ahead of it
      for (int t = tile_begin; t < tile_end; ++t) {
        const int k = t - tile_begin, b = k & 1;
        const int idx = valid_index(cur, p.num_slots);
        const bool ok = idx >= 0;
        u32x4 f[NCH], sc = {0u, 0u, 0u, 0u};
        const unsigned char* base = ok ? token_bytes(idx) : nullptr;
        if (ok) {
#pragma unroll
          for (int j = 0; j < NCH; ++j) f[j] = ld_global_nc_16(base + 16 * (THREADS_PER_TOKEN * j + h));
          sc = ld_global_nc_16(base + 512);
        }
        // The prefetch after this tile's loads: they are in flight while it runs.
        prefetch_tile(t + 2, pf);
        pf = prefetch_raw(t + 3);
        cur = t + 1 < tile_end ? load_index_raw(idx_row, (t + 1) * TILE_TOKENS + tok, n) : -1;
        if (k >= 2) mbar_wait(bar_empty + 8 * b, uint32_t(((k >> 1) - 1) & 1));
        const uint32_t dst = s_base + OFF_KV + uint32_t(b) * TILE;
        if (h == 0) valid_s[b * TILE_TOKENS + tok] = ok;
        // rope: an invalid token's is zero-filled (nothing read)
#pragma unroll
        for (int j = 0; j < 8 / THREADS_PER_TOKEN; ++j)
          cp_async_16_zfill(dst + 8 * SUB + swz(tok, THREADS_PER_TOKEN * j + h), ok ? static_cast<const void*>(base + 528 + 16 * (THREADS_PER_TOKEN * j + h)) : p.q, ok ? 16u : 0u);
        if (ok) {
          const float scf[4] = {__uint_as_float(sc.x), __uint_as_float(sc.y), __uint_as_float(sc.z), __uint_as_float(sc.w)};
#pragma unroll
          for (int j = 0; j < NCH; ++j) {
            const int kc = THREADS_PER_TOKEN * j + h;        // fp8 chunk: dims [16 kc, 16 kc + 16)
            const float sf = scf[(THREADS_PER_TOKEN * j) >> 3];  // its 128-dim scale tile (= kc / 8)
            const uint32_t a = dst + uint32_t(kc >> 2) * SUB;  // column block kc / 4
            const int c0 = 2 * (kc & 3);
            u32x4 lo, hi;
            dequant_e4m3x16(f[j], sf, lo, hi);
            st_shared_16(a + swz(tok, c0), lo);
            st_shared_16(a + swz(tok, c0 + 1), hi);
          }
        } else {
          const u32x4 z = {0u, 0u, 0u, 0u};
#pragma unroll
          for (int j = 0; j < NCH; ++j) {
            const int kc = THREADS_PER_TOKEN * j + h;
            const uint32_t a = dst + uint32_t(kc >> 2) * SUB;
            st_shared_16(a + swz(tok, 2 * (kc & 3)), z);
            st_shared_16(a + swz(tok, 2 * (kc & 3) + 1), z);
          }
        }
        cp_async_wait_all();  // the rope (and the first tile's q)
        fence_proxy_async();  // generic stores and cp.async writes -> read by wgmma (async proxy)
        if (q_pending) {
          mbar_arrive(bar_q);
          q_pending = false;
        }
        mbar_arrive(bar_full + 8 * b);
      }
      if (q_pending) cp_async_wait_all();  // no tile: nobody waits for q, but no copy may outlive the CTA
    }
    return;
  }

  // ================= consumer warpgroups =================
  const int ct = tid & 127;
  const int lane = ct & 31;
  const int r0 = 16 * (ct >> 5) + (lane >> 2);  // accumulator rows (heads) r0 and r0 + 8
  const int r1 = r0 + 8;
  const int t4 = lane & 3;
  const bool partial = num_splits > 1;
  const long long rows = p.rows;

  float o[128];  // O[64 heads][256 dims] of this warpgroup: o[4j + e] = (e < 2 ? r0 : r1, 8j + 2 t4 + (e & 1))

  if (wg == 0) {
    // ================= WG0: QK, softmax, O[:, 0:256] =================
    set_max_regs<REG_WG0>();
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    const float scale_log2 = p.sm_scale * 1.4426950408889634f;
    // m: the reference of the exponentials (P = 2^(s - m)), raised only when a tile's max exceeds
    // it by more than kLazyRescale (PRECISE: P <= 2^8 stays exact enough in bf16 hi + lo and fp32),
    // so O and l are rescaled in few tiles; mt: the true running max (max_logits, the split's max).
    // Default precision: 0, the reference is the running max, so the row's largest P is exactly 1
    // in bf16; a stale reference rounds the dominant token's P too, and bf16 P then misses the
    // tolerance ~50x more often (docs/notes/sparse_mla.md, "Default precision").
    constexpr float kLazyRescale = PRECISE ? 8.f : 0.f;
    float m0 = neg_inf(), m1 = neg_inf(), l0 = 0.f, l1 = 0.f, mt0 = neg_inf(), mt1 = neg_inf();
    // RS PV (bf16, and FP8 at 512 threads): P_hi / P_lo (PRECISE) A fragments of the 4 k16 steps,
    // kept live while WG0's PV runs
    uint32_t ph[4][4], pl[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) ph[kk][e] = pl[kk][e] = 0u;
    const uint64_t dq = smem_desc(s_q, 16, 1024);
    if (tile_end > tile_begin) mbar_wait(bar_q, 0);
    if constexpr (!FP8) fence_proxy_async();  // q by cp.async (generic proxy) -> wgmma
    for (int t = tile_begin; t < tile_end; ++t) {
      const int k = t - tile_begin, b = k & 1;
      const uint32_t kvb = s_base + OFF_KV + uint32_t(b) * TILE;
      // Tile t not there yet: finish PV of tile t - 1 and release its buffer before waiting, so
      // the producer can refill it now rather than after tile t has landed and QK(t) is issued.
      // (The vote keeps the warpgroup's wgmma.wait_group uniform.)
      bool released = false;
      if (k > 0 && !bar_and(BAR_WG0_VOTE, 128, mbar_test(bar_full + 8 * b, uint32_t((k >> 1) & 1)))) {
        wgmma_wait<0>();
        mbar_arrive(bar_empty + 8 * (b ^ 1));
        released = true;
      }
      mbar_wait(bar_full + 8 * b, uint32_t((k >> 1) & 1));
      if constexpr (!FP8) fence_proxy_async();  // the tile by cp.async (generic proxy) -> wgmma
      // ---- S = Q K^T: 36 k16 steps over 576 dims
      float s[32];
      const uint64_t dk = smem_desc(kvb, 16, 1024);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 36; ++kk) {
        const uint64_t off = uint64_t((uint32_t(kk >> 2) * SUB + uint32_t(kk & 3) * 32u) >> 4);
        wgmma_m64n64k16_ss(s, dq + off, dk + off, kk > 0 ? 1 : 0);
      }
      wgmma_commit();
      if (k > 0 && !released) {
        wgmma_wait<1>();  // PV of the previous tile is done: release its buffer
        mbar_arrive(bar_empty + 8 * (b ^ 1));
      }
      wgmma_wait<0>();
      fence_regs(s);
      fence_regs(o);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        fence_regs_u(ph[kk]);
        if constexpr (PRECISE) fence_regs_u(pl[kk]);
      }

      // ---- online softmax (base 2); invalid tokens -> -inf
      const int* vf = valid_s + b * TILE_TOKENS;
      float mx0, mx1;
      mask_scale_row_max(s, vf, t4, scale_log2, mx0, mx1);
      mt0 = fmaxf(mt0, mx0);
      mt1 = fmaxf(mt1, mx1);
      // Raise the reference only past kLazyRescale (always from -inf: the first valid tile).
      const bool up0 = mx0 > m0 + kLazyRescale, up1 = mx1 > m1 + kLazyRescale;
      const float mn0 = up0 ? mx0 : m0, mn1 = up1 ? mx1 : m1;
      // nothing valid yet (-inf): subtract 0 so that -inf - -inf never happens
      const float mu0 = mn0 == neg_inf() ? 0.f : mn0, mu1 = mn1 == neg_inf() ? 0.f : mn1;
      const float al0 = up0 ? exp2_ftz(m0 - mu0) : 1.f, al1 = up1 ? exp2_ftz(m1 - mu1) : 1.f;
      m0 = mn0;
      m1 = mn1;
      // ---- P = P_hi (+ P_lo, PRECISE); P_hi (over the tile's rope columns, which QK no longer
      // needs), P_lo and alpha to shared memory for WG1; WG0 keeps P in registers for its RS PV and
      // stores it after.
      const uint32_t sph = kvb + 8 * SUB;
      float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p0 = exp2_ftz(s[4 * j + 0] - mu0), p1 = exp2_ftz(s[4 * j + 1] - mu0);
        const float p2 = exp2_ftz(s[4 * j + 2] - mu1), p3 = exp2_ftz(s[4 * j + 3] - mu1);
        rs0 += p0 + p1;
        rs1 += p2 + p3;
        const uint32_t h01 = pack_bf16x2_rn(p0, p1), h23 = pack_bf16x2_rn(p2, p3);
        ph[j >> 1][2 * (j & 1)] = h01;
        ph[j >> 1][2 * (j & 1) + 1] = h23;
        if constexpr (PRECISE) {
          pl[j >> 1][2 * (j & 1)] = pack_bf16x2_rn(p0 - bf16x2_lo(h01), p1 - bf16x2_hi(h01));
          pl[j >> 1][2 * (j & 1) + 1] = pack_bf16x2_rn(p2 - bf16x2_lo(h23), p3 - bf16x2_hi(h23));
        }
      }
      l0 = l0 * al0 + rs0;
      l1 = l1 * al1 + rs1;
      {
        if (k > 0) bar_sync(BAR_P_FREE, 256);
        // stmatrix.x4 kk: the 8x8 blocks (rows 16 w + [0, 8) / [8, 16), column chunks 2 kk and
        // 2 kk + 1), each lane giving the address of one 16-byte row: lane L that of row (L & 7) +
        // 8 ((L >> 3) & 1) of the warp's 16, chunk 2 kk + (L >> 4). The fragment registers are
        // ph[kk][0..3] in that order (the accumulator layout is stmatrix's).
        const int srow = 16 * (ct >> 5) + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const int chunk = 2 * kk + (lane >> 4);
          stmatrix_x4(sph + swz(srow, chunk), ph[kk]);
          if constexpr (PRECISE) stmatrix_x4(s_plo + swz(srow, chunk), pl[kk]);
        }
      }
      if (t4 == 0) {
        alpha_s[r0] = al0;
        alpha_s[r1] = al1;
      }

      // ---- O[:, 0:256] = alpha O + P_hi V (+ P_lo V) (V MN-major), issued before WG1 may start
      // its PV: WG0's wgmmas enter the tensor pipe first, and WG0 reaches the next tile's QK
      // sooner.
      {
        if (__any_sync(0xffffffffu, up0 || up1)) scale_o_rows(o, al0, al1);
        const uint64_t dv = smem_desc(kvb, 8192, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const uint64_t off = uint64_t((uint32_t(kk) * 2048u) >> 4);
          pv_k16(o, ph[kk], dv + off);
          if constexpr (PRECISE) pv_k16(o, pl[kk], dv + off);
        }
        wgmma_commit();
        fence_proxy_async();  // P written by generic stores, read by WG1's wgmma
      }
      bar_arrive(BAR_P_READY, 256);
    }
    wgmma_wait<0>();
    fence_regs(o);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      fence_regs_u(ph[kk]);
      if constexpr (PRECISE) fence_regs_u(pl[kk]);
    }

    // ---- row sums over the 4 lanes of a row; lse / max_logits; 1/l for WG1
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    // 1 / l (times the attention sink's factor without splits; padding rows read no sink)
    const bool sink = !partial && p.attn_sink != nullptr;
    const float inv0 = mla_output_scale(l0, m0, sink && r0 < HEADS_PER_CTA ? p.attn_sink + (head0 + r0) : nullptr);
    const float inv1 = mla_output_scale(l1, m1, sink && r1 < HEADS_PER_CTA ? p.attn_sink + (head0 + r1) : nullptr);
    if (t4 == 0) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = hh ? r1 : r0;
        const float l = hh ? l1 : l0, m = hh ? m1 : m0, mt = hh ? mt1 : mt0;
        invl_s[r] = hh ? inv1 : inv0;
        if (r >= HEADS_PER_CTA) continue;  // padding row
        const long long head = row * H_Q + head0 + r;
        if (!partial) {
          p.lse[head] = l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : pos_inf();
          if (p.max_logits != nullptr) p.max_logits[head] = l > 0.f ? mt * 0.6931471805599453f : neg_inf();
        } else {
          const long long part_row = (long long)split * rows * H_Q + head;
          p.lse_part[part_row] = l > 0.f ? m + log2f(l) : neg_inf();
          p.max_part[part_row] = l > 0.f ? mt : neg_inf();
        }
      }
    }
    bar_arrive(BAR_EPILOGUE, 256);
    // no tile: q's copies may still be landing in the staging area
    if (!partial && tile_end > tile_begin) store_o_staged(p, o, 0, s_q, inv0, inv1, row, head0);
    else store_o(p, o, 0, r0, r1, t4, inv0, inv1, row, head0, split, partial);
  } else {
    // ================= WG1: O[:, 256:512] =================
    set_max_regs<REG_WG1>();
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    const uint64_t dpl = smem_desc(s_plo, 16, 1024);
    for (int t = tile_begin; t < tile_end; ++t) {
      const int k = t - tile_begin, b = k & 1;
      const uint32_t kvb = s_base + OFF_KV + uint32_t(b) * TILE;
      mbar_wait(bar_full + 8 * b, uint32_t((k >> 1) & 1));
      if constexpr (!FP8) fence_proxy_async();  // the tile by cp.async (generic proxy) -> wgmma
      bar_sync(BAR_P_READY, 256);
      const float a0 = alpha_s[r0], a1 = alpha_s[r1];
      if (__any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) scale_o_rows(o, a0, a1);
      pv_half_ss(o, smem_desc(kvb + 8 * SUB, 16, 1024), dpl, smem_desc(kvb + 4 * SUB, 8192, 1024));
      wgmma_wait<0>();
      fence_regs(o);
      if (t + 1 < tile_end) bar_arrive(BAR_P_FREE, 256);
      mbar_arrive(bar_empty + 8 * b);
    }
    bar_sync(BAR_EPILOGUE, 256);
    // WG0's QKs completed before its BAR_EPILOGUE arrival; full[0] covered the q copies.
    if (!partial && tile_end > tile_begin) store_o_staged(p, o, 1, s_q, invl_s[r0], invl_s[r1], row, head0);
    else store_o(p, o, 256, r0, r1, t4, invl_s[r0], invl_s[r1], row, head0, split, partial);
  }

}
