// sparse_mla_decode.cuh — sparse MLA attention over the top-k KV tokens of each query row (§3).
//
// For query row r and head h, over the valid entries j of indices[r, 0:n) (n = topk_length[r]
// clamped to [0, TOPK], or TOPK):
//   S_j = sm_scale * q[r, h, 0:576] . kv[idx_j, 0:576]
//   out[r, h, :] = sum_j softmax(S)_j * kv[idx_j, 0:512]        (bf16, round to nearest even)
//   lse[r, h]    = ln sum_j exp(S_j)                             (fp32; +inf when no j is valid)
// An index is valid iff 0 <= idx < num_slots; invalid entries are never dereferenced.
//
// Schedule: one CTA per (query row, group of HEADS_PER_CTA heads); grid (rows, H_Q / HEADS_PER_CTA).
// q of the CTA's heads is staged in shared memory once. The row's indices are walked in blocks of
// BLOCK_TOKENS; per block:
//   1. gather   all threads: cp.async the valid KV rows (16-byte chunks) into kv_s, zero-fill the
//               invalid ones (blocks with no valid entry are skipped entirely).
//   2. scores   warp w owns heads [w * HEADS_PER_WARP, ...) of the CTA and every token of the block
//               (lane l: tokens l, l + 32, ...): fp32 dot products on CUDA cores, then the online
//               softmax of its heads within the warp (running max m and sum l in registers).
//               Probabilities go to p_s[token][head], the rescale factor of each head to alpha_s.
//   3. PV       thread t owns 8 output dims (one 16-byte chunk of V) of HEADS_PER_THREAD heads:
//               o = o * alpha + sum_token p * v, in fp32 registers.
// Finally o / l is written as bf16 and lse = ln2 * (m + log2 l) by the owning warp.
// The math runs in base 2 (scores pre-multiplied by sm_scale * log2 e) so exp is one ex2.
// Tensor-core MMA and split-KV are later work; this version favours clarity.
//
// Constants (FamilyTraits::constants): NSAJIT_H_Q, NSAJIT_TOPK, NSAJIT_THREADS,
// NSAJIT_BLOCK_TOKENS, NSAJIT_HEADS_PER_CTA, NSAJIT_DYNAMIC_SMEM (the host's byte count; checked
// below against this file's layout so the two can never disagree).
#pragma once

namespace mla {

constexpr int kDimQK = 576;  // 512 latent + 64 rope
constexpr int kDimV = 512;   // V = the latent part of the KV row
constexpr int kChunkElems = 8;                     // bf16 per 16-byte chunk
constexpr int kChunksQK = kDimQK / kChunkElems;    // 72
constexpr int kChunksV = kDimV / kChunkElems;      // 64

constexpr int H_Q = NSAJIT_H_Q;
constexpr int TOPK = NSAJIT_TOPK;
constexpr int THREADS = NSAJIT_THREADS;
constexpr int BLOCK_TOKENS = NSAJIT_BLOCK_TOKENS;
constexpr int HEADS = NSAJIT_HEADS_PER_CTA;  // heads of one CTA

constexpr int WARPS = THREADS / 32;
constexpr int HEADS_PER_WARP = HEADS / WARPS;         // score phase
constexpr int TOKENS_PER_LANE = BLOCK_TOKENS / 32;    // score phase
constexpr int HEAD_GROUPS = THREADS / kChunksV;       // PV phase: threads [64g, 64g+64) = group g
constexpr int HEADS_PER_THREAD = HEADS / HEAD_GROUPS; // PV phase

static_assert(THREADS % 64 == 0 && THREADS >= 128, "THREADS: multiple of 64, >= 128");
static_assert(HEADS % WARPS == 0, "every warp owns the same number of heads");
static_assert(HEADS % HEAD_GROUPS == 0, "every PV thread owns the same number of heads");
static_assert(BLOCK_TOKENS % 32 == 0 && BLOCK_TOKENS <= THREADS, "BLOCK_TOKENS: multiple of 32, <= THREADS");
static_assert(TOPK % BLOCK_TOKENS == 0, "TOPK: multiple of BLOCK_TOKENS");
static_assert(H_Q % HEADS == 0, "H_Q: multiple of HEADS_PER_CTA");

// Shared memory layout (bytes). KV rows are padded by one chunk (576 -> 584 elements, 1168 bytes =
// 292 words): rows then start 4 banks apart, so the 16-byte loads of 8 consecutive rows at one
// column (score phase, lanes = tokens) hit 32 distinct banks.
constexpr int KV_STRIDE = kDimQK + kChunkElems;  // elements per staged KV row
constexpr int P_STRIDE = HEADS + 4;              // floats per token in p_s (16-byte aligned rows)
constexpr unsigned OFF_KV = 0;
constexpr unsigned OFF_Q = OFF_KV + BLOCK_TOKENS * KV_STRIDE * 2;
constexpr unsigned OFF_P = OFF_Q + HEADS * kDimQK * 2;
constexpr unsigned OFF_ALPHA = OFF_P + BLOCK_TOKENS * P_STRIDE * 4;
constexpr unsigned OFF_L = OFF_ALPHA + HEADS * 4;
constexpr unsigned OFF_IDX = OFF_L + HEADS * 4;
constexpr unsigned SMEM_BYTES = OFF_IDX + BLOCK_TOKENS * 4;
// Must match generator/families/sparse_mla_decode.cpp (sparse_mla_decode_smem_bytes).
static_assert(SMEM_BYTES == NSAJIT_DYNAMIC_SMEM, "host and kernel disagree on shared memory size");

struct alignas(16) f32x4 {
  float x, y, z, w;
};

NSAJIT_DEVICE float neg_inf() { return __uint_as_float(0xff800000u); }
NSAJIT_DEVICE float pos_inf() { return __uint_as_float(0x7f800000u); }

NSAJIT_DEVICE uint32_t smem_addr(const void* p) {
  uint32_t a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// 16-byte global -> shared copy that bypasses L1 (.cg): KV rows are shared between the CTAs of
// one query row (and rows of one request) through L2, never reused within a CTA.
NSAJIT_DEVICE void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(smem)), "l"(gmem)
               : "memory");
}
NSAJIT_DEVICE void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
}

// Eight bf16 of a 16-byte chunk to floats.
NSAJIT_DEVICE void unpack8(const u32x4& c, float (&f)[8]) {
  f[0] = bf16x2_lo(c.x); f[1] = bf16x2_hi(c.x);
  f[2] = bf16x2_lo(c.y); f[3] = bf16x2_hi(c.y);
  f[4] = bf16x2_lo(c.z); f[5] = bf16x2_hi(c.z);
  f[6] = bf16x2_lo(c.w); f[7] = bf16x2_hi(c.w);
}

NSAJIT_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(float_to_bf16(lo)) | (uint32_t(float_to_bf16(hi)) << 16);
}

}  // namespace mla

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS)
nsajit_sparse_mla_decode(const SparseMlaDecodeParams p) {
  using namespace mla;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* kv_s = reinterpret_cast<bf16_t*>(smem + OFF_KV);     // [BLOCK_TOKENS][KV_STRIDE]
  bf16_t* q_s = reinterpret_cast<bf16_t*>(smem + OFF_Q);       // [HEADS][576]
  float* p_s = reinterpret_cast<float*>(smem + OFF_P);         // [BLOCK_TOKENS][P_STRIDE]
  float* alpha_s = reinterpret_cast<float*>(smem + OFF_ALPHA); // [HEADS] rescale of this block
  float* l_s = reinterpret_cast<float*>(smem + OFF_L);         // [HEADS] running softmax sum
  int* idx_s = reinterpret_cast<int*>(smem + OFF_IDX);         // [BLOCK_TOKENS] slot or -1

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const long long row = blockIdx.x;
  const int head0 = blockIdx.y * HEADS;  // first head of this CTA

  // ---- prologue: stage q of this CTA's heads (contiguous in global: [row, head0 .. head0+HEADS)).
  const bf16_t* q_g = p.q + (row * H_Q + head0) * kDimQK;
  for (int c = tid; c < HEADS * kChunksQK; c += THREADS)
    cp_async_16(q_s + c * kChunkElems, q_g + c * kChunkElems);
  if (tid < HEADS) l_s[tid] = 0.f;
  cp_async_wait_all();
  __syncthreads();

  int n = TOPK;
  if (p.topk_length != nullptr) n = min(max(p.topk_length[row], 0), TOPK);
  const int* idx_g = p.indices + row * TOPK;
  const float scale_log2 = p.sm_scale * 1.4426950408889634f;  // scores in base 2

  // Score-phase state: the running max (base 2) and sum of the warp's heads; every lane holds the
  // same copy. m = -inf until the head has seen a valid token.
  float m_run[HEADS_PER_WARP], l_run[HEADS_PER_WARP];
#pragma unroll
  for (int h = 0; h < HEADS_PER_WARP; ++h) {
    m_run[h] = neg_inf();
    l_run[h] = 0.f;
  }

  // PV-phase state: output accumulators of HEADS_PER_THREAD heads x 8 dims.
  const int v_chunk = tid % kChunksV;                 // dims [8 * v_chunk, 8 * v_chunk + 8)
  const int pv_head0 = (tid / kChunksV) * HEADS_PER_THREAD;  // warp-uniform: p_s reads broadcast
  float o[HEADS_PER_THREAD][kChunkElems];
#pragma unroll
  for (int h = 0; h < HEADS_PER_THREAD; ++h)
#pragma unroll
    for (int i = 0; i < kChunkElems; ++i) o[h][i] = 0.f;

  for (int t0 = 0; t0 < n; t0 += BLOCK_TOKENS) {
    // ---- 1. indices of this block: anything outside [0, num_slots), or past n, becomes -1.
    bool valid = false;
    if (tid < BLOCK_TOKENS) {
      const int j = t0 + tid;
      const int idx = j < n ? idx_g[j] : -1;
      valid = idx >= 0 && (long long)idx < p.num_slots;
      idx_s[tid] = valid ? idx : -1;
    }
    // A block without a valid entry changes nothing; skip it (uniform: every thread sees the OR).
    if (!__syncthreads_or(valid)) continue;

    // ---- 1b. gather the block's KV rows; invalid rows become zeros and are never read.
    for (int c = tid; c < BLOCK_TOKENS * kChunksQK; c += THREADS) {
      const int t = c / kChunksQK;
      const int k = c % kChunksQK;
      bf16_t* dst = kv_s + t * KV_STRIDE + k * kChunkElems;
      const int idx = idx_s[t];
      if (idx >= 0) {
        cp_async_16(dst, p.kv + (long long)idx * p.kv_row_stride + k * kChunkElems);
      } else {
        *reinterpret_cast<u32x4*>(dst) = u32x4{0u, 0u, 0u, 0u};
      }
    }
    cp_async_wait_all();
    __syncthreads();

    // ---- 2. scores of the warp's heads x the block's tokens, then the online softmax.
    {
      float acc[HEADS_PER_WARP][TOKENS_PER_LANE];
#pragma unroll
      for (int h = 0; h < HEADS_PER_WARP; ++h)
#pragma unroll
        for (int t = 0; t < TOKENS_PER_LANE; ++t) acc[h][t] = 0.f;

      const bf16_t* q_w = q_s + warp * HEADS_PER_WARP * kDimQK;
#pragma unroll 2
      for (int k = 0; k < kChunksQK; ++k) {
        float kvf[TOKENS_PER_LANE][kChunkElems];
#pragma unroll
        for (int t = 0; t < TOKENS_PER_LANE; ++t)
          unpack8(*reinterpret_cast<const u32x4*>(kv_s + (lane + 32 * t) * KV_STRIDE + k * kChunkElems),
                  kvf[t]);
#pragma unroll
        for (int h = 0; h < HEADS_PER_WARP; ++h) {
          float qf[kChunkElems];  // same address for the whole warp: a broadcast
          unpack8(*reinterpret_cast<const u32x4*>(q_w + h * kDimQK + k * kChunkElems), qf);
#pragma unroll
          for (int t = 0; t < TOKENS_PER_LANE; ++t)
#pragma unroll
            for (int i = 0; i < kChunkElems; ++i) acc[h][t] = fmaf(qf[i], kvf[t][i], acc[h][t]);
        }
      }

      bool tok_valid[TOKENS_PER_LANE];
#pragma unroll
      for (int t = 0; t < TOKENS_PER_LANE; ++t) tok_valid[t] = idx_s[lane + 32 * t] >= 0;

#pragma unroll
      for (int h = 0; h < HEADS_PER_WARP; ++h) {
        float s[TOKENS_PER_LANE];
        float block_max = neg_inf();
#pragma unroll
        for (int t = 0; t < TOKENS_PER_LANE; ++t) {
          s[t] = tok_valid[t] ? acc[h][t] * scale_log2 : neg_inf();
          block_max = fmaxf(block_max, s[t]);
        }
        const float m_new = fmaxf(m_run[h], warp_max(block_max));
        // Guarded: -inf - -inf would be NaN. An old max of -inf means nothing accumulated yet
        // (o = 0, l = 0), so any factor works; 0 keeps it exact. A -inf score has p = 0. When
        // either guard is false, m_new is finite.
        const float alpha = m_run[h] == neg_inf() ? 0.f : exp2f(m_run[h] - m_new);
        float sum = 0.f;
#pragma unroll
        for (int t = 0; t < TOKENS_PER_LANE; ++t) {
          const float pr = s[t] == neg_inf() ? 0.f : exp2f(s[t] - m_new);
          p_s[(lane + 32 * t) * P_STRIDE + warp * HEADS_PER_WARP + h] = pr;
          sum += pr;
        }
        l_run[h] = l_run[h] * alpha + warp_sum(sum);
        m_run[h] = m_new;
        if (lane == 0) {
          alpha_s[warp * HEADS_PER_WARP + h] = alpha;
          l_s[warp * HEADS_PER_WARP + h] = l_run[h];
        }
      }
    }
    __syncthreads();

    // ---- 3. o = o * alpha + P . V over the block's tokens (invalid tokens have p = 0, v = 0).
#pragma unroll
    for (int h = 0; h < HEADS_PER_THREAD; ++h) {
      const float a = alpha_s[pv_head0 + h];
#pragma unroll
      for (int i = 0; i < kChunkElems; ++i) o[h][i] *= a;
    }
#pragma unroll 4
    for (int t = 0; t < BLOCK_TOKENS; ++t) {
      float vf[kChunkElems];
      unpack8(*reinterpret_cast<const u32x4*>(kv_s + t * KV_STRIDE + v_chunk * kChunkElems), vf);
      const float* p_t = p_s + t * P_STRIDE + pv_head0;
      float pr[HEADS_PER_THREAD];
      if constexpr (HEADS_PER_THREAD % 4 == 0) {
#pragma unroll
        for (int h = 0; h < HEADS_PER_THREAD; h += 4) {
          const f32x4 v4 = *reinterpret_cast<const f32x4*>(p_t + h);
          pr[h] = v4.x; pr[h + 1] = v4.y; pr[h + 2] = v4.z; pr[h + 3] = v4.w;
        }
      } else {
#pragma unroll
        for (int h = 0; h < HEADS_PER_THREAD; ++h) pr[h] = p_t[h];
      }
#pragma unroll
      for (int h = 0; h < HEADS_PER_THREAD; ++h)
#pragma unroll
        for (int i = 0; i < kChunkElems; ++i) o[h][i] = fmaf(pr[h], vf[i], o[h][i]);
    }
    __syncthreads();  // kv_s, p_s, alpha_s are rewritten by the next block
  }

  // ---- epilogue. l = 0 means no valid token: out = 0 (o is exactly 0), lse = +inf.
#pragma unroll
  for (int h = 0; h < HEADS_PER_THREAD; ++h) {
    const float l = l_s[pv_head0 + h];
    const float inv_l = l > 0.f ? 1.f / l : 0.f;
    u32x4 packed;
    packed.x = pack_bf16x2(o[h][0] * inv_l, o[h][1] * inv_l);
    packed.y = pack_bf16x2(o[h][2] * inv_l, o[h][3] * inv_l);
    packed.z = pack_bf16x2(o[h][4] * inv_l, o[h][5] * inv_l);
    packed.w = pack_bf16x2(o[h][6] * inv_l, o[h][7] * inv_l);
    const long long head = row * H_Q + head0 + pv_head0 + h;
    *reinterpret_cast<u32x4*>(p.out + head * kDimV + v_chunk * kChunkElems) = packed;
  }
  if (lane == 0) {
#pragma unroll
    for (int h = 0; h < HEADS_PER_WARP; ++h) {
      const float lse = l_run[h] > 0.f ? (m_run[h] + log2f(l_run[h])) * 0.6931471805599453f : pos_inf();
      p.lse[row * H_Q + head0 + warp * HEADS_PER_WARP + h] = lse;
    }
  }
}
