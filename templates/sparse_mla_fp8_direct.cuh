// sparse_mla_fp8_direct.cuh — sparse MLA (§3) over the 656-byte FP8 KV cache (§4) at 8 or 16 heads
// a CTA, with the raw tokens as tensor-core operands: no dequantized tile.
//
// Contract: sparse_mla_mma_sync.cuh's (S, softmax, out, lse, max_logits, attn_sink, invalid
// entries, split-KV partials). Spec: kernel mma_sync, producer_warps 2, kv_dtype fp8, heads_per_cta
// 8 or 16, precise 0.
//
// Why: the 512-thread FP8 kernel dequantizes every token into a bf16 tile in shared memory, and at
// 16 heads that pass sets the tile time (its producers issue more instructions than the MMA warps;
// docs/notes/sparse_mla.md, "Eleventh session"). Here two producer warps only bulk-copy the raw
// tokens into 4 tiles, and the MMA warps dequantize the e4m3 codes in registers after ldmatrix.
//
// One CTA = one query row x HEADS_PER_CTA heads in one m16 tile (h 8: rows 8..15 of q are zero);
// grid (rows, H_Q / HEADS_PER_CTA, num_splits); split s takes tiles [s T / ns, (s + 1) T / ns).
//  QK: warp w: tokens 16 (w % 4) .. + 16 (two n8 tiles) over half the dims (kh = w / 4): latent
//      scale blocks 2 kh, 2 kh + 1 and rope k-steps 2 kh, 2 kh + 1 (bf16 MMA); the second half's S
//      reaches the first through shared memory. K's fragment: ldmatrix of raw rows gives a lane
//      bytes 4 t4 .. 4 t4 + 3 of a 16-dim chunk of its token, dequantized in registers to §4's
//      bf16(e4m3 x scale) (the reference's K, bit for bit); the low pair is k = 2 t4, 2 t4 + 1 of
//      the MMA, the high pair k = 2 t4 + 8, 9. q's latent dims are stored in that order (chunk 2c:
//      dims 16c + {0,1,4,5,8,9,12,13}; chunk 2c + 1: 16c + {2,3,6,7,10,11,14,15}).
//  softmax: base 2, row maxima through shared memory, P (bf16) owned by the first half's warps, as
//      in the mma_sync kernel.
//  PV: warp w owns dims 64 w .. + 64 (scale block w / 2). V's fragment: ldmatrix.trans of 8 tokens x
//      16 bytes gives a lane tokens 2 t4, 2 t4 + 1 at dims 2 g, 2 g + 1; one byte permute splits them
//      into the pairs of an n8 tile of the group's even dims and one of its odd dims, each
//      dequantized in registers with its token's scale. So a lane's accumulators of a 16-dim group
//      are dims 4 t4 .. 4 t4 + 3.
// K, V and P are the reference's values bit for bit (§4's bf16(e4m3 x scale), bf16 P).
// Producer warps 8, 9: thread p bulk-copies token p of every tile into buffer k % 4 once the MMA
// warps released it (an empty mbarrier of 256 arrivals); an invalid token's row is zeroed (so are
// its scales).
//
// Constants: NSAJIT_H_Q, NSAJIT_TOPK, NSAJIT_HEADS_PER_CTA, NSAJIT_KV_FP8 (1), NSAJIT_PRECISE (0),
// NSAJIT_THREADS (320), NSAJIT_BLOCK_TOKENS (64), NSAJIT_DYNAMIC_SMEM.
#pragma once
#include "sparse_mla_mma_common.cuh"

namespace mla {

constexpr int kDimQK = kMlaDimQK;
constexpr int kDimV = kMlaDimV;
constexpr int kChunksQK = 72;  // 16-byte chunks of a q row
constexpr unsigned ROW = kFp8KvTokenBytes;  // 656: 41 x 16 bytes; 8 rows' 16-byte columns fall in 8 bank groups

constexpr int H_Q = NSAJIT_H_Q;
constexpr int TOPK = NSAJIT_TOPK;
constexpr int HEADS_PER_CTA = NSAJIT_HEADS_PER_CTA;
constexpr int TILE_TOKENS = NSAJIT_BLOCK_TOKENS;
static_assert(NSAJIT_KV_FP8 == 1 && NSAJIT_PRECISE == 0, "FP8 KV at the default precision");
static_assert(NSAJIT_THREADS == 320 && TILE_TOKENS == 64, "8 MMA warps, 2 producer warps, 64-token tiles");
static_assert(HEADS_PER_CTA == 8 || HEADS_PER_CTA == 16, "HEADS_PER_CTA: 8 or 16 (one m16 tile)");
static_assert(H_Q % HEADS_PER_CTA == 0 && TOPK % TILE_TOKENS == 0, "H_Q: multiple of HEADS_PER_CTA; TOPK: of 64");

constexpr int CTHREADS = 256;  // the MMA warps' threads
constexpr int MROWS = 16;
constexpr int NBUF = 4;        // raw tiles in flight
constexpr int BLOCK_CHUNKS = 8;  // 16-dim fp8 chunks a block
constexpr unsigned TILE_BYTES = TILE_TOKENS * ROW;

// Shared memory layout (bytes).
constexpr unsigned OFF_KV = 0;                                      // NBUF raw tiles [64][656]
constexpr unsigned OFF_Q = OFF_KV + NBUF * TILE_BYTES;               // [16][576] bf16, sw576 (latent dims permuted)
constexpr unsigned OFF_P = OFF_Q + MROWS * kDimQK * 2;               // [16][64] bf16 P, sw64
constexpr unsigned OFF_RED = OFF_P + MROWS * TILE_TOKENS * 2;         // [8 warps][16] fp32: row maxima, then sums
constexpr unsigned OFF_SX = OFF_RED + 8 * MROWS * 4;                 // [4 token groups][2 n8][4][32 lanes] fp32
constexpr unsigned OFF_VALID = OFF_SX + 4 * 2 * 4 * 32 * 4;          // [NBUF][64] int
constexpr unsigned OFF_MBAR = OFF_VALID + NBUF * TILE_TOKENS * 4;    // full[NBUF], empty[NBUF]
constexpr unsigned SMEM_BYTES = OFF_MBAR + 2 * NBUF * 8;
static_assert(SMEM_BYTES == sparse_mla_fp8_direct_smem_bytes(), "the layout must match the plan");
static_assert(SMEM_BYTES == NSAJIT_DYNAMIC_SMEM, "host and kernel disagree on shared memory size");

struct alignas(8) u32x2 {
  uint32_t x, y;
};

// A barrier of the MMA warps (the producer warps never join one after the prologue).
NSAJIT_DEVICE void mma_threads_sync() { bar_sync(15, CTHREADS); }

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
  float* red = reinterpret_cast<float*>(smem + OFF_RED);
  int* valid_s = reinterpret_cast<int*>(smem + OFF_VALID);
  auto full_mbar = [&](int b) { return s_base + OFF_MBAR + 8u * unsigned(b); };
  auto empty_mbar = [&](int b) { return s_base + OFF_MBAR + 8u * unsigned(NBUF + b); };

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;  // fragment row
  const int t4 = lane & 3;  // fragment column pair
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

  // ---- q of this CTA's heads -> smem by the MMA threads (rows >= HEADS_PER_CTA zero)
  if (tid < CTHREADS) {
    const bf16_t* q_g = p.q + (row * H_Q + head0) * kDimQK;
    for (int c = tid; c < MROWS * kChunksQK; c += CTHREADS) {
      const int r = c / kChunksQK, k = c % kChunksQK;
      if (r < HEADS_PER_CTA) cp_async_16(s_q + sw576(r, k), q_g + r * kDimQK + k * 8);
      else st_shared_16(s_q + sw576(r, k), u32x4{0u, 0u, 0u, 0u});
    }
    cp_async_commit();
  }
  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < NBUF; ++b) {
      mbar_init(full_mbar(b), TILE_TOKENS);  // one arrival a producer thread (with its bytes)
      mbar_init(empty_mbar(b), CTHREADS);    // every MMA thread, after its last read of the tile
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (tid >= CTHREADS) {
    // ---- producer thread pt: token pt of every tile of the split. The first NBUF tiles' index
    // entries are loaded together (their copies go out at once); then each entry a tile ahead.
    const int pt = tid - CTHREADS;
    auto issue = [&](int k, int idx) {
      const int b = k % NBUF;
      const uint32_t dst = s_base + OFF_KV + unsigned(b) * TILE_BYTES + unsigned(pt) * ROW;
      valid_s[b * TILE_TOKENS + pt] = idx >= 0;
      if (idx >= 0) {
        // This thread's zero row of an earlier tile (generic stores) before the copy (async proxy).
        fence_proxy_async();
        mbar_arrive_tx(full_mbar(b), ROW);
        bulk_copy(dst, fp8_kv_token_u32(p.kv_fp8, p.kv_page_stride, p.page_size, idx), ROW, full_mbar(b));
      } else {
#pragma unroll 1
        for (unsigned c = 0; c < ROW / 16; ++c) st_shared_16(dst + 16u * c, u32x4{0u, 0u, 0u, 0u});
        mbar_arrive_tx(full_mbar(b), 0u);  // releases the zeros and the flag to the MMA warps
      }
    };
    int first[NBUF];
#pragma unroll
    for (int k = 0; k < NBUF; ++k)
      first[k] = tile_begin + k < tile_end ? load_index_raw(idx_row, (tile_begin + k) * TILE_TOKENS + pt, n) : -1;
#pragma unroll
    for (int k = 0; k < NBUF; ++k)
      if (tile_begin + k < tile_end) issue(k, valid_index(first[k], p.num_slots));
    int raw = tile_begin + NBUF < tile_end ? load_index_raw(idx_row, (tile_begin + NBUF) * TILE_TOKENS + pt, n) : -1;
    for (int t = tile_begin + NBUF; t < tile_end; ++t) {
      const int k = t - tile_begin;
      const int idx = valid_index(raw, p.num_slots);
      raw = t + 1 < tile_end ? load_index_raw(idx_row, (t + 1) * TILE_TOKENS + pt, n) : -1;
      mbar_wait(empty_mbar(k % NBUF), uint32_t((k / NBUF - 1) & 1));
      issue(k, idx);
    }
    return;
  }

  // ---- q's latent dims in the fragment's order. Thread: head tid / 16, 16-dim groups tid % 16 and
  // tid % 16 + 16.
  cp_async_wait_all();
  mma_threads_sync();
  {
    const int h = tid >> 4, part = tid & 15;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int grp = part + 16 * i;
      const u32x4 a = *reinterpret_cast<const u32x4*>(smem + OFF_Q + sw576(h, 2 * grp));      // dims (0,1) .. (6,7)
      const u32x4 b = *reinterpret_cast<const u32x4*>(smem + OFF_Q + sw576(h, 2 * grp + 1));  // dims (8,9) .. (14,15)
      st_shared_16(s_q + sw576(h, 2 * grp), u32x4{a.x, a.z, b.x, b.z});
      st_shared_16(s_q + sw576(h, 2 * grp + 1), u32x4{a.y, a.w, b.y, b.w});
    }
  }
  mma_threads_sync();

  const float scale_log2 = p.sm_scale * 1.4426950408889634f;
  const int tg = warp & 3;         // QK token group: tokens 16 tg .. + 16
  const int kh = warp >> 2;        // QK half: latent blocks 2 kh, 2 kh + 1, rope steps 2 kh, 2 kh + 1
  const int tok0 = tg * 16;
  const bool owns_s = kh == 0;
  const int dim0 = warp * 64;      // PV: this warp's output dims
  const unsigned pv_scale = unsigned(fp8_kv_scale_offset) + 4u * unsigned(warp >> 1);  // ... and their scale's byte

  float m_run[2] = {neg_inf(), neg_inf()}, l_run[2] = {0.f, 0.f};
  float o[8][4];
#pragma unroll
  for (int nd = 0; nd < 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;

  for (int t = tile_begin; t < tile_end; ++t) {
    const int k = t - tile_begin, buf = k % NBUF;
    const unsigned kv_off = OFF_KV + unsigned(buf) * TILE_BYTES;
    const uint32_t s_kv = s_base + kv_off;
    mbar_wait(full_mbar(buf), uint32_t((k / NBUF) & 1));

    // ---- S of this warp's 16 tokens over its half of the dims
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    const int a_row = lane & 15, a_cadd = lane >> 4;
    {
      // K's scales of this lane's fragment tokens tok0 + 8 nt + g, blocks 2 kh and 2 kh + 1.
      float kscale[2][2];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const u32x4 v = *reinterpret_cast<const u32x4*>(smem + kv_off + unsigned(tok0 + 8 * nt + g) * ROW +
                                                        unsigned(fp8_kv_scale_offset));
        kscale[nt][0] = __uint_as_float(kh ? v.z : v.x);
        kscale[nt][1] = __uint_as_float(kh ? v.w : v.y);
      }
      // Latent: matrix lane / 8 = (token half (lane / 8) % 2, chunk + lane / 16).
      const uint32_t k_lat = s_kv + uint32_t(tok0 + (((lane >> 3) & 1) << 3) + (lane & 7)) * ROW + 16u * uint32_t(lane >> 4);
#pragma unroll
      for (int blk = 0; blk < 2; ++blk) {
#pragma unroll
        for (int j = 0; j < BLOCK_CHUNKS; j += 2) {
          const int c = (2 * kh + blk) * BLOCK_CHUNKS + j;  // chunks c, c + 1
          uint32_t r[4];  // [chunk c + s][n8 tile nt] at 2 s + nt
          ldsm_x4(k_lat + 16u * uint32_t(c), r[0], r[1], r[2], r[3]);
#pragma unroll
          for (int s2 = 0; s2 < 2; ++s2) {
            uint32_t a[4];
            ldsm_x4(s_q + sw576(a_row, 2 * (c + s2) + a_cadd), a[0], a[1], a[2], a[3]);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
              uint32_t h0, h1;
              e4m3x4_to_f16x2x2(r[2 * s2 + nt], h0, h1);
              mma_bf16(s[nt], a, scale_f16x2_to_bf16x2(h0, kscale[nt][blk]), scale_f16x2_to_bf16x2(h1, kscale[nt][blk]));
            }
          }
        }
      }
      // Rope (bf16): matrix lane / 8 = (token half lane / 16, chunk + (lane / 8) % 2).
      const uint32_t k_rope = s_kv + uint32_t(tok0 + ((lane >> 4) << 3) + (lane & 7)) * ROW +
                              uint32_t(fp8_kv_rope_offset) + 16u * uint32_t((lane >> 3) & 1);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int rs = 2 * kh + j;  // rope dims 512 + 16 rs .. + 16
        uint32_t a[4], b[4];
        ldsm_x4(s_q + sw576(a_row, 64 + 2 * rs + a_cadd), a[0], a[1], a[2], a[3]);
        ldsm_x4(k_rope + 32u * uint32_t(rs), b[0], b[1], b[2], b[3]);
        mma_bf16(s[0], a, b[0], b[1]);
        mma_bf16(s[1], a, b[2], b[3]);
      }
    }
    {  // the second half's S -> the warp of the first half
      float* sx = reinterpret_cast<float*>(smem + OFF_SX) + tg * (2 * 4 * 32) + lane;
      if (kh == 1) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sx[(nt * 4 + e) * 32] = s[nt][e];
      }
      mma_threads_sync();
      if (kh == 0) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] += sx[(nt * 4 + e) * 32];
      }
    }

    // ---- online softmax (base 2); the first half's warps own S
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool ok = valid_s[buf * TILE_TOKENS + tok0 + 8 * nt + 2 * t4 + (e & 1)] != 0;
        const float v = ok ? s[nt][e] * scale_log2 : neg_inf();
        s[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    }
    if (owns_s && t4 == 0) {
      red[tg * MROWS + g] = mx[0];
      red[tg * MROWS + g + 8] = mx[1];
    }
    mma_threads_sync();
    mx[0] = mx[1] = neg_inf();  // the second half's warps held partial scores
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      mx[0] = fmaxf(mx[0], red[q * MROWS + g]);
      mx[1] = fmaxf(mx[1], red[q * MROWS + g + 8]);
    }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_new = fmaxf(m_run[h], mx[h]);
      // m_new = -inf: nothing valid yet (o = l = 0): subtract 0 so -inf - -inf never happens.
      const float m_use = m_new == neg_inf() ? 0.f : m_new;
      alpha[h] = exp2_ftz(m_run[h] - m_use);
      m_run[h] = m_new;
      mx[h] = m_use;
    }
    float rs0 = 0.f, rs1 = 0.f;
    if (owns_s) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const float p0 = exp2_ftz(s[nt][0] - mx[0]);
        const float p1 = exp2_ftz(s[nt][1] - mx[0]);
        const float p2 = exp2_ftz(s[nt][2] - mx[1]);
        const float p3 = exp2_ftz(s[nt][3] - mx[1]);
        rs0 += p0 + p1;
        rs1 += p2 + p3;
        const int chunk = (tok0 + 8 * nt) >> 3;
        st_shared_4(s_p + sw64(g, chunk) + 4 * t4, pack_bf16x2_rn(p0, p1));
        st_shared_4(s_p + sw64(g + 8, chunk) + 4 * t4, pack_bf16x2_rn(p2, p3));
      }
    }
    l_run[0] = l_run[0] * alpha[0] + rs0;
    l_run[1] = l_run[1] * alpha[1] + rs1;
#pragma unroll
    for (int nd = 0; nd < 8; ++nd) {
      o[nd][0] *= alpha[0];
      o[nd][1] *= alpha[0];
      o[nd][2] *= alpha[1];
      o[nd][3] *= alpha[1];
    }
    mma_threads_sync();  // P published

    // ---- O += P . V over the tile's 64 tokens, this warp's 64 dims
#pragma unroll
    for (int kk = 0; kk < TILE_TOKENS / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(s_p + sw64(lane & 15, 2 * kk + (lane >> 4)), a[0], a[1], a[2], a[3]);
      // The scales of this lane's fragment tokens 16 kk + 8 half + 2 t4 + {0, 1}.
      float vs[2][2];
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int j = 0; j < 2; ++j)
          vs[half][j] = *reinterpret_cast<const float*>(smem + kv_off + unsigned(kk * 16 + 8 * half + 2 * t4 + j) * ROW + pv_scale);
      // Matrix lane / 8 = (token half (lane / 8) % 2, 16 dims + lane / 16).
      const uint32_t v_row = s_kv + uint32_t(kk * 16 + (((lane >> 3) & 1) << 3) + (lane & 7)) * ROW +
                             uint32_t(dim0) + 16u * uint32_t(lane >> 4);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t r[4];  // [16-dim group 2 j + q][token half] at 2 q + half
        ldsm_x4_t(v_row + 32u * uint32_t(j), r[0], r[1], r[2], r[3]);
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          // bytes (token 2 t4: dims 2 g, 2 g + 1; token 2 t4 + 1: the same) -> (even dim pair | odd dim pair)
          uint32_t ev[2], od[2];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            uint32_t he, ho;
            e4m3x4_to_f16x2x2(__byte_perm(r[2 * q + half], 0u, 0x3120u), he, ho);
            ev[half] = scale2_f16x2_to_bf16x2(he, vs[half][0], vs[half][1]);
            od[half] = scale2_f16x2_to_bf16x2(ho, vs[half][0], vs[half][1]);
          }
          const int nd = 2 * (2 * j + q);
          mma_bf16(o[nd], a, ev[0], ev[1]);
          mma_bf16(o[nd + 1], a, od[0], od[1]);
        }
      }
    }
    // This thread's reads of the tile (generic proxy) before the bulk copies that refill it.
    fence_proxy_async();
    mbar_arrive_plain(empty_mbar(buf));
  }

  // ---- epilogue: total row sums l (over t4 lanes, then over the 8 warps)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  if (t4 == 0) {
    red[warp * MROWS + g] = l_run[0];
    red[warp * MROWS + g + 8] = l_run[1];
  }
  mma_threads_sync();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float a = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) a += red[w * MROWS + g + 8 * h];  // fixed order: the same sum in every warp
    l_run[h] = a;
  }

  const bool partial = num_splits > 1;
  const long long rows = p.rows;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int hl = g + 8 * h;  // head within the CTA
    if (hl >= HEADS_PER_CTA) continue;
    const long long head = row * H_Q + head0 + hl;
    const float l = l_run[h];
    // The sink scales the final output only: a split's partial stays normalised by its own l.
    const float* sink = !partial && p.attn_sink != nullptr ? p.attn_sink + (head0 + hl) : nullptr;
    const float scale = mla_output_scale(l, m_run[h], sink);
    if (!partial) {
      unsigned short* out = p.out + head * kDimV + dim0 + 4 * t4;
#pragma unroll
      for (int q = 0; q < 4; ++q)  // dims dim0 + 16 q + 4 t4 .. + 4: even, odd, even, odd
        *reinterpret_cast<u32x2*>(out + 16 * q) =
            u32x2{pack_bf16x2_rn(o[2 * q][2 * h] * scale, o[2 * q + 1][2 * h] * scale),
                  pack_bf16x2_rn(o[2 * q][2 * h + 1] * scale, o[2 * q + 1][2 * h + 1] * scale)};
      if (warp == 0 && t4 == 0) {
        const float m = m_run[h];
        p.lse[head] = l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : pos_inf();
        if (p.max_logits != nullptr) p.max_logits[head] = l > 0.f ? m * 0.6931471805599453f : neg_inf();
      }
    } else {
      // Workspace: o_part fp32 [splits][rows][H_Q][512] (normalised by this split's l),
      // lse_part / max_part fp32 [splits][rows][H_Q] in base 2 (-inf: no valid token).
      const long long ph = (long long)split * rows * H_Q + head;
      float* out = p.o_part + ph * kDimV + dim0 + 4 * t4;
#pragma unroll
      for (int q = 0; q < 4; ++q)
        *reinterpret_cast<u32x4*>(out + 16 * q) =
            u32x4{__float_as_uint(o[2 * q][2 * h] * scale), __float_as_uint(o[2 * q + 1][2 * h] * scale),
                  __float_as_uint(o[2 * q][2 * h + 1] * scale), __float_as_uint(o[2 * q + 1][2 * h + 1] * scale)};
      if (warp == 0 && t4 == 0) {
        p.lse_part[ph] = l > 0.f ? m_run[h] + log2f(l) : neg_inf();
        p.max_part[ph] = l > 0.f ? m_run[h] : neg_inf();
      }
    }
  }
}
