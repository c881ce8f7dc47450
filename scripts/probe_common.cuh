// probe_common.cuh: what the standalone GPU probes share (each is built alone with nvcc, as its
// header says; the kernels' own helpers live in templates/ and compile under NVRTC only).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

// Returns 1 from main with the failing call, its file and line.
#define CHECK(x)                                                                            \
  do {                                                                                      \
    cudaError_t e = (x);                                                                    \
    if (e != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

__device__ __forceinline__ unsigned long long probe_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Row gather without math: each of a grid's CTAs (kGatherThreads threads) bulk-copies its
// kGatherRowsPerCta rows (slots from `indices`, rows `stride` bytes apart, `row_bytes` each) into
// shared memory in tiles of kGatherThreads rows, thread i one copy of row i of a tile, with `depth`
// tiles in flight (the next tile waits for the oldest). Dynamic shared memory: depth x
// kGatherThreads x row_bytes rounded up to 16.
constexpr int kGatherThreads = 64, kGatherRowsPerCta = 2048, kGatherMaxDepth = 8;
__global__ void __launch_bounds__(kGatherThreads, 1) probe_gather(const unsigned char* pool, const int* indices,
                                                                  int row_bytes, long long stride, int depth,
                                                                  unsigned* sink) {
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ __align__(8) unsigned long long bars[kGatherMaxDepth];
  if (threadIdx.x < depth) {
    const uint32_t b = uint32_t(__cvta_generic_to_shared(&bars[threadIdx.x]));
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(b), "r"(unsigned(kGatherThreads)));
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const int* idx = indices + (long long)blockIdx.x * kGatherRowsPerCta;
  const int tiles = kGatherRowsPerCta / kGatherThreads;
  const unsigned slot_bytes = (unsigned(row_bytes) + 15u) & ~15u;
  for (int t = 0; t < tiles + depth; ++t) {
    if (t >= depth) {  // the oldest tile in flight must land before its buffer is refilled
      const int u = t - depth;
      const uint32_t b = uint32_t(__cvta_generic_to_shared(&bars[u % depth]));
      const uint32_t parity = uint32_t((u / depth) & 1);
      uint32_t done = 0;
      while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(b), "r"(parity)
                     : "memory");
    }
    if (t < tiles) {
      const int slot = idx[t * kGatherThreads + threadIdx.x];
      const uint32_t b = uint32_t(__cvta_generic_to_shared(&bars[t % depth]));
      const uint32_t dst =
          uint32_t(__cvta_generic_to_shared(buf + ((t % depth) * kGatherThreads + threadIdx.x) * slot_bytes));
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(unsigned(row_bytes)) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                   "l"(pool + slot * stride), "r"(unsigned(row_bytes)), "r"(b)
                   : "memory");
    }
  }
  if (threadIdx.x == 0 && buf[0] == 0xAB && buf[1] == 0xCD) sink[blockIdx.x] = 1;  // keeps the copies live
}

// Median us of 15 launches of probe_gather over `ctas` CTAs (after one untimed), each after a
// 256 MB L2 flush through `flush` and timed by CUDA events; -1 (printed) on a CUDA error.
inline float probe_time_gather(unsigned char* flush, const unsigned char* pool, const int* indices, int ctas,
                               int row_bytes, long long stride, int depth, unsigned* sink) {
  const std::size_t smem = std::size_t(depth) * kGatherThreads * ((unsigned(row_bytes) + 15u) & ~15u);
  cudaEvent_t e0, e1;
  float times[16];
  cudaError_t e = cudaFuncSetAttribute(probe_gather, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e == cudaSuccess) e = cudaEventCreate(&e0);
  if (e == cudaSuccess) e = cudaEventCreate(&e1);
  for (int it = 0; it < 16 && e == cudaSuccess; ++it) {
    e = cudaMemset(flush, it, 256 << 20);
    if (e == cudaSuccess) e = cudaEventRecord(e0);
    if (e == cudaSuccess) {
      probe_gather<<<ctas, kGatherThreads, smem>>>(pool, indices, row_bytes, stride, depth, sink);
      e = cudaEventRecord(e1);
    }
    if (e == cudaSuccess) e = cudaEventSynchronize(e1);
    if (e == cudaSuccess) e = cudaGetLastError();
    float ms = 0.f;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, e0, e1);
    times[it] = ms * 1000.f;
  }
  if (e != cudaSuccess) {
    std::fprintf(stderr, "probe_time_gather: %s\n", cudaGetErrorString(e));
    return -1.f;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(times + 1, times + 16);
  return times[1 + 7];
}
