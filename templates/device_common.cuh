// device_common.cuh — the only device support code generated kernels use.
//
// Generated sources must compile under NVRTC with no include path, so nothing here includes a
// toolkit header: fixed-width integers, bf16 conversions and the few PTX wrappers we need are
// written out. NVRTC provides the CUDA builtins (threadIdx, __syncthreads, __shfl_*_sync,
// atomics, math functions) without includes.
#pragma once

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

#define NSAJIT_DEVICE __device__ __forceinline__

// bf16 stored as its 16 raw bits.
typedef uint16_t bf16_t;

NSAJIT_DEVICE float bf16_to_float(bf16_t v) { return __uint_as_float(uint32_t(v) << 16); }

// Round to nearest even; NaN stays NaN (quiet), inf stays inf.
NSAJIT_DEVICE bf16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t(u >> 16);
}

// Two packed bf16 (low half first in memory) to floats.
NSAJIT_DEVICE float bf16x2_lo(uint32_t v) { return __uint_as_float(v << 16); }
NSAJIT_DEVICE float bf16x2_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

struct alignas(16) u32x4 {
  uint32_t x, y, z, w;
};

// 16-byte global load that bypasses L1 allocation (streamed data).
NSAJIT_DEVICE u32x4 load_global_nc_16(const void* ptr) {
  u32x4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

NSAJIT_DEVICE float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

NSAJIT_DEVICE float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

NSAJIT_DEVICE int warp_inclusive_scan(int v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  return v;
}
