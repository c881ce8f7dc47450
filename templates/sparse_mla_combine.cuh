// sparse_mla_combine.cuh — merges the split-KV partial results of nsajit_sparse_mla_decode (§3).
//
// For (row r, head h), over splits s with partial output o_s (already divided by the split's own
// softmax sum), base-2 lse_s (-inf when the split saw no valid token) and base-2 max m_s:
//   L = log2 sum_s 2^lse_s;  out = sum_s 2^(lse_s - L) o_s  (bf16);  lse = L * ln 2;
//   max_logits = max_s m_s * ln 2.
// No valid token in any split: out 0, lse +inf, max_logits -inf. The splits are summed in a fixed
// order, so the result is deterministic for a given number of splits.
// grid = (rows, h_q); NSAJIT_THREADS (128) threads, each owning 4 output dims.
// Launched as a programmatic dependent of the split kernel on sm_90+ (runtime/sparse_mla_decode.cpp):
// it waits for that grid (griddepcontrol.wait, a no-op otherwise) before any memory access.
#pragma once

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS)
nsajit_sparse_mla_combine(const SparseMlaCombineParams p) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const long long head = (long long)blockIdx.x * p.h_q + blockIdx.y;
  const long long stride = (long long)p.rows * p.h_q;  // between splits
  const int ns = p.num_splits;
  const float ninf = __uint_as_float(0xff800000u);

  float mmax = ninf;
  for (int s = 0; s < ns; ++s) mmax = fmaxf(mmax, __ldg(p.max_part + s * stride + head));
  // L = log2 sum_s 2^lse_s, or -inf when every split is empty
  float lmax = ninf;
  for (int s = 0; s < ns; ++s) lmax = fmaxf(lmax, __ldg(p.lse_part + s * stride + head));
  float total = ninf;
  if (lmax != ninf) {
    float sum = 0.f;
    for (int s = 0; s < ns; ++s) sum += exp2f(__ldg(p.lse_part + s * stride + head) - lmax);
    total = lmax + log2f(sum);
  }
  const int d = threadIdx.x * 4;
  unsigned short* out = p.out + head * 512 + d;
  if (total == ninf) {  // no valid token anywhere
    *reinterpret_cast<uint2*>(out) = make_uint2(0u, 0u);
    if (threadIdx.x == 0) {
      p.lse[head] = __uint_as_float(0x7f800000u);
      if (p.max_logits != nullptr) p.max_logits[head] = ninf;
    }
    return;
  }
  float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
  for (int s = 0; s < ns; ++s) {
    const float w = exp2f(__ldg(p.lse_part + s * stride + head) - total);  // 0 for an empty split
    if (w == 0.f) continue;  // whose partial is not read
    const float4 v = __ldg(reinterpret_cast<const float4*>(p.o_part + (s * stride + head) * 512 + d));
    acc0 += w * v.x;
    acc1 += w * v.y;
    acc2 += w * v.z;
    acc3 += w * v.w;
  }
  const uint32_t lo = uint32_t(float_to_bf16(acc0)) | (uint32_t(float_to_bf16(acc1)) << 16);
  const uint32_t hi = uint32_t(float_to_bf16(acc2)) | (uint32_t(float_to_bf16(acc3)) << 16);
  *reinterpret_cast<uint2*>(out) = make_uint2(lo, hi);
  if (threadIdx.x == 0) {
    p.lse[head] = total * 0.6931471805599453f;
    if (p.max_logits != nullptr) p.max_logits[head] = mmax * 0.6931471805599453f;
  }
}
