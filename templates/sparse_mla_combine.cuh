// sparse_mla_combine.cuh — merges the split-KV partial results of nsajit_sparse_mla_decode (§3).
//
// For (row r, head h), over splits s with partial output o_s (already divided by the split's own
// softmax sum), base-2 lse_s (-inf when the split saw no valid token) and base-2 max m_s:
//   L = log2 sum_s 2^lse_s;  out = sum_s 2^(lse_s - L) o_s  (bf16);  lse = L * ln 2;
//   max_logits = max_s m_s * ln 2; with an attention sink (p.attn_sink[h], natural log) out is
//   scaled by 1 / (1 + exp(sink - lse)) (FlashMLA's definition; lse and max_logits unchanged).
// No valid token in any split: out 0, lse +inf, max_logits -inf. Every sum runs in a fixed order
// (a fixed shuffle tree for L, ascending splits for out), so the result is deterministic for a
// given number of splits.
// grid = (rows, h_q); NSAJIT_THREADS (128) threads, each owning 4 output dims; num_splits <= 64.
// A CTA reads only num_splits x 2 KB, so latency bounds it: every load that does not depend on another is issued before
// the first is used. Warp 0 reads the splits' lse and max (two per lane) while every thread
// already loads its dims of the first kPreload partials.
// Launched as a programmatic dependent of the split kernel on sm_90+ (families/sparse_mla/launch.cpp):
// it waits for that grid (griddepcontrol.wait, a no-op otherwise) before any memory access.
#pragma once
#include "device_common.cuh"

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS)
nsajit_sparse_mla_combine(const SparseMlaCombineParams p) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  constexpr int kPreload = 8;  // partials in flight at once per thread
  __shared__ float w_s[64];    // the splits' weights 2^(lse_s - L), 0 for an empty split
  __shared__ float total_s, mmax_s;
  const long long head = (long long)blockIdx.x * p.h_q + blockIdx.y;
  const long long stride = (long long)p.rows * p.h_q;  // between splits
  const int ns = p.num_splits;
  const float ninf = __uint_as_float(0xff800000u);
  const int d = threadIdx.x * 4;
  const float* o_head = p.o_part + head * kMlaDimV + d;

  float4 v[kPreload];
#pragma unroll
  for (int s = 0; s < kPreload; ++s)
    if (s < ns) v[s] = __ldg(reinterpret_cast<const float4*>(o_head + s * stride * kMlaDimV));

  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const bool has0 = lane < ns, has1 = lane + 32 < ns;
    const float l0 = has0 ? __ldg(p.lse_part + lane * stride + head) : ninf;
    const float l1 = has1 ? __ldg(p.lse_part + (lane + 32) * stride + head) : ninf;
    float mx = fmaxf(has0 ? __ldg(p.max_part + lane * stride + head) : ninf,
                     has1 ? __ldg(p.max_part + (lane + 32) * stride + head) : ninf);
    float lmax = fmaxf(l0, l1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      lmax = fmaxf(lmax, __shfl_xor_sync(0xffffffffu, lmax, o));
    }
    // L = log2 sum_s 2^lse_s, or -inf when every split is empty (exp2f(-inf) = 0)
    float total = ninf;
    if (lmax != ninf) {
      float sum = exp2f(l0 - lmax) + exp2f(l1 - lmax);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      total = lmax + log2f(sum);
    }
    w_s[lane] = total == ninf ? 0.f : exp2f(l0 - total);
    w_s[lane + 32] = total == ninf ? 0.f : exp2f(l1 - total);
    if (lane == 0) {
      total_s = total;
      mmax_s = mx;
    }
  }
  __syncthreads();

  const float total = total_s;
  unsigned short* out = p.out + head * kMlaDimV + d;
  if (total == ninf) {  // no valid token anywhere
    *reinterpret_cast<uint2*>(out) = make_uint2(0u, 0u);
    if (threadIdx.x == 0) {
      p.lse[head] = __uint_as_float(0x7f800000u);
      if (p.max_logits != nullptr) p.max_logits[head] = ninf;
    }
    return;
  }
  float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
  for (int s0 = 0; s0 < ns; s0 += kPreload) {
    if (s0 > 0) {
#pragma unroll
      for (int s = 0; s < kPreload; ++s)
        if (s0 + s < ns) v[s] = __ldg(reinterpret_cast<const float4*>(o_head + (s0 + s) * stride * kMlaDimV));
    }
#pragma unroll
    for (int s = 0; s < kPreload; ++s) {
      const float w = s0 + s < ns ? w_s[s0 + s] : 0.f;
      if (w == 0.f) continue;  // an empty split: its partial (0 x 0) is not used
      acc0 += w * v[s].x;
      acc1 += w * v[s].y;
      acc2 += w * v[s].z;
      acc3 += w * v[s].w;
    }
  }
  if (p.attn_sink != nullptr) {  // FlashMLA's sink: out / (1 + exp(sink - lse)); lse itself unchanged
    const float f = mla_output_scale(1.f, total, p.attn_sink + blockIdx.y);
    acc0 *= f;
    acc1 *= f;
    acc2 *= f;
    acc3 *= f;
  }
  const uint32_t lo = uint32_t(float_to_bf16(acc0)) | (uint32_t(float_to_bf16(acc1)) << 16);
  const uint32_t hi = uint32_t(float_to_bf16(acc2)) | (uint32_t(float_to_bf16(acc3)) << 16);
  *reinterpret_cast<uint2*>(out) = make_uint2(lo, hi);
  if (threadIdx.x == 0) {
    p.lse[head] = total * 0.6931471805599453f;
    if (p.max_logits != nullptr) p.max_logits[head] = mmax_s * 0.6931471805599453f;
  }
}
