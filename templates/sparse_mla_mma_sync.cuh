// sparse_mla_mma_sync.cuh — sparse MLA attention over the top-k KV tokens of each query row (§3),
// tensor cores (mma.sync m16n8k16 bf16 -> fp32), bf16 or FP8 (656-byte, §4) KV, optional split-KV.
//
// For query row r and head h, over the valid entries j of indices[r, 0:n) (n = topk_length[r]
// clamped to [0, TOPK], or TOPK):
//   S_j = sm_scale * q[r, h, 0:576] . kv[idx_j, 0:576]
//   out[r, h, :] = sum_j softmax(S)_j * kv[idx_j, 0:512]        (bf16, round to nearest even)
//   lse[r, h]    = ln sum_j exp(S_j); max_logits[r, h] = max_j S_j
//   attn_sink (optional, [H_Q] natural log): out[r, h, :] *= 1 / (1 + exp(attn_sink[h] - lse[r, h]))
//   in this epilogue without splits, in the combine with them; lse and max_logits unchanged.
// An index is valid iff 0 <= idx < num_slots; invalid entries are never dereferenced. A row (or a
// split) with no valid entry gives out 0, lse +inf, max_logits -inf.
//
// Schedule. One CTA = one query row x HEADS_PER_CTA heads (HEADS_PER_CTA = min(H_Q, 64); H_Q 8 runs the heads in one
// 16-row MMA tile whose upper 8 rows are zero). grid = (rows, H_Q / HEADS_PER_CTA, num_splits); split s
// walks 64-token tiles [s*T/ns, (s+1)*T/ns) of the row's T = ceil(n / 64) tiles.
// 8 MMA warps. Warp w = (m-group mg = w % HEAD_GROUPS, column split cs = w / HEAD_GROUPS): HEAD_GROUPS = HEADS_PER_CTA / HEADS_PER_WARP m-groups of HEADS_PER_WARP
// heads (HEADS_PER_WARP = 32, or 16 when HEADS_PER_CTA <= 16), WARPS_PER_GROUP = 8 / HEAD_GROUPS column splits.
//   QK:  warp (mg, cs) computes S for its HEADS_PER_WARP heads x the tile's tokens [cs*TW, cs*TW + TW)
//        (TW = 64 / WARPS_PER_GROUP) over 576 dims: A = q (ldmatrix from smem), B = K (ldmatrix from the tile).
//        With WARPS_PER_GROUP = 8 (up to 32 heads, KSPLIT) warp cs takes 16 tokens (cs % 4) over half of the
//        dims (cs / 4) instead, and the second half's S reaches the first through smem: each q
//        fragment then feeds two MMAs (faster at 16 heads: docs/design/sparse_mla.md).
//   softmax: row maxima are exchanged between the warps of an m-group that own S (all WARPS_PER_GROUP, or
//        with KSPLIT the 4 of the first half) through smem (a CTA barrier, after which the tile's
//        rope columns are free for P_lo); every warp of the group then holds the same running max
//        m; P is published with a named barrier per m-group; each owning thread keeps a partial row
//        sum l of its own columns (summed once, in the epilogue). P (bf16) goes to smem [heads][64].
//   PV:  warp (mg, cs) owns O[HEADS_PER_WARP heads][dims cs*DW .. +DW) (DW = 512 / WARPS_PER_GROUP) in fp32 registers:
//        A = P (ldmatrix), B = V (ldmatrix.trans from the same KV tile).
//   P is rounded to bf16 once (the field's precision, nsa-semantics.md "Tolerances"). PRECISE splits
//        it into bf16 P_hi + P_lo (P_lo over the tile's rope columns, free after QK) and multiplies
//        both with V: bf16 P alone (2^-9 relative) misses the 1e-3 tolerance when a few tokens
//        dominate the softmax.
// KV tiles. bf16 KV (BULK): two tiles; each valid token row (1152 bytes) is one
// cp.async.bulk completing on the tile's mbarrier, issued one tile ahead; rows padded to 1168
// bytes (conflict-free ldmatrix), validity flag and mbarrier in the padding. FP8 KV: the raw
// 656-byte tokens are bulk-copied into NSTAGE staging buffers (2, or 1 for 64 heads or with
// producer warps) and dequantised smem -> smem into a swizzled bf16 tile (one at 256 threads, at
// the start of each tile; two with producer warps): bf16(float(e4m3) * scale), rope copied.
// Invalid tokens are never read: their rows are zeroed.
// Indices are prefetched one tile ahead of their gather. Slot offsets are 64-bit.
// Producer warps (bf16 BULK at 320 threads, up to 32 heads): warps 8 and 9 issue the tiles' copies
// (thread p: token p of every tile), each buffer refilled once the 8 MMA warps released it (an
// "empty" mbarrier of 256 arrivals in the padding of the buffer's row 1); the MMA warps only wait
// and compute. At 256 threads every thread issues its token's copy at the top of each tile, and
// each warp's copies go out one lane at a time (a large share of the stalls).
// FP8 producer warps (512 threads, up to 16 heads): warps 8..15 bulk-copy the raw tokens into one
// staging tile (one mbarrier a warp) and dequantize them into two bf16 tiles; full (256 producer
// arrivals, no bytes) and empty (256 MMA arrivals) mbarriers at OFF_MBAR pass the tiles.
// The math runs in base 2 (scores pre-multiplied by sm_scale * log2 e).
//
// Constants (FamilyTraits::constants): NSAJIT_H_Q, NSAJIT_TOPK, NSAJIT_HEADS_PER_CTA,
// NSAJIT_KV_FP8 (0/1), NSAJIT_PRECISE (0/1: P as bf16 hi + lo), NSAJIT_THREADS (256; 320 or 512 with producer warps),
// NSAJIT_BLOCK_TOKENS (64), NSAJIT_DYNAMIC_SMEM (the host's byte count; checked below against
// this file's layout). Spec tile.kernel = mma_sync; tile.kernel = wgmma renders
// templates/sparse_mla_wgmma.cuh instead.
#pragma once
#include "sparse_mla_mma_common.cuh"

namespace mla {

constexpr int kDimQK = kMlaDimQK;
constexpr int kDimV = kMlaDimV;
constexpr int kChunksQK = 72;  // 16-byte chunks of a bf16 row
constexpr int kFp8Bytes = kFp8KvTokenBytes;

constexpr int H_Q = NSAJIT_H_Q;
constexpr int TOPK = NSAJIT_TOPK;
constexpr int HEADS_PER_CTA = NSAJIT_HEADS_PER_CTA;  // real heads of one CTA
constexpr bool FP8 = NSAJIT_KV_FP8 != 0;
constexpr bool PRECISE = NSAJIT_PRECISE != 0;  // P = P_hi + P_lo (two PV MMAs) instead of bf16 P
constexpr int THREADS = NSAJIT_THREADS;
// Producer warps beside the 8 MMA warps: 2 for bf16 (320 threads: they issue the bulk copies), 8
// for FP8 (512 threads: they copy and dequantize).
constexpr bool PRODUCERS = THREADS == 320 || THREADS == 512;
constexpr int CTHREADS = 256;               // the MMA warps' threads
constexpr int PTHREADS = THREADS - CTHREADS;  // the producer warps' threads
constexpr int TILE_TOKENS = NSAJIT_BLOCK_TOKENS;   // tokens per tile

constexpr int MROWS = HEADS_PER_CTA < 16 ? 16 : HEADS_PER_CTA;  // MMA rows (heads, padded to 16)
constexpr int HEADS_PER_WARP = MROWS >= 32 ? 32 : 16; // heads per warp
constexpr int MT = HEADS_PER_WARP / 16;               // m16 tiles per warp
constexpr int HEAD_GROUPS = MROWS / HEADS_PER_WARP;             // m-groups
constexpr int WARPS = CTHREADS / 32;
constexpr int WARPS_PER_GROUP = WARPS / HEAD_GROUPS;            // column splits (warps per m-group)
// QK with 8 warps per m-group (up to 32 heads): warp cs takes tokens 16 (cs % 4) .. + 16 over half
// of the 576 dims (cs / 4), and the two halves' S are summed through shared memory: each q
// fragment loaded then feeds two MMAs, which halves QK's shared-memory reads of q.
constexpr bool KSPLIT = WARPS_PER_GROUP == 8;
constexpr int QK_GROUPS = KSPLIT ? 4 : WARPS_PER_GROUP;  // token groups in QK
constexpr int TW = TILE_TOKENS / QK_GROUPS;        // tokens per warp in QK
constexpr int NT = TW / 8;                // n8 tiles per warp in QK
constexpr int QK_KSTEPS = (kDimQK / 16) / (KSPLIT ? 2 : 1);  // k16 steps per warp in QK
constexpr int DW = kDimV / WARPS_PER_GROUP;           // output dims per warp in PV
constexpr int NDT = DW / 8;               // n8 tiles per warp in PV

static_assert((THREADS == 256 || PRODUCERS) && TILE_TOKENS == 64, "the tile schedule assumes 8 MMA warps and 64-token tiles");
static_assert(HEADS_PER_CTA == 8 || HEADS_PER_CTA == 16 || HEADS_PER_CTA == 32 || HEADS_PER_CTA == 64, "HEADS_PER_CTA: 8, 16, 32 or 64");
static_assert(H_Q % HEADS_PER_CTA == 0, "H_Q: multiple of HEADS_PER_CTA");
static_assert(TOPK % TILE_TOKENS == 0, "TOPK: multiple of 64");
static_assert(NT == 1 || NT == 2, "QK n-tiles per warp");
static_assert(NDT % 2 == 0, "PV n-tiles per warp come in pairs");

// FP8 at 256 threads: the raw 656-byte tokens of a tile are bulk-copied (one cp.async.bulk per
// token, completing on the stage's mbarrier) into NSTAGE staging buffers, then dequantized
// smem -> smem into the one bf16 tile. 4 threads per token: thread part q dequantizes fp8 chunks
// q + 4c and rope chunks q, q + 4.
// FP8 with producer warps (512 threads): one staging tile, each producer warp's 8 tokens
// bulk-copied into it on the warp's own mbarrier and dequantized by the warp (4 parts a token, as
// above) into two bf16 tiles that the MMA warps consume in turn.
constexpr int NSTAGE = FP8 ? (PRODUCERS || HEADS_PER_CTA == 64 ? 1 : 2) : 0;
constexpr int KV_BUFS = FP8 && !PRODUCERS ? 1 : 2;
constexpr int THREADS_PER_TOKEN = 4;
constexpr int F8_CHUNKS = 8;
constexpr int ROPE_CHUNKS = 2;
constexpr unsigned STAGE_BYTES = TILE_TOKENS * kFp8Bytes;          // 41984

// Shared memory layout (bytes).
// bf16 KV with BULK: each valid token row (1152 contiguous bytes) is one cp.async.bulk copy
// completing on the buffer's mbarrier; rows are padded to 1168 bytes instead of swizzled, and the
// padding holds the token's validity flag (and, in row 0, the buffer's mbarrier; in row 1, with
// producer warps, its "empty" mbarrier).
constexpr bool BULK = !FP8;
static_assert(THREADS != 320 || (BULK && MROWS <= 32), "320 threads: bf16 bulk copies, up to 32 heads (registers)");
static_assert(THREADS != 512 || (FP8 && MROWS <= 16), "512 threads: FP8, up to 16 heads (128 registers a thread)");
constexpr unsigned KV_ROW = BULK ? 1168u : 1152u;
constexpr unsigned TILE_BYTES = TILE_TOKENS * KV_ROW;               // 73728 (74752 with BULK)
constexpr unsigned OFF_KV = 0;                             // KV_BUFS tiles
constexpr unsigned OFF_STAGE = OFF_KV + KV_BUFS * TILE_BYTES;  // fp8: NSTAGE raw tiles
constexpr unsigned OFF_Q = OFF_STAGE + NSTAGE * STAGE_BYTES;   // [MROWS][576]
constexpr unsigned OFF_P = OFF_Q + MROWS * kDimQK * 2;     // [MROWS][64] bf16
constexpr unsigned OFF_RED = OFF_P + MROWS * TILE_TOKENS * 2;       // [WARPS_PER_GROUP][MROWS] fp32
// KSPLIT: the second half's S fragments, [4 token groups][MT][NT][4][32 lanes] fp32.
constexpr unsigned OFF_SX = OFF_RED + WARPS_PER_GROUP * MROWS * 4;
constexpr unsigned SX_BYTES = KSPLIT ? 4u * MT * NT * 4 * 32 * 4 : 0u;
// Validity flags: bf16 [2][64] int (not with BULK); fp8 [1 + NSTAGE][64] (with producers [2][64]).
constexpr unsigned OFF_VALID = OFF_SX + SX_BYTES;
constexpr unsigned VALID_BYTES = BULK ? 0u : (FP8 && !PRODUCERS ? (1u + NSTAGE) * TILE_TOKENS * 4 : 2u * TILE_TOKENS * 4);
// fp8 mbarriers: NSTAGE staging ones; with producers full[2], empty[2], staging[8] (one a producer warp).
constexpr unsigned OFF_MBAR = OFF_VALID + VALID_BYTES;
constexpr unsigned SMEM_BYTES = OFF_MBAR + (FP8 ? (PRODUCERS ? 96u : 8u * NSTAGE) : 0u);
// The plan the host launches with (templates/kernel_params.h).
static_assert(SMEM_BYTES == sparse_mla_mma_sync_smem_bytes(TILE_TOKENS, HEADS_PER_CTA, THREADS, FP8), "the layout must match the plan");
static_assert(SMEM_BYTES == NSAJIT_DYNAMIC_SMEM, "host and kernel disagree on shared memory size");

// KV tile: row r (token, or head for P_lo), 16-byte chunk c.
NSAJIT_DEVICE uint32_t kvo(int r, int c) {
  if constexpr (BULK) return uint32_t(r) * KV_ROW + (uint32_t(c) << 4);
  else return sw576(r, c);
}

// A barrier of the MMA warps (the producer warps never join one after the prologue).
NSAJIT_DEVICE void mma_sync_threads() {
  if constexpr (PRODUCERS) bar_sync(15, CTHREADS);
  else __syncthreads();
}

}  // namespace mla

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS, 1)
nsajit_sparse_mla(const SparseMlaDecodeParams p) {
  using namespace mla;
#if __CUDA_ARCH__ >= 900
  // Lets the split-KV combine (a programmatic dependent) launch now; it waits for this grid.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s_base = smem_u32(smem);
  const uint32_t s_q = s_base + OFF_Q;
  const uint32_t s_p = s_base + OFF_P;
  float* red = reinterpret_cast<float*>(smem + OFF_RED);     // [WARPS_PER_GROUP][MROWS]
  int* valid_s = reinterpret_cast<int*>(smem + OFF_VALID);   // [2][64] (not with BULK)
  auto valid_flag = [&](int buf, int tok) -> int& {
    if constexpr (BULK) return *reinterpret_cast<int*>(smem + OFF_KV + buf * TILE_BYTES + tok * KV_ROW + 1152);
    else return valid_s[buf * TILE_TOKENS + tok];
  };
  // Buffer `buf` filled (bf16: in the padding of its row 0); PRODUCERS: released by the MMA warps
  // (bf16: in the padding of its row 1).
  auto mbar = [&](int buf) -> uint32_t {
    if constexpr (FP8) return s_base + OFF_MBAR + 8 * buf;
    else return s_base + OFF_KV + buf * TILE_BYTES + 1160;
  };
  auto empty_mbar = [&](int buf) -> uint32_t {
    if constexpr (FP8) return s_base + OFF_MBAR + 16 + 8 * buf;
    else return s_base + OFF_KV + buf * TILE_BYTES + KV_ROW + 1160;
  };
  // FP8 producers: producer warp w's staging rows filled (8 tokens, one arrival each).
  auto stage_mbar = [&](int w) -> uint32_t { return s_base + OFF_MBAR + 32 + 8 * w; };

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;  // fragment row
  const int t4 = lane & 3;  // fragment column pair
  const int mg = warp % HEAD_GROUPS;
  const int cs = warp / HEAD_GROUPS;
  const long long row = blockIdx.x;
  const int head0 = blockIdx.y * HEADS_PER_CTA;
  const int split = blockIdx.z;
  const int num_splits = gridDim.z;

  // ---- tile range of this split
  int n = TOPK;
  if (p.topk_length != nullptr) n = min(max(__ldg(p.topk_length + row), 0), TOPK);
  const int tiles = (n + TILE_TOKENS - 1) / TILE_TOKENS;
  const int tile_begin = (int)((long long)tiles * split / num_splits);
  const int tile_end = (int)((long long)tiles * (split + 1) / num_splits);
  const int* idx_row = p.indices + row * TOPK;

  // ---- q of this CTA's heads -> smem (rows >= HEADS_PER_CTA zero).
  {
    const bf16_t* q_g = p.q + (row * H_Q + head0) * kDimQK;
    for (int c = tid; c < MROWS * kChunksQK && tid < CTHREADS; c += CTHREADS) {
      const int r = c / kChunksQK, k = c % kChunksQK;
      if (r < HEADS_PER_CTA) cp_async_16(s_q + sw576(r, k), q_g + r * kDimQK + k * 8);
      else st_shared_16(s_q + sw576(r, k), u32x4{0u, 0u, 0u, 0u});
    }
  }

  // ---- gather machinery: thread = (token tid/4, part tid%4).
  const int g_tok = tid / 4;
  const int g_sub = tid % 4;

  // bf16: issue the copies of one tile (token g_tok) into buffer `buf`.
  auto gather_bf16 = [&](int buf, int idx) {
    const uint32_t dst = s_base + OFF_KV + buf * TILE_BYTES;
    {  // bf16 tiles are always bulk copies (BULK)
      if (g_sub == 0) {
        mbar_arrive_tx(mbar(buf), idx >= 0 ? 1152u : 0u);
        if (idx >= 0) bulk_copy(dst + g_tok * KV_ROW, p.kv + (long long)idx * p.kv_row_stride, 1152u, mbar(buf));
      }
      if (idx < 0) {
#pragma unroll
        for (int i = 0; i < kChunksQK / 4; ++i) st_shared_16(dst + kvo(g_tok, g_sub + 4 * i), u32x4{0u, 0u, 0u, 0u});
      }
    }
  };
  // fp8: the first byte of valid slot idx's 656-byte token in the paged pool.
  auto fp8_token = [&](int idx) -> const unsigned char* { return fp8_kv_token_u32(p.kv_fp8, p.kv_page_stride, p.page_size, idx); };
  // fp8: bulk-copy token g_tok of a tile into staging buffer `st` (invalid: nothing copied).
  auto fp8_mbar = [&](int st) { return s_base + OFF_MBAR + 8 * st; };
  auto fp8_issue = [&](int st, int idx) {
    if (g_sub == 0) {
      valid_s[TILE_TOKENS * (1 + st) + g_tok] = idx >= 0;
      mbar_arrive_tx(fp8_mbar(st), idx >= 0 ? unsigned(kFp8Bytes) : 0u);
      if (idx >= 0)
        bulk_copy(s_base + OFF_STAGE + st * STAGE_BYTES + g_tok * kFp8Bytes, fp8_token(idx), unsigned(kFp8Bytes),
                  fp8_mbar(st));
    }
  };
  // fp8: staging buffer `st` -> bf16 tile 0 (token g_tok, this thread's part); validity -> valid_s[0..63].
  auto fp8_dequant = [&](int st) {
    const uint32_t dst = s_base + OFF_KV;
    const bool ok = valid_s[TILE_TOKENS * (1 + st) + g_tok] != 0;
    if (g_sub == 0) valid_s[g_tok] = ok;
    const unsigned char* src = smem + OFF_STAGE + st * STAGE_BYTES + g_tok * kFp8Bytes;
    if (!ok) {
#pragma unroll
      for (int i = 0; i < kChunksQK / 4; ++i) st_shared_16(dst + kvo(g_tok, g_sub + 4 * i), u32x4{0u, 0u, 0u, 0u});
      return;
    }
    const u32x4 scv = *reinterpret_cast<const u32x4*>(src + 512);
    const float sc[4] = {__uint_as_float(scv.x), __uint_as_float(scv.y), __uint_as_float(scv.z), __uint_as_float(scv.w)};
#pragma unroll
    for (int c = 0; c < F8_CHUNKS; ++c) {
      const int k = g_sub + THREADS_PER_TOKEN * c;       // fp8 chunk: dims [16k, 16k + 16)
      const float sf = sc[(THREADS_PER_TOKEN * c) >> 3];  // its 128-dim tile (compile-time index)
      const u32x4 f = *reinterpret_cast<const u32x4*>(src + 16 * k);
      u32x4 lo, hi;
      dequant_e4m3x16(f, sf, lo, hi);
      st_shared_16(dst + kvo(g_tok, 2 * k), lo);
      st_shared_16(dst + kvo(g_tok, 2 * k + 1), hi);
    }
#pragma unroll
    for (int r = 0; r < ROPE_CHUNKS; ++r)
      st_shared_16(dst + kvo(g_tok, 64 + g_sub + THREADS_PER_TOKEN * r), *reinterpret_cast<const u32x4*>(src + 528 + 16 * (g_sub + THREADS_PER_TOKEN * r)));
  };
  auto tile_index = [&](int tile) { return tile < tile_end ? load_index(idx_row, tile * TILE_TOKENS + g_tok, n, p.num_slots) : -1; };
  // The same, unchecked (valid_index where it is used): the loads a tile ahead.
  auto tile_index_raw = [&](int tile) { return tile < tile_end ? load_index_raw(idx_row, tile * TILE_TOKENS + g_tok, n) : -1; };

  // ---- prologue. bf16: tile tile_begin into buffer 0, indices of tile_begin + 1 in a register. fp8: tiles
  // tile_begin .. tile_begin + NSTAGE - 1 into the staging buffers, indices of tile_begin + NSTAGE in a register. With
  // producer warps, they do this in their own loop below.
  if constexpr (BULK || FP8) {
    if (tid == 0) {
      if constexpr (BULK || PRODUCERS) {
        // bf16: one arrival per token, with its bytes; fp8: every producer thread, once its part is stored
        mbar_init(mbar(0), FP8 ? PTHREADS : TILE_TOKENS);
        mbar_init(mbar(1), FP8 ? PTHREADS : TILE_TOKENS);
        if constexpr (PRODUCERS) {
          mbar_init(empty_mbar(0), CTHREADS);  // every MMA thread, after its last read of the tile
          mbar_init(empty_mbar(1), CTHREADS);
        }
        if constexpr (PRODUCERS && FP8)
          for (int w = 0; w < 8; ++w) mbar_init(stage_mbar(w), 8);
      } else {
#pragma unroll
        for (int st = 0; st < NSTAGE; ++st) mbar_init(fp8_mbar(st), TILE_TOKENS);
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
  }
  if constexpr (PRODUCERS && FP8) {
    if (tid >= CTHREADS) {
      // ---- FP8 producer thread: token 8 w + (lane & 7) of producer warp w, part q = lane >> 3, of
      // every tile (a quarter warp = 8 tokens of one part: its 16-byte loads of the staging rows,
      // 656 bytes apart, fall in 8 distinct bank groups). Part 0 bulk-copies the token's 656 bytes
      // into its staging row, completing on the warp's mbarrier; every part dequantizes its chunks
      // (fp8 chunks q + 4c, c < 8, rope chunks q, q + 4) into buffer k & 1 once the MMA
      // warps released it (tile k - 2); the next tile's copy goes out once the warp's 4 parts have
      // read the row.
      const int pt = tid - CTHREADS;
      const int tok = 8 * (pt >> 5) + (lane & 7), q = lane >> 3;
      const uint32_t stg = s_base + OFF_STAGE + uint32_t(tok) * kFp8Bytes;
      const unsigned char* stg_g = smem + OFF_STAGE + tok * kFp8Bytes;
      const uint32_t stg_bar = stage_mbar(pt >> 5);
      // The token's bytes in the pool, or null (invalid: nothing copied, its row zeroed).
      auto token_src = [&](int idx) -> const unsigned char* { return idx < 0 ? nullptr : fp8_token(idx); };
      auto issue = [&](const unsigned char* src) {
        if (q == 0) {
          mbar_arrive_tx(stg_bar, src != nullptr ? unsigned(kFp8Bytes) : 0u);
          if (src != nullptr) bulk_copy(stg, src, unsigned(kFp8Bytes), stg_bar);
        }
      };
      const unsigned char* src = nullptr;
      int raw = -1;
      if (tile_begin < tile_end) {
        src = token_src(load_index(idx_row, tile_begin * TILE_TOKENS + tok, n, p.num_slots));
        issue(src);
        raw = tile_begin + 1 < tile_end ? load_index_raw(idx_row, (tile_begin + 1) * TILE_TOKENS + tok, n) : -1;
      }
      for (int t = tile_begin; t < tile_end; ++t) {
        const int k = t - tile_begin, b = k & 1;
        const bool ok = src != nullptr;
        const unsigned char* src_next = t + 1 < tile_end ? token_src(valid_index(raw, p.num_slots)) : nullptr;
        raw = t + 2 < tile_end ? load_index_raw(idx_row, (t + 2) * TILE_TOKENS + tok, n) : -1;
        if (k >= 2) mbar_wait(empty_mbar(b), uint32_t(((k >> 1) - 1) & 1));
        const uint32_t dst = s_base + OFF_KV + b * TILE_BYTES;
        if (q == 0) valid_s[b * TILE_TOKENS + tok] = ok;
        mbar_wait(stg_bar, uint32_t(k & 1));
        const u32x4 scv = ok ? *reinterpret_cast<const u32x4*>(stg_g + 512) : u32x4{0u, 0u, 0u, 0u};
        const float sc[4] = {__uint_as_float(scv.x), __uint_as_float(scv.y), __uint_as_float(scv.z), __uint_as_float(scv.w)};
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          const int kc = q + 4 * c;  // fp8 chunk: dims [16 kc, 16 kc + 16)
          u32x4 lo{0u, 0u, 0u, 0u}, hi{0u, 0u, 0u, 0u};
          if (ok) dequant_e4m3x16(*reinterpret_cast<const u32x4*>(stg_g + 16 * kc), sc[kc >> 3], lo, hi);
          st_shared_16(dst + kvo(tok, 2 * kc), lo);
          st_shared_16(dst + kvo(tok, 2 * kc + 1), hi);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int rc = q + 4 * r;
          const u32x4 v = ok ? *reinterpret_cast<const u32x4*>(stg_g + 528 + 16 * rc) : u32x4{0u, 0u, 0u, 0u};
          st_shared_16(dst + kvo(tok, 64 + rc), v);
        }
        // Every part's reads of the row (generic proxy) before the bulk copy that refills it.
        fence_proxy_async();
        __syncwarp();
        if (t + 1 < tile_end) issue(src_next);
        mbar_arrive_plain(mbar(b));  // this thread's part of the tile and its flag, to the MMA warps
        src = src_next;
      }
      return;
    }
  }
  if constexpr (PRODUCERS && BULK) {
    if (tid >= CTHREADS) {
      // ---- producer thread pt: token pt of every tile of the split, into buffer k & 1 once the
      // MMA warps released it (tile k - 2); the index entry loaded a tile ahead, checked here.
      const int pt = tid - CTHREADS;
      int raw = tile_begin < tile_end ? load_index_raw(idx_row, tile_begin * TILE_TOKENS + pt, n) : -1;
      for (int t = tile_begin; t < tile_end; ++t) {
        const int k = t - tile_begin, b = k & 1;
        const int idx = valid_index(raw, p.num_slots);
        raw = t + 1 < tile_end ? load_index_raw(idx_row, (t + 1) * TILE_TOKENS + pt, n) : -1;
        if (k >= 2) mbar_wait(empty_mbar(b), uint32_t(((k >> 1) - 1) & 1));
        const uint32_t dst = s_base + OFF_KV + b * TILE_BYTES + pt * KV_ROW;
        // valid_flag(b, pt), written out: through the lambda ptxas emits different code.
        *reinterpret_cast<int*>(smem + OFF_KV + b * TILE_BYTES + pt * KV_ROW + 1152) = idx >= 0;
        if (idx >= 0) {
          // This thread's zero row of an earlier tile (generic stores) before the copy (async proxy).
          fence_proxy_async();
          mbar_arrive_tx(mbar(b), 1152u);
          bulk_copy(dst, p.kv + (long long)idx * p.kv_row_stride, 1152u, mbar(b));
        } else {
#pragma unroll 1
          for (int c = 0; c < kChunksQK; ++c) st_shared_16(dst + 16u * unsigned(c), u32x4{0u, 0u, 0u, 0u});
          mbar_arrive_tx(mbar(b), 0u);  // releases the zeros and the flag to the MMA warps
        }
      }
      return;
    }
  }
  int idx_next;  // unchecked: bf16: token g_tok of tile t + 1; fp8: of tile t + NSTAGE
  if constexpr (FP8 && !PRODUCERS) {
#pragma unroll
    for (int st = 0; st < NSTAGE; ++st)
      if (tile_begin + st < tile_end) fp8_issue(st, tile_index(tile_begin + st));
    idx_next = tile_index_raw(tile_begin + NSTAGE);
    __syncthreads();  // the staging validity flags written above are read by every part of a token
  } else if constexpr (!PRODUCERS) {
    if (tile_begin < tile_end) {
      const int i0 = tile_index(tile_begin);
      if (g_sub == 0) valid_flag(0, g_tok) = i0 >= 0;
      gather_bf16(0, i0);
    }
    idx_next = tile_index_raw(tile_begin + 1);
  }
  cp_async_commit();

  const float scale_log2 = p.sm_scale * 1.4426950408889634f;

  // Running state. m: base-2 running max of each fragment row (same in every warp of the m-group).
  // l: this thread's partial row sum. o: output accumulators.
  float m_run[MT][2], l_run[MT][2];
  float o[MT][NDT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m_run[mt][0] = m_run[mt][1] = neg_inf();
    l_run[mt][0] = l_run[mt][1] = 0.f;
#pragma unroll
    for (int nd = 0; nd < NDT; ++nd) o[mt][nd][0] = o[mt][nd][1] = o[mt][nd][2] = o[mt][nd][3] = 0.f;
  }
  const int mrow0 = mg * HEADS_PER_WARP;  // first head (smem row) of this warp
  const int tok0 = (cs % QK_GROUPS) * TW;  // first token of this warp in QK
  const int khalf = KSPLIT ? cs / QK_GROUPS : 0;  // KSPLIT: 1 = this warp's S goes to the other half
  const int dim0 = cs * DW;   // first output dim of this warp in PV

  for (int t = tile_begin; t < tile_end; ++t) {
    const int buf = KV_BUFS == 1 ? 0 : (t - tile_begin) & 1;
    const uint32_t s_kv = s_base + OFF_KV + buf * TILE_BYTES;
    if constexpr (FP8 && !PRODUCERS) {
      const int k = t - tile_begin, st = k % NSTAGE;
      asm volatile("cp.async.wait_group 0;" ::: "memory");  // q
      mbar_wait(fp8_mbar(st), uint32_t((k / NSTAGE) & 1));
      fp8_dequant(st);
      // The staging buffer was read through the generic proxy; the bulk copy below refills it.
      fence_proxy_async();
      mma_sync_threads();
      if (t + NSTAGE < tile_end) fp8_issue(st, valid_index(idx_next, p.num_slots));
      idx_next = tile_index_raw(t + NSTAGE + 1);
    } else if constexpr (PRODUCERS) {
      asm volatile("cp.async.wait_group 0;" ::: "memory");  // q
      mbar_wait(mbar(buf), uint32_t(((t - tile_begin) >> 1) & 1));
      mma_sync_threads();  // every MMA thread's part of q
    } else {
      // ---- issue tile t+1
      if (t + 1 < tile_end) {
        const int idx = valid_index(idx_next, p.num_slots);
        if (g_sub == 0) valid_flag(buf ^ 1, g_tok) = idx >= 0;
        gather_bf16(buf ^ 1, idx);
      }
      cp_async_commit();
      idx_next = tile_index_raw(t + 2);
      cp_async_wait_1();
      if constexpr (BULK) mbar_wait(mbar(buf), uint32_t(((t - tile_begin) >> 1) & 1));
      mma_sync_threads();
    }

    // ---- S = q . K^T for this warp's HEADS_PER_WARP heads x TW tokens
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
    {
      const uint32_t a_base = s_q;
      const int a_row = mrow0 + (lane & 15);
      const int a_cadd = lane >> 4;
      const int b_tok = NT == 2 ? tok0 + ((lane >> 4) << 3) + (lane & 7) : tok0 + (lane & 7);
      const int b_cadd = (lane >> 3) & 1;
#pragma unroll 2
      for (int kk = khalf * QK_KSTEPS; kk < (khalf + 1) * QK_KSTEPS; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          ldsm_x4(a_base + sw576(a_row + mt * 16, 2 * kk + a_cadd), a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
        uint32_t b[NT][2];
        if constexpr (NT == 2) {
          ldsm_x4(s_kv + kvo(b_tok, 2 * kk + b_cadd), b[0][0], b[0][1], b[NT - 1][0], b[NT - 1][1]);
        } else {
          ldsm_x2(s_kv + kvo(b_tok, 2 * kk + b_cadd), b[0][0], b[0][1]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma_bf16(s[mt][nt], a[mt], b[nt][0], b[nt][1]);
      }
    }

    if constexpr (KSPLIT) {  // S of the second half of the dims -> the warp of the first half
      float* sx = reinterpret_cast<float*>(smem + OFF_SX) + (cs % QK_GROUPS) * (MT * NT * 4 * 32) + lane;
      if (khalf == 1) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) sx[((mt * NT + nt) * 4 + e) * 32] = s[mt][nt][e];
      }
      mma_sync_threads();
      if (khalf == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] += sx[((mt * NT + nt) * 4 + e) * 32];
      }
    }

    // ---- online softmax (base 2); KSPLIT: the warps of the first half own the tile's S
    const bool owns_s = khalf == 0;
    bool cval[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int c = tok0 + nt * 8 + 2 * t4;
      cval[nt][0] = valid_flag(buf, c) != 0;
      cval[nt][1] = valid_flag(buf, c + 1) != 0;
    }
    float mx[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      mx[mt][0] = mx[mt][1] = neg_inf();
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = cval[nt][e & 1] ? s[mt][nt][e] * scale_log2 : neg_inf();
          s[mt][nt][e] = v;
          mx[mt][e >> 1] = fmaxf(mx[mt][e >> 1], v);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[mt][h] = fmaxf(mx[mt][h], __shfl_xor_sync(0xffffffffu, mx[mt][h], 1));
        mx[mt][h] = fmaxf(mx[mt][h], __shfl_xor_sync(0xffffffffu, mx[mt][h], 2));
      }
    }
    if constexpr (WARPS_PER_GROUP > 1) {
      if (t4 == 0 && owns_s) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          red[cs * MROWS + mrow0 + mt * 16 + g] = mx[mt][0];
          red[cs * MROWS + mrow0 + mt * 16 + g + 8] = mx[mt][1];
        }
      }
      // All MMA warps: after it every one has finished QK, so the tile's rope columns are free for P_lo.
      mma_sync_threads();
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float a0 = neg_inf(), a1 = neg_inf();
#pragma unroll
        for (int c2 = 0; c2 < QK_GROUPS; ++c2) {
          a0 = fmaxf(a0, red[c2 * MROWS + mrow0 + mt * 16 + g]);
          a1 = fmaxf(a1, red[c2 * MROWS + mrow0 + mt * 16 + g + 8]);
        }
        mx[mt][0] = a0;
        mx[mt][1] = a1;
      }
    }
    float alpha[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m_new = fmaxf(m_run[mt][h], mx[mt][h]);
        // m_new = -inf: nothing valid yet (o = l = 0): subtract 0 so -inf - -inf never happens.
        const float m_use = m_new == neg_inf() ? 0.f : m_new;
        alpha[mt][h] = exp2_ftz(m_run[mt][h] - m_use);
        m_run[mt][h] = m_new;
        mx[mt][h] = m_use;
      }
      float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT && owns_s; ++nt) {
        const float p0 = exp2_ftz(s[mt][nt][0] - mx[mt][0]);
        const float p1 = exp2_ftz(s[mt][nt][1] - mx[mt][0]);
        const float p2 = exp2_ftz(s[mt][nt][2] - mx[mt][1]);
        const float p3 = exp2_ftz(s[mt][nt][3] - mx[mt][1]);
        rs0 += p0 + p1;
        rs1 += p2 + p3;
        const int r = mrow0 + mt * 16 + g;
        const int chunk = (tok0 + nt * 8) >> 3;
        // P (P_hi) to the P tile. PRECISE: P = P_hi + P_lo, both bf16, P_lo over the rope columns
        // (dims 512..575) of the KV tile, row = head, which QK no longer needs. bf16 P alone
        // (2^-9 relative) breaks the 1e-3 tolerance when a few tokens dominate the softmax.
        const uint32_t h01 = pack_bf16x2_rn(p0, p1), h23 = pack_bf16x2_rn(p2, p3);
        // One statement order per precision: PRECISE's is the pre-option kernel's (same SASS).
        if constexpr (PRECISE) {
          const uint32_t l01 = pack_bf16x2_rn(p0 - bf16x2_lo(h01), p1 - bf16x2_hi(h01));
          const uint32_t l23 = pack_bf16x2_rn(p2 - bf16x2_lo(h23), p3 - bf16x2_hi(h23));
          st_shared_4(s_p + sw64(r, chunk) + 4 * t4, h01);
          st_shared_4(s_p + sw64(r + 8, chunk) + 4 * t4, h23);
          st_shared_4(s_kv + kvo(r, 64 + chunk) + 4 * t4, l01);
          st_shared_4(s_kv + kvo(r + 8, 64 + chunk) + 4 * t4, l23);
        } else {
          st_shared_4(s_p + sw64(r, chunk) + 4 * t4, h01);
          st_shared_4(s_p + sw64(r + 8, chunk) + 4 * t4, h23);
        }
      }
      l_run[mt][0] = l_run[mt][0] * alpha[mt][0] + rs0;
      l_run[mt][1] = l_run[mt][1] * alpha[mt][1] + rs1;
#pragma unroll
      for (int nd = 0; nd < NDT; ++nd) {
        o[mt][nd][0] *= alpha[mt][0];
        o[mt][nd][1] *= alpha[mt][0];
        o[mt][nd][2] *= alpha[mt][1];
        o[mt][nd][3] *= alpha[mt][1];
      }
    }
    if constexpr (WARPS_PER_GROUP > 1) bar_sync(1 + mg, WARPS_PER_GROUP * 32);
    else __syncwarp();

    // ---- O += P . V over the tile's 64 tokens, this warp's DW dims
#pragma unroll
    for (int kk = 0; kk < TILE_TOKENS / 16; ++kk) {
      uint32_t a[MT][4], al[MT][4];  // al: P_lo (PRECISE)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int pr = mrow0 + mt * 16 + (lane & 15);
        ldsm_x4(s_p + sw64(pr, 2 * kk + (lane >> 4)), a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
        if constexpr (PRECISE) ldsm_x4(s_kv + kvo(pr, 64 + 2 * kk + (lane >> 4)), al[mt][0], al[mt][1], al[mt][2], al[mt][3]);
      }
      const int v_tok = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
      for (int nd = 0; nd < NDT; nd += 2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(s_kv + kvo(v_tok, ((dim0 + nd * 8) >> 3) + (lane >> 4)), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(o[mt][nd], a[mt], b0, b1);
          mma_bf16(o[mt][nd + 1], a[mt], b2, b3);
          if constexpr (PRECISE) {
            mma_bf16(o[mt][nd], al[mt], b0, b1);
            mma_bf16(o[mt][nd + 1], al[mt], b2, b3);
          }
        }
      }
    }

    // Generic-proxy writes to `buf` (zero rows, P_lo) before the bulk copies that refill it.
    if constexpr (BULK) fence_proxy_async();
    if constexpr (PRODUCERS) mbar_arrive_plain(empty_mbar(buf));  // the producers may refill it
    mma_sync_threads();  // buffer `buf`, P and red are rewritten next
  }
  // A split without tiles never waited for q: no copy may outlive the CTA (else a no-op).
  cp_async_wait_all();

  // ---- epilogue: total row sums l (over t4 lanes, then over the WARPS_PER_GROUP warps of the m-group)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[mt][h] += __shfl_xor_sync(0xffffffffu, l_run[mt][h], 1);
      l_run[mt][h] += __shfl_xor_sync(0xffffffffu, l_run[mt][h], 2);
    }
  if constexpr (WARPS_PER_GROUP > 1) {
    if (t4 == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        red[cs * MROWS + mrow0 + mt * 16 + g] = l_run[mt][0];
        red[cs * MROWS + mrow0 + mt * 16 + g + 8] = l_run[mt][1];
      }
    }
    mma_sync_threads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float a0 = 0.f, a1 = 0.f;
#pragma unroll
      for (int c2 = 0; c2 < WARPS_PER_GROUP; ++c2) {  // fixed order: the same sum in every warp
        a0 += red[c2 * MROWS + mrow0 + mt * 16 + g];
        a1 += red[c2 * MROWS + mrow0 + mt * 16 + g + 8];
      }
      l_run[mt][0] = a0;
      l_run[mt][1] = a1;
    }
  }

  const bool partial = num_splits > 1;
  const long long rows = p.rows;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int hl = mrow0 + mt * 16 + g + 8 * h;  // head within the CTA
      if (hl >= HEADS_PER_CTA) continue;
      const long long head = row * H_Q + head0 + hl;
      const float l = l_run[mt][h];
      // The sink scales the final output only: a split's partial stays normalised by its own l.
      const float* sink = !partial && p.attn_sink != nullptr ? p.attn_sink + (head0 + hl) : nullptr;
      const float inv_l = mla_output_scale(l, m_run[mt][h], sink);
      if (!partial) {
        unsigned short* out = p.out + head * kDimV + dim0 + 2 * t4;
#pragma unroll
        for (int nd = 0; nd < NDT; ++nd)
          *reinterpret_cast<uint32_t*>(out + nd * 8) =
              pack_bf16x2_rn(o[mt][nd][2 * h] * inv_l, o[mt][nd][2 * h + 1] * inv_l);
        if (cs == 0 && t4 == 0) {
          const float m = m_run[mt][h];
          p.lse[head] = l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : pos_inf();
          if (p.max_logits != nullptr) p.max_logits[head] = l > 0.f ? m * 0.6931471805599453f : neg_inf();
        }
      } else {
        // Workspace: o_part fp32 [splits][rows][H_Q][512] (normalised by this split's l),
        // lse_part / max_part fp32 [splits][rows][H_Q] in base 2 (-inf: no valid token).
        const long long ph = (long long)split * rows * H_Q + head;
        float* out = p.o_part + ph * kDimV + dim0 + 2 * t4;
#pragma unroll
        for (int nd = 0; nd < NDT; ++nd)
          *reinterpret_cast<f32x2*>(out + nd * 8) = f32x2{o[mt][nd][2 * h] * inv_l, o[mt][nd][2 * h + 1] * inv_l};
        if (cs == 0 && t4 == 0) {
          p.lse_part[ph] = l > 0.f ? m_run[mt][h] + log2f(l) : neg_inf();
          p.max_part[ph] = l > 0.f ? m_run[mt][h] : neg_inf();
        }
      }
    }
  }
}
